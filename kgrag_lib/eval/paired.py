"""Paired comparisons: does system A beat system B on the same questions?

Every "A beats B" claim of the papers is tested on per-question scores of both systems on the
same questions: McNemar's exact test when the scores are 0/1 (Hit@1, EM, Acc), a paired
sign-flip permutation test otherwise (F1, Avg: exact over all 2^k sign patterns of the k
questions whose scores differ, up to `EXACT_FLIP_N` of them, Monte Carlo beyond), and always a
paired-bootstrap (BCa) 95% interval of the difference. The verdict follows the test, not the
interval: with few differing questions a bootstrap interval is too narrow and can
exclude 0 where the exact test gives p > 0.05. (A bootstrap p-value is not used: on a few
questions whose differences share a sign every resample does too, and one question would
"confirm" a claim with p = 0.)
A claim is then *confirmed* (the difference goes the claimed way, p < alpha), *refuted* (it
goes the other way, p < alpha) or *not separable at this n*. An "about the same" claim (`~`)
is confirmed only when the difference provably lies within ±`margin` points (an equivalence
test), refuted when the systems differ (p < alpha), and otherwise not separable. A bootstrap
interval collapses to [0, 0] when two systems agree on a handful of questions, so for 0/1
scores the bound used is the exact (Clopper-Pearson, 97.5%) upper bound of the share of
questions on which they disagree, which |A - B| can never exceed; for other scores the
interval must come from at least `MIN_EQUIVALENCE_N` questions.
When no question scores on either side (0 vs 0, e.g. exact match against sentence answers) the
metric carries no signal about the claim, so it is *not testable on this metric* rather than an
equivalence "confirmed" or a "not separable" that invites a larger n.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from .bootstrap import bootstrap_ci

CONFIRMED, REFUTED, NOT_SEPARABLE = "confirmed", "refuted", "not separable at this n"
NOT_RUN = "not run"   # a claim whose two sides have no run on that dataset
NO_SIGNAL = "not testable on this metric (no question scores on either side)"
MIN_EQUIVALENCE_N = 30
EXACT_FLIP_N = 40    # differing questions up to which the sign-flip p is exact (2 x 2^20 sums)
MC_FLIPS = 200_000   # Monte Carlo sign patterns beyond that: p's standard error <= 0.0005 at p = 0.05


def _subset_sums(d: np.ndarray) -> np.ndarray:
    """Σ s_i d_i over all 2^len(d) sign patterns s."""
    sums = np.zeros(1)
    for x in d:
        sums = np.concatenate((sums + x, sums - x))
    return sums


def sign_flip_p(d: np.ndarray, n_perm: int = MC_FLIPS, seed: int = 0) -> float:
    """Two-sided p of a paired permutation test: the share of sign patterns of the differences
    whose sum is at least as far from 0 as the observed one. Ties (zero differences) are dropped,
    since flipping them changes nothing; up to EXACT_FLIP_N differing questions the p is exact
    (both halves' sums enumerated and matched by binary search), beyond that Monte Carlo."""
    d = np.asarray(d, dtype=float)
    d = d[d != 0]
    k = int(d.size)
    observed = abs(float(d.sum()))
    if k == 0 or observed == 0:
        return 1.0
    bar = observed * (1 - 1e-9)     # float sums of the same pattern may differ in the last bits
    if k <= EXACT_FLIP_N:
        low, high = np.sort(_subset_sums(d[: k // 2])), _subset_sums(d[k // 2:])
        # pairs with low + high >= bar, plus pairs with low + high <= -bar
        ge = low.size - np.searchsorted(low, bar - high, side="left")
        le = np.searchsorted(low, -bar - high, side="right")
        return float((ge + le).sum() / 2.0 ** k)
    rng = np.random.default_rng(seed)
    hits, done = 0, 0
    while done < n_perm:
        m = min(50_000, n_perm - done)
        signs = rng.choice((-1.0, 1.0), size=(m, k))
        hits += int((np.abs(signs @ d) >= bar).sum())
        done += m
    return float((1 + hits) / (n_perm + 1))


@dataclass(frozen=True)
class PairedResult:
    """A minus B on n paired questions, in percentage points."""

    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci95: tuple[float, float]
    p_value: float
    test: str            # "mcnemar (exact)" | "sign-flip permutation"
    a_only: int = 0      # 0/1 scores: questions A gets right and B wrong
    b_only: int = 0
    disagree_upper: float | None = None   # 0/1 scores: exact upper bound of the disagreement share, points

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        return d


def paired_test(a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000, seed: int = 0) -> PairedResult:
    """Compare per-question scores in [0, 1] of two systems on the same questions (same order)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired scores must be two equal-length lists; got {x.shape} and {y.shape}")
    n = int(x.size)
    if n == 0:
        return PairedResult(0, float("nan"), float("nan"), float("nan"), (float("nan"), float("nan")), 1.0,
                            "no pairs")
    d = x - y
    lo, hi = bootstrap_ci(d, n_boot=n_boot, seed=seed)
    binary = bool(np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all())
    a_only, b_only = int(((x == 1) & (y == 0)).sum()), int(((x == 0) & (y == 1)).sum())
    upper = None
    if binary:
        from scipy.stats import beta, binomtest

        k = a_only + b_only
        p = 1.0 if k == 0 else float(binomtest(a_only, k, 0.5).pvalue)
        upper = 100.0 if k == n else 100 * float(beta.ppf(0.975, k + 1, n - k))
        test = "mcnemar (exact)"
    else:
        p = sign_flip_p(d, seed=seed)
        test = "sign-flip permutation"
    return PairedResult(n, 100 * float(x.mean()), 100 * float(y.mean()), 100 * float(d.mean()),
                        (100 * float(lo), 100 * float(hi)), p, test, a_only if binary else 0, b_only if binary else 0,
                        upper)


def verdict(relation: str, result: PairedResult, *, alpha: float = 0.05, margin: float = 5.0) -> str:
    """The claim `A <relation> B` ('>', '<' or '~') judged by a paired result (see module doc)."""
    if result.n == 0:
        return NOT_SEPARABLE
    if result.mean_a == 0 and result.mean_b == 0:
        return NO_SIGNAL
    if relation == "~":
        if result.p_value < alpha:
            return REFUTED
        if result.disagree_upper is not None:
            return CONFIRMED if result.disagree_upper <= margin else NOT_SEPARABLE
        lo, hi = result.ci95
        return CONFIRMED if result.n >= MIN_EQUIVALENCE_N and -margin <= lo and hi <= margin else NOT_SEPARABLE
    if relation not in (">", "<"):
        raise ValueError(f"relation must be '>', '<' or '~', got {relation!r}")
    if result.p_value >= alpha or result.diff == 0:
        return NOT_SEPARABLE
    claimed = result.diff > 0 if relation == ">" else result.diff < 0
    return CONFIRMED if claimed else REFUTED
