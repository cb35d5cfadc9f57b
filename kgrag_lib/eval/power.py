"""How many questions a paired claim needs: the power arithmetic behind the claims plan
(`report.plan`, issue 56).

The report decides a claim "A > B" by a paired test on the same questions (`eval.paired`):
McNemar's exact test on 0/1 scores, a sign-flip test otherwise, each two-sided. Both are
planned here by their normal approximations, two-sided at the level `alpha` the caller gives
(the plan passes alpha / m, the Bonferroni bound of the first step of its paper's Holm family):

- a mean paired difference `delta` with per-question differences of standard deviation
  `sd_diff` (the z-test the sign-flip test approaches): power(n) = Φ(|δ|√n/σ − z) + Φ(−|δ|√n/σ − z),
  z = z_{1−α/2}, and n the smallest integer with power(n) >= the target;
- a paired proportion (McNemar) from its discordant rates: p_a, the share of questions only A gets
  right, and p_b, only B (Connor 1987, Biometrics 43:207): with ψ = p_a + p_b and δ = p_a − p_b,
  power(n) = Φ((|δ|√n − z√ψ) / √(ψ − δ²)).

Differences and standard deviations are in any one unit (the plan uses points, 0-100; rates
are shares in [0, 1]). The exact tests need a few questions more than these approximations at
small n; the plan states its n as the approximation's.

Equivalence (`~` claims, decided by TOST in `eval.paired`): `n_for_equivalence(margin, sd, alpha,
power, diff)` is the n at which the two one-sided tests (|diff| < margin) confirm equivalence with
probability `power` when the true difference is `diff` (default 0), from the usual approximation
power = F((margin - diff)/se - t) + F((margin + diff)/se - t) - 1, se = sd / sqrt(n), t the one-sided
critical value on n - 1 degrees of freedom (the paired t-test `eval.paired.tost_t` runs), F the
normal distribution function. Continuous scores also need `MIN_EQUIVALENCE_N` pairs before TOST is
decided at all, so the result is never below it unless `binary` (0/1 scores, whose TOST is decided
at any n). It returns None where no n confirms (|diff| at or beyond the margin), since the plan
then plans a refutation instead; the difference forms raise ValueError for a zero effect.

One form per test: the difference tests are planned by the normal approximation only, since that is
what the frozen claims plan (`results/claims-plan/`) was made with. An exact noncentral-t form was
dropped (issue 56): it gave a few questions more at small n and no caller used it; the simulation
tests (`tests/test_power.py`) measure how close the approximation's n comes to its power.
"""

from __future__ import annotations

import math

from scipy.stats import norm
from scipy.stats import t as t_dist

from .paired import MIN_EQUIVALENCE_N

MAX_N = 10_000_000   # no claim of this study is planned beyond this; larger means "no n reaches it"


def _check(alpha: float, power: float | None = None) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r}: expected a significance level in (0, 1)")
    if power is not None and not 0 < power < 1:
        raise ValueError(f"power={power!r}: expected a target power in (0, 1), e.g. 0.8")


def power_paired(delta: float, sd_diff: float, n: int, alpha: float) -> float:
    """Power of the two-sided level-`alpha` z-test of a zero mean paired difference on `n`
    questions when the true mean difference is `delta` and its per-question sd is `sd_diff`."""
    _check(alpha)
    if sd_diff < 0 or n < 0:
        raise ValueError(f"sd_diff={sd_diff!r}, n={n!r}: expected a standard deviation >= 0 and a count >= 0")
    z = float(norm.ppf(1 - alpha / 2))
    if n == 0:
        return alpha
    if sd_diff == 0:
        return 1.0 if delta != 0 else alpha
    shift = abs(delta) * math.sqrt(n) / sd_diff
    return float(norm.cdf(shift - z) + norm.cdf(-shift - z))


def n_for_power(delta: float, sd_diff: float, alpha: float, power: float = 0.8) -> int:
    """Questions needed for a paired difference `delta` (per-question sd `sd_diff`) to reach
    two-sided significance at `alpha` with probability `power` (see the module doc). Raises
    ValueError when `delta` is 0: no n gives an absent effect any power."""
    _check(alpha, power)
    if sd_diff <= 0:
        raise ValueError(f"sd_diff={sd_diff!r}: expected the positive sd of the per-question differences")
    if delta == 0:
        raise ValueError("delta=0: no sample size gives a zero difference power; plan from a non-zero effect")
    z_a, z_b = float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))
    n = max(1, math.ceil(((z_a + z_b) * sd_diff / abs(delta)) ** 2))
    while n > 1 and power_paired(delta, sd_diff, n - 1, alpha) >= power:   # the far tail may lower it by one
        n -= 1
    return min(n, MAX_N)


def power_discordant(p_a: float, p_b: float, n: int, alpha: float) -> float:
    """Power of McNemar's two-sided level-`alpha` test on `n` paired 0/1 questions (normal
    approximation, Connor 1987) when A alone is right on a share `p_a` and B alone on `p_b`."""
    _check(alpha)
    _check_rates(p_a, p_b)
    psi, delta = p_a + p_b, p_a - p_b
    if n <= 0 or psi == 0:
        return alpha
    z = float(norm.ppf(1 - alpha / 2))
    spread = psi - delta ** 2
    lead = abs(delta) * math.sqrt(n) - z * math.sqrt(psi)
    if spread <= 0:
        return 1.0 if lead > 0 else alpha
    return float(norm.cdf(lead / math.sqrt(spread)))


def n_for_power_discordant(p_a: float, p_b: float, alpha: float, power: float = 0.8) -> int:
    """Questions needed for McNemar's test to reach two-sided significance at `alpha` with
    probability `power`, from the discordant rates (`p_a`: A alone right, `p_b`: B alone right):
    n = (z_{1−α/2}√ψ + z_power√(ψ − δ²))² / δ² (Connor 1987). Raises ValueError when p_a == p_b."""
    _check(alpha, power)
    _check_rates(p_a, p_b)
    delta, psi = p_a - p_b, p_a + p_b
    if delta == 0:
        raise ValueError(f"p_a = p_b = {p_a!r}: equal discordant rates are no effect; no sample size gives it power")
    z_a, z_b = float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))
    n = max(1, math.ceil((z_a * math.sqrt(psi) + z_b * math.sqrt(max(psi - delta ** 2, 0.0))) ** 2 / delta ** 2))
    return min(n, MAX_N)


def _check_rates(p_a: float, p_b: float) -> None:
    if not (0 <= p_a <= 1 and 0 <= p_b <= 1 and p_a + p_b <= 1):
        raise ValueError(f"p_a={p_a!r}, p_b={p_b!r}: expected discordant shares in [0, 1] summing to at most 1")


def _check_positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name}={value!r}: expected a finite number > 0")
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


def power_equivalence(margin: float, sd: float, n: int, alpha: float, diff: float = 0.0) -> float:
    """Approximate power of TOST (|diff| < margin) on `n` pairs whose per-question differences have
    sd `sd`, when the true difference is `diff` (see the module doc)."""
    _check(alpha)
    if n < 2:
        return 0.0
    se = sd / math.sqrt(n)
    crit = float(t_dist.ppf(1 - alpha, n - 1))
    return max(0.0, float(norm.cdf((margin - diff) / se - crit) + norm.cdf((margin + diff) / se - crit) - 1))


def n_for_equivalence(margin: float, sd: float, alpha: float = 0.05, power: float = 0.8,
                      diff: float = 0.0, binary: bool = False) -> int | None:
    """Paired questions TOST needs to confirm |A - B| < `margin` with `power` when the true
    difference is `diff` (see the module doc); for continuous scores (`binary` False) never fewer
    than MIN_EQUIVALENCE_N. None when |diff| reaches the margin (no n confirms it)."""
    margin, sd = _check_positive("margin", margin), _check_positive("sd", sd)
    _check(alpha, power)
    if not math.isfinite(float(diff)):
        raise ValueError(f"diff={diff!r}: expected a finite difference")
    if abs(diff) >= margin:
        return None
    n = _smallest(lambda n: power_equivalence(margin, sd, n, alpha, diff) >= power)
    return None if n is None else n if binary else max(n, MIN_EQUIVALENCE_N)
