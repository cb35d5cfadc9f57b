"""KG-Infused RAG plug-in tables (Table 2: Self-RAG, Table 21: Self-Ask): the transcription,
the layouts from synthetic run rows and grids, intervals and the paired claims."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.eval.summary import summarize
from kgrag_lib.grid import Cell, GridReport, GridRun
from kgrag_lib.report.kg_infused import paper_numbers
from kgrag_lib.report.kg_infused import plugins as PL
from kgrag_lib.report.kg_infused.tables import Setting


# ------------------------------------------------------------------ the transcription
@pytest.mark.parametrize("table", [paper_numbers.TABLE2, paper_numbers.TABLE21], ids=["table2", "table21"])
def test_paper_avg_is_mean_of_acc_f1_em(table):
    for label, per in table.items():
        for ds in paper_numbers.DATASETS[:4]:
            v = per[ds]
            assert abs(v["avg"] - (v["acc"] + v["f1"] + v["em"]) / 3) <= 0.1 + 1e-9, (label, ds)
        assert set(per["strategyqa"]) == {"acc"}


def test_table2_matches_the_text_of_section_5_2():
    """§5.2: 2-round Avg gains of 5.1 to 16.9 on four datasets, HotpotQA down 0.8."""
    base, two = paper_numbers.TABLE2["Self-RAG (selfrag-llama2-7b)"], paper_numbers.TABLE2["+ KG-Infused RAG (w/ 2-Round)"]
    gains = {d: round(two[d]["avg"] - base[d]["avg"], 1) for d in paper_numbers.DATASETS[:4]}
    gains["strategyqa"] = round(two["strategyqa"]["acc"] - base["strategyqa"]["acc"], 1)
    assert gains["hotpotqa"] == -0.8
    assert min(v for d, v in gains.items() if d != "hotpotqa") == 5.1 and max(gains.values()) == 16.9
    assert list(paper_numbers.TABLE21) == ["Self-Ask"] + [f"+ KG-Infused RAG (w/ {k}-Round)" for k in (1, 2, 3)]
    assert paper_numbers.TABLE21["Self-Ask"]["hotpotqa"]["avg"] > max(paper_numbers.TABLE21[r]["hotpotqa"]["avg"] for r in list(paper_numbers.TABLE21)[1:])


def test_plugin_claims_follow_the_papers_numbers():
    by = {c[0]: c for c in paper_numbers.PLUGIN_CLAIMS}
    assert len(by) == 2 * 5 + 3 * 5
    assert by["table2.self-rag-kg-infused.r2.bamboogle"][4] == ">"
    assert by["table2.self-rag-kg-infused.r2.hotpotqa"][4] == "~"            # -0.8: within a point
    assert by["table21.self-ask-kg-infused.r1.hotpotqa"][4] == "<"           # -2.8
    c = by["table21.self-ask-kg-infused.r2.strategyqa"]
    assert c[1:7] == ("Table 21", "strategyqa", ("self-ask-kg-infused", 2), ">", ("self-ask", None), "avg")
    assert c[-1].endswith("+ KG-Infused RAG (w/ 2-Round) 69.2 vs Self-Ask 65.6 (Acc, +3.6)")


# ------------------------------------------------------------------ labels and rows
def test_labels_and_table_lookup():
    assert PL.plugin_label("self-ask") == "Self-Ask"
    assert PL.plugin_label("self-ask-kg-infused", 2) == "+ KG-Infused RAG (w/ 2-Round)"
    assert PL.plugin_label("self-rag-kg-infused", 3, full=True) == "Self-RAG + KG-Infused RAG (w/ 3-Round)"
    assert PL.plugin_label("self-rag-kg-infused") == "+ KG-Infused RAG"
    assert PL.table_spec("Table 21").base == "self-ask" and PL.table_spec(2).plugin == "self-rag-kg-infused"
    with pytest.raises(ConfigError, match="2 \\(Self-RAG\\) or 21"):
        PL.table_spec(3)
    with pytest.raises(ConfigError, match="self-ask"):
        PL.plugin_label("kg-infused")


def _metrics(acc, f1=None, em=None, n=10):
    return {"acc": acc, "f1": acc if f1 is None else f1, "em": acc if em is None else em, "n": n, "failed": 1,
            "acc_ci95": [acc - 20, acc + 20], "f1_ci95": [0.0, 50.0], "em_ci95": [1.0, 2.0],
            "cost_per_question": {"llm_calls": 7.0, "seconds": 3.0}}


SETTING = Setting("qwen2.5-coder-0.5b-q4", "2wiki-evidence-heldout", n={"2wiki": 10, "strategyqa": 10})


def _rows():
    return [
        PL.plugin_row("self-ask", "2wiki", _metrics(40.0, 30.0, 20.0), setting=SETTING),
        PL.plugin_row("self-ask-kg-infused", "2wiki", _metrics(50.0), rounds=2, setting=SETTING),
        PL.plugin_row("self-ask-kg-infused", "2wiki", _metrics(45.0), rounds=1, setting=SETTING),
        PL.plugin_row("self-ask", "strategyqa", _metrics(60.0), setting=SETTING),
        PL.plugin_row("self-ask-kg-infused", "strategyqa", _metrics(70.0), rounds=1, setting=SETTING),
        PL.plugin_row("self-rag", "2wiki", _metrics(10.0), setting=SETTING),
    ]


def test_plugin_row_fields():
    base, kg = _rows()[:2]
    assert base["label"] == "Self-Ask" and base["rounds"] is None and base["table"] == "Table 21"
    assert kg["label"] == "+ KG-Infused RAG (w/ 2-Round)" and kg["rounds"] == 2
    assert kg["variant"] == "self-ask-kg-infused"
    assert base["avg"] == pytest.approx(30.0) and base["acc_ci95"] == [20.0, 60.0] and base["model"] == SETTING.model
    assert PL.plugin_row("self-ask", "2wiki", _metrics(1.0), rounds=3)["rounds"] is None
    with pytest.raises(ConfigError, match="not a plug-in"):
        PL.plugin_row("vanilla-rag", "2wiki", _metrics(1.0))


def test_ours_table_in_the_papers_layout_with_deltas():
    ours = PL.ours_table(_rows(), 21)
    assert list(ours.index) == ["Self-Ask", "+ KG-Infused RAG (w/ 1-Round)", "+ KG-Infused RAG (w/ 2-Round)"]
    assert ours.loc["Self-Ask", ("2WikiMQA", "Avg")] == pytest.approx(30.0)
    assert ours.loc["+ KG-Infused RAG (w/ 1-Round)", ("StrategyQA", "Acc")] == 70.0
    assert math.isnan(ours.loc["+ KG-Infused RAG (w/ 2-Round)", ("StrategyQA", "Acc")])   # not run
    assert ("StrategyQA", "F1") not in ours.columns and ("HotpotQA", "Acc") not in ours.columns
    d = PL.with_plugin_deltas(ours, 21)
    assert d.loc["Δ + KG-Infused RAG (w/ 2-Round) → Self-Ask", ("2WikiMQA", "Avg")] == pytest.approx(20.0)
    # the Self-RAG row belongs to Table 2 only
    t2 = PL.ours_table(_rows(), 2)
    assert list(t2.index) == ["Self-RAG"] and t2.loc["Self-RAG", ("2WikiMQA", "Acc")] == 10.0


def test_paper_tables_and_side_by_side_name_the_models():
    paper = PL.paper_table(2)
    assert list(paper.index) == ["Self-RAG", "+ KG-Infused RAG (w/ 2-Round)", "+ KG-Infused RAG (w/ 3-Round)"]
    assert paper.loc["Self-RAG", ("Bamboogle", "F1")] == 17.3
    assert PL.paper_table(21).loc["+ KG-Infused RAG (w/ 3-Round)", ("MuSiQue", "EM")] == 9.2
    both = PL.plugin_side_by_side(_rows(), 21, model="qwen2.5-coder-0.5b-q4")
    sources = list(dict.fromkeys(both.index.get_level_values(0)))
    assert sources[0] == "ours (qwen2.5-coder-0.5b-q4)"
    assert "Qwen2.5-7B" in sources[1] and "DPO-trained LLaMA3.1-8B" in sources[1]
    assert both.loc[(sources[1], "Self-Ask"), ("2WikiMQA", "Acc")] == 39.2
    assert both.loc[(sources[1], "+ KG-Infused RAG (w/ 1-Round)"), ("StrategyQA", "Acc")] == 69.6
    assert list(both.columns) == list(PL.ours_table(_rows(), 21).columns)
    cap = PL.plugin_caption(2, SETTING)
    assert "qwen2.5-coder-0.5b-q4" in cap and "selfrag-llama2-7b" in cap and "Table 2 layout" in cap
    assert "not Wikipedia-2018" in cap and "Wikipedia-2018 (DPR" in cap


def test_interval_table_shows_value_and_interval():
    tab = PL.interval_table(_rows(), "21")
    assert tab.loc["Self-Ask", ("2WikiMQA", "Acc")] == "40.0 [20, 60]"
    assert tab.loc["Self-Ask", ("2WikiMQA", "Avg")] == "30.0"       # no interval of its own
    assert tab.loc["+ KG-Infused RAG (w/ 2-Round)", ("StrategyQA", "Acc")] == "–"


# ------------------------------------------------------------------ grids and claims
def _cell(run, answers, dataset="2wiki", rounds_in_trace=None):
    trace = {"config": {"rounds": rounds_in_trace}} if rounds_in_trace else {}
    rows = [{"qid": f"q{i}", "question": "?", "prediction": a, "answers": ["Ann"], "dataset": dataset, "trace": trace,
             "requests": ["r1", "r2"], "cost": {"llm_requests": 2}}
            for i, a in enumerate(answers)]
    return Cell(run, dataset, Path("."), summarize(rows), rows, sent=0)


def test_grid_rows_and_paired_claims():
    base, kg1 = GridRun.of("self-ask"), GridRun.of("self-ask-kg-infused", rounds=1)
    kg_default = GridRun.of("self-ask-kg-infused")           # rounds from the profile: read from the traces
    other = GridRun.of("vanilla-rag")
    report = GridReport([
        _cell(base, ["Bob"] * 40),
        _cell(kg1, ["Ann"] * 20 + ["Bob"] * 20),
        _cell(kg_default, ["Bob"] * 37 + ["Ann"] * 3, rounds_in_trace=2),
        _cell(other, ["Ann"] * 40),
    ], sent=0)
    rows = PL.plugin_grid_rows(report, [base, kg1, kg_default, other], SETTING)
    assert [r["label"] for r in rows] == ["Self-Ask", "+ KG-Infused RAG (w/ 1-Round)", "+ KG-Infused RAG (w/ 2-Round)"]
    assert rows[1]["acc"] == 50.0 and rows[1]["config"] == "self-ask-kg-infused[rounds=1]"
    assert rows[1]["requests_per_q"] == 2
    out = PL.check_plugin_claims(report, 21).set_index("claim")
    assert len(out) == 15 and set(out["table"]) == {"Table 21"}
    c = out.loc["table21.self-ask-kg-infused.r1.2wiki"]   # paper: '>' (+3.6)
    assert c["verdict"] == "confirmed" and c["n_pairs"] == 40 and c["diff"] == pytest.approx(50.0)
    assert c["statement"] == "Self-Ask + KG-Infused RAG (w/ 1-Round) > Self-Ask"
    assert out.loc["table21.self-ask-kg-infused.r2.musique", "verdict"] == "not run"
    assert out.loc["table21.self-ask-kg-infused.r3.2wiki", "verdict"] == "not run"
    r2 = PL.check_plugin_claims(report).set_index("claim").loc["table21.self-ask-kg-infused.r2.2wiki"]
    assert r2["n_pairs"] == 40 and r2["diff"] == pytest.approx(7.5)   # paper '~' (+0.9)
    assert r2["verdict"] == "not separable at this n"      # 3 of 40 differ: cannot tell a tie either
    assert len(PL.check_plugin_claims(report)) == 25
    assert (PL.check_plugin_claims(report, 2)["verdict"] == "not run").all()


def test_a_claim_not_separable_at_this_n():
    base, kg = GridRun.of("self-rag"), GridRun.of("self-rag-kg-infused", rounds=2)
    report = GridReport([_cell(base, ["Bob"] * 40), _cell(kg, ["Ann"] * 3 + ["Bob"] * 37)], sent=0)
    c = PL.check_plugin_claims(report, 2).set_index("claim").loc["table2.self-rag-kg-infused.r2.2wiki"]
    assert c["verdict"] == "not separable at this n" and c["diff"] == pytest.approx(7.5) and c["p_value"] >= 0.05
