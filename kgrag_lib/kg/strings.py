"""A compact, memory-mappable string table with a lazy hash index for exact and case-insensitive lookup.

Millions of entity names as Python `str` objects cost ~60 bytes each plus a dict entry; here they
live as one UTF-8 byte blob with int64 offsets (a few bytes of overhead per name) that `np.load`
can memory-map. Lookup uses a sorted array of 64-bit hashes computed with numpy over the whole
blob at once, so no Python object is created per name; every hash hit is verified against the
real string, so collisions can never return a wrong row.

Rows appended or replaced after construction (a KG enriched during reasoning) live in a small
Python side layer; `compact()` folds them back into arrays for saving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..errors import DataFormatError
from .csr import expand_ranges

_P = np.uint64(0x100000001B3)  # FNV-64 prime as the polynomial base
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_CHUNK_BYTES = 1 << 24
_powers_cache = np.ones(1, dtype=np.uint64)


def _powers(n: int) -> np.ndarray:
    """P**k mod 2**64 for k < n (grown on demand, shared)."""
    global _powers_cache
    if _powers_cache.size < n:
        size = max(n, 2 * _powers_cache.size)
        p = np.full(size, _P, dtype=np.uint64)
        p[0] = 1
        _powers_cache = np.cumprod(p, dtype=np.uint64)  # wraps mod 2**64 by design
    return _powers_cache


def _finalize(h: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer over (polynomial sum + length) for well spread bits."""
    with np.errstate(over="ignore"):
        h = h + lens.astype(np.uint64) * _P
        h ^= h >> np.uint64(30)
        h *= _MIX1
        h ^= h >> np.uint64(27)
        h *= _MIX2
        h ^= h >> np.uint64(31)
    return h


def _row_chunks(blob: np.ndarray, offsets: np.ndarray, fold_ascii: bool):
    """Yield (first row, stop row, row offsets from 0, bytes as uint64) in chunks of ~16 MiB."""
    n = offsets.size - 1
    row = 0
    while row < n:
        stop = int(np.searchsorted(offsets, offsets[row] + _CHUNK_BYTES, side="right")) - 1
        stop = min(max(stop, row + 1), n)  # at least one row per chunk
        lo, hi = int(offsets[row]), int(offsets[stop])
        offs = np.asarray(offsets[row : stop + 1], dtype=np.int64) - lo
        b = np.asarray(blob[lo:hi]).astype(np.uint64)
        if fold_ascii:
            b += ((b >= 65) & (b <= 90)).astype(np.uint64) * np.uint64(32)
        yield row, stop, offs, b
        row = stop


def hash_rows(blob: np.ndarray, offsets: np.ndarray, fold_ascii: bool = False) -> np.ndarray:
    """64-bit hash of every row `blob[offsets[i]:offsets[i+1]]`, vectorized in chunks of rows."""
    out = np.empty(offsets.size - 1, dtype=np.uint64)
    for row, stop, offs, b in _row_chunks(blob, offsets, fold_ascii):
        lens = np.diff(offs)
        b += np.uint64(1)
        pos = np.arange(b.size, dtype=np.int64) - np.repeat(offs[:-1], lens)
        b *= _powers(int(lens.max(initial=0)) + 1)[pos]
        csum = np.zeros(b.size + 1, dtype=np.uint64)
        np.cumsum(b, out=csum[1:])
        out[row:stop] = _finalize(csum[offs[1:]] - csum[offs[:-1]], lens)
    return out


def _popcount(a: np.ndarray) -> np.ndarray:
    """Set bits per uint64 (np.bitwise_count exists from numpy 2.0 only)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(a).astype(np.int16)
    table = np.array([bin(i).count("1") for i in range(256)], dtype=np.int16)
    return table[np.ascontiguousarray(a).view(np.uint8)].reshape(-1, 8).sum(axis=1, dtype=np.int16)


def bigram_signatures(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A 64-bit set of the (case-folded) byte bigrams of every row: a cheap fuzzy-match prefilter."""
    out = np.zeros(offsets.size - 1, dtype=np.uint64)
    for row, stop, offs, b in _row_chunks(blob, offsets, fold_ascii=True):
        if b.size == 0:
            continue
        bits = np.zeros(b.size, dtype=np.uint64)
        nxt = np.empty_like(b)
        nxt[:-1] = b[1:]
        nxt[-1] = 0
        same_row = np.ones(b.size, dtype=bool)
        same_row[offs[1:] - 1] = False  # the last byte of a row starts no bigram
        code = (b * np.uint64(31) + nxt) % np.uint64(64)
        bits[same_row] = np.left_shift(np.uint64(1), code[same_row])
        nonempty = np.flatnonzero(offs[1:] > offs[:-1])
        if nonempty.size:
            out[row + nonempty] = np.bitwise_or.reduceat(bits, offs[:-1][nonempty])
    return out


def hash_strings(strings: Sequence[str]) -> np.ndarray:
    """The same hash as `hash_rows`, for Python strings (queries, folded non-ASCII rows)."""
    blob, offsets = encode_strings(strings)
    return hash_rows(blob, offsets)


def encode_strings(strings: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 blob (uint8) and int64 offsets (len n+1) for a sequence of strings."""
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    if encoded:
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return blob, offsets


class _HashIndex:
    """Sorted 64-bit hashes with the row each came from; lookup by binary search."""

    def __init__(self, hashes: np.ndarray, order: np.ndarray):
        self.hashes = hashes
        self.order = order

    @classmethod
    def build(cls, hashes: np.ndarray) -> "_HashIndex":
        order = np.argsort(hashes).astype(np.int32 if hashes.size < 2**31 else np.int64)
        return cls(hashes[order], order)

    def rows(self, h: np.uint64) -> np.ndarray:
        lo = int(np.searchsorted(self.hashes, h, side="left"))
        hi = int(np.searchsorted(self.hashes, h, side="right"))
        return np.asarray(self.order[lo:hi])


class StringTable:
    """An append-only list of strings stored as blob + offsets, with optional per-row overrides."""

    def __init__(self, blob: np.ndarray | None = None, offsets: np.ndarray | None = None,
                 searchable: bool = True):
        self.searchable = searchable  # False: never looked up by value (descriptions), keep no side index
        self._blob = blob if blob is not None else np.empty(0, dtype=np.uint8)
        self._offsets = offsets if offsets is not None else np.zeros(1, dtype=np.int64)
        self._extra: list[str] = []  # rows appended after construction
        self._over: dict[int, str] = {}  # base rows replaced after construction
        self._exact: _HashIndex | None = None
        self._folded: _HashIndex | None = None
        self._side_exact: dict[str, list[int]] = {}
        self._side_folded: dict[str, list[int]] = {}
        self._signatures: np.ndarray | None = None  # bigram sets, built on the first fuzzy lookup
        self.path: Path | None = None  # the blob file it was loaded from (named in errors)

    # --- construction / persistence -------------------------------------------------
    @classmethod
    def from_strings(cls, strings: Iterable[str], searchable: bool = True) -> "StringTable":
        return cls(*encode_strings(strings), searchable=searchable)

    @property
    def base_size(self) -> int:
        return self._offsets.size - 1

    def __len__(self) -> int:
        return self.base_size + len(self._extra)

    @property
    def nbytes(self) -> int:
        """Bytes held in arrays (blob, offsets and any built lookup index)."""
        n = self._blob.nbytes + self._offsets.nbytes
        for idx in (self._exact, self._folded):
            if idx is not None:
                n += idx.hashes.nbytes + idx.order.nbytes
        return n

    @property
    def is_compact(self) -> bool:
        return not self._extra and not self._over

    def compact(self) -> None:
        """Fold appended/replaced rows into the arrays (vectorized byte gather)."""
        if self.is_compact:
            return
        n_base = self.base_size
        rows = [self._over[i] for i in sorted(self._over)] + self._extra
        side_blob, side_offs = encode_strings(rows)
        # virtual table = base rows followed by side rows; pick the right source for each row
        src = np.arange(len(self), dtype=np.int64)
        over_ids = np.fromiter(sorted(self._over), dtype=np.int64, count=len(self._over))
        src[over_ids] = n_base + np.arange(over_ids.size)
        src[n_base:] = n_base + over_ids.size + np.arange(len(self._extra))
        all_blob = np.concatenate([np.asarray(self._blob), side_blob])
        all_offs = np.concatenate([np.asarray(self._offsets[:-1]), side_offs + self._blob.size])
        starts, ends = all_offs[:-1][src], all_offs[1:][src]
        new_offsets = np.zeros(src.size + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=new_offsets[1:])
        self._blob = all_blob[expand_ranges(starts, ends)]
        self._offsets = new_offsets
        self._extra, self._over = [], {}
        self._exact = self._folded = None
        self._signatures = None
        self._side_exact, self._side_folded = {}, {}

    def take(self, rows: np.ndarray) -> "StringTable":
        """A new compact table holding `rows` in the given order."""
        self.compact()
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self._offsets[rows], self._offsets[rows + 1]
        offsets = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        return StringTable(np.asarray(self._blob)[expand_ranges(starts, ends)], offsets, self.searchable)

    def save(self, directory: Path, name: str, with_index: bool = True) -> list[str]:
        """Write `<name>.blob.npy`, `<name>.offsets.npy` (+ lookup index); return file names."""
        self.compact()
        files = {f"{name}.blob.npy": self._blob, f"{name}.offsets.npy": self._offsets}
        if with_index:
            self._ensure_index()
            assert self._exact is not None and self._folded is not None
            files.update({
                f"{name}.hash.npy": self._exact.hashes, f"{name}.order.npy": self._exact.order,
                f"{name}.fhash.npy": self._folded.hashes, f"{name}.forder.npy": self._folded.order,
            })
        for fname, arr in files.items():
            np.save(directory / fname, np.asarray(arr), allow_pickle=False)
        return list(files)

    @classmethod
    def load(cls, directory: Path, name: str, mmap: bool = True, searchable: bool = True) -> "StringTable":
        mode = "r" if mmap else None
        table = cls(np.load(directory / f"{name}.blob.npy", mmap_mode=mode),
                    np.load(directory / f"{name}.offsets.npy", mmap_mode=mode), searchable)
        if (directory / f"{name}.hash.npy").exists():
            ld = lambda suffix: np.load(directory / f"{name}.{suffix}.npy", mmap_mode=mode)  # noqa: E731
            table._exact = _HashIndex(ld("hash"), ld("order"))
            table._folded = _HashIndex(ld("fhash"), ld("forder"))
        table.path = directory / f"{name}.blob.npy"
        return table

    def _decode(self, raw: bytes, row: int, at: int) -> str:
        """Row `row`'s bytes (from blob offset `at`) as text; a byte that is not UTF-8 (a damaged or
        edited blob: tables are written from str) is a DataFormatError naming the file, row and offset."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataFormatError(self.path or "string table", None,
                                  "UTF-8 text in every row (as KGStore.save wrote it; rebuild the store)",
                                  f"row {row}: byte 0x{raw[exc.start]:02x} at blob offset {at + exc.start} "
                                  f"is not UTF-8") from None

    # --- access ----------------------------------------------------------------------
    def __getitem__(self, i: int) -> str:
        i = int(i)
        n_base = self.base_size
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"string row {i} out of range [0, {len(self)})")
        if i >= n_base:
            return self._extra[i - n_base]
        if i in self._over:
            return self._over[i]
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        return self._decode(bytes(self._blob[a:b]), i, a)

    def byte_lengths(self) -> np.ndarray:
        """UTF-8 length of every row (int64), from the offsets without decoding (rows appended or
        replaced since construction are encoded): which rows are empty, for millions of rows at once."""
        lengths = np.diff(np.asarray(self._offsets, dtype=np.int64))
        if self._over or self._extra:
            lengths = np.concatenate([lengths, np.array([len(s.encode("utf-8")) for s in self._extra], dtype=np.int64)])
            for i, s in self._over.items():
                lengths[i] = len(s.encode("utf-8"))
        return lengths

    def most_similar_rows(self, s: str, k: int) -> np.ndarray:
        """Up to `k` base rows sharing the most byte bigrams with `s` (candidates for difflib)."""
        if self._signatures is None:
            self._signatures = bigram_signatures(np.asarray(self._blob), np.asarray(self._offsets))
        q = bigram_signatures(*encode_strings([s]))[0]
        sig = self._signatures
        score = _popcount(sig & q) * 2 - _popcount(sig ^ q)
        if score.size <= k:
            return np.argsort(-score, kind="stable")
        top = np.argpartition(-score, k)[:k]
        return top[np.argsort(-score[top], kind="stable")]

    def append(self, s: str) -> int:
        i = len(self)
        self._extra.append(s)
        self._side_add(s, i)
        return i

    def set(self, i: int, s: str) -> None:
        n_base = self.base_size
        if i >= n_base:
            self._extra[i - n_base] = s
        else:
            self._over[i] = s
        self._side_add(s, i)

    def pad(self, n: int) -> None:
        """Grow to `n` rows with empty strings (vectorized while nothing was appended)."""
        if len(self) >= n:
            return
        if self._extra:
            while len(self) < n:
                self.append("")
            return
        tail = np.full(n - self.base_size, self._offsets[-1], dtype=np.int64)
        self._offsets = np.concatenate([np.asarray(self._offsets), tail])
        self._exact = self._folded = None
        self._signatures = None

    def _side_add(self, s: str, i: int) -> None:
        if not self.searchable:
            return
        self._side_exact.setdefault(s, []).append(i)
        self._side_folded.setdefault(s.lower(), []).append(i)

    # --- lookup ----------------------------------------------------------------------
    def _ensure_index(self) -> None:
        if self._exact is not None and self._folded is not None:
            return
        blob, offs = np.asarray(self._blob), np.asarray(self._offsets)
        self._exact = _HashIndex.build(hash_rows(blob, offs))
        folded = hash_rows(blob, offs, fold_ascii=True)
        # rows with non-ASCII bytes need Python's full Unicode lower-casing
        high = np.zeros(blob.size + 1, dtype=np.int64)
        np.cumsum(blob >= 128, out=high[1:])
        non_ascii = np.flatnonzero(high[offs[1:]] > high[offs[:-1]])
        if non_ascii.size:
            lowered = [self._decode(bytes(blob[offs[i]:offs[i + 1]]), int(i), int(offs[i])).lower()
                       for i in non_ascii]
            folded[non_ascii] = hash_strings(lowered)
        self._folded = _HashIndex.build(folded)

    def find(self, s: str) -> list[int]:
        """All rows equal to `s`, ascending."""
        return self._find(s, folded=False)

    def find_folded(self, s: str) -> list[int]:
        """All rows equal to `s` ignoring case (Unicode `str.lower`), ascending."""
        return self._find(s, folded=True)

    def _find(self, s: str, folded: bool) -> list[int]:
        key = s.lower() if folded else s
        hits: set[int] = set()
        if self.base_size:
            self._ensure_index()
            index = self._folded if folded else self._exact
            assert index is not None
            hits.update(int(i) for i in index.rows(hash_strings([key])[0]))
        side = self._side_folded if folded else self._side_exact
        hits.update(side.get(key, ()))
        same = (lambda v: v.lower() == key) if folded else (lambda v: v == key)
        return sorted(i for i in hits if same(self[i]))
