"""Verdicts only where a run can test the claim: off-domain KG and dead mechanism read 'not
testable', a healthy mechanism keeps its statistical verdict (kgrag_lib.report.mechanism)."""

from __future__ import annotations

import json

import pandas as pd

from kgrag_lib.report.mechanism import (NOT_TESTABLE_DATA, apply_testability, changed_verdicts, health_table,
                                        mechanism_record)


def _run(tmp_path, name, method, dataset, kg, issues_per_q, notebook):
    folder = tmp_path / notebook / name
    folder.mkdir(parents=True)
    with open(folder / "questions.jsonl", "w", encoding="utf-8") as fh:
        for i, issues in enumerate(issues_per_q):
            fh.write(json.dumps({"qid": f"q{i}", "dataset": dataset, "issues": issues}) + "\n")
    return {"folder": str(folder), "notebook": notebook, "method": method, "dataset": dataset, "kg": kg,
            "model": "m"}


def _claim(cid, dataset, notebook, verdict):
    return {"claim": cid, "dataset": dataset, "notebook": notebook, "verdict": verdict, "metric": "avg",
            "statement": "A > B"}


def test_off_domain_dead_and_healthy(tmp_path):
    no_final = ["answer: no 'Final Answer:' line; took the last line"]
    runs = pd.DataFrame([
        _run(tmp_path, "kgi", "kg-infused", "hotpotqa", "2wiki-evidence-heldout", [[]] * 4, "21_x"),
        _run(tmp_path, "vr", "vanilla-rag", "hotpotqa", "2wiki-evidence-heldout", [[]] * 4, "21_x"),
        _run(tmp_path, "kgi2", "kg-infused", "2wiki", "2wiki-evidence-heldout", [[]] * 4, "21_x"),
        _run(tmp_path, "tcr", "tcr-qf", "2wiki", "tcr:2wiki", [no_final] * 9 + [[]], "41_x"),
        _run(tmp_path, "tcr", "tcr-qf", "musique", "tcr:musique", [no_final] * 3 + [[]] * 7, "41_y"),
    ])
    claims = pd.DataFrame([
        _claim("t1.kg_infused_over_vanilla_rag.hotpotqa", "hotpotqa", "21_x", "refuted"),
        _claim("t1.retrieval_over_nor.hotpotqa", "hotpotqa", "21_x", "confirmed"),    # no KG side: kept
        _claim("t1.kg_infused_over_vanilla_rag.2wiki", "2wiki", "21_x", "not separable at this n"),
        _claim("c1.tcr_qf_over_baselines.2wiki.tog", "2wiki", "41_x", "confirmed"),
        _claim("c1.tcr_qf_over_baselines.musique.tog", "musique", "41_y", "confirmed"),
    ])
    out = apply_testability(claims, runs, health_table(runs))
    v = dict(zip(out["claim"], out["verdict"]))
    assert v["t1.kg_infused_over_vanilla_rag.hotpotqa"] == NOT_TESTABLE_DATA
    assert "holds facts of 2wiki only" in out["mechanism"][0]
    assert v["t1.retrieval_over_nor.hotpotqa"] == "confirmed"
    assert v["t1.kg_infused_over_vanilla_rag.2wiki"] == "not separable at this n"
    assert "not recorded in the compact results" in out["mechanism"][2]
    assert v["c1.tcr_qf_over_baselines.2wiki.tog"] == "not testable at this model (mechanism ran for 1 of 10)"
    assert v["c1.tcr_qf_over_baselines.musique.tog"] == "confirmed"          # 7 of 10 parsed: healthy
    assert "7 of 10" in out["mechanism"][4]
    changed = changed_verdicts(out)
    assert [c["old"] for c in changed] == ["refuted", "confirmed"]


def test_mechanism_record_from_a_trace():
    trace = {"expanded_query": "Who directed  Jaws?", "activation": {"seed_entities": ["Jaws"],
             "activated_entities": ["Jaws", "Steven Spielberg"], "subgraph": ["Jaws | director | Steven Spielberg"]}}
    assert mechanism_record(trace, "who directed Jaws?") == {"qe_changed": False, "subgraph_triples": 1,
                                                             "activated_beyond_seeds": 1}
    assert mechanism_record({"kg_added": [1, 2]}) == {"feedback_triples": 2}
    assert mechanism_record({}) == {}


def test_committed_report_has_no_verdict_on_an_off_domain_kg():
    from kgrag_lib.paths import REPO_ROOT

    report = (REPO_ROOT / "results" / "reference" / "REPORT.md").read_text(encoding="utf-8")
    rows = [ln for ln in report.splitlines() if ln.startswith("| ") and ".hotpotqa" in ln and "kg_infused_over" in ln]
    assert rows and all("not testable with the data here" in ln for ln in rows)
    assert "## Mechanism health" in report


def test_figure_captions_from_mechanism_and_judge_health():
    """The TCR-QF caption names each run that parsed a Final Answer for fewer than half of its
    questions, with its count; the correctness caption appears only for a judge that failed."""
    import pandas as pd

    from kgrag_lib.report import mechanism as M

    health = pd.DataFrame([{"method": "tcr-qf", "dataset": "2wiki", "ran": "0 of 10", "n": 10},
                           {"method": "tog", "dataset": "2wiki", "ran": "8 of 10", "n": 10}])
    note = M.tcr_parse_note(health, "tiny-model", {"2wiki": "2Wiki"})
    assert note.startswith(M.NOT_TESTABLE_MODEL) and "2Wiki: tcr-qf 0 of 10" in note and "tog" not in note
    assert M.tcr_parse_note(health.assign(ran="9 of 10"), "tiny-model") == ""
    judges = M.judge_health({"31": [{"dataset": "musique", "judge_model": "j", "judge_informative": False,
                                     "judge_gold_accepted": 100.0, "judge_wrong_accepted": 90.0}]})
    assert "accepted 100% of the gold answers and 90% of other questions' answers" in M.judge_note(judges)
    assert M.judge_note(judges.assign(**{"controls passed": True})) == ""
