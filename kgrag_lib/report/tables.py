"""Tables every paper's report shares: runs averaged over seeds, 'mean ± std' cells, JSON rows,
markdown, and the papers' claims tested on paired questions.

One *row* is one run (one method, dataset, setting and seed) as `metrics_row` flattens it;
`aggregate_seeds` turns rows into mean/std per setting. The standard deviation is the sample
one (ddof=1) across seeds, as is usual for "std over samples"; with a single seed it is
undefined (NaN) and shown as such, never as 0. All scores are percent (0-100).
`check_paired_claims` tests a paper's "A beats B" claims on per-question scores of the same
questions. What lays such rows beside one paper's published numbers lives in that paper's
package (`report.metaqa.tables`, `report.kg_infused.tables`, `report.sa_rag.tables`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..eval.metrics import score_items
from ..eval.paired import NOT_RUN, claim_fields, paired_test, verdict
from ..rundir import PRED_FILE, read_predictions

SCORE_COLUMNS = ("hit1", "hit1_exact", "hit1_first", "em", "f1", "acc", "yesno_agree")
# What a question cost, as a run's metrics.json holds it per question (`cost_per_question`).
COST_KEYS = ("llm_requests", "llm_total_prompt_tokens", "llm_total_completion_tokens", "seconds")


def metrics_row(metrics: Mapping[str, Any], **labels: Any) -> dict[str, Any]:
    """One flat row for one run: its labels, its scores (percent), failures and cost per question."""
    row: dict[str, Any] = dict(labels)
    for key in ("n", "failed", *SCORE_COLUMNS):
        if key in metrics:
            row[key] = metrics[key]
    for key, value in (metrics.get("cost_per_question") or {}).items():
        row[f"{key}_per_q"] = value
    return row


def ci_columns(metrics: Mapping[str, Any], names: Sequence[str] = ("hit1",)) -> dict[str, float]:
    """`<name>_ci95_low` / `<name>_ci95_high` of a run's bootstrap 95% intervals (for figures that
    draw a single seed's interval where a spread over seeds is undefined)."""
    out: dict[str, float] = {}
    for k in names:
        lo, hi = metrics.get(f"{k}_ci95") or (None, None)
        out[f"{k}_ci95_low"], out[f"{k}_ci95_high"] = lo, hi
    return out


def metrics_table(metrics: Mapping[str, Any]) -> pd.DataFrame:
    """A run's metrics.json as a reader's table: one row per score (percent) with its bootstrap 95%
    interval, then the questions, failures and the cost of one question; what a raw dict shows
    in a notebook, without the nesting."""
    rows = [{"metric": k, "value": metrics[k], "ci95 low": (metrics.get(f"{k}_ci95") or [None, None])[0],
             "ci95 high": (metrics.get(f"{k}_ci95") or [None, None])[1]} for k in SCORE_COLUMNS if k in metrics]
    rows += [{"metric": k, "value": metrics[k]} for k in ("n", "failed", "questions_with_issues") if k in metrics]
    cost = metrics.get("cost_per_question") or {}
    rows += [{"metric": f"{k} per question", "value": cost[k]}
             for k in COST_KEYS if k in cost]
    table = pd.DataFrame(rows, columns=["metric", "value", "ci95 low", "ci95 high"]).set_index("metric")
    table["value"] = pd.Series([r["value"] for r in rows], index=table.index, dtype=object)  # counts stay counts
    return table


def question_scores(run_dir: Any, metrics: Sequence[str] = ("hit1", "hit1_exact", "hit1_first"),
                    **labels: Any) -> list[dict[str, Any]]:
    """One row per question of a run (its predictions.jsonl): the labels, the qid and each
    metric's value in [0, 1] (None where it does not apply). Paired tests pair these rows."""
    from pathlib import Path

    rows = read_predictions(Path(run_dir) / PRED_FILE)
    items = score_items(rows, metrics)
    return [{**labels, "qid": r["qid"], **{m: items[m][i] for m in metrics}} for i, r in enumerate(rows)]


def _frame(rows: pd.DataFrame | Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    return rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))


def require_columns(df: pd.DataFrame, cols: Iterable[str], what: str) -> None:
    """Fail early, naming the missing columns and those there are, rather than deep inside pandas."""
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ConfigError(f"{what}: column(s) {missing} not in the rows; available: {sorted(map(str, df.columns))}")


def aggregate_seeds(rows: pd.DataFrame | Iterable[Mapping[str, Any]], by: Sequence[str],
                    metrics: Sequence[str] = ("hit1",), seed_col: str = "seed", ddof: int = 1) -> pd.DataFrame:
    """Mean and std of each metric over seeds, one output row per combination of `by`.

    Output columns: the `by` labels, `<metric>_mean`, `<metric>_std` for each metric,
    `n_seeds`, and `n_questions` (questions summed over seeds) when rows carry `n`.
    The same seed twice within one group is an error (a duplicated run would weigh double).
    """
    df = _frame(rows)
    by = list(by)
    require_columns(df, [*by, *metrics, seed_col], "aggregate_seeds")
    if df.empty:
        cols = [*by, *[f"{m}_{s}" for m in metrics for s in ("mean", "std")], "n_seeds"]
        return pd.DataFrame(columns=cols)
    dup = df.duplicated([*by, seed_col], keep=False)
    if dup.any():
        first = df.loc[dup, [*by, seed_col]].iloc[0].to_dict()
        raise ConfigError(f"aggregate_seeds: more than one row for {first}; expected one run per seed")
    grouped = df.groupby(by, sort=False, dropna=False)
    out = pd.DataFrame(index=grouped.size().index)
    for m in metrics:
        vals = grouped[m]
        out[f"{m}_mean"] = vals.mean()
        out[f"{m}_std"] = vals.std(ddof=ddof)
    out["n_seeds"] = grouped[seed_col].nunique()
    if "n" in df.columns:
        out["n_questions"] = grouped["n"].sum()
    return out.reset_index()


def mean_std(mean: float, std: float | None, digits: int = 1) -> str:
    """'78.7 ± 4.6'; just '78.7' when the std is undefined (one seed); '–' for no value."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def pivot_mean_std(agg: pd.DataFrame, index: str, columns: str, metric: str = "hit1",
                   digits: int = 1) -> pd.DataFrame:
    """A paper-layout table of 'mean ± std' strings (e.g. datasets as rows, methods as columns),
    rows and columns in the order they first appear in `agg`."""
    require_columns(agg, [index, columns, f"{metric}_mean", f"{metric}_std"], "pivot_mean_std")
    cells = agg.assign(_cell=[mean_std(m, s, digits) for m, s in zip(agg[f"{metric}_mean"], agg[f"{metric}_std"])])
    table = cells.pivot(index=index, columns=columns, values="_cell")
    table = table.reindex(index=pd.unique(cells[index]), columns=pd.unique(cells[columns]))
    table.columns.name = None
    return table.fillna("–")


def json_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as plain dicts for `write_summary`: NaN becomes None (valid JSON), numpy scalars Python ones."""
    out = []
    for rec in df.to_dict("records"):
        clean = {}
        for k, v in rec.items():
            if isinstance(v, np.generic):
                v = v.item()
            if isinstance(v, float) and math.isnan(v):
                v = None
            clean[str(k)] = v
        out.append(clean)
    return out


def _cell(value: Any, digits: int) -> str:
    if value is None:
        return "–"
    if isinstance(value, (float, np.floating)):
        return "–" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def ci_cell(row: Mapping[str, Any], metric: str) -> str:
    """`value [low, high]` from a summary row's `<metric>` and `<metric>_ci95` ("–" when absent)."""
    v, ci = row.get(metric), row.get(f"{metric}_ci95")
    if v is None:
        return "–"
    return f"{v:.1f} [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else f"{v:.1f}"


def to_markdown(df: pd.DataFrame, digits: int = 1, index: bool = False) -> str:
    """A GitHub-style pipe table (`DataFrame.to_markdown`; tabulate, in the `notebooks` extra);
    floats with `digits` decimals, missing values as '–'. Cells are formatted here and passed as
    text, so tabulate neither re-reads "1.0" as a number nor reformats it."""
    frame = df.reset_index() if index else df
    cells = pd.DataFrame([[_cell(v, digits) for v in rec] for rec in frame.itertuples(index=False)],
                         columns=[str(c) for c in frame.columns], dtype=object)
    return cells.to_markdown(index=False, tablefmt="pipe", disable_numparse=True) + "\n"


# ------------------------------------------------------------------------- the papers' claims
Side = Any  # one side of a claim as a paper's CLAIMS write it, e.g. (variant, rounds)


def check_paired_claims(claims: Iterable[tuple], side_values: Callable[[Side, str, str], Mapping[str, float] | None],
                        label: Callable[[Side], str], alpha: float = 0.05, margin: float = 5.0) -> pd.DataFrame:
    """The "A beats B" claims of a paper, each tested on per-question scores paired on the same
    questions (`kgrag_lib.eval.paired`): confirmed, refuted, or not separable at this n, with the
    difference (points), its 95% interval and p; a `~` claim also with its TOST p (`p_equiv`),
    margin and the verdict of the rule before TOST. A claim is the tuple
    (claim id, table, dataset, side A, relation, side B, metric, quote[, margin]): the optional
    margin (points) of a `~` claim where the paper states one, else `margin`; `side_values(side,
    dataset, metric)` gives a side's {qid: value in [0, 1]}, None when it was not run (the claim
    then reads 'not run'); `label(side)` names a side in the statement."""
    out = []
    for claim in claims:
        if len(claim) not in (8, 9):
            raise ConfigError(f"a claim is (id, table, dataset, side A, relation, side B, metric, quote[, margin]); "
                              f"got {len(claim)} fields in {claim[:1]!r}")
        cid, table, dataset, a, rel, b, metric, quote = claim[:8]
        m = float(claim[8]) if len(claim) == 9 and claim[8] is not None else margin
        va, vb = side_values(a, dataset, metric), side_values(b, dataset, metric)
        rec = {"claim": cid, "table": table, "dataset": dataset, "statement": f"{label(a)} {rel} {label(b)}",
               "metric": metric, "n_pairs": 0, "ours_a": math.nan, "ours_b": math.nan, "diff": math.nan, "ci95": None,
               "p_value": math.nan, "test": "", "verdict": NOT_RUN, "quote": quote, "p_equiv": math.nan,
               "sd_diff": math.nan}
        if va is not None and vb is not None:
            both = [q for q in va if q in vb]
            r = paired_test([va[q] for q in both], [vb[q] for q in both], margin=m)
            rec.update(n_pairs=r.n, ours_a=r.mean_a, ours_b=r.mean_b, diff=r.diff,
                       ci95=[round(v, 1) for v in r.ci95], p_value=r.p_value, test=r.test,
                       verdict=verdict(rel, r, alpha=alpha, margin=m), **claim_fields(rel, r, alpha=alpha, margin=m))
        out.append(rec)
    return pd.DataFrame(out)
