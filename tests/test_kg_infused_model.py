"""Every KG-Infused RAG variant end to end with the real small model on two real 2Wiki questions,
the real 2wiki-evidence-heldout KG and the real 2Wiki corpus (MiniLM). Small budgets keep the file to a
few minutes on a CPU: one activation round, 2 passages, short generations; the six variants share
one fresh LLM cache, so their common stages run once."""

from __future__ import annotations

import pytest

from kgrag_lib.paths import data_root

pytestmark = pytest.mark.model

ROOT = data_root()
CFG = {"rounds": 1, "k_p": 2, "max_tokens": 32, "answer_max_tokens": 12, "query_max_tokens": 20,
       "max_triples_per_entity": 10}
ORDER = ("nor", "vanilla-rag", "vanilla-qe", "kg-infused", "kg-qe-only", "kg-aug-only")


@pytest.fixture(scope="module")
def setup(request):
    if not (ROOT / "2wiki" / "lag_2wiki_dev_4000_nocontext.json").exists():
        pytest.skip(f"real 2Wiki files not under the data root {ROOT}")
    llm = request.getfixturevalue("shared_llm")   # the session's one load (conftest.py), after the data check
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.methods.base import RunContext

    # KG build and embeddings: the default cache folder
    ctx = RunContext(llm=llm, embedder=request.getfixturevalue("shared_embedder"))
    questions = load_questions("2wiki", n=2, seed=0, root=ROOT)
    return ctx, questions


@pytest.mark.parametrize("name", ORDER)
def test_variant_runs_end_to_end(setup, name):
    from kgrag_lib.methods.kg_infused import make_method

    ctx, questions = setup
    method = make_method(name, ctx, CFG)
    llm = ctx.llm
    for q in questions:
        before = llm.usage.snapshot()
        pred = method.answer(q)
        used = llm.usage.since(before)
        assert pred.qid == q.qid and pred.method == name and isinstance(pred.prediction, str)
        assert pred.trace["answer_raw"].strip()
        t = pred.trace
        if name == "nor":
            assert used.requests == 1 and t["corpus"] is None
            continue
        assert t["corpus"] == "2wiki" and t["note"]
        assert len(t["passages"]) == 2 and len({p["pid"] for p in t["passages"]}) == 2
        if name in ("vanilla-qe", "kg-infused", "kg-qe-only"):
            assert t["expanded_query"] and [p["from"] for p in t["passages"]] == ["q", "q'"]
        if name in ("kg-infused", "kg-qe-only", "kg-aug-only"):
            assert t["kg"] == "2wiki-evidence-heldout" and len(t["seed_entity_scores"]) == 3
            act = t["activation"]
            assert len(act["rounds"]) == 1 and act["rounds"][0]["n_candidates"] > 0
            assert set(act["seed_entities"]) <= set(act["activated_entities"])
            assert t["summary"]
        else:
            assert t["kg"] is None
        if name in ("kg-infused", "kg-aug-only"):
            assert t["augmented_note"]
        # Requests per question: one per stage; the ablations after kg-infused reuse its
        # selection, summary, expanded query and note (and vanilla RAG's note) from the cache.
        expected = {"vanilla-rag": (2, 2), "vanilla-qe": (3, 3), "kg-infused": (6, 6),
                    "kg-qe-only": (5, 1), "kg-aug-only": (5, 2)}[name]
        assert used.requests == expected[0] and used.calls <= expected[1]
