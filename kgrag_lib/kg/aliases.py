"""Per-entity alias lists stored as one string table plus a CSR row pointer.

Wikidata5M gives most entities several aliases; a list of lists would cost gigabytes, this costs
the UTF-8 bytes plus 8 bytes per alias. Replacements made after construction (`set`) sit in a
dict until `compact()`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .strings import StringTable


class Aliases:
    """Alias strings of entity `e` are rows `indptr[e]:indptr[e+1]` of `table`, unless overridden."""

    def __init__(self, table: StringTable | None = None, indptr: np.ndarray | None = None):
        self.table = table if table is not None else StringTable()
        self.indptr = indptr if indptr is not None else np.zeros(1, dtype=np.int64)
        self._over: dict[int, list[str]] = {}
        self._side_exact: dict[str, set[int]] = {}
        self._side_folded: dict[str, set[int]] = {}

    @classmethod
    def from_lists(cls, lists: Sequence[Sequence[str]]) -> "Aliases":
        lens = np.fromiter((len(a) for a in lists), dtype=np.int64, count=len(lists))
        indptr = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        return cls(StringTable.from_strings(s for a in lists for s in a), indptr)

    @classmethod
    def from_mapping(cls, mapping: Mapping[int, Sequence[str]], num_entities: int) -> "Aliases":
        lists: list[Sequence[str]] = [()] * num_entities
        for e, names in mapping.items():
            lists[int(e)] = list(names)
        return cls.from_lists(lists)

    @property
    def base_entities(self) -> int:
        return self.indptr.size - 1

    @property
    def nbytes(self) -> int:
        return self.table.nbytes + self.indptr.nbytes

    def get(self, e: int) -> list[str]:
        if e in self._over:
            return list(self._over[e])
        if e >= self.base_entities:
            return []
        return [self.table[i] for i in range(int(self.indptr[e]), int(self.indptr[e + 1]))]

    def set(self, e: int, names: Sequence[str]) -> None:
        self._over[e] = [str(n) for n in names]
        for n in self._over[e]:
            self._side_exact.setdefault(n, set()).add(e)
            self._side_folded.setdefault(n.lower(), set()).add(e)

    def find(self, s: str, folded: bool = False) -> list[int]:
        """Entities having `s` among their aliases (ignoring case if `folded`), ascending."""
        rows = self.table.find_folded(s) if folded else self.table.find(s)
        found: set[int] = set()
        if rows:
            ents = np.searchsorted(np.asarray(self.indptr), np.asarray(rows), side="right") - 1
            found.update(int(e) for e in ents if int(e) not in self._over)
        key = s.lower() if folded else s
        side = self._side_folded if folded else self._side_exact
        for e in side.get(key, ()):
            current = self._over.get(e, ())
            if any((a.lower() if folded else a) == key for a in current):
                found.add(e)
        return sorted(found)

    def compact(self, num_entities: int) -> None:
        """Fold overrides into the arrays and extend the row pointer to `num_entities`."""
        if not self._over and self.base_entities == num_entities:
            return
        if not self._over:  # only new entities (without aliases): extend the row pointer
            tail = np.full(num_entities - self.base_entities, self.indptr[-1], dtype=np.int64)
            self.indptr = np.concatenate([np.asarray(self.indptr, dtype=np.int64), tail])
            return
        indptr = np.asarray(self.indptr, dtype=np.int64)
        row_entity = np.repeat(np.arange(self.base_entities, dtype=np.int64), np.diff(indptr))
        over_ids = np.fromiter(sorted(self._over), dtype=np.int64, count=len(self._over))
        keep = np.flatnonzero(~np.isin(row_entity, over_ids))
        side = [(e, a) for e in sorted(self._over) for a in self._over[e]]
        work = StringTable(self.table._blob, self.table._offsets)  # a fresh view to append to
        side_rows = np.array([work.append(a) for _, a in side], dtype=np.int64)
        side_ents = np.array([e for e, _ in side], dtype=np.int64)
        rows = np.concatenate([keep, side_rows])
        ents = np.concatenate([row_entity[keep], side_ents])
        order = np.argsort(ents, kind="stable")
        self.table = work.take(rows[order])
        counts = np.bincount(ents, minlength=num_entities)[:num_entities]
        self.indptr = np.zeros(num_entities + 1, dtype=np.int64)
        np.cumsum(counts, out=self.indptr[1:])
        self._over, self._side_exact, self._side_folded = {}, {}, {}

    def save(self, directory: Path, num_entities: int) -> list[str]:
        self.compact(num_entities)
        np.save(directory / "aliases.indptr.npy", np.asarray(self.indptr), allow_pickle=False)
        return ["aliases.indptr.npy", *self.table.save(directory, "aliases")]

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> "Aliases":
        indptr = np.load(directory / "aliases.indptr.npy", mmap_mode="r" if mmap else None)
        return cls(StringTable.load(directory, "aliases", mmap), indptr)
