"""Where data, caches and runs live.

Real datasets are read in place, never copied: the data root comes from an explicit
argument (config), else the `KGRAG_DATA_ROOT` environment variable, else `../shared/data`
beside the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the data root: argument, then $KGRAG_DATA_ROOT, then ../shared/data."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    env = os.environ.get("KGRAG_DATA_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    return (REPO_ROOT.parent / "shared" / "data").resolve()


def cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the cache folder (LLM calls, embeddings, built KGs): argument, $KGRAG_CACHE_DIR, .cache/."""
    if explicit:
        p = Path(explicit).expanduser()
    elif os.environ.get("KGRAG_CACHE_DIR"):
        p = Path(os.environ["KGRAG_CACHE_DIR"]).expanduser()
    else:
        p = REPO_ROOT / ".cache"
    p.mkdir(parents=True, exist_ok=True)
    return p.resolve()
