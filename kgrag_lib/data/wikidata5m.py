"""Wikidata5M and the KG-Infused RAG paper's preprocessing into "Wikidata5M-KG".

Files (https://deepgraphlearning.github.io/project/wikidata5m):
- triples `Qhead<TAB>Prel<TAB>Qtail` (wikidata5m_transductive_{train,valid,test}.txt, or all_triplet),
- entity aliases `Qid<TAB>name<TAB>alias...` (wikidata5m_entity.txt),
- relation aliases `Pid<TAB>name<TAB>alias...` (wikidata5m_relation.txt),
- descriptions `Qid<TAB>text` (wikidata5m_text.txt).

The paper (Appendix B) keeps an entity only if it has a description and is the head of at
least one triple, and reports the sizes before and after (Table 5). At full scale that is 21M
triples and ~4.8M entities, so triples are read in pandas chunks straight into int32 arrays
(Wikidata ids are `Q<number>`: the number is the key, no per-triple Python objects); only
names, aliases and descriptions of kept entities become Python strings.
"""

from __future__ import annotations

import csv
import logging
import re
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import DataFormatError
from .triples import FORMS

log = logging.getLogger(__name__)

# Table 5 of the KG-Infused RAG paper: (# entity, # relation, # triple).
PAPER_TABLE5 = {
    "Wikidata5M": {"entities": 4944931, "relations": 828, "triples": 21354359},
    "Wikidata5M-KG": {"entities": 4665331, "relations": 810, "triples": 20987217},
}
ALIAS_FORM = {
    "entity": "'Qid<TAB>name<TAB>alias...' (a Wikidata entity id, then at least one name)",
    "relation": "'Pid<TAB>name<TAB>alias...' (a Wikidata property id, then at least one name)",
}
TEXT_FORM = "'Qid<TAB>description' (a Wikidata entity id, a tab, the description text)"
_ID = {"entity": re.compile(r"Q(\d+)"), "relation": re.compile(r"P(\d+)")}
_MAX_ID = 2**31 - 1


def _parse_id(path: Path, lineno: int, token: str, kind: str, form: str, line: str) -> int:
    m = _ID[kind].fullmatch(token)
    if not m or int(m.group(1)) > _MAX_ID:
        raise DataFormatError(path, lineno, form, line)
    return int(m.group(1))


def read_aliases(path: str | Path, kind: str = "entity") -> Iterator[tuple[int, list[str]]]:
    """Yield (numeric id, [name, alias, ...]) per line of an entity or relation alias file."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            names = [p.strip() for p in parts[1:] if p.strip()]
            num = _parse_id(path, lineno, parts[0].strip(), kind, ALIAS_FORM[kind], line)
            if not names:
                raise DataFormatError(path, lineno, ALIAS_FORM[kind], line)
            yield num, names


def read_descriptions(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (numeric entity id, description) per line of wikidata5m_text.txt (empty texts included)."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            head, sep, text = line.partition("\t")
            if not sep:
                raise DataFormatError(path, lineno, TEXT_FORM, line)
            yield _parse_id(path, lineno, head.strip(), "entity", TEXT_FORM, line), text.strip()


def read_triple_ids(path: str | Path, chunksize: int = 1_000_000) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Stream (heads, rels, tails) as int32 Wikidata numbers (Q/P stripped), chunk by chunk."""
    import pandas as pd

    path = Path(path)
    reader = pd.read_csv(
        path, sep="\t", header=None, names=["h", "r", "t"], dtype=str, chunksize=chunksize,
        quoting=csv.QUOTE_NONE, na_filter=False, skip_blank_lines=False, engine="c", encoding="utf-8",
    )
    try:
        for chunk in reader:
            blank = (chunk["h"] == "") & (chunk["r"] == "") & (chunk["t"] == "")
            if blank.any():
                chunk = chunk[~blank]
            cols = []
            for col, pattern in (("h", r"Q\d{1,10}"), ("r", r"P\d{1,10}"), ("t", r"Q\d{1,10}")):
                s = chunk[col].str.strip()
                ok = s.str.fullmatch(pattern).to_numpy(dtype=bool)
                if not ok.all():
                    bad = chunk.index[np.flatnonzero(~ok)[0]]
                    row = chunk.loc[bad]
                    raise DataFormatError(path, int(bad) + 1, FORMS["wikidata5m"], "\t".join(row.tolist()))
                nums = s.str.slice(1).astype("int64").to_numpy()
                if nums.size and nums.max() > _MAX_ID:
                    bad = chunk.index[int(np.argmax(nums))]
                    raise DataFormatError(path, int(bad) + 1, f"{FORMS['wikidata5m']} with ids below 2^31",
                                          "\t".join(chunk.loc[bad].tolist()))
                cols.append(nums.astype(np.int32))
            yield cols[0], cols[1], cols[2]
    except pd.errors.ParserError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise DataFormatError(path, int(m.group(1)) if m else None, FORMS["wikidata5m"], str(exc)) from None


@dataclass
class Wikidata5MKG:
    """The preprocessed KG as dense integer arrays plus per-entity strings (index = dense id).

    Dense entity ids follow ascending Q-number; `entity_qids[i]` is the Wikidata id. `aliases[i]`
    holds the alias-file names after the first (which is `entity_names[i]`), then the Q-id, so
    an entity can be found by its Wikidata id too.
    """

    heads: np.ndarray
    rels: np.ndarray
    tails: np.ndarray
    entity_qids: list[str]
    entity_names: list[str]
    relation_pids: list[str]
    relation_names: list[str]
    aliases: list[list[str]]
    descriptions: list[str]

    @property
    def num_triples(self) -> int:
        return int(self.heads.shape[0])

    def to_kgstore(self):
        """Hand the arrays to the shared graph store (engineer B's `KGStore.from_id_arrays`)."""
        from ..kg import KGStore

        return KGStore.from_id_arrays(
            self.heads, self.rels, self.tails, self.entity_names, self.relation_names,
            aliases=self.aliases, descriptions=self.descriptions,
        )


def _bitmap(size: int, *id_arrays: np.ndarray) -> np.ndarray:
    bm = np.zeros(size, dtype=bool)
    for arr in id_arrays:
        bm[arr] = True
    return bm


def _pct(removed: int, total: int) -> float:
    return round(100.0 * removed / total, 2) if total else 0.0


def preprocess_wikidata5m(
    triple_paths: str | Path | Iterable[str | Path],
    entity_alias_path: str | Path,
    relation_alias_path: str | Path,
    text_path: str | Path,
    *,
    until_stable: bool = False,
    dedupe: bool = False,
    max_description_chars: int | None = None,
    chunksize: int = 1_000_000,
) -> tuple[Wikidata5MKG, dict[str, Any]]:
    """Filter Wikidata5M as KG-Infused RAG's Appendix B does; return the KG and Table-5 statistics.

    Kept entities have a non-empty description and head at least one triple; kept triples have
    both ends kept; kept relations occur in a kept triple. The paper describes one pass; with
    `until_stable=True` the filter repeats until every kept entity still heads a kept triple.
    `dedupe` drops repeated (h, r, t) rows; `max_description_chars` truncates descriptions to
    bound memory (the full text file is ~1 GB). Statistics count "original" entities as the
    union of ids in the triples, the alias file and the text file.
    """
    if isinstance(triple_paths, (str, Path)):
        triple_paths = [triple_paths]
    hs, rs, ts = [], [], []
    for p in triple_paths:
        for h, r, t in read_triple_ids(p, chunksize=chunksize):
            hs.append(h)
            rs.append(r)
            ts.append(t)
    H = np.concatenate(hs) if hs else np.zeros(0, np.int32)
    R = np.concatenate(rs) if rs else np.zeros(0, np.int32)
    T = np.concatenate(ts) if ts else np.zeros(0, np.int32)
    del hs, rs, ts
    n_triples_in = int(H.size)
    size = int(max(H.max(initial=0), T.max(initial=0))) + 1
    is_head = _bitmap(size, H)
    in_triples = is_head | _bitmap(size, T)

    # Descriptions: keep texts only for entities that head a triple (the others are dropped anyway).
    desc: dict[int, str] = {}
    text_ids = array("q")  # ids with a non-empty description (compact: 8 bytes each)
    for num, text in read_descriptions(text_path):
        if not text:
            continue
        text_ids.append(num)
        if num < size and is_head[num] and num not in desc:
            desc[num] = text[:max_description_chars] if max_description_chars else text
    text_ids_arr = np.unique(np.frombuffer(text_ids, dtype=np.int64))
    del text_ids
    has_desc = np.zeros(size, dtype=bool)
    if desc:
        has_desc[np.fromiter(desc.keys(), dtype=np.int64, count=len(desc))] = True

    kept = is_head & has_desc
    mask = kept[H] & kept[T]
    rounds = 1
    while until_stable:
        heads_now = _bitmap(size, H[mask])
        new_kept = kept & heads_now
        if new_kept.sum() == kept.sum():
            break
        kept = new_kept
        mask = kept[H] & kept[T]
        rounds += 1
    kept_q = np.flatnonzero(kept)  # ascending Q numbers = dense entity order

    heads = np.searchsorted(kept_q, H[mask]).astype(np.int32)
    tails = np.searchsorted(kept_q, T[mask]).astype(np.int32)
    rel_kept = R[mask]
    kept_p = np.unique(rel_kept)
    rels = np.searchsorted(kept_p, rel_kept).astype(np.int32)
    all_p = np.unique(R)
    del rel_kept, H, T, R

    n_ent, n_rel = int(kept_q.size), int(kept_p.size)
    duplicates = 0
    if heads.size:
        key = (heads.astype(np.int64) * max(n_rel, 1) + rels) * max(n_ent, 1) + tails
        _, first = np.unique(key, return_index=True)
        duplicates = int(heads.size - first.size)
        if dedupe and duplicates:
            first.sort()
            heads, rels, tails = heads[first], rels[first], tails[first]
        del key, first

    # Relation names.
    rel_names: dict[int, list[str]] = {}
    for num, names in read_aliases(relation_alias_path, "relation"):
        rel_names.setdefault(num, names)
    relation_pids = [f"P{p}" for p in kept_p.tolist()]
    relation_names = [rel_names.get(p, [f"P{p}"])[0] for p in kept_p.tolist()]

    # Entity names and aliases, only for kept entities.
    ent_aliases: dict[int, list[str]] = {}
    alias_ids = array("q")
    for num, names in read_aliases(entity_alias_path, "entity"):
        alias_ids.append(num)
        if num < size and kept[num] and num not in ent_aliases:
            ent_aliases[num] = names
    alias_ids_arr = np.unique(np.frombuffer(alias_ids, dtype=np.int64))
    del alias_ids

    entity_qids, entity_names, aliases, descriptions = [], [], [], []
    for q in kept_q.tolist():
        qid = f"Q{q}"
        names = ent_aliases.get(q)
        entity_qids.append(qid)
        entity_names.append(names[0] if names else qid)
        aliases.append([*(names[1:] if names else []), qid])
        descriptions.append(desc[q])
    del desc, ent_aliases

    # Statistics (Table 5 layout plus the parts it is made of).
    big = int(max(size, text_ids_arr.max(initial=0) + 1, alias_ids_arr.max(initial=0) + 1))
    seen = np.zeros(big, dtype=bool)
    seen[:size] = in_triples
    seen[text_ids_arr] = True
    seen[alias_ids_arr] = True
    n_ent_in = int(seen.sum())
    n_rel_in = int(np.union1d(all_p, np.fromiter(rel_names.keys(), dtype=np.int64, count=len(rel_names))).size)
    stats: dict[str, Any] = {
        "original": {
            "entities": n_ent_in,
            "relations": n_rel_in,
            "triples": n_triples_in,
            "entities_in_triples": int(in_triples.sum()),
            "entities_heading_a_triple": int(is_head.sum()),
            "entities_with_description": int(text_ids_arr.size),
            "entities_with_alias": int(alias_ids_arr.size),
            "relations_in_triples": int(all_p.size),
        },
        "kept": {"entities": n_ent, "relations": n_rel, "triples": int(heads.size)},
        "removed_pct": {
            "entities": _pct(n_ent_in - n_ent, n_ent_in),
            "relations": _pct(n_rel_in - n_rel, n_rel_in),
            "triples": _pct(n_triples_in - int(heads.size), n_triples_in),
        },
        "heads_without_description": int((is_head & ~has_desc).sum()),
        "duplicate_triples": duplicates,
        "deduplicated": bool(dedupe),
        "rounds": rounds,
        "paper_table5": PAPER_TABLE5,
    }
    kg = Wikidata5MKG(heads, rels, tails, entity_qids, entity_names, relation_pids, relation_names,
                      aliases, descriptions)
    return kg, stats


def build_wikidata5m_kg(
    triple_paths: str | Path | Iterable[str | Path],
    entity_alias_path: str | Path,
    relation_alias_path: str | Path,
    text_path: str | Path,
    **kw: Any,
):
    """`preprocess_wikidata5m` then `KGStore.from_id_arrays`: returns (KGStore, stats)."""
    kg, stats = preprocess_wikidata5m(triple_paths, entity_alias_path, relation_alias_path, text_path, **kw)
    return kg.to_kgstore(), stats
