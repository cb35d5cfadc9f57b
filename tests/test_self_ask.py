"""Self-Ask and Self-Ask + KG-Infused RAG (KG-Infused RAG App. F.1): the follow-up loop with a
scripted LLM over the tiny KG and corpus of the pipeline tests, and (marked `model`) one real
2Wiki question each with the real small model."""

from __future__ import annotations

import re

import pytest

from _kg_infused_helpers import cue, stage_responder
from test_kg_infused_pipeline import Setup
from kgrag_lib.errors import ConfigError
from kgrag_lib.methods.kg_infused import make_method
from kgrag_lib.methods.kg_infused import self_ask_prompts as SA
from kgrag_lib.methods.kg_infused.pipeline import METHODS
from kgrag_lib.methods.kg_infused.self_ask import NAMES, SelfAskConfig, make_self_ask, parse_step
from kgrag_lib.records import Question

Q = Question("q1", "Where was the director of film Taxi! born?", ["Philadelphia"], dataset="2wiki")
PLAN = [
    # the stop string cuts the model's own 'Intermediate answer:' and what follows
    "Yes.\nFollow up: Who directed Taxi!?\nIntermediate answer: made up by the model",
    "Follow up: Where was Roy Del Ruth born?",
    "So the final answer is: Philadelphia",
]
SUB_ANSWERS = {"Who directed Taxi!?": "Roy Del Ruth", "Where was Roy Del Ruth born?": "Philadelphia"}
KG_CUES = ["Chosen facts:", "Summary:", "New query:", "Note:", "Improved passage:", "Answer:"]


def is_self_ask(messages) -> bool:
    return messages[-1]["content"].startswith(SA.INSTRUCTIONS)


def steps_so_far(messages) -> int:
    return messages[-1]["content"].rsplit(SA.SEPARATOR, 1)[1].count(SA.FOLLOW_UP)


def responder(plan=PLAN, final="Philadelphia", sub_answers=SUB_ANSWERS):
    """Self-Ask steps from `plan` (by how many follow-ups the prompt already holds), the forced
    final answer, and per-follow-up answers; every KG-Infused stage as the pipeline tests."""
    base = stage_responder()

    def respond(messages, params):
        if is_self_ask(messages):
            if cue(messages) == SA.FINAL:
                return f" {final}"
            n = steps_so_far(messages)
            return plan(n) if callable(plan) else plan[n]
        if cue(messages) == "Answer:":
            sub = re.search(r"Question: (.+)\nAnswer:$", messages[-1]["content"]).group(1)
            return f"Answer: {sub_answers.get(sub, 'Roy Del Ruth')}"
        return base(messages, params)

    return respond


@pytest.fixture
def s(tmp_path):
    setup = Setup(tmp_path, responder())
    yield setup
    setup.cache.close()


def run(s, name, q=Q, **cfg):
    """(prediction, cues of the requests that reached the backend)"""
    before = len(s.llm.requests)
    m = make_self_ask(name, s.ctx, cfg, kg_source=s.kg, corpus_loader=lambda n: s.corpus)
    pred = m.answer(q)
    return pred, [("self-ask" if is_self_ask(r.messages) else cue(r.messages)) for r in s.llm.requests[before:]]


# ------------------------------------------------------------------ specs and config
def test_method_specs():
    by = {m.name: m for m in METHODS if m.name in NAMES}   # the paper's table holds them
    assert set(by) == {"self-ask", "self-ask-kg-infused"}
    for spec in by.values():
        assert spec.family == "kg-infused" and spec.config is SelfAskConfig
        assert spec.datasets == ("hotpotqa", "2wiki", "musique", "bamboogle", "strategyqa")
        cfg = spec.check_config({"rounds": 1, "max_steps": 3}, where="test")
        assert cfg.max_steps == 3 and cfg.k_p == 6


def test_config_errors_name_the_parameter(s):
    with pytest.raises(ConfigError, match="max_steps"):
        run(s, "self-ask", max_steps=0)
    with pytest.raises(ConfigError, match="step_max_tokens"):
        run(s, "self-ask", step_max_tokens="many")
    with pytest.raises(ConfigError, match="hops"):
        run(s, "self-ask", hops=2)
    with pytest.raises(ConfigError, match="k_p"):
        run(s, "self-ask-kg-infused", k_p=0)
    with pytest.raises(ConfigError, match="self-ask, self-ask-kg-infused"):
        make_self_ask("self-ask-twice", s.ctx)


# ------------------------------------------------------------------ the loop
def test_self_ask_asks_retrieves_answers_and_stops_at_the_final_answer(s):
    pred, sent = run(s, "self-ask")
    assert sent == ["self-ask", "Answer:", "self-ask", "Answer:", "self-ask"]
    assert pred.prediction == "Philadelphia" and not pred.failed
    t = pred.trace
    assert t["stop_reason"] == "final_answer" and t["kg"] is None and t["corpus"] == "tiny-corpus"
    assert [st["follow_up"] for st in t["steps"]] == list(SUB_ANSWERS)
    assert [st["intermediate_answer"] for st in t["steps"]] == list(SUB_ANSWERS.values())
    for st in t["steps"]:
        # Table 7: Self-Ask retrieves 6 passages by the follow-up, none by an expanded query
        assert len(st["passages"]) == 6 and {p["from"] for p in st["passages"]} == {"q"}
        assert set(st["passages"][0]) == {"pid", "title", "score", "from"}
        assert "note" not in st and "activation" not in st
    assert t["steps"][1]["passages"][0]["pid"] == "Roy Del Ruth"
    assert t["retrieved_ids"][0] == "Taxi!" and len(t["retrieved_ids"]) == len(set(t["retrieved_ids"]))
    assert t["transcript"] == (f"Question: {Q.question}\n{SA.NEEDED} Yes.\n"
                               "Follow up: Who directed Taxi!?\nIntermediate answer: Roy Del Ruth\n"
                               "Follow up: Where was Roy Del Ruth born?\nIntermediate answer: Philadelphia\n"
                               "So the final answer is: Philadelphia")
    assert "made up by the model" not in str(t)
    reqs = s.llm.requests
    # each step stops at the label the retriever's answer fills; the next prompt holds that answer
    assert SA.INTERMEDIATE in reqs[0].params.stop
    assert reqs[2].prompt.endswith("Follow up: Who directed Taxi!?\nIntermediate answer: Roy Del Ruth\n")
    # the follow-up is answered from the passages themselves (no note)
    assert "Passages:\n[1] Taxi!\n" in reqs[1].prompt and "Question: Who directed Taxi!?" in reqs[1].prompt


def test_max_steps_forces_the_final_answer(s):
    s.llm._fn = responder(plan=lambda n: f"Follow up: Who is person number {n}?")
    pred, sent = run(s, "self-ask", max_steps=2)
    assert sent == ["self-ask", "Answer:", "self-ask", "Answer:", "self-ask"]
    assert pred.trace["stop_reason"] == "max_steps" and len(pred.trace["steps"]) == 2
    forced = s.llm.requests[-1]
    assert forced.prompt.endswith("Intermediate answer: Roy Del Ruth\nSo the final answer is:")
    assert pred.prediction == "Philadelphia" and pred.trace["answer_raw"] == " Philadelphia"


def test_a_repeated_follow_up_ends_the_loop(s):
    s.llm._fn = responder(plan=lambda n: "Follow up: who directed  Taxi!")
    pred, sent = run(s, "self-ask")
    assert sent == ["self-ask", "Answer:", "self-ask", "self-ask"]
    assert pred.trace["stop_reason"] == "repeated_follow_up" and len(pred.trace["steps"]) == 1
    assert any("repeated" in i for i in pred.trace["issues"]) and pred.prediction == "Philadelphia"


def test_an_answer_without_follow_ups(s):
    s.llm._fn = responder(plan=["No.\nSo the final answer is: **Philadelphia.**"])
    pred, sent = run(s, "self-ask")
    assert sent == ["self-ask"] and pred.trace["steps"] == [] and pred.prediction == "Philadelphia"


def test_self_ask_kg_infused_runs_kg_stages_per_follow_up(s):
    pred, sent = run(s, "self-ask-kg-infused", rounds=1)
    assert sent == ["self-ask", *KG_CUES, "self-ask", *KG_CUES, "self-ask"]
    assert pred.prediction == "Philadelphia" and not pred.failed
    t = pred.trace
    assert t["kg"] == "tiny-kg"
    for st in t["steps"]:
        # Table 7: Self-Ask + KG-Infused RAG takes 3 passages by the follow-up and 3 by its q'
        assert [p["from"] for p in st["passages"]] == ["q"] * 3 + ["q'"] * 3
        assert len({p["pid"] for p in st["passages"]}) == 6
        assert len(st["seed_entity_scores"]) == 3 and len(st["activation"]["rounds"]) == 1
        assert st["summary"].startswith("<") or "no facts" in st["summary"]
        assert st["expanded_query"] and st["note"] and st["augmented_note"].startswith("Taxi! (1932)")
    assert "Taxi!" in t["steps"][0]["activation"]["activated_entities"]
    assert "Roy Del Ruth" in [e["entity"] for e in t["steps"][1]["seed_entity_scores"]]
    answer_req = [r for r in s.llm.requests if cue(r.messages) == "Answer:"][0]
    # the intermediate answer is written from the fact-enhanced note (eq. 10), not the passages
    assert t["steps"][0]["augmented_note"] in answer_req.prompt and "[1] Taxi!" not in answer_req.prompt


def test_kg_stages_are_the_kg_infused_pipelines_requests(s):
    """A follow-up's KG stages send exactly kg-infused's requests for the same question: after
    kg-infused answered the follow-ups as questions, only the Self-Ask steps reach the model."""
    for sub in SUB_ANSWERS:
        make_method("kg-infused", s.ctx, {"rounds": 1}, kg_source=s.kg, corpus_loader=lambda n: s.corpus).answer(
            Question("x", sub, ["?"], dataset="2wiki"))
    pred, sent = run(s, "self-ask-kg-infused", rounds=1)
    assert sent == ["self-ask"] * 3 and pred.prediction == "Philadelphia"
    # and the baseline with passage notes shares vanilla RAG's note
    make_method("vanilla-rag", s.ctx, {}, kg_source=s.kg, corpus_loader=lambda n: s.corpus).answer(
        Question("x", "Who directed Taxi!?", ["?"], dataset="2wiki"))
    pred, sent = run(s, "self-ask", passage_note=True)
    assert "Note:" in sent and sent.count("Note:") == 1 and pred.trace["steps"][0]["note"]


def test_strategyqa_final_answer_is_yes_or_no(s):
    q = Question("s1", "Could the director of Taxi! have seen the year 1970?", ["no"], dataset="strategyqa")
    s.llm._fn = responder(plan=["Follow up: Who directed Taxi!?", "So the final answer is: No, he died in 1961."])
    pred, _ = run(s, "self-ask", q)
    assert pred.prediction == "no"


# ------------------------------------------------------------------ failures
def test_an_unparsable_step_is_a_failed_prediction(s):
    s.llm._fn = responder(plan=["Follow up: Who directed Taxi!?", "I am not sure what to do here."])
    pred, sent = run(s, "self-ask")
    assert pred.failed and pred.prediction == "" and "step 2" in pred.error and "Follow up:" in pred.error
    assert pred.trace["stop_reason"] == "unparsable_step" and len(pred.trace["steps"]) == 1
    assert pred.trace["answer_raw"] == "I am not sure what to do here."


def test_empty_outputs_fail_without_crashing(s):
    s.llm._fn = responder(plan=[""])
    pred, _ = run(s, "self-ask")
    assert pred.failed and "step 1" in pred.error
    s.llm._fn = responder(plan=["So the final answer is:   "])
    other = Question("q2", "Who was the spouse of the director of Taxi!?", ["Winnie Lightner"], dataset="2wiki")
    pred, _ = run(s, "self-ask-kg-infused", other, rounds=1)
    assert pred.failed and "empty final answer" in pred.error and pred.trace["stop_reason"] == "final_answer"


def test_an_empty_intermediate_answer_is_written_as_unknown(s):
    inner = responder()
    s.llm._fn = lambda m, p: ("" if not is_self_ask(m) and cue(m) == "Answer:"
                              and "Who directed Taxi!?" in m[-1]["content"] else inner(m, p))
    pred, _ = run(s, "self-ask")
    assert pred.trace["steps"][0]["intermediate_answer"] == "unknown"
    assert any("no intermediate answer" in i for i in pred.trace["issues"]) and not pred.failed


# ------------------------------------------------------------------ parsing and prompt
@pytest.mark.parametrize("out,kind,text", [
    ("Yes.\nFollow up: Who directed Taxi!?", "follow_up", "Who directed Taxi!?"),
    ("**Follow-up:** \"When was he born?\"\n", "follow_up", "When was he born?"),
    ("Follow up:\nWho is she?", "follow_up", "Who is she?"),
    ("Are follow up questions needed here: No.\nSo the final answer is: Paris", "final", "Paris"),
    ("So the final answer is Paris.", "final", "Paris."),
    ("Final answer: 1932", "final", "1932"),
    ("So the final answer is: X\nFollow up: Y?", "final", "X"),
    ("<think>Follow up: hidden?</think>So the final answer is: Z", "final", "Z"),
    ("Follow up:   ", "none", ""),
    ("Philadelphia.", "none", ""),
])
def test_parse_step(out, kind, text):
    step = parse_step(out)
    assert (step.kind, step.text) == (kind, text)


def test_prompt_is_our_own_with_the_papers_format():
    text = SA.self_ask_prompt("Q?", [("A?", "a")])
    for label in (SA.FOLLOW_UP, SA.INTERMEDIATE, SA.FINAL, SA.NEEDED):
        assert label in text
    for paper_demo in ("Muhammad Ali", "craigslist", "Jaws", "Casino Royale", "George Washington"):
        assert paper_demo not in text
    assert text.endswith("Question: Q?\nAre follow up questions needed here: Yes.\n"
                         "Follow up: A?\nIntermediate answer: a\n")
    assert SA.self_ask_prompt("Q?", [("A?", "a")], force_final=True).endswith("a\nSo the final answer is:")
    assert 2 <= len(SA.DEMONSTRATIONS) <= 4


# ------------------------------------------------------------------ the real small model
MODEL_CFG = {"rounds": 1, "k_p": 2, "max_tokens": 32, "answer_max_tokens": 12, "query_max_tokens": 20,
             "max_triples_per_entity": 10, "max_steps": 2, "step_max_tokens": 40}


@pytest.fixture(scope="module")
def real(request):
    from kgrag_lib.paths import data_root

    root = data_root()
    if not (root / "2wiki" / "lag_2wiki_dev_4000_nocontext.json").exists():
        pytest.skip(f"real 2Wiki files not under the data root {root}")
    llm = request.getfixturevalue("shared_llm")   # the session's one load (conftest.py), after the data check
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.methods.base import RunContext

    ctx = RunContext(llm=llm, embedder=request.getfixturevalue("shared_embedder"))
    return ctx, load_questions("2wiki", n=1, seed=0, root=root)[0]


@pytest.mark.model
@pytest.mark.parametrize("name", ["self-ask", "self-ask-kg-infused"])
def test_real_model_answers_one_2wiki_question(real, name):
    ctx, q = real
    pred = make_self_ask(name, ctx, MODEL_CFG).answer(q)
    t = pred.trace
    assert pred.qid == q.qid and pred.method == name and t["corpus"] == "2wiki"
    assert t["transcript"].startswith(f"Question: {q.question}")
    assert t["steps"] or t.get("final_answer"), pred.error
    for st in t["steps"]:
        assert st["follow_up"] and st["intermediate_answer"]
        assert [p["from"] for p in st["passages"]] == (["q", "q'"] if name == "self-ask-kg-infused" else ["q", "q"])
        if name == "self-ask-kg-infused":
            assert t["kg"] == "2wiki-evidence-heldout" and st["summary"] and st["augmented_note"]
