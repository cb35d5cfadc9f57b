"""DPR's psgs_w100.tsv as a memory-mapped store: parsed once, opened in milliseconds by every process.

`list(iter_passages(...))` over Wikipedia-2018 costs 21M `Passage` objects plus their texts
(tens of GB) and re-parses the 13 GB TSV in every process. Here the TSV is streamed once into
three columns (pid, title, text), each an int64 offsets `.npy` plus a UTF-8 `.bin` blob, under
`<cache>/passages/<label>-<fingerprint[:16]>/`; later processes memory-map them and decode only
the rows they touch (`store[i]` builds its Passage on access). The folder is written under a
temporary name and renamed when complete, so a crash mid-build leaves nothing under the final name.

`meta.json` records a crc32 of every 64 KiB block of each file (`blocksums`); opening checks the
sizes, and a read checks the blocks it touches the first time it touches them, so a byte changed
anywhere is refused in one line naming the file and the block before its row is used. Stores of
version 1 (written before these checksums) are refused: `open_passage_store` rebuilds them.

The fingerprint is the file's resolved path, size, mtime_ns and a sha256 of its first and last
MiB: hashing all 13 GB would take longer than most runs spend on retrieval, and a replaced or
re-downloaded file changes its size, mtime or edges.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Iterator, overload

import numpy as np

from ..blocksums import BlockSums, CheckedFile, record_file
from ..errors import DataFormatError
from ..paths import cache_dir as default_cache_dir
from ..progress import progress
from ..records import Passage
from .common import check_file
from .wikipedia import FORM, iter_passages

log = logging.getLogger(__name__)

FORMAT_NAME = "kgrag-passage-store"
FORMAT_VERSION = 2          # 2: per-block checksums in meta.json
COLUMNS = ("pids", "titles", "texts")
META = "meta.json"
EDGE_BYTES = 1 << 20        # hashed at each end of the source file
BUILD_BLOCK = 65_536        # rows buffered per write: bounds the build's memory
TEXT_FORM = "title\\ntext-v1"  # what `iter_texts` yields (Passage.as_text); part of the embedding key


def source_fingerprint(path: str | os.PathLike) -> str:
    """sha256 hex over the file's resolved path, size, mtime_ns and its first and last MiB."""
    path = Path(path).resolve()
    st = path.stat()
    # the path as the file system's bytes: a name with a non-UTF-8 byte (str holds it as a surrogate) hashes too
    h = hashlib.sha256(os.fsencode(str(path)) + f"\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    with open(path, "rb") as f:
        h.update(f.read(EDGE_BYTES))
        if st.st_size > EDGE_BYTES:
            f.seek(max(EDGE_BYTES, st.st_size - EDGE_BYTES))
            h.update(f.read(EDGE_BYTES))
    return h.hexdigest()


def _folder_label(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:60] or "passages"


def store_folder(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 label: str | None = None, fingerprint: str | None = None) -> Path:
    """Where the store of the TSV at `path` lives (whether built yet or not)."""
    fp = fingerprint or source_fingerprint(path)
    name = _folder_label(label or Path(path).stem)
    return Path(default_cache_dir(cache_dir)) / "passages" / f"{name}-{fp[:16]}"


class _Column:
    """One string column while building: blob bytes appended to `<name>.bin`, row end offsets
    to a raw int64 file turned into `<name>.offsets.npy` by `finish` (nothing held per row)."""

    def __init__(self, folder: Path, name: str):
        self.folder, self.name = folder, name
        self.blob = open(folder / f"{name}.bin", "wb")
        self.ends = open(folder / f"{name}.ends.tmp", "wb")
        self.size = 0
        self.sums = BlockSums()   # of the blob, as written

    def append(self, rows: list[bytes]) -> None:
        joined = b"".join(rows)
        self.blob.write(joined)
        self.sums.update(joined)
        ends = np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))) + self.size
        self.ends.write(ends.tobytes())
        self.size = int(ends[-1]) if len(rows) else self.size

    def finish(self, rows: int) -> None:
        self.blob.close()
        self.ends.close()
        raw = self.folder / f"{self.name}.ends.tmp"
        out = np.lib.format.open_memmap(self.folder / f"{self.name}.offsets.npy", mode="w+",
                                        dtype=np.int64, shape=(rows + 1,))
        out[0] = 0
        if rows:
            ends = np.memmap(raw, dtype=np.int64, mode="r", shape=(rows,))
            for a in range(0, rows, 1 << 22):
                out[1 + a:1 + min(a + (1 << 22), rows)] = ends[a:a + (1 << 22)]
            del ends
        out.flush()
        del out
        raw.unlink()

    def checksums(self) -> dict[str, Any]:
        """The block checksum records of the finished column's two files."""
        return {"blob": self.sums.record(), "offsets": record_file(self.folder / f"{self.name}.offsets.npy")}

    def close(self) -> None:
        self.blob.close()
        self.ends.close()


def _fsync_folder(folder: Path) -> None:
    for p in folder.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())


def build_store(source: str | os.PathLike, folder: str | os.PathLike, *, fingerprint: str | None = None,
                show_progress: bool = True) -> "PassageStore":
    """Parse the TSV at `source` into a store at `folder` (must not exist), through a temporary
    sibling folder renamed when complete. Memory stays at one block of `BUILD_BLOCK` rows."""
    source, folder = Path(source), Path(folder)
    fp = fingerprint or source_fingerprint(source)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".building", dir=folder.parent))
    bar = None
    try:
        t0 = time.perf_counter()
        cols = {c: _Column(tmp, c) for c in COLUMNS}
        size = max(source.stat().st_size, 1)
        if show_progress:
            bar = progress(total=None, desc=f"passage store {folder.name}", unit="passage", unit_scale=True)
        rows = consumed = 0
        buf: dict[str, list[bytes]] = {c: [] for c in COLUMNS}
        try:
            for p in iter_passages(source):
                buf["pids"].append(p.pid.encode("utf-8"))
                buf["titles"].append(p.title.encode("utf-8"))
                buf["texts"].append(p.text.encode("utf-8"))
                if len(buf["pids"]) >= BUILD_BLOCK:
                    consumed += _flush(cols, buf)
                    rows += BUILD_BLOCK
                    if bar is not None:  # rows still to come, estimated from the bytes read so far
                        bar.total = max(rows, int(rows * size / max(consumed, 1)))
                        bar.update(BUILD_BLOCK)
            tail = len(buf["pids"])
            if tail:
                _flush(cols, buf)
                rows += tail
                if bar is not None:
                    bar.total = rows
                    bar.update(tail)
            for c in cols.values():
                c.finish(rows)
        finally:
            for c in cols.values():
                c.close()
        meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "source": str(source.resolve()),
                "fingerprint": fp, "rows": rows, "build_seconds": round(time.perf_counter() - t0, 3),
                "columns": {c: {"offsets": f"{c}.offsets.npy", "blob": f"{c}.bin",
                                "checksums": cols[c].checksums()} for c in COLUMNS}}
        (tmp / META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        _fsync_folder(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp's 0o700 would hide the store from other users of a shared cache
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    return PassageStore.open(folder)


def _flush(cols: dict[str, _Column], buf: dict[str, list[bytes]]) -> int:
    """Write the buffered rows; return about how many TSV bytes they took (for the estimate)."""
    taken = sum(len(b) for rows in buf.values() for b in rows) + 5 * len(buf["pids"])  # tabs, quotes, newline
    for c, rows in buf.items():
        cols[c].append(rows)
        rows.clear()
    return taken


class _Utf8Column:
    """One memory-mapped UTF-8 column: row i is blob[offsets[i]:offsets[i+1]] (the layout of the
    KG's string tables, read here without them: data sits below the KG layer). With `checked`
    (the offsets' and the blob's `CheckedFile`), every read first verifies the blocks it touches."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray, path: Path | None = None,
                 checked: tuple[CheckedFile, CheckedFile] | None = None):
        self._blob, self._offsets, self._path = blob, offsets, path
        self._checked = checked
        self._offsets_at = int(getattr(offsets, "offset", 0))   # where the .npy's data starts

    def _verify(self, a: int, b: int) -> tuple[int, int]:
        """Verify the offsets of rows [a, b) and return where their bytes lie in the blob, verified too."""
        if self._checked is not None:
            self._checked[0].check(self._offsets_at + 8 * a, self._offsets_at + 8 * (b + 1))
        lo, hi = int(self._offsets[a]), int(self._offsets[b])
        if self._checked is not None:
            self._checked[1].check(lo, hi)
        return lo, hi

    def _decode(self, raw: bytes, row: int, at: int) -> str:
        """Row `row`'s bytes (from blob offset `at`) as text; a byte that is not UTF-8 (a damaged or
        edited blob: the build writes UTF-8 only) is a DataFormatError naming the blob and the row."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataFormatError(self._path or "passage store column", None,
                                  "UTF-8 text in every row (as the build wrote it; delete the store's folder "
                                  "to build it again)",
                                  f"row {row}: byte 0x{raw[exc.start]:02x} at blob offset {at + exc.start} is not UTF-8"
                                  ) from None

    def __getitem__(self, i: int) -> str:
        a, b = self._verify(i, i + 1)
        return self._decode(bytes(self._blob[a:b]), i, a)

    def decode_range(self, a: int, b: int) -> list[str]:
        """Rows [a, b): one read of their bytes, one decode per row."""
        if b > a:
            self._verify(a, b)
        offs = np.asarray(self._offsets[a:b + 1], dtype=np.int64)
        raw = bytes(self._blob[int(offs[0]):int(offs[-1])]) if b > a else b""
        rel = (offs - offs[0]).tolist()
        return [self._decode(raw[rel[k]:rel[k + 1]], a + k, int(offs[0]) + rel[k]) for k in range(b - a)]


def _first_decrease(offsets: np.ndarray, block: int = 1 << 22) -> int | None:
    """The first i with offsets[i + 1] < offsets[i], or None: read in blocks (21M rows of a
    Wikipedia store are 168 MB of offsets), one vectorised comparison each."""
    for start in range(0, max(len(offsets) - 1, 0), block):
        part = np.asarray(offsets[start:start + block + 1])
        down = np.flatnonzero(part[1:] < part[:-1])
        if down.size:
            return start + int(down[0])
    return None


def _remedy(folder: Path, meta: dict[str, Any]) -> str:
    return (f"the store is damaged: delete {folder} and rerun; the store is built again from "
            f"{meta.get('source', 'its TSV')}")


def _load_column(folder: Path, name: str, rows: int, meta: dict[str, Any]) -> _Utf8Column:
    offsets_path, blob_path = folder / f"{name}.offsets.npy", folder / f"{name}.bin"
    remedy = _remedy(folder, meta)
    column = meta.get("columns", {}).get(name) if isinstance(meta.get("columns"), dict) else None
    sums = column.get("checksums") if isinstance(column, dict) else None
    if not isinstance(sums, dict):
        raise DataFormatError(folder / META, None, f"block checksums of column {name!r} ({remedy})", repr(sums))
    checked = (CheckedFile(offsets_path, sums.get("offsets"), remedy, folder / META),
               CheckedFile(blob_path, sums.get("blob"), remedy, folder / META))
    for c in checked:
        c.check_size()
    try:
        offsets = np.load(offsets_path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataFormatError(offsets_path, None, "an int64 .npy offsets array written by the passage store",
                              str(exc)) from None
    if offsets.dtype != np.int64 or offsets.shape != (rows + 1,):
        raise DataFormatError(offsets_path, None, f"int64 offsets of shape ({rows + 1},)",
                              f"{offsets.dtype} {offsets.shape}")
    try:
        size = blob_path.stat().st_size
    except OSError as exc:
        raise DataFormatError(blob_path, None, "the UTF-8 blob of the passage store", str(exc)) from None
    if int(offsets[0]) != 0 or int(offsets[-1]) != size:
        raise DataFormatError(blob_path, None, f"{int(offsets[-1])} bytes (the last offset)", f"{size} bytes")
    bad = _first_decrease(offsets)
    if bad is not None:   # a damaged offset inside the range would cut or empty rows silently
        raise DataFormatError(offsets_path, None, "non-decreasing row offsets",
                              f"offset {bad + 1} ({int(offsets[bad + 1])}) below offset {bad} ({int(offsets[bad])})")
    blob = np.memmap(blob_path, dtype=np.uint8, mode="r") if size else np.empty(0, dtype=np.uint8)
    return _Utf8Column(blob, offsets, blob_path, checked)


class PassageStore(Sequence):
    """Read-only passages by row: `len`, `store[i]` (a Passage built on access), slices, `take`,
    and `iter_texts` (the `title\\ntext` embedding texts in blocks)."""

    def __init__(self, folder: Path, meta: dict[str, Any], columns: dict[str, _Utf8Column]):
        self.folder = folder
        self.meta = meta
        self._pids, self._titles, self._texts = (columns[c] for c in COLUMNS)
        self._n = int(meta["rows"])

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "PassageStore":
        """Memory-map a store folder; DataFormatError naming the file if anything is off."""
        folder = Path(folder)
        meta_path = folder / META
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise DataFormatError(meta_path, None, "a passage store folder with meta.json", str(exc)) from None
        except ValueError as exc:
            raise DataFormatError(meta_path, None, "a JSON object", str(exc)) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME or meta.get("version") != FORMAT_VERSION:
            got = f"{meta.get('format')!r} version {meta.get('version')}" if isinstance(meta, dict) else repr(meta)
            old = isinstance(meta, dict) and meta.get("format") == FORMAT_NAME and meta.get("version") == 1
            raise DataFormatError(meta_path, None, f"format {FORMAT_NAME!r} version {FORMAT_VERSION}"
                                  + (f" (version 1 was written before block checksums: delete {folder} and rerun; "
                                     f"the store is built again from {meta.get('source')})" if old else ""), got)
        rows = int(meta.get("rows", -1))
        if rows < 0:
            raise DataFormatError(meta_path, None, "a row count 'rows' >= 0", str(meta.get("rows")))
        return cls(folder, meta, {c: _load_column(folder, c, rows, meta) for c in COLUMNS})

    # --- identity ---------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """The source TSV's fingerprint (`source_fingerprint`)."""
        return str(self.meta["fingerprint"])

    @property
    def texts_key(self) -> str:
        """What identifies `iter_texts`' output: the embedding-cache key of this corpus."""
        return f"passages:{self.fingerprint}:{TEXT_FORM}"

    # --- access -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def _row(self, i: int) -> int:
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"passage row {i} out of range [0, {self._n})")
        return i

    @overload
    def __getitem__(self, i: int) -> Passage: ...

    @overload
    def __getitem__(self, i: slice) -> list[Passage]: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self.take(range(*i.indices(self._n)))
        i = self._row(i)
        return Passage(pid=self._pids[i], text=self._texts[i], title=self._titles[i])

    def take(self, rows: Any) -> list[Passage]:
        """The passages at `rows` (ints, numpy array or range), in that order."""
        return [self[int(r)] for r in (rows.tolist() if isinstance(rows, np.ndarray) else rows)]

    def pid(self, i: int) -> str:
        return self._pids[self._row(i)]

    def __repr__(self) -> str:
        return f"PassageStore({str(self.folder)!r}, rows={self._n:,})"

    def iter_texts(self, block: int = 1024, start: int = 0, stop: int | None = None) -> Iterator[list[str]]:
        """Lists of up to `block` embedding texts (`Passage.as_text`) for rows [start, stop)."""
        stop = self._n if stop is None else min(stop, self._n)
        for a in range(max(start, 0), stop, block):
            b = min(a + block, stop)
            titles, texts = self._titles.decode_range(a, b), self._texts.decode_range(a, b)
            yield [f"{t}\n{x}" if t else x for t, x in zip(titles, texts)]


def open_passage_store(source: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
                       label: str | None = None, show_progress: bool = True) -> PassageStore:
    """The store of the psgs_w100-format TSV at `source`: opened if built for this fingerprint,
    else built once (under a file lock: concurrent processes wait and open it). A stored folder
    that fails to open is named in a warning and rebuilt."""
    from filelock import FileLock

    source = check_file(Path(source).expanduser(), f"a psgs_w100 TSV: header 'id<TAB>text<TAB>title', then {FORM}")
    fp = source_fingerprint(source)
    folder = store_folder(source, cache_dir, label, fp)
    if (folder / META).exists():
        try:
            store = PassageStore.open(folder)
            log.info("opened passage store %s (%d passages of %s, built once)", folder, len(store), source.name)
            return store
        except DataFormatError:
            pass  # looked at again under the lock
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if folder.exists():
            try:
                return PassageStore.open(folder)
            except DataFormatError as exc:
                log.warning("passage store %s is damaged (%s); rebuilding it", folder, exc)
                shutil.rmtree(folder)
        store = build_store(source, folder, fingerprint=fp, show_progress=show_progress)
        log.info("built passage store %s (%d passages) in %.1f s; later runs open it", folder, len(store),
                 float(store.meta.get("build_seconds", 0.0)))
        return store
