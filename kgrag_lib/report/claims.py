"""What the papers' claim checks share: one question's value of a metric, claims re-tested on
another metric, and one verdict per claim family from its pairwise comparisons."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

from ..eval.metrics import get_metric
from ..eval.paired import CONFIRMED, NO_SIGNAL, NOT_RUN, NOT_SEPARABLE, REFUTED

JUDGE_UNINFORMATIVE = "not testable: the judge failed its controls"


def question_values(rows: Iterable[Mapping[str, Any]], metric: str,
                    verdicts: Mapping[str, bool | None] | None = None) -> dict[str, float]:
    """qid -> one question's value in [0, 1]: `correct` from the judge's verdicts (questions
    without a verdict left out), or any answer metric (em, f1, ...)."""
    out: dict[str, float] = {}
    for r in rows:
        if metric == "correct":
            v = (verdicts or {}).get(r["qid"])
            if v is not None:
                out[r["qid"]] = float(v)
        else:
            x = get_metric(metric)(r)
            if x is not None:
                out[r["qid"]] = x
    return out


def with_metric(claims: Iterable[tuple], metric: str) -> list[tuple]:
    """The same claims tested on another metric (claim ids get "@<metric>")."""
    return [(f"{c[0]}@{metric}", *c[1:6], metric, *c[7:]) for c in claims]


def re_decide_silent(claims: pd.DataFrame) -> pd.DataFrame:
    """Claims with `NO_SIGNAL` where no question scored on either side: `paired.verdict`'s rule
    applied to claims a notebook stored before the rule existed, as the report reads them."""
    if claims.empty or not {"ours_a", "ours_b", "n_pairs", "verdict"} <= set(claims.columns):
        return claims
    silent = ((claims["n_pairs"].fillna(0) > 0) & (claims["ours_a"] == 0) & (claims["ours_b"] == 0)
              & (claims["verdict"] != NOT_RUN))
    return claims.assign(verdict=claims["verdict"].where(~silent, NO_SIGNAL)) if silent.any() else claims


def claim_verdicts(claims: pd.DataFrame, families: Mapping[str, str]) -> pd.DataFrame:
    """One verdict per claim family, dataset and metric from its pairwise comparisons: confirmed
    when every comparison is, refuted when any is, 'not run' when none ran, not testable on the
    metric when no question scores in any, else not separable.
    `families` names each family (a paper's `CLAIM_FAMILIES`)."""
    if claims.empty:
        return pd.DataFrame(columns=["family", "claim", "dataset", "metric", "comparisons", "verdict"])
    df = claims.assign(family=[".".join(str(c).split("@")[0].split(".")[:2]) for c in claims["claim"]])
    recs = []
    for (family, dataset, metric), g in df.groupby(["family", "dataset", "metric"], sort=False):
        v = list(g["verdict"])
        counts = {k: v.count(k) for k in (CONFIRMED, REFUTED, NOT_SEPARABLE, NOT_RUN, JUDGE_UNINFORMATIVE, NO_SIGNAL)
                  if v.count(k)}
        verdict = (CONFIRMED if counts.get(CONFIRMED) == len(v) else REFUTED if REFUTED in counts
                   else NOT_RUN if counts.get(NOT_RUN) == len(v)
                   else NO_SIGNAL if counts.get(NO_SIGNAL) == len(v)
                   else JUDGE_UNINFORMATIVE if JUDGE_UNINFORMATIVE in counts else NOT_SEPARABLE)
        recs.append({"family": family, "claim": families.get(family, family), "dataset": dataset,
                     "metric": metric, "comparisons": ", ".join(f"{n} {k}" for k, n in counts.items()),
                     "verdict": verdict})
    return pd.DataFrame(recs)
