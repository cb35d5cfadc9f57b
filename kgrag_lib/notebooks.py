"""Execute the study's notebooks with papermill and gather what they report.

Convention every notebook follows: a cell tagged `parameters` (papermill injects overrides
after it) with at least `profile` and `out_dir`; the notebook writes its figures to
`figures/` (under `figures_dir`) and a `summary.json` into `out_dir`: a list of flat rows
(labels + scores) that sweeps and the study table collect.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from .config import profile_label
from .errors import KgragError
from .paths import IN_CHECKOUT, PACKAGE_DIR, REPO_ROOT, data_root
from .progress import MODE_ENV, SUMMARY
from .redact import redact, refuse_secret

NOTEBOOKS_ENV = "KGRAG_NOTEBOOKS"


def notebook_dir() -> Path:
    """Where the study's notebooks are: $KGRAG_NOTEBOOKS, else the checkout's notebooks/, else
    the copy an installed package ships (kgrag_lib/study_notebooks, package data)."""
    if os.environ.get(NOTEBOOKS_ENV):
        return Path(os.environ[NOTEBOOKS_ENV]).expanduser().resolve()
    return REPO_ROOT / "notebooks" if IN_CHECKOUT else PACKAGE_DIR / "study_notebooks"


NOTEBOOK_DIR = notebook_dir()
SUMMARY_FILE = "summary.json"


def study_notebooks(directory: Path | None = None) -> list[Path]:
    """The study's notebooks in run order (their numeric prefixes)."""
    return sorted(p for p in (directory or NOTEBOOK_DIR).glob("[0-9][0-9]_*.ipynb"))


@contextlib.contextmanager
def _kernel_env(values: dict[str, str]) -> Iterator[None]:
    """The kernel papermill starts inherits our environment: set `values` for it, then restore."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def execute(notebook: str | Path, executed_path: str | Path, parameters: dict[str, Any], *,
            progress: bool = True, cwd: str | Path | None = None) -> Path:
    """Run one notebook with papermill; a failing cell raises with the notebook and cell named.

    The kernel runs with $KGRAG_PROGRESS=summary: the executed copy is a stored record, so each
    loop leaves one summary line in it instead of hundreds of redrawn bars (progress.py); machine
    paths in its outputs are then written relative (`scrub_paths`)."""
    import papermill as pm

    notebook = Path(notebook)
    if not notebook.exists():
        raise KgragError(f"notebook {notebook} not found; expected one of {[p.name for p in study_notebooks()]}")
    executed_path = Path(executed_path)
    executed_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # huggingface_hub's switch also silences transformers' "Loading weights" bars
        with _kernel_env({MODE_ENV: SUMMARY, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}):
            pm.execute_notebook(
                str(notebook), str(executed_path), parameters=parameters, progress_bar=progress,
                cwd=str(cwd or notebook.parent), kernel_name="python3", log_output=False,
            )
    except pm.PapermillExecutionError as exc:
        raise KgragError(
            f"{notebook.name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}\n"
            f"open the executed copy to see the whole trace: {executed_path}"
        ) from exc
    finally:
        if executed_path.exists():
            scrub_paths(executed_path)
    return executed_path


def machine_prefixes() -> list[tuple[str, str]]:
    """(absolute prefix, what a reader is shown instead), longest first: the data root, the
    Python environment, the repository (or working folder), the temp folder and the home folder."""
    import tempfile

    pairs: dict[str, str] = {}
    try:
        pairs[str(data_root())] = "<data root>"
    except KgragError:
        pass
    for env in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        pairs.setdefault(env, "<python env>")
    pairs.setdefault(str(REPO_ROOT), ".")
    pairs.setdefault(str(Path(tempfile.gettempdir()).resolve()), "<tmp>")
    pairs.setdefault(str(Path.home()), "~")
    for p in list(pairs):   # the same folders reached through a symlink
        real = str(Path(p).resolve())
        pairs.setdefault(real, pairs[p])
    return sorted(((p, label) for p, label in pairs.items() if len(p) > 1), key=lambda x: -len(x[0]))


def scrub_paths(executed_path: str | Path) -> int:
    """Rewrite the absolute machine paths in an executed notebook's outputs (prints, tracebacks,
    warnings, tables) as `machine_prefixes` name them; the code cells stay as they ran. Returns
    how many strings changed."""
    import nbformat

    prefixes = machine_prefixes()
    pattern = re.compile("|".join(re.escape(p) + r"(?![\w.-])" for p, _ in prefixes))
    labels = dict(prefixes)

    def fix(text: str) -> str:
        return pattern.sub(lambda m: labels[m.group(0)], text)

    nb = nbformat.read(str(executed_path), as_version=4)
    changed = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            fields = [("text", out)] if "text" in out else []
            fields += [(k, out["data"]) for k in out.get("data", {}) if k.startswith("text/")]
            for key, holder in fields:
                value = holder[key]
                new = fix("".join(value) if isinstance(value, list) else value)
                if new != ("".join(value) if isinstance(value, list) else value):
                    holder[key], changed = new, changed + 1
            if "traceback" in out:
                new_tb = [fix(line) for line in out["traceback"]]
                changed += new_tb != out["traceback"]
                out["traceback"] = new_tb
    if changed:
        nbformat.write(nb, str(executed_path))
    return changed


def export_html(executed_path: str | Path) -> Path:
    """The executed notebook as one HTML file beside it (nbconvert): what many readers open first."""
    import nbformat
    from nbconvert import HTMLExporter

    executed_path = Path(executed_path)
    body, _ = HTMLExporter().from_notebook_node(nbformat.read(str(executed_path), as_version=4))
    html = executed_path.with_suffix(".html")
    html.write_text(body, encoding="utf-8")
    return html


def _param_path(target: Path, cwd: Path) -> str:
    """A notebook parameter naming `target` relative to the kernel's folder when both lie in the
    same results tree or repository (the executed copy then shows and reruns with it), else absolute."""
    for base in (cwd.parent, REPO_ROOT):
        try:
            target.relative_to(base)
            cwd.relative_to(base)
        except ValueError:
            continue
        return os.path.relpath(target, cwd)
    return str(target)


def effective_profile(profile: str | Path, run_overrides: dict[str, Any], path: Path, name: str | None = None) -> Path:
    """`profile` with its `run` section overridden, checked, and written as YAML to `path`; `name`
    (the study's label) names the figures folder the notebooks write to."""
    import yaml

    from .studies import load_profile

    refuse_secret(run_overrides, "kgrag study", path)
    prof = load_profile(profile)
    if name:
        prof["name"] = name
    prof["run"] = {**(prof.get("run") or {}), **run_overrides}
    if run_overrides.get("model"):
        prof.pop("models", None)   # one model for every family: the profile's per-family choices would win
    if run_overrides.get("embedder"):
        prof.pop("embedders", None)   # likewise one embedder for every family
    load_profile(dict(prof))  # refuse a bad override here, not in the first notebook
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(prof, sort_keys=False), encoding="utf-8")
    return path


def read_summary(out_dir: str | Path) -> list[dict[str, Any]]:
    p = Path(out_dir) / SUMMARY_FILE
    if not p.exists():
        return []
    data = json.loads(p.read_text(encoding="utf-8"))
    return data if isinstance(data, list) else [data]


def write_summary(out_dir: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Called from notebooks: the rows a sweep or the study table will collect (a token in a
    server spec among them redacted)."""
    p = Path(out_dir)
    p.mkdir(parents=True, exist_ok=True)
    tmp = p / (SUMMARY_FILE + ".tmp")
    tmp.write_text(json.dumps(redact(rows), indent=2, default=str), encoding="utf-8")
    tmp.replace(p / SUMMARY_FILE)
    return p / SUMMARY_FILE


def run_study(profile: str = "cpu-smoke", out_root: str | Path | None = None, only: list[str] | None = None,
              progress: bool = True, extra: dict[str, Any] | None = None,
              run_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Execute every study notebook in order; return the results folder, per-notebook wall time
    and summary rows. `run_overrides` (e.g. concurrency) change the profile's `run` section for
    every notebook: the effective profile is written to `<out_root>/profile.yaml` and passed to
    the notebooks, so their executed copies name the file that holds their settings."""
    label = profile_label(profile)
    out_root = Path(out_root or REPO_ROOT / "results" / label).resolve()  # notebooks run in notebooks/
    given = {k: v for k, v in (run_overrides or {}).items() if v is not None}
    if given or label != Path(str(profile)).stem:   # overrides, or a profile file of the user's
        profile = str(effective_profile(profile, given, out_root / "profile.yaml", name=label))
    books = study_notebooks()
    if only:
        books = [b for b in books if any(b.stem.startswith(o) or b.name == o for o in only)]
        if not books:
            raise KgragError(f"no notebook matches {only}; have {[b.name for b in study_notebooks()]}")
    report: dict[str, Any] = {"profile": profile, "out_root": out_root, "notebooks": []}
    # The kernel runs where the executed copy lives, with paths relative to it: the copy shows no
    # machine path and reruns as it is when opened in JupyterLab.
    run_dir = out_root / "executed"
    run_dir.mkdir(parents=True, exist_ok=True)
    shown_profile = _param_path(Path(profile), run_dir) if Path(str(profile)).is_file() else profile
    for i, nb in enumerate(books, 1):
        out_dir = out_root / nb.stem
        print(f"[{i}/{len(books)}] {nb.name} (profile {profile}) -> {run_dir / nb.name}", flush=True)
        t0 = time.perf_counter()
        params = {"profile": shown_profile, "out_dir": _param_path(out_dir, run_dir), **(extra or {})}
        executed = execute(nb, run_dir / nb.name, params, progress=progress, cwd=run_dir)
        secs = round(time.perf_counter() - t0, 1)
        html = export_html(executed) if executed else None
        rows = read_summary(out_dir)
        report["notebooks"].append({"notebook": nb.name, "seconds": secs, "rows": rows,
                                    "html": str(html) if html else None})
        print(f"    done in {secs} s, {len(rows)} result rows" + (f"; {html.name}" if html else ""), flush=True)
    return report
