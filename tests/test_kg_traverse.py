"""Spreading-activation primitives: the seeded per-entity triple sample, the frontier's eq. 6
step (order, leaves, cap, no re-activation) and SA-RAG's rescaled-cosine edge weights."""

from __future__ import annotations

import numpy as np
import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.kg import KGStore
from kgrag_lib.kg.traverse import Frontier, rescaled_cosine, sample_out_triples
from kgrag_lib.records import Triple


def hub_store(n: int) -> KGStore:
    return KGStore.from_triples([Triple("Hub", f"r{i:02d}", f"x{i}") for i in range(n)])


def test_sample_is_seeded_by_entity_name_and_sorted():
    store = hub_store(40)
    hub = store.entity_id("Hub")
    a = sample_out_triples(store, hub, 10, seed=42)
    assert len(a) == 10 and len(set(a.tolist())) == 10 and np.all(np.diff(a) > 0)
    assert np.array_equal(a, sample_out_triples(store, hub, 10, seed=42))
    assert not np.array_equal(a, sample_out_triples(store, hub, 10, seed=7))
    assert set(a.tolist()) <= set(store.out_triples(hub).tolist())
    # the same name in another graph draws the same positions: the key is (seed, name), not the id
    other = KGStore.from_triples([Triple("a", "b", "c")] + [Triple("Hub", f"r{i:02d}", f"x{i}") for i in range(40)])
    b = sample_out_triples(other, other.entity_id("Hub"), 10, seed=42)
    assert other.verbalize(b) == store.verbalize(a)


@pytest.mark.parametrize("cap", [0, -1, 40, 50])
def test_no_sample_when_the_cap_does_not_bind(cap):
    store = hub_store(40)
    assert np.array_equal(sample_out_triples(store, store.entity_id("Hub"), cap, seed=1), np.arange(40))


def chain_store() -> KGStore:
    """S -> A, B, C, D (non-leaves), S -> 1999 (a leaf twice), A -> S (back to the start)."""
    return KGStore.from_triples([
        Triple("S", "r", "A"), Triple("S", "r", "B"), Triple("S", "r", "1999"), Triple("S", "q", "1999"),
        Triple("S", "r", "C"), Triple("S", "r", "D"), Triple("A", "r", "S"), Triple("B", "r", "x"),
        Triple("C", "r", "x"), Triple("D", "r", "x"), Triple("A", "q", "B"),
    ])


def ids_of(store: KGStore, *triples: tuple[str, str, str]) -> list[int]:
    every = {store.triple(i): i for i in range(store.num_triples)}
    return [every[Triple(*t)] for t in triples]


def test_frontier_step_order_leaves_and_cap():
    store = chain_store()
    names = lambda ids: [store.entity_name(e) for e in ids]  # noqa: E731
    f = Frontier(store)
    f.activate([store.entity_id("S"), store.entity_id("S")])
    assert names(f.activated) == ["S"] and store.entity_id("S") in f
    order = [("S", "r", "C"), ("S", "r", "1999"), ("S", "r", "A"), ("A", "r", "S"), ("S", "q", "1999"),
             ("S", "r", "B"), ("A", "q", "B"), ("S", "r", "D"), ("S", "r", "D")]
    step = f.next_from_tails(ids_of(store, *order), cap=2)
    assert names(step.entities) == ["C", "A"]              # in triple order, S already active
    assert names(step.leaves) == ["1999"]                   # once, though reached twice
    assert names(step.capped) == ["B", "B", "D", "D"]       # as they came, beyond the cap
    assert names(f.activated) == ["S"]                      # a step activates nothing
    f.activate(step.entities)
    again = f.next_from_tails(ids_of(store, ("A", "r", "S"), ("S", "r", "C"), ("A", "q", "B")), cap=10)
    assert names(again.entities) == ["B"] and again.leaves == [] and again.capped == []
    assert names(f.activated) == ["S", "C", "A"]


def test_rescaled_cosine_values_and_threshold_check():
    w = np.array([-0.2, 0.0, 0.4, 0.55, 0.7, 1.0], dtype=np.float32)
    got = rescaled_cosine(w)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [0.0, 0.0, 0.0, 0.25, 0.5, 1.0], atol=1e-6)
    np.testing.assert_allclose(rescaled_cosine(np.array([0.5, 0.75]), c=0.5), [0.0, 0.5])
    np.testing.assert_allclose(rescaled_cosine(np.array([0.3, 1.0]), c=0.0), [0.3, 1.0])
    assert rescaled_cosine(np.array([0, 1])).dtype == np.float64
    for bad in (1.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError, match=r"c=.*\[0, 1\)"):
            rescaled_cosine(w, c=bad)
