"""KG-Infused RAG (Wu et al.) tables in the paper's layouts, our runs beside the paper's numbers.

Table 1/3 (Acc, F1, EM, Avg per multi-hop set; Acc for StrategyQA), the data of Figure 2
(score against activation rounds), Table 4 (Recall@6 of gold passages, computed from the
traces) and Table 5 (KG statistics). Every table carries a caption (`Setting`) naming the
model, KG, corpus and sample sizes, because ours differ from the paper's (§4.3) and a
reader must see it.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ...eval.bootstrap import bootstrap_ci
from ...eval.metrics import accuracy, get_metric, recall_at_k
from ...eval.paired import paired_test
from ..tables import check_paired_claims
from . import paper_numbers

METRIC_LABELS = {"acc": "Acc", "f1": "F1", "em": "EM", "avg": "Avg"}
# Our method variants (kgrag_lib.methods.kg_infused) and the paper's row names.
VARIANT_LABELS = {
    "nor": "NoR",
    "vanilla-rag": "Vanilla RAG",
    "vanilla-qe": "Vanilla QE",
    "kg-infused": "KG-Infused RAG",
    "kg-qe-only": "+ KG-Based QE",
    "kg-aug-only": "+ KG-Aug Gen",
}
ABLATION_LABELS = {**VARIANT_LABELS, "kg-infused": "+ Both"}
ROUND_VARIANTS = ("kg-infused", "kg-qe-only", "kg-aug-only")   # variants whose score depends on rounds
KG_DESCRIPTIONS = {
    "2wiki-evidence-heldout": "2Wiki evidence slice without the evaluated questions' own evidence (Wikidata facts "
                              "of the other 2WikiMQA dev questions), not Wikidata5M-KG",
    "2wiki-evidence-oracle": "UPPER BOUND: 2Wiki evidence slice holding every evaluated question's own gold facts, "
                             "not Wikidata5M-KG",
    "2wiki-evidence-full": "every real 2Wiki Wikidata triple here (all dev evidence, the evaluated questions' "
                           "included, as Wikidata5M holds them) with real passages as seed texts; ~9.5k triples, "
                           "not Wikidata5M-KG's 21M",
    "wikidata5m": "Wikidata5M-KG (Appendix B preprocessing)",
}
# an upper-bound KG bounds only the datasets whose gold facts it holds; beside any other dataset it is
# just a bigger KG, and its row must not read as an upper bound
UPPER_BOUND_FOR = {"2wiki-evidence-oracle": ("2wiki",)}
CORPUS_LOCAL = "pooled question contexts per dataset (2Wiki: HippoRAG's 6,119 passages), not Wikipedia-2018"


def metrics_for(dataset: str) -> tuple[str, ...]:
    """The paper's metrics for a dataset (§4.1, Table 6): Acc only for yes/no StrategyQA."""
    return paper_numbers.YES_NO_METRICS if dataset == "strategyqa" else paper_numbers.MULTI_HOP_METRICS


def round_label(variant: str, rounds: int | None, ablation: bool = False) -> str:
    """`KG-Infused RAG (w/ 2-Round)` as the paper writes it; baselines have no rounds."""
    base = (ABLATION_LABELS if ablation else VARIANT_LABELS).get(variant, variant)
    return f"{base} (w/ {rounds}-Round)" if rounds and variant in ROUND_VARIANTS else base


def scores(metrics: Mapping[str, Any], dataset: str) -> dict[str, float]:
    """The paper's columns for one run's metrics dict (percent); Avg = mean of Acc, F1, EM.

    For StrategyQA the paper reports Acc alone: the gold ("yes"/"no") is a substring of the raw
    answer, as its code scores it (the summary's `yesno_agree` column is the stricter check).
    """
    out: dict[str, float] = {}
    for m in metrics_for(dataset):
        if m == "avg":
            parts = [metrics.get(k) for k in ("acc", "f1", "em")]
            if any(v is None for v in parts):
                raise KeyError(f"{dataset}: Avg needs acc, f1 and em in the run metrics; got {sorted(metrics)}")
            out["avg"] = round(sum(float(v) for v in parts) / 3, 2)
        else:
            if metrics.get(m) is None:
                raise KeyError(f"{dataset}: metric {m!r} missing from the run metrics; got {sorted(metrics)}")
            out[m] = round(float(metrics[m]), 2)
    return out


@dataclass
class Setting:
    """What a table's numbers were made with: printed as the caption under every table."""

    model: str
    kg: str
    corpus: str = CORPUS_LOCAL
    n: Mapping[str, int] = field(default_factory=dict)
    profile: str = ""
    extra: str = ""

    def caption(self, what: str) -> str:
        kg = KG_DESCRIPTIONS.get(self.kg, self.kg)
        ns = ", ".join(f"{paper_numbers.DATASET_LABELS.get(d, d)} n={k}" for d, k in self.n.items())
        lines = [f"{what} — ours: model {self.model}; KG {kg}; corpus {self.corpus}",
                 f"samples: {ns or 'none'}" + (f"; profile {self.profile}" if self.profile else "")]
        if self.extra:
            lines.append(self.extra)
        return "\n".join(lines)


def result_row(variant: str, dataset: str, metrics: Mapping[str, Any], *, rounds: int | None = None,
               setting: Setting | None = None, ablation: bool = False, **extra: Any) -> dict[str, Any]:
    """One flat row (for `write_summary` and the layouts below) from a run's metrics dict."""
    cost = metrics.get("cost_per_question") or {}
    row: dict[str, Any] = {
        "label": round_label(variant, rounds, ablation),
        "variant": variant,
        "dataset": dataset,
        "rounds": rounds if variant in ROUND_VARIANTS else None,
        "n": metrics.get("n"),
        "failed": metrics.get("failed", 0),
        **scores(metrics, dataset),
        "llm_calls_per_q": cost.get("llm_calls"),
        "seconds_per_q": cost.get("seconds"),
    }
    for m in metrics_for(dataset):
        if metrics.get(f"{m}_ci95") is not None:
            row[f"{m}_ci95"] = metrics[f"{m}_ci95"]
    if setting is not None:
        row.update(model=setting.model, kg=setting.kg, corpus=setting.corpus)
    row.update(extra)
    return row


def corpus_description(corpus: str, datasets: Sequence[str] = ()) -> str:
    """What a `corpus` setting means, in words for a caption (`auto` depends on the dataset)."""
    if corpus == "auto":
        parts = [CORPUS_LOCAL]
        if "bamboogle" in datasets:
            parts.append("Bamboogle: the pooled HotpotQA+2Wiki+MuSiQue paragraphs")
        if "strategyqa" in datasets:
            parts.append("StrategyQA: its annotated facts (a gold-derived stand-in, easier than real retrieval)")
        return "; ".join(parts)
    if corpus == "pooled":
        return "pooled HotpotQA+2Wiki+MuSiQue context paragraphs (one corpus for all datasets), not Wikipedia-2018"
    if corpus.startswith("wikipedia"):
        return "Wikipedia-2018 (DPR psgs_w100), as in the paper"
    return corpus


# ------------------------------------------------------------------------- Table 1 / 3
def _columns(datasets: Sequence[str]) -> pd.MultiIndex:
    return pd.MultiIndex.from_tuples(
        [(paper_numbers.DATASET_LABELS.get(d, d), METRIC_LABELS[m]) for d in datasets for m in metrics_for(d)],
        names=["dataset", "metric"])


def layout(rows: Iterable[Mapping[str, Any]], datasets: Sequence[str] | None = None,
           order: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows (label, dataset, acc/f1/em/avg) -> the paper's table: one line per label,
    (dataset, metric) columns; datasets we did not run stay empty (NaN)."""
    rows = list(rows)
    datasets = list(datasets or [d for d in paper_numbers.DATASETS if any(r["dataset"] == d for r in rows)])
    labels = list(order or dict.fromkeys(r["label"] for r in rows))
    df = pd.DataFrame(math.nan, index=pd.Index(labels, name="method"), columns=_columns(datasets))
    for r in rows:
        if r["dataset"] not in datasets or r["label"] not in labels:
            continue
        for m in metrics_for(r["dataset"]):
            df.loc[r["label"], (paper_numbers.DATASET_LABELS.get(r["dataset"], r["dataset"]), METRIC_LABELS[m])] = r.get(m)
    return df


def paper_layout(table: Mapping[str, Mapping[str, Mapping[str, float]]],
                 datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """A transcribed paper table ({row: {dataset: {metric: value}}}) in the same layout."""
    rows = [{"label": label, "dataset": d, **vals} for label, per in table.items() for d, vals in per.items()]
    return layout(rows, datasets or paper_numbers.DATASETS, order=list(table))


def paper_table1(model: str = "LLaMA3.1-8B", datasets: Sequence[str] | None = None) -> pd.DataFrame:
    if model not in paper_numbers.TABLE1:
        raise KeyError(f"Table 1 has models {list(paper_numbers.TABLE1)}; got {model!r}")
    return paper_layout(paper_numbers.TABLE1[model], datasets)


def paper_table3(datasets: Sequence[str] | None = None) -> pd.DataFrame:
    return paper_layout(paper_numbers.TABLE3, datasets)


def delta(df: pd.DataFrame, row: str, base: str) -> pd.Series:
    """The paper's `Δ row → base` line: row minus base, per column."""
    s = (df.loc[row] - df.loc[base]).round(2)
    s.name = f"Δ {row} → {base}"
    return s


def with_deltas(df: pd.DataFrame, rows: Sequence[str], base: str) -> pd.DataFrame:
    """The table with Δ lines appended for `rows` present in it (as in Table 1)."""
    extra = [delta(df, r, base) for r in rows if r in df.index and base in df.index]
    return pd.concat([df, pd.DataFrame(extra)]) if extra else df


def side_by_side(ours: pd.DataFrame, paper: pd.DataFrame, ours_name: str = "ours",
                 paper_name: str = "paper") -> pd.DataFrame:
    """Ours above the paper's, same columns (the paper's restricted to the datasets we ran)."""
    cols = [c for c in ours.columns if c in paper.columns]
    return pd.concat({ours_name: ours, paper_name: paper.reindex(columns=ours.columns)[cols or ours.columns]},
                     names=["source"])


def avg_ci95(question_rows: Iterable[Mapping[str, Any]]) -> list[float] | None:
    """95% bootstrap interval (percent) of Avg from per-question rows (`questions.jsonl`, scores
    in [0, 1]): Avg is the mean of Acc, F1 and EM, so it is the mean over questions of each
    question's own (acc + f1 + em) / 3, and that per-question value is resampled. None when a row
    lacks a score."""
    vals = []
    for r in question_rows:
        parts = [r.get(k) for k in ("acc", "f1", "em")]
        if any(v is None for v in parts):
            return None
        vals.append(100 * sum(float(v) for v in parts) / 3)
    if not vals:
        return None
    return [round(v, 2) for v in bootstrap_ci(vals)]


def grid_rows(report: Any, runs: Sequence[Any], setting: Setting | None = None,
              ablation: bool = False) -> list[dict[str, Any]]:
    """One `result_row` per (configuration, dataset) of a grid (`kgrag_lib.grid.run_grid`), from
    each run's own metrics.json; `requests_per_q` counts cached requests too (what an
    independent run of that configuration would send)."""
    out = []
    for run in runs:
        for cell in (c for c in report.cells if c.run == run):
            row = result_row(run.method, cell.dataset, cell.metrics, rounds=dict(run.cfg).get("rounds"),
                             setting=setting, ablation=ablation, config=run.label)
            if "avg" in row and cell.rows:
                row["avg_ci95"] = avg_ci95(cell.rows)
            row["requests_per_q"] = (cell.metrics.get("cost_per_question") or {}).get("llm_requests")
            out.append(row)
    return out


def answers_frame(report: Any, runs: Sequence[Any], questions: Sequence[Any], width: int = 60) -> pd.DataFrame:
    """One line per question: the gold answer and each configuration's answer, marked ✓/✗ by
    the paper's Acc (a gold is a substring of the prediction)."""
    preds = {run.label: {p.qid: p for p in report.predictions[run.label]} for run in runs}
    recs = []
    for q in questions:
        rec = {"dataset": q.dataset, "question": textwrap.shorten(q.question, width, placeholder="…"),
               "gold": q.answers[0] if q.answers else ""}
        for run in runs:
            p = preds[run.label].get(q.qid)
            if p is None:
                continue
            ok = accuracy(p.prediction or "", q.answers)
            rec[run.label] = f"{'✓' if ok else '✗'} {textwrap.shorten(p.prediction or '(empty)', width, placeholder='…')}"
        recs.append(rec)
    return pd.DataFrame(recs)


# ------------------------------------------------------------------------- Figure 2
def rounds_frame(rows: Iterable[Mapping[str, Any]], metric: str = "avg") -> pd.DataFrame:
    """Long rows -> (variant, dataset) x rounds table of one metric (Acc for StrategyQA)."""
    recs = []
    for r in rows:
        m = metric if metric in metrics_for(r["dataset"]) else "acc"
        recs.append({"variant": r["variant"], "dataset": r["dataset"], "rounds": r.get("rounds"), "value": r.get(m)})
    df = pd.DataFrame(recs)
    if df.empty:
        return df
    df = df[df["rounds"].notna()]
    return df.pivot_table(index=["dataset", "variant"], columns="rounds", values="value", aggfunc="first")


def activation_depth(report: Any, runs: Sequence[Any], variant: str = "kg-infused") -> pd.DataFrame:
    """Per round budget: how many rounds activation really ran, triples it kept, and how many
    questions stopped early (no new entity or no candidate triple left)."""
    recs = []
    for run in runs:
        if run.method != variant:
            continue
        for p in report.predictions[run.label]:
            act = p.trace.get("activation") or {}
            recs.append({"rounds (max)": dict(run.cfg).get("rounds"), "rounds run": len(act.get("rounds") or []),
                         "triples selected": len(act.get("subgraph") or []),
                         "early": act.get("stop_reason") not in (None, "max_rounds")})
    if not recs:
        return pd.DataFrame()
    return pd.DataFrame(recs).groupby("rounds (max)").agg(
        questions=("rounds run", "size"), mean_rounds_run=("rounds run", "mean"),
        mean_triples_selected=("triples selected", "mean"), stopped_early=("early", "sum")).round(2)


# ------------------------------------------------------------------------- Table 4
# Where a trace lists the passages the answer stage saw, in retrieval order (first match wins).
RETRIEVED_KEYS = ("retrieved_ids", "passage_ids", "passages")


def retrieved_ids(trace: Mapping[str, Any]) -> list[str]:
    """Passage ids a prediction's trace retrieved, in rank order (q's then q''s for QE); a list
    entry that names no passage (a dict without `pid`) is skipped, a non-list value ignored."""
    for key in RETRIEVED_KEYS:
        v = (trace or {}).get(key)
        if v and isinstance(v, (list, tuple)):
            ids = [str(x["pid"]) if isinstance(x, Mapping) else str(x) for x in v
                   if not isinstance(x, Mapping) or x.get("pid") is not None]
            if ids:
                return ids
    return []


def row_retrieved(row: Mapping[str, Any]) -> list[str]:
    """The retrieved passage ids of a prediction row (its trace) or of a published compact row
    (`retrieved`, `study.compact_rows`)."""
    return retrieved_ids(row.get("trace") or {}) or [str(x) for x in row.get("retrieved") or []]


def row_gold(row: Mapping[str, Any], supporting: Mapping[str, Sequence[str]] | None) -> list[str]:
    """A question's gold passage ids: from `supporting` (qid -> ids) when given, else the ids the
    runner recorded on the row (`gold_ids`)."""
    if supporting is not None:
        return list(supporting.get(row["qid"], []))
    return [str(g) for g in row.get("gold_ids") or []]


def recall_rows(predictions: Iterable[Mapping[str, Any]], supporting: Mapping[str, Sequence[str]],
                k: int = 6) -> list[dict[str, Any]]:
    """Per-question Recall@k of the gold supporting passages (None: question has no gold ids)."""
    out = []
    for r in predictions:
        gold = list(supporting.get(r["qid"], []))
        got = row_retrieved(r)
        out.append({"qid": r["qid"], "dataset": r.get("dataset", ""), "n_retrieved": len(got),
                    "n_gold": len(gold), f"recall@{k}": recall_at_k(got, gold, k) if gold else None})
    return out


def recall_table(runs: Mapping[str, Iterable[Mapping[str, Any]]], supporting: Mapping[str, Sequence[str]],
                 k: int = 6) -> pd.DataFrame:
    """Table 4's layout: one line per run label, one R@k column per dataset (percent).

    A dataset whose questions carry no gold passage ids (Bamboogle here) stays empty; the
    `n` columns say over how many questions each mean is taken.
    """
    recs = []
    for label, preds in runs.items():
        for r in recall_rows(preds, supporting, k):
            recs.append({"label": label, **r})
    df = pd.DataFrame(recs)
    if df.empty:
        return df
    col = f"recall@{k}"
    scored = df[df[col].notna()]
    mean = scored.groupby(["label", "dataset"])[col].mean().mul(100).round(1).unstack("dataset")
    n = scored.groupby(["label", "dataset"])[col].size().unstack("dataset")
    datasets = [d for d in paper_numbers.DATASETS if d in set(df["dataset"])]
    labels = list(runs)
    out = pd.DataFrame(index=pd.Index(labels, name="method"))
    for d in datasets:
        name = paper_numbers.DATASET_LABELS.get(d, d)
        out[(name, f"R@{k}")] = mean[d].reindex(labels) if d in mean else math.nan
        out[(name, "n")] = n[d].reindex(labels).fillna(0).astype(int) if d in n else 0
    out.columns = pd.MultiIndex.from_tuples(out.columns, names=["dataset", ""])
    return out


def paper_table4() -> pd.DataFrame:
    df = pd.DataFrame(paper_numbers.TABLE4).T
    df.columns = [paper_numbers.DATASET_LABELS[c] for c in df.columns]
    df.index.name = "method"
    return df


def recall_runs(report: Any, runs: Sequence[Any], questions: Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
    """Prediction rows of a grid under Table 4's labels (`Vanilla RAG`, `+ KG-Based QE (k-Round)`)."""
    ds_of = {q.qid: q.dataset for q in questions}
    out: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        r = dict(run.cfg).get("rounds")
        label = {"vanilla-rag": "Vanilla RAG", "vanilla-qe": "Vanilla QE"}.get(run.method) or (
            f"+ KG-Based QE ({r}-Round)" if run.method == "kg-qe-only" else round_label(run.method, r))
        out[label] = [{**p.to_dict(), "dataset": ds_of[p.qid]} for p in report.predictions[run.label]]
    return out


def gold_sources(runs: Mapping[str, Iterable[Mapping[str, Any]]], supporting: Mapping[str, Sequence[str]],
                 k: int = 6) -> pd.DataFrame:
    """Gold passages retrieved in the top k, counted by the query that found them (q or q′)."""
    recs = []
    for label, preds in runs.items():
        for p in preds:
            gold = set(supporting.get(p["qid"], []))
            for hit in list((p.get("trace") or {}).get("passages") or [])[:k]:
                if isinstance(hit, Mapping) and hit.get("pid") in gold:
                    recs.append({"run": label, "dataset": p.get("dataset", ""), "from": hit.get("from", "q")})
    if not recs:
        return pd.DataFrame(columns=["run", "dataset"])
    return pd.DataFrame(recs).groupby(["run", "dataset", "from"]).size().unstack("from", fill_value=0)


def recall_summary_rows(table: pd.DataFrame, k: int = 6, **labels: Any) -> list[dict[str, Any]]:
    """Flat rows of a `recall_table` for `write_summary`."""
    rows = []
    for label in table.index:
        for ds in dict.fromkeys(c[0] for c in table.columns):
            v = table.loc[label, (ds, f"R@{k}")]
            rows.append({"label": label, "dataset": ds, f"recall@{k}": None if pd.isna(v) else float(v),
                         "n": int(table.loc[label, (ds, "n")]), **labels})
    return rows


# ------------------------------------------------------------------------- Table 5 and the KG profile
def table5_frame(ours: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Table 5: the paper's two lines, then for each of our preprocessing runs (stats dicts as
    returned by `preprocess_wikidata5m`) its 'original' and 'kept' lines; plus removed shares."""
    rows = []
    orig, kept = paper_numbers.TABLE5["Wikidata5M"], paper_numbers.TABLE5["Wikidata5M-KG"]
    rows.append({"source": "paper", "dataset/KG": "Wikidata5M", **orig})
    rows.append({"source": "paper", "dataset/KG": "Wikidata5M-KG", **kept,
                 **{f"removed % {k}": paper_numbers.TABLE5_REMOVED_PCT[k] for k in orig}})
    for name, stats in (ours or {}).items():
        o, kp = stats["original"], stats["kept"]
        rows.append({"source": "ours", "dataset/KG": f"{name} (input)",
                     **{k: o[k] for k in ("entities", "relations", "triples")}})
        rows.append({"source": "ours", "dataset/KG": f"{name} (kept)",
                     **{k: kp[k] for k in ("entities", "relations", "triples")},
                     **{f"removed % {k}": stats["removed_pct"][k] for k in ("entities", "relations", "triples")}})
    df = pd.DataFrame(rows).set_index(["source", "dataset/KG"])
    for k in ("entities", "relations", "triples"):
        df[k] = df[k].astype("Int64")
    return df


def removed_pct(original: Mapping[str, int], kept: Mapping[str, int]) -> dict[str, float]:
    """Share removed by preprocessing, percent of the original (Appendix B.2's 5.65/2.17/1.72)."""
    return {k: round(100.0 * (original[k] - kept[k]) / original[k], 2) if original[k] else 0.0
            for k in ("entities", "relations", "triples")}


def out_degrees(heads: Any) -> Any:
    """Outgoing-triple count of every entity that heads at least one triple."""
    import numpy as np

    h = np.asarray(heads, dtype=np.int64)
    if h.size == 0:
        return np.zeros(0, dtype=np.int64)
    counts = np.bincount(h)
    return counts[counts > 0]


def relation_frequencies(rels: Any, names: Sequence[str] | Mapping[int, str], top: int = 15) -> pd.DataFrame:
    """The `top` most frequent relations with their triple counts and share (percent)."""
    import numpy as np

    r = np.asarray(rels, dtype=np.int64)
    counts = np.bincount(r) if r.size else np.zeros(0, dtype=np.int64)
    order = np.argsort(-counts, kind="stable")[:top]
    return pd.DataFrame({"relation": [names[int(i)] for i in order if counts[i] > 0],
                         "triples": [int(counts[i]) for i in order if counts[i] > 0],
                         "share %": [round(100.0 * counts[i] / max(r.size, 1), 2) for i in order if counts[i] > 0]})


def question_values(rows: Iterable[Mapping[str, Any]], metric: str, supporting: Mapping[str, Sequence[str]] | None = None
                    ) -> dict[str, float]:
    """qid -> one question's value of `metric` in [0, 1]: avg (mean of Acc, F1, EM; Acc alone for
    yes/no StrategyQA, as the paper's tables), any answer metric, or recall@K from the trace
    against `supporting` (else the row's own `gold_ids`; questions without gold passages are left
    out), from a prediction's trace or a published compact row (`retrieved`)."""
    out: dict[str, float] = {}
    for r in rows:
        if metric.startswith("recall@"):
            gold = row_gold(r, supporting)
            if gold:
                out[r["qid"]] = recall_at_k(row_retrieved(r), gold, int(metric.split("@")[1]))
            continue
        if metric == "avg":
            if r.get("dataset") == "strategyqa":
                out[r["qid"]] = get_metric("acc")(r)
            else:
                out[r["qid"]] = sum(get_metric(m)(r) for m in ("acc", "f1", "em")) / 3
        else:
            v = get_metric(metric)(r)
            if v is not None:
                out[r["qid"]] = v
    return out


def check_claims(report: Any, claims: Sequence[tuple] | None = None, supporting: Mapping[str, Sequence[str]] | None = None,
                 alpha: float = 0.05, margin: float = 5.0, kg_report: Any = None, kg: str | None = None) -> pd.DataFrame:
    """The paper's "A beats B" claims (`paper_numbers.CLAIMS`) tested on a grid's per-question
    scores, paired on the same questions (`report.tables.check_paired_claims`): confirmed,
    refuted, or not separable at this n, with the difference, its 95% interval and p. A claim
    whose two sides the grid did not run reads 'not run'.

    With `kg_report` (the same configurations on another KG, e.g. the oracle KG that keeps the
    evaluated questions' own Wikidata facts, as the paper's Wikidata5M does), the KG sides are
    read from it and the KG-free sides from `report`, and each claim id gets `@<kg>`."""
    def side_values(side: tuple, dataset: str, metric: str) -> dict[str, float] | None:
        variant, rounds = side
        grid = kg_report if kg_report is not None and variant in ROUND_VARIANTS else report
        cells = [c for c in grid.cells if c.dataset == dataset and c.run.method == variant
                 and (rounds is None or dict(c.run.cfg).get("rounds") == rounds)]
        return question_values(cells[0].rows, metric, supporting) if cells else None

    claims = list(paper_numbers.CLAIMS if claims is None else claims)
    if kg_report is not None:   # only the claims with a KG side: the others would repeat themselves
        claims = [(f"{c[0]}@{kg}", *c[1:]) for c in claims if c[3][0] in ROUND_VARIANTS or c[5][0] in ROUND_VARIANTS]
    return check_paired_claims(claims, side_values, lambda side: round_label(*side), alpha=alpha, margin=margin)


def check_placebo_claims(report: Any, placebo: Any, kg: str, placebo_kg: str, claims: Sequence[tuple] | None = None,
                         alpha: float = 0.05, margin: float = 5.0) -> pd.DataFrame:
    """The mechanism claims (`paper_numbers.MECHANISM_CLAIMS`): the same configuration on the same
    questions, side "kg" read from `report` (the grid on the notebook's KG `kg`), side "placebo" from
    `placebo` (the grid on `placebo_kg`), paired per question as `check_claims` does. With `placebo`
    None (no placebo KG ran) every claim reads 'not run'."""
    def side_values(side: tuple, dataset: str, metric: str) -> dict[str, float] | None:
        variant, rounds, role = side
        grid = placebo if role == "placebo" else report
        if grid is None:
            return None
        cells = [c for c in grid.cells if c.dataset == dataset and c.run.method == variant
                 and (rounds is None or dict(c.run.cfg).get("rounds") == rounds)]
        return question_values(cells[0].rows, metric) if cells else None

    def label(side: tuple) -> str:
        return f"{round_label(side[0], side[1])} on {placebo_kg if side[2] == 'placebo' else kg}"

    claims = list(paper_numbers.MECHANISM_CLAIMS if claims is None else claims)
    return check_paired_claims(claims, side_values, label, alpha=alpha, margin=margin)


def kg_difference(base: Any, other: Any, base_kg: str, other_kg: str, metric: str = "avg") -> pd.DataFrame:
    """The same configurations on two KGs (two grids over the same questions): per configuration
    and dataset, each KG's mean of `metric` (points), the paired difference other − base with its
    95% interval and p, and whether it is separable at this n; a `note` where `other_kg` is an
    upper bound only for other datasets (`UPPER_BOUND_FOR`)."""
    recs = []
    for cell in base.cells:
        twin = next((c for c in other.cells if c.run == cell.run and c.dataset == cell.dataset), None)
        if twin is None:
            continue
        va, vb = question_values(twin.rows, metric), question_values(cell.rows, metric)
        both = [q for q in va if q in vb]
        r = paired_test([va[q] for q in both], [vb[q] for q in both])
        recs.append({"configuration": round_label(cell.run.method, dict(cell.run.cfg).get("rounds")),
                     "dataset": cell.dataset, "metric": metric, "n_pairs": r.n, base_kg: round(r.mean_b, 1),
                     other_kg: round(r.mean_a, 1), "diff": round(r.diff, 1), "ci95": [round(v, 1) for v in r.ci95],
                     "p_value": r.p_value,
                     "separable": "yes" if r.p_value < 0.05 else "not separable at this n"})
        bounds = UPPER_BOUND_FOR.get(other_kg)
        if bounds is not None and cell.dataset not in bounds:
            recs[-1]["note"] = (f"{other_kg} holds no {cell.dataset} gold facts (only {', '.join(bounds)}'s): "
                                "not an upper bound here")
    df = pd.DataFrame(recs)
    if "note" in df:
        df["note"] = df["note"].fillna("")
    return df

