"""How many paired questions a claim needs: the n at which a paired test reaches a stated power.

The claims plan (issue 56) ranks claims by the questions they still need, so these are small
pure functions of numbers a committed run already gives: the paired effect and the standard
deviation of the per-question difference (`PairedResult.diff`, `PairedResult.sd_diff`), both in
points (0-100, as everywhere in `eval.paired`), or fractions; only their ratio matters.

- `n_for_power(effect, sd, alpha, power)`: the n at which a two-sided paired t-test of
  H0: diff = 0 at level `alpha` detects a true difference `effect` with probability `power`
  (exact power from the noncentral t). For 0/1 scores McNemar's test needs about the same n
  (its normal form is this test on the per-question differences).
- `n_for_equivalence(margin, sd, alpha, power, diff)`: the n at which the two one-sided tests of
  `eval.paired` (TOST, |diff| < margin) confirm equivalence with probability `power` when the
  true difference is `diff` (default 0), from the usual approximation
  power = F((margin - diff)/se - t) + F((margin + diff)/se - t) - 1, se = sd / sqrt(n), t the
  one-sided critical value on n - 1 degrees of freedom, F the normal distribution function.
  Continuous scores also need `MIN_EQUIVALENCE_N` pairs before TOST is decided at all, so the
  result is never below it unless `binary` (0/1 scores, whose TOST is decided at any n).

Both return an int (the smallest such n, at least 2) or None where no n reaches the power
(a zero effect; a true difference at or beyond the margin).
"""

from __future__ import annotations

import math

from .paired import MIN_EQUIVALENCE_N

MAX_N = 10_000_000   # the search stops here: a claim needing more questions cannot be run anyway


def _check(name: str, value: float, low: float = 0.0, high: float | None = None, open_low: bool = True) -> float:
    v = float(value)
    ok = (v > low if open_low else v >= low) and (high is None or v < high) and math.isfinite(v)
    if not ok:
        bound = f"{'>' if open_low else '>='} {low}" + (f" and < {high}" if high is not None else "")
        raise ValueError(f"{name} must be a finite number {bound}; got {value!r}")
    return v


def _smallest(ok, start: int = 2) -> int | None:
    """The smallest n >= start with ok(n), for ok monotone in n (doubling, then bisection)."""
    hi = start
    while not ok(hi):
        if hi >= MAX_N:
            return None
        hi = min(2 * hi, MAX_N)
    lo = max(start, hi // 2)
    if ok(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def power_paired(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Power of a two-sided paired t-test on n pairs for a true difference `effect` (same units as `sd`)."""
    from scipy.stats import nct, t

    df = n - 1
    crit = float(t.ppf(1 - alpha / 2, df))
    nc = abs(effect) / sd * math.sqrt(n)
    return float(nct.sf(crit, df, nc) + nct.cdf(-crit, df, nc))


def n_for_power(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Paired questions a two-sided paired test at `alpha` needs to detect `effect` with `power`
    (see module doc); `effect` and `sd` in the same units (points). None for a zero effect."""
    sd = _check("sd", sd)
    alpha = _check("alpha", alpha, high=1.0)
    power = _check("power", power, high=1.0)
    if not math.isfinite(float(effect)):
        raise ValueError(f"effect must be a finite number; got {effect!r}")
    if effect == 0:
        return None
    return _smallest(lambda n: power_paired(n, effect, sd, alpha) >= power)


def power_equivalence(n: int, margin: float, sd: float, alpha: float = 0.05, diff: float = 0.0) -> float:
    """Approximate power of TOST (|diff| < margin) on n pairs (see module doc)."""
    from scipy.stats import norm, t

    se = sd / math.sqrt(n)
    crit = float(t.ppf(1 - alpha, n - 1))
    return max(0.0, float(norm.cdf((margin - diff) / se - crit) + norm.cdf((margin + diff) / se - crit) - 1))


def n_for_equivalence(margin: float, sd: float, alpha: float = 0.05, power: float = 0.8,
                      diff: float = 0.0, binary: bool = False) -> int | None:
    """Paired questions TOST needs to confirm |A - B| < `margin` with `power` when the true
    difference is `diff` (see module doc); for continuous scores (`binary` False) never fewer than
    MIN_EQUIVALENCE_N. None when |diff| reaches the margin (no n confirms it)."""
    margin = _check("margin", margin)
    sd = _check("sd", sd)
    alpha = _check("alpha", alpha, high=1.0)
    power = _check("power", power, high=1.0)
    if not math.isfinite(float(diff)):
        raise ValueError(f"diff must be a finite number; got {diff!r}")
    if abs(diff) >= margin:
        return None
    n = _smallest(lambda n: power_equivalence(n, margin, sd, alpha, diff) >= power)
    return None if n is None else n if binary else max(n, MIN_EQUIVALENCE_N)
