"""Spreading activation (KG-Infused RAG §3.4) with a scripted LLM: memory update, no
re-activation, caps, termination, tolerant triple matching and prefix reuse across rounds."""

from __future__ import annotations

import re

import numpy as np
import pytest

from _kg_infused_helpers import candidate_section, echo_all, tiny_store
from kgrag_lib.kg import KGStore
from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from kgrag_lib.methods.kg_infused.activation import (
    STOP_MAX_ROUNDS, STOP_NO_CANDIDATES, STOP_NO_NEW_ENTITIES, ActivationSettings, match_selected,
    sample_out_triples, spread_activation,
)
from kgrag_lib.records import Triple

Q = "Where was the director of Taxi! born?"


def ids(store, *names):
    return [store.entity_id(n) for n in names]


def test_round_one_selection_then_update_with_memory():
    store = tiny_store()
    llm = ScriptedLLM(echo_all)
    res = spread_activation(store, llm, Q, ids(store, "Taxi!"), ActivationSettings(rounds=2))
    assert [r.stage for r in res.rounds] == ["triple_selection", "triple_update"]
    first, second = llm.requests[0].prompt, llm.requests[1].prompt
    assert "[1] Taxi!" in first and "<Taxi! | director | Roy Del Ruth>" in first
    # Round 2 shows the memory (round-1 selection) and only the new entities' triples.
    prev, new = second.split("Already chosen facts:", 1)[1].split("New facts:", 1)
    assert "<Taxi! | director | Roy Del Ruth>" in prev
    assert "<Roy Del Ruth | place of birth | Philadelphia>" in new and "<Taxi!" not in new
    # Memory: G_act = round-1 + round-2 triples; E_act = seeds + round-2 entities.
    assert res.rounds[0].next_entities == ["Roy Del Ruth", "James Cagney"]
    assert res.rounds[0].leaves_skipped == ["1932"]
    names = [store.entity_name(e) for e in res.entity_ids]
    assert names == ["Taxi!", "Roy Del Ruth", "James Cagney"]
    got = [store.triple(t).verbalize() for t in res.triple_ids]
    assert got[:3] == ["<Taxi! | director | Roy Del Ruth>", "<Taxi! | publication date | 1932>",
                       "<Taxi! | cast member | James Cagney>"]
    assert "<Roy Del Ruth | spouse | Winnie Lightner>" in got and len(got) == len(set(got)) == 7
    assert res.subgraph_after(1) == res.round_triples[0] and res.stop_reason == STOP_MAX_ROUNDS
    trace = res.to_trace(store)
    assert trace["seed_entities"] == ["Taxi!"] and trace["rounds"][1]["selected"]


def test_no_reactivation_of_activated_entities():
    store = tiny_store()
    res = spread_activation(store, ScriptedLLM(echo_all), Q, ids(store, "Taxi!"), ActivationSettings(rounds=6))
    # Winnie Lightner's spouse is Roy Del Ruth (activated in round 2): never activated again.
    activated = [store.entity_name(e) for e in res.entity_ids]
    assert len(activated) == len(set(activated))
    r3 = res.rounds[2]
    assert r3.active_entities == ["Philadelphia", "Winnie Lightner"]
    assert "Roy Del Ruth" not in r3.next_entities
    assert r3.next_entities == ["United States"]
    # Round 4 expands United States, whose only tail is a literal: no new entity, stop.
    assert res.n_rounds == 4 and res.stop_reason == STOP_NO_NEW_ENTITIES


def test_stops_when_nothing_new_and_sends_no_more_requests():
    store = tiny_store()
    llm = ScriptedLLM(lambda m, p: "<Taxi! | publication date | 1932>")
    res = spread_activation(store, llm, Q, ids(store, "Taxi!"), ActivationSettings(rounds=5))
    assert len(llm.requests) == 1 and res.n_rounds == 1 and res.stop_reason == STOP_NO_NEW_ENTITIES
    llm2 = ScriptedLLM(lambda m, p: "None of these facts are relevant.")
    res2 = spread_activation(store, llm2, Q, ids(store, "Taxi!"), ActivationSettings(rounds=5))
    assert len(llm2.requests) == 1 and res2.triple_ids == [] and res2.stop_reason == STOP_NO_NEW_ENTITIES
    # A seed without outgoing triples: no candidates, no request at all.
    llm3 = ScriptedLLM([])
    res3 = spread_activation(store, llm3, Q, ids(store, "1932"), ActivationSettings(rounds=2))
    assert llm3.requests == [] and res3.stop_reason == STOP_NO_CANDIDATES
    assert [store.entity_name(e) for e in res3.entity_ids] == ["1932"]


def test_entity_cap_per_round():
    triples = [Triple("Hub", "links to", f"Node {i}") for i in range(8)]
    triples += [Triple(f"Node {i}", "value", f"v{i}") for i in range(8)]
    store = KGStore.from_triples(triples)
    res = spread_activation(store, ScriptedLLM(echo_all), "q", [store.entity_id("Hub")],
                            ActivationSettings(rounds=2, max_entities_per_round=3))
    r1 = res.rounds[0]
    assert r1.next_entities == ["Node 0", "Node 1", "Node 2"]
    assert r1.capped == [f"Node {i}" for i in range(3, 8)]
    assert res.rounds[1].active_entities == ["Node 0", "Node 1", "Node 2"]


def test_triple_cap_is_a_seeded_sample_independent_of_round_and_question():
    triples = [Triple("Hub", f"r{i:02d}", f"x{i}") for i in range(40)]
    store = KGStore.from_triples(triples)
    hub = store.entity_id("Hub")
    a = sample_out_triples(store, hub, 10, seed=42)
    assert len(a) == 10 and len(set(a.tolist())) == 10
    assert np.array_equal(a, sample_out_triples(store, hub, 10, seed=42))
    assert not np.array_equal(a, sample_out_triples(store, hub, 10, seed=7))
    assert len(sample_out_triples(store, hub, 50, seed=42)) == 40
    llm = ScriptedLLM(lambda m, p: "")
    spread_activation(store, llm, "q1", [hub], ActivationSettings(rounds=1, max_triples_per_entity=10, seed=42))
    spread_activation(store, llm, "q2", [hub], ActivationSettings(rounds=1, max_triples_per_entity=10, seed=42))
    shown = [re.findall(r"<[^<>]+>", candidate_section(r.prompt)) for r in llm.requests]
    assert len(shown[0]) == 10 and shown[0] == shown[1]
    assert shown[0] == store.verbalize(a)


def test_invented_triples_are_rejected_and_recorded():
    store = tiny_store()
    out = "<Taxi! | director | Roy Del Ruth>\n<Taxi! | director | Steven Spielberg>"
    res = spread_activation(store, ScriptedLLM([out]), Q, ids(store, "Taxi!"), ActivationSettings(rounds=1))
    assert res.rounds[0].selected == ["<Taxi! | director | Roy Del Ruth>"]
    assert res.rounds[0].unmatched == ["Taxi! | director | Steven Spielberg"]


CANDS = [(10, Triple("Taxi!", "director", "Roy Del Ruth")), (11, Triple("Taxi!", "publication date", "1932")),
         (12, Triple("Roy Del Ruth", "place of birth", "Philadelphia")), (13, Triple("A, B", "has part", "C"))]


@pytest.mark.parametrize("output,expected", [
    ("<Taxi! | director | Roy Del Ruth>", [10]),
    ("Selected Triples:\n1. <Taxi! | director | Roy Del Ruth>\n2. <Roy Del Ruth | place of birth | Philadelphia>", [10, 12]),
    ("- taxi! | DIRECTOR | roy del ruth\n* <Taxi!|publication date|1932>.", [10, 11]),
    ("(Roy Del Ruth, place of birth, Philadelphia) and <Taxi!, director, Roy Del Ruth>", [12, 10]),
    ('[["Taxi!", "publication date", "1932"]]', [11]),
    ("The relevant ones are <Taxi! | director | Roy Del Ruth> because it names the director; "
     "also <Taxi! | director | Roy Del Ruth> again", [10]),
    ("<A, B | has part | C>", [13]),
    ("[1] Taxi!\n<Taxi! | publication date | 1932", [11]),   # closing bracket cut off: still whole
    ("<Taxi! | director | Roy Del Ruth>\n<Taxi! | publication date | 19", [10]),  # truncated fact: dropped
    ("", []),
])
def test_match_selected_tolerates_noisy_output(output, expected):
    found, _ = match_selected(output, CANDS)
    assert found == expected


def test_match_selected_reports_unmatched_fact_lines():
    found, unmatched = match_selected("<Taxi! | genre | drama>\nRoy Del Ruth | spouse | Winnie Lightner\nThat is all.", CANDS)
    assert found == [] and unmatched == ["Taxi! | genre | drama", "Roy Del Ruth | spouse | Winnie Lightner"]


def test_k_plus_one_rounds_reuse_every_k_round_request(tmp_path):
    store = tiny_store()
    cache = LLMCache(tmp_path / "llm.sqlite")
    llm = ScriptedLLM(echo_all, cache=cache)
    seeds = ids(store, "Taxi!")
    prompts_by_k = {}
    for k in (1, 2, 3):
        before = len(llm.requests)
        hits = llm.usage.cache_hits
        res = spread_activation(store, llm, Q, seeds, ActivationSettings(rounds=k))
        new = llm.requests[before:]
        # Rounds 1..k-1 come from the cache; only round k reaches the backend.
        assert llm.usage.cache_hits - hits == k - 1
        assert len(new) == 1 and res.n_rounds == k
        prompts_by_k[k] = new[0].prompt
    # A fresh, uncached LLM renders byte-identical prompts for the shared rounds.
    fresh = ScriptedLLM(echo_all)
    spread_activation(store, fresh, Q, seeds, ActivationSettings(rounds=3))
    assert [r.prompt for r in fresh.requests] == [prompts_by_k[1], prompts_by_k[2], prompts_by_k[3]]
    cache.close()
