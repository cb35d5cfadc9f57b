"""TCR-QF (Huang et al.) tables: Tables 1 and 2 with ours beside the paper's, the KG statistics
of notebook 40, EM / F1 round by round (Fig. 3), the KG's growth round by round (Table 3 /
Fig. 4), and the paper's claims tested on paired questions.

Every table of ours says what it was made with (`caption`) and what each system cost: LLM calls
per question (every request, cached or not; ToG's beam search sends one relation-pruning call
per beam entity and one entity-scoring call per kept relation, per depth) and LLM seconds per
question as first computed (a cache hit counts the seconds it once took). Scores are percent;
the paper's EM and F1 (printed as fractions) are shown x100.

Rounds. A feedback variant answers at round 0, then after each feedback round answers again
(`trace["rounds"]`, one entry per answer); a question that stopped early (nothing missing, or
its KG unchanged) keeps its last answer in every later round. The feedback that follows the
answer of round r adds triples whose origin is "<qid>#<r>:<j>" (QF) or "<qid>#<r>:answer" (AF),
so round r's KG is the initial KG plus every triple with origin round < r: round 0 is the KG
before any feedback, as in the paper's Table 3.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ...eval.metrics import answer_metric_for, exact_match
from ...jsonl import read_jsonl
from ...kg.extraction import normalize
from ...kg.sources import JOURNAL_FILE
from ...methods.tcr_qf import VARIANTS
from ..claims import claim_verdicts as _claim_verdicts
from ..claims import question_values, with_metric
from . import paper_numbers
from ..tables import check_paired_claims, ci_cell

CORPUS = "pooled paragraphs of the sampled questions, chunks of 512 tokens with 64 overlap, titles kept"
COST_LABELS = {"llm_requests_per_q": "LLM calls / q", "llm_seconds_per_q": "LLM s / q"}
# ours only: the paper reports EM and F1, but a small model that answers in a sentence scores EM 0
# even when the sentence holds the answer; Acc (a gold answer occurs in the raw answer) shows that
OURS_ONLY_LABELS = {"acc": "Acc (gold in answer)"}


def system_label(method: str) -> str:
    """The variant's label (`methods.tcr_qf.VARIANTS`), e.g. "ToG (w/o TCR & QF)"."""
    return VARIANTS[method].label if method in VARIANTS else method


def dataset_label(dataset: str) -> str:
    return paper_numbers.DATASET_LABELS.get(dataset, dataset)


def settings_note(cfg: Any) -> str:
    """The settings a TCR-QF run used, in one line (ToG's beam, the loop's limits, budgets)."""
    if cfg is None:
        return ""
    c = cfg if isinstance(cfg, Mapping) else cfg.__dict__
    return (f"ToG width {c.get('width')}, depth {c.get('depth')}; feedback at most {c.get('max_iterations')} rounds "
            f"(the paper: 20), {c.get('max_missing')} missing questions per round, {c.get('feedback_top_k')} chunks "
            f"per question; max tokens {c.get('max_tokens')} (reasoning), {c.get('extract_max_tokens')} "
            f"(extraction), {c.get('answer_max_tokens')} (LLM only); local search budget {c.get('local_budget')} "
            "tokens")


def caption(what: str, model: str, n: Mapping[str, int], *, embedder: str = "", profile: str = "",
            cfg: Any = None) -> str:
    """The line under a table: what ours was made with (see the module doc)."""
    ns = ", ".join(f"{dataset_label(d)} n={k}" for d, k in n.items())
    parts = [f"{what}. Ours: model {model}" + (f", embedder {embedder}" if embedder else ""),
             f"corpus: {CORPUS}", f"samples: {ns or 'none'}"]
    note = settings_note(cfg)
    if note:
        parts.append(note)
    if profile:
        parts.append(f"profile {profile}")
    return "; ".join(parts)


# ------------------------------------------------------------------------- one run per cell
def _mean(values: Iterable[float]) -> float | None:
    vals = list(values)
    return round(sum(vals) / len(vals), 2) if vals else None


def result_rows(report: Any, **labels: Any) -> list[dict[str, Any]]:
    """One flat row per cell of a grid (for `write_summary` and the tables): the system, dataset,
    n, failures, EM, F1 and Acc with their 95% intervals, and per question the LLM calls, tokens, LLM
    seconds as first computed, wall seconds in this run, answers (rounds) and triples added."""
    out = []
    for cell in report.cells:
        m = cell.metrics
        cost = m.get("cost_per_question") or {}
        traces = [r.get("trace") or {} for r in cell.rows]
        llm_s = cost.get("llm_seconds")
        if llm_s is not None or cost.get("llm_cached_seconds") is not None:
            llm_s = round(float(llm_s or 0.0) + float(cost.get("llm_cached_seconds") or 0.0), 2)
        row: dict[str, Any] = {
            "label": system_label(cell.run.method), "method": cell.run.method, "config": cell.run.label,
            "dataset": cell.dataset, "n": m.get("n"), "failed": m.get("failed", 0), "em": m.get("em"),
            "f1": m.get("f1"), "acc": m.get("acc"),
            "em_ci95": m.get("em_ci95"), "f1_ci95": m.get("f1_ci95"), "acc_ci95": m.get("acc_ci95"),
            "llm_requests_per_q": cost.get("llm_requests"), "llm_seconds_per_q": llm_s,
            "seconds_per_q": cost.get("seconds"), "prompt_tokens_per_q": cost.get("llm_total_prompt_tokens"),
            "completion_tokens_per_q": cost.get("llm_total_completion_tokens"),
            "answers_per_q": _mean(len(t.get("rounds") or []) for t in traces),
            "triples_added_per_q": _mean(len(t.get("kg_added") or []) for t in traces),
            "questions_with_issues": m.get("questions_with_issues")}
        row.update(labels)
        out.append(row)
    return out


def _layout(rows: Iterable[Mapping[str, Any]], order: Sequence[str], paper: Mapping[str, Any],
            row_of: Mapping[str, str], datasets: Sequence[str], paper_datasets: Sequence[str] = (),
            paper_only: Mapping[str, str] | None = None, cost: bool = True) -> pd.DataFrame:
    """Ours beside the paper's: one line per system we ran (the paper's order), plus the paper's
    rows we have no counterpart for; columns (dataset, EM | F1, ours | paper) and the cost
    columns of ours; datasets we lack carry the paper's columns only."""
    rows = [r for r in rows if r["dataset"] in datasets]
    ran = list(dict.fromkeys(r["method"] for r in rows))
    methods = [m for m in order if m in ran] + [m for m in ran if m not in order]
    index = [system_label(m) for m in methods]
    paper_row_of_label = {system_label(m): row_of.get(m) for m in methods}
    extra = {f"{row} (paper only)": row for row in (paper_only or {})}
    # the paper-only rows go where the paper prints them
    printed = list(paper)
    for label, row in extra.items():
        before = [i for i, l in enumerate(index) if paper_row_of_label.get(l) in printed
                  and printed.index(paper_row_of_label[l]) > printed.index(row)]
        at = before[0] if before else len(index)
        index.insert(at, label)
        paper_row_of_label[label] = row
    cols = []
    for d in datasets:
        cols += [(dataset_label(d), paper_numbers.METRIC_LABELS[m], src) for m in paper_numbers.METRICS for src in ("ours", "paper")]
        cols += [(dataset_label(d), name, "ours") for name in OURS_ONLY_LABELS.values()]
        if cost:
            cols += [(dataset_label(d), COST_LABELS[k], "ours") for k in COST_LABELS]
    for d in paper_datasets:
        cols += [(f"{dataset_label(d)} (not in our data)", paper_numbers.METRIC_LABELS[m], "paper") for m in paper_numbers.METRICS]
    df = pd.DataFrame(math.nan, index=pd.Index(index, name="system"),
                      columns=pd.MultiIndex.from_tuples(cols, names=["dataset", "metric", "source"]))
    for label in index:
        theirs = paper.get(paper_row_of_label.get(label) or "", {})
        for d in datasets:
            for m in paper_numbers.METRICS:
                df.loc[label, (dataset_label(d), paper_numbers.METRIC_LABELS[m], "paper")] = theirs.get(d, {}).get(m, math.nan)
        for d in paper_datasets:
            for m in paper_numbers.METRICS:
                df.loc[label, (f"{dataset_label(d)} (not in our data)", paper_numbers.METRIC_LABELS[m], "paper")] = \
                    theirs.get(d, {}).get(m, math.nan)
    for r in rows:
        label, ds = system_label(r["method"]), dataset_label(r["dataset"])
        for m in paper_numbers.METRICS:
            v = r.get(m)
            df.loc[label, (ds, paper_numbers.METRIC_LABELS[m], "ours")] = math.nan if v is None else float(v)
        for k, name in {**OURS_ONLY_LABELS, **(COST_LABELS if cost else {})}.items():
            v = r.get(k)
            df.loc[label, (ds, name, "ours")] = math.nan if v is None else float(v)
    return df


def table1(rows: Iterable[Mapping[str, Any]], datasets: Sequence[str] | None = None, *,
           paper_only: bool = True, cost: bool = True) -> pd.DataFrame:
    """Table 1's layout: each system we ran beside the paper's row it stands for (our LLM-only
    row beside GPT-4o-mini, the model of every other row; our GraphRAG-style local search
    beside GraphRAG), the paper's GPT-4o row, and with `paper_only` the paper's MuSiQue-Full
    and ConcurrentQA columns, which our data lacks."""
    rows = list(rows)
    datasets = list(datasets or [d for d in paper_numbers.DATASETS if any(r["dataset"] == d for r in rows)])
    order = sorted(paper_numbers.TABLE1_ROW, key=lambda m: paper_numbers.TABLE1_ROWS.index(paper_numbers.TABLE1_ROW[m]))
    lacking = [d for d in paper_numbers.PAPER_DATASETS if d not in paper_numbers.DATASETS] if paper_only else []
    return _layout(rows, order, paper_numbers.TABLE1, paper_numbers.TABLE1_ROW, datasets, lacking,
                   paper_numbers.PAPER_ONLY_ROWS if paper_only else None, cost)


def table2(rows: Iterable[Mapping[str, Any]], datasets: Sequence[str] | None = None, *,
           cost: bool = True) -> pd.DataFrame:
    """Table 2's layout: ToG, TCR (w/o QF), QF (w/o TCR), TCR-AF, TCR-QF beside the paper's
    ablation on 2WikiMultiHopQA and HotpotQA (another dataset we ran gets ours only)."""
    rows = list(rows)
    datasets = list(datasets or [d for d in paper_numbers.DATASETS if any(r["dataset"] == d for r in rows)])
    order = sorted(paper_numbers.TABLE2_ROW, key=lambda m: paper_numbers.TABLE2_ROWS.index(paper_numbers.TABLE2_ROW[m]))
    return _layout(rows, order, paper_numbers.TABLE2, paper_numbers.TABLE2_ROW, datasets, (), None, cost)


def paper_table(which: int = 1) -> pd.DataFrame:
    """The paper's Table 1 or 2 as printed, in percent: rows x (dataset, metric)."""
    table, datasets = (paper_numbers.TABLE1, paper_numbers.PAPER_DATASETS) if which == 1 else (paper_numbers.TABLE2, paper_numbers.TABLE2_DATASETS)
    recs = {label: {(dataset_label(d), paper_numbers.METRIC_LABELS[m]): per[d][m] for d in datasets for m in paper_numbers.METRICS}
            for label, per in table.items()}
    return pd.DataFrame.from_dict(recs, orient="index")


def intervals(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Our scores with their bootstrap 95% intervals, n, failures and the cost per question, one
    line per (dataset, system)."""
    return pd.DataFrame([{"dataset": r["dataset"], "system": r["label"], "n": r.get("n"), "failed": r.get("failed"),
                          **{f"{paper_numbers.METRIC_LABELS[m]} (95% CI)": ci_cell(r, m) for m in paper_numbers.METRICS},
                          "LLM calls / q": r.get("llm_requests_per_q"), "LLM s / q": r.get("llm_seconds_per_q"),
                          "wall s / q (this run)": r.get("seconds_per_q"),
                          "prompt tokens / q": r.get("prompt_tokens_per_q"), "answers / q": r.get("answers_per_q"),
                          "triples added / q": r.get("triples_added_per_q")}
                         for r in rows])


def cost_note(rows: Iterable[Mapping[str, Any]]) -> str:
    """One sentence per dataset: LLM calls and LLM seconds per question of each system, most first."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["dataset"], []).append(r)
    parts = []
    for d, rs in by.items():
        rs = sorted(rs, key=lambda r: -(r.get("llm_requests_per_q") or 0))
        cells = [f"{r['label']} {r.get('llm_requests_per_q') or 0:.1f} calls, {r.get('llm_seconds_per_q') or 0:.1f} s"
                 for r in rs]
        parts.append(f"{dataset_label(d)}, per question: " + "; ".join(cells))
    return ". ".join(parts) + ("." if parts else "")


def answers_frame(report: Any, questions: Sequence[Any], width: int = 45) -> pd.DataFrame:
    """One line per question: the gold answer and each system's answer, ✓ / ✗ by exact match."""
    preds: dict[str, dict[str, str]] = {}
    for cell in report.cells:
        for r in cell.rows:
            preds.setdefault(system_label(cell.run.method), {})[r["qid"]] = r.get("prediction") or ""
    recs = []
    for q in questions:
        rec = {"dataset": q.dataset, "question": textwrap.shorten(q.question, width, placeholder="…"),
               "gold": q.answers[0] if q.answers else ""}
        for label, got in preds.items():
            if q.qid in got:
                mark = "✓" if exact_match(got[q.qid], q.answers) else "✗"
                rec[label] = f"{mark} {textwrap.shorten(got[q.qid] or '(empty)', width, placeholder='…')}"
        recs.append(rec)
    return pd.DataFrame(recs)


# ------------------------------------------------------------------------- the paper's claims
def check_claims(reports: Mapping[str, Any], claims: Sequence[tuple] | None = None, alpha: float = 0.05,
                 margin: float = 5.0) -> pd.DataFrame:
    """The paper's claims (`paper_numbers.CLAIMS`) on paired questions (`report.tables.check_paired_claims`).

    `reports` maps a dataset to the grid that ran it; a side is a method, the cell of that method
    on the dataset (a claim whose side was not run reads 'not run'), or (method, round) for the
    round claims (`paper_numbers.ROUND_CLAIMS`): that cell's answers at the round (None: final)."""
    def side_values(side: str | tuple[str, int | None], dataset: str, metric: str) -> dict[str, float] | None:
        method, rnd = side if isinstance(side, tuple) else (side, None)
        report = reports.get(dataset)
        cells = [c for c in (report.cells if report is not None else ()) if c.dataset == dataset
                 and c.run.method == method]
        if not cells:
            return None
        rows = cells[0].rows if rnd is None else [at_round(row, rnd) for row in cells[0].rows]
        return question_values(rows, metric)

    return check_paired_claims(paper_numbers.CLAIMS if claims is None else claims, side_values, side_label, alpha=alpha,
                               margin=margin)


def side_label(side: str | tuple[str, int | None]) -> str:
    """A claim side's name: the variant's label, with its round for a (method, round) side."""
    if isinstance(side, tuple):
        method, rnd = side
        return f"{system_label(method)} ({'final' if rnd is None else f'round {rnd}'})"
    return system_label(side)


def at_round(row: Mapping[str, Any], r: int) -> dict[str, Any]:
    """A prediction row as it stood at round r (`answer_at`): its answer then, scored like any row;
    only a question that failed and had no answer at round r counts as failed there."""
    rounds = (row.get("trace") or {}).get("rounds") or []
    return {**row, "prediction": answer_at(row, r), "failed": bool(row.get("failed")) and r >= len(rounds)}


def claim_verdicts(claims: pd.DataFrame) -> pd.DataFrame:
    """One verdict per claim family, dataset and metric: confirmed when every comparison is,
    refuted when any is, 'not run' when none ran, else not separable at this n."""
    return _claim_verdicts(claims, paper_numbers.CLAIM_FAMILIES)


# ------------------------------------------------------------------------- rounds (Fig. 3)
def answer_at(row: Mapping[str, Any], r: int) -> str:
    """The answer of a prediction at round r: its r-th answer, or after its last one the final
    prediction (a question that stopped early keeps its last answer; a failed one its empty answer)."""
    rounds = (row.get("trace") or {}).get("rounds") or []
    if r < len(rounds):
        return str(rounds[r].get("answer") or "")
    return str(row.get("prediction") or "")


def last_round(rows: Iterable[Mapping[str, Any]]) -> int:
    """The last round any prediction answered at (0 for variants without feedback)."""
    return max([len((r.get("trace") or {}).get("rounds") or []) - 1 for r in rows] + [0])


def origin_round(origin: str) -> int:
    """The round whose feedback added a triple: "<qid>#<round>:<j>" or "<qid>#<round>:answer"."""
    try:
        return int(str(origin).rpartition("#")[2].split(":", 1)[0])
    except ValueError:
        raise ValueError(f"triple origin {origin!r}: expected '<qid>#<round>:<j>' or '<qid>#<round>:answer'") from None


def round_scores(rows: Sequence[Mapping[str, Any]], max_round: int | None = None, **labels: Any) -> pd.DataFrame:
    """EM and F1 (percent) of the answers at each round 0..max_round (default: the last round
    any question reached), with how many questions still answered at that round and the triples
    the feedback before it added over all questions."""
    rows = list(rows)
    top = last_round(rows) if max_round is None else int(max_round)
    added: dict[int, int] = {}
    for row in rows:
        for t in (row.get("trace") or {}).get("kg_added") or []:
            k = origin_round(t["origin"])
            added[k] = added.get(k, 0) + 1
    recs = []
    for r in range(top + 1):
        em = [exact_match(answer_at(row, r), row.get("answers") or []) for row in rows]
        fs = [answer_metric_for("f1", row.get("dataset"))(answer_at(row, r), row.get("answers") or []) for row in rows]
        em, fs = [v for v in em if v is not None], [v for v in fs if v is not None]
        recs.append({**labels, "round": r, "n": len(rows),
                     "answering": sum(len((row.get("trace") or {}).get("rounds") or []) > r for row in rows),
                     "em": round(100 * sum(em) / len(em), 2) if em else math.nan,
                     "f1": round(100 * sum(fs) / len(fs), 2) if fs else math.nan,
                     "triples_added_before": sum(v for k, v in added.items() if k < r)})
    return pd.DataFrame(recs)


def rounds_frame(report: Any, max_round: int | None = None) -> pd.DataFrame:
    """`round_scores` of every cell of a grid (Fig. 3's data), labelled by system and dataset;
    every cell up to the same last round, so a variant without feedback reads as a flat line."""
    top = max_round if max_round is not None else max([last_round(c.rows) for c in report.cells] + [0])
    frames = [round_scores(c.rows, top, label=system_label(c.run.method), method=c.run.method, dataset=c.dataset)
              for c in report.cells]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def rounds_pivot(frame: pd.DataFrame, metric: str = "em") -> pd.DataFrame:
    """Fig. 3's values as a table: one line per (dataset, system), one column per round."""
    if frame.empty:
        return pd.DataFrame()
    table = frame.pivot_table(index=["dataset", "label"], columns="round", values=metric, sort=False)
    table.columns = [f"round {c}" for c in table.columns]
    return table


def stopped_table(reports: Mapping[str, Any]) -> pd.DataFrame:
    """Per dataset and system, how its questions' feedback loops ended (`stopped_counts`)."""
    recs = [{"dataset": c.dataset, "system": system_label(c.run.method), **stopped_counts(c.rows)}
            for report in reports.values() for c in report.cells]
    if not recs:
        return pd.DataFrame()
    df = pd.DataFrame(recs)
    counts = [c for c in df.columns if c not in ("dataset", "system")]
    df[counts] = df[counts].fillna(0).astype(int)
    return df


def stopped_counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How the feedback loops ended: nothing missing, KG unchanged, I_max reached, failed."""
    out: dict[str, int] = {}
    for row in rows:
        t = row.get("trace") or {}
        why = str(t.get("stopped") or ("failed" if row.get("failed") else "no feedback"))
        why = why.split(": ", 1)[1] if why.startswith("round ") else why
        out[why] = out.get(why, 0) + 1
    return out


def question_rounds(rows: Sequence[Mapping[str, Any]], width: int = 40) -> pd.DataFrame:
    """One line per question of a feedback run: answers given, how the loop stopped, triples the
    question added, the first and the final answer, each ✓ / ✗ by exact match."""
    recs = []
    for row in rows:
        t = row.get("trace") or {}
        first, final = answer_at(row, 0), str(row.get("prediction") or "")
        mark = lambda a: "✓" if exact_match(a, row.get("answers") or []) else "✗"  # noqa: E731
        recs.append({"qid": row["qid"], "gold": (row.get("answers") or [""])[0], "answers": len(t.get("rounds") or []),
                     "stopped": t.get("stopped") or ("failed" if row.get("failed") else ""),
                     "triples added": len(t.get("kg_added") or []),
                     "missing asked": sum(len(x.get("missing") or []) for x in t.get("rounds") or []),
                     "round 0": f"{mark(first)} {textwrap.shorten(first or '(empty)', width, placeholder='…')}",
                     "final": f"{mark(final)} {textwrap.shorten(final or '(empty)', width, placeholder='…')}"})
    return pd.DataFrame(recs)


# ------------------------------------------------------------------------- KG growth (Table 3, Fig. 4)
def kg_growth(rows: Sequence[Mapping[str, Any]], initial_nodes: int, initial_edges: int,
              initial_entities: Iterable[str], max_round: int | None = None) -> pd.DataFrame:
    """Table 3 of one feedback run, per round r = 0..max_round (default: the last round reached):
    the KG's nodes and edges (the initial KG plus every triple added by the feedback of rounds
    before r, over all questions, from each prediction's `trace["kg_added"]`), the triples and
    new entities that makes, EM and F1 of the answers at round r (a question that stopped early
    keeps its last answer), and the cumulative Δ of each against round 0.

    Edges count distinct (head, relation, tail) triples; nodes count the distinct entity names
    of those triples (normalized as the KG keys them) not in `initial_entities` (the KG's keys
    before any feedback). An entity feedback extracted without a relation is not recorded in a
    trace, so it is not counted (the run's own KG, `trace["kg_size"]`, counts it)."""
    rows = list(rows)
    known = set(initial_entities)
    top = last_round(rows) if max_round is None else int(max_round)
    triples: dict[tuple[str, str, str], int] = {}   # triple -> the round it was first added in
    entities: dict[str, int] = {}                    # new entity key -> the round it first appeared in
    for row in rows:
        for t in (row.get("trace") or {}).get("kg_added") or []:
            k = origin_round(t["origin"])
            key = (normalize(t["head"]), str(t["relation"]), normalize(t["tail"]))
            triples[key] = min(k, triples.get(key, k))
            for name in (key[0], key[2]):
                if name and name not in known:
                    entities[name] = min(k, entities.get(name, k))
    scores = round_scores(rows, top).set_index("round")
    recs = []
    for r in range(top + 1):
        new_t = sum(k < r for k in triples.values())
        new_e = sum(k < r for k in entities.values())
        recs.append({"round": r, "nodes": int(initial_nodes) + new_e, "edges": int(initial_edges) + new_t,
                     "new_entities": new_e, "new_triples": new_t, "em": scores.loc[r, "em"], "f1": scores.loc[r, "f1"],
                     "answering": int(scores.loc[r, "answering"]), "n": int(scores.loc[r, "n"])})
    df = pd.DataFrame(recs)
    for c in ("nodes", "edges", "em", "f1"):
        df[f"delta_{c}"] = df[c] - df[c].iloc[0] if len(df) else []
    return df


def final_kg_size(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's own KG after its last question (`trace["kg_size"]`, questions in run order):
    the check on `kg_growth`'s last round (equal edges; nodes >= ours, see there)."""
    for row in reversed(list(rows)):
        size = (row.get("trace") or {}).get("kg_size")
        if size:
            return dict(size)
    return {}


def table3(growth: pd.DataFrame, paper: bool = True) -> pd.DataFrame:
    """Table 3's layout: one line per round and a Δ line (last round minus round 0); Nodes,
    Edges, EM and F1, ours beside the paper's (2WikiMultiHopQA, rounds 0-10)."""
    metrics = {"nodes": "Nodes", "edges": "Edges", "em": "EM", "f1": "F1"}
    ours = growth.set_index("round") if len(growth) else pd.DataFrame(columns=list(metrics))
    theirs = {r["round"]: r for r in paper_numbers.TABLE3} if paper else {}
    rounds = sorted(set(int(r) for r in ours.index) | set(theirs))
    sources = ("ours", "paper") if paper else ("ours",)
    cols = pd.MultiIndex.from_tuples([(label, s) for label in metrics.values() for s in sources],
                                     names=["metric", "source"])
    df = pd.DataFrame(math.nan, index=pd.Index([str(r) for r in rounds] + ["Δ"], name="round"), columns=cols)
    for r in rounds:
        for key, label in metrics.items():
            if r in ours.index:
                df.loc[str(r), (label, "ours")] = float(ours.loc[r, key])
            if paper and r in theirs:
                df.loc[str(r), (label, "paper")] = float(theirs[r][key])
    for key, label in metrics.items():
        if len(ours):
            df.loc["Δ", (label, "ours")] = float(ours[key].iloc[-1] - ours[key].iloc[0])
        if paper:
            df.loc["Δ", (label, "paper")] = float(paper_numbers.TABLE3_DELTA[key])
    return df


def paper_growth() -> pd.DataFrame:
    """The paper's Table 3 as a growth frame (the columns of `kg_growth`), for Fig. 4."""
    df = pd.DataFrame(paper_numbers.TABLE3)
    for c in ("nodes", "edges", "em", "f1"):
        df[f"delta_{c}"] = df[c] - df[c].iloc[0]
    return df


# ------------------------------------------------------------------------- KG construction (notebook 40)
KG_COLUMNS = {
    "questions": "questions", "passages": "passages", "chunks": "chunks", "nodes": "nodes", "edges": "edges",
    "entities_per_chunk": "entities / chunk", "relations_per_chunk": "relations / chunk",
    "chunks_with_zero_entities": "chunks with 0 entities", "failed_outputs": "failed outputs",
    "records_rejected": "records rejected", "unparsable_record_rate": "unparsable record rate",
    "unregistered_eid_relations": "relations to unregistered EIDs", "quotes_not_in_chunk": "quotes not in chunk",
    "quote_check": "quote check", "relations_kept": "relations kept", "relations_flagged": "relations flagged",
    "relations_dropped": "relations dropped", "edges_kept": "edges kept",
    "ignored_lines": "lines ignored", "llm_calls": "LLM calls", "prompt_tokens": "prompt tokens",
    "completion_tokens": "completion tokens", "seconds_this_build": "wall s (build)",
}


def _per(a: Any, b: Any, digits: int = 2) -> float | None:
    try:
        return round(float(a) / float(b), digits) if a is not None and b else None
    except (TypeError, ValueError):
        return None


def kg_table(stats: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The statistics of each corpus's KG (`kg.tcr_kg.build_stats`), one line per dataset, with
    the cost per chunk and per question and, for scale, the paper's 2Wiki KG per question."""
    recs = []
    for dataset, s in stats.items():
        rec: dict[str, Any] = {"dataset": dataset_label(dataset), "corpus": s.get("corpus"), "model": s.get("model"),
                               "tokenizer": s.get("tokenizer")}
        rec.update({label: s.get(key) for key, label in KG_COLUMNS.items()})
        rec["LLM calls / chunk"] = _per(s.get("llm_calls"), s.get("chunks"))
        rec["completion tokens / chunk"] = _per(s.get("completion_tokens"), s.get("chunks"), 1)
        rec["wall s / chunk (build)"] = _per(s.get("seconds_this_build"), s.get("chunks_extracted_this_build"), 1)
        rec["nodes / question"] = _per(s.get("nodes"), s.get("questions"), 1)
        rec["edges / question"] = _per(s.get("edges"), s.get("questions"), 1)
        recs.append(rec)
    return pd.DataFrame(recs).set_index("dataset") if recs else pd.DataFrame()


def paper_kg_scale() -> dict[str, Any]:
    """The paper's initial 2Wiki KG (Table 3, round 0) over its 1,200 questions' contexts."""
    r0, n = paper_numbers.TABLE3[0], paper_numbers.SAMPLE_SIZES["2wiki"]
    return {"dataset": "2WikiMultiHopQA (paper)", "questions": n, "nodes": r0["nodes"], "edges": r0["edges"],
            "nodes / question": round(r0["nodes"] / n, 1), "edges / question": round(r0["edges"] / n, 1),
            "source": "Table 3, round 0; §4: 1,200 questions"}


def kg_cost(stats: Mapping[str, Mapping[str, Any]], paper_n: int = paper_numbers.SAMPLE_SIZES["2wiki"]) -> pd.DataFrame:
    """What extraction cost per corpus: one LLM call per chunk, tokens, the wall time of the build
    that made it (a resumed build counts its last part), per chunk and per question, and what the
    same rate would take for 100 questions and for the paper's sample (1,200 questions)."""
    recs = []
    for dataset, s in stats.items():
        per_chunk = _per(s.get("seconds_this_build"), s.get("chunks_extracted_this_build"), 2)
        chunks_per_q = _per(s.get("chunks"), s.get("questions"), 2)
        per_q = per_chunk * chunks_per_q if per_chunk is not None and chunks_per_q is not None else None
        recs.append({"dataset": dataset_label(dataset), "chunks": s.get("chunks"), "LLM calls": s.get("llm_calls"),
                     "prompt tokens": s.get("prompt_tokens"), "completion tokens": s.get("completion_tokens"),
                     "chunks extracted (build)": s.get("chunks_extracted_this_build"),
                     "wall s (build)": s.get("seconds_this_build"), "wall s / chunk": per_chunk,
                     "chunks / question": chunks_per_q, "wall s / question": None if per_q is None else round(per_q, 1),
                     "hours for 100 questions": None if per_q is None else round(100 * per_q / 3600, 2),
                     f"hours for {paper_n:,} questions": None if per_q is None else round(paper_n * per_q / 3600, 1)})
    return pd.DataFrame(recs).set_index("dataset") if recs else pd.DataFrame()


def kg_rows(stats: Mapping[str, Mapping[str, Any]], **labels: Any) -> list[dict[str, Any]]:
    """Flat rows of the KG statistics for `write_summary` (the rejection reasons as JSON text)."""
    keep = ("corpus", "model", "tokenizer", "chunk_size", "chunk_overlap", "max_tokens", "seed",
            "questions_without_paragraphs", "entity_records", "relation_records", "llm_requests",
            "chunks_extracted_this_build", "llm_calls_this_build", *KG_COLUMNS)
    return [{"label": f"KG statistics: {dataset}", "dataset": dataset, **{k: s.get(k) for k in keep},
             "rejected_by_reason": json.dumps(s.get("rejected_by_reason") or {}, sort_keys=True),
             "requests": s.get("request_ids"), **labels}   # what REPORT's cost table prices from the LLM cache
            for dataset, s in stats.items()]


def rejection_reasons(stats: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Records the parser rejected, by reason (rows) and dataset (columns)."""
    df = pd.DataFrame({dataset_label(d): dict(s.get("rejected_by_reason") or {}) for d, s in stats.items()})
    return df.fillna(0).astype(int) if not df.empty else df


def journal(built: Any) -> list[dict[str, Any]]:
    """The extraction journal of a built TCR-QF KG (one record per chunk; [] if not kept)."""
    folder = (getattr(built, "extra", None) or {}).get("tcr_folder")
    path = Path(folder) / JOURNAL_FILE if folder else None
    if path is None or not path.is_file():
        return []
    return read_jsonl(path).rows


def rejected_frame(records: Iterable[Mapping[str, Any]], limit: int = 8, width: int = 100) -> pd.DataFrame:
    """The first `limit` rejected records of the journal: chunk, reason and the record, and the
    failed outputs (no valid entity record, prompt too long) with the start of the output."""
    out = []
    for rec in records:
        if rec.get("failure"):
            out.append({"chunk": rec.get("chunk"), "reason": f"failed output: {rec['failure']}",
                        "record": textwrap.shorten(rec.get("output") or "", width, placeholder="…")})
        for x in rec.get("rejected") or []:
            out.append({"chunk": rec.get("chunk"), "reason": x.get("reason", ""),
                        "record": textwrap.shorten(str(x.get("record", "")), width, placeholder="…")})
    return pd.DataFrame(out[:limit], columns=["chunk", "reason", "record"])
