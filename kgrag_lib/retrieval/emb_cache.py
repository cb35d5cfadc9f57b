"""On-disk embedding cache: each (model, texts, normalization) is encoded once.

A corpus such as the 133k MetaQA triples takes minutes to embed on a CPU, Wikipedia's 21M
passages GPU-hours; every later process (a sweep, a notebook rerun) memory-maps the stored .npy
instead. Files are written to `<final>.partial.npy` in blocks and renamed, under a file lock, so
concurrent or interrupted runs never leave a half-written array under the final name, and a
killed run resumes at its last finished block.

Keys: a small list of texts is keyed by a hash over all of them (`texts_digest`); at scale the
caller passes `key=` (what identifies the texts, e.g. a passage store's fingerprint plus the text
form) and a lazily iterated text source (anything with `__len__` and `iter_texts(block, start,
stop)`, see `BlockTexts`), so no text is read unless it must be encoded.

Checks: rows are checked as they are encoded (finite; unit length when normalized); the file's
`.json` beside it records a crc32 of every `BLOCK` rows (what shards are merged by) and of every
64 KiB of the file (`blocksums`). Opening a stored file checks its header and exact size, then
every block of a file up to `FULL_CHECK_BYTES` (or any with `verify="full"`); a larger one gets
its first, last and `SAMPLE_BLOCKS` random blocks checked on open and every other block the first
time a row read touches it (`CheckedRows`), so a run that only re-ranks a few rows of Wikipedia's
64 GB never hashes the rest (bench/blocksums_bench.py measures both). A file with only the row
record (written before byte records) is checked against it in full once and gets the byte record;
a file with no record is refused, as the other stores refuse theirs. A file that fails on open is
named in a warning and recomputed, never used; a block that fails on a later read is refused in
one line naming the file and the block.

Sharding: `embed_cached(..., shard=(i, n))` encodes rows [i*N/n, (i+1)*N/n) into its own
resumable file; whichever call finds all n shards done merges them into the final file (so n GPUs
or n Ray workers can each run one shard) and a shard run names the shards still missing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Protocol, Sequence, Union, runtime_checkable

import numpy as np

from kgrag_lib.blocksums import BLOCK_BYTES, CheckedFile, record_file
from kgrag_lib.errors import CacheDamagedError, ConfigError, DataFormatError
from kgrag_lib.jsonl import atomic_text
from kgrag_lib.paths import cache_dir as default_cache_dir
from kgrag_lib.retrieval.embedder import DTYPE_ENV

log = logging.getLogger(__name__)

CHUNK = 1024  # texts per encode call: bounds memory and drives the progress bar
BLOCK = 4096  # rows flushed, recorded and check-summed together: what a killed run loses at most


def _chunk_size(batch_size: int) -> int:
    """Texts per encode call: at least 8 batches (up to a block), so a GPU encoder's overlapped
    tokenisation (`embedder.encode_overlapped`) has batches to overlap at batch 512."""
    return min(BLOCK, max(CHUNK, 8 * int(batch_size)))
CHECK_BLOCK_BYTES = 64 << 20  # rows scanned per numpy call in a full scan
SAMPLE_BLOCKS = 16  # random blocks checked on open, besides the first and the last
FULL_CHECK_BYTES = 256 << 20  # files up to this size are checked whole on open (~0.1 s); larger ones lazily
VERIFY_SEED: int | None = None  # seed of that sample; None draws a fresh one per open
VERIFY_MODES = ("sample", "full")
_SHARD_NAME = re.compile(r"\.shard-(\d{3})of(\d{3})$")


class SupportsEncode(Protocol):
    identity: str
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 64, normalize: bool | None = None,
               show_progress: bool = False) -> np.ndarray: ...


@runtime_checkable
class BlockTexts(Protocol):
    """A text source too large for a list: its length and its texts in blocks of rows."""

    def __len__(self) -> int: ...

    def iter_texts(self, block: int = ..., start: int = 0, stop: int | None = None) -> Iterable[list[str]]: ...


Texts = Union[Sequence[str], BlockTexts]


def iter_text_blocks(texts: Texts, start: int, stop: int, block: int) -> Iterator[list[str]]:
    """Texts [start, stop) in lists of at most `block`."""
    it = getattr(texts, "iter_texts", None)
    if it is not None:
        yield from it(block=block, start=start, stop=stop)
        return
    for a in range(start, stop, block):
        yield list(texts[a:min(a + block, stop)])  # type: ignore[index]


def texts_digest(texts: Texts) -> str:
    """sha256 over the texts, length-prefixed so that ['ab','c'] and ['a','bc'] differ."""
    h = hashlib.sha256()
    for chunk in iter_text_blocks(texts, 0, len(texts), 1 << 16):
        for t in chunk:
            b = t.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


def _key_hash(identity: str, normalize: bool, digest: str | None, key: str | None, n: int) -> str:
    h = hashlib.sha256()
    h.update(identity.encode("utf-8"))
    h.update(b"\0norm=1" if normalize else b"\0norm=0")
    if key is None:
        h.update(str(digest).encode())  # the original form: existing cache files keep their names
    else:
        h.update(f"\0key={key}\0rows={n}".encode("utf-8"))
    return h.hexdigest()


def cache_key(identity: str, texts: Texts, normalize: bool, *, key: str | None = None) -> str:
    """The file key: embedder identity + normalize + (`key` and the row count, or a hash of all texts)."""
    return _key_hash(identity, normalize, None if key is not None else texts_digest(texts), key, len(texts))


def _label(name: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name or "emb")[:60]


def _path(cache_dir: str | os.PathLike | None, name: str | None, key_hash: str) -> Path:
    return Path(default_cache_dir(cache_dir)) / "embeddings" / f"{_label(name)}-{key_hash[:32]}.npy"


def cache_path(embedder: SupportsEncode, texts: Texts, *, cache_dir: str | os.PathLike | None = None,
               name: str | None = None, normalize: bool | None = None, key: str | None = None) -> Path:
    """Where `embed_cached` stores (or finds) this array (same arguments)."""
    norm = _effective_normalize(embedder, normalize)
    return _path(cache_dir, name, cache_key(embedder.identity, texts, norm, key=key))


def shard_path(final: Path, i: int, n: int) -> Path:
    """The file of shard i of n of the array stored at `final`."""
    return final.with_name(f"{final.stem}.shard-{i:03d}of{n:03d}.npy")


def shard_rows(n_rows: int, i: int, n: int) -> tuple[int, int]:
    return i * n_rows // n, (i + 1) * n_rows // n


def _effective_normalize(embedder: SupportsEncode, normalize: bool | None) -> bool:
    if normalize is not None:
        return bool(normalize)
    return bool(getattr(embedder, "normalize", True))


# ---- block checksums ------------------------------------------------------------------
class _BlockSums:
    """crc32 of consecutive `block_rows`-row blocks of a float32 row stream fed in any chunking."""

    def __init__(self, block_rows: int, crcs: list[int] | None = None):
        self.block_rows = block_rows
        self.crcs = list(crcs or [])
        self._crc = self._fill = 0

    def update(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        i = 0
        while i < len(rows):
            take = min(self.block_rows - self._fill, len(rows) - i)
            self._crc = zlib.crc32(rows[i:i + take], self._crc)
            self._fill += take
            i += take
            if self._fill == self.block_rows:
                self.crcs.append(self._crc)
                self._crc = self._fill = 0

    def finish(self) -> list[int]:
        if self._fill:
            self.crcs.append(self._crc)
            self._crc = self._fill = 0
        return self.crcs


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _read_blocks(path: Path, n: int, dim: int) -> tuple[int, list[int]] | None:
    """(rows per block, crc32 per block) recorded beside `path` for an (n, dim) array, else None."""
    try:
        meta = json.loads(_meta_path(path).read_text(encoding="utf-8"))
        rec = meta["blocks"]
        rows, crcs = int(rec["block_rows"]), [int(c) for c in rec["crc32"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (meta.get("n"), meta.get("dim")) != (n, dim) or rows <= 0 or len(crcs) != -(-n // rows):
        return None
    return rows, crcs


def _sample_blocks(count: int) -> list[int]:
    """The first, the last and `SAMPLE_BLOCKS` random blocks (all of them when few)."""
    if count <= SAMPLE_BLOCKS + 2:
        return list(range(count))
    rng = np.random.default_rng(VERIFY_SEED)
    middle = rng.choice(np.arange(1, count - 1), size=SAMPLE_BLOCKS, replace=False).tolist()
    return sorted({0, count - 1, *middle})


def _blocks_problem(arr: np.ndarray, block_rows: int, crcs: list[int], which: Iterable[int]) -> str:
    for b in which:
        a = b * block_rows
        got = zlib.crc32(np.ascontiguousarray(arr[a:a + block_rows]))
        if got != crcs[b]:
            return f"block {b} (rows {a}-{min(a + block_rows, arr.shape[0]) - 1}) fails its crc32 check"
    return ""


def _open_checked(path: Path, n: int, dim: int, normalize: bool,
                  verify: str = "sample") -> tuple[np.ndarray | None, str]:
    """(the memory-mapped array, "") if `path` holds the (n, dim) float32 array expected, else
    (None, what is wrong). Checks the header and the exact file size, then the file's recorded
    64 KiB block crcs: all of them for a file up to `FULL_CHECK_BYTES` or with `verify="full"`;
    else the first, last and a sample now, and every other block the first time a row read
    touches it (`CheckedRows`). A file recorded only by row blocks (written before byte records)
    is checked against those in full, once, and gets its byte record; a file with no record at
    all cannot be checked and is refused (recomputed by the caller), as the other stores do."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        return None, f"not a readable .npy array: {exc}"
    if arr.dtype != np.float32 or arr.shape != (n, dim):
        return None, f"holds {arr.dtype} {arr.shape}, expected float32 {(n, dim)}"
    size, want = path.stat().st_size, arr.offset + arr.nbytes
    if size != want:
        return None, f"{size} bytes, expected {want}"
    meta = _read_meta(path)
    if isinstance(meta.get("file_blocks"), dict):
        try:
            checked = CheckedFile(path, meta["file_blocks"], _REMEDY, _meta_path(path))
            if verify == "full" or size <= FULL_CHECK_BYTES:
                checked.check_all()
            else:
                for b in _sample_blocks(len(checked.crcs)):
                    checked.check(b * checked.block_bytes, b * checked.block_bytes + 1)
        except DataFormatError as exc:
            return None, f"{exc.expected.replace(f' ({_REMEDY})', '')}; {exc.got}"
        return CheckedRows.over(arr, checked), ""
    rec = _read_blocks(path, n, dim)
    if rec is None:
        return None, "it has no block checksum record (written before records existed), so damage inside it cannot be seen"
    problem = _blocks_problem(arr, rec[0], rec[1], range(len(rec[1])))
    if problem:
        return None, problem
    _add_file_record(path, meta)
    return arr, ""


_REMEDY = "the embedding file changed since written: delete it and its .json, and run again to embed its texts again"


class CheckedRows(np.memmap):
    """A stored embedding array whose row reads (`a[i]`, `a[i:j]`, `a[ids]`) first verify the
    64 KiB blocks they touch, each once: a re-ranking reads a few rows of a 64 GB array, so
    hashing all of it on open would cost more than the run. Views and results are plain memmaps;
    `np.asarray(a)` reads without checks (files that small callers read whole are checked in
    full on open, see `FULL_CHECK_BYTES`)."""

    _file: CheckedFile | None = None
    _offset = 0

    @classmethod
    def over(cls, arr: np.ndarray, checked: CheckedFile) -> "CheckedRows":
        out = arr.view(cls)
        out._file, out._offset = checked, int(arr.offset)
        return out

    def __array_finalize__(self, obj: Any) -> None:
        super().__array_finalize__(obj)
        self._file = None   # a view or a computed result: the reads that made it were checked

    def check_all(self) -> None:
        """Verify every block not verified yet (a caller about to read every row another way)."""
        if self._file is not None:
            self._file.check(0, self._file.size)

    def _check(self, key: Any) -> None:
        f, n = self._file, self.shape[0]
        rows = key[0] if isinstance(key, tuple) and key else key
        row_bytes = self.strides[0]
        if isinstance(rows, (int, np.integer)) and not isinstance(rows, bool):
            r = int(rows) + (n if rows < 0 else 0)
            if 0 <= r < n:
                f.check(self._offset + r * row_bytes, self._offset + (r + 1) * row_bytes)
            return
        if isinstance(rows, slice):
            a, b, _ = rows.indices(n)
            if b > a:
                f.check(self._offset + a * row_bytes, self._offset + b * row_bytes)
            return
        if isinstance(rows, (list, np.ndarray)):
            idx = np.asarray(rows)
            if idx.dtype == bool and idx.shape == (n,):
                f.check_rows(self._offset, row_bytes, np.flatnonzero(idx))
                return
            if idx.dtype.kind in "iu":
                idx = idx.ravel().astype(np.int64)
                f.check_rows(self._offset, row_bytes, np.where(idx < 0, idx + n, idx)[(idx >= -n) & (idx < n)])
                return
        self.check_all()   # any other index: check everything once

    def __getitem__(self, key: Any) -> Any:
        if self._file is not None:
            self._check(key)
        out = super().__getitem__(key)
        return out.view(np.memmap) if isinstance(out, CheckedRows) else out

    def __reduce__(self) -> Any:   # pickled (sent to a worker): a plain array
        return np.asarray(self).__reduce__()


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(_meta_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _add_file_record(path: Path, meta: dict[str, Any]) -> None:
    """Add the byte block record to a file checked against its older row record: best effort."""
    try:
        atomic_text(_meta_path(path), json.dumps({**meta, "file_blocks": record_file(path, BLOCK_BYTES)}, indent=1))
    except OSError:  # a read-only cache: the next open checks the row record again
        pass


def _rows_problem(arr: np.ndarray, stop: int, normalize: bool, sums: _BlockSums | None = None) -> str:
    """What is wrong with rows [0, stop) of `arr` ("" if nothing), read `CHECK_BLOCK_BYTES` at a
    time; `sums` is fed the rows on the way (one read for both)."""
    step = max(1, CHECK_BLOCK_BYTES // max(4 * arr.shape[1], 1))
    for start in range(0, stop, step):
        rows = np.asarray(arr[start:min(start + step, stop)])
        if not np.isfinite(rows).all():
            bad = start + int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
            return f"non-finite values (row {bad})"
        norms = np.linalg.norm(rows, axis=1)
        if normalize and not np.all((np.abs(norms - 1) < 1e-3) | (norms < 1e-6)):
            return "rows that should be unit vectors are not"
        if sums is not None:
            sums.update(rows)
    return ""


# ---- the public entry points ----------------------------------------------------------------
@dataclass(frozen=True)
class ShardResult:
    """What one shard run did: its file and rows, the shards still missing, and the final file
    if this run found every shard done and merged them (None otherwise)."""

    path: Path
    rows: tuple[int, int]
    missing: list[int]
    merged: Path | None


@dataclass(frozen=True)
class _Job:
    """One embedding request, resolved: what every step below needs."""

    embedder: SupportsEncode
    texts: Texts
    n: int
    normalize: bool
    final: Path
    meta: dict[str, Any]
    batch_size: int
    show_progress: bool
    verify: str

    @property
    def dim(self) -> int:
        return self.embedder.dim


def _job(embedder: SupportsEncode, texts: Any, cache_dir: Any, name: str | None, show_progress: bool,
         normalize: bool | None, batch_size: int, key: str | None, verify: str) -> _Job:
    if isinstance(texts, str):
        raise TypeError("embed_cached() takes a sequence of texts or a block text source, not a single string")
    if verify not in VERIFY_MODES:
        raise ConfigError(f"verify={verify!r}: expected one of {', '.join(VERIFY_MODES)}")
    if key is None and not isinstance(texts, BlockTexts):
        texts = list(texts)
    norm = _effective_normalize(embedder, normalize)
    n = len(texts)
    digest = texts_digest(texts) if key is None else None
    final = _path(cache_dir, name, _key_hash(embedder.identity, norm, digest, key, n))
    meta: dict[str, Any] = {"identity": embedder.identity, "n": n, "dim": embedder.dim, "normalize": norm,
                            "name": name, "dtype": _dtype_of(embedder),
                            **({"texts_sha256": digest} if key is None else {"key": key})}
    return _Job(embedder, texts, n, norm, final, meta, batch_size, show_progress, verify)


def embed_cached(
    embedder: SupportsEncode,
    texts: Texts,
    *,
    cache_dir: str | os.PathLike | None = None,
    name: str | None = None,
    show_progress: bool = True,
    normalize: bool | None = None,
    batch_size: int = 64,
    key: str | None = None,
    shard: tuple[int, int] | None = None,
    verify: str = "sample",
) -> np.ndarray:
    """Embeddings of `texts`, computed at most once per (model identity, texts, normalize).

    Returns a read-only memory-mapped float32 (n, dim) array. `name` only labels the file.
    `normalize=None` takes the embedder's default. `texts` is a list, or with `key=` (a string
    that identifies the texts) any Sequence or `BlockTexts` source, read only while encoding.
    `verify`: "sample" or "full" check of a stored file (module doc). A damaged stored file is
    recomputed (with a warning naming it); CacheDamagedError if the fresh file fails the check.

    `shard=(i, n)` encodes only shard i of n (`embed_shard`) and returns the whole array if that
    completed the set (merged here), else the shard's own rows (the log names the missing shards).
    """
    job = _job(embedder, texts, cache_dir, name, show_progress, normalize, batch_size, key, verify)
    if job.n == 0:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    if shard is not None:
        res = _embed_shard(job, shard)
        return _final_array(job) if res.merged else np.load(res.path, mmap_mode="r", allow_pickle=False)
    if job.final.exists():
        hit, problem = _open_checked(job.final, job.n, job.dim, job.normalize, verify)
        if hit is not None:
            return hit
        log.warning("embedding cache file %s is damaged (%s); recomputing it", job.final, problem)
    else:
        refuse_other_dtype(job)
    _build_final(job)
    return _final_array(job)


def embed_shard(embedder: SupportsEncode, texts: Texts, shard: tuple[int, int], *,
                cache_dir: str | os.PathLike | None = None, name: str | None = None, show_progress: bool = True,
                normalize: bool | None = None, batch_size: int = 64, key: str | None = None,
                verify: str = "sample") -> ShardResult:
    """Encode shard `shard=(i, n)` of the array `embed_cached` (same arguments) would store: rows
    [i*N//n, (i+1)*N//n) into its own resumable file; when every shard is done, merge them."""
    job = _job(embedder, texts, cache_dir, name, show_progress, normalize, batch_size, key, verify)
    if not job.final.exists():
        refuse_other_dtype(job)
    return _embed_shard(job, shard)


# ---- the encoder's dtype ---------------------------------------------------------------------
_DTYPE_SUFFIX = re.compile(r"\+(fp16|bf16)$")


def _dtype_of(embedder: Any) -> str:
    """The precision an embedder encodes in: its `precision`, else its identity's `+fp16`/`+bf16`."""
    given = getattr(embedder, "precision", None)
    if isinstance(given, str) and given:
        return given
    m = _DTYPE_SUFFIX.search(str(getattr(embedder, "identity", "")))
    return m.group(1) if m else "fp32"


def refuse_other_dtype(job: "_Job") -> None:
    """Stop a run about to encode texts whose vectors are stored from the same model in another dtype (an
    index built with `kgrag data embed --dtype fp16`, a run without $KGRAG_EMBEDDER_DTYPE): that silently
    re-embeds everything (Wikipedia's 21M passages: hours). Told by $KGRAG_EMBEDDER_DTYPE (or the
    embedder's dtype given explicitly), it goes on."""
    if os.environ.get(DTYPE_ENV, "").strip() or getattr(job.embedder, "precision_given", False):
        return
    mine = job.meta["dtype"]
    base = _DTYPE_SUFFIX.sub("", job.meta["identity"])
    same = {k: job.meta[k] for k in ("n", "dim", "normalize", "key", "texts_sha256") if k in job.meta}
    for meta_file in sorted(job.final.parent.glob(f"{_label(job.meta.get('name'))}-*.json")):
        try:
            other = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(other, dict) or _DTYPE_SUFFIX.sub("", str(other.get("identity", ""))) != base:
            continue
        theirs = other.get("dtype") or (_DTYPE_SUFFIX.search(str(other.get("identity", ""))) or [None, "fp32"])[1]
        if theirs == mine or any(other.get(k) != v for k, v in same.items()):
            continue
        if not meta_file.with_suffix(".npy").exists():
            continue
        raise ConfigError(
            f"the {job.n:,} embeddings of {job.meta.get('name') or 'these texts'} are stored from {base} in {theirs} "
            f"({meta_file.with_suffix('.npy')}), and this run encodes in {mine}: it would embed all {job.n:,} texts "
            f"again. Set {DTYPE_ENV}={theirs} (or --dtype {theirs}) to use the stored ones, or {DTYPE_ENV}={mine} to "
            f"embed again in {mine} on purpose")


def _final_array(job: _Job) -> np.ndarray:
    arr, problem = _open_checked(job.final, job.n, job.dim, job.normalize)
    if arr is None:
        e = job.embedder
        raise CacheDamagedError(f"embedding cache file {job.final} fails its check right after being written "
                                f"({problem}): does {e.identity} return {e.dim}-dim vectors"
                                f"{', unit length' if job.normalize else ''}? "
                                "Delete the file after fixing the embedder")
    return arr


def _build_final(job: _Job) -> None:
    """Encode (or merge a complete set of shards into) the final file, under its lock."""
    from filelock import FileLock

    job.final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(job.final) + ".lock"):
        if job.final.exists() and _open_checked(job.final, job.n, job.dim, job.normalize, job.verify)[0] is not None:
            return  # another process wrote it meanwhile
        shards = _complete_shard_set(job)
        if shards:
            _merge_shards(job, shards)
        else:
            crcs = _encode_range(job, job.final, 0, job.n, "")
            _write_meta(job.final, job.meta, crcs)


def _write_meta(path: Path, meta: dict[str, Any], crcs: list[int]) -> None:
    """The record of the array just installed at `path`: its row-block crcs (what shards are merged
    by) and its 64 KiB byte-block crcs (what an open checks, lazily for a large file)."""
    atomic_text(_meta_path(path), json.dumps({**meta, "blocks": {"block_rows": BLOCK, "crc32": crcs},
                                              "file_blocks": record_file(path, BLOCK_BYTES)}, indent=1))


# ---- shards ----------------------------------------------------------------------------------
def _shard_done(job: _Job, i: int, n: int) -> bool:
    """A shard counts as done once its file and its record (written after it) are there."""
    a, b = shard_rows(job.n, i, n)
    p = shard_path(job.final, i, n)
    return p.exists() and _read_blocks(p, b - a, job.dim) is not None


def _complete_shard_set(job: _Job) -> int:
    """The shard count n of a complete set of shard files of `job.final` (0 if none)."""
    counts = set()
    for p in job.final.parent.glob(f"{job.final.stem}.shard-*of*.npy"):
        m = _SHARD_NAME.search(p.stem)
        if m:
            counts.add(int(m.group(2)))
    for n in sorted(counts):
        if n >= 1 and all(_shard_done(job, i, n) for i in range(n)):
            return n
    return 0


def _embed_shard(job: _Job, shard: tuple[int, int]) -> ShardResult:
    from filelock import FileLock

    try:
        i, n = (int(x) for x in shard)
    except (TypeError, ValueError):
        raise ConfigError(f"shard={shard!r}: expected (i, n) with 0 <= i < n") from None
    if not 0 <= i < n or n > 999:
        raise ConfigError(f"shard={shard!r}: expected (i, n) with 0 <= i < n <= 999")
    a, b = shard_rows(job.n, i, n)
    path = shard_path(job.final, i, n)
    if job.final.exists() and _open_checked(job.final, job.n, job.dim, job.normalize, job.verify)[0] is not None:
        return ShardResult(path, (a, b), [], job.final)  # merged already
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not (path.exists() and _open_checked(path, b - a, job.dim, job.normalize, job.verify)[0] is not None):
            crcs = _encode_range(job, path, a, b, f" shard {i}/{n}")
            _write_meta(path, {**job.meta, "n": b - a, "shard": [i, n], "rows": [a, b], "total_rows": job.n}, crcs)
    missing = [j for j in range(n) if not _shard_done(job, j, n)]
    if missing:
        log.info("embedding shard %d/%d of %s done (rows %d-%d); shards %s of %d still missing: run them, and the "
                 "last one to finish merges", i, n, job.final.name, a, b - 1, ", ".join(map(str, missing)), n)
        return ShardResult(path, (a, b), missing, None)
    _build_final(job)
    return ShardResult(path, (a, b), [], job.final)


def _merge_shards(job: _Job, n: int) -> None:
    """Assemble the final file from its n shard files (each checked in full against its record
    on the way), then remove them. The caller holds the final file's lock."""
    part, progress = _partial_files(job.final)
    progress.unlink(missing_ok=True)  # a resume record of an unsharded run does not describe this file
    out = _allocate(part, job.n, job.dim, resume=False)
    sums = _BlockSums(BLOCK)
    for i in range(n):
        a, b = shard_rows(job.n, i, n)
        path = shard_path(job.final, i, n)
        rec = _read_blocks(path, b - a, job.dim)
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            arr, rec = None, None
            log.debug("shard %s unreadable: %s", path, exc)
        if rec is None or arr is None or arr.dtype != np.float32 or arr.shape != (b - a, job.dim):
            _drop(path)
            raise CacheDamagedError(f"embedding shard file {path} is not the float32 ({b - a}, {job.dim}) array "
                                    f"its record describes; it was deleted: run shard {i}/{n} again")
        check = _BlockSums(rec[0])
        for r in range(0, b - a, BLOCK):
            rows = np.asarray(arr[r:r + BLOCK])
            check.update(rows)
            out[a + r:a + r + len(rows)] = rows
            sums.update(rows)
        if check.finish() != rec[1]:
            del arr
            _drop(path)
            raise CacheDamagedError(f"embedding shard file {path} fails its crc32 check; it was deleted: "
                                    f"run shard {i}/{n} again")
        del arr
    _install(out, part, job.final)
    _write_meta(job.final, {**job.meta, "merged_shards": n}, sums.finish())
    for i in range(n):
        _drop(shard_path(job.final, i, n))
    log.info("merged %d embedding shards into %s", n, job.final)


def _drop(path: Path) -> None:
    path.unlink(missing_ok=True)
    _meta_path(path).unlink(missing_ok=True)


# ---- encoding --------------------------------------------------------------------------------
def _partial_files(path: Path) -> tuple[Path, Path]:
    """The resumable partial array and its progress record, named after the final file's key."""
    return path.with_suffix(".partial.npy"), path.with_suffix(".partial.json")


def _reserve(part: Path) -> None:
    """Allocate every block of `part` now: a memmap write into a hole the disk cannot fill is a
    SIGBUS that kills the process; posix_fallocate turns a full disk into ENOSPC here, before
    any row is written (an OSError naming the file, which the CLI reports in one line)."""
    if not hasattr(os, "posix_fallocate"):  # macOS, Windows: no reservation
        return
    fd = os.open(part, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size:
            os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(part)) from None
    finally:
        os.close(fd)


def _allocate(part: Path, rows: int, dim: int, resume: bool) -> np.ndarray:
    """The partial array, opened for resuming or created with its space reserved."""
    try:
        out = np.lib.format.open_memmap(part, mode="r+") if resume else \
            np.lib.format.open_memmap(part, mode="w+", dtype=np.float32, shape=(rows, dim))
        _reserve(part)
    except OSError as exc:
        if not resume:
            part.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), exc.filename or str(part)) from None
    return out


def _install(out: np.ndarray, part: Path, target: Path) -> None:
    """Flush and fsync the finished partial array and rename it to `target`; its old record goes
    first, so a crash in between leaves a file without record (fully scanned), never a stale one."""
    if isinstance(out, np.memmap):
        out.flush()
    del out
    with open(part, "rb+") as f:
        os.fsync(f.fileno())
    _meta_path(target).unlink(missing_ok=True)
    os.replace(part, target)
    _partial_files(target)[1].unlink(missing_ok=True)


def _resume_point(part: Path, progress: Path, rows: int, dim: int, normalize: bool,
                  start: int = 0) -> tuple[int, list[int]]:
    """Rows of `part` already encoded by an interrupted run and their block crcs ((0, []) if none
    can be trusted). Rows are recorded only after they are flushed to disk, so a block cut short
    is simply encoded again. A record with crcs is checked on its last block and a sample; an
    older one (no crcs) by a scan of its rows, which also computes them."""
    try:
        rec = json.loads(progress.read_text())
        done = int(rec["rows"])
        arr = np.load(part, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError):
        return 0, []
    if (rec.get("n"), rec.get("dim"), rec.get("start", 0)) != (rows, dim, start) or arr.dtype != np.float32 \
            or arr.shape != (rows, dim) or not 0 < done <= rows or part.stat().st_size != arr.offset + arr.nbytes:
        return 0, []
    crcs = rec.get("crc32")
    if rec.get("block_rows") == BLOCK and isinstance(crcs, list) and len(crcs) == -(-done // BLOCK) \
            and (done % BLOCK == 0 or done == rows):
        problem = _blocks_problem(arr, BLOCK, crcs, sorted({len(crcs) - 1, *_sample_blocks(len(crcs))}))
    else:  # written before crcs were recorded, or with another block size: whole blocks only
        done = done if done == rows else done - done % BLOCK
        sums = _BlockSums(BLOCK)
        problem = _rows_problem(arr, done, normalize, sums) if done else "no whole block"
        crcs = sums.finish() if done == rows else sums.crcs
    if problem:
        log.warning("partial embedding file %s is damaged (%s); starting it again", part, problem)
        return 0, []
    return done, [int(c) for c in crcs]


def _encode_range(job: _Job, target: Path, start: int, stop: int, what: str) -> list[int]:
    """Encode texts [start, stop) into `target` through `<target>.partial.npy` (space reserved up
    front) in blocks of `BLOCK` rows, recording after each block how many rows are on disk and
    their crcs, then rename it into place; return the crcs. A killed run resumes at its last
    finished block. Rows are checked as they arrive (finite; unit length when normalized): an
    embedder that breaks its promise stops the run before anything is stored under `target`.
    The caller holds the file lock, so one process at a time touches the partial files."""
    rows, dim = stop - start, job.dim
    part, progress = _partial_files(target)
    if rows == 0:
        np.save(part, np.zeros((0, dim), dtype=np.float32))
        _install(np.zeros(0), part, target)
        return []
    done, crcs = _resume_point(part, progress, rows, dim, job.normalize, start)
    if done:
        log.info("resuming embedding of %s at row %d of %d", target.name, done, rows)
    else:
        progress.unlink(missing_ok=True)
    out = _allocate(part, rows, dim, resume=bool(done))
    sums = _BlockSums(BLOCK, crcs)
    bar = None
    if job.show_progress and rows - done > CHUNK:
        from ..progress import progress as progress_bar

        label = target.stem.split(".shard-")[0].rsplit("-", 1)[0]
        bar = progress_bar(total=rows, initial=done, desc=f"embedding {label}{what}", unit="text", unit_scale=True)
    try:
        for block in range(done, rows, BLOCK):
            end = min(block + BLOCK, rows)
            pos = block
            for chunk in iter_text_blocks(job.texts, start + block, start + end, _chunk_size(job.batch_size)):
                vecs = _encode_chunk(job, chunk, target, done_before=block)
                if pos + len(vecs) > end:
                    raise ValueError(f"the text source yielded more than the {end - block} texts asked for")
                out[pos:pos + len(vecs)] = vecs
                sums.update(vecs)
                pos += len(vecs)
                if bar is not None:
                    bar.update(len(vecs))
            if pos != end:
                raise ValueError(f"the text source yielded {pos - block} texts for rows {start + block}-"
                                 f"{start + end - 1}; expected {end - block} (does its len() match its texts?)")
            if end == rows:
                sums.finish()
            out.flush()  # msync: the rows are on disk before the record says so
            atomic_text(progress, json.dumps({"rows": end, "n": rows, "dim": dim, "start": start,
                                              "block_rows": BLOCK, "crc32": sums.crcs}))
    finally:
        if bar is not None:
            bar.close()
    _install(out, part, target)
    return sums.crcs


def _encode_chunk(job: _Job, chunk: list[str], target: Path, done_before: int) -> np.ndarray:
    """One encode call, its shape and rows checked."""
    e, dim = job.embedder, job.dim
    vecs = e.encode(chunk, batch_size=job.batch_size, normalize=job.normalize, show_progress=False)
    vecs = np.asarray(vecs)
    if vecs.shape != (len(chunk), dim):
        raise ValueError(f"embedder returned shape {vecs.shape} for {len(chunk)} texts; expected ({len(chunk)}, {dim})")
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    problem = _rows_problem(vecs, len(vecs), job.normalize)
    if problem:
        if not done_before:  # nothing worth resuming
            for p in _partial_files(target):
                p.unlink(missing_ok=True)
        raise CacheDamagedError(f"embedding cache file {target} fails its check right after being written "
                                f"({problem}): does {e.identity} return {dim}-dim vectors"
                                f"{', unit length' if job.normalize else ''}? Nothing was stored under that "
                                f"name; fix the embedder and run again")
    return vecs
