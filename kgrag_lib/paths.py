"""Where data, caches and runs live.

Real datasets are read in place, never copied: the data root comes from an explicit
argument (config, `--data-root`), else the `KGRAG_DATA_ROOT` environment variable, else
`../shared/data` beside a source checkout. An installed package (`pip install .`, a wheel)
has no checkout beside it: there the variable (or the flag) is required, and results,
figures and caches go under the current folder (`REPO_ROOT` is then the working directory),
never into site-packages.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from .errors import ConfigError

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_ROOT_ENV = "KGRAG_DATA_ROOT"


def _checkout(root: Path) -> bool:
    """Is `root` the source tree this package was imported from (editable install, PYTHONPATH)?"""
    return (root / "pyproject.toml").is_file() and (root / "notebooks").is_dir()


IN_CHECKOUT = _checkout(PACKAGE_DIR.parent)
# The source checkout; for an installed package, the folder kgrag was started in.
REPO_ROOT = PACKAGE_DIR.parent if IN_CHECKOUT else Path.cwd().resolve()


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the data root: argument, then $KGRAG_DATA_ROOT, then ../shared/data beside a
    source checkout (an installed package has none: it asks for the variable)."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return Path(env).expanduser().resolve()
    if not IN_CHECKOUT:
        raise ConfigError(f"no data root: kgrag is installed as a package ({PACKAGE_DIR}), with no source checkout "
                          f"and no ../shared/data beside it; set ${DATA_ROOT_ENV}=<folder holding metaqa/, hotpotqa/, ...> "
                          "or pass --data-root <folder>")
    return (REPO_ROOT.parent / "shared" / "data").resolve()


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
