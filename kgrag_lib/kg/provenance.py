"""Which source passages each triple came from (KGs that TCR-QF and SA-RAG extract from documents).

Stored as a CSR map triple id -> passage index, with passage ids in a string table; triples added
later (or re-found in another passage) go to a side dict until `compact()`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from .csr import expand_ranges, sorted_unique
from .strings import StringTable


def _unique_pairs(tids: np.ndarray, pids: np.ndarray, num_passages: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (triple, passage) pairs sorted by triple then passage."""
    key = sorted_unique(tids * max(num_passages, 1) + pids)
    return key // max(num_passages, 1), key % max(num_passages, 1)


class Provenance:
    def __init__(self, passages: StringTable | None = None, indptr: np.ndarray | None = None,
                 ids: np.ndarray | None = None):
        self.passages = passages if passages is not None else StringTable()
        self.indptr = indptr if indptr is not None else np.zeros(1, dtype=np.int64)
        self.ids = ids if ids is not None else np.empty(0, dtype=np.int32)
        self._extra: dict[int, set[int]] = {}

    @classmethod
    def from_pairs(cls, triple_ids: np.ndarray, passage_ids: list[str], num_triples: int) -> "Provenance":
        """Build from aligned (triple id, passage id string) pairs; duplicates are merged."""
        prov = cls()
        if passage_ids:
            import pandas as pd

            codes, uniques = pd.factorize(np.asarray(passage_ids, dtype=object))
            prov.passages = StringTable.from_strings(uniques.tolist())
            tids, pids = _unique_pairs(np.asarray(triple_ids, dtype=np.int64), codes.astype(np.int64), len(uniques))
            prov.ids = pids.astype(np.int32)
            counts = np.bincount(tids, minlength=num_triples)
        else:
            counts = np.zeros(num_triples, dtype=np.int64)
        prov.indptr = np.zeros(num_triples + 1, dtype=np.int64)
        np.cumsum(counts, out=prov.indptr[1:])
        return prov

    @property
    def nbytes(self) -> int:
        return self.passages.nbytes + self.indptr.nbytes + self.ids.nbytes

    def passage_index(self, pid: str) -> int:
        hits = self.passages.find(pid)
        return hits[0] if hits else self.passages.append(pid)

    def add(self, tid: int, pids: Iterable[str]) -> None:
        for pid in pids:
            self._extra.setdefault(int(tid), set()).add(self.passage_index(pid))

    def of_triples(self, tids: np.ndarray) -> list[str]:
        """Sorted distinct passage ids of the given triples."""
        tids = np.asarray(tids, dtype=np.int64)
        base = tids[tids < self.indptr.size - 1]
        idx = set(np.asarray(self.ids)[expand_ranges(self.indptr[base], self.indptr[base + 1])].tolist())
        for t in tids.tolist():
            idx.update(self._extra.get(t, ()))
        return sorted(self.passages[i] for i in idx)

    def compact(self, num_triples: int) -> None:
        if not self._extra and self.indptr.size - 1 == num_triples:
            return
        n_base = self.indptr.size - 1
        base_t = np.repeat(np.arange(n_base, dtype=np.int64), np.diff(np.asarray(self.indptr)))
        side = [(t, p) for t, ps in self._extra.items() for p in ps]
        side_t = np.array([t for t, _ in side], dtype=np.int64)
        side_p = np.array([p for _, p in side], dtype=np.int64)
        tids, pids = _unique_pairs(np.concatenate([base_t, side_t]),
                                   np.concatenate([np.asarray(self.ids, dtype=np.int64), side_p]), len(self.passages))
        self.ids = pids.astype(np.int32)
        self.indptr = np.zeros(num_triples + 1, dtype=np.int64)
        np.cumsum(np.bincount(tids, minlength=num_triples), out=self.indptr[1:])
        self._extra = {}

    def save(self, directory: Path, num_triples: int) -> list[str]:
        self.compact(num_triples)
        np.save(directory / "provenance.indptr.npy", np.asarray(self.indptr), allow_pickle=False)
        np.save(directory / "provenance.ids.npy", np.asarray(self.ids), allow_pickle=False)
        return ["provenance.indptr.npy", "provenance.ids.npy", *self.passages.save(directory, "passages")]

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> "Provenance":
        mode = "r" if mmap else None
        return cls(StringTable.load(directory, "passages", mmap),
                   np.load(directory / "provenance.indptr.npy", mmap_mode=mode),
                   np.load(directory / "provenance.ids.npy", mmap_mode=mode))
