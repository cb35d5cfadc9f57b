"""One task on a worker that may share no folder with the driver: a scratch copy of the driver's
folders, a private LLM cache seeded with the driver's answers, and the bytes that go back.

Layout of the scratch folder (`<tmp>/kgrag-ray/<run id>/<task key>/`):

    notebook/<name>.ipynb   the notebook, shipped as bytes (the node may keep the repo elsewhere)
    root/                   stands for the task's `root` on the driver (study results folder or
                            sweep cell folder): the outputs of the tasks it comes after are
                            unpacked here first, so a notebook that reads them finds them
    figures/                stands for the driver's figures root ($KGRAG_FIGURES_DIR)
    inputs/                 a profile file named by path that lies outside `root`
    llm_cache.sqlite        this task's LLM cache (beside the scratch folder, see `task_cache_path`)

What goes back (`StagedResult`) is every file under root/ and figures/ that the notebook created
or changed (a tar per folder), and the cache rows it added, in the format of `kgrag cache
export`. The driver unpacks both into its own folders and cache, so nothing the task paid for
stays behind on the node.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from ..errors import KgragError
from ..llm.cache import export_cache, import_cache
from .base import NotebookTask
from .execute import NotebookError, execute

# variables of the driver a task must see although its node was started without them; the
# two below are set per task instead
_OWN_VARS = ("KGRAG_LLM_CACHE", "KGRAG_FIGURES_DIR")


@dataclass
class StagedResult:
    """What a task ships back to the driver."""

    key: str
    files: dict[str, bytes] = field(default_factory=dict)   # "root" / "figures" -> tar.gz bytes
    cache_rows: bytes = b""                                  # gzip JSON lines (`kgrag cache export`)
    n_rows: int = 0
    seconds: float = 0.0
    attempts: int = 1
    error: str | None = None


class TaskFailed(KgragError):
    """A task whose notebook failed twice; it still carries what the task made (the executed
    copy with the trace, the answers it paid for) so the driver keeps them."""

    def __init__(self, message: str, result: StagedResult) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self):   # Ray pickles the exception with its payload
        return (TaskFailed, (str(self), self.result))


def driver_env() -> dict[str, str]:
    """The driver's KGRAG_* settings (data root, cache folder, server token) a task gets."""
    return {k: v for k, v in os.environ.items() if k.startswith("KGRAG_") and k not in _OWN_VARS}


def export_bytes(cache: Path, exclude_keys: set[str] | None = None) -> tuple[bytes, int]:
    """The rows of `cache` (less `exclude_keys`) as `kgrag cache export` writes them."""
    if not cache.exists():
        return b"", 0
    with tempfile.TemporaryDirectory(prefix="kgrag-export-") as tmp:
        dest = Path(tmp) / "rows.jsonl.gz"
        n = export_cache(dest, cache, exclude_keys=exclude_keys)
        return dest.read_bytes(), n


def import_bytes(rows: bytes, cache: Path) -> int:
    """Merge export bytes into `cache` (rows already there are kept); the rows added."""
    if not rows:
        return 0
    with tempfile.TemporaryDirectory(prefix="kgrag-import-") as tmp:
        src = Path(tmp) / "rows.jsonl.gz"
        src.write_bytes(rows)
        added, _refused = import_cache(src, cache)
        return added


def keys_of(rows: bytes) -> set[str]:
    """The request keys in export bytes."""
    if not rows:
        return set()
    with gzip.open(io.BytesIO(rows), "rt", encoding="utf-8") as f:
        return {json.loads(line)["key"] for line in f if line.strip()}


def pack(folder: Path, before: dict[str, tuple[int, int]]) -> bytes:
    """A tar.gz of the files under `folder` that are not in the snapshot `before` or changed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, stamp in sorted(snapshot(folder).items()):
            if before.get(rel) != stamp:
                tar.add(folder / rel, arcname=rel, recursive=False)
    return buf.getvalue()


def pack_prior(task: NotebookTask) -> bytes:
    """The task's own output folder as the driver holds it from an earlier run (empty when there
    is none), so its runs resume on the worker as they would here."""
    folder = Path(task.out_dir)
    if not folder.is_dir():
        return b""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                tar.add(p, arcname=str(p.relative_to(task.root)), recursive=False)
    return buf.getvalue()


def unpack(data: bytes, dest: Path) -> list[Path]:
    """Extract a `pack` archive into `dest` (no path may leave it); the files written."""
    if not data:
        return []
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        tar.extractall(dest, filter="data")
    return [dest / n for n in names]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def task_cache_path(run_id: str, key: str) -> Path:
    """The task's LLM cache on this node. Its name is fixed per run and task, so when Ray
    reruns a task whose worker died, the rerun on the same node finds the answers the dead
    attempt already paid for."""
    return Path(tempfile.gettempdir()) / "kgrag-ray" / run_id / f"{_safe(key)}.llm_cache.sqlite"


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "=._-" else "-" for c in key)[:150]


def _place(path: Path, task: NotebookTask, scratch: Path) -> Path:
    """Where a driver path inside the task's root or figures root lies in the scratch folder."""
    for base, name in ((task.root, "root"), (task.figures_root, "figures")):
        try:
            return scratch / name / Path(path).resolve().relative_to(Path(base).resolve())
        except ValueError:
            continue
    raise KgragError(f"task {task.key}: {path} lies outside its folder {task.root}; an executor can only ship "
                     f"back what a task writes under its root")


def run_staged(task: NotebookTask, notebook_bytes: bytes, inputs: dict[str, bytes], prior: bytes, seed: bytes,
               env: dict[str, str], run_id: str, *ancestors: StagedResult) -> StagedResult:
    """Execute `task` in a scratch folder (see the module docstring): the outputs and cache rows of
    `ancestors` and the task's own earlier outputs (`prior`) first, then the notebook, retried once in place when a cell fails (the retry
    reuses every answer the first attempt got). Raises TaskFailed after the second failure."""
    cache = task_cache_path(run_id, task.key)
    scratch = cache.with_name(_safe(task.key) + ".scratch")
    shutil.rmtree(scratch, ignore_errors=True)   # a rerun after a dead worker starts from clean folders
    (scratch / "root").mkdir(parents=True)
    (scratch / "figures").mkdir(parents=True)
    for a in ancestors:
        unpack(a.files.get("root", b""), scratch / "root")
        unpack(a.files.get("figures", b""), scratch / "figures")
    unpack(prior, scratch / "root")
    # what the driver knows already; rows a dead earlier attempt left in the file are not in it,
    # so they go back with this attempt's own
    seeded: set[str] = set()
    for rows in (seed, *(a.cache_rows for a in ancestors)):
        import_bytes(rows, cache)
        seeded |= keys_of(rows)
    nb = scratch / "notebook" / task.notebook.name
    nb.parent.mkdir(parents=True)
    nb.write_bytes(notebook_bytes)
    params = dict(task.parameters)
    for name, data in inputs.items():   # a profile file: where the notebook will look for it
        where = _input_place(Path(params[name]), task, scratch)
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(data)
        params[name] = str(where)
    before = {name: snapshot(scratch / name) for name in ("root", "figures")}
    kernel_env = {**env, "KGRAG_LLM_CACHE": str(cache), "KGRAG_FIGURES_DIR": str(scratch / "figures")}
    params["out_dir"] = str(_place(task.out_dir, task, scratch))
    executed = _place(task.executed, task, scratch)
    t0 = time.perf_counter()
    error, attempts = None, 0
    with mock.patch.dict(os.environ, kernel_env):
        for attempts in (1, 2):
            try:
                execute(nb, executed, params, progress=False, cwd=nb.parent)
                error = None
                break
            except NotebookError as exc:   # named as the driver will find it, once shipped back
                error = str(exc).replace(str(executed), str(task.executed))
    rows, n = export_bytes(cache, exclude_keys=seeded)
    result = StagedResult(task.key, {name: pack(scratch / name, before[name]) for name in ("root", "figures")},
                          rows, n, round(time.perf_counter() - t0, 1), attempts, error)
    shutil.rmtree(scratch, ignore_errors=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache}{suffix}").unlink(missing_ok=True)
    if error is not None:
        raise TaskFailed(error, result)
    return result


def _input_place(path: Path, task: NotebookTask, scratch: Path) -> Path:
    try:
        return _place(path, task, scratch)
    except KgragError:
        return scratch / "inputs" / path.name


def read_inputs(task: NotebookTask, names: tuple[str, ...] = ("profile",)) -> dict[str, bytes]:
    """The files among the task's parameters (a profile given as a path) that the worker needs."""
    out: dict[str, bytes] = {}
    for name in names:
        value = task.parameters.get(name)
        if isinstance(value, str) and value.endswith((".yaml", ".yml")) and Path(value).is_file():
            out[name] = Path(value).read_bytes()
    return out
