"""The one knowledge-graph store every method uses.

Triples are three int32 arrays (heads, rels, tails) over integer entity/relation ids. At build
time they are de-duplicated and sorted by (head, relation, tail), so a head's out-edges are one
contiguous range (`out_indptr`, no permutation needed) and in-edges are reached through one
int32 permutation (`in_perm`, `in_indptr`): about 18 bytes per triple for the triples plus both
directions. A multi-hop neighbourhood is a BFS by frontier in which each hop gathers all frontier
ranges with one vectorized numpy call; tiny neighbourhoods (a few dozen triples), where numpy's
per-call overhead would dominate, run the same BFS on Python ints. Results are sorted unique
triple ids (int32 below 2**31 triples).

Triples added later (TCR-QF enriches its KG while reasoning) are appended with new ids and kept
in a small sorted delta index searched alongside the CSR; once the delta outgrows a fraction of
the indexed part, the CSR is rebuilt (amortized O(log n) per added triple). Triple ids never
change once given out.

`save` writes a directory of .npy files plus `header.json`, which records a crc32 of every MiB
of every file (`blocksums`); `load(mmap=True)` memory-maps them after checking the id arrays
(`store_check.check_arrays`) and every block of every file, so a byte changed anywhere, even one
that keeps every id valid, is refused in one line naming the file and the block (bench/
blocksums_bench.py measures what that costs). Stores of version 1, written before these
checksums, are refused; the KG cache rebuilds its own. The first mutation of a loaded store
copies the triple arrays into memory (the files are never written through the map).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import tempfile
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..blocksums import FULL_BLOCK_BYTES, check_files, record_file
from ..errors import DataFormatError, KgragError
from ..records import Triple
from .aliases import Aliases
from .csr import (difference_sorted, expand_ranges, index_dtype, indptr_from_sorted_keys, is_sorted,
                  sorted_unique, stable_argsort)
from .provenance import Provenance
from .store_check import check_arrays
from .strings import StringTable

FORMAT_NAME = "kgrag-kgstore"
FORMAT_VERSION = 2  # 2: per-block checksums of every file in header.json
DIRECTIONS = ("out", "in", "both")
_MERGE_MIN = 4096  # delta size below which the CSR is never rebuilt
_MERGE_FRACTION = 16  # rebuild when the delta exceeds 1/16 of the indexed triples
_FUZZY_ALL_LIMIT = 60_000  # up to this many names, fuzzy suggestions look at all of them
_FUZZY_CANDIDATES = 20_000
_SLICE_KEYS = 8  # gather up to this many entities' ranges as slices ...
_SLICE_MIN_AVG = 64  # ... or more when their ranges average this many triples
_FEW_RUNS = 4  # final sort by timsort when the result is at most this many ascending runs
_SMALL_TRIPLES = 128  # neighbourhoods up to this size take the scalar path (numpy call overhead dominates)
_SMALL_FRONTIER = 16
_UNSORTED = 1 << 30


class UnknownEntityError(KgragError, KeyError):
    """A name that is not in the KG; the message lists the closest names."""

    def __init__(self, name: str, suggestions: Sequence[str], kind: str = "entity"):
        self.name = name
        self.suggestions = list(suggestions)
        msg = f"unknown {kind} {name!r}"
        msg += f"; did you mean: {', '.join(repr(s) for s in self.suggestions)}?" if self.suggestions else \
            f"; no {kind} with a similar name"
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0])


@dataclass
class _Adjacency:
    """CSR over triples [0, n_indexed): the triples keyed by entity e are `perm[indptr[e]:indptr[e+1]]`."""

    indptr: np.ndarray
    perm: np.ndarray | None  # None: the triples themselves are sorted by this key

    @property
    def num_keys(self) -> int:
        return self.indptr.size - 1

    def gather(self, keys: np.ndarray) -> tuple[np.ndarray, int]:
        """Triple ids keyed by any of the sorted `keys`, and how many ascending runs they form.

        Few or long ranges are copied as slices (a memcpy each; each bucket is ascending); many
        short ranges are expanded into positions with one vectorized call and gathered at once.
        Run count `_UNSORTED` means no useful order.
        """
        if keys.size and keys[-1] >= self.num_keys:  # entities created after the index was built
            keys = keys[keys < self.num_keys]
        if keys.size == 0:
            return np.empty(0, dtype=np.intp), 0
        starts, ends = self.indptr[keys], self.indptr[keys + 1]
        if keys.size <= _SLICE_KEYS or int(ends.sum() - starts.sum()) > _SLICE_MIN_AVG * keys.size:
            bounds = [(a, b) for a, b in zip(starts.tolist(), ends.tolist()) if b > a]
            if self.perm is None:  # ascending keys give ascending, adjacent-or-not ranges: one run
                parts = [np.arange(a, b, dtype=np.intp) for a, b in bounds]
                runs = 1
            else:
                parts = [self.perm[a:b] for a, b in bounds]
                runs = len(parts)
            if not parts:
                return np.empty(0, dtype=np.intp), 0
            return (parts[0] if len(parts) == 1 else np.concatenate(parts)), runs
        pos = expand_ranges(starts, ends, np.intp)
        return (pos, 1) if self.perm is None else (self.perm[pos], _UNSORTED)

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + (0 if self.perm is None else self.perm.nbytes)


@dataclass
class _Delta:
    """Sorted keys of triples appended since the CSR was built, searched by binary search."""

    keys: np.ndarray
    ids: np.ndarray

    @classmethod
    def build(cls, keys: np.ndarray, first_id: int) -> "_Delta":
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], order.astype(np.int64) + first_id)

    def gather(self, keys: np.ndarray) -> np.ndarray:
        lo = np.searchsorted(self.keys, keys, side="left")
        hi = np.searchsorted(self.keys, keys, side="right")
        return self.ids[expand_ranges(lo, hi)]


def _split_triple(t: Any) -> tuple[str, str, str]:
    if isinstance(t, Triple):
        return t.s, t.r, t.o
    s, r, o = t
    return str(s), str(r), str(o)


def _provenance_lists(provenance: Any, n: int) -> list[tuple[str, ...]] | None:
    """Normalize provenance to one tuple of passage ids per triple.

    Accepts one entry per triple (a passage id, None, or a list of passage ids), or a single
    string meaning "all of these triples come from this passage".
    """
    if provenance is None:
        return None
    if isinstance(provenance, str):
        return [(provenance,)] * n
    out: list[tuple[str, ...]] = []
    for p in provenance:
        if p is None:
            out.append(())
        elif isinstance(p, str):
            out.append((p,))
        else:
            out.append(tuple(str(x) for x in p))
    if len(out) != n:
        raise ValueError(f"provenance: expected one entry per triple ({n}), got {len(out)}")
    return out


def _as_table(names: Any) -> StringTable:
    if isinstance(names, StringTable):
        return names
    return StringTable.from_strings(str(s) for s in names)


def _dedupe_sorted(h: np.ndarray, r: np.ndarray, t: np.ndarray, num_e: int, num_r: int,
                   want_inverse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Unique triples sorted by (head, relation, tail) and, if asked, each input's output index."""
    if h.size == 0:
        z = np.empty(0, dtype=np.int32)
        return z, z, z, (np.empty(0, dtype=np.int64) if want_inverse else None)
    ne, nr = max(num_e, 1), max(num_r, 1)
    if ne * ne * nr < 2**62:  # pack into one int64 key: one fast sort instead of a lexsort
        key = h.astype(np.int64)
        key *= nr
        key += r
        key *= ne
        key += t
        inverse = None
        if want_inverse:
            order = np.argsort(key, kind="stable")
            key = key[order]
        else:
            key.sort()
        keep = np.ones(key.size, dtype=bool)
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        if want_inverse:
            inverse = np.empty(key.size, dtype=np.int64)
            inverse[order] = np.cumsum(keep) - 1
        uniq = key[keep]
        del key
        tt = (uniq % ne).astype(np.int32)
        uniq //= ne
        rr = (uniq % nr).astype(np.int32)
        uniq //= nr
        return uniq.astype(np.int32), rr, tt, inverse
    order = np.lexsort((t, r, h))
    hs, rs, ts = h[order], r[order], t[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (hs[1:] != hs[:-1]) | (rs[1:] != rs[:-1]) | (ts[1:] != ts[:-1])
    inverse = None
    if want_inverse:
        inverse = np.empty(order.size, dtype=np.int64)
        inverse[order] = np.cumsum(new) - 1
    return hs[new].astype(np.int32), rs[new].astype(np.int32), ts[new].astype(np.int32), inverse


def _is_store_dir(path: Path) -> bool:
    try:
        return json.loads((path / "header.json").read_text(encoding="utf-8")).get("format") == FORMAT_NAME
    except (OSError, ValueError, AttributeError):
        return False


def folder_fingerprint(path: Path, header: bytes, files: Sequence[str]) -> str:
    """sha256 hex over a saved store's header bytes and each listed file's name, size and mtime_ns."""
    h = hashlib.sha256(b"kgstore-folder\0" + header)
    for name in sorted(files):
        st = (path / name).stat()
        h.update(f"\0{name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()


def rebuild_hint(path: Path) -> str:
    """What to do with a saved store that cannot be used: rebuild it, as its kind of folder is rebuilt."""
    return (f"rebuild it: delete {path} and rerun if it is a build in the KG cache, else "
            f"`kgrag kg build --triples FILE (or --kg SPEC) --out {path} --overwrite`")


class KGStore:
    """Integer-id triples with CSR adjacency both ways, names, aliases, descriptions and provenance.

    Build with `from_triples` (names) or `from_id_arrays` (ids, Wikidata5M scale); open a saved
    store with `load`. Not meant for concurrent writers; queries and additions are serialized
    by an internal lock.
    """

    def __init__(self, heads: np.ndarray, rels: np.ndarray, tails: np.ndarray, names: StringTable,
                 relations: StringTable, out_adj: _Adjacency, in_adj: _Adjacency, *,
                 aliases: Aliases | None = None, descriptions: StringTable | None = None,
                 provenance: Provenance | None = None):
        """Internal: use `from_triples`, `from_id_arrays` or `load`."""
        self._h, self._r, self._t = heads, rels, tails
        self._n = int(heads.size)
        self._owned = False  # True once the triple arrays are private growable buffers
        self._names = names
        self._relations = relations
        self._out, self._in = out_adj, in_adj
        self._n_indexed = self._n
        self._delta_out: _Delta | None = None
        self._delta_in: _Delta | None = None
        self._delta_keys: dict[tuple[int, int, int], int] = {}
        self._aliases = aliases
        self._descriptions = descriptions
        self._prov = provenance
        self._lock = threading.RLock()
        self._fingerprint: str | None = None  # identity of the saved folder it was loaded from, until changed

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_triples(cls, triples: Iterable[Triple], provenance: Iterable[str | None] | None = None,
                     extra_entities: Iterable[str] = ()) -> "KGStore":
        """Build from named triples (de-duplicated; ids of entities in order of first appearance).

        `provenance` gives, per triple, the id of the passage it came from (None for none, or a
        list of ids); a duplicate triple keeps the union of its passages. `extra_entities` are
        names added after the triples' entities, in order, when no triple names them: entities
        without a triple (e.g. one known only by its passage), which a seed index may still hold.
        """
        # streamed into int32 buffers: only the distinct names are held as Python strings
        ents: dict[str, int] = {}
        rels: dict[str, int] = {}
        h, r, t = array("i"), array("i"), array("i")
        for triple in triples:
            s, rel, o = _split_triple(triple)
            h.append(ents.setdefault(s, len(ents)))
            r.append(rels.setdefault(rel, len(rels)))
            t.append(ents.setdefault(o, len(ents)))
        for name in extra_entities:
            ents.setdefault(str(name), len(ents))
        prov = _provenance_lists(provenance, len(h))
        as_np = lambda buf: np.frombuffer(buf, dtype=np.int32) if len(buf) else np.empty(0, np.int32)  # noqa: E731
        return cls._build(as_np(h), as_np(r), as_np(t), StringTable.from_strings(ents),
                          StringTable.from_strings(rels), provenance=prov)

    @classmethod
    def from_id_arrays(cls, heads: Any, rels: Any, tails: Any, entity_names: Sequence[str] | StringTable,
                       relation_names: Sequence[str] | StringTable, *,
                       aliases: Sequence[Sequence[str]] | Mapping[int, Sequence[str]] | None = None,
                       descriptions: Sequence[str] | Mapping[int, str] | None = None) -> "KGStore":
        """Build from id arrays (Wikidata5M scale): triples are de-duplicated and sorted by head.

        `entity_names[i]` names entity i; `aliases` is a list of alias lists aligned with entity
        ids or a mapping id -> aliases; `descriptions` likewise (list or mapping).
        """
        names, rel_table = _as_table(entity_names), _as_table(relation_names)
        arrays = []
        for label, arr, bound in (("heads", heads, len(names)), ("rels", rels, len(rel_table)),
                                  ("tails", tails, len(names))):
            a = np.asarray(arr)
            if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
                raise ValueError(f"{label}: expected a 1-d integer array, got shape {a.shape} dtype {a.dtype}")
            if a.size and (int(a.min()) < 0 or int(a.max()) >= bound):
                raise ValueError(f"{label}: ids must lie in [0, {bound}), got range [{a.min()}, {a.max()}]")
            arrays.append(a)
        if not arrays[0].size == arrays[1].size == arrays[2].size:
            raise ValueError(f"heads, rels, tails: lengths differ ({[a.size for a in arrays]})")
        store = cls._build(*arrays, names, rel_table)
        if aliases is not None:
            store._aliases = (Aliases.from_mapping(aliases, len(names)) if isinstance(aliases, Mapping)
                              else Aliases.from_lists(aliases))
        if descriptions is not None:
            if isinstance(descriptions, Mapping):
                descriptions = [str(descriptions.get(i, "")) for i in range(len(names))]
            store._descriptions = StringTable.from_strings((str(d) for d in descriptions), searchable=False)
        return store

    @classmethod
    def _build(cls, h: np.ndarray, r: np.ndarray, t: np.ndarray, names: StringTable, relations: StringTable,
               provenance: list[tuple[str, ...]] | None = None) -> "KGStore":
        num_e, num_r = len(names), len(relations)
        want_inverse = provenance is not None and any(provenance)
        hs, rs, ts, inverse = _dedupe_sorted(h, r, t, num_e, num_r, want_inverse)
        n = hs.size
        out_adj = _Adjacency(indptr_from_sorted_keys(hs, num_e, n), None)
        in_adj = _Adjacency(indptr_from_sorted_keys(ts, num_e, n), stable_argsort(ts))
        prov = None
        if provenance is not None:
            assert inverse is not None or not want_inverse
            tids = [int(inverse[i]) for i, ps in enumerate(provenance) for _ in ps] if want_inverse else []
            pids = [p for ps in provenance for p in ps]
            prov = Provenance.from_pairs(np.asarray(tids, dtype=np.int64), pids, n)
        return cls(hs, rs, ts, names, relations, out_adj, in_adj, provenance=prov)

    # ------------------------------------------------------------------ sizes and arrays
    @property
    def num_entities(self) -> int:
        return len(self._names)

    @property
    def num_relations(self) -> int:
        return len(self._relations)

    @property
    def num_triples(self) -> int:
        return self._n

    def _view(self, a: np.ndarray) -> np.ndarray:
        v = a[: self._n]
        if v.flags.writeable:
            v = v.view()
            v.flags.writeable = False
        return v

    @property
    def heads(self) -> np.ndarray:
        """Head entity id of every triple (int32, read-only view)."""
        return self._view(self._h)

    @property
    def rels(self) -> np.ndarray:
        return self._view(self._r)

    @property
    def tails(self) -> np.ndarray:
        return self._view(self._t)

    def memory_usage(self) -> dict[str, int]:
        """Bytes per component: triple arrays, adjacency index, and the string parts."""
        usage = {
            "triples": self._h[: self._n].nbytes + self._r[: self._n].nbytes + self._t[: self._n].nbytes,
            "index": self._out.nbytes + self._in.nbytes,
            "names": self._names.nbytes + self._relations.nbytes,
        }
        if self._aliases is not None:
            usage["aliases"] = self._aliases.nbytes
        if self._descriptions is not None:
            usage["descriptions"] = self._descriptions.nbytes
        if self._prov is not None:
            usage["provenance"] = self._prov.nbytes
        return usage

    @property
    def fingerprint(self) -> str | None:
        """sha256 hex of the saved folder this store was loaded from (its header and every listed
        file's name, size and mtime_ns: no byte of the arrays is read), while unchanged since; None
        for a store built in memory or changed after loading. Keys caches derived from its content
        (the seed-description embeddings of KG-Infused RAG) without decoding its strings."""
        return self._fingerprint

    def __repr__(self) -> str:
        return (f"KGStore(entities={self.num_entities:,}, relations={self.num_relations:,}, "
                f"triples={self.num_triples:,})")

    # ------------------------------------------------------------------ names
    def entity_name(self, i: int) -> str:
        return self._names[int(i)]

    def relation_name(self, i: int) -> str:
        return self._relations[int(i)]

    def entity_id(self, name: str) -> int:
        """Id of the entity with exactly this name (the lowest id if several share it)."""
        hits = self._names.find(name)
        if not hits:
            raise UnknownEntityError(name, self.suggest_entities(name))
        return hits[0]

    def relation_id(self, name: str) -> int:
        hits = self._relations.find(name)
        if not hits:
            rel_names = [self._relations[i] for i in range(len(self._relations))]
            raise UnknownEntityError(name, difflib.get_close_matches(name, rel_names, n=5, cutoff=0.5), "relation")
        return hits[0]

    def find_entity(self, name: str) -> int | None:
        """Best entity for a surface name: exact, then case-insensitive, then alias (exact, then any case).

        Surrounding whitespace is ignored; among several matches the lowest id wins.
        """
        name = name.strip()
        for lookup in (self._names.find, self._names.find_folded):
            hits = lookup(name)
            if hits:
                return hits[0]
        if self._aliases is not None:
            for folded in (False, True):
                ents = self._aliases.find(name, folded)
                if ents:
                    return ents[0]
        return None

    def suggest_entities(self, name: str, n: int = 5) -> list[str]:
        """Close entity names for an error message (difflib over a small candidate set)."""
        total = len(self._names)
        if total <= _FUZZY_ALL_LIMIT:
            candidates: Iterable[int] = range(total)
        else:  # the base rows sharing most character bigrams, plus the rows added since loading
            top = self._names.most_similar_rows(name, _FUZZY_CANDIDATES)
            candidates = [*top.tolist(), *range(self._names.base_size, total)]
        pool = {self._names[i] for i in candidates}
        return difflib.get_close_matches(name, list(pool), n=n, cutoff=0.6)

    def aliases(self, i: int) -> list[str]:
        return [] if self._aliases is None else self._aliases.get(int(i))

    def description(self, i: int) -> str:
        d = self._descriptions
        return d[int(i)] if d is not None and int(i) < len(d) else ""

    def description_lengths(self) -> np.ndarray:
        """UTF-8 byte length of every entity's description (int64, 0 where it has none), read from
        the string table's offsets: which of millions of entities have one, without decoding any."""
        out = np.zeros(self.num_entities, dtype=np.int64)
        if self._descriptions is not None:
            lengths = self._descriptions.byte_lengths()[: self.num_entities]
            out[: lengths.size] = lengths
        return out

    def _entity_key(self, key: int | str) -> int:
        if isinstance(key, str):
            return self.entity_id(key)
        i = int(key)
        if not 0 <= i < self.num_entities:
            raise IndexError(f"entity id {i} out of range [0, {self.num_entities})")
        return i

    def set_descriptions(self, mapping: Mapping[int | str, str]) -> None:
        """Set descriptions by entity id or exact name."""
        with self._lock:
            self._fingerprint = None
            if self._descriptions is None:
                self._descriptions = StringTable(searchable=False)
            table = self._descriptions
            for key, text in mapping.items():
                i = self._entity_key(key)
                table.pad(i + 1)
                table.set(i, str(text))

    def set_aliases(self, mapping: Mapping[int | str, Sequence[str]]) -> None:
        """Replace the alias lists of the given entities (by id or exact name)."""
        with self._lock:
            self._fingerprint = None
            if self._aliases is None:
                self._aliases = Aliases()
            for key, names in mapping.items():
                self._aliases.set(self._entity_key(key), [names] if isinstance(names, str) else names)

    # ------------------------------------------------------------------ triples
    def _check_triple_id(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError(f"triple id {i} out of range [0, {self._n})")
        return i

    def triple(self, i: int) -> Triple:
        i = self._check_triple_id(i)
        return Triple(self._names[self._h[i]], self._relations[self._r[i]], self._names[self._t[i]])

    def verbalize(self, ids: Iterable[int] | np.ndarray) -> list[str]:
        """`<s | r | o>` for each triple id, in the given order."""
        return [self.triple(i).verbalize() for i in np.asarray(ids, dtype=np.int64).ravel().tolist()]

    def out_triples(self, e: int) -> np.ndarray:
        """Ids of the triples whose head is `e`, ascending."""
        return self.neighborhood(e, 1, "out")

    def in_triples(self, e: int) -> np.ndarray:
        """Ids of the triples whose tail is `e`, ascending."""
        return self.neighborhood(e, 1, "in")

    def neighbor_entities(self, entities: int | Sequence[int] | np.ndarray, direction: str = "both") -> np.ndarray:
        """Distinct entities one hop from any of `entities` in `direction`."""
        start = self._entities_arg(entities)
        use_out, use_in = self._direction(direction)
        with self._lock:
            self._ensure_index()
            parts = [np.empty(0, dtype=np.int32)]
            if use_out:
                parts.append(self._t[self._gather(start, True)[0].astype(np.intp, copy=False)])
            if use_in:
                parts.append(self._h[self._gather(start, False)[0].astype(np.intp, copy=False)])
        return sorted_unique(np.concatenate(parts))

    @staticmethod
    def _direction(direction: str) -> tuple[bool, bool]:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction: expected one of {DIRECTIONS}, got {direction!r}")
        return direction in ("out", "both"), direction in ("in", "both")

    def _entities_arg(self, entities: int | Sequence[int] | np.ndarray) -> np.ndarray:
        """Sorted distinct int32 entity ids, range-checked."""
        if entities is None:   # find_entity's answer for a name the KG lacks
            raise KeyError("entity: None (a name find_entity did not find in this KG); check the name first")
        if isinstance(entities, (int, np.integer)):
            start = np.array([int(entities)], dtype=np.int64)
        else:
            start = sorted_unique(np.array(entities, dtype=np.int64).ravel())
        if start.size and (start[0] < 0 or start[-1] >= self.num_entities):
            bad = start[0] if start[0] < 0 else start[-1]
            raise IndexError(f"entity id {bad} out of range [0, {self.num_entities})")
        return start.astype(np.int32)

    def neighborhood(self, entities: int | Sequence[int] | np.ndarray, hops: int, direction: str = "out") -> np.ndarray:
        """Sorted unique ids of every triple incident (in `direction`) to an entity fewer than `hops` hops away.

        "out" follows head -> tail (triples whose head is reached), "in" tail -> head (triples
        whose tail is reached), "both" either way. hops=1 gives the start entities' own triples.
        """
        use_out, use_in = self._direction(direction)
        if int(hops) != hops or hops < 0:
            raise ValueError(f"hops: expected a non-negative integer, got {hops!r}")
        start = self._entities_arg(entities)
        id_dtype = index_dtype(self._n)
        if hops == 0 or start.size == 0:
            return np.empty(0, dtype=id_dtype)
        with self._lock:
            self._ensure_index()
            if start.size <= _SMALL_FRONTIER:
                small = self._small_neighborhood(start.tolist(), int(hops), use_out, use_in)
                if small is not None:
                    return np.array(small, dtype=id_dtype)
            visited = frontier = start
            found: list[np.ndarray] = [np.empty(0, dtype=id_dtype)]
            runs = 0
            for level in range(int(hops)):
                last = level == hops - 1
                reached: list[np.ndarray] = []
                if use_out:
                    ids, r = self._gather(frontier, True)
                    found.append(ids)
                    runs += r
                    if not last:  # intp indices: fancy indexing with int32 ones is ~3x slower
                        reached.append(self._t[ids.astype(np.intp, copy=False)])
                if use_in:
                    ids, r = self._gather(frontier, False)
                    found.append(ids)
                    runs += r
                    if not last:
                        reached.append(self._h[ids.astype(np.intp, copy=False)])
                if last:
                    break
                frontier = difference_sorted(sorted_unique(np.concatenate(reached)), visited)
                if frontier.size == 0:
                    break
                visited = np.concatenate([visited, frontier])
                visited.sort()
        return sorted_unique(np.concatenate(found).astype(id_dtype, copy=False), few_runs=runs <= _FEW_RUNS)

    def _small_neighborhood(self, start: list[int], hops: int, use_out: bool, use_in: bool) -> list[int] | None:
        """The same BFS with Python ints for tiny neighbourhoods, where a dozen numpy calls per hop
        cost more than the work; None as soon as it outgrows `_SMALL_TRIPLES` (or a delta exists)."""
        if self._delta_out is not None:
            return None
        budget = _SMALL_TRIPLES
        sides = [(adj, other) for adj, other, used in ((self._out, self._t, use_out), (self._in, self._h, use_in))
                 if used]
        visited = set(start)
        frontier = start
        found: list[int] = []
        for level in range(hops):
            last = level == hops - 1
            reached: set[int] = set()
            for e in frontier:
                for adj, other in sides:
                    if e >= adj.num_keys:
                        continue
                    a, b = adj.indptr[e:e + 2].tolist()
                    budget -= b - a
                    if budget < 0:
                        return None
                    if b == a:
                        continue
                    if adj.perm is None:
                        found.extend(range(a, b))
                        if not last:
                            reached.update(other[a:b].tolist())
                    else:
                        ids = adj.perm[a:b]
                        found.extend(ids.tolist())
                        if not last:
                            reached.update(other[ids.astype(np.intp)].tolist())
            if last:
                break
            reached -= visited
            if not reached or len(reached) > _SMALL_FRONTIER:
                if reached:
                    return None
                break
            visited |= reached
            frontier = sorted(reached)
        return sorted(set(found))

    def _gather(self, entities: np.ndarray, out: bool) -> tuple[np.ndarray, int]:
        """Triple ids incident to sorted `entities` (by head if `out`, else by tail): CSR + delta."""
        ids, runs = (self._out if out else self._in).gather(entities)
        delta = self._delta_out if out else self._delta_in
        if delta is not None:
            more = delta.gather(entities)
            if more.size:
                ids, runs = np.concatenate([ids, more]), runs + more.size
        return ids, runs

    # ------------------------------------------------------------------ incremental growth
    def _ensure_index(self, full: bool = False) -> None:
        """Index triples appended since the last build: a delta, or a full CSR rebuild once it is large."""
        pending = self._n - self._n_indexed
        if full and (pending or self._out.num_keys != self.num_entities):
            self._rebuild_index()
            return
        if pending == 0:
            return
        if pending > max(_MERGE_MIN, self._n_indexed // _MERGE_FRACTION):
            self._rebuild_index()
        elif self._delta_out is None or self._delta_out.ids.size != pending:
            lo, hi = self._n_indexed, self._n
            self._delta_out = _Delta.build(self._h[lo:hi], lo)
            self._delta_in = _Delta.build(self._t[lo:hi], lo)

    def _rebuild_index(self) -> None:
        n, num_e = self._n, self.num_entities
        h, t = self._h[:n], self._t[:n]
        self._out = _Adjacency(indptr_from_sorted_keys(h, num_e, n), None if is_sorted(h) else stable_argsort(h))
        self._in = _Adjacency(indptr_from_sorted_keys(t, num_e, n), stable_argsort(t))
        self._n_indexed = n
        self._delta_out = self._delta_in = None
        self._delta_keys = {}

    def _reserve(self, extra: int) -> None:
        """Make the triple arrays private, writeable and large enough (copy-on-first-write for mmaps)."""
        need = self._n + extra
        if self._owned and self._h.size >= need:
            return
        cap = max(need, self._n + self._n // 4 + 1024)
        for attr in ("_h", "_r", "_t"):
            buf = np.empty(cap, dtype=np.int32)
            buf[: self._n] = getattr(self, attr)[: self._n]
            setattr(self, attr, buf)
        self._owned = True

    def _existing_ids(self, bh: np.ndarray, br: np.ndarray, bt: np.ndarray) -> np.ndarray:
        """Id of each (h, r, t) already in the CSR-indexed part, else -1 (vectorized)."""
        found = np.full(bh.size, -1, dtype=np.int64)
        if bh.size == 0:
            return found
        in_index = bh < self._out.num_keys
        rows = np.flatnonzero(in_index)
        keys = bh[rows]
        starts, ends = self._out.indptr[keys], self._out.indptr[keys + 1]
        pos = expand_ranges(starts, ends)
        if pos.size == 0:
            return found
        owner = rows[np.repeat(np.arange(rows.size), (ends - starts).astype(np.int64))]
        tids = pos if self._out.perm is None else self._out.perm[pos].astype(np.int64)
        match = (self._r[tids] == br[owner]) & (self._t[tids] == bt[owner])
        found[owner[match]] = tids[match]
        return found

    def add_triples(self, triples: Iterable[Triple], provenance: Iterable[str | None] | None = None) -> np.ndarray:
        """Add named triples; return the ids of those that were new, in input order.

        Unknown names become new entities/relations (a known name maps to its lowest id).
        Triples already present are not duplicated, but their provenance is extended.
        Neighbourhood queries see the new triples at once.
        """
        rows = [_split_triple(t) for t in triples]
        prov = _provenance_lists(provenance, len(rows))
        if not rows:
            return np.empty(0, dtype=np.int64)
        with self._lock:
            self._fingerprint = None
            ent_cache: dict[str, int] = {}
            rel_cache: dict[str, int] = {}

            def ent(name: str) -> int:
                if name not in ent_cache:
                    hits = self._names.find(name)
                    ent_cache[name] = hits[0] if hits else self._names.append(name)
                return ent_cache[name]

            def rel(name: str) -> int:
                if name not in rel_cache:
                    hits = self._relations.find(name)
                    rel_cache[name] = hits[0] if hits else self._relations.append(name)
                return rel_cache[name]

            ids = np.array([(ent(s), rel(r), ent(o)) for s, r, o in rows], dtype=np.int64).reshape(-1, 3)
            existing = self._existing_ids(ids[:, 0], ids[:, 1], ids[:, 2])
            self._reserve(len(rows))
            new_ids: list[int] = []
            for k, (h, r, t) in enumerate(ids.tolist()):
                tid = int(existing[k])
                if tid < 0:
                    tid = self._delta_keys.get((h, r, t), -1)
                if tid < 0:
                    tid = self._n
                    self._h[tid], self._r[tid], self._t[tid] = h, r, t
                    self._n += 1
                    self._delta_keys[(h, r, t)] = tid
                    new_ids.append(tid)
                if prov is not None and prov[k]:
                    if self._prov is None:
                        self._prov = Provenance()
                    self._prov.add(tid, prov[k])
            if new_ids:
                self._delta_out = self._delta_in = None  # rebuilt lazily on the next query
        return np.asarray(new_ids, dtype=np.int64)

    # ------------------------------------------------------------------ provenance
    def provenance_of_triple(self, i: int) -> list[str]:
        """Sorted ids of the passages triple `i` was extracted from."""
        i = self._check_triple_id(i)
        return [] if self._prov is None else self._prov.of_triples(np.array([i]))

    def provenance_of_entity(self, i: int) -> list[str]:
        """Sorted ids of the passages of every triple that mentions entity `i`."""
        if self._prov is None:
            return []
        return self._prov.of_triples(self.neighborhood(i, 1, "both"))

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write the store as .npy files + header.json into directory `path` (replaced atomically)."""
        path = Path(path)
        if path.exists() and not _is_store_dir(path) and (not path.is_dir() or any(path.iterdir())):
            raise KgragError(f"{path}: exists and is not a saved KGStore; refusing to replace it")
        with self._lock:
            self._ensure_index(full=True)
            n = self._n
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
            try:
                files: list[str] = []
                arrays = {"heads": self._h[:n], "rels": self._r[:n], "tails": self._t[:n],
                          "out_indptr": self._out.indptr, "in_indptr": self._in.indptr, "in_perm": self._in.perm}
                if self._out.perm is not None:
                    arrays["out_perm"] = self._out.perm
                for name, arr in arrays.items():
                    np.save(tmp / f"{name}.npy", np.asarray(arr), allow_pickle=False)
                    files.append(f"{name}.npy")
                files += self._names.save(tmp, "entities")
                files += self._relations.save(tmp, "relations")
                if self._aliases is not None:
                    files += self._aliases.save(tmp, self.num_entities)
                if self._descriptions is not None:
                    self._descriptions.pad(self.num_entities)
                    files += self._descriptions.save(tmp, "descriptions", with_index=False)
                if self._prov is not None:
                    files += self._prov.save(tmp, n)
                header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "num_entities": self.num_entities,
                          "num_relations": self.num_relations, "num_triples": n,
                          "has_aliases": self._aliases is not None,
                          "has_descriptions": self._descriptions is not None,
                          "has_provenance": self._prov is not None, "files": sorted(files),
                          "blocks": {f: record_file(tmp / f, FULL_BLOCK_BYTES) for f in sorted(files)}}
                (tmp / "header.json").write_text(json.dumps(header, indent=1) + "\n", encoding="utf-8")
                if path.exists():  # swap in; files still memory-mapped from the old copy stay valid
                    old = path.with_name(f".{path.name}.old-{os.getpid()}")
                    path.rename(old)
                    tmp.rename(path)
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    tmp.rename(path)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True) -> "KGStore":
        """Open a saved store; with `mmap` the arrays are memory-mapped read-only (pages load on use)."""
        path = Path(path)
        header_path = path / "header.json"
        if not header_path.is_file():
            raise DataFormatError(path, None, f"a KGStore directory with header.json (written by KGStore.save)")
        try:
            header = json.loads(header_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataFormatError(header_path, exc.lineno, "a JSON header", str(exc)) from exc
        except UnicodeDecodeError as exc:
            raise DataFormatError(header_path, None, "a UTF-8 JSON header", str(exc)) from None
        remedy = rebuild_hint(path)
        if not isinstance(header, dict):
            raise DataFormatError(header_path, None, "a JSON object", type(header).__name__)
        if header.get("format") != FORMAT_NAME or header.get("version") != FORMAT_VERSION:
            old = header.get("format") == FORMAT_NAME and header.get("version") == 1
            raise DataFormatError(header_path, None, f"format {FORMAT_NAME!r} version {FORMAT_VERSION}" + (
                f" (version 1 was written before block checksums: {remedy})" if old else ""),
                f"{header.get('format')!r} version {header.get('version')}")
        files = header.get("files", [])
        if not isinstance(header.get("blocks"), dict) or sorted(header["blocks"]) != sorted(files):
            raise DataFormatError(header_path, None, f"a block checksum record for each listed file ({remedy})",
                                  f"records for {sorted(header['blocks']) if isinstance(header.get('blocks'), dict) else None}")
        missing = [f for f in header.get("files", []) if not (path / f).is_file()]
        if missing:
            raise DataFormatError(path, None, f"all files listed in header.json", f"missing {missing}")
        mode = "r" if mmap else None

        def ld(name: str) -> np.ndarray:
            try:
                return np.load(path / f"{name}.npy", mmap_mode=mode, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise DataFormatError(path / f"{name}.npy", None, "a .npy array written by KGStore.save",
                                      str(exc)) from exc

        out_perm = ld("out_perm") if (path / "out_perm.npy").exists() else None
        store = cls(ld("heads"), ld("rels"), ld("tails"), StringTable.load(path, "entities", mmap),
                    StringTable.load(path, "relations", mmap), _Adjacency(ld("out_indptr"), out_perm),
                    _Adjacency(ld("in_indptr"), ld("in_perm")),
                    aliases=Aliases.load(path, mmap) if header.get("has_aliases") else None,
                    descriptions=(StringTable.load(path, "descriptions", mmap, searchable=False)
                                  if header.get("has_descriptions") else None),
                    provenance=Provenance.load(path, mmap) if header.get("has_provenance") else None)
        n, e = header["num_triples"], header["num_entities"]
        if (store.num_triples != n or store.num_entities != e or store.num_relations != header["num_relations"]
                or store._out.num_keys != e or store._in.num_keys != e):
            raise DataFormatError(header_path, None, f"arrays matching the header counts (triples {n}, entities {e})",
                                  f"triples {store.num_triples}, entities {store.num_entities}")
        check_arrays(path, store)   # first: it names what is wrong in an id array
        check_files(path, header["blocks"], f"the store is damaged: {remedy}", header_path)
        store._fingerprint = folder_fingerprint(path, header_path.read_bytes(), header.get("files", []))
        return store
