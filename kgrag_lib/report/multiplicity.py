"""Multiplicity: the report tests dozens of the papers' claims at once, so its verdicts are read
from Holm-adjusted p-values over one stated family, not from each test's own p.

There is one family per paper: every *primary* claim of that paper (its first metric: MetaQA
Hit@1, KG-Infused RAG Avg, SA-RAG judged correctness, TCR-QF EM) that a valid paired test decided.
Claims not run, claims whose LLM judge failed its controls, and claims on which no question scores
on either side carry no test and stay outside. Each claim enters with its *decisive* p
(`eval.paired.decisive_p`): the ordinary paired p for "A > B", the TOST p (`p_equiv`) for an
"about the same" claim (`~`), since that is the test that confirms it.
Each paper states its own hypotheses, so a report that tests two papers, or all four, judges each
paper's claims as that paper's family would be judged alone. A claims table without a `paper`
column is one family. Holm's step-down
procedure keeps the family-wise error at `alpha` under any dependence between the tests (the
claims share runs, so they are dependent). The same claims on a second metric are *exploratory*:
their p is shown unadjusted and they confirm nothing on their own.

Each notebook prints its own claims with unadjusted p (a notebook tests a handful); the report,
which tests them all, is where the family is defined and the verdicts are final.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ..eval.paired import CONFIRMED, NO_SIGNAL, NOT_RUN, NOT_SEPARABLE, REFUTED, decisive_p
from .claims import JUDGE_UNINFORMATIVE

PRIMARY, EXPLORATORY = "primary", "exploratory"
PAPER = "paper"   # the claims column that names a claim's family
FAMILY_TEXT = ("one family per paper, every primary claim of that paper decided by a paired test (claims not run, "
               "claims whose judge failed its controls and claims no question scores on are outside)")


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values, in the input order: the i-th smallest p times (m - i + 1), made
    non-decreasing along that order and capped at 1."""
    p = np.asarray(p, dtype=float)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


def relation(statement: str) -> str:
    """'>', '<' or '~' of a claim's statement ("A > B", as `tables.check_paired_claims` writes it)."""
    return ">" if " > " in statement else "<" if " < " in statement else "~"


def _col(claims: pd.DataFrame, name: str) -> pd.Series:
    return claims[name] if name in claims else pd.Series([None] * len(claims), index=claims.index, dtype=object)


def decisive_p_values(claims: pd.DataFrame) -> pd.Series:
    """Each claim's decisive p (`eval.paired.decisive_p`): `p_equiv` for a `~` claim (where the
    table has one), else `p_value`."""
    p = pd.to_numeric(_col(claims, "p_value"), errors="coerce")
    p_equiv = pd.to_numeric(_col(claims, "p_equiv"), errors="coerce")
    return pd.Series([decisive_p(relation(str(st)), str(v), pv, pe) for st, v, pv, pe in
                      zip(_col(claims, "statement"), _col(claims, "verdict"), p, p_equiv)],
                     index=claims.index, dtype=float)


def in_family(claims: pd.DataFrame, secondary_metrics: Sequence[str]) -> pd.Series:
    """Which claims belong to the Holm family (see module doc)."""
    p = decisive_p_values(claims)
    return (~_col(claims, "metric").isin(secondary_metrics) & p.notna()
            & ~_col(claims, "verdict").isin([NOT_RUN, JUDGE_UNINFORMATIVE, NO_SIGNAL]))


def adjust(claims: pd.DataFrame, secondary_metrics: Sequence[str], alpha: float = 0.05) -> pd.DataFrame:
    """Claims with `family` (primary / exploratory), `p_holm` (the family's Holm-adjusted decisive
    p; empty outside it), `unadjusted verdict` (what the claim's own p said) and `verdict` re-read
    from p_holm: a confirmation or refutation whose adjusted p reaches `alpha` becomes 'not
    separable at this n'. An equivalence (`~`) claim enters with its TOST p, so its confirmation
    is adjusted like any other."""
    if claims.empty:
        return claims
    out = claims.copy()
    fam = in_family(out, secondary_metrics)
    metric = out["metric"] if "metric" in out else pd.Series([None] * len(out), index=out.index)
    out["family"] = np.where(metric.isin(secondary_metrics), EXPLORATORY, PRIMARY)
    out["p_holm"] = np.nan
    decisive = decisive_p_values(out)
    papers = out[PAPER] if PAPER in out else pd.Series("", index=out.index)
    for _, members in out[fam].groupby(papers[fam].fillna(""), sort=False):
        out.loc[members.index, "p_holm"] = holm(decisive[members.index].to_numpy())
    out["unadjusted verdict"] = out["verdict"]
    verdicts = []
    for rec, member in zip(out.to_dict("records"), fam):
        v = rec["verdict"]
        # a verdict its decisive p decided is undone when the adjusted p reaches alpha
        if member and v in (CONFIRMED, REFUTED) and rec["p_holm"] >= alpha:
            v = NOT_SEPARABLE
        verdicts.append(v)
    out["verdict"] = verdicts
    return out


def family_sizes(claims: pd.DataFrame) -> dict[str, int]:
    """m of each paper's Holm family in an adjusted claims table, in the table's order ('' for a
    table without a `paper` column)."""
    if claims.empty or "p_holm" not in claims:
        return {}
    tested = claims[pd.to_numeric(claims["p_holm"], errors="coerce").notna()]
    papers = tested[PAPER].fillna("") if PAPER in tested else pd.Series("", index=tested.index)
    return {str(k): int(v) for k, v in papers.value_counts(sort=False).items()}


def family_text(claims: pd.DataFrame) -> str:
    """"m = 19" for one family, "m = 19 for KG-RAG on MetaQA, 15 for KG-Infused RAG" for several."""
    sizes = family_sizes(claims)
    if len(sizes) <= 1:
        return f"m = {next(iter(sizes.values()), 0)}"
    return "m = " + ", ".join(f"{m} for {paper or 'claims of no paper'}" for paper, m in sizes.items())


def changed_by_adjustment(claims: pd.DataFrame) -> pd.DataFrame:
    """The claims whose verdict the adjustment changed, with both p-values (not those whose final
    verdict is 'not testable' for another reason: the adjustment changes nothing a reader sees there)."""
    if claims.empty or "unadjusted verdict" not in claims:
        return pd.DataFrame()
    after = claims["statistical verdict"] if "statistical verdict" in claims else claims["verdict"]
    shown = (after != claims["unadjusted verdict"]) & ~claims["verdict"].astype(str).str.startswith("not testable")
    ch = claims[shown].assign(**{"adjusted verdict": after[shown]})
    return ch[[c for c in (PAPER, "claim", "dataset", "metric", "p_value", "p_equiv", "p_holm", "unadjusted verdict",
                           "adjusted verdict")
               if c in ch]]
