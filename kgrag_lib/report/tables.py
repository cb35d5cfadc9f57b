"""Result tables: runs averaged over seeds, laid beside the paper's numbers, as markdown.

The KG-RAG paper reports every bar as mean ± standard deviation over seeded question
samples (§4.2). Here one *row* is one run (one method, dataset, setting and seed) as
`metrics_row` flattens it; `aggregate_seeds` turns rows into mean/std per setting. The
standard deviation is the sample one (ddof=1) across seeds, as is usual for "std over
samples"; with a single seed it is undefined (NaN) and shown as such, never as 0.
All scores are percent (0-100); the paper's fractions are converted when laid beside.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError
from .paper_numbers import CLAIMS, NUMBERS, Claim, PaperNumber

SCORE_COLUMNS = ("hit1", "em", "f1", "acc", "mentions")


def metrics_row(metrics: Mapping[str, Any], **labels: Any) -> dict[str, Any]:
    """One flat row for one run: its labels, its scores (percent), failures and cost per question."""
    row: dict[str, Any] = dict(labels)
    for key in ("n", "failed", *SCORE_COLUMNS):
        if key in metrics:
            row[key] = metrics[key]
    for key, value in (metrics.get("cost_per_question") or {}).items():
        row[f"{key}_per_q"] = value
    return row


def _frame(rows: pd.DataFrame | Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    return rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))


def _require(df: pd.DataFrame, cols: Iterable[str], what: str) -> None:
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
    _require(df, [*by, *metrics, seed_col], "aggregate_seeds")
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
    _require(agg, [index, columns, f"{metric}_mean", f"{metric}_std"], "pivot_mean_std")
    cells = agg.assign(_cell=[mean_std(m, s, digits) for m, s in zip(agg[f"{metric}_mean"], agg[f"{metric}_std"])])
    table = cells.pivot(index=index, columns=columns, values="_cell")
    table = table.reindex(index=pd.unique(cells[index]), columns=pd.unique(cells[columns]))
    table.columns.name = None
    return table.fillna("–")


def _matches(num: PaperNumber, row: Mapping[str, Any], on: Sequence[str]) -> bool:
    for col in on:
        want = getattr(num, col, None)
        if want is None or col not in row:
            continue
        got = row[col]
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            try:
                if float(got) != float(want):
                    return False
            except (TypeError, ValueError):
                return False
        elif got != want:
            return False
    return True


def beside_paper(agg: pd.DataFrame, key: str, metric: str = "hit1",
                 on: Sequence[str] = ("dataset", "method", "hops", "top_k"),
                 numbers: Sequence[PaperNumber] = NUMBERS, missing: str = "not printed in the paper") -> pd.DataFrame:
    """Our mean/std beside the paper's printed number with key `key` (percent), and the difference.

    A row whose setting the paper prints no number for gets NaN and `paper_source = missing`
    (e.g. "Fig. 5: bars only"); nothing is estimated.
    """
    _require(agg, [f"{metric}_mean"], "beside_paper")
    cand = [n for n in numbers if n.key == key]
    out = agg.copy()
    p_mean, p_std, p_src = [], [], []
    for row in out.to_dict("records"):
        hit = [n for n in cand if _matches(n, row, [c for c in on if c in out.columns])]
        if hit:
            p_mean.append(hit[0].value_percent())
            p_std.append(hit[0].std_percent() if hit[0].std is not None else np.nan)
            p_src.append(hit[0].source)
        else:
            p_mean.append(np.nan)
            p_std.append(np.nan)
            p_src.append(missing)
    out[f"paper_{metric}_mean"] = p_mean
    out[f"paper_{metric}_std"] = p_std
    out["paper_source"] = p_src
    out[f"{metric}_minus_paper"] = out[f"{metric}_mean"] - out[f"paper_{metric}_mean"]
    return out


def _claim_side(label: str) -> dict[str, Any]:
    """'kg-rag' -> {'method': 'kg-rag'}; 'N=2' -> {'hops': 2}; 'K=30' -> {'top_k': 30}."""
    if label.startswith("N="):
        return {"hops": int(label[2:])}
    if label.startswith("K="):
        return {"top_k": int(label[2:])}
    return {"method": label}


def _lookup(agg: pd.DataFrame, labels: Mapping[str, Any], metric: str) -> tuple[float, float] | None:
    sel = pd.Series(True, index=agg.index)
    for col, val in labels.items():
        if col not in agg.columns:
            return None
        sel &= agg[col] == val
    hit = agg[sel]
    if len(hit) != 1:
        return None
    r = hit.iloc[0]
    return float(r[f"{metric}_mean"]), float(r.get(f"{metric}_std", np.nan))


def check_claims(agg: pd.DataFrame, claims: Sequence[Claim] | None = None, metric: str = "hit1",
                 tie_points: float = 5.0, method: str = "kg-rag") -> pd.DataFrame:
    """Check the paper's ordinal statements against our seed-averaged numbers.

    Rules (stated so a reader can redo them): for '>' the claim holds when our mean of `a`
    exceeds that of `b`; '<' the reverse; '~' when the two means differ by at most
    `tie_points` percentage points. Experiment-1 claims compare kg-rag settings (`N=`/`K=`)
    with the claim's other settings held fixed. A claim whose two sides were not both run
    is reported as 'not run'. Small samples make these verdicts noisy: read them with the
    standard deviations beside them.
    """
    claims = list(CLAIMS if claims is None else claims)
    rows = []
    for c in claims:
        base = {"dataset": c.dataset, **c.fixed}
        if c.experiment == "exp1" and "method" in agg.columns:
            base["method"] = method
        a = _lookup(agg, {**base, **_claim_side(c.a)}, metric)
        b = _lookup(agg, {**base, **_claim_side(c.b)}, metric)
        row = {"claim": c.cid, "dataset": c.dataset, "statement": f"{c.a} {c.relation} {c.b}",
               "ours_a": np.nan, "ours_b": np.nan, "diff": np.nan, "verdict": "not run",
               "source": c.source, "quote": c.quote}
        if a is not None and b is not None:
            diff = a[0] - b[0]
            if c.relation == ">":
                ok = diff > 0
            elif c.relation == "<":
                ok = diff < 0
            elif c.relation == "~":
                ok = abs(diff) <= tie_points
            else:
                raise ConfigError(f"claim {c.cid}: relation must be '>', '<' or '~', got {c.relation!r}")
            row.update(ours_a=a[0], ours_b=b[0], diff=diff, verdict="holds" if ok else "does not hold")
        rows.append(row)
    return pd.DataFrame(rows)


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
