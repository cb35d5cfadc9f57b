"""Run one notebook with papermill (the one step every executor performs, wherever it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import KgragError


class NotebookError(KgragError):
    """A cell of an executed notebook raised: the message names the notebook, the cell and the
    executed copy that holds the whole trace."""


def execute(notebook: str | Path, executed_path: str | Path, parameters: dict[str, Any], *,
            progress: bool = True, cwd: str | Path | None = None) -> Path:
    """Run one notebook with papermill; a failing cell raises with the notebook and cell named."""
    import papermill as pm

    notebook = Path(notebook)
    if not notebook.exists():
        known = sorted(p.name for p in notebook.parent.glob("[0-9][0-9]_*.ipynb"))
        raise KgragError(f"notebook {notebook} not found; expected one of {known}")
    executed_path = Path(executed_path)
    executed_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(
            str(notebook), str(executed_path), parameters=parameters, progress_bar=progress,
            cwd=str(cwd or notebook.parent), kernel_name="python3", log_output=False,
        )
    except pm.PapermillExecutionError as exc:
        raise NotebookError(
            f"{notebook.name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}\n"
            f"open the executed copy to see the whole trace: {executed_path}"
        ) from exc
    return executed_path
