"""Where the study's notebooks and a sweep's cells execute: here one after another (`local`, the
default) or as Ray tasks on one machine or a cluster (`ray`). Both take the same list of
`NotebookTask`s and return one `TaskResult` per task; see `base`."""

from __future__ import annotations

from typing import Any

from ..errors import BackendUnavailableError, ConfigError
from .base import Executor

EXECUTORS = ("local", "ray")
NOTEBOOK_TOOLS = ("papermill", "ipykernel", "nbformat")


def require_notebook_tools(command: str) -> None:
    """Refuse before anything runs when the `notebooks` extra is missing (the `gpu` extra alone has no
    papermill), naming the extra to install."""
    import importlib.util

    missing = [m for m in NOTEBOOK_TOOLS if importlib.util.find_spec(m) is None]
    if missing:
        raise BackendUnavailableError(
            f"{command} executes notebooks with papermill and needs {', '.join(missing)}, which the `notebooks` "
            "extra installs: pip install -e \".[notebooks]\" in the kgrag checkout (a GPU machine: "
            "pip install -e \".[gpu,notebooks]\")")


def make_executor(name: str, *, address: str | None = None, num_cpus: int | None = None,
                  progress: bool = True) -> Executor:
    """`local` or `ray` (Ray is imported only here, and only for `ray`)."""
    if name == "local":
        if address:
            raise ConfigError("--address names a Ray cluster; it needs --executor ray")
        from .local import LocalExecutor

        return LocalExecutor(progress=progress)
    if name == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(address=address, num_cpus=num_cpus)
    raise ConfigError(f"--executor {name!r}: expected one of {', '.join(EXECUTORS)}")


def add_arguments(p: Any) -> None:
    """The executor options `kgrag study` and `kgrag sweep` share."""
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="local: one notebook after another in this process tree (default); ray: each notebook "
                        "(or cell) a Ray task, on this machine or the cluster of --address (docs/CLUSTER.md)")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join, e.g. 10.0.0.5:6379 or auto (default: start Ray on this machine)")
    p.add_argument("--num-cpus", type=int, default=None,
                   help="CPUs of the Ray instance started on this machine (default: all); ignored with --address")
