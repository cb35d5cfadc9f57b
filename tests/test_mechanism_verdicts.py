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
    # on 2Wiki the held-out KG lacks the questions' own facts by construction, recorded health or not
    assert v["t1.kg_infused_over_vanilla_rag.2wiki"] == NOT_TESTABLE_DATA
    assert "not recorded in the compact results" in out["mechanism"][2]
    assert v["c1.tcr_qf_over_baselines.2wiki.tog"] == "not testable at this model (mechanism ran for 1 of 10)"
    assert v["c1.tcr_qf_over_baselines.musique.tog"] == "confirmed"          # 7 of 10 parsed: healthy
    assert "7 of 10" in out["mechanism"][4]
    changed = changed_verdicts(out)
    assert [c["old"] for c in changed] == ["refuted", "not separable at this n", "confirmed"]


def test_mechanism_record_from_a_trace():
    trace = {"expanded_query": "Who directed  Jaws?", "activation": {"seed_entities": ["Jaws"],
             "activated_entities": ["Jaws", "Steven Spielberg"], "subgraph": ["Jaws | director | Steven Spielberg"]}}
    assert mechanism_record(trace, "who directed Jaws?") == {"qe_changed": False, "subgraph_triples": 1,
                                                             "activated_beyond_seeds": 1}
    # the gold-bearing triple: a gold named by a triple, whole words, normalised as EM is
    assert mechanism_record(trace, "q", ["Steven  Spielberg."])["gold_in_subgraph"] is True
    assert mechanism_record(trace, "q", ["Spiel"])["gold_in_subgraph"] is False
    assert "gold_in_subgraph" not in mechanism_record(trace, "q", ["yes"])     # no triple spells out yes/no
    steps = {"steps": [{"activation": {"subgraph": ["<A | b | C>"]}}, {"activation": {"subgraph": ["<C | d | The Gold>"]}}]}
    assert mechanism_record(steps, "q", ["gold"]) == {"subgraph_triples": 2, "gold_in_subgraph": True}
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


def _kg_run(tmp_path, name, method, kg, mechs, notebook="22_x"):
    folder = tmp_path / notebook / name
    folder.mkdir(parents=True)
    with open(folder / "questions.jsonl", "w", encoding="utf-8") as fh:
        for i, m in enumerate(mechs):
            fh.write(json.dumps({"qid": f"q{i}", "dataset": "2wiki", "issues": [], "mechanism": m}) + "\n")
    return {"folder": str(folder), "notebook": notebook, "method": method, "dataset": "2wiki", "kg": kg, "model": "m"}


def test_a_kg_side_that_ran_for_under_half_its_questions_is_not_testable(tmp_path):
    """KG-Infused RAG's claims read the health of their own KG's runs (the oracle upper bound
    aside): KG-Aug Gen needs a non-empty subgraph, KG-based QE a q' that differs from q and
    comes from a non-empty subgraph."""
    empty, full = {"qe_changed": False, "subgraph_triples": 0}, {"qe_changed": True, "subgraph_triples": 3}
    unchanged = {"qe_changed": False, "subgraph_triples": 3}
    runs = pd.DataFrame([
        _kg_run(tmp_path, "aug", "kg-aug-only", "2wiki-evidence-heldout", [empty] * 6 + [full] * 4),
        _kg_run(tmp_path, "aug-oracle", "kg-aug-only", "2wiki-evidence-oracle", [full] * 10),
        _kg_run(tmp_path, "qe", "kg-qe-only", "2wiki-evidence-heldout", [unchanged] * 7 + [full] * 3),
    ])
    claims = pd.DataFrame([_claim("t3.kg_aug_helps.2wiki", "2wiki", "22_x", "not separable at this n"),
                           _claim("t3.kg_qe_helps.2wiki", "2wiki", "22_x", "confirmed")])
    health = health_table(runs)
    out = apply_testability(claims, runs, health)
    v = dict(zip(out["claim"], out["verdict"]))
    assert v["t3.kg_aug_helps.2wiki"] == "not testable at this model (mechanism ran for 4 of 10)"
    assert v["t3.kg_qe_helps.2wiki"] == "not testable at this model (mechanism ran for 3 of 10)"
    qe = health[health["method"] == "kg-qe-only"].iloc[0]
    assert qe["ran"] == "3 of 10" and qe["q' != q"] == "3 of 10"


def test_self_ask_steps_count_their_subgraphs():
    trace = {"steps": [{"activation": {"subgraph": []}}, {"activation": {"subgraph": ["a | r | b", "c | r | d"]}}]}
    assert mechanism_record(trace, "q") == {"subgraph_triples": 2}
    assert mechanism_record({"steps": [{"activation": {"subgraph": []}}]}, "q") == {"subgraph_triples": 0}


def test_committed_kg_infused_2wiki_claims_read_their_mechanism():
    """The committed reference's KG-Infused runs carry per-question mechanism records (replayed
    from the committed answers by scripts/backfill_mechanism.py): on 2Wiki the KG side ran for
    fewer than half the questions, so no statistical verdict stands for those claims."""
    from kgrag_lib.paths import REPO_ROOT

    report = (REPO_ROOT / "results" / "reference" / "REPORT.md").read_text(encoding="utf-8")
    for cid in ("t1.kg_infused_over_vanilla_rag.2wiki", "t3.kg_aug_helps.2wiki", "t3.kg_qe_helps.2wiki",
                "f2.round2_over_round1.2wiki", "t4.kg_qe_recall.2wiki"):
        row = next(ln for ln in report.splitlines() if ln.startswith("| ") and f" {cid} " in ln)
        assert "not testable at this model (mechanism ran for" in row, cid


def test_sa_rag_activation_beyond_its_seeds_in_every_step():
    step = {"retriever": "sa", "seeds": [{"entity": "A"}, {"entity": "B"}], "activation": {"A": 1.0, "B": 1.0, "C": 0.6}}
    still = {"retriever": "sa", "seeds": [{"entity": "A"}], "activation": {"A": 1.0}}
    assert mechanism_record({"retrieval": still}, "q") == {"activated_beyond_seeds": 0}
    assert mechanism_record({"steps": [{"retrieval": step}, {"retrieval": still}]}, "q") == {"activated_beyond_seeds": 1}
    assert mechanism_record({"subquestions": [{"retrieval": step}], "final_retrieval": step}, "q") == \
        {"activated_beyond_seeds": 2}


def test_sa_rag_claims_read_whether_activation_spread(tmp_path):
    spread, stuck = {"activated_beyond_seeds": 3}, {"activated_beyond_seeds": 0}
    runs = pd.DataFrame([_kg_run(tmp_path, "sa", "sa-rag", "text:2wiki", [stuck] * 8 + [spread] * 2, "31_x"),
                         _kg_run(tmp_path, "sa2", "sa-rag", "text:musique", [spread] * 6 + [stuck] * 4, "31_y")])
    runs.loc[1, "dataset"] = "musique"
    claims = pd.DataFrame([_claim("c1.sa_rag_over_iterative.2wiki.qd-rag@f1", "2wiki", "31_x", "not separable at this n"),
                           _claim("c1.sa_rag_over_iterative.musique.qd-rag@f1", "musique", "31_y", "confirmed")])
    out = apply_testability(claims, runs, health_table(runs))
    assert list(out["verdict"]) == ["not testable at this model (mechanism ran for 2 of 10)", "confirmed"]


def _gold_run(tmp_path, name, kg, mechs, notebook="21_z"):
    folder = tmp_path / notebook / name
    folder.mkdir(parents=True)
    with open(folder / "questions.jsonl", "w", encoding="utf-8") as fh:
        for i, m in enumerate(mechs):
            fh.write(json.dumps({"qid": f"q{i}", "dataset": "2wiki", "issues": [], "mechanism": m}) + "\n")
    return {"folder": str(folder), "notebook": notebook, "method": "kg-infused", "dataset": "2wiki", "kg": kg, "model": "m"}


def test_a_kg_that_never_names_an_answer_cannot_test_the_claim_its_oracle_twin_can(tmp_path):
    ran_no_gold = [{"qe_changed": True, "subgraph_triples": 3, "gold_in_subgraph": False}] * 4
    ran_gold = [{"qe_changed": True, "subgraph_triples": 3, "gold_in_subgraph": g} for g in (True, False, True, False)]
    runs = pd.DataFrame([_gold_run(tmp_path, "held", "2wiki-evidence-heldout", ran_no_gold),
                         _gold_run(tmp_path, "oracle", "2wiki-evidence-oracle", ran_gold)])
    health = health_table(runs)
    assert sorted(health["gold answer in subgraph"]) == ["0 of 4", "2 of 4"]
    claims = pd.DataFrame([_claim("t1.kg_infused_over_vanilla_rag.2wiki", "2wiki", "21_z", "confirmed"),
                           _claim("t1.kg_infused_over_vanilla_rag.2wiki@2wiki-evidence-oracle", "2wiki", "21_z", "confirmed")])
    out = apply_testability(claims, runs, health)
    assert list(out["verdict"]) == [NOT_TESTABLE_DATA, "confirmed"]
    assert "gold answer in subgraph 0 of 4" in out["mechanism"][0] and "2wiki-evidence-heldout" in out["mechanism"][0]
    assert out["mechanism"][1] == "kg-infused: subgraph non-empty 4 of 4, gold answer in subgraph 2 of 4"   # its own KG's


def test_a_held_out_kg_cannot_test_the_claim_even_when_a_subgraph_names_an_answer(tmp_path):
    """The held-out KG lacks the questions' own facts by construction; one answer met in another
    question's fact must not turn its claims into a test of the paper (as 1 of 87 did at n = 100)."""
    one_gold = [{"qe_changed": True, "subgraph_triples": 3, "gold_in_subgraph": g} for g in (True, False, False, False)]
    runs = pd.DataFrame([_gold_run(tmp_path, "held", "2wiki-evidence-heldout", one_gold),
                         _gold_run(tmp_path, "other", "my-own-kg", one_gold, notebook="21_w")])
    claims = pd.DataFrame([_claim("t1.kg_infused_over_vanilla_rag.2wiki", "2wiki", "21_z", "confirmed"),
                           _claim("t1.kg_infused_over_vanilla_rag.2wiki", "2wiki", "21_w", "confirmed")])
    out = apply_testability(claims, runs, health_table(runs))
    assert list(out["verdict"]) == [NOT_TESTABLE_DATA, "confirmed"]   # a KG not known as held out keeps its verdict
    assert "gold answer in subgraph 1 of 4" in out["mechanism"][0]
    assert "2wiki-evidence-heldout is built without the evaluated questions' evidence rows" in out["mechanism"][0]
    assert list(out["statistical verdict"]) == ["confirmed", "confirmed"]


def test_claims_on_a_second_kg_read_its_kg_sides_only(tmp_path):
    from types import SimpleNamespace

    from kgrag_lib.report.kg_infused.tables import check_claims

    def cell(method, scores):
        rows = [{"qid": f"q{i}", "dataset": "2wiki", "prediction": "x" if s else "y", "answers": ["x"]}
                for i, s in enumerate(scores)]
        return SimpleNamespace(dataset="2wiki", run=SimpleNamespace(method=method, cfg={"rounds": 2}), rows=rows)

    base = SimpleNamespace(cells=[cell("vanilla-rag", [1, 0] * 10), cell("kg-infused", [0] * 20)])
    oracle = SimpleNamespace(cells=[cell("kg-infused", [1] * 20)])
    claim = ("t1.kg_infused_over_vanilla_rag.2wiki", "Table 1", "2wiki", ("kg-infused", 2), ">", ("vanilla-rag", None),
             "avg", "q")
    main = check_claims(base, [claim])
    on_oracle = check_claims(base, [claim], kg_report=oracle, kg="2wiki-evidence-oracle")
    assert main["ours_a"][0] == 0 and on_oracle["ours_a"][0] == 100 and on_oracle["ours_b"][0] == main["ours_b"][0] == 50
    assert on_oracle["claim"][0] == "t1.kg_infused_over_vanilla_rag.2wiki@2wiki-evidence-oracle"
    no_kg = ("t1.retrieval_over_nor.2wiki", "Table 1", "2wiki", ("vanilla-rag", None), ">", ("nor", None), "avg", "q")
    assert list(check_claims(base, [claim, no_kg], kg_report=oracle, kg="o")["claim"]) == [f"{claim[0]}@o"]


def test_a_tcr_claim_reads_the_parse_health_of_its_own_sides_baselines_included(tmp_path):
    """c2.tcr_helps compares TOG+TCR with ToG: a TCR-AF run beside them that parsed 1 of 10 does
    not make it untestable; a baseline answering through TCR-QF's parser (Naive RAG) is checked
    like TCR-QF itself (issue 41, item 3)."""
    no_final = ["answer: no 'Final Answer:' line; took the last line"]
    runs = pd.DataFrame([
        _run(tmp_path, "tt", "tog-tcr", "2wiki", "tcr:2wiki", [no_final] * 3 + [[]] * 7, "42_x"),
        _run(tmp_path, "tog", "tog", "2wiki", "tcr:2wiki", [no_final] * 2 + [[]] * 8, "42_x"),
        _run(tmp_path, "af", "tcr-af", "2wiki", "tcr:2wiki", [no_final] * 9 + [[]], "42_x"),
        _run(tmp_path, "qf", "tcr-qf", "2wiki", "tcr:2wiki", [[]] * 10, "41_x"),
        _run(tmp_path, "nr", "tcr-naive-rag", "2wiki", "tcr:2wiki", [no_final] * 8 + [[]] * 2, "41_x"),
    ])
    claims = pd.DataFrame([
        _claim("c2.tcr_helps.2wiki", "2wiki", "42_x", "not separable at this n"),
        _claim("c2.tcr_helps.2wiki@f1", "2wiki", "42_x", "not separable at this n"),
        _claim("c3.qf_over_af.2wiki", "2wiki", "42_x", "not separable at this n"),
        _claim("c1.tcr_qf_over_baselines.2wiki.tcr-naive-rag", "2wiki", "41_x", "confirmed"),
    ])
    health = health_table(runs)
    assert set(health["method"]) >= {"tcr-naive-rag", "tcr-af"}
    out = apply_testability(claims, runs, health)
    v = dict(zip(out["claim"], out["verdict"]))
    assert v["c2.tcr_helps.2wiki"] == v["c2.tcr_helps.2wiki@f1"] == "not separable at this n"
    assert "7 of 10 (tog-tcr" in out["mechanism"][0]
    assert v["c3.qf_over_af.2wiki"] == "not testable at this model (mechanism ran for 1 of 10)"
    assert v["c1.tcr_qf_over_baselines.2wiki.tcr-naive-rag"] == "not testable at this model (mechanism ran for 2 of 10)"
