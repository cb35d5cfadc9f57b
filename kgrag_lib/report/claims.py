"""What the papers' claim checks share: one question's value of a metric, claims re-tested on
another metric, stored claims re-judged by today's rules, and one verdict per claim family from
its pairwise comparisons."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import math

import pandas as pd

from ..eval.metrics import get_metric
from ..eval.paired import CONFIRMED, EQUIVALENCE_MARGIN, MIN_EQUIVALENCE_N, NO_SIGNAL, NOT_RUN, NOT_SEPARABLE, REFUTED

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


BEFORE_EXACT_FLIP = "before exact sign-flip"   # a claim's p_value and verdict when its sign-flip p was Monte Carlo
EXACT_FLIP_CHANGE = (
    "Until 2026-12-07 the sign-flip p of a comparison with more than 40 differing questions was a Monte Carlo "
    "estimate over 200,000 sign patterns (seed 0, standard error up to 0.0005); it is now the upper end of a bracket "
    "of the exact p at most 0.0001 wide (`eval.paired.sign_flip_bounds`), so no draw decides a verdict. The change "
    "was made after a result was seen: unit 1 of the claims plan (KG-Infused RAG − Vanilla QE on 2Wiki at 1.5B) "
    "read Holm 0.0498 under the Monte Carlo p and 0.0505 under the exact one. The stored claims were "
    "re-tested on their committed per-question files (`python -m kgrag_lib.report.rescore --retest`); each verdict "
    "the change moved is shown under both p's.")
BEFORE_TOST = "verdict before TOST"   # a `~` claim's verdict under the rule before issue 56 (equivalence_rule_before)
NOT_REJUDGED = "not separable (stored before TOST; rerun its notebook)"
EQUIVALENCE_CHANGE = (
    "The rule for `~` (about the same) claims changed after the committed results were seen (issue 56): it used to "
    "bound the share of questions on which the two sides disagree (its exact 97.5% upper bound is already 9.9 "
    "points when 4 of 100 questions disagree, against a 5-point margin), so such a claim could almost never be "
    "confirmed; it is now "
    "two one-sided tests (TOST) of the paired difference against the margin (`eval.paired`). Because the rule "
    "changed after the results, both verdicts are shown for every `~` claim that ran.")


def _relation(statement: object) -> str:
    st = str(statement)
    return ">" if " > " in st else "<" if " < " in st else "~"


def re_decide_equivalence(claims: pd.DataFrame, retested: pd.DataFrame | None = None, alpha: float = 0.05
                          ) -> pd.DataFrame:
    """`~` claims judged by TOST (`eval.paired`), as the report reads them. A row a notebook stored
    before TOST (no `p_equiv`) takes `p_equiv`, `sd_diff`, `margin`, its verdict and `verdict before
    TOST` from `retested`: the same claim re-tested on the committed per-question files (matched by
    claim, metric and n_pairs). A row of continuous scores on fewer than MIN_EQUIVALENCE_N pairs is
    decided from its stored fields (TOST is not decided there; only p and interval can refute it).
    Any other stored `~` row cannot be re-judged and reads `NOT_REJUDGED`, its old verdict kept
    in `verdict before TOST`. Rows not run, or that no question scores on, are left as they are."""
    if claims.empty or not {"statement", "verdict"} <= set(claims.columns):
        return claims
    tilde = claims["statement"].map(_relation) == "~"
    if not tilde.any():
        return claims
    out = claims.copy()
    for col in ("p_equiv", "sd_diff", "margin"):
        if col not in out:
            out[col] = math.nan
    if BEFORE_TOST not in out:
        out[BEFORE_TOST] = None
    out[BEFORE_TOST] = out[BEFORE_TOST].astype(object)
    again: dict[tuple, dict] = {}
    if retested is not None and not retested.empty:
        again = {(r["claim"], r.get("metric"), r.get("n_pairs")): r for r in retested.to_dict("records")}
    for i, rec in out[tilde].iterrows():
        v = str(rec["verdict"])
        if v == NOT_RUN or v.startswith("not testable") or isinstance(rec[BEFORE_TOST], str):
            continue   # not run / nothing to test / already judged by TOST when it was stored
        new = again.get((rec["claim"], rec.get("metric"), rec.get("n_pairs")))
        if new is not None and BEFORE_TOST in new:
            out.loc[i, ["p_equiv", "sd_diff", "margin"]] = [new["p_equiv"], new["sd_diff"], new["margin"]]
            out.at[i, BEFORE_TOST], out.at[i, "verdict"] = new[BEFORE_TOST], new["verdict"]
            continue
        out.at[i, BEFORE_TOST] = v
        n = int(rec.get("n_pairs") or 0)
        if str(rec.get("test", "")).startswith("sign-flip") and n < MIN_EQUIVALENCE_N:
            ci = rec.get("ci95")
            lo, hi = (ci[0], ci[1]) if ci is not None and len(ci) == 2 else (math.nan, math.nan)
            outside = lo > EQUIVALENCE_MARGIN or hi < -EQUIVALENCE_MARGIN
            out.at[i, "margin"] = EQUIVALENCE_MARGIN
            out.at[i, "verdict"] = REFUTED if float(rec.get("p_value", 1.0)) < alpha and outside else NOT_SEPARABLE
        else:
            out.at[i, "verdict"] = NOT_REJUDGED
    return out


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
