"""scripts/judge_probe.py: the same predictions judged by each model, with controls and EM agreement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from _script_loader import load_script



def _probe():
    return load_script("judge_probe")


def _predictions(folder: Path) -> Path:
    rows = [("q1", "Who directed Alien?", ["Ridley Scott"], "Ridley Scott"),
            ("q2", "Where was Ada Lovelace born?", ["London"], "Paris"),
            ("q3", "When did Faraday die?", ["1867"], "1867")]
    path = folder / "runs" / "naive-rag" / "predictions.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({"qid": q, "question": t, "answers": a, "prediction": p, "method": "naive-rag",
                                        "failed": False}) + "\n" for q, t, a, p in rows))
    return path


def test_an_honest_judge_is_informative_and_a_yes_man_is_not(tmp_path, monkeypatch, capsys):
    import kgrag_lib.llm as llm_mod

    def honest(messages, params):
        text = messages[-1]["content"]
        refs = text.split("Reference answers: ", 1)[1].split("\n", 1)[0]
        cand = text.split("Candidate answer: ", 1)[1].split("\n", 1)[0]
        return json.dumps({"verdict": "correct" if cand and cand in refs else "incorrect"})

    judges = {"m-honest": honest, "m-yes": lambda m, p: '{"verdict": "correct"}'}
    monkeypatch.setattr(llm_mod, "load_llm", lambda spec, **kw: ScriptedLLM(
        judges[spec], identity=f"scripted:{spec}", cache=LLMCache(tmp_path / "llm.sqlite")))
    preds, out = _predictions(tmp_path), tmp_path / "probe"
    assert _probe().main([str(preds), "--models", "m-honest", "m-yes", "--out", str(out)]) == 0
    runs = {r["model"]: r["summary"] for r in json.loads((out / "summary.json").read_text())["runs"]}
    h, y = runs["m-honest"], runs["m-yes"]
    assert h["judge_informative"] and h["control_gold_accepted"] == 100.0 and h["control_wrong_accepted"] == 0.0
    assert (h["judge_accepts_em_correct"], h["em_correct"], h["judge_accepts_em_incorrect"]) == (2, 2, 0)
    assert not y["judge_informative"] and y["control_wrong_accepted"] == 100.0 and y["judge_accepts_em_incorrect"] == 1
    assert (out / "m-honest" / "naive-rag.judge.jsonl").exists() and not (out / "m-honest" / "naive-rag.jsonl").exists()
    assert capsys.readouterr().out.count("| naive-rag |") == 2


def test_a_missing_predictions_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _probe().main([str(tmp_path / "nope.jsonl"), "--models", "x", "--out", str(tmp_path)])
    assert "nope.jsonl: no such predictions file" in capsys.readouterr().err
