"""What an executor is handed (`NotebookTask`: one notebook execution and what it needs), what
it gives back (`TaskResult`), and the resources a task asks for (`resources_for`).

A task names the driver's folders it writes: `root` (everything the notebook writes lands under
it: the study's results folder, or a sweep cell's folder), its `out_dir` and `executed` copy
inside `root`, and `figures_root` (the `$KGRAG_FIGURES_DIR` its figures go under). The local
executor writes there directly; the Ray executor writes into a scratch copy on the worker and
ships the new files back (`staging`), so both leave the same files on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from ..errors import ConfigError
from ..llm import MANAGED_PREFIXES, PRESETS, is_server_spec

@dataclass(frozen=True)
class Resources:
    """What one task holds while it runs (Ray's `num_cpus` / `num_gpus`)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0


@dataclass
class NotebookTask:
    """One notebook execution: a study notebook or one sweep cell."""

    key: str                              # unique among the tasks of one call, e.g. "21_kg_infused_main"
    notebook: Path
    root: Path                            # the driver folder the task writes under
    out_dir: Path                         # the notebook's `out_dir` parameter (inside root)
    executed: Path                        # the executed copy (inside root)
    parameters: dict[str, Any]            # papermill parameters other than out_dir
    figures_root: Path                    # $KGRAG_FIGURES_DIR of the kernel
    after: tuple[str, ...] = ()           # keys of the tasks whose outputs this one reads
    resources: Resources = field(default_factory=Resources)
    label: str = ""                       # what progress lines call it (default: the key)

    @property
    def name(self) -> str:
        return self.label or self.key


@dataclass
class TaskResult:
    """How one task ended. `error` is the notebook's own message (after the one retry);
    `blocked_by` names the failed task it needed, when it never ran."""

    key: str
    seconds: float = 0.0
    error: str | None = None
    blocked_by: str | None = None
    llm_rows_added: int = 0               # cache rows the task shipped back (Ray only)
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None and self.blocked_by is None


class Executor(Protocol):
    def run(self, tasks: list[NotebookTask], on_done: Callable[[NotebookTask], None] | None = None
            ) -> dict[str, TaskResult]:
        """Execute `tasks` (each after the tasks in its `after`), calling `on_done(task)` on the
        driver as each one succeeds (its files are in place by then); one result per task key."""


def check_graph(tasks: list[NotebookTask]) -> None:
    """Refuse duplicate keys and an `after` that names no task of the list or comes later in it
    (the list order is a valid run order, so the graph has no cycle)."""
    seen: set[str] = set()
    for t in tasks:
        if t.key in seen:
            raise ConfigError(f"two tasks share the key {t.key!r}; each notebook or cell must be named once")
        missing = [a for a in t.after if a not in seen]
        if missing:
            raise ConfigError(f"task {t.key!r} must run after {missing}, which are not among the tasks before it")
        seen.add(t.key)


def resources_for(model: str | None) -> Resources:
    """A task's resources from the LLM spec its notebook loads: a model kgrag talks to over HTTP
    (openai:, vllm:, ollama:) costs the task one CPU and no GPU; one that runs in the task's
    process tree on a GPU (hf:, a preset that needs a GPU, a `vllm-serve:` it starts) holds one
    GPU; an in-process CPU model (llama.cpp: a GGUF, a CPU preset, a llama.cpp server it starts)
    holds two CPUs, since its generation threads use them. No model (None): one CPU."""
    if not model:
        return Resources()
    spec = model.strip()
    if spec.startswith("vllm-serve:"):
        return Resources(num_cpus=1, num_gpus=1)
    if is_server_spec(spec) and not spec.startswith(MANAGED_PREFIXES):
        return Resources(num_cpus=1, num_gpus=0)
    if spec in PRESETS:
        preset = PRESETS[spec]
        return Resources(num_cpus=1, num_gpus=1) if preset.needs_gpu else Resources(num_cpus=2)
    if spec.startswith("hf:"):
        return Resources(num_cpus=1, num_gpus=1)
    return Resources(num_cpus=2)
