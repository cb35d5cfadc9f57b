"""Execute the study's notebooks with papermill and gather what they report.

Convention every notebook follows: a cell tagged `parameters` (papermill injects overrides
after it) with at least `profile` and `out_dir`; the notebook writes its figures to
`figures/` (under `figures_dir`) and a `summary.json` into `out_dir`: a list of flat rows
(labels + scores) that sweeps and the study table collect.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .config import profile_label
from .errors import KgragError
from .paths import REPO_ROOT
from .redact import redact, refuse_secret

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
SUMMARY_FILE = "summary.json"


def study_notebooks(directory: Path = NOTEBOOK_DIR) -> list[Path]:
    """The study's notebooks in run order (their numeric prefixes)."""
    return sorted(p for p in directory.glob("[0-9][0-9]_*.ipynb"))


def execute(notebook: str | Path, executed_path: str | Path, parameters: dict[str, Any], *,
            progress: bool = True, cwd: str | Path | None = None) -> Path:
    """Run one notebook with papermill; a failing cell raises with the notebook and cell named."""
    import papermill as pm

    notebook = Path(notebook)
    if not notebook.exists():
        raise KgragError(f"notebook {notebook} not found; expected one of {[p.name for p in study_notebooks()]}")
    executed_path = Path(executed_path)
    executed_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(
            str(notebook), str(executed_path), parameters=parameters, progress_bar=progress,
            cwd=str(cwd or notebook.parent), kernel_name="python3", log_output=False,
        )
    except pm.PapermillExecutionError as exc:
        raise KgragError(
            f"{notebook.name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}\n"
            f"open the executed copy to see the whole trace: {executed_path}"
        ) from exc
    return executed_path


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
    for i, nb in enumerate(books, 1):
        out_dir = out_root / nb.stem
        print(f"[{i}/{len(books)}] {nb.name} (profile {profile}) -> {out_root / 'executed' / nb.name}", flush=True)
        t0 = time.perf_counter()
        params = {"profile": profile, "out_dir": str(out_dir), **(extra or {})}
        execute(nb, out_root / "executed" / nb.name, params, progress=progress)
        secs = round(time.perf_counter() - t0, 1)
        rows = read_summary(out_dir)
        report["notebooks"].append({"notebook": nb.name, "seconds": secs, "rows": rows})
        print(f"    done in {secs} s, {len(rows)} result rows", flush=True)
    return report
