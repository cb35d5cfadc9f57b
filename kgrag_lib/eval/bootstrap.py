"""Bootstrap confidence intervals of a mean, by `scipy.stats.bootstrap`.

Sample sizes on CPU are small (tens to hundreds of questions), so every reported mean
carries an interval; the draw is seeded so a table regenerates identically. The interval is
BCa (bias-corrected and accelerated), which on bounded scores near 0 or 100% is less skewed
than the plain percentile one; where BCa is undefined (every resample on one side of the mean,
or a constant sample) the percentile interval of the same resamples is used.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

_MAX_CELLS = 4_000_000  # resampled values held at once: bounds memory for large n


def bootstrap_ci(values: Sequence[float] | np.ndarray, n_boot: int = 1000, seed: int = 0,
                 alpha: float = 0.05) -> tuple[float, float]:
    """(lo, hi) BCa interval of the mean at level 1 - alpha, in the units of `values`.

    None entries are not accepted: drop them first. Empty input gives (nan, nan); a sample
    whose values are all equal (or a single value) gives (value, value), since every resample
    has that mean.
    """
    from scipy.stats import bootstrap

    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1); got {alpha}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}")
    v = np.asarray(values, dtype=np.float64).ravel()
    n = v.size
    if n == 0:
        return float("nan"), float("nan")
    if (v == v[0]).all():
        return float(v[0]), float(v[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # DegenerateDataWarning: handled by the fallback below
        res = bootstrap((v,), np.mean, n_resamples=n_boot, batch=max(1, _MAX_CELLS // n), vectorized=True,
                        confidence_level=1 - alpha, method="BCa", rng=np.random.default_rng(seed))
    lo, hi = res.confidence_interval
    if not (np.isfinite(lo) and np.isfinite(hi)):
        lo, hi = np.quantile(res.bootstrap_distribution, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)

