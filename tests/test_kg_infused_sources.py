"""KG-Infused RAG's KG source: seed candidates and the seed-entity index over a KG from
`load_kg` (small real-format files from test_kg_sources), Table 5 rows, and corpus resolution."""

from __future__ import annotations

import numpy as np
import pytest

from fakes import BagOfWordsEmbedder
from kgrag_lib.errors import ConfigError
from kgrag_lib.kg import KGStore
from kgrag_lib.kg.sources import BuiltKG, load_kg
from kgrag_lib.methods.base import RunContext
from kgrag_lib.methods.kg_infused.corpus import build_corpus_index, load_passages, resolve_corpus_name
from kgrag_lib.methods.kg_infused.kg_sources import build_kg_source, load_kg_source, seed_candidates, table5_rows
from kgrag_lib.paths import data_root
from kgrag_lib.records import Triple
from test_kg_sources import CORPUS, write_2wiki, write_wikidata5m

REAL = data_root()
HAVE_2WIKI = (REAL / "2wiki" / "lag_2wiki_dev_4000_nocontext.json").exists()


@pytest.fixture
def small_root(tmp_path):
    return write_2wiki(tmp_path / "data")


def test_seed_candidates_of_the_2wiki_evidence_kg(small_root, tmp_path):
    store = load_kg("2wiki-evidence-oracle", data_root=small_root, cache_dir=tmp_path / "cache").store
    ids, texts = seed_candidates(store)
    assert sorted(store.entity_name(e) for e in ids) == ["George Cukor", "Roy Del Ruth", "Taxi!", "What Price Hollywood?"]
    taxi = store.entity_id("Taxi!")
    assert texts[list(ids).index(taxi)] == "Taxi!\n" + CORPUS[0]["text"]


def test_kg_source_is_built_once_and_cached(small_root, tmp_path):
    cache = tmp_path / "cache"
    emb = BagOfWordsEmbedder()
    ctx = RunContext(embedder=emb, data_root=str(small_root), cache_dir=str(cache))
    src = load_kg_source(ctx, "2wiki-evidence-oracle")
    assert load_kg_source(ctx, "2wiki-evidence-oracle") is src
    assert src.name == "2wiki-evidence-oracle" and src.stats["seed_candidates"] == 4
    assert len([p for p in (cache / "kg").glob("2wiki-evidence-oracle-*") if p.is_dir()]) == 1
    qv = emb.encode(["Who directed the film Taxi!?"])
    seeds = src.seed_entities(qv, 2)
    assert src.store.entity_name(seeds[0][0]) == "Taxi!" and seeds[0][1] >= seeds[1][1]
    again = build_kg_source(load_kg("2wiki-evidence-oracle", data_root=small_root, cache_dir=cache), emb, cache,
                            show_progress=False)
    assert again.store.num_triples == src.store.num_triples
    assert again.store.description(again.store.entity_id("Taxi!")) == CORPUS[0]["text"]
    assert np.array_equal(again.entity_ids, src.entity_ids)


def test_saved_store_as_kg(tmp_path):
    KGStore.from_triples([Triple("A", "r", "B"), Triple("B", "r", "C")]).save(tmp_path / "my_kg")
    kg = load_kg(str(tmp_path / "my_kg"), cache_dir=tmp_path / "cache")
    ids, texts = seed_candidates(kg.store)   # no stored descriptions: verbalized from triples
    assert texts == ["A\nA: r B.", "B\nB: r C."]
    src = build_kg_source(kg, BagOfWordsEmbedder(), tmp_path / "cache", show_progress=False)
    assert src.name == "store:my_kg" and src.stats["triples"] == 2 and src.stats["seed_candidates"] == 2


def test_kg_without_seed_candidates_is_refused(tmp_path):
    empty = BuiltKG("empty", "empty", KGStore.from_triples([]), {})
    with pytest.raises(ConfigError, match="kg='empty': no entity has both"):
        build_kg_source(empty, BagOfWordsEmbedder(), tmp_path, show_progress=False)


def test_wikidata5m_seed_candidates_and_table5(tmp_path):
    kg = load_kg(f"wikidata5m:{write_wikidata5m(tmp_path / 'w5m')}", cache_dir=tmp_path / "cache")
    ids, _ = seed_candidates(kg.store)
    assert sorted(kg.store.entity_name(e) for e in ids) == ["Blondie Johnson", "Roy Del Ruth", "Taxi!", "Winnie Lightner"]
    rows = table5_rows(kg.stats)
    assert rows[0] == {"kg": "Wikidata5M (ours)", "entities": 6, "relations": 4, "triples": 6}
    assert rows[1] == {"kg": "Wikidata5M-KG (ours)", "entities": 4, "relations": 2, "triples": 4}
    assert rows[3]["entities"] == 4665331


def test_corpus_resolution():
    assert resolve_corpus_name("auto", "hotpotqa") == "hotpotqa"
    assert resolve_corpus_name("auto", "bamboogle") == "pooled"
    assert resolve_corpus_name("pooled", "2wiki") == "pooled"
    with pytest.raises(ConfigError, match="corpus=auto"):
        resolve_corpus_name("auto", "")


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
