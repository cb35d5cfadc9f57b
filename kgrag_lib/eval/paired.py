"""Paired comparisons: does system A beat system B on the same questions?

Every "A beats B" claim of the papers is tested on per-question scores of both systems on the
same questions: McNemar's exact test when the scores are 0/1 (Hit@1, EM, Acc), a paired
sign-flip permutation test otherwise (F1, Avg: exact over all 2^k sign patterns of the k
questions whose scores differ, up to `EXACT_FLIP_N` of them; beyond, the exact p bracketed to
within `FLIP_P_WIDTH` on a grid, `sign_flip_bounds`, and its upper end taken; Monte Carlo only where no
grid is that narrow or affordable, at thousands of them), and always a
paired-bootstrap (BCa) 95% interval of the difference. The verdict follows the test, not the
interval: with few differing questions a bootstrap interval is too narrow and can
exclude 0 where the exact test gives p > 0.05. (A bootstrap p-value is not used: on a few
questions whose differences share a sign every resample does too, and one question would
"confirm" a claim with p = 0.)
A claim is then *confirmed* (the difference goes the claimed way, p < alpha), *refuted* (it
goes the other way, p < alpha) or *not separable at this n*.
An "about the same" claim (`~`) is tested by two one-sided tests (TOST) on the paired
difference A - B against a margin of ±`margin` points (default `EQUIVALENCE_MARGIN`; a claim may
state its own where the paper gives one): `p_equiv` is the larger of the p's of H0: diff <= -margin
and H0: diff >= +margin, and the claim is confirmed when p_equiv < alpha. For 0/1 scores the
difference of paired proportions is tested on the discordant questions by score tests with 0.5
added to each discordant cell (Agresti-Min style; `tost_proportions`), so that a handful of
questions that happen to agree does not prove equivalence (a plain Wald test would give a zero
standard error);
for other scores a paired t-test, only from `MIN_EQUIVALENCE_N` questions on (below, the normal
approximation is not trusted and TOST is not decided). A `~` claim is refuted when the ordinary
paired test is significant and the whole 95% interval lies outside the margin; otherwise it is not
separable. (Until issue 56 the rule bounded the share of disagreeing questions instead, which
almost never confirms; `equivalence_rule_before` keeps it so the report can show both.)
When no question scores on either side (0 vs 0, e.g. exact match against sentence answers) the
metric carries no signal about the claim, so it is *not testable on this metric* rather than an
equivalence "confirmed" or a "not separable" that invites a larger n.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import ConfigError
from .bootstrap import bootstrap_ci

CONFIRMED, REFUTED, NOT_SEPARABLE = "confirmed", "refuted", "not separable at this n"
NOT_RUN = "not run"   # a claim whose two sides have no run on that dataset
NO_SIGNAL = "not testable on this metric (no question scores on either side)"
MIN_EQUIVALENCE_N = 30   # continuous scores: TOST's t-test is decided from this many pairs on
TOST_BINARY = "tost paired-proportion score tests (+0.5 discordant)"
EQUIVALENCE_MARGIN = 5.0   # points: the default ± margin of a `~` claim where the paper states none
EXACT_FLIP_N = 40    # differing questions up to which the sign-flip p is exact (2 x 2^20 sums)
# Beyond that the p is bracketed on a grid (`sign_flip_bounds`). Until 2026-12-07 it was Monte Carlo
# over 200,000 sign patterns (standard error up to 0.0005): a Holm-adjusted p at 0.0498 then could
# read 0.0506 under another seed, so a verdict hung on the draw.
FLIP_GRID_BINS = (1 << 19, 1 << 22)   # grid sizes tried in turn until the bracket is narrow enough
FLIP_P_WIDTH = 1e-4  # the widest bracket whose upper end is taken as the p
FLIP_GRID_WORK = 1.5e9   # differing questions x grid sums above which a grid is not tried (its loop would take minutes)
MC_FLIPS = 200_000   # Monte Carlo sign patterns where no grid brackets the p that closely


def _subset_sums(d: np.ndarray) -> np.ndarray:
    """Σ s_i d_i over all 2^len(d) sign patterns s."""
    sums = np.zeros(1)
    for x in d:
        sums = np.concatenate((sums + x, sums - x))
    return sums


def sign_flip_bounds(d: np.ndarray, bins: int = FLIP_GRID_BINS[0]) -> tuple[float, float]:
    """Bounds (low, high) of the exact two-sided sign-flip p of the differences `d`.

    Each |d_i| is rounded to a grid of step h (about `bins` grid sums in all) and the distribution
    of Σ ±m_i h over all 2^k sign patterns is computed exactly, one difference at a time. Every
    pattern's true sum lies within e = Σ |d_i - m_i h| of its grid sum, so the share of patterns at
    least as far from 0 as the observed sum lies between P(|grid sum| >= obs + e) and
    P(|grid sum| >= obs - e). No draw is involved: the same differences give the same bounds."""
    d = np.asarray(d, dtype=float)
    d = d[d != 0]
    observed = abs(float(d.sum()))
    if d.size == 0 or observed == 0:
        return 1.0, 1.0
    a = np.sort(np.abs(d))              # small steps first: the support grows as slowly as it can
    h = 2 * float(a.sum()) / bins
    m = np.rint(a / h).astype(np.int64)
    err = float(np.abs(a - m * h).sum()) + observed * 1e-9   # and the last bits of a float sum
    total = int(m.sum())
    pmf = np.zeros(2 * total + 1)
    pmf[total] = 1.0
    lo = hi = total                     # the support so far: pmf[lo:hi + 1]
    for step in m[m > 0]:
        half = pmf[lo:hi + 1] * 0.5
        pmf[lo:hi + 1] = 0.0
        pmf[lo - step:hi - step + 1] += half
        pmf[lo + step:hi + step + 1] += half
        lo, hi = lo - step, hi + step
    dist = np.abs(np.arange(-total, total + 1)) * h
    return float(pmf[dist >= observed + err].sum()), min(1.0, float(pmf[dist >= observed - err].sum()))


def sign_flip_p(d: np.ndarray, n_perm: int = MC_FLIPS, seed: int = 0) -> float:
    """Two-sided p of a paired permutation test: the share of sign patterns of the differences
    whose sum is at least as far from 0 as the observed one. Ties (zero differences) are dropped,
    since flipping them changes nothing; up to EXACT_FLIP_N differing questions the p is exact
    (both halves' sums enumerated and matched by binary search); beyond that it is the upper end
    of `sign_flip_bounds` once the bracket is at most FLIP_P_WIDTH wide (never below the exact p,
    so the test keeps its level), else seeded Monte Carlo kept inside the bracket."""
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
    bounds = (0.0, 1.0)
    for bins in FLIP_GRID_BINS:
        if k * bins > FLIP_GRID_WORK:   # thousands of differing questions: Monte Carlo, as before
            break
        bounds = sign_flip_bounds(d, bins)
        if bounds[1] - bounds[0] <= FLIP_P_WIDTH:
            return bounds[1]
    rng = np.random.default_rng(seed)
    hits, done = 0, 0
    while done < n_perm:
        m = min(50_000, n_perm - done)
        signs = rng.choice((-1.0, 1.0), size=(m, k))
        hits += int((np.abs(signs @ d) >= bar).sum())
        done += m
    return float(np.clip((1 + hits) / (n_perm + 1), *bounds))


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
    sd_diff: float = float("nan")   # standard deviation of the per-question difference A - B, points (n - 1)
    p_equiv: float = float("nan")   # TOST p for |A - B| < margin (the larger one-sided p); nan: not decided
    margin: float = EQUIVALENCE_MARGIN   # the ± margin (points) p_equiv was computed for
    equiv_test: str = ""            # TOST_BINARY | "tost paired t" | "" (not decided)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        return d


def check_margin(margin: Any) -> float:
    """`margin` as a float when it is a finite number of points > 0 (numpy's included), else a
    ConfigError: 0 or less would refute every '~' claim whose interval misses 0, infinity would
    confirm every one, NaN decides nothing, and True is no margin."""
    if isinstance(margin, (bool, np.bool_)) or not isinstance(margin, numbers.Real) \
            or not math.isfinite(float(margin)) or float(margin) <= 0:
        raise ConfigError(f"margin must be a finite positive number of points (e.g. 5.0); got {margin!r}")
    return float(margin)


def restricted_p01(b: float, c: float, n: float, delta: float) -> float:
    """Tango's restricted maximum-likelihood estimate of P(B only) under H0: P(A only) - P(B only)
    = delta, from b questions A-only and c B-only of n (Tango 1998, Stat Med 17:891): the root
    of 2n p^2 + B p + C = 0 with B = -b - c + (2n - b + c) delta, C = -c delta (1 - delta)."""
    qa, qb, qc = 2 * n, -b - c + (2 * n - b + c) * delta, -c * delta * (1 - delta)
    return (-qb + math.sqrt(max(qb * qb - 4 * qa * qc, 0.0))) / (2 * qa)


def _score_z(b: float, c: float, n: float, delta: float) -> float:
    """Tango's score statistic for H0: diff = delta: (b - c - n delta) over its standard error
    under H0, sqrt(n (2 p01 + delta (1 - delta))) at the restricted estimate p01."""
    var = n * (2 * restricted_p01(b, c, n, delta) + delta * (1 - delta))
    top = b - c - n * delta
    return top / math.sqrt(var) if var > 0 else math.copysign(math.inf, top)


def tost_proportions(a_only: int, b_only: int, n: int, margin: float = EQUIVALENCE_MARGIN) -> float:
    """TOST p that the paired difference of two 0/1 scores lies within ±`margin` points, from the
    discordant counts (A right B wrong: `a_only`; the other way: `b_only`) of n questions: the
    larger p of two one-sided score tests (Tango's, whose standard error is taken under each
    boundary of the margin) after adding 0.5 to each discordant cell (n gets 1), as Agresti and
    Min do for paired proportions. The plain Wald form, whose error is 0 when no question
    disagrees, confirmed a true 5-point difference 13% of the time at n = 40 (all discordance one
    way); this form stays at or below alpha there (tests/test_paired.py simulates it)."""
    from scipy.stats import norm

    margin = check_margin(margin)
    if not n > 0:
        return float("nan")
    if a_only < 0 or b_only < 0 or a_only + b_only > n:
        raise ValueError(f"discordant counts must be >= 0 and sum to at most n = {n}; got {a_only}, {b_only}")
    b, c, m = a_only + 0.5, b_only + 0.5, n + 1.0
    delta = margin / 100.0
    p_low = float(norm.sf(_score_z(b, c, m, -delta)))    # H0: diff <= -margin
    p_high = float(norm.cdf(_score_z(b, c, m, delta)))   # H0: diff >= +margin
    return max(p_low, p_high)


def tost_t(mean_diff: float, sd_diff: float, n: int, margin: float = EQUIVALENCE_MARGIN) -> float:
    """TOST p of a paired t-test that the mean difference (points) lies within ±`margin` points:
    the larger of the two one-sided p's on n - 1 degrees of freedom; nan below MIN_EQUIVALENCE_N
    pairs. With no spread (every difference equal) the answer is certain: 0 inside the margin, 1 out."""
    from scipy.stats import t

    margin = check_margin(margin)
    if not n >= MIN_EQUIVALENCE_N or math.isnan(mean_diff) or math.isnan(sd_diff):
        return float("nan")   # a NaN spread is no spread: it decides nothing
    if not sd_diff > 0:
        return 0.0 if abs(mean_diff) < margin else 1.0
    se = sd_diff / math.sqrt(n)
    p_low = float(t.sf((mean_diff + margin) / se, n - 1))
    p_high = float(t.cdf((mean_diff - margin) / se, n - 1))
    return max(p_low, p_high)


def paired_test(a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000, seed: int = 0,
                margin: float = EQUIVALENCE_MARGIN) -> PairedResult:
    """Compare per-question scores in [0, 1] of two systems on the same questions (same order);
    `margin` (points) is the equivalence margin of the TOST p kept beside the ordinary test."""
    margin = check_margin(margin)
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
    sd = 100 * float(d.std(ddof=1)) if n > 1 else float("nan")
    if binary:
        p_equiv, equiv_test = tost_proportions(a_only, b_only, n, margin), TOST_BINARY
    else:
        p_equiv = tost_t(100 * float(d.mean()), sd, n, margin)
        equiv_test = "tost paired t" if not math.isnan(p_equiv) else ""
    return PairedResult(n, 100 * float(x.mean()), 100 * float(y.mean()), 100 * float(d.mean()),
                        (100 * float(lo), 100 * float(hi)), p, test, a_only if binary else 0, b_only if binary else 0,
                        upper, sd, p_equiv, float(margin), equiv_test)


def verdict(relation: str, result: PairedResult, *, alpha: float = 0.05, margin: float | None = None) -> str:
    """The claim `A <relation> B` ('>', '<' or '~') judged by a paired result (see module doc).
    `margin` (points) of a `~` claim: default the one its p_equiv was computed for."""
    if result.n == 0:
        return NOT_SEPARABLE
    if result.mean_a == 0 and result.mean_b == 0:
        return NO_SIGNAL
    if relation == "~":
        m = result.margin if margin is None else check_margin(margin)
        p_equiv = result.p_equiv if m == result.margin else _p_equiv_at(result, m)
        if not math.isnan(p_equiv) and p_equiv < alpha:
            return CONFIRMED
        lo, hi = result.ci95
        if result.p_value < alpha and (lo > m or hi < -m):
            return REFUTED
        return NOT_SEPARABLE
    if relation not in (">", "<"):
        raise ValueError(f"relation must be '>', '<' or '~', got {relation!r}")
    if result.p_value >= alpha or result.diff == 0:
        return NOT_SEPARABLE
    claimed = result.diff > 0 if relation == ">" else result.diff < 0
    return CONFIRMED if claimed else REFUTED


def _p_equiv_at(result: PairedResult, margin: float) -> float:
    """A result's TOST p recomputed for another margin (from its counts or mean and spread)."""
    if result.test.startswith("mcnemar"):
        return tost_proportions(result.a_only, result.b_only, result.n, margin)
    return tost_t(result.diff, result.sd_diff, result.n, margin)


def equivalence_rule_before(result: PairedResult, *, alpha: float = 0.05, margin: float = EQUIVALENCE_MARGIN) -> str:
    """A `~` claim's verdict under the rule used until issue 56, kept so the report can show both
    (the rule changed after results were seen): refuted at p < alpha; for 0/1 scores confirmed when
    the exact (Clopper-Pearson, 97.5%) upper bound of the share of disagreeing questions is within
    the margin; for other scores confirmed when the bootstrap interval lies within ±margin and
    comes from at least MIN_EQUIVALENCE_N questions; else not separable."""
    margin = check_margin(margin)
    if result.n == 0:
        return NOT_SEPARABLE
    if result.mean_a == 0 and result.mean_b == 0:
        return NO_SIGNAL
    if result.p_value < alpha:
        return REFUTED
    if result.disagree_upper is not None:
        return CONFIRMED if result.disagree_upper <= margin else NOT_SEPARABLE
    lo, hi = result.ci95
    return CONFIRMED if result.n >= MIN_EQUIVALENCE_N and -margin <= lo and hi <= margin else NOT_SEPARABLE


def decisive_p(relation: str, verdict_: str, p_value: float, p_equiv: float | None) -> float:
    """The p that decides a claim, which enters its Holm family (`report.multiplicity`): the
    ordinary paired p for '>' and '<'; for '~' the TOST p_equiv, except for a claim refuted by the
    ordinary test, or one whose TOST is not decided (continuous scores below MIN_EQUIVALENCE_N),
    which only the ordinary test can decide."""
    if relation != "~" or verdict_ == REFUTED or p_equiv is None or math.isnan(float(p_equiv)):
        return p_value
    return float(p_equiv)


def claim_fields(relation: str, result: PairedResult, *, alpha: float = 0.05, margin: float = EQUIVALENCE_MARGIN
                 ) -> dict[str, Any]:
    """The TOST columns of a claims row: `p_equiv` and `sd_diff` for every claim; for a `~` claim
    also its `margin` and its `verdict before TOST` (`equivalence_rule_before`), so a report can
    show both rules."""
    out: dict[str, Any] = {"p_equiv": result.p_equiv if relation == "~" else float("nan"), "sd_diff": result.sd_diff}
    if relation == "~":
        out.update({"margin": float(margin), "verdict before TOST": equivalence_rule_before(result, alpha=alpha,
                                                                                              margin=margin)})
    return out
