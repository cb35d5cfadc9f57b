"""`--executor ray`: every notebook (or sweep cell) a Ray task, on this machine or a cluster.

The tasks form a graph of ObjectRefs: a task is handed the results of every task it comes after
(directly or through others), so Ray starts it when they are done and it unpacks their outputs
and LLM answers before its notebook runs (`staging.run_staged`). Independent tasks run at once,
as far as their resources (`base.resources_for`) fit the cluster. A task whose worker dies is
rerun once by Ray (`max_retries=1`); a notebook whose cell fails is rerun once inside its task
(`run_staged`). After that it is reported with its notebook's error, its dependents are
reported as blocked, and every other task goes on.

As each task finishes, the driver unpacks the files it made into its own folders and merges the
LLM answers it paid for into its own cache (`kgrag cache export` rows), so a rerun here, with
either executor, sends none of those requests again. Ray is imported only when this executor is
chosen; kgrag imports and runs without it.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any, Callable

from ..errors import BackendUnavailableError, ConfigError
from ..llm.cache import default_cache_path
from .base import NotebookTask, TaskResult, check_graph
from .staging import (StagedResult, TaskFailed, driver_env, export_bytes, import_bytes, pack_prior, read_inputs,
                      run_staged, unpack)

INSTALL_HINT = "pip install -e '.[cluster]' in the kgrag checkout (ray==2.60.0), or bash scripts/install.sh"


# Ray's own switch (read when ray is imported): "0" makes a started instance listen on loopback
LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def import_ray(local: bool = False) -> Any:
    """Ray, or a one-line error saying how to install it. `local`: Ray will start here for this
    run only, so its processes listen on 127.0.0.1 (no other node is to join)."""
    if local and "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_VAR, "0")
    try:
        import ray
    except ImportError as exc:
        raise BackendUnavailableError(f"--executor ray needs Ray, which is not installed here ({exc}); "
                                      f"{INSTALL_HINT}; or leave --executor out to run locally") from None
    return ray


def ancestors(tasks: list[NotebookTask]) -> dict[str, list[str]]:
    """Every task's direct and indirect predecessors, in list order."""
    order = {t.key: i for i, t in enumerate(tasks)}
    out: dict[str, list[str]] = {}
    for t in tasks:
        found = set(t.after)
        for a in t.after:
            found |= set(out[a])
        out[t.key] = sorted(found, key=order.__getitem__)
    return out


class RayExecutor:
    """See the module docstring. `address`: a running cluster (`ray start --head` printed it, or
    "auto"); without it a Ray instance with `num_cpus` CPUs (default: all) starts here and stops
    when the tasks are done."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus

    @staticmethod
    def check_profile(profile: dict[str, Any], where: str) -> None:
        """Refuse a profile whose `run.cache_dir` is set: the runs would open that folder's LLM
        cache instead of the task's own, and a node without it would lose what it paid for."""
        cache_dir = (profile.get("run") or {}).get("cache_dir")
        if cache_dir:
            raise ConfigError(f"{where}: run.cache_dir is {cache_dir!r}, but under --executor ray each task keeps "
                              f"its own LLM cache and ships its answers back; remove run.cache_dir and set "
                              f"$KGRAG_CACHE_DIR (or $KGRAG_LLM_CACHE) for the driver instead")

    def run(self, tasks: list[NotebookTask], on_done: Callable[[NotebookTask], None] | None = None
            ) -> dict[str, TaskResult]:
        ray = import_ray(local=not self.address)
        check_graph(tasks)
        started = self._connect(ray)
        try:
            self._check_fits(ray, tasks)
            cache = default_cache_path()
            seed, n_seed = export_bytes(cache)
            print(f"ray: {len(tasks)} tasks on {ray.cluster_resources().get('CPU', 0):g} CPUs, "
                  f"{ray.cluster_resources().get('GPU', 0):g} GPUs; each seeded with the {n_seed} answers of {cache}",
                  flush=True)
            return self._run(ray, tasks, ray.put(seed), cache, on_done)
        finally:
            if started:
                ray.shutdown()

    def _connect(self, ray: Any) -> bool:
        """Join the cluster or start Ray here; True when this call started it (and stops it)."""
        if ray.is_initialized():
            return False
        if self.address:
            _refuse_silent_address(self.address)
            try:
                ray.init(address=self.address, log_to_driver=True)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(f"--address {self.address}: no Ray cluster there ({exc}); start one with "
                                  f"`ray start --head` and pass the address it prints") from None
        else:
            ray.init(num_cpus=self.num_cpus, include_dashboard=False)
        return True

    @staticmethod
    def _check_fits(ray: Any, tasks: list[NotebookTask]) -> None:
        """Refuse a task no node can ever hold (Ray would keep it pending for good)."""
        total = ray.cluster_resources()
        for t in tasks:
            for what, need in (("CPU", t.resources.num_cpus), ("GPU", t.resources.num_gpus)):
                if need > total.get(what, 0):
                    raise ConfigError(
                        f"task {t.name} needs {need:g} {what}(s) (its model runs in-process), but the Ray cluster "
                        f"has {total.get(what, 0):g}; serve the model (vLLM, llama.cpp) and pass it as openai:<url>#"
                        f"<model>, or join a cluster that has them (--address)")

    def _run(self, ray: Any, tasks: list[NotebookTask], seed_ref: Any, cache: Path,
             on_done: Callable[[NotebookTask], None] | None) -> dict[str, TaskResult]:
        remote = ray.remote(run_staged)
        run_id = uuid.uuid4().hex[:12]
        env = driver_env()
        before = ancestors(tasks)
        refs: dict[str, Any] = {}
        for t in tasks:
            opts = {"num_cpus": t.resources.num_cpus, "num_gpus": t.resources.num_gpus, "max_retries": 1,
                    "retry_exceptions": False, "name": f"kgrag:{t.key}"}
            refs[t.key] = remote.options(**opts).remote(t, t.notebook.read_bytes(), read_inputs(t), pack_prior(t),
                                                        seed_ref, env, run_id, *[refs[a] for a in before[t.key]])
        by_key = {t.key: t for t in tasks}
        pending = {ref: key for key, ref in refs.items()}
        results: dict[str, TaskResult] = {}
        other: dict[str, str] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            key = pending.pop(done[0])
            task = by_key[key]
            try:
                staged: StagedResult = ray.get(done[0])
            except ray.exceptions.RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, TaskFailed) and cause.result.key == key:
                    results[key] = self._deliver(task, cause.result, cache, error=str(cause))
                    print(f"ray: {task.name} failed twice: {cause}", flush=True)
                else:
                    other[key] = str(cause or exc)
            except ray.exceptions.RayError as exc:   # the worker died on both attempts, or Ray lost the task
                other[key] = f"{type(exc).__name__}: {exc}"
            else:
                results[key] = self._deliver(task, staged, cache)
                if on_done:
                    on_done(task)
                retried = " (after a retry)" if staged.attempts > 1 else ""
                print(f"ray: {task.name} done in {staged.seconds} s{retried}, {staged.n_rows} new LLM answers",
                      flush=True)
        for t in tasks:   # the rest failed without running their notebook, or died twice
            if t.key in other:
                failed = [a for a in before[t.key] if a in results and not results[a].ok or a in other]
                results[t.key] = (TaskResult(t.key, blocked_by=failed[0]) if failed
                                  else TaskResult(t.key, error=other[t.key]))
        return {t.key: results[t.key] for t in tasks}

    @staticmethod
    def _deliver(task: NotebookTask, staged: StagedResult, cache: Path, error: str | None = None) -> TaskResult:
        """Unpack what the task made into the driver's folders and merge its answers into the cache."""
        unpack(staged.files.get("root", b""), task.root)
        unpack(staged.files.get("figures", b""), task.figures_root)
        import_bytes(staged.cache_rows, cache)
        return TaskResult(task.key, seconds=staged.seconds, error=error, llm_rows_added=staged.n_rows,
                          attempts=staged.attempts)


def _refuse_silent_address(address: str, timeout: float = 3.0) -> None:
    """ray.init(address=...) keeps retrying an address where nothing listens, silently and for
    minutes; a host:port where no TCP connection opens within `timeout` seconds is refused at
    once. ("auto" and addresses without a port are left to Ray.)"""
    import socket
    from urllib.parse import urlsplit

    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ConfigError(f"--address {address}: expected host:port (e.g. 10.0.0.5:6379), ray://host:port or auto") from None
    if not host or port is None:
        return
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError(f"--address {address}: nothing answers there within {timeout:g} s ({exc.strerror or exc}); "
                          f"start a cluster with `ray start --head` and pass the address it prints") from None
