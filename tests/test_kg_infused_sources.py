"""KG sources and corpora of KG-Infused RAG: the 2wiki-evidence slice and Wikidata5M-KG built
from files in their real formats (small ones here, the real 2Wiki files when present), the
seed-entity index, the build cache, and corpus resolution."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from _kg_infused_helpers import BagOfWordsEmbedder
from kgrag_lib.errors import ConfigError, MissingDataError
from kgrag_lib.kg import KGStore
from kgrag_lib.methods.kg_infused.corpus import build_corpus_index, load_passages, resolve_corpus_name
from kgrag_lib.methods.kg_infused.kg_sources import (
    build_2wiki_evidence_store, build_kg_source, resolve_kg, seed_candidates, table5_rows,
)
from kgrag_lib.paths import data_root

REAL = data_root()
HAVE_2WIKI = (REAL / "2wiki" / "lag_2wiki_dev_4000_nocontext.json").exists()

LAG = [
    {"_id": "a1", "type": "bridge_comparison", "question": "Which film has the director who died later, Taxi! or What Price Hollywood??",
     "entity_ids": "Q1_Q2", "supporting_facts": [["Taxi!", 0], ["What Price Hollywood?", 0]],
     "evidences": [["Taxi!", "director", "Roy Del Ruth"], ["What Price Hollywood?", "director", "George Cukor"],
                   ["Roy Del Ruth", "date of death", "April 27, 1961"], ["George Cukor", "date of death", "January 24, 1983"]],
     "answer": "What Price Hollywood?", "evidences_id": [], "answer_id": "Q2"},
    {"_id": "a2", "type": "compositional", "question": "Who is the spouse of the director of film Taxi!?",
     "entity_ids": "Q1", "supporting_facts": [["Taxi!", 0], ["Roy Del Ruth", 0]],
     "evidences": [["Taxi!", "director", "Roy Del Ruth"], ["Roy Del Ruth", "spouse", "Winnie Lightner"]],
     "answer": "Winnie Lightner", "evidences_id": [], "answer_id": "Q3"},
]
CORPUS = [{"title": "Taxi!", "text": "Taxi! is a 1932 American drama film directed by Roy Del Ruth."},
          {"title": "George Cukor", "text": "George Cukor was an American film director."}]


@pytest.fixture
def small_root(tmp_path):
    (tmp_path / "2wiki").mkdir()
    (tmp_path / "2wiki" / "lag_2wiki_dev_4000_nocontext.json").write_text(json.dumps(LAG), encoding="utf-8")
    (tmp_path / "2wiki" / "HippoRAG_2wiki_1000q_corpus.json").write_text(json.dumps(CORPUS), encoding="utf-8")
    return tmp_path


def test_2wiki_evidence_slice_from_small_real_format_files(small_root):
    store, stats = build_2wiki_evidence_store(small_root)
    assert stats["triples"] == store.num_triples == 5          # the shared director fact counted once
    assert stats["questions"] == 2 and stats["evidence_rows"] == 6
    taxi, roy, cukor = (store.entity_id(n) for n in ("Taxi!", "Roy Del Ruth", "George Cukor"))
    assert store.description(taxi) == CORPUS[0]["text"]        # from the corpus passage
    assert store.description(roy) == "Roy Del Ruth: date of death April 27, 1961; spouse Winnie Lightner."
    assert store.description(store.entity_id("April 27, 1961")) == ""   # a literal: no description
    assert stats["descriptions_from_corpus_passage"] == 2 and stats["descriptions_verbalized_from_triples"] == 2
    t = next(i for i in range(store.num_triples) if store.triple(i).r == "director" and store.triple(i).s == "Taxi!")
    assert sorted(store.provenance_of_triple(t)) == ["2wiki-dev:a1", "2wiki-dev:a2"]
    ids, texts = seed_candidates(store)
    assert sorted(store.entity_name(e) for e in ids) == ["George Cukor", "Roy Del Ruth", "Taxi!", "What Price Hollywood?"]
    assert texts[list(ids).index(taxi)].startswith("Taxi!\n")
    assert cukor in ids


def test_2wiki_missing_files_say_what_is_needed(tmp_path):
    with pytest.raises(MissingDataError, match="lag_2wiki_dev_4000_nocontext.json"):
        resolve_kg("2wiki-evidence", tmp_path, tmp_path / "cache")


def test_kg_source_is_built_once_and_cached(small_root, tmp_path):
    cache = tmp_path / "cache"
    emb = BagOfWordsEmbedder()
    src = build_kg_source("2wiki-evidence", emb, small_root, cache, show_progress=False)
    assert src.name == "2wiki-evidence" and src.stats["seed_candidates"] == 4
    built = list((cache / "kg").glob("2wiki-evidence-*"))
    assert len([p for p in built if p.is_dir()]) == 1
    qv = emb.encode(["Who directed the film Taxi!?"])
    seeds = src.seed_entities(qv, 2)
    assert src.store.entity_name(seeds[0][0]) == "Taxi!" and seeds[0][1] >= seeds[1][1]
    again = build_kg_source("2wiki-evidence", emb, small_root, cache, show_progress=False)
    assert again.store.num_triples == src.store.num_triples
    assert again.store.description(again.store.entity_id("Taxi!")) == CORPUS[0]["text"]
    assert np.array_equal(again.entity_ids, src.entity_ids)


def test_saved_store_path_as_kg(tmp_path):
    from kgrag_lib.records import Triple

    store = KGStore.from_triples([Triple("A", "r", "B"), Triple("B", "r", "C")])
    store.save(tmp_path / "my_kg")
    name, loaded, stats = resolve_kg(str(tmp_path / "my_kg"), tmp_path, tmp_path / "cache")
    assert name == "store:my_kg" and stats["triples"] == 2
    ids, texts = seed_candidates(loaded)   # no stored descriptions: verbalized from triples
    assert texts == ["A\nA: r B.", "B\nB: r C."]
    with pytest.raises(ConfigError, match="2wiki-evidence"):
        resolve_kg("no-such-kg", tmp_path, tmp_path / "cache")


def _write_wikidata5m(folder: Path) -> None:
    folder.mkdir()
    (folder / "wikidata5m_all_triplet.txt").write_text(
        "Q1\tP57\tQ2\nQ2\tP570\tQ3\nQ2\tP26\tQ4\nQ4\tP26\tQ2\nQ5\tP57\tQ2\nQ1\tP577\tQ9\n", encoding="utf-8")
    (folder / "wikidata5m_entity.txt").write_text(
        "Q1\tTaxi!\tTaxi (1932 film)\nQ2\tRoy Del Ruth\nQ3\t1961\nQ4\tWinnie Lightner\nQ5\tBlondie Johnson\n", encoding="utf-8")
    (folder / "wikidata5m_relation.txt").write_text(
        "P57\tdirector\tdirected by\nP570\tdate of death\nP26\tspouse\nP577\tpublication date\n", encoding="utf-8")
    (folder / "wikidata5m_text.txt").write_text(
        "Q1\tTaxi! is a 1932 film.\nQ2\tRoy Del Ruth was a film director.\nQ4\tWinnie Lightner was an actress.\n"
        "Q5\tBlondie Johnson is a 1933 film.\nQ9\t1932 is a year.\n", encoding="utf-8")


def test_wikidata5m_kg_from_small_real_format_files(tmp_path):
    _write_wikidata5m(tmp_path / "w5m")
    name, store, stats = resolve_kg(f"wikidata5m:{tmp_path / 'w5m'}", tmp_path, tmp_path / "cache")
    assert name == "wikidata5m"
    # Q3 has no description, Q9 heads no triple: both dropped with their triples (Appendix B).
    assert stats["kept"] == {"entities": 4, "relations": 2, "triples": 4}
    assert stats["original"]["triples"] == 6 and stats["paper_table5"]["Wikidata5M-KG"]["triples"] == 20987217
    assert store.description(store.entity_id("Roy Del Ruth")) == "Roy Del Ruth was a film director."
    ids, _ = seed_candidates(store)
    assert sorted(store.entity_name(e) for e in ids) == ["Blondie Johnson", "Roy Del Ruth", "Taxi!", "Winnie Lightner"]
    rows = table5_rows(stats)
    assert rows[0] == {"kg": "Wikidata5M (ours)", "entities": 6, "relations": 4, "triples": 6}
    assert rows[1] == {"kg": "Wikidata5M-KG (ours)", "entities": 4, "relations": 2, "triples": 4}
    assert rows[3]["entities"] == 4665331
    # Second resolution loads the cached build.
    _, again, _ = resolve_kg(f"wikidata5m:{tmp_path / 'w5m'}", tmp_path, tmp_path / "cache")
    assert again.num_triples == 4 and len(list((tmp_path / "cache" / "kg").glob("wikidata5m-kg-*"))) >= 1


def test_wikidata5m_missing_files(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingDataError, match="wikidata5m_text.txt"):
        resolve_kg(f"wikidata5m:{tmp_path / 'empty'}", tmp_path, tmp_path / "cache")


def test_corpus_resolution():
    assert resolve_corpus_name("auto", "hotpotqa") == "hotpotqa"
    assert resolve_corpus_name("auto", "bamboogle") == "pooled"
    assert resolve_corpus_name("pooled", "2wiki") == "pooled"
    with pytest.raises(ConfigError, match="corpus=auto"):
        resolve_corpus_name("auto", "")


@pytest.mark.skipif(not HAVE_2WIKI, reason=f"real 2Wiki files not under the data root {REAL}")
def test_real_2wiki_evidence_kg_counts():
    store, stats = build_2wiki_evidence_store(REAL)
    assert stats["questions"] == 4000
    assert stats["triples"] == 9168 and stats["relations"] == 33 and stats["entities"] == 12304
    assert stats["entities_heading_a_triple"] == 8585
    assert stats["descriptions_from_corpus_passage"] == 995
    assert stats["descriptions_from_corpus_passage"] + stats["descriptions_verbalized_from_triples"] >= 8585
    roy = store.entity_id("Roy Del Ruth")
    assert "<Roy Del Ruth | date of death | April 27, 1961>" in store.verbalize(store.out_triples(roy))


@pytest.mark.skipif(not HAVE_2WIKI, reason=f"real 2Wiki files not under the data root {REAL}")
def test_real_corpora_and_index(tmp_path):
    assert len(load_passages("2wiki", REAL)) == 6119
    pooled = load_passages("pooled", REAL)
    assert len(pooled) > 6119 and len({p.pid for p in pooled}) == len(pooled)
    with pytest.raises(ConfigError, match="ships no corpus"):
        load_passages("bamboogle", REAL)
    emb = BagOfWordsEmbedder()
    idx = build_corpus_index("2wiki", emb, REAL, tmp_path, show_progress=False)
    assert len(idx) == 6119
    probe = next(p for p in idx.passages if p.title == "Teutberga")
    scores, rows = idx.index.search(emb.encode([probe.as_text()]), 1)
    assert idx.passages[int(rows[0][0])].title == "Teutberga" and scores[0][0] == pytest.approx(1.0, abs=1e-4)
