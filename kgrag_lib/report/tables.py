"""Tables every paper's report shares: runs averaged over seeds, 'mean ± std' cells, JSON rows, markdown.

One *row* is one run (one method, dataset, setting and seed) as `metrics_row` flattens it;
`aggregate_seeds` turns rows into mean/std per setting. The standard deviation is the sample
one (ddof=1) across seeds, as is usual for "std over samples"; with a single seed it is
undefined (NaN) and shown as such, never as 0. All scores are percent (0-100). What lays
such rows beside one paper's published numbers lives in that paper's package
(`report.metaqa.tables`, `report.kg_infused.tables`).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError

SCORE_COLUMNS = ("hit1", "hit1_exact", "hit1_first", "em", "f1", "acc", "yesno_agree")


def metrics_row(metrics: Mapping[str, Any], **labels: Any) -> dict[str, Any]:
    """One flat row for one run: its labels, its scores (percent), failures and cost per question."""
    row: dict[str, Any] = dict(labels)
    for key in ("n", "failed", *SCORE_COLUMNS):
        if key in metrics:
            row[key] = metrics[key]
    for key, value in (metrics.get("cost_per_question") or {}).items():
        row[f"{key}_per_q"] = value
    return row


def question_scores(run_dir: Any, metrics: Sequence[str] = ("hit1", "hit1_exact", "hit1_first"),
                    **labels: Any) -> list[dict[str, Any]]:
    """One row per question of a run (its predictions.jsonl): the labels, the qid and each
    metric's value in [0, 1] (None where it does not apply). Paired tests pair these rows."""
    from pathlib import Path

    from ..eval.metrics import score_items
    from ..runner import PRED_FILE, read_predictions

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


def to_markdown(df: pd.DataFrame, digits: int = 1, index: bool = False) -> str:
    """A GitHub-style pipe table; floats with `digits` decimals, missing values as '–'."""
    frame = df.reset_index() if index else df
    header = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for rec in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, digits) for v in rec) + " |")
    return "\n".join(lines) + "\n"
