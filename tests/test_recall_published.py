"""Issue 56, item 8: Table 4's Recall@6 recomputes from the published per-question rows. The runner
records each question's gold passage ids (`gold_ids`), `study.compact_rows` keeps them with the
passage ids the trace retrieved (`retrieved`), and the Table 4 claims read the same values from the
published rows as from the full predictions (no model: a scripted method)."""

from __future__ import annotations

from types import SimpleNamespace

from kgrag_lib.methods.base import Method
from kgrag_lib.records import Prediction, Question
from kgrag_lib.report.kg_infused import check_claims, paper_numbers, question_values
from kgrag_lib.report.study import compact_rows
from kgrag_lib.runner import read_predictions, run_method

PASSAGES = {"q1": ["A", "B", "C"], "q2": ["D", "A"], "q3": ["E"], "q4": []}
GOLD = {"q1": ["A", "C"], "q2": ["B", "C"], "q3": ["E", "F"], "q4": ["G"]}


class RetrievingMethod(Method):
    """Answers 'x' and records a fixed passage list in its trace as KG-Infused RAG does (`passages`)."""

    name = "retrieving"

    def __init__(self, shift: int = 0):
        self.shift = shift

    def answer(self, q: Question) -> Prediction:
        got = PASSAGES[q.qid][self.shift:]
        return Prediction(q.qid, q.question, "x", q.answers, self.name,
                          trace={"passages": [{"pid": p, "from": "q"} for p in got]})


def _questions(supporting: bool = True) -> list[Question]:
    return [Question(q, f"question {q}?", ["x"], dataset="2wiki", supporting=GOLD[q] if supporting else [])
            for q in GOLD]


def test_compact_rows_keep_retrieved_and_gold_ids_and_recall_recomputes(tmp_path):
    run_method(RetrievingMethod(), _questions(), tmp_path / "a", {}, progress=False)
    full = read_predictions(tmp_path / "a" / "predictions.jsonl")
    assert [r["gold_ids"] for r in full] == [GOLD[q] for q in GOLD]          # the runner records the golds
    rows = compact_rows(tmp_path / "a")
    assert "trace" not in rows[0]
    assert [r.get("retrieved") for r in rows] == [PASSAGES["q1"], PASSAGES["q2"], PASSAGES["q3"], None]
    assert [r["gold_ids"] for r in rows] == [GOLD[q] for q in GOLD]
    supporting = {q.qid: q.supporting for q in _questions()}
    from_trace = question_values(full, "recall@6", supporting)
    assert question_values(rows, "recall@6") == from_trace == {"q1": 1.0, "q2": 0.0, "q3": 0.5, "q4": 0.0}
    assert question_values(rows, "recall@6", supporting) == from_trace


def test_questions_without_gold_passages_publish_no_gold_ids(tmp_path):
    run_method(RetrievingMethod(), _questions(supporting=False), tmp_path / "a", {}, progress=False)
    assert not any("gold_ids" in r for r in read_predictions(tmp_path / "a" / "predictions.jsonl"))
    rows = compact_rows(tmp_path / "a")
    assert not any("gold_ids" in r for r in rows) and question_values(rows, "recall@6") == {}


def test_table4_claims_recompute_from_the_published_rows(tmp_path):
    """The claim t4.kg_qe_recall.2wiki tested on grids built from published rows equals the claim
    tested on the full predictions with the questions' gold ids."""
    run_method(RetrievingMethod(), _questions(), tmp_path / "qe", {}, progress=False)
    run_method(RetrievingMethod(shift=1), _questions(), tmp_path / "vr", {}, progress=False)

    def grid(read):
        return SimpleNamespace(cells=[
            SimpleNamespace(dataset="2wiki", run=SimpleNamespace(method="kg-qe-only", cfg={"rounds": 1}), rows=read("qe")),
            SimpleNamespace(dataset="2wiki", run=SimpleNamespace(method="vanilla-rag", cfg={}), rows=read("vr"))])

    claim = [c for c in paper_numbers.CLAIMS if c[0] == "t4.kg_qe_recall.2wiki"]
    supporting = {q.qid: q.supporting for q in _questions()}
    full = check_claims(grid(lambda n: read_predictions(tmp_path / n / "predictions.jsonl")), claim, supporting=supporting)
    published = check_claims(grid(lambda n: compact_rows(tmp_path / n)), claim)
    cols = ["n_pairs", "ours_a", "ours_b", "diff", "p_value", "verdict"]
    assert full[cols].to_dict("records") == published[cols].to_dict("records")
    assert full["n_pairs"][0] == 4 and full["ours_a"][0] > full["ours_b"][0]
