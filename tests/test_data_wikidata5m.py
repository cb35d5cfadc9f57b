"""Wikidata5M readers and the KG-Infused RAG preprocessing (Appendix B / Table 5).

Full Wikidata5M is not on this machine: the preprocessing is tested on tiny files in the exact
real formats, and on the real LibKGE slice (ids only) with a description file we write, checked
against an independent set-based implementation of the same rule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kgrag_lib.data import preprocess_wikidata5m, read_triples
from kgrag_lib.data.wikidata5m import PAPER_TABLE5, read_aliases, read_descriptions, read_triple_ids
from kgrag_lib.errors import DataFormatError
from kgrag_lib.paths import data_root

SLICE = data_root() / "wikidata5m" / "libkge_test.txt"
needs_slice = pytest.mark.skipif(not SLICE.is_file(), reason=f"real Wikidata5M slice not found at {SLICE}")

TRIPLES = (
    "Q1\tP31\tQ2\n"
    "Q1\tP17\tQ3\n"
    "Q2\tP31\tQ4\n"      # Q4's description is empty -> dropped
    "Q3\tP36\tQ1\n"
    "Q5\tP31\tQ2\n"      # Q5 has no description -> dropped
    "Q6\tP50\tQ7\n"      # Q7 heads nothing -> dropped; Q6 then heads no kept triple
    "Q1\tP31\tQ2\n"      # duplicate row
)
ENTITIES = ("Q1\tDouglas Adams\tDouglas Noel Adams\n"
            "Q2\tThe Hitchhiker's Guide\n"
            "Q6\tSome Author\n"
            "Q8\tOnly In Alias File\n")
RELATIONS = "P31\tinstance of\tis a\nP17\tcountry\nP36\tcapital\nP50\tauthor\nP99\tunused relation\n"
TEXTS = ("Q1\tDouglas Adams was an English author.\n"
         "Q2\tA comedy science fiction series.\n"
         "Q3\tA country in Europe.\n"
         "Q4\t\n"
         "Q6\tA writer.\n"
         "Q7\tA book.\n")


def make_files(tmp_path: Path, triples: str = TRIPLES) -> tuple[Path, Path, Path, Path]:
    out = []
    for name, text in (("triples.txt", triples), ("entity.txt", ENTITIES), ("relation.txt", RELATIONS), ("text.txt", TEXTS)):
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        out.append(p)
    return tuple(out)


def test_preprocess_tiny(tmp_path):
    t, e, r, d = make_files(tmp_path)
    kg, stats = preprocess_wikidata5m([t], e, r, d, block_bytes=7)
    assert kg.entity_qids == ["Q1", "Q2", "Q3", "Q6"]
    assert kg.entity_names == ["Douglas Adams", "The Hitchhiker's Guide", "Q3", "Some Author"]
    assert kg.aliases[0] == ["Douglas Noel Adams", "Q1"] and kg.aliases[2] == ["Q3"]
    assert kg.descriptions[0] == "Douglas Adams was an English author."
    assert kg.relation_pids == ["P17", "P31", "P36"] and kg.relation_names == ["country", "instance of", "capital"]
    triples = {(kg.entity_qids[h], kg.relation_pids[r], kg.entity_qids[o])
               for h, r, o in zip(kg.heads.tolist(), kg.rels.tolist(), kg.tails.tolist())}
    assert triples == {("Q1", "P31", "Q2"), ("Q1", "P17", "Q3"), ("Q3", "P36", "Q1")}
    assert kg.heads.dtype == kg.rels.dtype == kg.tails.dtype == np.int32 and kg.num_triples == 4
    assert stats["original"] == {
        "entities": 8, "relations": 5, "triples": 7, "entities_in_triples": 7, "entities_heading_a_triple": 5,
        "entities_with_description": 5, "entities_with_alias": 4, "relations_in_triples": 4,
    }
    assert stats["kept"] == {"entities": 4, "relations": 3, "triples": 4}
    assert stats["removed_pct"] == {"entities": 50.0, "relations": 40.0, "triples": 42.86}
    assert stats["heads_without_description"] == 1 and stats["duplicate_triples"] == 1 and stats["rounds"] == 1
    assert stats["paper_table5"] == PAPER_TABLE5


def test_preprocess_until_stable_and_dedupe(tmp_path):
    t, e, r, d = make_files(tmp_path)
    kg, stats = preprocess_wikidata5m(t, e, r, d, until_stable=True, dedupe=True, max_description_chars=8)
    # Q6 and Q2 head only dropped triples after the first pass, so they go, and (Q1 P31 Q2) with Q2.
    assert kg.entity_qids == ["Q1", "Q3"]
    assert stats["rounds"] == 2 and stats["kept"] == {"entities": 2, "relations": 2, "triples": 2}
    assert stats["duplicate_triples"] == 0 and kg.relation_pids == ["P17", "P36"]
    assert kg.descriptions[0] == "Douglas "
    # every kept entity heads a kept triple and has a description
    assert set(kg.heads.tolist()) == {0, 1} and all(kg.descriptions)


def test_preprocess_dedupe_keeps_first_rows(tmp_path):
    t, e, r, d = make_files(tmp_path)
    kg, stats = preprocess_wikidata5m(t, e, r, d, dedupe=True)
    assert stats["duplicate_triples"] == 1 and stats["kept"]["triples"] == 3 and stats["deduplicated"] is True
    assert [kg.entity_qids[h] for h in kg.heads.tolist()] == ["Q1", "Q1", "Q3"]


@pytest.mark.parametrize("bad, line", [
    ("Q1\tP31\n", 2),            # too few fields
    ("Q1\tP31\tQ2\tQ9\n", 2),    # too many fields (pandas parser error)
    ("X1\tP31\tQ2\n", 2),        # not a Wikidata id
    ("Q1\tinstance of\tQ2\n", 2),
])
def test_triple_ids_malformed(tmp_path, bad, line):
    p = tmp_path / "t.txt"
    p.write_text("Q1\tP31\tQ2\n" + bad + "Q3\tP31\tQ2\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as exc:
        list(read_triple_ids(p, block_bytes=1))
    assert exc.value.line == line and f"{p}:{line}" in str(exc.value)
    assert "Qhead<TAB>Prel<TAB>Qtail" in str(exc.value)


@pytest.mark.parametrize("block_bytes", [1, 5, 13, 1 << 20])
def test_triple_ids_layout_edge_cases(tmp_path, block_bytes):
    """BOM, CRLF, blank lines, no final newline, lines split across blocks: same ids as the line reader."""
    p = tmp_path / "t.txt"
    p.write_bytes(b"\xef\xbb\xbfQ1\tP31\tQ2\r\n\nQ2147483647\tP1\tQ0\nQ10\tP9999\tQ123456789")
    h, r, t = (np.concatenate(x) for x in zip(*read_triple_ids(p, block_bytes=block_bytes)))
    assert h.tolist() == [1, 2147483647, 10] and r.tolist() == [31, 1, 9999] and t.tolist() == [2, 0, 123456789]
    assert h.dtype == np.int32
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert list(read_triple_ids(empty, block_bytes=block_bytes)) == []


@pytest.mark.parametrize("bad", ["Q2147483648\tP1\tQ2", "Q12345678901\tP1\tQ2", "Q\tP1\tQ2", "Q1\tP1\tQ2 ", "Q1\tP\u00b2\tQ2"])
def test_triple_ids_bad_numbers(tmp_path, bad):
    p = tmp_path / "t.txt"
    p.write_text("Q1\tP31\tQ2\n\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as exc:
        list(read_triple_ids(p))
    assert exc.value.line == 3 and "Qhead<TAB>Prel<TAB>Qtail" in str(exc.value)


def test_alias_and_text_malformed(tmp_path):
    p = tmp_path / "entity.txt"
    p.write_text("Q1\tDouglas Adams\nQ2\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as exc:
        list(read_aliases(p, "entity"))
    assert f"{p}:2" in str(exc.value) and "Qid<TAB>name" in str(exc.value)
    p.write_text("P31\tinstance of\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="Qid<TAB>name"):
        list(read_aliases(p, "entity"))
    assert list(read_aliases(p, "relation")) == [(31, ["instance of"])]
    d = tmp_path / "text.txt"
    d.write_text("Q1\tAn author.\nQ2 no tab here\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as exc:
        list(read_descriptions(d))
    assert f"{d}:2" in str(exc.value) and "Qid<TAB>description" in str(exc.value)


@needs_slice
def test_real_slice_triple_readers_agree():
    rows = list(read_triples(SLICE, "wikidata5m"))
    assert len(rows) == 5321
    assert rows[0].s == "Q7965079" and rows[0].r == "P27" and rows[0].o == "Q16"
    h, r, t = (np.concatenate(parts) for parts in zip(*read_triple_ids(SLICE, block_bytes=1000)))
    assert h.size == 5321
    assert h.tolist() == [int(x.s[1:]) for x in rows]
    assert r.tolist() == [int(x.r[1:]) for x in rows]
    assert t.tolist() == [int(x.o[1:]) for x in rows]


@needs_slice
def test_real_slice_preprocess_matches_set_reference(tmp_path):
    """The vectorized filter equals a plain set-based reading of Appendix B on 10,678 real triples."""
    valid = SLICE.with_name("libkge_valid.txt")
    rows = list(read_triples(SLICE, "wikidata5m")) + list(read_triples(valid, "wikidata5m"))
    entities = sorted({x.s for x in rows} | {x.o for x in rows}, key=lambda q: int(q[1:]))
    described = {q for q in entities if int(q[1:]) % 3 != 0}  # a deterministic third lack descriptions
    (tmp_path / "text.txt").write_text("".join(f"{q}\tdescription of {q}\n" for q in sorted(described)), encoding="utf-8")
    (tmp_path / "entity.txt").write_text("".join(f"{q}\tname {q}\n" for q in entities[::2]), encoding="utf-8")
    rel_ids = sorted({x.r for x in rows})
    (tmp_path / "relation.txt").write_text("".join(f"{p}\trel {p}\n" for p in rel_ids), encoding="utf-8")

    kg, stats = preprocess_wikidata5m([SLICE, valid], tmp_path / "entity.txt", tmp_path / "relation.txt",
                                      tmp_path / "text.txt", block_bytes=4000)

    heads = {x.s for x in rows}
    kept = {q for q in heads if q in described}
    ref = [(x.s, x.r, x.o) for x in rows if x.s in kept and x.o in kept]
    got = [(kg.entity_qids[h], kg.relation_pids[r], kg.entity_qids[o])
           for h, r, o in zip(kg.heads.tolist(), kg.rels.tolist(), kg.tails.tolist())]
    assert got == ref  # same triples, same order
    assert set(kg.entity_qids) == kept and kg.entity_qids == sorted(kept, key=lambda q: int(q[1:]))
    assert stats["original"]["triples"] == 10678 and stats["kept"]["triples"] == len(ref)
    assert stats["original"]["entities_in_triples"] == len(entities)
    assert stats["kept"]["relations"] == len({r for _, r, _ in ref})
    names = dict(zip(kg.entity_qids, kg.entity_names))
    assert all(names[q] in (f"name {q}", q) for q in kept)


def test_wikidata5m_store_integration(tmp_path):
    from kgrag_lib.kg.sources import wikidata5m_store

    t, e, r, d = make_files(tmp_path)
    kg, stats = preprocess_wikidata5m(t, e, r, d)
    store = wikidata5m_store(kg)
    assert store.num_entities == 4 and store.num_relations == 3
    assert store.num_triples == 3  # the store de-duplicates the repeated row
    adams = store.find_entity("Douglas Adams")
    assert adams is not None and store.find_entity("Q1") == adams
    assert store.description(adams) == "Douglas Adams was an English author."
    verbal = store.verbalize(store.out_triples(adams))
    assert sorted(verbal) == ["<Douglas Adams | country | Q3>", "<Douglas Adams | instance of | The Hitchhiker's Guide>"]


def test_registry_paths_feed_preprocess(tmp_path):
    """`preprocess_wikidata5m(**wikidata5m_paths(root))` works on a data root laid out as the manifest says."""
    from kgrag_lib.data.registry import wikidata5m_paths

    (tmp_path / "wikidata5m").mkdir()
    t, e, r, d = make_files(tmp_path)
    for src, name in ((t, "wikidata5m_all_triplet.txt"), (e, "wikidata5m_entity.txt"),
                      (r, "wikidata5m_relation.txt"), (d, "wikidata5m_text.txt")):
        src.rename(tmp_path / "wikidata5m" / name)
    kg, stats = preprocess_wikidata5m(**wikidata5m_paths(tmp_path))
    assert stats["kept"] == {"entities": 4, "relations": 3, "triples": 4}
