"""Run one notebook with papermill (the one step every executor performs, wherever it runs), and
make its executed copy readable: one progress summary per loop, no machine paths, an HTML copy."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator

from ..errors import KgragError
from ..paths import REPO_ROOT, data_root
from ..progress import MODE_ENV, SUMMARY


class NotebookError(KgragError):
    """A cell of an executed notebook raised: the message names the notebook, the cell and the
    executed copy that holds the whole trace."""


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
        known = sorted(p.name for p in notebook.parent.glob("[0-9][0-9]_*.ipynb"))
        raise KgragError(f"notebook {notebook} not found; expected one of {known}")
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
        raise NotebookError(
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


def param_path(target: Path, cwd: Path) -> str:
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
