"""The n a paired claim needs (eval.power), checked against closed forms and simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kgrag_lib.eval.paired import MIN_EQUIVALENCE_N, tost_t
from kgrag_lib.eval.power import n_for_equivalence, n_for_power, power_equivalence, power_paired


def test_n_for_power_is_the_smallest_n_reaching_the_power_and_a_paired_t_test_gets_about_it():
    from scipy.stats import norm, t

    n = n_for_power(10.0, 30.0, 0.05)              # effect 10 points, sd of the difference 30 points
    assert power_paired(10.0, 30.0, n, 0.05) >= 0.8 > power_paired(10.0, 30.0, n - 1, 0.05)
    normal = ((norm.ppf(0.975) + norm.ppf(0.8)) * 30.0 / 10.0) ** 2          # 70.6: the closed z form
    assert math.ceil(normal) - 1 <= n <= math.ceil(normal)
    # the test the report runs on such scores is exact, not z: simulated at the planned n it gets
    # within a few points of the planned power (the t tails cost a little at n = 71)
    rng = np.random.default_rng(3)
    d = rng.normal(10.0, 30.0, size=(4000, n))
    stat = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    hits = np.mean(2 * t.sf(np.abs(stat), n - 1) < 0.05)
    assert 0.76 <= hits <= 0.82
    assert n_for_power(-10.0, 30.0, 0.05) == n
    assert n_for_power(10.0, 30.0, 0.05, power=0.9) > n and n_for_power(10.0, 30.0, 0.01) > n
    with pytest.raises(ValueError, match="delta=0"):
        n_for_power(0.0, 30.0, 0.05)


def test_n_for_equivalence_reaches_80_percent_power_in_simulation():
    from scipy.stats import norm

    n = n_for_equivalence(5.0, 20.0)
    closed = ((norm.ppf(0.95) + norm.ppf(0.9)) * 20.0 / 5.0) ** 2            # true diff 0: beta / 2 each side
    assert math.ceil(closed) <= n <= math.ceil(closed) + 3
    assert power_equivalence(5.0, 20.0, n, 0.05) >= 0.8 > power_equivalence(5.0, 20.0, n - 1, 0.05)
    rng = np.random.default_rng(5)
    hits = np.mean([tost_t(float(d.mean()), float(d.std(ddof=1)), n) < 0.05
                    for d in rng.normal(0.0, 20.0, size=(3000, n))])
    assert hits == pytest.approx(0.8, abs=0.03)
    # a true difference uses up margin; at the margin no n will do
    assert n_for_equivalence(5.0, 20.0, diff=2.0) > n and n_for_equivalence(5.0, 20.0, diff=5.0) is None
    # continuous scores never below MIN_EQUIVALENCE_N (TOST is not decided there); 0/1 scores may be
    assert n_for_equivalence(5.0, 1.0) == MIN_EQUIVALENCE_N and n_for_equivalence(5.0, 1.0, binary=True) < 10


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="sd"):
        n_for_power(5.0, 0.0, 0.05)
    with pytest.raises(ValueError, match="power"):
        n_for_power(5.0, 10.0, 0.05, power=1.0)
    with pytest.raises(ValueError, match="margin"):
        n_for_equivalence(-1.0, 10.0)
    with pytest.raises(ValueError, match="alpha"):
        n_for_equivalence(5.0, 10.0, alpha=0.0)
