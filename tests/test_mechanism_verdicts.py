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
