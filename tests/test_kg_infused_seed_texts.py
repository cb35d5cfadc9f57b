"""KG-Infused RAG's seed candidates without a Python loop over entities: the ids from the head
array, the `name\\ndescription` texts streamed in blocks, the embeddings keyed by the saved
store's fingerprint. The result must equal the former per-entity loop on every kind of store."""

from __future__ import annotations

import numpy as np
import pytest

from fakes import BagOfWordsEmbedder
from kgrag_lib.kg import KGStore
from kgrag_lib.kg.sources import MAX_VERBALIZED_FACTS, BuiltKG, load_kg, verbalized_description
from kgrag_lib.methods.kg_infused import kg_sources
from kgrag_lib.methods.kg_infused.kg_sources import (SeedTexts, build_kg_source, description_text, kg_seed_cache_path,
                                                     seed_candidate_ids, seed_candidates)
from kgrag_lib.records import Triple
from test_kg_sources import write_2wiki, write_wikidata5m


def former_seed_candidates(store):
    """The loop `seed_candidates` ran before (issue 43), kept as the reference."""
    heads = np.unique(np.asarray(store.heads, dtype=np.int64))
    ids, texts = [], []
    for e in heads.tolist():
        name = store.entity_name(e)
        desc = store.description(e) or ""
        if not desc:
            tids = store.out_triples(e)[:MAX_VERBALIZED_FACTS + 1]
            desc = verbalized_description(name, [(t.r, t.o) for t in (store.triple(int(i)) for i in tids)])
        if desc:
            ids.append(e)
            texts.append(description_text(name, desc))
    return np.asarray(ids, dtype=np.int64), texts


def _synthetic(n_entities: int = 300, seed: int = 0) -> KGStore:
    """Ids-built store: some entities head many triples (past the verbalized cap), some none;
    descriptions for about half, some empty, unicode names."""
    rng = np.random.default_rng(seed)
    heads = rng.integers(0, n_entities // 2, 2000)
    heads[:40] = 3   # one entity with > MAX_VERBALIZED_FACTS out-triples
    tails = rng.integers(0, n_entities, 2000)
    rels = rng.integers(0, 5, 2000)
    names = [f"Entité {i} ☃" for i in range(n_entities)]
    descriptions = {i: (f"description {i}" if i % 3 else "") for i in range(0, n_entities, 2)}
    return KGStore.from_id_arrays(heads, rels, tails, names, [f"rel {r}" for r in range(5)],
                                  descriptions=descriptions)


def _stores(tmp_path):
    root = write_2wiki(tmp_path / "data")
    yield "2wiki-evidence", load_kg("2wiki-evidence-oracle", data_root=root, cache_dir=tmp_path / "c").store
    yield "wikidata5m", load_kg(f"wikidata5m:{write_wikidata5m(tmp_path / 'w5m')}", cache_dir=tmp_path / "c").store
    yield "no descriptions", KGStore.from_triples([Triple("A", "r", "B"), Triple("B", "r", "C"), Triple("A", "s", "C")])
    synthetic = _synthetic()
    yield "synthetic", synthetic
    synthetic.save(tmp_path / "saved")
    yield "synthetic, saved and loaded", KGStore.load(tmp_path / "saved")
    grown = KGStore.load(tmp_path / "saved")
    grown.add_triples([Triple("Entité 299 ☃", "rel 0", "new entity"),
                       Triple("new entity", "rel 9", "Entité 1 ☃")])
    grown.set_descriptions({"Entité 5 ☃": "set after loading", 4: ""})
    yield "loaded then changed", grown


def test_ids_and_texts_equal_the_former_loop_on_every_kind_of_store(tmp_path):
    seen = []
    for label, store in _stores(tmp_path):
        want_ids, want_texts = former_seed_candidates(store)
        ids, texts = seed_candidates(store)
        assert ids.dtype == np.int64 and np.array_equal(ids, want_ids), label
        assert texts == want_texts, label
        blocks = list(SeedTexts(store, ids).iter_texts(block=7, start=3))
        assert [t for b in blocks for t in b] == want_texts[3:] and all(len(b) <= 7 for b in blocks), label
        seen.append(label)
    assert len(seen) == 6


def test_the_key_is_the_saved_folders_fingerprint_until_the_store_changes(tmp_path):
    store = _synthetic()
    assert store.fingerprint is None and SeedTexts(store, seed_candidate_ids(store)).key is None
    store.save(tmp_path / "kg")
    a, b = KGStore.load(tmp_path / "kg"), KGStore.load(tmp_path / "kg")
    assert a.fingerprint and a.fingerprint == b.fingerprint
    key = SeedTexts(a, seed_candidate_ids(a)).key
    assert key == f"kgstore:{a.fingerprint}:{kg_sources.SEED_TEXT_FORM}"
    a.set_descriptions({0: "changed"})
    assert a.fingerprint is None
    b.add_triples([Triple("x", "y", "z")])
    assert b.fingerprint is None
    _synthetic(seed=1).save(tmp_path / "kg")   # replaced by another store: another key
    assert KGStore.load(tmp_path / "kg").fingerprint != key.split(":")[1]


def test_a_cached_kg_source_builds_no_text(tmp_path, monkeypatch):
    _synthetic().save(tmp_path / "kg")
    kg = load_kg(str(tmp_path / "kg"), cache_dir=tmp_path / "cache")
    emb = BagOfWordsEmbedder()
    src = build_kg_source(kg, emb, tmp_path / "cache", show_progress=False)
    path = kg_seed_cache_path(kg, emb, tmp_path / "cache")
    assert path.exists() and path.name.startswith("kg-store_kg-descriptions-")
    _, texts = former_seed_candidates(kg.store)
    np.testing.assert_array_equal(np.load(path), BagOfWordsEmbedder().encode(texts))
    assert src.stats["seed_descriptions_verbalized"] == sum("\nEnt" in t for t in texts)

    def no_text(*a, **kw):
        raise AssertionError("a seed text was built on a cache hit")

    monkeypatch.setattr(SeedTexts, "_text", no_text)
    again = build_kg_source(load_kg(str(tmp_path / "kg"), cache_dir=tmp_path / "cache"), emb, tmp_path / "cache",
                            show_progress=False)
    assert np.array_equal(again.entity_ids, src.entity_ids) and emb.calls == 1


def test_an_in_memory_store_is_keyed_by_its_texts_as_before(tmp_path):
    from kgrag_lib.retrieval import cache_path

    store = KGStore.from_triples([Triple("A", "r", "B"), Triple("B", "r", "C")])
    emb = BagOfWordsEmbedder()
    build_kg_source(BuiltKG("mem", "mem", store, {}), emb, tmp_path, show_progress=False)
    _, texts = former_seed_candidates(store)
    assert cache_path(emb, texts, cache_dir=tmp_path, name="kg-mem-descriptions").exists()


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_stores(n):
    store = KGStore.from_triples([Triple("A", "r", "B")][:n])
    ids, texts = seed_candidates(store)
    assert list(ids) == list(range(n)) and len(texts) == n
