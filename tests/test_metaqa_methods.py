"""Unit tests of the MetaQA systems (KG-RAG paper) with a scripted LLM and a bag-of-words embedder.

Covers decomposition parsing (clean and noisy), reformulation, BFS direction handling on a
hand-built KG, top-K selection, the four pipelines end to end (trace structure, inference
parameters, fallbacks), Hit@1 on hand-checked cases, and the real MetaQA KB.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fakes import BagOfWordsEmbedder
from kgrag_lib.config import check_values
from kgrag_lib.errors import ConfigError
from kgrag_lib.eval import metrics
from kgrag_lib.kg import KGStore
from kgrag_lib.llm import ScriptedLLM
from kgrag_lib.methods import RunContext, available_methods
from kgrag_lib.methods.metaqa import prompts
from kgrag_lib.methods.metaqa.candidates import TripleSelector, candidate_triples, torch_threads
from kgrag_lib.methods.metaqa.decompose import DecomposedQA
from kgrag_lib.methods.metaqa.kaping import KapingQA
from kgrag_lib.methods.metaqa.kb import MetaQAKB, kb_embeddings, load_store, verbalize
from kgrag_lib.methods.metaqa.kg_rag import build_kg_rag
from kgrag_lib.methods.metaqa.pipeline import (DecomposeConfig, KapingConfig, KGRAGConfig, RetrievalConfig,
                                              ZeroShotConfig)
from kgrag_lib.methods.metaqa.stages import clean_reformulation, parse_decomposition
from kgrag_lib.methods.metaqa.zero_shot import ZeroShotLLM
from kgrag_lib.paths import data_root
from kgrag_lib.records import Question, Triple

# A small KB in MetaQA's own form (movies are subjects; people, years, genres are objects).
KB_LINES = """\
The Lovers|directed_by|Louis Malle
The Lovers|starred_actors|Jeanne Moreau
The Lovers|release_year|1958
The Lovers|has_genre|Drama
Elevator to the Gallows|directed_by|Louis Malle
Elevator to the Gallows|starred_actors|Jeanne Moreau
Elevator to the Gallows|release_year|1958
Elevator to the Gallows|has_genre|Crime
Atlantic City|directed_by|Louis Malle
Atlantic City|starred_actors|Burt Lancaster
Atlantic City|release_year|1980
The Train|directed_by|John Frankenheimer
The Train|starred_actors|Jeanne Moreau
The Train|starred_actors|Burt Lancaster
The Train|release_year|1964
Lost Embrace|in_language|Spanish
"""


def parse_kb(text: str) -> list[Triple]:
    return [Triple(*ln.split("|")) for ln in text.strip().splitlines()]


@pytest.fixture(scope="module")
def store() -> KGStore:
    return KGStore.from_triples(parse_kb(KB_LINES))


@pytest.fixture(scope="module")
def kb(store, tmp_path_factory) -> MetaQAKB:
    k = MetaQAKB(store=store, embeddings=None, path=Path("kb.txt"))
    k.embeddings = kb_embeddings(k, BagOfWordsEmbedder(), tmp_path_factory.mktemp("cache"), show_progress=False)
    return k


def tid(store, s, r, o) -> int:
    txt = verbalize(s, r, o)
    texts = MetaQAKB(store=store, embeddings=None, path=Path("x")).all_texts()
    return texts.index(txt)


def q(text: str, topic: str, answers: list[str]) -> Question:
    return Question(qid="t1", question=text, answers=answers, dataset="metaqa-2hop", topic_entities=[topic])


# ---- decomposition parsing -----------------------------------------------------------------
def test_parse_clean_decomposition():
    text = ("Reasoning: First find the films Jeanne Moreau acted in, then their directors.\n"
            "Sub-questions:\n1. Which movies did Jeanne Moreau act in?\n2. Who directed these movies?\n")
    d = parse_decomposition(text)
    assert d.reasoning == "First find the films Jeanne Moreau acted in, then their directors."
    assert d.subquestions == ["Which movies did Jeanne Moreau act in?", "Who directed these movies?"]
    assert d.issues == []


def test_parse_rendered_examples_round_trip():
    for ex in prompts.DECOMPOSITION_EXAMPLES:
        d = parse_decomposition(ex.render())
        assert d.subquestions == list(ex.subquestions)
        assert d.reasoning == ex.reasoning


def test_parse_noisy_decomposition():
    text = ("Question: who directed the films that Jeanne Moreau acted in\n"
            "**Reasoning:** We need her films first.\n\n"
            "**Sub-questions:**\n"
            "- **Which movies did Jeanne Moreau act in?**\n"
            "* \"Who directed these movies?\"\n"
            "- Which movies did Jeanne Moreau act in?\n"
            "<END>\nQuestion: something the model kept writing?\n1. ignored?")
    d = parse_decomposition(text)
    assert d.subquestions == ["Which movies did Jeanne Moreau act in?", "Who directed these movies?"]
    assert d.reasoning == "We need her films first."
    assert not any("no sub-questions" in i for i in d.issues)


def test_parse_without_header_and_items_on_header_line():
    d = parse_decomposition("I need two lookups.\n1) Who wrote Kismet?\n2) What else did that writer write?")
    assert d.subquestions == ["Who wrote Kismet?", "What else did that writer write?"]
    assert d.reasoning == "I need two lookups."
    assert any("no 'Sub-questions:' header" in i for i in d.issues)
    d2 = parse_decomposition("Reasoning: one fact.\nSub-questions: 1. What language is Lost Embrace in?")
    assert d2.subquestions == ["What language is Lost Embrace in?"]


def test_parse_question_lines_only_and_truncation():
    d = parse_decomposition("Who wrote Kismet?\nWhich films did he write?\nWhen were they released?",
                            max_subquestions=2)
    assert d.subquestions == ["Who wrote Kismet?", "Which films did he write?"]
    assert any("kept the first 2" in i for i in d.issues)


@pytest.mark.parametrize("text", ["", "   ", "I am not sure what you mean.", "<END>"])
def test_parse_failure_is_reported_not_raised(text):
    d = parse_decomposition(text)
    assert d.subquestions == []
    assert "decomposition: no sub-questions found" in d.issues


# ---- reformulation and answer cleaning ----------------------------------------------------
def test_clean_reformulation_restores_question_mark_and_strips_labels():
    assert clean_reformulation("Rewritten question: Who directed The Lovers and The Train", "x")[0] == \
        "Who directed The Lovers and The Train?"
    assert clean_reformulation('  "Who directed The Lovers"\nextra', "x") == ("Who directed The Lovers?", None)
    q0, issue = clean_reformulation("   ", "Who directed these movies?")
    assert q0 == "Who directed these movies?" and "empty output" in issue


# Outputs of clean_reformulation before its label and <think> handling moved to llm.parsing.
@pytest.mark.parametrize("text, question, issue", [
    ('', 'Kept?', 'reformulation: empty output, kept the sub-question as written'),
    ('<THINK>a\nb</THINK>Answer:\tJ.R.R. Tolkien.', 'J.R.R. Tolkien.?', None),
    ('<think>unclosed reasoning, yes', 'Kept?', 'reformulation: empty output, kept the sub-question as written'),
    ('**Final Answer:** **Jeanne Moreau**', '**Jeanne Moreau?', None),
    ('Sub-answer 2: Louis Malle\nJeanne Moreau\n', 'Louis Malle?', None),
    ('Sub answer 3: Drama', 'Sub answer 3: Drama?', None),
    ('Rewritten question: Who directed The Lovers?', 'Who directed The Lovers?', None),
    ('Question: who directed it?\nAnswer: Louis Malle', 'who directed it?', None),
    ('answer:\n\nLouis Malle', 'Kept?', 'reformulation: empty output, kept the sub-question as written'),
    ("Short answer: 'Louis Malle'", "Short answer: 'Louis Malle?", None),
    ('\u201cSmart quotes\u201d and \u2018more\u2019.', '\u201cSmart quotes\u201d and \u2018more\u2019.?', None),
    ('   *Drama*  ', 'Drama?', None),
    ('**Answer**: `Paris`', '`Paris`?', None),
])
def test_clean_reformulation_is_pinned(text, question, issue):
    assert clean_reformulation(text, "Kept?") == (question, issue)


def test_sub_answers_keep_every_line():
    """Sub-answers go whole into the later prompts: only a leading label and blank lines go."""
    llm = scripted({"decompose": [TWO_HOP], "answer": ["Sub-answer 1: The Lovers\n\nThe Train.", "**Answer:** Louis Malle."],
                    "reformulate": ["Who directed The Lovers and The Train?"],
                    "synthesize": ["Final answer: Louis Malle.\nBoth films."]})
    pred = DecomposedQA("llm-qd", llm, DecomposeConfig()).answer(q("x", "Jeanne Moreau", ["Louis Malle"]))
    assert [s["answer"] for s in pred.trace["steps"]] == ["The Lovers\nThe Train.", "Louis Malle."]
    assert pred.prediction == "Louis Malle.\nBoth films."
    later = [r.prompt for r in llm.requests if role_of(r.messages) in ("reformulate", "synthesize")]
    assert len(later) == 2 and all("The Lovers\nThe Train." in p for p in later)


# ---- candidate retrieval: BFS directions -------------------------------------------------------
def test_bfs_direction_from_a_movie(store, kb):
    e = store.find_entity("The Lovers")
    out1 = kb.texts(candidate_triples(store, [e], 1, "out"))
    assert sorted(out1) == sorted(verbalize(*ln.split("|")) for ln in KB_LINES.splitlines()
                                  if ln.startswith("The Lovers|"))
    # out 2 hops: objects (Louis Malle, 1958, ...) have no outgoing edges in MetaQA
    assert set(candidate_triples(store, [e], 2, "out")) == set(candidate_triples(store, [e], 1, "out"))
    # both 2 hops: everything incident to Louis Malle, Jeanne Moreau, 1958, Drama
    both2 = set(kb.texts(candidate_triples(store, [e], 2, "both")))
    assert "(Atlantic City, directed by, Louis Malle)" in both2
    assert "(The Train, starred actors, Jeanne Moreau)" in both2
    assert "(Elevator to the Gallows, has genre, Crime)" not in both2  # 3 hops away
    assert "(Elevator to the Gallows, has genre, Crime)" in set(kb.texts(candidate_triples(store, [e], 3, "both")))


def test_bfs_direction_from_a_person(store, kb):
    e = store.find_entity("Jeanne Moreau")
    assert candidate_triples(store, [e], 3, "out").size == 0  # a person is never a subject
    in1 = set(kb.texts(candidate_triples(store, [e], 1, "in")))
    assert in1 == {"(The Lovers, starred actors, Jeanne Moreau)",
                   "(Elevator to the Gallows, starred actors, Jeanne Moreau)",
                   "(The Train, starred actors, Jeanne Moreau)"}
    both2 = set(kb.texts(candidate_triples(store, [e], 2, "both")))
    assert len(both2) == 12  # all triples of her three films
    both3 = candidate_triples(store, [e], 3, "both")
    assert len(both3) == 14  # + Atlantic City's triples that touch Louis Malle / Burt Lancaster
    assert "(Atlantic City, release year, 1980)" not in set(kb.texts(both3))  # 3 hops from her
    assert "(Lost Embrace, in language, Spanish)" not in set(kb.texts(both3))
    assert np.all(np.diff(both3) > 0)  # sorted unique ids


def test_bfs_rejects_unknown_direction(store):
    with pytest.raises(ConfigError, match="direction"):
        candidate_triples(store, [0], 1, "sideways")
    with pytest.raises(ConfigError, match="direction"):
        check_values(RetrievalConfig(direction="up"))


def test_torch_threads_is_restored():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_selector_picks_the_relevant_triples(kb, fake_embedder):
    sel = TripleSelector(kb, fake_embedder, RetrievalConfig(hops=2, top_k=3, direction="both"))
    ids, missing = sel.resolve(["Jeanne Moreau", "Nobody Here"])
    assert missing == ["Nobody Here"] and len(ids) == 1
    s = sel.select("which movies did jeanne moreau star in", sel.candidates(ids))
    assert len(s.texts) == 3
    assert all("starred actors, Jeanne Moreau" in t for t in s.texts)


# ---- pipelines with a scripted LLM ------------------------------------------------------------
def role_of(messages) -> str:
    system = messages[0]["content"]
    for key, name in ((prompts.DECOMPOSE_SYSTEM, "decompose"), (prompts.REFORMULATE_SYSTEM, "reformulate"),
                      (prompts.SYNTHESIZE_SYSTEM, "synthesize"), (prompts.ANSWER_WITH_FACTS_SYSTEM, "answer_kg"),
                      (prompts.ANSWER_SYSTEM, "answer")):
        if system == key:
            return name
    raise AssertionError(f"unexpected prompt: {system[:60]}")


def scripted(responses: dict[str, list[str]]) -> ScriptedLLM:
    queues = {k: list(v) for k, v in responses.items()}
    return ScriptedLLM(lambda msgs, params: queues[role_of(msgs)].pop(0))


TWO_HOP = ("Reasoning: Find the films Jeanne Moreau acted in, then their directors.\n"
           "Sub-questions:\n1. Which movies did Jeanne Moreau act in?\n2. Who directed these movies?")


def test_kg_rag_full_trace_and_parameters(kb, fake_embedder):
    llm = scripted({
        "decompose": [TWO_HOP],
        "answer_kg": ["The Lovers, Elevator to the Gallows, The Train", "Louis Malle, John Frankenheimer"],
        "reformulate": ["Who directed The Lovers, Elevator to the Gallows and The Train"],
        "synthesize": ["Louis Malle and John Frankenheimer directed her films."],
    })
    cfg = KGRAGConfig(hops=3, top_k=4, direction="both")
    m = build_kg_rag(llm, TripleSelector(kb, fake_embedder, cfg), cfg, seed=7)
    pred = m.answer(q("who directed the films that Jeanne Moreau acted in", "Jeanne Moreau",
                      ["Louis Malle", "John Frankenheimer"]))
    t = pred.trace
    assert not pred.failed and pred.prediction == "Louis Malle and John Frankenheimer directed her films."
    assert t["retrieval"]["num_candidates"] == 14 and t["retrieval"]["direction"] == "both"
    assert t["decomposition"]["subquestions"] == ["Which movies did Jeanne Moreau act in?", "Who directed these movies?"]
    s1, s2 = t["steps"]
    assert s1["asked"] == s1["subquestion"] and "reformulation_raw" not in s1
    assert s2["asked"] == "Who directed The Lovers, Elevator to the Gallows and The Train?"
    assert len(s1["triples"]) == 4 and all("Jeanne Moreau" in x for x in s1["triples"][:3])
    assert len(s1["triple_ids"]) == len(s1["scores"]) == 4
    assert any("directed by" in x for x in s2["triples"])
    assert s2["answer"] == "Louis Malle, John Frankenheimer"
    assert t["final_output"].endswith("Reasoning: Find the films Jeanne Moreau acted in, then their directors.")
    assert t["issues"] == []
    # what each call saw, and with which inference parameters (Table 3, §3.4.3-3.4.4)
    by_role = {}
    for r in llm.requests:
        by_role.setdefault(role_of(r.messages), []).append(r)
    dec = by_role["decompose"][0]
    assert (dec.params.max_tokens, dec.params.temperature, dec.params.min_p, dec.params.top_k) == (256, 0.3, 0.05, 40)
    assert dec.params.stop == (prompts.END_MARKER,) and dec.params.seed == 7
    assert sum(m_["role"] == "assistant" for m_ in dec.messages) == len(prompts.DECOMPOSITION_EXAMPLES)
    ans = by_role["answer_kg"]
    assert all(a.params.repeat_penalty == 1.1 for a in ans)
    assert "(The Lovers, starred actors, Jeanne Moreau)" in ans[0].prompt
    assert "Who directed The Lovers, Elevator to the Gallows and The Train?" in ans[1].prompt
    ref = by_role["reformulate"][0]
    assert ref.params.stop == ("?",)
    assert "The Lovers, Elevator to the Gallows, The Train" in ref.prompt  # prior sub-answer given
    syn = by_role["synthesize"][0]
    assert syn.params.max_tokens == 512
    assert "Louis Malle, John Frankenheimer" in syn.prompt and "Find the films" in syn.prompt


def test_kg_rag_without_reformulation_sends_its_sub_answers_together(kb, fake_embedder, tmp_path):
    """With `reformulate: false` the sub-answers read nothing of each other: on a batching backend
    both are in flight at once (a barrier of 2 opens only then); the trace, the prediction and the
    cache keys are those of the one-at-a-time run."""
    import sqlite3
    import threading

    from kgrag_lib.llm.cache import LLMCache

    answers = {"Which movies did Jeanne Moreau act in?": "The Lovers, The Train",
               "Who directed these movies?": "Louis Malle"}

    def run(workers, barrier):
        def fn(msgs, params):
            role = role_of(msgs)
            if role == "decompose":
                return TWO_HOP
            if role == "synthesize":
                return "Louis Malle directed her films."
            if barrier is not None:
                barrier.wait()
            return next(a for k, a in answers.items() if k in msgs[-1]["content"])

        llm = ScriptedLLM(fn, cache=LLMCache(tmp_path / f"llm-{workers}.sqlite"))
        llm.concurrent_requests, llm.max_in_flight = True, workers
        cfg = KGRAGConfig(hops=3, top_k=4, direction="both", reformulate=False)
        pred = build_kg_rag(llm, TripleSelector(kb, fake_embedder, cfg), cfg, seed=7).answer(
            q("who directed the films that Jeanne Moreau acted in", "Jeanne Moreau", ["Louis Malle"]))
        keys = sorted(k for (k,) in sqlite3.connect(tmp_path / f"llm-{workers}.sqlite").execute("SELECT key FROM calls"))
        return pred, keys

    one, keys1 = run(1, None)
    two, keys2 = run(2, threading.Barrier(2, timeout=30))
    assert [s["answer"] for s in one.trace["steps"]] == ["The Lovers, The Train", "Louis Malle"]
    assert len(keys1) == 4 and keys2 == keys1
    assert (two.prediction, two.trace, two.failed) == (one.prediction, one.trace, one.failed)


def test_llm_qd_has_no_triples_and_same_loop():
    llm = scripted({"decompose": [TWO_HOP], "answer": ["The Lovers", "Louis Malle"],
                    "reformulate": ["Who directed The Lovers?"], "synthesize": ["Louis Malle"]})
    m = DecomposedQA("llm-qd", llm, DecomposeConfig(), seed=0)
    pred = m.answer(q("who directed the films that Jeanne Moreau acted in", "Jeanne Moreau", ["Louis Malle"]))
    assert pred.prediction == "Louis Malle" and pred.trace["retrieval"] is None
    assert [s["asked"] for s in pred.trace["steps"]] == ["Which movies did Jeanne Moreau act in?", "Who directed The Lovers?"]
    assert all("triples" not in s for s in pred.trace["steps"])
    assert len(llm.requests) == 5  # decompose, answer, reformulate, answer, synthesize


def test_decomposition_failure_falls_back_to_the_question(kb, fake_embedder):
    llm = scripted({"decompose": ["Sorry, I cannot help."], "answer_kg": ["Spanish"], "synthesize": ["Spanish"]})
    cfg = KGRAGConfig(hops=1, top_k=5)
    m = build_kg_rag(llm, TripleSelector(kb, fake_embedder, cfg), cfg)
    pred = m.answer(q("what language is Lost Embrace in", "Lost Embrace", ["Spanish"]))
    assert not pred.failed and pred.prediction == "Spanish"
    assert pred.trace["steps"][0]["asked"] == "what language is Lost Embrace in"
    assert pred.trace["steps"][0]["triples"] == ["(Lost Embrace, in language, Spanish)"]
    assert "decomposition: fell back to the original question" in pred.trace["issues"]


def test_empty_outputs_give_failed_prediction_with_trace(kb, fake_embedder):
    llm = ScriptedLLM(lambda msgs, params: "" if role_of(msgs) != "decompose" else TWO_HOP)
    cfg = KGRAGConfig(hops=2, top_k=3)
    m = build_kg_rag(llm, TripleSelector(kb, fake_embedder, cfg), cfg)
    pred = m.answer(q("who directed the films that Jeanne Moreau acted in", "Jeanne Moreau", ["Louis Malle"]))
    assert pred.failed and pred.prediction == "" and "empty" in pred.error
    issues = pred.trace["issues"]
    assert "step 1: empty sub-answer" in issues and any("reformulation" in i for i in issues)
    assert pred.trace["steps"][1]["asked"] == "Who directed these movies?"  # kept as written


def test_empty_synthesis_uses_last_sub_answer():
    llm = scripted({"decompose": [TWO_HOP], "answer": ["The Lovers", "Louis Malle"],
                    "reformulate": ["Who directed The Lovers?"], "synthesize": ["  "]})
    pred = DecomposedQA("llm-qd", llm, DecomposeConfig()).answer(q("x", "Jeanne Moreau", ["Louis Malle"]))
    assert pred.prediction == "Louis Malle" and not pred.failed
    assert "synthesis: empty output, used the last sub-answer" in pred.trace["issues"]


def test_unknown_topic_entity_still_answers(kb, fake_embedder):
    llm = scripted({"answer_kg": ["I do not know"]})
    cfg = KapingConfig(top_k=5)
    pred = KapingQA(llm, TripleSelector(kb, fake_embedder, cfg), cfg).answer(
        q("who directed Nowhere Film", "Nowhere Film", ["X"]))
    assert pred.trace["retrieval"]["num_candidates"] == 0 and pred.trace["steps"][0]["triples"] == []
    assert "(no facts found)" in llm.requests[0].prompt
    assert any("not in the KB" in i for i in pred.trace["issues"])


def test_kaping_and_zero_shot(kb, fake_embedder):
    llm = scripted({"answer_kg": ["Louis Malle"], "answer": ["Louis Malle"]})
    cfg = KapingConfig(hops=1, top_k=2, direction="both")
    pred = KapingQA(llm, TripleSelector(kb, fake_embedder, cfg), cfg).answer(
        q("who directed The Lovers", "The Lovers", ["Louis Malle"]))
    assert pred.trace["steps"][0]["triples"][0] == "(The Lovers, directed by, Louis Malle)"
    assert len(pred.trace["steps"][0]["triples"]) == 2 and pred.trace["decomposition"] is None
    pred2 = ZeroShotLLM(llm, ZeroShotConfig(max_tokens=32)).answer(q("who directed The Lovers", "The Lovers", ["Louis Malle"]))
    assert pred2.prediction == "Louis Malle" and llm.requests[-1].params.max_tokens == 32
    assert "Facts:" not in llm.requests[-1].prompt and len(llm.requests) == 2


# ---- Hit@1 on hand-checked cases ----------------------------------------------------------------
@pytest.mark.parametrize("pred,golds,exact,hit,first", [
    ("Louis Malle", ["Louis Malle", "John Frankenheimer"], 1.0, 1.0, 1.0),
    ("  louis malle ", ["Louis Malle"], 1.0, 1.0, 1.0),
    ("John Frankenheimer", ["Louis Malle", "John Frankenheimer"], 1.0, 1.0, 1.0),
    ("Louis Malle directed it.", ["Louis Malle"], 0.0, 1.0, 0.0),
    ("It was directed by Louis Malle.", ["Louis Malle"], 0.0, 1.0, 0.0),
    ("Jeanne Moreau, Louis Malle", ["Louis Malle"], 0.0, 1.0, 0.0),
    ("Louis Malle, Jeanne Moreau", ["Louis Malle"], 0.0, 1.0, 1.0),
    ("Malle is the director", ["Louis Malle"], 0.0, 0.0, 0.0),  # the paper's 'Pitt' example
    ("", ["Louis Malle"], 0.0, 0.0, 0.0),
])
def test_hit1_hand_checked(pred, golds, exact, hit, first):
    assert metrics.hit1_exact(pred, golds) == exact
    assert metrics.hit1(pred, golds) == hit
    assert metrics.hit1_first(pred, golds) == first


# ---- configs and registration ---------------------------------------------------------------
def test_registered_methods_and_config_errors(tmp_path, fake_embedder):
    methods = available_methods()
    for name in ("llm", "llm-qd", "llm-kg", "kg-rag"):
        assert methods[name].family == "metaqa"
        assert methods[name].datasets == ("metaqa-1hop", "metaqa-2hop", "metaqa-3hop")
    ctx = RunContext(llm=ScriptedLLM(["x"]), embedder=fake_embedder, cache_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="hops"):
        methods["llm"].check_config({"hops": 2}, where="t")  # the zero-shot LLM has no retrieval
    with pytest.raises(ConfigError, match="direction"):
        methods["kg-rag"].check_config({"direction": "sideways", "kb": str(tmp_path / "none.txt")}, where="t")
    m = methods["llm"].factory(ctx, cfg := methods["llm"].check_config({"max_tokens": 7}, where="t"), 0)
    assert m.config is cfg   # the factory builds from the typed config as given: checked once, never copied


def test_factory_builds_kb_once_and_caches_it(tmp_path, fake_embedder):
    kb_path = tmp_path / "kb.txt"
    kb_path.write_text(KB_LINES, encoding="utf-8")
    llm = scripted({"answer_kg": ["Louis Malle", "Louis Malle"]})
    ctx = RunContext(llm=llm, embedder=fake_embedder, cache_dir=str(tmp_path / "cache"))
    spec = available_methods()["llm-kg"]
    m = spec.factory(ctx, spec.check_config({"kb": str(kb_path), "hops": 1, "top_k": 3}, where="t"), 0)
    kg_rag = available_methods()["kg-rag"]
    m2 = kg_rag.factory(ctx, kg_rag.check_config({"kb": str(kb_path)}, where="t"), 0)
    assert m.selector.kb.store is m2.selector.kb.store  # shared through ctx.memo
    assert m.selector.kb.embeddings is m2.selector.kb.embeddings
    assert list((tmp_path / "cache" / "kg").glob("metaqa-*/stats.json"))
    assert list((tmp_path / "cache" / "embeddings").glob("metaqa-kb-triples-*.npy"))
    pred = m.answer(q("who directed The Lovers", "The Lovers", ["Louis Malle"]))
    assert metrics.hit1(pred.prediction, pred.answers) == 1.0
    # a new process (fresh context) loads the saved store instead of parsing kb.txt
    again = load_store(kb_path.resolve(), tmp_path / "cache")
    assert again.num_triples == m.selector.kb.store.num_triples == 16


def test_missing_kb_is_a_clear_error(tmp_path, fake_embedder):
    from kgrag_lib.errors import MissingDataError

    ctx = RunContext(llm=ScriptedLLM(["x"]), embedder=fake_embedder, cache_dir=str(tmp_path))
    with pytest.raises(MissingDataError, match="kb.txt|subject\\|relation\\|object"):
        spec = available_methods()["llm-kg"]
        spec.factory(ctx, spec.check_config({"kb": str(tmp_path / "nope.txt")}, where="t"), 0)


# ---- the real MetaQA KB -----------------------------------------------------------------------
REAL_KB = data_root() / "metaqa" / "kb.txt"
needs_real = pytest.mark.skipif(not REAL_KB.exists(), reason=f"MetaQA data not found at {REAL_KB}")


@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    if not REAL_KB.exists():
        pytest.skip(f"MetaQA data not found at {REAL_KB}")
    return load_store(REAL_KB.resolve(), tmp_path_factory.mktemp("realcache"))


@needs_real
def test_real_kb_candidates(real_store):
    k = MetaQAKB(store=real_store, embeddings=None, path=REAL_KB)
    assert real_store.num_triples == 133582
    e = real_store.find_entity("Grace Kelly")
    assert candidate_triples(real_store, [e], 3, "out").size == 0
    one = set(k.texts(candidate_triples(real_store, [e], 1, "both")))
    assert len(one) == 9 and "(Rear Window, starred actors, Grace Kelly)" in one
    movie = real_store.find_entity("Kismet")
    out1 = set(k.texts(candidate_triples(real_store, [movie], 1, "out")))
    assert "(Kismet, directed by, William Dieterle)" in out1 and len(out1) >= 9
    both2 = candidate_triples(real_store, [movie], 2, "both")
    assert both2.size > 100  # 'English' and '1944' bring in many films


@needs_real
def test_few_shot_examples_use_real_facts_and_unseen_entities(real_store):
    facts = [("Lost Embrace", "in_language", "Spanish"), ("Angel's Egg", "has_tags", "mamoru oshii"),
             ("Angel's Egg", "has_genre", "Animation"), ("The Lovers", "starred_actors", "Jeanne Moreau"),
             ("The Lovers", "directed_by", "Louis Malle"),
             ("Hedwig and the Angry Inch", "written_by", "Stephen Trask")]
    kb_lines = set(REAL_KB.read_text(encoding="utf-8").splitlines())
    for f in facts:
        assert "|".join(f) in kb_lines, f
    topics = set()
    for path in (REAL_KB.parent).glob("*-hop/vanilla/qa_*.txt"):
        topics.update(re.findall(r"\[([^\]]+)\]", path.read_text(encoding="utf-8")))
    assert topics, "no MetaQA QA files found"
    for ent in ("Lost Embrace", "Angel's Egg", "Jeanne Moreau", "Hedwig and the Angry Inch"):
        assert ent not in topics


@pytest.mark.parametrize("profile", ["cpu-smoke", "gpu-paper", "gpu-smoke"])
def test_profile_sections_build_valid_configs(profile):
    from kgrag_lib.config import make_config, profile_section
    from kgrag_lib.studies import load_profile

    classes = {"llm": ZeroShotConfig, "llm-qd": DecomposeConfig, "llm-kg": KapingConfig, "kg-rag": KGRAGConfig}
    for name, cls in classes.items():
        cfg = make_config(cls, profile_section(load_profile(profile), "methods", name))
        assert (cfg.temperature, cfg.min_p, cfg.top_k_sampling, cfg.repeat_penalty) == (0.3, 0.05, 40, 1.1)
        if name in ("llm-kg", "kg-rag"):
            assert (cfg.hops, cfg.top_k, cfg.direction) == (3, 30, "both")  # the paper's N, K
    paper = make_config(KGRAGConfig, profile_section(load_profile("gpu-paper"), "methods", "kg-rag"))
    assert (paper.max_tokens, paper.decompose_max_tokens, paper.synthesis_max_tokens) == (256, 256, 512)


def test_max_subquestions_must_be_positive():
    with pytest.raises(ConfigError, match="max_subquestions"):
        DecomposedQA("llm-qd", ScriptedLLM(["x"]), DecomposeConfig(max_subquestions=0))


def test_run_method_writes_traces(kb, tmp_path, fake_embedder):
    import json

    from kgrag_lib.runner import run_method

    llm = scripted({"decompose": [TWO_HOP, "nonsense"],
                    "answer_kg": ["The Lovers, The Train", "Louis Malle, John Frankenheimer", ""],
                    "reformulate": ["Who directed The Lovers and The Train"],
                    "synthesize": ["Louis Malle", ""]})
    cfg = KGRAGConfig(hops=3, top_k=5)
    m = build_kg_rag(llm, TripleSelector(kb, fake_embedder, cfg), cfg)
    qs = [q("who directed the films that Jeanne Moreau acted in", "Jeanne Moreau", ["Louis Malle"]),
          Question(qid="t2", question="what language is Lost Embrace in", answers=["Spanish"],
                   dataset="metaqa-1hop", topic_entities=["Lost Embrace"])]
    res = run_method(m, qs, tmp_path, {"method": "kg-rag"}, llm=llm, progress=False)
    rows = [json.loads(ln) for ln in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [r["failed"] for r in rows] == [False, True]  # the second got nothing usable, no crash
    assert rows[0]["trace"]["steps"][1]["asked"] == "Who directed The Lovers and The Train?"
    assert rows[1]["trace"]["issues"][:1] == ["decomposition: no sub-questions found"]
    assert res["n"] == 2 and res["hit1"] == 50.0 and res["failed"] == 1
    assert rows[0]["cost"]["llm_calls"] == 5 and rows[1]["cost"]["llm_calls"] == 3


def test_parse_labelled_subquestion_lines():
    d = parse_decomposition("Reasoning: two steps.\nSub-question 1: Who wrote Kismet?\n"
                            "Sub-question 2: Which movies did that writer write?\n")
    assert d.subquestions == ["Who wrote Kismet?", "Which movies did that writer write?"]
    assert d.reasoning == "two steps."
