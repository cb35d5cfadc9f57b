"""Report layer: seed aggregation, tables beside the paper, claims, MetaQA views, error rules."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.paths import REPO_ROOT, data_root
from kgrag_lib.records import Triple
from kgrag_lib.report.metaqa import paper_numbers as PN
from kgrag_lib.report.metaqa.case_study import subquestion_counts, trace_text
from kgrag_lib.report.metaqa.errors import CATEGORIES, categorize, category_table
from kgrag_lib.report.metaqa.tables import (beside_paper, check_claims, dataset_hops, degree_summary, entity_degrees,
                                            relation_counts)
from kgrag_lib.report.tables import aggregate_seeds, json_records, mean_std, metrics_row, pivot_mean_std, to_markdown

SEED_PAPER = REPO_ROOT.parent / "shared" / "seeds" / "003_7ba743617a7bf1a2.txt"


# ---------------------------------------------------------------------------- aggregation

def _grid_rows():
    return [
        # three seeds: 60, 70, 80 -> mean 70, sample std sqrt((100 + 0 + 100) / 2) = 10
        {"dataset": "metaqa-1hop", "hops": 1, "top_k": 10, "seed": 0, "hit1": 60.0, "n": 5},
        {"dataset": "metaqa-1hop", "hops": 1, "top_k": 10, "seed": 1, "hit1": 70.0, "n": 5},
        {"dataset": "metaqa-1hop", "hops": 1, "top_k": 10, "seed": 2, "hit1": 80.0, "n": 5},
        # two seeds: 50, 54 -> mean 52, sample std sqrt(8) = 2.828..., population std 2
        {"dataset": "metaqa-2hop", "hops": 3, "top_k": 30, "seed": 0, "hit1": 50.0, "n": 4},
        {"dataset": "metaqa-2hop", "hops": 3, "top_k": 30, "seed": 1, "hit1": 54.0, "n": 4},
        # one seed: std undefined
        {"dataset": "metaqa-3hop", "hops": 3, "top_k": 30, "seed": 0, "hit1": 40.0, "n": 3},
    ]


def test_aggregate_seeds_mean_and_sample_std_by_hand():
    agg = aggregate_seeds(_grid_rows(), by=["dataset", "hops", "top_k"]).set_index("dataset")
    assert agg.loc["metaqa-1hop", "hit1_mean"] == pytest.approx(70.0)
    assert agg.loc["metaqa-1hop", "hit1_std"] == pytest.approx(10.0)
    assert agg.loc["metaqa-2hop", "hit1_mean"] == pytest.approx(52.0)
    assert agg.loc["metaqa-2hop", "hit1_std"] == pytest.approx(math.sqrt(8.0))
    assert math.isnan(agg.loc["metaqa-3hop", "hit1_std"])
    assert agg["n_seeds"].tolist() == [3, 2, 1]
    assert agg["n_questions"].tolist() == [15, 8, 3]
    assert list(agg.index) == ["metaqa-1hop", "metaqa-2hop", "metaqa-3hop"]  # first-seen order kept


def test_aggregate_seeds_population_std_and_several_metrics():
    rows = [dict(r, em=r["hit1"] / 2) for r in _grid_rows()]
    agg = aggregate_seeds(pd.DataFrame(rows), by=["dataset"], metrics=("hit1", "em"), ddof=0).set_index("dataset")
    assert agg.loc["metaqa-2hop", "hit1_std"] == pytest.approx(2.0)
    assert agg.loc["metaqa-2hop", "em_mean"] == pytest.approx(26.0)
    assert agg.loc["metaqa-1hop", "em_std"] == pytest.approx(math.sqrt(200 / 3) / 2)
    assert agg.loc["metaqa-3hop", "hit1_std"] == 0.0


def test_aggregate_seeds_rejects_duplicates_and_missing_columns():
    rows = _grid_rows() + [{"dataset": "metaqa-3hop", "hops": 3, "top_k": 30, "seed": 0, "hit1": 41.0, "n": 3}]
    with pytest.raises(ConfigError, match="more than one row"):
        aggregate_seeds(rows, by=["dataset", "hops", "top_k"])
    with pytest.raises(ConfigError, match="'method'"):
        aggregate_seeds(_grid_rows(), by=["method"])


def test_metrics_row_flattens_scores_and_cost():
    metrics = {"n": 5, "failed": 1, "hit1": 60.0, "hit1_ci95": [0.0, 80.0], "em": 20.0, "f1": 33.3,
               "hit1_exact": 40.0, "cost_per_question": {"llm_calls": 4.2, "seconds": 12.5}}
    row = metrics_row(metrics, dataset="metaqa-1hop", method="kg-rag", seed=3)
    assert row == {"dataset": "metaqa-1hop", "method": "kg-rag", "seed": 3, "n": 5, "failed": 1, "hit1": 60.0,
                   "hit1_exact": 40.0, "em": 20.0, "f1": 33.3, "llm_calls_per_q": 4.2, "seconds_per_q": 12.5}


def test_mean_std_formatting():
    assert mean_std(78.66, 4.61) == "78.7 ± 4.6"
    assert mean_std(78.66, float("nan")) == "78.7"
    assert mean_std(float("nan"), 1.0) == "–"
    assert mean_std(0.5, 0.25, digits=2) == "0.50 ± 0.25"


def test_pivot_and_markdown_layout():
    agg = pd.DataFrame({"dataset": ["metaqa-1hop", "metaqa-1hop", "metaqa-2hop"], "method": ["llm", "kg-rag", "llm"],
                        "hit1_mean": [10.0, 60.0, 5.0], "hit1_std": [1.0, 2.0, float("nan")]})
    table = pivot_mean_std(agg, index="dataset", columns="method")
    assert list(table.columns) == ["llm", "kg-rag"]
    assert table.loc["metaqa-1hop", "kg-rag"] == "60.0 ± 2.0"
    assert table.loc["metaqa-2hop", "llm"] == "5.0"
    assert table.loc["metaqa-2hop", "kg-rag"] == "–"
    md = to_markdown(pd.DataFrame({"a": ["x|y", None], "b": [1.234, float("nan")], "c": [3, 4]}), digits=2)
    lines = md.splitlines()
    assert md.endswith("\n") and len(lines) == 4 and set(lines[1]) <= set("|:-")    # header, rule, two rows
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines]
    assert [cells[0], cells[2], cells[3]] == [["a", "b", "c"], ["x\\|y", "1.23", "3"], ["–", "–", "4"]]
    # text that looks like a number is kept as written ("1.0" stays "1.0", not tabulate's "1")
    assert "| 1.0 " in to_markdown(pd.DataFrame({"x": ["1.0"], "y": [1.0]}))


def test_json_records_are_plain_json():
    import json

    df = pd.DataFrame({"a": [1, 2], "b": [float("nan"), 2.5], "c": ["x", None]})
    recs = json_records(df)
    assert recs == [{"a": 1, "b": None, "c": "x"}, {"a": 2, "b": 2.5, "c": None}]
    assert type(recs[0]["a"]) is int
    json.dumps(recs, allow_nan=False)


# ---------------------------------------------------------------------------- the paper's numbers

def test_beside_paper_uses_only_printed_numbers():
    agg = pd.DataFrame({"dataset": ["metaqa-2hop", "metaqa-2hop", "metaqa-1hop"], "method": ["kg-rag"] * 3,
                        "hops": [3, 2, 3], "top_k": [30, 30, 30], "hit1_mean": [70.0, 80.0, 90.0],
                        "hit1_std": [3.0, 2.0, 1.0]})
    out = beside_paper(agg, key="exp1.hit1", missing="Fig. 4: bars only")
    assert out.loc[0, "paper_hit1_mean"] == pytest.approx(78.7)
    assert out.loc[0, "paper_hit1_std"] == pytest.approx(4.6)
    assert out.loc[0, "hit1_minus_paper"] == pytest.approx(-8.7)
    assert out.loc[0, "paper_source"].startswith("§4.3.1")
    assert out.loc[1:, "paper_hit1_mean"].isna().all()
    assert set(out.loc[1:, "paper_source"]) == {"Fig. 4: bars only"}


def test_paper_numbers_store_nothing_for_figure_only_results():
    keys = {n.key for n in PN.NUMBERS}
    assert not any(k.startswith("exp2") for k in keys)  # Fig. 5 prints no value
    assert "Fig. 5" in set(PN.figure_only_table()["figure"])
    n = PN.paper_number("exp1.hit1", dataset="metaqa-2hop")
    assert (n.value, n.std, n.hops, n.top_k, n.seeds, n.n) == (0.787, 0.046, 3, 30, 10, 100)
    assert n.value_percent() == pytest.approx(78.7)
    assert PN.paper_number("exp1.hit1", dataset="metaqa-1hop") is None
    table = PN.paper_numbers(key="kb.entities")
    assert table.loc[0, "value"] == 43234 and table.loc[0, "value_pct"] == 43234


def _normalize_paper(text: str) -> str:
    text = text.replace("$", "").replace("\\pm", "±").replace("\\leq", "≤").replace("\\", "")
    text = re.sub(r"\s+", " ", text)
    return text.replace("( ", "(").replace(" )", ")")


@pytest.mark.skipif(not SEED_PAPER.exists(), reason=f"paper text not found at {SEED_PAPER}")
def test_every_quote_is_in_the_paper_text():
    text = _normalize_paper(SEED_PAPER.read_text(encoding="utf-8"))
    quotes = [n.quote for n in PN.NUMBERS] + [c.quote for c in PN.CLAIMS]
    for quote in quotes:
        for piece in quote.split(" ... "):
            assert _normalize_paper(piece) in text, piece
    for n in PN.NUMBERS:  # the printed value itself is in the quote
        shown = f"{n.value:,.0f}" if n.value >= 1000 else f"{n.value:g}"
        assert shown in n.quote or f"{n.value:g}" in n.quote, n.key


def _scores(dataset, method, values, **labels):
    """Per-question rows of one run: question i scores values[i]."""
    return [{"dataset": dataset, "method": method, "seed": 0, "qid": f"q{i}", "hit1": float(v), **labels}
            for i, v in enumerate(values)]


def test_check_claims_pairs_questions_and_gives_verdicts():
    n = 80
    rows = (_scores("metaqa-1hop", "llm", [0] * n)
            + _scores("metaqa-1hop", "llm-kg", [1] * 30 + [0] * 50)      # 30 better, 0 worse: clear
            + _scores("metaqa-1hop", "llm-qd", [0] * n)                  # identical to llm on 80 questions
            + _scores("metaqa-1hop", "kg-rag", [1] * 29 + [0] * 51)
            + _scores("metaqa-3hop", "llm", [1, 0] * 5) + _scores("metaqa-3hop", "llm-kg", [0, 1] * 5))
    out = check_claims(pd.DataFrame(rows), PN.paper_claims("exp2")).set_index("claim")
    kg = out.loc["exp2.kg_helps_1hop"]
    assert kg["verdict"] == "confirmed" and kg["n_pairs"] == n and kg["diff"] == pytest.approx(37.5)
    assert kg["test"] == "mcnemar (exact)" and kg["p_value"] < 1e-6
    # ~ : 0 of 80 disagree (bound 4.5 points), but neither side scores once: the metric tests nothing
    assert out.loc["exp2.qd_alone_1hop", "verdict"] == "not testable on this metric (no question scores on either side)"
    assert out.loc["exp2.ours_below_kaping_1hop", "verdict"] == "not separable at this n"   # 29 vs 30 of 80
    assert out.loc["exp2.kg_flat_3hop", "verdict"] == "not separable at this n"            # 10 questions
    assert out.loc["exp2.kg_helps_2hop", "verdict"] == "not run"
    grid = pd.DataFrame(_scores("metaqa-2hop", "kg-rag", [0] * 40, hops=1, top_k=30)
                        + _scores("metaqa-2hop", "kg-rag", [1] * 30 + [0] * 10, hops=2, top_k=30)
                        + _scores("metaqa-2hop", "kg-rag", [1] * 31 + [0] * 9, hops=3, top_k=30))
    e1 = check_claims(grid, PN.paper_claims("exp1")).set_index("claim")
    assert e1.loc["exp1.2hop_N1_poor_vs_N2", "verdict"] == "confirmed"
    assert e1.loc["exp1.2hop_N2_over_N3", "verdict"] == "not separable at this n"
    assert e1.loc["exp1.2hop_K_helps", "verdict"] == "not run"


def test_question_scores_read_a_run(tmp_path):
    import json

    from kgrag_lib.report.tables import question_scores

    (tmp_path / "predictions.jsonl").write_text(
        json.dumps({"qid": "a", "prediction": "It is Louis Malle.", "answers": ["Louis Malle"]}) + "\n", encoding="utf-8")
    assert question_scores(tmp_path, dataset="metaqa-1hop", seed=0) == [
        {"dataset": "metaqa-1hop", "seed": 0, "qid": "a", "hit1": 1.0, "hit1_exact": 0.0, "hit1_first": 0.0}]


# ---------------------------------------------------------------------------- MetaQA views

class _Store:
    """The arrays and names a KGStore exposes, for hand-checked degree counts."""

    def __init__(self, triples):
        names = sorted({x for s, _, o in triples for x in (s, o)})
        rels = sorted({r for _, r, _ in triples})
        self._names, self._rels = names, rels
        self.heads = np.array([names.index(s) for s, _, _ in triples])
        self.rels = np.array([rels.index(r) for _, r, _ in triples])
        self.tails = np.array([names.index(o) for _, _, o in triples])
        self.num_entities, self.num_relations = len(names), len(rels)

    def entity_name(self, i):
        return self._names[i]

    def relation_name(self, i):
        return self._rels[i]


def test_entity_degrees_by_hand():
    store = _Store([("A", "directed_by", "B"), ("A", "starred_actors", "C"), ("D", "directed_by", "B"),
                    ("C", "has_tags", "C")])  # self-loop counts once
    deg = entity_degrees(store)
    assert dict(zip(store._names, deg.tolist())) == {"A": 2, "B": 2, "C": 2, "D": 1}
    s = degree_summary(deg, cutoff=1)
    assert (s["entities"], s["median"], s["max"], s["share_above_1_pct"]) == (4, 2.0, 2, 75.0)
    rc = relation_counts(store)
    assert rc["relation"].tolist()[0] == "directed_by" and rc["triples"].tolist() == [2, 1, 1]


@pytest.mark.skipif(not (data_root() / "metaqa" / "kb.txt").exists(), reason="MetaQA kb.txt not in the data root")
def test_real_metaqa_kb_degrees_match_the_paper():
    from kgrag_lib.data.metaqa import load_metaqa_kb
    from kgrag_lib.kg import KGStore

    store = KGStore.from_triples(load_metaqa_kb(data_root() / "metaqa" / "kb.txt"))
    s = degree_summary(entity_degrees(store))
    assert s["entities"] == PN.paper_number("kb.entities").value
    assert store.num_relations == PN.paper_number("kb.relations").value
    assert s["median"] == PN.paper_number("kb.degree_median").value
    assert s["max"] <= PN.paper_number("kb.degree_max").value
    assert int(entity_degrees(store).sum()) == 2 * store.num_triples - int((store.heads == store.tails).sum())


def test_dataset_hops():
    assert [dataset_hops(d) for d in ("metaqa-1hop", "metaqa-3hop", "hotpotqa", None)] == [1, 3, None, None]


# ---------------------------------------------------------------------------- error categories

def _row(pred, answers=("Tom Hanks",), dataset="metaqa-2hop", failed=False, subqs=None, steps=(),
         retrieval=True, entity_ids=(5,), num_candidates=40):
    trace = {"steps": [dict(s) for s in steps], "issues": [],
             "retrieval": {"entity_ids": list(entity_ids), "num_candidates": num_candidates} if retrieval else None,
             "decomposition": {"subquestions": list(subqs), "reasoning": "r"} if subqs is not None else None}
    return {"qid": "q", "dataset": dataset, "method": "kg-rag", "prediction": pred, "answers": list(answers),
            "failed": failed, "trace": trace}


def _step(answer, triples=()):
    return {"answer": answer, "triples": list(triples), "subquestion": "s?"}


GOLD_TRIPLE = "(Big, starred actors, Tom Hanks)"
OTHER_TRIPLE = "(Big, directed by, Penny Marshall)"


@pytest.mark.parametrize("row, expected", [
    (_row("tom hanks "), "correct"),
    (_row("", failed=True), "run_failure"),
    (_row("The actor is Tom Hanks."), "answer_format"),
    (_row("nobody", entity_ids=(), num_candidates=0, subqs=["a?", "b?"]), "entity_not_found"),
    (_row("nobody", subqs=["a?"], steps=[_step("x", [GOLD_TRIPLE])]), "decomposition"),
    (_row("nobody", subqs=[], steps=[_step("x", [GOLD_TRIPLE])]), "decomposition"),
    (_row("nobody", subqs=["a?", "b?"], steps=[_step("Big", [OTHER_TRIPLE]), _step("x", [OTHER_TRIPLE])]),
     "retrieval_miss"),
    (_row("nobody", subqs=["a?", "b?"], steps=[_step("Big", [OTHER_TRIPLE]), _step("Meg Ryan", [GOLD_TRIPLE])]),
     "answer_ignores_facts"),
    (_row("nobody", subqs=["a?", "b?"], steps=[_step("Big", [OTHER_TRIPLE]), _step("Tom Hanks", [GOLD_TRIPLE])]),
     "synthesis_lost"),
    (_row("Meg Ryan", retrieval=False, steps=[_step("Meg Ryan")]), "wrong_answer"),
])
def test_error_rules(row, expected):
    assert categorize(row)["category"] == expected


def test_error_rules_use_triple_ids_when_a_store_is_given():
    store = _Store([("Big", "starred_actors", "Tom Hanks"), ("Big", "directed_by", "Penny Marshall")])
    for ids, expected in (([0], "answer_ignores_facts"), ([1], "retrieval_miss")):
        step = {"answer": "Meg Ryan", "triple_ids": ids, "triples": ["(unrelated text)"]}
        row = _row("nobody", subqs=["a?", "b?"], steps=[_step("Big"), step])
        assert categorize(row, store)["category"] == expected


def test_decomposition_flags_and_tables():
    one_hop = _row("x", dataset="metaqa-1hop", subqs=["a?", "b?"], steps=[_step("x"), _step("y")])
    three_hop = _row("Tom Hanks", dataset="metaqa-3hop", subqs=["a?", "b?"], steps=[_step("x"), _step("y")])
    c1, c3 = categorize(one_hop), categorize(three_hop)
    assert (c1["over_decomposed"], c1["under_decomposed"], c1["n_subquestions"]) == (True, False, 2)
    assert (c3["over_decomposed"], c3["under_decomposed"], c3["category"]) == (False, True, "correct")
    table = category_table(pd.DataFrame([c1, c3]))
    assert list(table.columns) == ["dataset", *CATEGORIES, "n"]
    assert table.set_index("dataset").loc["metaqa-3hop", "correct"] == 1
    counts = subquestion_counts([one_hop, three_hop, _row("x", subqs=None)])
    assert counts["n_subquestions"].tolist() == [2, 2, 0]


def test_trace_text_reads_like_fig6():
    row = _row("Tom Hanks", subqs=["Which movies?", "Who starred?"],
               steps=[{"index": 1, "subquestion": "Which movies?", "asked": "Which movies?", "answer": "Big",
                       "triples": [OTHER_TRIPLE, GOLD_TRIPLE, "(c, d, e)", "(f, g, h)"]},
                      {"index": 2, "subquestion": "Who starred?", "asked": "Who starred in Big?",
                       "answer": "Tom Hanks", "triples": [GOLD_TRIPLE]}])
    row["question"] = "who acted in the films directed by Penny Marshall"
    text = trace_text(row, max_triples=2)
    assert "**Sub-question 1:** Which movies?" in text
    assert "**Reformulated 2:** Who starred in Big?" in text
    assert "… (4 in all)" in text and "(c, d, e)" not in text
    assert text.endswith("**Gold:** Tom Hanks")
    row["prediction"] = "Tom Hanks " * 100
    assert "**Final answer:** Tom Hanks" in trace_text(row, max_chars=20)
    assert "… (+979 characters)" in trace_text(row, max_chars=20)


# ---------------------------------------------------------------------------- drawing

def test_grouped_bars_draws_means_stds_and_paper_markers():
    import matplotlib

    matplotlib.use("Agg")
    from kgrag_lib.report.metaqa.figures import grouped_bars

    agg = pd.DataFrame({"dataset": ["metaqa-1hop", "metaqa-1hop", "metaqa-2hop"], "config": ["a", "b", "a"],
                        "hit1_mean": [60.0, 40.0, 30.0], "hit1_std": [5.0, float("nan"), 2.0]})
    paper = pd.DataFrame({"dataset": ["metaqa-2hop"], "config": ["a"], "value": [78.7], "std": [4.6]})
    ax = grouped_bars(agg, group="dataset", bar="config", paper=paper, annotate=False)
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == [0.0, 30.0, 40.0, 60.0]  # the missing (2-hop, b) bar is drawn empty
    markers = [ln for ln in ax.get_lines() if ln.get_marker() == "D" and len(ln.get_ydata())]
    assert [float(ln.get_ydata()[0]) for ln in markers] == [78.7]


def test_candidate_counts_on_a_small_store():
    from kgrag_lib.kg import KGStore
    from kgrag_lib.records import Question
    from kgrag_lib.report.metaqa.tables import candidate_counts

    store = KGStore.from_triples([Triple("Big", "directed_by", "Penny Marshall"),
                                  Triple("Big", "starred_actors", "Tom Hanks"),
                                  Triple("Splash", "starred_actors", "Tom Hanks"),
                                  Triple("Splash", "release_year", "1984")])
    qs = [Question("q1", "who directed Big", ["Penny Marshall"], dataset="metaqa-1hop", topic_entities=["Big"]),
          Question("q2", "?", ["x"], dataset="metaqa-1hop", topic_entities=["Nowhere"])]
    c = candidate_counts(store, qs, hops=(1, 2, 3)).set_index(["qid", "hops"])["candidates"]
    # Big: its 2 triples; +Tom Hanks' other triple; +Splash's release year
    assert [c[("q1", h)] for h in (1, 2, 3)] == [2, 3, 4]
    assert [c[("q2", h)] for h in (1, 2, 3)] == [0, 0, 0]


def test_pick_example_prefers_named_gold_and_several_steps():
    from kgrag_lib.report.metaqa.case_study import pick_example

    plain = _row("nobody", subqs=["a?", "b?"])
    named_one_step = _row("Tom Hanks, Meg Ryan", subqs=["a?"])
    named_two_steps = _row("It is Tom Hanks", subqs=["a?", "b?"])
    other = _row("Tom Hanks", dataset="metaqa-1hop", subqs=["a?", "b?"])
    assert pick_example([plain, named_one_step, named_two_steps, other], dataset="metaqa-2hop") is named_two_steps
    assert pick_example([plain], dataset="metaqa-3hop") is plain
    assert pick_example([]) is None
