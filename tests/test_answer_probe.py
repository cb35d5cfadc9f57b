"""scripts/answer_probe.py: a run's final reasoning requests replayed to each model and read with
TCR-QF's own answer parse."""

from __future__ import annotations

import json

import pytest

from kgrag_lib.errors import KgragError
from kgrag_lib.llm.base import SamplingParams
from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from _script_loader import load_script

QUESTIONS = [("q1", "Who directed Alien?", ["Ridley Scott"]), ("q2", "Is Paris in France?", ["yes"])]


def _llm(spec: str, cache) -> ScriptedLLM:
    def run_model(messages, params):
        if params.grammar:
            return "[relation | E1 | directed | E2]"          # an extraction call with the same budget
        if params.max_tokens == 192:
            return "Relation: directed"                         # a search stage
        q = messages[-1]["content"]
        return "Step 1: it was Ridley Scott." if "Alien" in q else "Yes, Paris is in France."

    def big_model(messages, params):
        q = messages[-1]["content"]
        return "Reasoning...\nFinal Answer: Ridley Scott" if "Alien" in q else "Reasoning...\nFinal Answer: no"

    return ScriptedLLM({"m-run": run_model, "m-big": big_model}[spec], identity=f"scripted:{spec}", cache=cache)


def _run(tmp_path):
    """A finished run's folder made by the run model: per question an extraction, a search and the
    final reasoning request, their ids in predictions.jsonl, the answers in the cache."""
    cache = LLMCache(tmp_path / "llm.sqlite")
    llm = _llm("m-run", cache)
    run = tmp_path / "run"
    run.mkdir()
    rows = []
    for qid, q, gold in QUESTIONS:
        with llm.recording() as ids:
            llm.generate([{"role": "user", "content": "extract"}], SamplingParams(max_tokens=384, grammar="root ::= x"))
            llm.generate([{"role": "user", "content": f"relations for {q}"}], SamplingParams(max_tokens=192))
            raw = llm.generate([{"role": "user", "content": q}], SamplingParams(max_tokens=384))
        pred = "Step 1: it was Ridley Scott." if "Alien" in q else "yes"
        assert raw
        rows.append({"qid": qid, "question": q, "answers": gold, "prediction": pred, "requests": list(ids),
                     "trace": {"config": {"max_tokens": 192, "reason_max_tokens": 384}}})
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run, tmp_path / "llm.sqlite"


def test_final_requests_are_replayed_and_read_with_the_pipelines_parse(tmp_path, monkeypatch, capsys):
    import kgrag_lib.llm as llm_mod

    run, cache_path = _run(tmp_path)
    monkeypatch.setattr(llm_mod, "load_llm", lambda spec, **kw: _llm(spec, LLMCache(kw["cache_path"])))
    out = tmp_path / "probe"
    assert load_script("answer_probe").main(["--run", str(run), "--cache", str(cache_path), "--models", "m-run",
                                             "m-big", "--out", str(out)]) == 0
    models = {m["model"]: m for m in json.loads((out / "summary.json").read_text())["models"]}
    run_m, big = models["m-run"], models["m-big"]
    # the run's model: q1 has no answer form (the last line is taken, as the pipeline does), q2 a leading yes
    assert (run_m["read"], run_m["forms"], run_m["same_as_run"], run_m["em"]) == (
        1, {"not read": 1, "leading yes/no": 1}, 2, 50.0)
    assert (big["read"], big["forms"], big["em"]) == (2, {"Final Answer line": 2}, 50.0)
    rows = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in rows if r["model"] == "m-big"] == ["Ridley Scott", "no"]
    assert "| m-big | 2 | 2 of 2 |" in capsys.readouterr().out


def test_a_request_missing_from_the_cache_is_named(tmp_path):
    run, _ = _run(tmp_path)
    with pytest.raises(KgragError, match=r"request [0-9a-f]+ of question q1 is not in .*empty.sqlite; import"):
        load_script("answer_probe").final_requests(run, LLMCache(tmp_path / "empty.sqlite").path, 2)
    with pytest.raises(KgragError, match=r"nope/predictions.jsonl: not found"):
        load_script("answer_probe").final_requests(tmp_path / "nope", tmp_path / "llm.sqlite", 2)
