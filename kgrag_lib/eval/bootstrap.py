"""Percentile bootstrap confidence intervals for per-item scores.

Sample sizes on CPU are small (tens to hundreds of questions), so every reported mean
carries an interval; the draw is seeded so a table regenerates identically.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_MAX_CELLS = 4_000_000  # resample indices drawn per block: bounds memory for large n


def bootstrap_ci(values: Sequence[float] | np.ndarray, n_boot: int = 1000, seed: int = 0,
                 alpha: float = 0.05) -> tuple[float, float]:
    """(lo, hi) percentile interval of the mean, in the units of `values`.

    None entries are not accepted: drop them first. Empty input gives (nan, nan).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1); got {alpha}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}")
    v = np.asarray(values, dtype=np.float64).ravel()
    n = v.size
    if n == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot, dtype=np.float64)
    block = max(1, _MAX_CELLS // n)
    for start in range(0, n_boot, block):
        stop = min(n_boot, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = v[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)
