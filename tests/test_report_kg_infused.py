"""KG-Infused RAG report helpers: paper transcription, table layouts, Recall@6 from traces,
Table 5, Figure 2 and the case-study renderings."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from kgrag_lib.report import kg_infused as kg_infused_report
from kgrag_lib.report.kg_infused import paper_numbers


# ------------------------------------------------------------------ paper numbers
def _all_rows():
    for model, rows in paper_numbers.TABLE1.items():
        for label, per in rows.items():
            yield f"Table 1 {model} {label}", per
    for label, per in paper_numbers.TABLE3.items():
        yield f"Table 3 {label}", per


@pytest.mark.parametrize("name,per", list(_all_rows()), ids=lambda x: x if isinstance(x, str) else "")
def test_paper_avg_is_mean_of_acc_f1_em(name, per):
    """Catches transcription slips: every printed Avg is the mean of Acc, F1, EM (the paper
    averages unrounded scores, so up to 0.1 off the mean of the printed ones)."""
    for ds in paper_numbers.DATASETS[:4]:
        v = per[ds]
        assert abs(v["avg"] - (v["acc"] + v["f1"] + v["em"]) / 3) <= 0.1 + 1e-9, (name, ds, v)
    assert set(per["strategyqa"]) == {"acc"}


def test_paper_delta_rows_recompute_from_method_rows():
    for model, deltas in paper_numbers.TABLE1_DELTAS.items():
        df = kg_infused_report.paper_table1(model)
        for label, per in deltas.items():
            got = kg_infused_report.delta(df, label, "Vanilla RAG")
            for ds, vals in per.items():
                for m, v in vals.items():
                    col = (paper_numbers.DATASET_LABELS[ds], kg_infused_report.METRIC_LABELS[m])
                    assert got[col] == pytest.approx(v, abs=0.051), (model, label, col)


def test_table3_shares_rows_with_table1():
    llama = paper_numbers.TABLE1["LLaMA3.1-8B"]
    assert paper_numbers.TABLE3["Vanilla RAG (LLaMA3.1-8B)"] == llama["Vanilla RAG"]
    assert paper_numbers.TABLE3["+ Both (w/ 2-Round)"] == llama["+DPO (w/ 2-Round)"]


def test_table5_and_table4_agree_with_the_text():
    orig, kept = paper_numbers.TABLE5["Wikidata5M"], paper_numbers.TABLE5["Wikidata5M-KG"]
    assert kg_infused_report.removed_pct(orig, kept) == pytest.approx(paper_numbers.TABLE5_REMOVED_PCT, abs=0.006)
    gains = [paper_numbers.TABLE4[row][d] - paper_numbers.TABLE4["Vanilla RAG"][d]
             for row in ("+ KG-Based QE (1-Round)", "+ KG-Based QE (2-Round)") for d in paper_numbers.TABLE4["Vanilla RAG"]]
    assert min(gains) == pytest.approx(4.0) and max(gains) == pytest.approx(8.4)  # §5.4 "4.0% to 8.4%"


def test_figure2_has_no_numbers():
    assert not any(isinstance(getattr(paper_numbers, n), (int, float)) for n in dir(paper_numbers) if n.startswith("FIGURE2"))
    assert all(isinstance(s, str) for s in paper_numbers.FIGURE2_FINDINGS)


# ------------------------------------------------------------------ scores and layouts
def test_scores_picks_paper_metrics_and_averages():
    m = {"em": 20.0, "f1": 35.0, "acc": 50.0, "hit1": 1.0, "n": 3}
    assert kg_infused_report.scores(m, "hotpotqa") == {"acc": 50.0, "f1": 35.0, "em": 20.0, "avg": 35.0}
    assert kg_infused_report.scores(m, "strategyqa") == {"acc": 50.0}
    with pytest.raises(KeyError, match="f1"):
        kg_infused_report.scores({"acc": 1.0, "em": 1.0}, "musique")


def _row(variant, dataset, acc, f1=None, em=None, rounds=None):
    m = {"acc": acc, "f1": f1 if f1 is not None else acc, "em": em if em is not None else acc, "n": 2,
         "cost_per_question": {"llm_calls": 4.0, "seconds": 2.5}}
    return kg_infused_report.result_row(variant, dataset, m, rounds=rounds,
                        setting=kg_infused_report.Setting("tiny-model", "2wiki-evidence-heldout", n={dataset: 2}))


def test_layout_and_side_by_side():
    rows = [_row("vanilla-rag", "hotpotqa", 50.0, 40.0, 30.0), _row("kg-infused", "hotpotqa", 60.0, rounds=2),
            _row("vanilla-rag", "strategyqa", 100.0), _row("kg-infused", "strategyqa", 50.0, rounds=2)]
    assert rows[1]["label"] == "KG-Infused RAG (w/ 2-Round)" and rows[0]["rounds"] is None
    assert rows[0]["llm_calls_per_q"] == 4.0 and rows[0]["kg"] == "2wiki-evidence-heldout"
    ours = kg_infused_report.layout(rows)
    assert list(ours.index) == ["Vanilla RAG", "KG-Infused RAG (w/ 2-Round)"]
    assert ours.loc["Vanilla RAG", ("HotpotQA", "Avg")] == pytest.approx(40.0)
    assert ("StrategyQA", "F1") not in ours.columns and ours.loc["Vanilla RAG", ("StrategyQA", "Acc")] == 100.0
    paper = kg_infused_report.paper_table1("Qwen2.5-7B")
    both = kg_infused_report.side_by_side(ours, paper)
    assert both.loc[("paper", "Vanilla RAG"), ("HotpotQA", "Acc")] == 35.0
    assert both.loc[("paper", "KG-Infused RAG (w/ 2-Round)"), ("StrategyQA", "Acc")] == 68.2
    assert list(both.columns) == list(ours.columns)  # only the datasets we ran
    d = kg_infused_report.delta(ours, "KG-Infused RAG (w/ 2-Round)", "Vanilla RAG")
    assert d[("HotpotQA", "EM")] == pytest.approx(30.0)
    with pytest.raises(KeyError):
        kg_infused_report.paper_table1("GPT-5")


def test_layout_leaves_missing_cells_empty():
    df = kg_infused_report.layout([_row("nor", "musique", 10.0)], datasets=["musique", "bamboogle"])
    assert math.isnan(df.loc["NoR", ("Bamboogle", "Acc")])


def test_setting_caption_names_model_kg_corpus_and_sizes():
    cap = kg_infused_report.Setting("qwen-0.5b", "2wiki-evidence-heldout", n={"hotpotqa": 3, "2wiki": 2}, profile="cpu-smoke").caption("Table 1")
    assert "qwen-0.5b" in cap and "not Wikidata5M-KG" in cap and "not Wikipedia-2018" in cap
    assert "HotpotQA n=3" in cap and "2WikiMQA n=2" in cap and "cpu-smoke" in cap


def test_rounds_frame_and_plot():
    rows = [_row(v, d, 10.0 * r + i, rounds=r) for i, v in enumerate(kg_infused_report.ROUND_VARIANTS)
            for d in ("hotpotqa", "strategyqa") for r in (1, 2, 3)]
    base = [_row("vanilla-rag", "hotpotqa", 5.0)]
    tab = kg_infused_report.rounds_frame(rows)
    assert tab.loc[("hotpotqa", "kg-qe-only"), 3] == pytest.approx(31.0)
    assert list(tab.columns) == [1, 2, 3]
    fig = kg_infused_report.plot_rounds(rows, baselines=base)
    ax0, ax1 = fig.axes[:2]
    assert len(ax0.lines) == 4 and len(ax1.lines) == 3   # 3 variants (+ baseline on HotpotQA)
    assert ax1.get_ylabel() == "Acc (%)"                 # StrategyQA falls back to Acc
    assert list(ax0.lines[0].get_xdata()) == pytest.approx([0.94, 1.94, 2.94])  # offset -0.06
    fig2 = kg_infused_report.plot_side_by_side(kg_infused_report.layout(rows[:1]), kg_infused_report.paper_table3(), match={rows[0]["label"]: "+ Both (w/ 2-Round)"})
    assert fig2.axes


# ------------------------------------------------------------------ Recall@6 (Table 4)
def _pred(qid, dataset, pids, key="passages"):
    trace = {key: [{"pid": p, "from": "q"} for p in pids]} if key == "passages" else {key: pids}
    return {"qid": qid, "dataset": dataset, "trace": trace, "prediction": "", "answers": ["x"]}


def test_recall_table_from_traces():
    support = {"a": ["A1", "A2"], "b": ["B1"], "c": []}
    runs = {
        "Vanilla RAG": [_pred("a", "hotpotqa", ["A1", "x", "y"]), _pred("b", "hotpotqa", ["B1"]),
                        _pred("c", "bamboogle", ["z"])],
        "+ KG-Based QE (1-Round)": [_pred("a", "hotpotqa", ["x", "A2", "A1"], key="retrieved_ids"),
                                    _pred("b", "hotpotqa", ["y"])],
    }
    tab = kg_infused_report.recall_table(runs, support, k=6)
    assert tab.loc["Vanilla RAG", ("HotpotQA", "R@6")] == pytest.approx(75.0)
    assert tab.loc["+ KG-Based QE (1-Round)", ("HotpotQA", "R@6")] == pytest.approx(50.0)
    assert tab.loc["Vanilla RAG", ("HotpotQA", "n")] == 2
    assert tab.loc["Vanilla RAG", ("Bamboogle", "n")] == 0   # no gold passage ids: not scored
    assert math.isnan(tab.loc["Vanilla RAG", ("Bamboogle", "R@6")])
    # k cuts the ranking
    assert kg_infused_report.recall_rows([_pred("a", "hotpotqa", ["x", "A1"])], support, k=1)[0]["recall@1"] == 0.0


def test_recall_on_real_hotpotqa_gold_titles(tmp_path):
    """Real questions: an oracle trace that lists the gold titles scores 100, the shipped
    distractor context scores what its gold coverage says."""
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.paths import data_root

    if not (data_root() / "hotpotqa").exists():
        pytest.skip(f"real data root {data_root()} not present")
    qs = load_questions("hotpotqa", n=20, seed=0)
    support = {q.qid: q.supporting for q in qs}
    oracle = [_pred(q.qid, "hotpotqa", q.supporting) for q in qs]
    ctx = [_pred(q.qid, "hotpotqa", [p.pid for p in q.context]) for q in qs]
    tab = kg_infused_report.recall_table({"oracle": oracle, "context": ctx}, support, k=10)
    assert tab.loc["oracle", ("HotpotQA", "R@10")] == 100.0
    full = np.mean([q.meta["gold_in_context"] for q in qs]) * 100
    assert tab.loc["context", ("HotpotQA", "R@10")] >= full - 1e-9


# ------------------------------------------------------------------ Table 5
def _write(path, lines):
    path.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    return path


def test_table5_frame_with_real_preprocessing(tmp_path):
    from kgrag_lib.data.wikidata5m import preprocess_wikidata5m

    tri = _write(tmp_path / "t.txt", ["Q1\tP1\tQ2", "Q2\tP2\tQ3", "Q3\tP3\tQ1", "Q4\tP1\tQ1"])
    ent = _write(tmp_path / "e.txt", ["Q1\tAlpha", "Q2\tBeta", "Q3\tGamma", "Q4\tDelta"])
    rel = _write(tmp_path / "r.txt", ["P1\tknows", "P2\tlikes", "P3\tfollows"])
    txt = _write(tmp_path / "d.txt", ["Q1\tfirst", "Q2\tsecond", "Q3\tthird"])  # Q4 lacks a description
    _, stats = preprocess_wikidata5m(tri, ent, rel, txt)
    df = kg_infused_report.table5_frame({"fixture": stats})
    assert df.loc[("paper", "Wikidata5M-KG"), "triples"] == 20_987_217
    assert df.loc[("ours", "fixture (input)"), "entities"] == 4
    assert df.loc[("ours", "fixture (kept)"), "triples"] == 3
    assert df.loc[("ours", "fixture (kept)"), "removed % triples"] == pytest.approx(25.0)


# ------------------------------------------------------------------ case study
TRACE = {
    "activation": {
        "seed_entities": ["AAM-N-4 Oriole", "Oriole Records"],
        "rounds": [
            {"round": 1, "selected": ["<AAM-N-4 Oriole | manufacturer | Martin Company>",
                                      "<AAM-N-4 Oriole | instance of | air-to-air missile>"]},
            {"round": 2, "selected": ["<Martin Company | followed by | Martin Marietta>"]},
        ],
    },
    "summary": "Martin Marietta followed the Martin Company.",
    "expanded_query": "History of Martin Marietta after the Martin Company",
    "note": "The Glenn L. Martin Company built the Oriole.",
    "augmented_note": "Martin Marietta succeeded the Martin Company.",
}


def test_subgraph_rounds_and_drawing():
    G = kg_infused_report.subgraph(TRACE)
    assert G.nodes["AAM-N-4 Oriole"]["round"] == 0 and G.nodes["AAM-N-4 Oriole"]["seed"]
    assert G.nodes["Oriole Records"]["round"] == 0          # a seed with nothing selected stays
    assert G.nodes["Martin Company"]["round"] == 1 and G.nodes["Martin Marietta"]["round"] == 2
    assert G.number_of_edges() == 3
    assert G["Martin Company"]["Martin Marietta"][0] == {"relation": "followed by", "round": 2}
    fig = kg_infused_report.draw_subgraph(G, title="case")
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert any("followed by (r2)" in t for t in labels)
    assert kg_infused_report.draw_subgraph(kg_infused_report.subgraph({"rounds": []})).axes  # empty subgraph still draws


def test_subgraph_from_real_activation_trace():
    """The activation loop's own trace format (ActivationResult.to_trace) feeds the drawing."""
    from kgrag_lib.kg import KGStore
    from kgrag_lib.llm.fake import ScriptedLLM
    from kgrag_lib.methods.kg_infused.activation import ActivationSettings, spread_activation
    from kgrag_lib.records import Triple

    kg = KGStore.from_triples([Triple("A", "r1", "B"), Triple("B", "r2", "C"), Triple("C", "r3", "D"),
                               Triple("A", "noise", "Z")])
    llm = ScriptedLLM(["<A | r1 | B>", "<B | r2 | C>"])
    res = spread_activation(kg, llm, "q?", [kg.entity_id("A")], ActivationSettings(rounds=2))
    G = kg_infused_report.subgraph(res.to_trace(kg))
    assert {n: d["round"] for n, d in G.nodes(data=True)} == {"A": 0, "B": 1, "C": 2}


def test_split_triple():
    assert kg_infused_report.split_triple("<a | b c | d>") == ("a", "b c", "d")
    with pytest.raises(ValueError, match="subject"):
        kg_infused_report.split_triple("<a, b, c>")


def test_case_study_markdown_marks_answers():
    runs = {"Vanilla RAG": {"prediction": "CBS", "trace": {"note": "Oriole Records ... CBS"}},
            "KG-Infused RAG": {"prediction": "Martin Marietta Corporation.", "trace": TRACE}}
    md = kg_infused_report.case_study_markdown("Which company followed the company that made AAM-N-4 Oriole?",
                               ["Martin Marietta"], runs)
    assert "- Vanilla RAG: CBS ✗" in md and "- KG-Infused RAG: Martin Marietta Corporation. ✓" in md
    assert "`<Martin Company | followed by | Martin Marietta>`" in md
    assert "after 2-round" in md and "*New query:* History of Martin Marietta" in md
    assert md.endswith("Golden answer: Martin Marietta")


# ------------------------------------------------------------------ grid reports
def _grid_report():
    """A real GridReport of the grid's own types, with hand-made prediction rows and the
    metrics the runner computes from them."""
    from pathlib import Path

    from kgrag_lib.eval.summary import summarize
    from kgrag_lib.grid import Cell, GridReport, GridRun
    from kgrag_lib.records import Prediction, Question

    qs = [Question("a", "Who?", ["Ann"], dataset="2wiki", supporting=["A"]),
          Question("b", "Is it?", ["yes"], dataset="strategyqa")]
    runs = [GridRun.of("vanilla-rag"), GridRun.of("kg-infused", rounds=2)]
    preds = {
        runs[0]: [Prediction("a", "Who?", "Bob", ["Ann"], "vanilla-rag", trace={"passages": [{"pid": "X"}]}),
                  Prediction("b", "Is it?", "no", ["yes"], "vanilla-rag")],
        runs[1]: [Prediction("a", "Who?", "It was Ann.", ["Ann"], "kg-infused",
                             trace={"passages": [{"pid": "A", "from": "q'"}],
                                    "activation": {"rounds": [{"round": 1}], "subgraph": ["<a | r | b>"],
                                                   "stop_reason": "no_new_entities"}}),
                  Prediction("b", "Is it?", "Yes", ["yes"], "kg-infused")],
    }
    requests = {runs[0]: [["n", "a1"], ["n2", "a2"]], runs[1]: [["s", "n", "a3"], ["s2", "n2", "a4"]]}
    cells = []
    for run in runs:
        for q in qs:
            rows = [{**p.to_dict(), "dataset": q.dataset, "requests": k,
                     "cost": {"llm_requests": len(k)}} for p, k in zip(preds[run], requests[run]) if p.qid == q.qid]
            cells.append(Cell(run, q.dataset, Path("."), summarize(rows), rows, sent=1))
    return GridReport(cells, sent=4), runs, qs


def test_grid_rows_counts_answers_and_picks():
    report, runs, qs = _grid_report()
    assert (report.requests, report.distinct, report.n_questions) == (10, 8, 2)
    rows = kg_infused_report.grid_rows(report, runs, kg_infused_report.Setting("m", "2wiki-evidence-heldout"))
    by = {(r["label"], r["dataset"]): r for r in rows}
    kg = by[("KG-Infused RAG (w/ 2-Round)", "2wiki")]
    assert kg["acc"] == 100.0 and kg["em"] == 0.0 and kg["requests_per_q"] == 3.0
    assert kg["config"] == "kg-infused[rounds=2]" and kg["model"] == "m"
    assert set(by[("Vanilla RAG", "strategyqa")]) >= {"acc"} and "f1" not in by[("Vanilla RAG", "strategyqa")]
    assert by[("KG-Infused RAG (w/ 2-Round)", "strategyqa")]["acc"] == 100.0   # yes/no normalized
    c = report.counts_row("test", 1.234)
    assert c["ratio_distinct_to_independent"] == 0.8 and c["sent_this_run"] == 4 and c["wall_s"] == 1.2
    label = runs[1].label
    ans = kg_infused_report.answers_frame(report, runs, qs)
    assert ans.loc[0, label].startswith("✓") and ans.loc[0, "vanilla-rag"].startswith("✗")
    assert kg_infused_report.pick_case(report, qs, label, "vanilla-rag").qid == "a"
    assert kg_infused_report.pick_case(report, qs, label, "vanilla-rag", qid="b").qid == "b"
    depth = kg_infused_report.activation_depth(report, runs)
    assert depth.loc[2, "questions"] == 2 and depth.loc[2, "stopped_early"] == 1
    lab = kg_infused_report.recall_runs(report, runs, qs)
    assert list(lab) == ["Vanilla RAG", "KG-Infused RAG (w/ 2-Round)"]
    src = kg_infused_report.gold_sources(lab, {q.qid: q.supporting for q in qs})
    assert src.loc[("KG-Infused RAG (w/ 2-Round)", "2wiki"), "q'"] == 1


def test_kg_profile_helpers():
    heads = np.array([0, 0, 0, 1, 3])
    assert sorted(kg_infused_report.out_degrees(heads).tolist()) == [1, 1, 3]
    freq = kg_infused_report.relation_frequencies(np.array([1, 1, 0]), ["a", "b"], top=5)
    assert freq.to_dict("list") == {"relation": ["b", "a"], "triples": [2, 1], "share %": [66.67, 33.33]}
    fig = kg_infused_report.plot_out_degrees({"x": heads, "empty": np.array([], dtype=int)})
    assert len(fig.axes[0].lines) == 1
    assert "Wikipedia-2018" in kg_infused_report.corpus_description("wikipedia")
    assert "gold-derived" in kg_infused_report.corpus_description("auto", ["strategyqa"])


def test_kg_infused_claims_are_tested_on_paired_questions():
    from pathlib import Path

    from kgrag_lib.eval.summary import summarize
    from kgrag_lib.grid import Cell, GridReport, GridRun

    def cell(run, answers, supporting_hit=None):
        rows = [{"qid": f"q{i}", "question": "?", "prediction": a, "answers": ["Ann"], "dataset": "2wiki",
                 "trace": {"passages": [{"pid": "A" if supporting_hit and supporting_hit[i] else "X"}]}}
                for i, a in enumerate(answers)]
        return Cell(run, "2wiki", Path("."), summarize(rows), rows, sent=0)

    van, kgi, qe1 = GridRun.of("vanilla-rag"), GridRun.of("kg-infused", rounds=2), GridRun.of("kg-qe-only", rounds=1)
    report = GridReport([cell(van, ["Bob"] * 40, [False] * 40), cell(kgi, ["Ann"] * 20 + ["Bob"] * 20),
                         cell(qe1, ["Bob"] * 40, [True] * 3 + [False] * 37)], sent=0)
    out = kg_infused_report.check_claims(report, supporting={f"q{i}": ["A"] for i in range(40)}).set_index("claim")
    c = out.loc["t1.kg_infused_over_vanilla_rag.2wiki"]
    # avg per question: Ann -> acc 1, f1 1, em 1 -> 1; Bob -> 0: 20 of 40 better, none worse
    assert c["verdict"] == "confirmed" and c["n_pairs"] == 40 and c["diff"] == pytest.approx(50.0)
    assert c["statement"] == "KG-Infused RAG (w/ 2-Round) > Vanilla RAG"
    assert out.loc["t4.kg_qe_recall.2wiki", "verdict"] == "not separable at this n"   # 3 of 40
    assert out.loc["t1.kg_infused_over_vanilla_rag.hotpotqa", "verdict"] == "not run"
    assert out.loc["f2.round2_over_round1.2wiki", "verdict"] == "not run"
    # claims registered in issue 56 whose sides this grid did not run read "not run", never a verdict
    for cid in ("t3.both_strongest.2wiki.over_qe", "f2.kg_aug_over_kg_qe.2wiki", "f2.kg_qe_over_full.hotpotqa"):
        assert out.loc[cid, "verdict"] == "not run" and out.loc[cid, "n_pairs"] == 0


def test_both_strongest_and_module_claims_follow_the_papers_table3():
    """Issue 56: "+ Both" against each single module per multi-hop dataset (relation from Table 3's
    Avg gap, one point either way), and the two Figure 2 module claims, each quoting its numbers."""
    t3 = paper_numbers.TABLE3
    both = [c for c in paper_numbers.CLAIMS if c[0].startswith("t3.both_strongest.")]
    assert len(both) == 8 and {c[2] for c in both} == set(paper_numbers.DATASETS[:4])
    rows = {"kg-qe-only": "+ KG-Based QE (w/ 2-Round)", "kg-aug-only": "+ KG-Aug Gen (w/ 2-Round)"}
    for cid, table, d, a, rel, b, metric, quote in both:
        gap = t3["+ Both (w/ 2-Round)"][d]["avg"] - t3[rows[b[0]]][d]["avg"]
        assert (table, a, metric) == ("Table 3", ("kg-infused", 2), "avg")
        assert rel == (">" if gap >= 1 else "<" if gap <= -1 else "~"), cid
        assert f"({gap:+.1f})" in quote
    rel = {c[0]: c[4] for c in both}
    assert rel["t3.both_strongest.bamboogle.over_aug"] == "<" and rel["t3.both_strongest.hotpotqa.over_qe"] == "~"
    figure2 = {c[0]: c for c in paper_numbers.CLAIMS if c[0].startswith(("f2.kg_aug_over_kg_qe.", "f2.kg_qe_over_full."))}
    assert set(figure2) == {"f2.kg_aug_over_kg_qe.2wiki", "f2.kg_aug_over_kg_qe.musique", "f2.kg_qe_over_full.hotpotqa"}
    assert "41.3 vs KG-Based QE 33.4" in figure2["f2.kg_aug_over_kg_qe.2wiki"][7]
    assert figure2["f2.kg_qe_over_full.hotpotqa"][3:6] == (("kg-qe-only", 2), ">", ("kg-infused", 2))
    ids = [c[0] for c in paper_numbers.CLAIMS]
    assert len(ids) == len(set(ids))


def test_kg_difference_pairs_the_same_configuration_on_two_kgs():
    from pathlib import Path

    from kgrag_lib.eval.summary import summarize
    from kgrag_lib.grid import Cell, GridReport, GridRun

    run = GridRun.of("kg-infused", rounds=2)

    def grid(answers):
        rows = [{"qid": f"q{i}", "question": "?", "prediction": a, "answers": ["Ann"], "dataset": "2wiki"}
                for i, a in enumerate(answers)]
        return GridReport([Cell(run, "2wiki", Path("."), summarize(rows), rows, sent=0)], sent=0)

    out = kg_infused_report.kg_difference(grid(["Bob"] * 40), grid(["Ann"] * 25 + ["Bob"] * 15), "heldout", "oracle")
    row = out.iloc[0]
    assert row["configuration"] == "KG-Infused RAG (w/ 2-Round)" and row["n_pairs"] == 40
    assert (row["heldout"], row["oracle"], row["diff"]) == (0.0, 62.5, 62.5) and row["separable"] == "yes"
    assert "note" not in out      # no empty column when no row needs a note


def test_the_oracle_kg_is_no_upper_bound_beside_another_dataset():
    """2wiki-evidence-oracle holds 2Wiki's gold facts only; beside HotpotQA the row says so."""
    from pathlib import Path

    from kgrag_lib.eval.summary import summarize
    from kgrag_lib.grid import Cell, GridReport, GridRun

    run = GridRun.of("kg-infused", rounds=2)

    def grid(answers):
        cells = []
        for ds in ("2wiki", "hotpotqa"):
            rows = [{"qid": f"q{i}", "question": "?", "prediction": a, "answers": ["Ann"], "dataset": ds}
                    for i, a in enumerate(answers)]
            cells.append(Cell(run, ds, Path("."), summarize(rows), rows, sent=0))
        return GridReport(cells, sent=0)

    out = kg_infused_report.kg_difference(grid(["Bob"] * 10), grid(["Ann"] * 10), "2wiki-evidence-heldout", "2wiki-evidence-oracle")
    notes = dict(zip(out["dataset"], out["note"]))
    assert notes["2wiki"] == "" and "holds no hotpotqa gold facts" in notes["hotpotqa"]
    assert "not an upper bound" in notes["hotpotqa"]


def test_avg_interval_and_off_domain_caption_of_the_figures():
    """Avg's interval is the bootstrap of each question's (acc + f1 + em) / 3, and a dataset the
    KG holds no fact of is named in the caption as not testable."""
    from kgrag_lib.report import mechanism
    from kgrag_lib.report.kg_infused import avg_ci95

    qs = [{"acc": 1.0, "f1": 1.0, "em": 1.0}] * 5 + [{"acc": 0.0, "f1": 0.0, "em": 0.0}] * 5
    lo, hi = avg_ci95(qs)
    assert lo < 50 < hi and 0 <= lo and hi <= 100
    assert avg_ci95([{"acc": 1.0}]) is None
    note = mechanism.kg_domain_note("2wiki-evidence-heldout", ["2wiki", "hotpotqa"], {"hotpotqa": "HotpotQA"})
    assert note.startswith("HotpotQA") and mechanism.NOT_TESTABLE_DATA in note
    assert mechanism.kg_domain_note("2wiki-evidence-heldout", ["2wiki"]) == ""
