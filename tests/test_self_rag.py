"""Self-RAG and Self-RAG + KG-Infused RAG (KG-Infused RAG §4.2, Table 2) with a scripted
Self-RAG model whose reflection-token log-probabilities are written by hand: the critique
score, the ranking, answer clean-up, failures, refusal of models without reflection tokens,
and the plug-in's stage order."""

from __future__ import annotations

import math
import re

import pytest

from _kg_infused_helpers import PASSAGES, cue, stage_responder, tiny_store
from fakes import BagOfWordsEmbedder
from kgrag_lib.errors import ConfigError
from kgrag_lib.llm.base import Generation, TokenLogprob
from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from kgrag_lib.methods.base import RunContext
from kgrag_lib.methods.kg_infused.corpus import CorpusIndex
from kgrag_lib.methods.kg_infused.kg_sources import KGSource, seed_candidates
from kgrag_lib.methods.kg_infused.pipeline import METHODS as KG_INFUSED_METHODS
from kgrag_lib.methods.kg_infused.self_rag import (
    METHOD_SUMMARIES, REQUIRED_TOKENS, SelfRAGConfig, SelfRAGKGConfig, instruction, make_method, score_candidate,
    strip_reflection,
)
from kgrag_lib.records import Question
from kgrag_lib.retrieval import DenseIndex

Q = Question("q1", "Where was the director of film Taxi! born?", ["Philadelphia"], dataset="2wiki")
SUP = ("[Fully supported]", "[Partially supported]", "[No support / Contradictory]")
UTIL = tuple(f"[Utility:{i}]" for i in range(1, 6))


def _group(names, probs):
    """A position whose chosen token is the most probable of a group (probability 0 = absent)."""
    top = tuple((n, math.log(p)) for n, p in zip(names, probs) if p > 0)
    best = max(top, key=lambda t: t[1])
    return TokenLogprob(best[0], best[1], top)


def sr(answer, rel=0.9, sup=(0.8, 0.15, 0.05), util=(0.0, 0.0, 0.1, 0.2, 0.7), answer_lp=-0.2):
    """A scripted Self-RAG output: relevance token, the answer, support and utility tokens."""
    toks = []
    if rel is not None:
        toks.append(_group(("[Relevant]", "[Irrelevant]"), (rel, 1 - rel)))
    if answer:
        toks.append(TokenLogprob(answer, answer_lp, ((answer, answer_lp),)))
    if sup is not None:
        toks.append(_group(SUP, sup))
    if util is not None:
        toks.append(_group(UTIL, util))
    return Generation("".join(t.token for t in toks), tuple(toks))


def evidence(prompt: str) -> str:
    return re.search(r"<paragraph>(.*)</paragraph>", prompt, re.S).group(1)


class Setup:
    def __init__(self, tmp_path, respond, *, kg_llm=None, vocabulary=REQUIRED_TOKENS, identity="scripted:selfrag"):
        self.store = tiny_store()
        self.emb = BagOfWordsEmbedder()
        ids, texts = seed_candidates(self.store)
        self.kg = KGSource("tiny-kg", self.store, ids, DenseIndex.build(self.emb.encode(texts)))
        self.corpus = CorpusIndex("tiny-corpus", PASSAGES,
                                  DenseIndex.build(self.emb.encode([p.as_text() for p in PASSAGES])))
        self.cache = LLMCache(tmp_path / "llm.sqlite")
        self.llm = kg_llm or ScriptedLLM(stage_responder(), cache=self.cache)
        self.gen = ScriptedLLM(respond, name="selfrag-test", identity=identity, cache=self.cache,
                               vocabulary=vocabulary)
        self.ctx = RunContext(cache_dir=str(tmp_path), llm=self.llm, embedder=self.emb)

    def method(self, name="self-rag", **cfg):
        return make_method(name, self.ctx, cfg, generator=self.gen, kg_source=self.kg,
                           corpus_loader=lambda n: self.corpus)


@pytest.fixture
def make(tmp_path):
    made = []

    def build(respond, **kw):
        s = Setup(tmp_path, respond, **kw)
        made.append(s)
        return s

    yield build
    for s in made:
        s.cache.close()


# ---- the critique score ------------------------------------------------------------------------
def test_score_combines_the_three_critiques_with_self_rag_weights():
    g = sr("Philadelphia", rel=0.9, sup=(0.6, 0.3, 0.1), util=(0.1, 0.1, 0.2, 0.2, 0.4), answer_lp=-0.2)
    s = score_candidate(g)
    assert s.relevance == pytest.approx(0.9)
    assert s.support == pytest.approx(0.6 + 0.5 * 0.3)
    assert s.utility == pytest.approx(-0.1 - 0.05 + 0 + 0.1 + 0.4)
    seq = math.exp(g.logprob / len(g.tokens))
    assert s.sequence == pytest.approx(seq)
    assert s.total == pytest.approx(0.9 + 0.75 + 0.5 * 0.35 + seq)
    no_seq = score_candidate(g, use_seq_score=False)
    assert no_seq.total == pytest.approx(0.9 + 0.75 + 0.5 * 0.35)
    assert score_candidate(g, w_rel=2, w_sup=0, w_use=1, use_seq_score=False).total == pytest.approx(1.8 + 0.35)


def test_missing_tokens_count_zero():
    s = score_candidate(sr("Paris", sup=None, util=None), use_seq_score=False)
    assert (s.support, s.utility) == (None, None) and s.total == pytest.approx(0.9)
    # an alternative outside the top log-probs is probability 0: relevance is then certain
    only = Generation("[Relevant]x", (TokenLogprob("[Relevant]", -0.5, (("[Relevant]", -0.5), ("foo", -1.0))),
                                      TokenLogprob("x", -0.1)))
    assert score_candidate(only).relevance == 1.0
    nothing = score_candidate(Generation("just text", (TokenLogprob("just text", -0.3),)), use_seq_score=False)
    assert (nothing.relevance, nothing.total) == (None, 0.0)
    # a reflection token written with a leading word-boundary marker still counts
    marked = Generation("x", (TokenLogprob("\u2581[Irrelevant]", -0.1, (("\u2581[Irrelevant]", -0.1),)),))
    assert score_candidate(marked).relevance == 0.0


def test_strip_reflection_and_prompt_format():
    assert strip_reflection("[Relevant]Roy Del Ruth[Fully supported][Utility:5]</s>") == "Roy Del Ruth"
    assert strip_reflection("[Irrelevant] <paragraph>x</paragraph> y [No support / Contradictory]") == "x y"
    assert instruction("Who?") == "### Instruction:\nWho?\n\n### Response:\n"
    yn = instruction("Is it?", yes_no=True)
    assert yn.startswith("### Instruction:\n") and "## Input:\n\nIs it?" in yn and "yes or no" in yn


# ---- ranking end to end ----------------------------------------------------------------------------
def test_the_most_relevant_and_supported_passage_wins(make):
    def respond(messages, params):
        ev = evidence(messages[0]["content"])
        if ev.startswith("Roy Del Ruth\n"):
            return sr("Philadelphia.", rel=0.95, sup=(0.9, 0.05, 0.05))
        return sr("New York City", rel=0.3, sup=(0.1, 0.3, 0.6))

    s = make(respond)
    pred = s.method(k_p=6).answer(Q)
    assert not pred.failed and pred.prediction == "Philadelphia"  # reflection tokens and final period gone
    cands = pred.trace["candidates"]
    assert len(cands) == 6 == len(s.gen.requests)
    assert cands[pred.trace["chosen"]]["pid"] == "Roy Del Ruth"
    assert pred.trace["answer_raw"].startswith("[Relevant]Philadelphia.")
    # one raw Self-RAG prompt per passage, greedy, asking for the top-20 log-probs
    r = s.gen.requests[0]
    assert len(r.messages) == 1 and r.params.logprobs == 20 and r.params.temperature == 0
    assert r.params.max_tokens == 100
    assert r.messages[0]["content"].startswith(f"### Instruction:\n{Q.question}\n\n### Response:\n[Retrieval]<paragraph>")
    assert r.messages[0]["content"].endswith("</paragraph>")
    assert {evidence(x.messages[0]["content"]).split("\n")[0] for x in s.gen.requests} == \
        {p["title"] for p in pred.trace["passages"]}
    # plain Self-RAG never touches the run's model, and reports the generator's own cost
    assert s.llm.requests == [] and pred.cost["generator_llm_calls"] == 6
    assert pred.trace["generator"]["identity"] == "scripted:selfrag"


def test_utility_decides_between_equal_candidates(make):
    def respond(messages, params):
        ev = evidence(messages[0]["content"])
        if ev.startswith("James Cagney\n"):
            return sr("Cagney", util=(0.0, 0.0, 0.0, 0.1, 0.9))
        return sr("Other", util=(0.6, 0.2, 0.1, 0.1, 0.0))

    pred = make(respond).method().answer(Q)
    assert pred.prediction == "Cagney"


def test_ties_go_to_the_higher_ranked_passage(make):
    def respond(messages, params):
        return sr(evidence(messages[0]["content"]).split("\n")[0])  # identical scores, answer = title

    s = make(respond)
    pred = s.method().answer(Q)
    assert pred.trace["chosen"] == 0 and pred.prediction == pred.trace["passages"][0]["title"].rstrip("!")


def test_a_candidate_without_critique_tokens_loses(make):
    def respond(messages, params):
        if evidence(messages[0]["content"]).startswith("Roy Del Ruth\n"):
            return sr("Philadelphia", sup=(0.5, 0.3, 0.2), util=(0.1, 0.1, 0.2, 0.3, 0.3))
        return sr("Nowhere", sup=None, util=None, answer_lp=-0.01)

    pred = make(respond).method().answer(Q)
    assert pred.prediction == "Philadelphia"
    assert sum(c["support"] is None for c in pred.trace["candidates"]) == 5


def test_outputs_without_answer_text_are_a_recorded_failure(make):
    s = make(lambda m, p: sr(""))  # only reflection tokens
    pred = s.method().answer(Q)
    assert pred.failed and pred.prediction == "" and "no Self-RAG candidate" in pred.error
    assert len(pred.trace["candidates"]) == 6


def test_empty_candidates_are_skipped_and_said(make):
    def respond(messages, params):
        if evidence(messages[0]["content"]).startswith("Philadelphia\n"):
            return sr("Philadelphia", rel=0.2)
        return sr("", rel=0.99)

    pred = make(respond).method().answer(Q)
    assert pred.prediction == "Philadelphia" and not pred.failed
    assert any("no answer text" in i for i in pred.trace["issues"])


def test_yes_no_questions_get_the_task_line_and_a_yes_no_answer(make):
    s = make(lambda m, p: sr("Yes, it is."))
    pred = s.method(corpus="pooled").answer(Question("s1", "Is Philadelphia in the United States?", ["yes"],
                                                     dataset="strategyqa"))
    assert pred.prediction == "yes"
    assert "## Input:" in s.gen.requests[0].messages[0]["content"]


def test_cached_rerun_makes_no_generator_call(make, tmp_path):
    s = make(lambda m, p: sr("Philadelphia"))
    first = s.method().answer(Q)
    again = ScriptedLLM([], name="selfrag-test", identity="scripted:selfrag", cache=s.cache,
                        vocabulary=REQUIRED_TOKENS)
    m = make_method("self-rag", s.ctx, {}, generator=again, corpus_loader=lambda n: s.corpus)
    second = m.answer(Q)
    assert second.prediction == first.prediction
    assert [c["total"] for c in second.trace["candidates"]] == [c["total"] for c in first.trace["candidates"]]
    assert again.usage.calls == 0 and again.usage.cache_hits == 6


# ---- refusal -------------------------------------------------------------------------------------------
def test_model_without_reflection_tokens_is_refused_before_any_call(make):
    s = make(lambda m, p: "Philadelphia", vocabulary=["[Retrieval]", "hello"])
    with pytest.raises(ConfigError, match=r"selfrag-test.*lacks.*\[Relevant\]"):
        s.method().answer(Q)
    assert s.gen.requests == [] and s.llm.requests == []


def test_unverifiable_vocabulary_is_checked_on_the_log_probs(make):
    plain = Generation("Philadelphia", (TokenLogprob("Philadelphia", -0.1, (("Philadelphia", -0.1), ("New", -2.0))),))
    s = make(lambda m, p: plain, vocabulary=None)
    with pytest.raises(ConfigError, match="not a Self-RAG model"):
        s.method().answer(Q)
    ok = make(lambda m, p: sr("Philadelphia"), vocabulary=None, identity="scripted:a-real-self-rag")
    assert ok.method().answer(Q).prediction == "Philadelphia"


def test_generator_with_a_chat_template_is_refused(make):
    s = make(lambda m, p: sr("x"))
    s.gen.chat = True
    with pytest.raises(ConfigError, match="chat=False"):
        s.method().answer(Q)


def test_generator_run_uses_the_runs_model(make):
    run_llm = ScriptedLLM(lambda m, p: sr("Philadelphia"), vocabulary=REQUIRED_TOKENS)
    s = make(lambda m, p: sr("unused"), kg_llm=run_llm)
    m = make_method("self-rag", s.ctx, {"generator": "run"}, corpus_loader=lambda n: s.corpus)
    pred = m.answer(Q)
    assert pred.prediction == "Philadelphia" and len(run_llm.requests) == 6 and pred.cost == {}


# ---- Self-RAG + KG-Infused RAG -------------------------------------------------------------------------
def test_plug_in_runs_kg_stages_then_self_rag_on_augmented_passages(make):
    s = make(lambda m, p: sr("Philadelphia"))
    pred = s.method("self-rag-kg-infused", rounds=2).answer(Q)
    cues = [cue(r.messages) for r in s.llm.requests]
    # KG stages on the run's model: selection rounds, summary, KG-based QE, one augmentation per passage
    assert cues[0] == "Chosen facts:" and "Summary:" in cues and "New query:" in cues
    assert cues.count("Improved passage:") == 6 == len(pred.trace["passages"])
    assert "Note:" not in cues and "Answer:" not in cues  # Self-RAG writes the answer
    assert [p["from"] for p in pred.trace["passages"]] == ["q"] * 3 + ["q'"] * 3
    assert pred.trace["expanded_query"] and pred.trace["summary"]
    # each passage augmented on its own, then handed to Self-RAG as its evidence
    aug = pred.trace["augmented_passages"]
    assert len(set(aug)) == 6
    sent = [evidence(r.messages[0]["content"]) for r in s.gen.requests]
    assert [x.split("\n", 1)[1] for x in sent] == aug
    assert [x.split("\n", 1)[0] for x in sent] == [p["title"] for p in pred.trace["passages"]]
    assert pred.prediction == "Philadelphia" and pred.trace["kg"] == "tiny-kg"


def test_plug_in_refusal_happens_before_the_kg_stages(make):
    s = make(lambda m, p: sr("x"), vocabulary=[])
    with pytest.raises(ConfigError, match="reflection tokens"):
        s.method("self-rag-kg-infused").answer(Q)
    assert s.llm.requests == []


# ---- registration and config ---------------------------------------------------------------------------
def test_methods_and_configs():
    by_name = {m.name: m for m in KG_INFUSED_METHODS if m.name in METHOD_SUMMARIES}   # the paper's table holds them
    assert set(by_name) == {"self-rag", "self-rag-kg-infused"}
    assert {m.family for m in by_name.values()} == {"kg-infused"}
    assert by_name["self-rag"].config is SelfRAGConfig and by_name["self-rag-kg-infused"].config is SelfRAGKGConfig
    assert "2wiki" in by_name["self-rag"].datasets and "strategyqa" in by_name["self-rag"].datasets
    cfg = by_name["self-rag-kg-infused"].check_config({"rounds": 3, "top_logprobs": 5}, "m")
    assert cfg.kg_config().rounds == 3 and cfg.kg_config().k_p == 6 and cfg.generator == "selfrag-llama2-7b"
    for bad, match in [({"top_logprobs": 0}, "top_logprobs"), ({"k_p": 0}, "k_p"), ({"generator": " "}, "generator"),
                       ({"rounds": 0}, "rounds"), ({"w_use": float("nan")}, "w_use")]:
        with pytest.raises(ConfigError, match=match):
            by_name["self-rag-kg-infused"].check_config(bad, "m")
    with pytest.raises(ConfigError, match="unknown parameter"):
        by_name["self-rag"].check_config({"rounds": 2}, "m")  # a KG setting on plain Self-RAG


def test_selfrag_preset():
    from kgrag_lib.llm.presets import PRESETS

    p = PRESETS["selfrag-llama2-7b"]
    assert (p.backend, p.model, p.needs_gpu, p.options["chat"]) == ("hf", "selfrag/selfrag_llama2_7b", True, False)


# ---- the real embedded model (not run in the quick suite) ----------------------------------------------
@pytest.mark.model
def test_embedded_qwen_is_refused_for_missing_reflection_tokens(tmp_path, monkeypatch):
    """The embedded Qwen2.5-Coder has no reflection tokens in its vocabulary: the method must
    stop with a ConfigError naming it, before retrieving or answering anything."""
    pytest.importorskip("llama_cpp")
    from kgrag_lib.llm.presets import embedded_path

    try:
        embedded_path()
    except Exception as e:  # the model packages are an optional extra
        pytest.skip(f"embedded model not available: {e}")
    ctx = RunContext(cache_dir=str(tmp_path), embedder=BagOfWordsEmbedder())
    m = make_method("self-rag", ctx, {"generator": "qwen2.5-coder-0.5b-q4"},
                    corpus_loader=lambda n: pytest.fail("retrieval must not run"))
    with pytest.raises(ConfigError, match=r"qwen2\.5-coder-0\.5b-q4.*lacks.*\[Relevant\]"):
        m.answer(Q)
