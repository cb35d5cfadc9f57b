"""The four MetaQA systems with the real small model on two real MetaQA questions.

Asserts the trace structure and that a prediction string comes out, not correctness (a
0.5B model on CPU). To stay within a few minutes: small token budgets, no LLM cache, and a
KB restricted to the real triples within two hops of the questions' entities, embedded
with the real MiniLM model (the full-KB embedding matrix is exercised by the bench).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kgrag_lib.paths import data_root

pytestmark = pytest.mark.model

ROOT = data_root()
KB = ROOT / "metaqa" / "kb.txt"

# Real test questions whose topic entity is a person (their 2-hop neighbourhoods are small).
CASES = (
    ("metaqa-1hop", "[Joe Thomas] appears in which movies"),
    ("metaqa-2hop", "which person directed the movies starred by [John Krasinski]"),
)
SMALL = dict(max_tokens=48, decompose_max_tokens=96, reformulate_max_tokens=40, synthesis_max_tokens=64,
             hops=2, top_k=10, direction="both", max_subquestions=3)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not KB.exists():
        pytest.skip(f"MetaQA data not found at {KB}")
    try:
        from kgrag_lib.llm import load_llm
        from kgrag_lib.retrieval import load_embedder

        llm = load_llm("qwen2.5-coder-0.5b-q4", cache=False)
        embedder = load_embedder("minilm")
    except Exception as exc:  # the model packages are an optional extra
        pytest.skip(f"real model not available: {type(exc).__name__}: {exc}")
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.kg import KGStore
    from kgrag_lib.methods.metaqa.candidates import candidate_triples
    from kgrag_lib.methods.metaqa.kb import MetaQAKB, kb_embeddings, load_store

    cache = tmp_path_factory.mktemp("cache")
    questions = []
    for ds, raw in CASES:
        qs = [q for q in load_questions(ds, split="test", root=ROOT) if q.meta["raw"].split("\t")[0] == raw]
        assert qs, f"{raw!r} not found in {ds} test"
        questions.append(qs[0])
    full = load_store(KB.resolve(), cache)
    ids = [full.find_entity(q.topic_entities[0]) for q in questions]
    keep = candidate_triples(full, ids, 2, "both")
    sub = KGStore.from_triples(full.triple(int(i)) for i in keep)
    kb = MetaQAKB(store=sub, embeddings=None, path=Path(KB))
    kb.embeddings = kb_embeddings(kb, embedder, cache, show_progress=False)
    return llm, embedder, kb, questions


def check_common(pred, q, system):
    assert pred.qid == q.qid and pred.method == system
    assert isinstance(pred.prediction, str)
    assert pred.failed == (not pred.prediction.strip())
    t = pred.trace
    assert t["system"] == system and t["question"] == q.question and t["steps"]
    for step in t["steps"]:
        assert step["asked"].strip() and isinstance(step["answer"], str) and "answer_raw" in step
    assert isinstance(t["issues"], list)
    if not pred.failed:
        assert pred.prediction.strip()


def test_llm(setup):
    from kgrag_lib.methods.metaqa.pipeline import ZeroShotConfig
    from kgrag_lib.methods.metaqa.zero_shot import ZeroShotLLM

    llm, _, _, questions = setup
    m = ZeroShotLLM(llm, ZeroShotConfig(max_tokens=SMALL["max_tokens"]))
    for q in questions:
        pred = m.answer(q)
        check_common(pred, q, "llm")
        assert len(pred.trace["steps"]) == 1 and pred.trace["retrieval"] is None


def test_llm_qd(setup):
    from kgrag_lib.config import make_config
    from kgrag_lib.methods.metaqa.decompose import DecomposedQA
    from kgrag_lib.methods.metaqa.pipeline import DecomposeConfig

    llm, _, _, questions = setup
    cfg = make_config(DecomposeConfig, {k: v for k, v in SMALL.items() if k not in ("hops", "top_k", "direction")})
    m = DecomposedQA("llm-qd", llm, cfg)
    for q in questions:
        pred = m.answer(q)
        check_common(pred, q, "llm-qd")
        d = pred.trace["decomposition"]
        assert d["raw"] and isinstance(d["subquestions"], list) and len(d["subquestions"]) <= 3
        assert len(pred.trace["steps"]) == max(1, len(d["subquestions"]))
        assert pred.trace["synthesis_raw"] is not None
        for step in pred.trace["steps"][1:]:
            assert "reformulation_raw" in step and step["asked"].endswith("?")


def test_llm_kg(setup):
    from kgrag_lib.methods.metaqa.candidates import TripleSelector
    from kgrag_lib.methods.metaqa.kaping import KapingQA
    from kgrag_lib.methods.metaqa.pipeline import KapingConfig

    llm, embedder, kb, questions = setup
    cfg = KapingConfig(max_tokens=SMALL["max_tokens"], hops=2, top_k=10, direction="both")
    m = KapingQA(llm, TripleSelector(kb, embedder, cfg), cfg)
    for q in questions:
        pred = m.answer(q)
        check_common(pred, q, "llm-kg")
        step = pred.trace["steps"][0]
        assert pred.trace["retrieval"]["num_candidates"] > 0
        assert len(step["triples"]) == min(10, pred.trace["retrieval"]["num_candidates"])
        assert any(q.topic_entities[0] in t for t in step["triples"])


def test_kg_rag(setup):
    from kgrag_lib.config import make_config
    from kgrag_lib.methods.metaqa.candidates import TripleSelector
    from kgrag_lib.methods.metaqa.kg_rag import build_kg_rag
    from kgrag_lib.methods.metaqa.pipeline import KGRAGConfig

    llm, embedder, kb, questions = setup
    cfg = make_config(KGRAGConfig, SMALL)
    m = build_kg_rag(llm, TripleSelector(kb, embedder, cfg), cfg)
    for q in questions:
        pred = m.answer(q)
        check_common(pred, q, "kg-rag")
        t = pred.trace
        assert t["retrieval"]["num_candidates"] > 0 and t["decomposition"]["raw"]
        for step in t["steps"]:
            assert 0 < len(step["triples"]) <= 10 and len(step["scores"]) == len(step["triples"])
            assert step["scores"] == sorted(step["scores"], reverse=True)
        if pred.prediction:
            assert t["final_output"].startswith(pred.prediction)
