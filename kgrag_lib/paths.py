"""Where data, caches and runs live.

Real datasets are read in place, never copied: the data root comes from an explicit
argument (config), else the `KGRAG_DATA_ROOT` environment variable, else `../shared/data`
beside the repository.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the data root: argument, then $KGRAG_DATA_ROOT, then ../shared/data."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    env = os.environ.get("KGRAG_DATA_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    return (REPO_ROOT.parent / "shared" / "data").resolve()


_SCOPED: list[Path] = []  # cache folders of the runs loading models now (innermost last)


@contextlib.contextmanager
def cache_dir_scope(explicit: str | os.PathLike | None) -> Iterator[None]:
    """Within it, `cache_dir()` without an argument is `explicit` (when given): a run's
    `--cache-dir` then also holds what is made deep below it without being handed the folder
    (the assembled embedded model and its hashes, GGUF -> HF conversions)."""
    if not explicit:
        yield
        return
    _SCOPED.append(Path(explicit).expanduser())
    try:
        yield
    finally:
        _SCOPED.pop()


def cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the cache folder (LLM calls, embeddings, built KGs, assembled models): argument,
    the enclosing `cache_dir_scope`, $KGRAG_CACHE_DIR, .cache/."""
    if explicit:
        p = Path(explicit).expanduser()
    elif _SCOPED:
        p = _SCOPED[-1]
    elif os.environ.get("KGRAG_CACHE_DIR"):
        p = Path(os.environ["KGRAG_CACHE_DIR"]).expanduser()
    else:
        p = REPO_ROOT / ".cache"
    p.mkdir(parents=True, exist_ok=True)
    return p.resolve()
