"""Where data, caches and runs live.

Real datasets are read in place, never copied: the data root comes from an explicit
argument (config, `--data-root`), else the `KGRAG_DATA_ROOT` environment variable, else
`../shared/data` beside a source checkout when that folder exists, else the per-user data
folder (`$XDG_DATA_HOME/kgrag/data`, by default `~/.local/share/kgrag/data`) that `kgrag data
fetch` fills: a clone on a machine without `../shared` and an installed package both land there.
An installed package (`pip install .`, a wheel) has no checkout beside it: results, figures and
caches go under the current folder (`REPO_ROOT` is then the working directory), never into
site-packages.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator


PACKAGE_DIR = Path(__file__).resolve().parent
DATA_ROOT_ENV = "KGRAG_DATA_ROOT"


def _checkout(root: Path) -> bool:
    """Is `root` the source tree this package was imported from (editable install, PYTHONPATH)?"""
    return (root / "pyproject.toml").is_file() and (root / "notebooks").is_dir()


IN_CHECKOUT = _checkout(PACKAGE_DIR.parent)
# The source checkout; for an installed package, the folder kgrag was started in.
REPO_ROOT = PACKAGE_DIR.parent if IN_CHECKOUT else Path.cwd().resolve()


def user_data_dir() -> Path:
    """The per-user data folder `kgrag data fetch` fills when no other root is given:
    $XDG_DATA_HOME/kgrag/data, by default ~/.local/share/kgrag/data (the XDG rule, by hand: no dependency)."""
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg and Path(xdg).expanduser().is_absolute() else Path.home() / ".local" / "share"
    return (base / "kgrag" / "data").resolve()


def shared_data_dir() -> Path | None:
    """`../shared/data` beside a source checkout, when it is there."""
    shared = REPO_ROOT.parent / "shared" / "data"
    return shared.resolve() if IN_CHECKOUT and shared.is_dir() else None


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the data root: argument (config, --data-root), then $KGRAG_DATA_ROOT, then
    ../shared/data beside a source checkout when it exists, then the per-user data folder."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return shared_data_dir() or user_data_dir()


def data_root_origin(explicit: str | os.PathLike | None = None) -> str:
    """Which rule chose `data_root(explicit)`, in words (for messages that say where data went)."""
    if explicit:
        return "given by configuration or --data-root/--root"
    if os.environ.get(DATA_ROOT_ENV):
        return f"${DATA_ROOT_ENV}"
    return "../shared/data beside the checkout" if shared_data_dir() else "the per-user data folder"


def shown_path(path: str | os.PathLike) -> str:
    """`path` as a reader of an executed notebook or a log should see it: relative to the
    repository (or the working folder), `<data root>/...` under the data root, `~/...` under
    the home folder; never the machine's absolute path where a shorter name exists."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        return str(p)
    p = p.resolve()
    try:
        root = data_root()
    except Exception:   # no data root configured: nothing to name relative to it
        root = None
    cwd = Path.cwd().resolve()
    if len(cwd.parents) >= 2 and p.is_relative_to(cwd.parent) and not (root and p.is_relative_to(root)):
        return os.path.relpath(p, cwd)   # a sibling of the working folder (a notebook's outputs beside executed/)
    for base, label in ((root, "<data root>"), (REPO_ROOT, None), (cwd, None), (Path.home().resolve(), "~")):
        if base is None:
            continue
        try:
            rel = p.relative_to(base)
        except ValueError:
            continue
        return str(Path(label) / rel) if label else (str(rel) or ".")
    return str(p)


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
