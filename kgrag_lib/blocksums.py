"""Per-block crc32 checksums of a store's files: recorded when a file is written, checked when
it is opened (every block) or read (each block the first time a read touches it).

The stores (the passage store, a saved KG, a saved faiss index) hold hours of work, and a byte
changed inside one (a bad disk, a partial copy, a hand edit) is read back as a wrong passage, a
wrong triple or a wrong neighbour with no error: sizes and first/last offsets only catch
truncation. Each file's record holds its size, its block size and the crc32 of every block as
one hex string (8 characters a block), so that it sits in the store's JSON header and is written
with it, atomically. A block that fails is named in one line with the store's remedy.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .errors import DataFormatError

BLOCK_BYTES = 1 << 16     # lazily checked files: a first read of one row hashes ~64 KiB (~50 µs)
FULL_BLOCK_BYTES = 1 << 20  # files checked whole on open: fewer, larger blocks
_READ = 1 << 22           # bytes read per call by record_file


class BlockSums:
    """crc32 of consecutive `block_bytes` blocks of a byte stream fed in any chunking."""

    def __init__(self, block_bytes: int = BLOCK_BYTES):
        self.block_bytes = block_bytes
        self.crcs: list[int] = []
        self.size = 0
        self._crc = self._fill = 0

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        i = 0
        while i < len(view):
            take = min(self.block_bytes - self._fill, len(view) - i)
            self._crc = zlib.crc32(view[i:i + take], self._crc)
            self._fill += take
            i += take
            if self._fill == self.block_bytes:
                self.crcs.append(self._crc)
                self._crc = self._fill = 0
        self.size += len(view)

    def record(self) -> dict[str, Any]:
        """The record of everything fed so far (call once, at the end)."""
        if self._fill:
            self.crcs.append(self._crc)
            self._crc = self._fill = 0
        return {"bytes": self.size, "block_bytes": self.block_bytes,
                "crc32": np.asarray(self.crcs, dtype=">u4").tobytes().hex()}


def record_file(path: str | os.PathLike, block_bytes: int = BLOCK_BYTES) -> dict[str, Any]:
    """The checksum record of the file at `path` as it is now (read once, after writing it)."""
    sums = BlockSums(block_bytes)
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            sums.update(chunk)
    return sums.record()


class CheckedFile:
    """One file of a store and its record: `check(a, b)` verifies the blocks holding bytes [a, b)
    that no read verified before (each block is hashed at most once per process); `check_all()`
    verifies every block. `remedy` ends each error: what the user should do (rebuild how)."""

    def __init__(self, path: str | os.PathLike, record: Any, remedy: str, header: str | os.PathLike):
        self.path, self.remedy = Path(path), remedy
        try:
            self.size, self.block_bytes = int(record["bytes"]), int(record["block_bytes"])
            self.crcs = np.frombuffer(bytes.fromhex(record["crc32"]), dtype=">u4")
        except (TypeError, KeyError, ValueError) as exc:
            raise DataFormatError(header, None, f"a checksum record {{bytes, block_bytes, crc32}} for "
                                  f"{self.path.name} ({remedy})", f"{type(exc).__name__}: {exc}") from None
        if self.block_bytes <= 0 or self.size < 0 or len(self.crcs) != -(-self.size // self.block_bytes):
            raise DataFormatError(header, None, f"{-(-self.size // max(self.block_bytes, 1))} block checksums for "
                                  f"{self.path.name} ({remedy})", f"{len(self.crcs)}")
        self._done = bytearray(len(self.crcs))   # 1: verified by this process
        self._view: np.ndarray | None = None

    def check_size(self) -> None:
        """Refuse a file whose size is not the recorded one (truncated, appended to, replaced)."""
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            raise DataFormatError(self.path, None, f"a file of the store ({self.remedy})", str(exc)) from None
        if size != self.size:
            raise DataFormatError(self.path, None, f"{self.size} bytes as written ({self.remedy})", f"{size} bytes")

    def _verify(self, block: int) -> None:
        if self._view is None:
            self._view = np.memmap(self.path, dtype=np.uint8, mode="r") if self.size else np.empty(0, np.uint8)
        a = block * self.block_bytes
        got = zlib.crc32(self._view[a:a + self.block_bytes])
        if got != int(self.crcs[block]):
            b = min(a + self.block_bytes, self.size)
            raise DataFormatError(self.path, None, f"block {block} (bytes {a}-{b - 1}) as written, crc32 "
                                  f"{int(self.crcs[block]):08x} ({self.remedy})", f"crc32 {got:08x}: changed since written")
        self._done[block] = 1

    def check(self, start: int, stop: int) -> None:
        """Verify the blocks holding bytes [start, stop) not verified yet (read through a memory map)."""
        if stop > start:
            done = self._done
            for b in range(start // self.block_bytes, (stop - 1) // self.block_bytes + 1):
                if not done[b]:
                    self._verify(b)

    def check_rows(self, offset: int, row_bytes: int, rows: np.ndarray) -> None:
        """Verify the blocks holding fixed-size rows `rows` (ints in [0, n)) of a table whose row 0
        starts at byte `offset`: a scattered read (a re-ranking's candidates) hashes only its blocks."""
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if not len(rows):
            return
        first = (offset + rows * row_bytes) // self.block_bytes
        last = (offset + (rows + 1) * row_bytes - 1) // self.block_bytes
        blocks = np.unique(np.concatenate([first, last]))
        if (last - first).max(initial=0) > 1:   # rows longer than a block: every block between
            blocks = np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last)]))
        todo = blocks[np.frombuffer(self._done, dtype=np.uint8)[blocks] == 0]
        for b in todo.tolist():
            self._verify(b)

    def check_all(self) -> None:
        """Verify every block (the size first)."""
        self.check_size()
        for b in range(len(self.crcs)):
            self._verify(b)
        self._view = None   # the map is not kept: a whole-file check is done once

    @property
    def verified_bytes(self) -> int:
        """Bytes in the blocks verified so far (about: the last block counts whole)."""
        return sum(self._done) * self.block_bytes


def check_files(folder: str | os.PathLike, records: Mapping[str, Any], remedy: str,
                header: str | os.PathLike) -> None:
    """Verify every block of every file named in `records` (file name -> record) under `folder`."""
    if not isinstance(records, Mapping):
        raise DataFormatError(header, None, f"a 'blocks' object of per-file checksum records ({remedy})",
                              type(records).__name__)
    for name, rec in records.items():
        CheckedFile(Path(folder) / name, rec, remedy, header).check_all()
