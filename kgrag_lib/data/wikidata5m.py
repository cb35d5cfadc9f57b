"""Wikidata5M and the KG-Infused RAG paper's preprocessing into "Wikidata5M-KG".

Files (https://deepgraphlearning.github.io/project/wikidata5m):
- triples `Qhead<TAB>Prel<TAB>Qtail` (wikidata5m_transductive_{train,valid,test}.txt, or all_triplet),
- entity aliases `Qid<TAB>name<TAB>alias...` (wikidata5m_entity.txt),
- relation aliases `Pid<TAB>name<TAB>alias...` (wikidata5m_relation.txt),
- descriptions `Qid<TAB>text` (wikidata5m_text.txt).

The paper (Appendix B) keeps an entity only if it has a description and is the head of at
least one triple, and reports the sizes before and after (Table 5). At full scale that is 21M
triples and ~4.8M entities, so triples are read in byte blocks straight into int32 arrays
(Wikidata ids are `Q<number>`: the number is the key; the layout is checked with numpy and the
numbers parsed by pandas' C reader, no per-triple Python objects); only names, aliases and
descriptions of kept entities become Python strings.
"""

from __future__ import annotations

import contextlib
import gc
import io
import re
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import DataFormatError
from .common import check_file, open_text
from .triples import FORMS

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
_MAX_ID = 2**31 - 1


def _line_id(path: Path, lineno: int, line: str, head: str, prefix: str, form: str) -> int:
    """`Q123` -> 123, with str methods rather than a regex: this runs once per line of 5M-line files."""
    digits = head[1:]
    if head[:1] != prefix or not digits.isdigit() or not digits.isascii() or len(digits) > 10:
        raise DataFormatError(path, lineno, form, line)
    num = int(digits)
    if num > _MAX_ID:
        raise DataFormatError(path, lineno, f"{form} with ids below 2^31", line)
    return num


def _alias_lines(path: Path, kind: str) -> Iterator[tuple[int, str]]:
    """(id, the raw tab-separated names) per line, validated but not yet split into names."""
    prefix, form = ("Q" if kind == "entity" else "P"), ALIAS_FORM[kind]
    with open_text(path, f"one {kind} per line: {form}") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            if not line:
                continue
            head, _, rest = line.partition("\t")
            num = _line_id(path, lineno, line, head, prefix, form)
            if not rest.strip():
                raise DataFormatError(path, lineno, form, line)
            yield num, rest


def _split_names(rest: str) -> list[str]:
    return [n for n in map(str.strip, rest.split("\t")) if n]


def read_aliases(path: str | Path, kind: str = "entity") -> Iterator[tuple[int, list[str]]]:
    """Yield (numeric id, [name, alias, ...]) per line of an entity or relation alias file."""
    for num, rest in _alias_lines(Path(path), kind):
        yield num, _split_names(rest)


def read_descriptions(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (numeric entity id, description) per line of wikidata5m_text.txt (empty texts included)."""
    path = Path(path)
    with open_text(path, f"one description per line: {TEXT_FORM}") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            if not line:
                continue
            head, sep, text = line.partition("\t")
            if not sep:
                raise DataFormatError(path, lineno, TEXT_FORM, line)
            yield _line_id(path, lineno, line, head, "Q", TEXT_FORM), text.strip()


_Q, _P = ord("Q"), ord("P")
_TRIPLE_LINE = re.compile(r"Q(\d{1,10})\tP(\d{1,10})\tQ(\d{1,10})")


def _first_bad_line(data: bytes, path: Path, first_line: int) -> DataFormatError:
    """Slow path, only after a block failed: find the first malformed line for the message."""
    for j, raw in enumerate(data.split(b"\n")[:-1]):
        line = raw.decode("utf-8", errors="replace")
        if not line:
            continue
        m = _TRIPLE_LINE.fullmatch(line)
        if not m or max(int(g) for g in m.groups()) > _MAX_ID:
            return DataFormatError(path, first_line + j, f"{FORMS['wikidata5m']} with ids below 2^31", line)
    return DataFormatError(path, None, FORMS["wikidata5m"], "unparsable block")


def _parse_block(data: bytes, path: Path, first_line: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Parse complete lines `Q..\tP..\tQ..\n` of one byte block; returns int32 ids and the line count.

    The layout is verified on the raw bytes with numpy: n non-blank lines must hold exactly 2n
    tabs, with the i-th pair inside line i; fields of 2-11 bytes opening with Q, P, Q; and no
    byte besides those letters, digits, tabs and newlines. The Q/P letters are then deleted and
    the remaining pure integer table is read by pandas' C parser.
    """
    import pandas as pd

    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    starts = np.empty_like(nl)
    starts[:1] = 0
    starts[1:] = nl[:-1] + 1
    nonblank = nl > starts
    s, e = starts[nonblank], nl[nonblank]
    n = int(s.size)
    if n == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32), int(nl.size)
    tab_pos = np.flatnonzero(buf == 9)
    ok = tab_pos.size == 2 * n
    if ok:
        t0, t1 = tab_pos[0::2], tab_pos[1::2]
        w0, w1, w2 = t0 - s, t1 - t0 - 1, e - t1 - 1
        ok = bool(np.all((w0 >= 2) & (w0 <= 11) & (w1 >= 2) & (w1 <= 11) & (w2 >= 2) & (w2 <= 11)
                         & (buf[s] == _Q) & (buf[t0 + 1] == _P) & (buf[t1 + 1] == _Q)))
    if ok:
        letters = np.count_nonzero((buf == _Q) | (buf == _P))
        non_digits = np.count_nonzero((buf - np.uint8(48)) > 9)
        ok = letters == 3 * n and non_digits == 5 * n + nl.size
    if ok:
        try:
            table = pd.read_csv(io.BytesIO(data.translate(None, b"QP")), sep="\t", header=None,
                                dtype=np.int64, engine="c", na_filter=False).to_numpy()
        except (ValueError, pd.errors.ParserError):
            ok = False
        else:
            ok = table.shape == (n, 3) and int(table.max()) <= _MAX_ID
    if not ok:
        raise _first_bad_line(data, path, first_line)
    table = table.astype(np.int32)
    return table[:, 0].copy(), table[:, 1].copy(), table[:, 2].copy(), int(nl.size)


def read_triple_ids(path: str | Path, block_bytes: int = 16 << 20) -> Iterator[tuple[np.ndarray, ...]]:
    """Stream (heads, rels, tails) as int32 Wikidata numbers (Q/P stripped), one byte block at a time.

    No Python object is made per triple: each block of complete lines is parsed by `_parse_block`.
    """
    path = check_file(path, f"one triple per line: {FORMS['wikidata5m']}")
    next_line = 1
    rest = b""
    with open(path, "rb") as f:
        if f.read(3) != b"\xef\xbb\xbf":  # a UTF-8 byte-order mark carries no data
            f.seek(0)
        while True:
            block = f.read(block_bytes)
            data = rest + block
            if not data:
                return
            if block:
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    rest = data
                    continue
                data, rest = data[:cut], data[cut:]
            else:
                rest = b""
                if not data.endswith(b"\n"):
                    data += b"\n"
            h, r, t, n_lines = _parse_block(data, path, next_line)
            next_line += n_lines
            if h.size:
                yield h, r, t
            if not block:
                return


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


def _bitmap(size: int, *id_arrays: np.ndarray) -> np.ndarray:
    bm = np.zeros(size, dtype=bool)
    for arr in id_arrays:
        bm[arr] = True
    return bm


def _pct(removed: int, total: int) -> float:
    return round(100.0 * removed / total, 2) if total else 0.0


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Millions of small lists (aliases) make the cyclic GC rescan a huge heap; none form cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def preprocess_wikidata5m(
    triple_paths: str | Path | Iterable[str | Path],
    entity_alias_path: str | Path,
    relation_alias_path: str | Path,
    text_path: str | Path,
    *,
    until_stable: bool = False,
    dedupe: bool = False,
    max_description_chars: int | None = None,
    block_bytes: int = 16 << 20,
) -> tuple[Wikidata5MKG, dict[str, Any]]:
    """Filter Wikidata5M as KG-Infused RAG's Appendix B does; return the KG and Table-5 statistics.

    Kept entities have a non-empty description and head at least one triple; kept triples have
    both ends kept; kept relations occur in a kept triple. The paper describes one pass; with
    `until_stable=True` the filter repeats until every kept entity still heads a kept triple.
    `dedupe` drops repeated (h, r, t) rows; `max_description_chars` truncates descriptions to
    bound memory (the full text file is ~1 GB). Statistics count "original" entities as the
    union of ids in the triples, the alias file and the text file.
    """
    with _gc_paused():
        return _preprocess(triple_paths, entity_alias_path, relation_alias_path, text_path, until_stable=until_stable,
                           dedupe=dedupe, max_description_chars=max_description_chars, block_bytes=block_bytes)


def _preprocess(triple_paths, entity_alias_path, relation_alias_path, text_path, *, until_stable, dedupe,
                max_description_chars, block_bytes) -> tuple[Wikidata5MKG, dict[str, Any]]:
    if isinstance(triple_paths, (str, Path)):
        triple_paths = [triple_paths]
    hs, rs, ts = [], [], []
    for p in triple_paths:
        for h, r, t in read_triple_ids(p, block_bytes=block_bytes):
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

    dense = np.zeros(size, dtype=np.int32)  # Q number -> dense id (a lookup table beats a search)
    dense[kept_q] = np.arange(kept_q.size, dtype=np.int32)
    heads = dense[H[mask]]
    tails = dense[T[mask]]
    del dense
    rel_kept = R[mask]
    kept_p = np.flatnonzero(np.bincount(rel_kept, minlength=1))
    all_p = np.flatnonzero(np.bincount(R, minlength=1))
    rel_dense = np.zeros(int(all_p.max(initial=0)) + 1, dtype=np.int32)
    rel_dense[kept_p] = np.arange(kept_p.size, dtype=np.int32)
    rels = rel_dense[rel_kept]
    del rel_kept, rel_dense, H, T, R

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
    for num, rest in _alias_lines(Path(relation_alias_path), "relation"):
        if num not in rel_names:
            rel_names[num] = _split_names(rest)
    relation_pids = [f"P{p}" for p in kept_p.tolist()]
    relation_names = [rel_names.get(p, [f"P{p}"])[0] for p in kept_p.tolist()]

    # Entity names and aliases, only for kept entities.
    ent_aliases: dict[int, list[str]] = {}
    alias_ids = array("q")
    for num, rest in _alias_lines(Path(entity_alias_path), "entity"):
        alias_ids.append(num)
        if num < size and kept[num] and num not in ent_aliases:
            ent_aliases[num] = _split_names(rest)
    alias_ids_arr = np.unique(np.frombuffer(alias_ids, dtype=np.int64))
    del alias_ids

    kept_list = kept_q.tolist()
    entity_qids = [f"Q{q}" for q in kept_list]
    found = [ent_aliases.get(q) for q in kept_list]
    entity_names = [names[0] if names else qid for names, qid in zip(found, entity_qids)]
    aliases = [names[1:] + [qid] if names else [qid] for names, qid in zip(found, entity_qids)]
    descriptions = [desc[q] for q in kept_list]
    del desc, ent_aliases, found

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
