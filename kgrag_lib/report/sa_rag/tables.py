"""SA-RAG (Pavlović et al.) tables: Table 1 with ours beside the paper's, the index statistics
of the text KGs, and the paper's two claims tested on paired questions.

Every table says what its numbers were made with (`caption`): the model, the correctness judge
(an LLM; the paper's correctness was a manual check), the embedder, the corpus (the pooled
paragraphs of the sampled questions, titles kept) and the sample sizes. Scores are percent;
the paper's EM and F1 (printed as fractions) are shown x100.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ...eval.judge import judge_predictions
from ...eval.paired import NOT_RUN
from ...jsonl import read_jsonl
from ...rundir import PRED_FILE
from . import paper_numbers
from ..claims import JUDGE_UNINFORMATIVE, question_values, with_metric
from ..claims import claim_verdicts as _claim_verdicts
from ..tables import check_paired_claims, ci_cell

PAPER_ROW = {"PPR (HippoRAG 2-style)": "HippoRAG 2"}   # our row -> the paper's row it stands for
CORPUS = "pooled paragraphs of the sampled questions, titles kept"
JUDGE_NOTE = "correctness: LLM judge {judge} (the paper's correctness was a manual check)"


def system_label(method: str, top_k: int | None = None) -> str:
    """Table 1's row name: the variant's label, with "(k=K)" for a pinned k other than 5."""
    from ...methods.sa_rag import VARIANTS

    base = VARIANTS[method].label if method in VARIANTS else method
    return base if top_k in (None, 5) else f"{base} (k={top_k})"


def paper_row(label: str) -> str:
    return PAPER_ROW.get(label, label)


def caption(what: str, model: str, n: Mapping[str, int], *, judge: str | None = None, embedder: str = "",
            profile: str = "") -> str:
    """The line under a table: what ours was made with (see the module doc)."""
    ns = ", ".join(f"{paper_numbers.DATASET_LABELS.get(d, d)} n={k}" for d, k in n.items())
    parts = [f"{what}. Ours: model {model}" + (f", embedder {embedder}" if embedder else ""),
             f"corpus: {CORPUS}", f"samples: {ns or 'none'}"]
    if judge is not None:
        parts.append(JUDGE_NOTE.format(judge=judge))
    if profile:
        parts.append(f"profile {profile}")
    return "; ".join(parts)


# ------------------------------------------------------------------------- correctness by the judge
@dataclass
class Judged:
    """The judge's verdicts on one run: its summary (`judge_predictions`) and {qid: correct or None}."""

    summary: dict[str, Any]
    verdicts: dict[str, bool | None]


def judge_cells(report: Any, llm: Any) -> dict[str, Judged]:
    """Judge every cell of a grid (`eval.judge.judge_predictions`, written beside each run's
    predictions); keyed by the cell's folder."""
    out = {}
    for cell in report.cells:
        path = Path(cell.out) / PRED_FILE
        summary = judge_predictions(path, llm)
        out[str(cell.out)] = Judged(summary, read_verdicts(path.with_name(f"{path.stem}.judge.jsonl")))
    return out


def judge_controls(reports: Mapping[str, Any], judged: Mapping[str, Judged]) -> pd.DataFrame:
    """Per dataset, how the judge did on its controls (each question's gold answer, another
    question's answer); the controls are the same requests in every run, so one cell tells."""
    recs = []
    for d, report in reports.items():
        s = next((judged[str(c.out)].summary for c in report.cells if str(c.out) in judged), None)
        if s is None or "control_gold_accepted" not in s:
            continue
        recs.append({"dataset": d, "judge": s.get("judge_model"),
                     "golds accepted %": s["control_gold_accepted"], "golds shown": s.get("control_gold_n"),
                     "wrong accepted %": s["control_wrong_accepted"], "wrong shown": s.get("control_wrong_n"),
                     "informative": s.get("judge_informative"), "warning": s.get("judge_warning", "")})
    return pd.DataFrame(recs)


def read_verdicts(path: Path) -> dict[str, bool | None]:
    return {r["qid"]: r["correct"] for r in read_jsonl(path).rows}


# ------------------------------------------------------------------------- Table 1
def result_rows(report: Any, judged: Mapping[str, Judged] | None = None, **labels: Any) -> list[dict[str, Any]]:
    """One flat row per cell of a grid (for `write_summary` and `table1`): the system, dataset,
    n, failures, EM and F1 with their 95% intervals, correctness (judged questions only) with
    its interval and the judge model, and the cost per question."""
    out = []
    for cell in report.cells:
        m = cell.metrics
        top_k = dict(cell.run.cfg).get("top_k")
        cost = m.get("cost_per_question") or {}
        row: dict[str, Any] = {"label": system_label(cell.run.method, top_k), "method": cell.run.method,
                               "top_k": top_k, "config": cell.run.label, "dataset": cell.dataset, "n": m.get("n"),
                               "failed": m.get("failed", 0), "em": m.get("em"), "f1": m.get("f1"),
                               "em_ci95": m.get("em_ci95"), "f1_ci95": m.get("f1_ci95"),
                               "llm_requests_per_q": cost.get("llm_requests"), "seconds_per_q": cost.get("seconds"),
                               "questions_with_issues": m.get("questions_with_issues")}
        j = (judged or {}).get(str(cell.out))
        if j is not None:
            s = j.summary
            row.update(correct=s.get("correctness"), correct_ci95=s.get("correctness_ci95"), judged=s.get("judged"),
                       judge_unparsable=s.get("unparsable"), judge_model=s.get("judge_model"),
                       judge_gold_accepted=s.get("control_gold_accepted"),
                       judge_wrong_accepted=s.get("control_wrong_accepted"),
                       judge_informative=s.get("judge_informative"))
        row.update(labels)
        out.append(row)
    return out


def _order(labels: Iterable[str]) -> list[str]:
    """Our labels in the paper's row order (rows the paper lacks last, in first-seen order)."""
    labels = list(dict.fromkeys(labels))
    known = [l for r in paper_numbers.ROWS for l in labels if paper_row(l) == r]
    return known + [l for l in labels if l not in known]


def table1(rows: Iterable[Mapping[str, Any]], paper_model: str = "phi4",
           datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """Table 1's layout: one line per system, columns (dataset, metric, ours | paper); the paper's
    value is that of the row ours reproduces (`PAPER_ROW`), NaN where it has none; ours is NaN
    where we did not run it."""
    if paper_model not in paper_numbers.TABLE1:
        raise KeyError(f"Table 1 has models {list(paper_numbers.TABLE1)}; got {paper_model!r}")
    rows = list(rows)
    datasets = list(datasets or [d for d in paper_numbers.DATASETS if any(r["dataset"] == d for r in rows)])
    labels = _order(r["label"] for r in rows)
    cols = pd.MultiIndex.from_tuples([(paper_numbers.DATASET_LABELS.get(d, d), paper_numbers.METRIC_LABELS[m], src) for d in datasets
                                      for m in paper_numbers.METRICS for src in ("ours", "paper")],
                                     names=["dataset", "metric", "source"])
    df = pd.DataFrame(math.nan, index=pd.Index(labels, name="system"), columns=cols)
    paper = paper_numbers.TABLE1[paper_model]
    for label in labels:
        for d in datasets:
            theirs = paper.get(paper_row(label), {}).get(d, {})
            for m in paper_numbers.METRICS:
                df.loc[label, (paper_numbers.DATASET_LABELS.get(d, d), paper_numbers.METRIC_LABELS[m], "paper")] = theirs.get(m, math.nan)
    for r in rows:
        if r["dataset"] in datasets:
            for m in paper_numbers.METRICS:
                v = r.get(m)
                df.loc[r["label"], (paper_numbers.DATASET_LABELS.get(r["dataset"], r["dataset"]), paper_numbers.METRIC_LABELS[m], "ours")] = (
                    math.nan if v is None else float(v))
    return df


def paper_table1(paper_model: str = "phi4") -> pd.DataFrame:
    """The paper's Table 1 block of one model, in percent: rows x (dataset, metric)."""
    recs = {label: {(paper_numbers.DATASET_LABELS[d], paper_numbers.METRIC_LABELS[m]): per[d][m] for d in paper_numbers.DATASETS for m in paper_numbers.METRICS}
            for label, per in paper_numbers.TABLE1[paper_model].items()}
    return pd.DataFrame.from_dict(recs, orient="index")


def intervals(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Our scores with their bootstrap 95% intervals, n and failures, one line per (dataset, system)."""
    return pd.DataFrame([{"dataset": r["dataset"], "system": r["label"], "n": r.get("n"), "failed": r.get("failed"),
                          **{f"{paper_numbers.METRIC_LABELS[m]} (95% CI)": ci_cell(r, m) for m in paper_numbers.METRICS},
                          "judged": r.get("judged"), "LLM requests / q": r.get("llm_requests_per_q")}
                         for r in rows])


def answers_frame(report: Any, judged: Mapping[str, Judged], questions: Sequence[Any], width: int = 50) -> pd.DataFrame:
    """One line per question: the gold answer and each system's answer, ✓ / ✗ by the judge (? no verdict)."""
    preds: dict[str, dict[str, tuple[str, bool | None]]] = {}
    for cell in report.cells:
        verdicts = judged[str(cell.out)].verdicts if str(cell.out) in judged else {}
        label = system_label(cell.run.method, dict(cell.run.cfg).get("top_k"))
        for r in cell.rows:
            preds.setdefault(label, {})[r["qid"]] = (r.get("prediction") or "", verdicts.get(r["qid"]))
    recs = []
    for q in questions:
        rec = {"dataset": q.dataset, "question": textwrap.shorten(q.question, width, placeholder="…"),
               "gold": q.answers[0] if q.answers else ""}
        for label in _order(preds):
            if q.qid in preds[label]:
                text, ok = preds[label][q.qid]
                mark = "?" if ok is None else "✓" if ok else "✗"
                rec[label] = f"{mark} {textwrap.shorten(text or '(empty)', width, placeholder='…')}"
        recs.append(rec)
    return pd.DataFrame(recs)


# ------------------------------------------------------------------------- the paper's claims
def check_claims(reports: Mapping[str, Any], claims: Sequence[tuple] | None = None,
                 judged: Mapping[str, Judged] | None = None, alpha: float = 0.05, margin: float = 5.0) -> pd.DataFrame:
    """The paper's claims (`paper_numbers.CLAIMS`) on paired questions (`report.tables.check_paired_claims`).

    `reports` maps a dataset to the grid that ran it; a side (method, top_k) is the cell of that
    method whose configuration pins that top_k (None: none pinned). Correctness needs `judged`."""
    def side_values(side: tuple[str, int | None], dataset: str, metric: str) -> dict[str, float] | None:
        report = reports.get(dataset)
        method, top_k = side
        cells = [c for c in (report.cells if report is not None else ()) if c.dataset == dataset
                 and c.run.method == method and dict(c.run.cfg).get("top_k") == top_k]
        if not cells or (metric == "correct" and str(cells[0].out) not in (judged or {})):
            return None
        verdicts = (judged or {})[str(cells[0].out)].verdicts if metric == "correct" else None
        return question_values(cells[0].rows, metric, verdicts)

    df = check_paired_claims(paper_numbers.CLAIMS if claims is None else claims, side_values,
                             lambda side: system_label(*side), alpha=alpha, margin=margin)
    blind = uninformative_judge(reports, judged)
    if not df.empty and blind:
        df.loc[(df["metric"] == "correct") & df["dataset"].isin(blind) & (df["verdict"] != NOT_RUN),
               "verdict"] = JUDGE_UNINFORMATIVE
    return df


def uninformative_judge(reports: Mapping[str, Any], judged: Mapping[str, Judged] | None) -> set[str]:
    """Datasets on which the judge failed its controls (`eval.judge.control_summary`) in any run:
    a comparison of its verdicts there would only compare noise."""
    return {d for d, report in reports.items() for cell in report.cells
            if (j := (judged or {}).get(str(cell.out))) is not None and j.summary.get("judge_informative") is False}


def claim_verdicts(claims: pd.DataFrame, families: Mapping[str, str] | None = None) -> pd.DataFrame:
    """`report.claims.claim_verdicts` with SA-RAG's claim families by default."""
    return _claim_verdicts(claims, paper_numbers.CLAIM_FAMILIES if families is None else families)


# ------------------------------------------------------------------------- index statistics
INDEX_COLUMNS = {
    "passages": "passages", "chunks": "chunks", "entities_per_chunk": "entities / chunk",
    "relations_per_chunk": "relations / chunk", "chunks_with_zero_entities": "chunks with 0 entities",
    "unparsable_outputs": "unparsable outputs", "outputs": "outputs", "unparsable_rate": "unparsable rate",
    "cut_off_outputs_salvaged": "cut-off outputs kept", "repairs_attempted": "repairs tried",
    "repairs_succeeded": "repairs ok",
    "dropped_relations": "relations dropped", "entity_nodes": "entities", "related_to_triples": "related_to links",
    "llm_calls": "LLM calls", "prompt_tokens": "prompt tokens", "completion_tokens": "completion tokens",
    "seconds_this_build": "wall s (build)",
}


def index_table(stats: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The index statistics of each corpus's text KG (`build_text_kg` stats), one line per dataset,
    with what the corpus is (the pooled paragraphs of the sampled questions, titles kept)."""
    recs = []
    for dataset, s in stats.items():
        rec: dict[str, Any] = {"dataset": paper_numbers.DATASET_LABELS.get(dataset, dataset), "corpus": s.get("corpus", CORPUS),
                               "model": s.get("model")}
        rec.update({label: s.get(key) for key, label in INDEX_COLUMNS.items()})
        recs.append(rec)
    return pd.DataFrame(recs).set_index("dataset") if recs else pd.DataFrame()


def index_rows(stats: Mapping[str, Mapping[str, Any]], **labels: Any) -> list[dict[str, Any]]:
    """Flat rows of the index statistics for `write_summary`."""
    keep = ("corpus", "model", "questions", "seed", "questions_without_paragraphs", *INDEX_COLUMNS, "llm_requests",
            "entity_types_coerced", "description_nodes", "chunk_nodes", "relation_mentions")
    return [{"label": f"index statistics: {dataset}", "dataset": dataset, **{k: s.get(k) for k in keep},
             "requests": s.get("request_ids"), **labels}   # what REPORT's cost table prices from the LLM cache
            for dataset, s in stats.items()]


def type_counts(tables: Any) -> pd.Series:
    """Entities per type (PERSON, ORGANIZATION, GPE, MISC) of a text KG's side tables."""
    return pd.Series(list(tables.entity_types.values()), dtype="object").value_counts()


def failures_frame(tables: Any, limit: int = 5, width: int = 100) -> pd.DataFrame:
    """The first `limit` unparsable extraction outputs: chunk, stage, reason and the output's start."""
    return pd.DataFrame([{"chunk": f["chunk"], "stage": f["stage"],
                          "reason": textwrap.shorten(f["reason"], width, placeholder="…"),
                          "output": textwrap.shorten(f.get("output", ""), width, placeholder="…")}
                         for f in tables.unparsable[:limit]], columns=["chunk", "stage", "reason", "output"])
