"""The default executor: the tasks one after another in this process tree, each writing straight
into the driver's folders (what `kgrag study` and `kgrag sweep` always did). A notebook whose cell
fails is reported (its error names the executed copy) and the tasks that need it are skipped as
blocked; the others go on, as under the Ray executor, so one failure late in an hour's study
does not leave the notebooks after it unrun."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable
from unittest import mock

from .base import NotebookTask, TaskResult, check_graph
from .execute import NotebookError, execute, param_path


class LocalExecutor:
    def __init__(self, progress: bool = True, run: Callable[..., Any] = execute) -> None:
        self.progress = progress
        self._execute = run   # `execute`, or the module-level name a caller resolves (tests replace it)

    def run(self, tasks: list[NotebookTask], on_done: Callable[[NotebookTask], None] | None = None
            ) -> dict[str, TaskResult]:
        check_graph(tasks)   # the list order is the run order; it already respects every `after`
        results: dict[str, TaskResult] = {}
        for i, task in enumerate(tasks, 1):
            blocked = next((a for a in task.after if not results[a].ok), None)
            if blocked is not None:
                results[task.key] = TaskResult(task.key, blocked_by=blocked)
                print(f"[{i}/{len(tasks)}] {task.name}: not run, it needs {blocked}, which did not finish", flush=True)
                continue
            print(f"[{i}/{len(tasks)}] {task.name} -> {task.executed}", flush=True)
            t0 = time.perf_counter()
            # the kernel inherits our environment: the task's figures go under its figures root
            try:
                with mock.patch.dict(os.environ, {"KGRAG_FIGURES_DIR": str(task.figures_root)}):
                    params, cwd = self.relative(task)
                    self._execute(task.notebook, task.executed, params, progress=self.progress, cwd=cwd)
            except NotebookError as exc:   # a cell failed: said now and at the end; the rest go on
                results[task.key] = TaskResult(task.key, seconds=round(time.perf_counter() - t0, 1), error=str(exc))
                print(f"    FAILED: {exc}", flush=True)
                continue
            secs = round(time.perf_counter() - t0, 1)
            results[task.key] = TaskResult(task.key, seconds=secs)
            print(f"    done in {secs} s", flush=True)
            if on_done:
                on_done(task)
        return results

    @staticmethod
    def relative(task: NotebookTask) -> tuple[dict[str, Any], Path]:
        """The parameters and kernel folder of a local run: the kernel runs where the executed copy
        lies, with `out_dir` (and a profile file) relative to it, so the copy shows no machine path
        and reruns as it is when opened in JupyterLab."""
        cwd = Path(task.executed).parent
        cwd.mkdir(parents=True, exist_ok=True)
        params = {**task.parameters, "out_dir": param_path(Path(task.out_dir), cwd)}
        prof = params.get("profile")
        if isinstance(prof, str) and prof.endswith((".yaml", ".yml")) and Path(prof).is_file():
            params["profile"] = param_path(Path(prof).resolve(), cwd)
        return params, cwd
