"""The run loop: incremental writes, resume after a kill, failures recorded, provenance."""

from __future__ import annotations

import json

import pytest

from kgrag_lib.methods.base import Method
from kgrag_lib.records import Prediction, Question
from kgrag_lib.runner import read_predictions, run_method


class CountingMethod(Method):
    """Answers with a fixed map; counts how often each question was asked."""

    name = "counting"

    def __init__(self, answers, fail_on=()):
        self.answers = answers
        self.fail_on = set(fail_on)
        self.asked = []

    def answer(self, q: Question) -> Prediction:
        self.asked.append(q.qid)
        if q.qid in self.fail_on:
            from kgrag_lib.llm.parsing import LLMParseError

            raise LLMParseError(f"no answer found in model output for {q.qid}")
        return Prediction(q.qid, q.question, self.answers[q.qid], q.answers, self.name, trace={"step": 1})


def _questions():
    return [
        Question("q1", "who directed Kismet", ["William Dieterle"], dataset="metaqa-1hop"),
        Question("q2", "what year was Kismet released", ["1944"], dataset="metaqa-1hop"),
        Question("q3", "what language is Kismet in", ["English"], dataset="metaqa-1hop"),
    ]


def test_run_writes_predictions_metrics_manifest(tmp_path):
    m = CountingMethod({"q1": "William Dieterle", "q2": "1955", "q3": "English"})
    metrics = run_method(m, _questions(), tmp_path, {"method": "counting"}, progress=False)
    rows = read_predictions(tmp_path / "predictions.jsonl")
    assert [r["qid"] for r in rows] == ["q1", "q2", "q3"]
    assert rows[0]["trace"] == {"step": 1}
    assert metrics["n"] == 3
    assert metrics["hit1"] == pytest.approx(200 / 3, abs=0.01)  # 2 of 3 exact
    assert json.loads((tmp_path / "metrics.json").read_text())["hit1"] == metrics["hit1"]
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["config"] == {"method": "counting"}
    assert "numpy" in man["versions"] and "git" in man


def test_resume_skips_finished_and_drops_torn_line(tmp_path):
    qs = _questions()
    m = CountingMethod({"q1": "William Dieterle", "q2": "1944", "q3": "English"})
    run_method(m, qs[:2], tmp_path, {}, progress=False)
    # simulate a kill in the middle of writing the third line
    with open(tmp_path / "predictions.jsonl", "a") as fh:
        fh.write('{"qid": "q3", "predic')
    m2 = CountingMethod({"q1": "x", "q2": "x", "q3": "English"})
    metrics = run_method(m2, qs, tmp_path, {}, progress=False)
    assert m2.asked == ["q3"]
    rows = read_predictions(tmp_path / "predictions.jsonl")
    assert [r["qid"] for r in rows] == ["q1", "q2", "q3"]
    assert metrics["hit1"] == 100.0
    assert json.loads((tmp_path / "manifest.json").read_text())["resumed_from"]


def test_unparsable_output_is_a_recorded_failure(tmp_path):
    m = CountingMethod({"q1": "William Dieterle", "q3": "English"}, fail_on={"q2"})
    metrics = run_method(m, _questions(), tmp_path, {}, progress=False)
    rows = read_predictions(tmp_path / "predictions.jsonl")
    failed = [r for r in rows if r["failed"]]
    assert [r["qid"] for r in failed] == ["q2"] and "LLMParseError" in failed[0]["error"]
    assert metrics["failed"] == 1 and metrics["n"] == 3


def test_corrupt_middle_line_is_an_error_naming_the_line(tmp_path):
    p = tmp_path / "predictions.jsonl"
    row = '{"qid": "%s", "prediction": "x", "answers": ["x"]}'
    p.write_text(row % "a" + "\nnot json\n" + row % "b" + "\n")
    with pytest.raises(Exception, match=r"predictions.jsonl:2"):
        read_predictions(p)


def test_resume_is_given_the_rows_already_written(tmp_path):
    """A method whose state grows over questions sees, before answering, what a killed run wrote."""
    qs = _questions()
    run_method(CountingMethod({"q1": "a", "q2": "b", "q3": "c"}), qs[:2], tmp_path, {}, progress=False)

    class Remembering(CountingMethod):
        def resume(self, done):
            self.resumed = [r["qid"] for r in done]

    m = Remembering({"q1": "a", "q2": "b", "q3": "c"})
    run_method(m, qs, tmp_path, {}, progress=False)
    assert m.resumed == ["q1", "q2"] and m.asked == ["q3"]


def test_an_edited_question_is_not_resumed_with_its_old_answer_and_gold(tmp_path):
    """Issue 40: a question file edited under the same qids kept the run's settings, so the
    stored predictions (old text, old gold) were resumed and scored silently. Now the resume is
    refused naming the questions; --overwrite answers those again (the others are kept)."""
    from kgrag_lib.runner import StaleRunError

    answers = {"q1": "William Dieterle", "q2": "1944", "q3": "English"}
    out = tmp_path / "run"
    run_method(CountingMethod(answers), _questions(), out, {"m": 1}, progress=False)
    edited = _questions()
    edited[1] = Question("q2", "what year was Kismet released", ["1955"], dataset="metaqa-1hop")      # new gold
    edited[2] = Question("q3", "what language is Kismet shot in", ["English"], dataset="metaqa-1hop")  # new text
    with pytest.raises(StaleRunError, match=r"2 question\(s\) whose content has changed.*q2 \(gold answers\), "
                                            r"q3 \(text\).*--overwrite"):
        run_method(CountingMethod(answers), edited, out, {"m": 1}, progress=False)
    assert len(read_predictions(out / "predictions.jsonl")) == 3            # nothing was changed
    again = CountingMethod(answers)
    metrics = run_method(again, edited, out, {"m": 1}, progress=False, overwrite=True)
    assert sorted(again.asked) == ["q2", "q3"] and metrics["em"] == pytest.approx(66.67, abs=0.01)
    assert {r["qid"]: r["answers"] for r in read_predictions(out / "predictions.jsonl")}["q2"] == ["1955"]
    # the unchanged file resumes as before: nothing asked again
    same = CountingMethod(answers)
    run_method(same, edited, out, {"m": 1}, progress=False)
    assert same.asked == []


def test_overwrite_with_a_bad_setting_refuses_before_discarding_the_finished_run(tmp_path):
    """Issue 40: `--overwrite --concurrency 0` deleted the finished run, then refused the setting."""
    from kgrag_lib.errors import ConfigError

    answers = {"q1": "William Dieterle", "q2": "1944", "q3": "English"}
    out = tmp_path / "run"
    run_method(CountingMethod(answers), _questions(), out, {"m": 1}, progress=False)
    with pytest.raises(ConfigError, match="concurrency"):
        run_method(CountingMethod(answers), _questions(), out, {"m": 2}, progress=False, overwrite=True, concurrency=0)
    assert len(read_predictions(out / "predictions.jsonl")) == 3 and (out / "metrics.json").is_file()


def test_the_data_manifest_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """Issue 40: refresh-manifest rewrote the manifest in place and a full disk left it cut."""
    import errno
    import os

    from kgrag_lib.data import manifest as mf

    path = tmp_path / "datasets.yaml"
    path.write_text("# header\ndatasets:\n  x:\n    files:\n    - path: x/a.txt\n", encoding="utf-8")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a.txt").write_text("one\ntwo\n", encoding="utf-8")
    before = path.read_text(encoding="utf-8")

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        mf.refresh_manifest(tmp_path, path)
    assert path.read_text(encoding="utf-8") == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    monkeypatch.undo()
    assert mf.refresh_manifest(tmp_path, path) == ["x/a.txt"]
    assert path.read_text(encoding="utf-8").startswith("# header\n") and "sha256" in path.read_text(encoding="utf-8")


def test_a_qid_twice_in_predictions_is_refused_and_a_question_without_gold_is_said(tmp_path, capsys):
    """Issue 40: a qid twice in predictions.jsonl was scored from its last copy; a question without
    gold was left out of every score while metrics.json said n = 2, silently."""
    from kgrag_lib.errors import DataFormatError

    path = tmp_path / "predictions.jsonl"
    row = {"qid": "q1", "prediction": "a", "answers": ["a"]}
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "prediction": "b"}) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"predictions\.jsonl:2: .*qid 'q1' again \(first at line 1\)"):
        read_predictions(path, unique_qids=True)
    assert len(read_predictions(path)) == 2   # predictions from elsewhere (kgrag score) may repeat a qid
    (tmp_path / "again").mkdir()
    path.replace(tmp_path / "again" / "predictions.jsonl")
    with pytest.raises(DataFormatError, match="again"):   # a run folder's file: refused on resume
        run_method(CountingMethod({"q1": "a"}), [Question("q1", "q", ["a"], dataset="metaqa-1hop")],
                   tmp_path / "again", {"m": 1}, progress=False)
    questions = [Question("q1", "who directed Kismet", ["William Dieterle"], dataset="metaqa-1hop"),
                 Question("q2", "what is Kismet", [], dataset="metaqa-1hop")]
    metrics = run_method(CountingMethod({"q1": "William Dieterle", "q2": "a film"}), questions, tmp_path / "run",
                         {"m": 1}, progress=False)
    assert metrics["n"] == 2 and metrics["n_em"] == 1 and metrics["em"] == 100.0
    assert "em is over 1 of 2 questions: the others have no gold answer" in capsys.readouterr().err


def test_a_question_with_a_lone_surrogate_fails_alone_and_the_run_goes_on(tmp_path):
    """Issue 40: one question holding "\\ud800" killed the whole run (it could not be written)."""
    questions = [*_questions()[:2], Question("q3", "what language is \ud800 in", ["English"], dataset="metaqa-1hop")]
    method = CountingMethod({"q1": "William Dieterle", "q2": "1944", "q3": "English"})
    metrics = run_method(method, questions, tmp_path / "run", {"m": 1}, progress=False)
    rows = {r["qid"]: r for r in read_predictions(tmp_path / "run" / "predictions.jsonl")}
    assert method.asked == ["q1", "q2"] and metrics["failed"] == 1
    assert rows["q3"]["failed"] and "not valid Unicode" in rows["q3"]["error"] and "\\ud800" in rows["q3"]["question"]
