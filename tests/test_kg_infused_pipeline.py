"""The six KG-Infused RAG variants end to end with a scripted LLM: stage outputs in the trace,
dual-retrieval de-duplication, stage sharing through the LLM cache, and grid request counts."""

from __future__ import annotations

import pytest

from _kg_infused_helpers import PASSAGES, cue, stage_responder, tiny_store
from fakes import BagOfWordsEmbedder
from kgrag_lib.errors import ConfigError
from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from kgrag_lib.methods import available_methods
from kgrag_lib.methods.base import RunContext
from kgrag_lib.grid import GridRun, run_grid
from kgrag_lib.methods.kg_infused import make_method
from kgrag_lib.methods.kg_infused.corpus import CorpusIndex
from kgrag_lib.methods.kg_infused.kg_sources import KGSource, seed_candidates
from kgrag_lib.methods.kg_infused.stages import clean_query, clean_text, merge_dual, retrieve_dual
from kgrag_lib.records import Question
from kgrag_lib.studies.kg_infused import paper_grid
from kgrag_lib.retrieval import DenseIndex

QUESTIONS = [
    Question("q1", "Where was the director of film Taxi! born?", ["Philadelphia"], dataset="2wiki"),
    Question("q2", "When did the director of What Price Hollywood? die?", ["January 24, 1983"], dataset="2wiki"),
]


class Setup:
    def __init__(self, tmp_path, responder=None):
        self.store = tiny_store()
        self.emb = BagOfWordsEmbedder()
        ids, texts = seed_candidates(self.store)
        self.kg = KGSource("tiny-kg", self.store, ids, DenseIndex.build(self.emb.encode(texts)))
        self.corpus = CorpusIndex("tiny-corpus", PASSAGES, DenseIndex.build(self.emb.encode([p.as_text() for p in PASSAGES])))
        self.cache = LLMCache(tmp_path / "llm.sqlite")
        self.llm = ScriptedLLM(responder or stage_responder(), cache=self.cache)
        self.ctx = RunContext(cache_dir=str(tmp_path), llm=self.llm, embedder=self.emb)

    def method(self, name, **cfg):
        return make_method(name, self.ctx, cfg, kg_source=self.kg, corpus_loader=lambda n: self.corpus)

    def run(self, name, q=QUESTIONS[0], **cfg):
        """(prediction, cues of the requests that reached the backend, requests made)"""
        before, req0 = len(self.llm.requests), self.llm.usage.requests
        pred = self.method(name, **cfg).answer(q)
        return pred, [cue(r.messages) for r in self.llm.requests[before:]], self.llm.usage.requests - req0


@pytest.fixture
def s(tmp_path):
    setup = Setup(tmp_path)
    yield setup
    setup.cache.close()


def test_all_variants_registered_in_the_kg_infused_family():
    methods = available_methods()
    for name in ("nor", "vanilla-rag", "vanilla-qe", "kg-infused", "kg-qe-only", "kg-aug-only"):
        assert methods[name].family == "kg-infused"
        assert "2wiki" in methods[name].datasets


def test_nor_and_vanilla_rag(s):
    pred, sent, made = s.run("nor")
    assert sent == ["Answer:"] and pred.prediction == "Roy Del Ruth"
    assert pred.trace["kg"] is None and pred.trace["corpus"] is None and not pred.failed
    pred, sent, made = s.run("vanilla-rag", k_p=4)
    assert sent == ["Note:", "Answer:"]
    assert [p["from"] for p in pred.trace["passages"]] == ["q"] * 4
    assert {"Taxi!", "Roy Del Ruth"} <= {p["pid"] for p in pred.trace["passages"]}
    assert pred.trace["note"].startswith("the documents say") and pred.trace["corpus"] == "tiny-corpus"
    assert pred.trace["kg"] is None and pred.trace["config"]["k_p"] == 4


def test_vanilla_qe_dual_retrieval(s):
    pred, sent, _ = s.run("vanilla-qe")
    assert sent == ["New query:", "Note:", "Answer:"]
    assert pred.trace["expanded_query"] == "Taxi! 1932 film director"
    srcs = [p["from"] for p in pred.trace["passages"]]
    pids = [p["pid"] for p in pred.trace["passages"]]
    assert srcs == ["q"] * 3 + ["q'"] * 3 and len(set(pids)) == 6
    assert set(pred.trace["skipped_duplicates"]) <= set(pids[:3])


def test_kg_infused_trace_has_every_stage(s):
    pred, sent, made = s.run("kg-infused", rounds=2)
    assert sent == ["Chosen facts:", "Chosen new facts:", "Summary:", "New query:", "Note:",
                    "Improved passage:", "Answer:"]
    t = pred.trace
    assert t["kg"] == "tiny-kg" and t["corpus"] == "tiny-corpus" and t["variant"] == "kg-infused"
    assert "Taxi!" in [e["entity"] for e in t["seed_entity_scores"]] and len(t["seed_entity_scores"]) == 3
    act = t["activation"]
    assert len(act["rounds"]) == 2 and act["rounds"][0]["selected"] and "Taxi!" in act["activated_entities"]
    assert "<Taxi! | director | Roy Del Ruth>" in act["subgraph"]
    assert "<Taxi! | director | Roy Del Ruth>" in t["summary"]
    assert t["expanded_query"] == "Who directed Taxi! and where was he born?"
    assert [p["from"] for p in t["passages"]] == ["q"] * 3 + ["q'"] * 3
    assert t["note"] and t["augmented_note"].startswith("Taxi! (1932)") and t["answer_raw"] == "Answer: Roy Del Ruth"


def test_ablations_reuse_the_shared_stages(s):
    _, sent_rag, _ = s.run("vanilla-rag")
    _, sent_aug, made = s.run("kg-aug-only", rounds=2)
    # The note over q's passages is vanilla RAG's: served by the cache.
    assert "Note:" not in sent_aug and sent_aug == ["Chosen facts:", "Chosen new facts:", "Summary:",
                                                    "Improved passage:", "Answer:"]
    assert made == 6
    _, sent_full, _ = s.run("kg-infused", rounds=2)
    # Activation and summary are shared with kg-aug-only.
    assert sent_full == ["New query:", "Note:", "Improved passage:", "Answer:"]
    pred, sent_qe, made = s.run("kg-qe-only", rounds=2)
    # Everything but the final answer (from the un-augmented note) is shared with kg-infused.
    assert sent_qe == ["Answer:"] and made == 6 and "augmented_note" not in pred.trace


def test_kg_aug_only_sends_its_note_beside_the_kg_branch_with_the_same_requests(tmp_path):
    """kg-aug-only's note reads the passages of q alone, not the activation or the summary: on a
    batching backend the first selection round and the note are in flight together (a barrier of 2
    opens only then), and the prediction, its trace and the cache keys are the sequential run's."""
    import sqlite3
    import threading

    def run(workers, barrier):
        base = stage_responder()

        def respond(messages, params):
            if barrier is not None and cue(messages) in ("Chosen facts:", "Note:"):
                barrier.wait()
            return base(messages, params)

        setup = Setup(tmp_path / f"w{workers}", respond)
        setup.llm.concurrent_requests, setup.llm.max_in_flight = True, workers
        pred = setup.method("kg-aug-only", rounds=2).answer(QUESTIONS[0])
        keys = sorted(k for (k,) in sqlite3.connect(tmp_path / f"w{workers}" / "llm.sqlite").execute(
            "SELECT key FROM calls"))
        setup.cache.close()
        return pred, keys

    for w in (1, 2):
        (tmp_path / f"w{w}").mkdir()
    one, keys1 = run(1, None)
    two, keys2 = run(2, threading.Barrier(2, timeout=30))
    assert len(keys1) == 6 and keys2 == keys1
    assert (two.prediction, two.trace, two.failed) == (one.prediction, one.trace, one.failed)
    assert list(two.trace) == list(one.trace)   # the same keys in the same order


def test_more_rounds_extend_fewer_rounds_exactly(s):
    s.run("kg-infused", rounds=1)
    _, sent, made = s.run("kg-infused", rounds=2)
    assert "Chosen facts:" not in sent and sent[0] == "Chosen new facts:" and made == 7
    _, sent3, _ = s.run("kg-qe-only", rounds=3)
    assert sent3.count("Chosen new facts:") == 1 and "Chosen facts:" not in sent3


def test_activation_stopping_early_makes_larger_k_free(tmp_path):
    only_literal = lambda m, p: "<Taxi! | publication date | 1932>" if cue(m) == "Chosen facts:" else stage_responder()(m, p)
    s = Setup(tmp_path, stage_responder(select=only_literal))
    pred, _, _ = s.run("kg-infused", rounds=1)
    _, sent, _ = s.run("kg-infused", rounds=6)
    assert sent == [] and pred.trace["activation"]["stop_reason"] == "no_new_entities"
    s.cache.close()


def test_strategyqa_asks_for_yes_or_no(s):
    q = Question("s1", "Could Roy Del Ruth have seen the year 1970?", ["no"], dataset="strategyqa")
    s.llm._fn = lambda m, p: "No, he died in 1961." if cue(m) == "Answer:" else stage_responder()(m, p)
    pred, _, _ = s.run("nor", q)
    assert "yes or no" in s.llm.requests[-1].prompt and pred.prediction == "no"


def test_config_errors_name_the_parameter(s):
    with pytest.raises(ConfigError, match="top_k"):
        s.method("kg-infused", top_k=3)
    with pytest.raises(ConfigError, match="rounds"):
        s.method("kg-infused", rounds=0)
    with pytest.raises(ConfigError, match="k_p"):
        s.method("vanilla-rag", k_p="six")


@pytest.mark.parametrize("ids_q,ids_q2,k_p,exp_q,exp_q2", [
    ([1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], 6, [1, 2, 3], [7, 8, 9]),
    ([1, 2, 3], [2, 1, 7, 3, 8, 9], 6, [1, 2, 3], [7, 8, 9]),       # q' duplicates skipped
    ([1, 2, 3], [1, 2, 3, 4, 5, 6], 6, [1, 2, 3], [4, 5, 6]),       # worst case still fills k_p
    ([1, 2, 3], [3, 4, 5, 6, 7], 5, [1, 2, 3], [4, 5]),             # odd k_p: ceil for q
    ([1, 2], [1, 2], 4, [1, 2], []),                                # tiny corpus: fewer is fine
])
def test_merge_dual_dedup_rule(ids_q, ids_q2, k_p, exp_q, exp_q2):
    assert merge_dual(ids_q, ids_q2, k_p) == (exp_q, exp_q2)


def test_retrieve_dual_passages_are_unique_and_ordered(s):
    qv = s.emb.encode(["Taxi! director"])
    got = retrieve_dual(PASSAGES, s.corpus.index, qv, qv, 6)   # q' == q: all of q' top-3 overlap
    assert len(got.passages) == 6 and len({p.pid for p in got.passages}) == 6
    assert got.sources == ["q"] * 3 + ["q'"] * 3 and len(got.skipped_duplicates) == 3


def test_output_cleanup():
    assert clean_text("### Note: a b\n") == "a b"
    assert clean_query('\n**New query:** "Who directed Taxi!?"\nextra') == "Who directed Taxi!?"
    assert clean_query("") == ""


def write_2wiki(path, questions):
    import json

    path.write_text(json.dumps([{"_id": q.qid, "question": q.question, "answer": q.answers[0]} for q in questions]),
                    encoding="utf-8")
    return path


def test_grid_sends_only_distinct_requests_and_a_warm_rerun_sends_none(s, tmp_path):
    """The grid runs every configuration through the one runner (a folder per run) and counts,
    from the request ids the runner records, what independent runs would send."""
    runs = paper_grid(rounds=(1, 2, 3))
    assert len(runs) == 12 and runs[3].label == "kg-infused[rounds=1]"
    # the runs find the tiny KG and corpus where the method looks them up: the context's memo
    s.ctx.shared[f"kg-infused:kg:tiny-kg:{s.emb.identity}"] = s.kg
    s.ctx.shared[f"kg-infused:corpus:2wiki:{s.emb.identity}"] = s.corpus
    qa = write_2wiki(tmp_path / "qa.json", QUESTIONS)
    kw = dict(ctx=s.ctx, profile={"name": "t"}, progress=False, qa_file=str(qa), cache_dir=str(tmp_path),
              kg="tiny-kg", k_p=4)
    report = run_grid(runs, ["2wiki"], tmp_path / "grid", **kw)
    assert report.requests == sum(r["requests"] for r in report.per_config)
    assert report.sent == report.distinct == sum(r["new_distinct"] for r in report.per_config)
    assert report.distinct < 0.6 * report.requests
    by = {r["config"]: r for r in report.per_config}
    assert by["nor"]["requests_per_q"] == 1 and by["vanilla-rag"]["requests_per_q"] == 2
    assert by["vanilla-qe"]["requests_per_q"] == 3
    # kg-infused@1 ran first: kg-aug-only@1 adds only its augmentation (of vanilla RAG's note)
    # and answer; kg-qe-only@1 only its answer (from kg-infused's note, un-augmented).
    assert by["kg-infused[rounds=1]"]["new_distinct"] == 2 * 6 and by["kg-aug-only[rounds=1]"]["new_distinct"] == 2 * 2
    assert by["kg-qe-only[rounds=1]"]["new_distinct"] == 2 * 1     # only the answer is its own
    assert len(report.predictions["kg-infused[rounds=2]"]) == 2 and "ratio" in report.summary()
    cell = report.cells[0]
    assert (cell.out / "manifest.json").exists() and (cell.out / "metrics.json").exists()
    assert cell.out == tmp_path / "grid" / "runs" / "2wiki" / "nall_seed0" / "nor"
    # a rerun resumes every run from its files: nothing is sent, the counts are the same
    again = run_grid(runs, ["2wiki"], tmp_path / "grid", **kw)
    assert again.sent == 0 and (again.requests, again.distinct) == (report.requests, report.distinct)
    assert again.counts_row("all")["ratio_distinct_to_independent"] == round(report.ratio, 3)


def test_grid_run_labels():
    assert GridRun.of("kg-infused", rounds=3, k_p=4).label == "kg-infused[k_p=4,rounds=3]"
    assert GridRun.of("kg-infused", rounds=3, k_p=4).folder == "kg-infused_k_p=4,rounds=3".replace(",", "_")
    assert GridRun.of("vanilla-rag").label == "vanilla-rag"
