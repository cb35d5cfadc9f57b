"""Paired tests and claim verdicts on hand-made per-question scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kgrag_lib.eval.paired import (CONFIRMED, MIN_EQUIVALENCE_N, NO_SIGNAL, NOT_SEPARABLE, REFUTED, claim_fields,
                                   decisive_p, equivalence_rule_before, paired_test, tost_proportions, tost_t, verdict)


def test_mcnemar_on_binary_scores_matches_the_exact_binomial():
    # 12 questions A right and B wrong, 2 the other way, 86 ties: discordant 14, k = 12
    a = [1] * 12 + [0] * 2 + [1] * 40 + [0] * 46
    b = [0] * 12 + [1] * 2 + [1] * 40 + [0] * 46
    r = paired_test(a, b)
    assert r.test == "mcnemar (exact)" and (r.a_only, r.b_only) == (12, 2) and r.n == 100
    # two-sided exact binomial: 2 * P(X <= 2 | 14, 0.5) = 2 * (1 + 14 + 91) / 2**14
    assert r.p_value == pytest.approx(2 * 106 / 2 ** 14)
    assert r.diff == pytest.approx(10.0) and r.mean_a == pytest.approx(52.0) and r.mean_b == pytest.approx(42.0)
    lo, hi = r.ci95
    assert 0 < lo < 10 < hi
    assert verdict(">", r) == CONFIRMED and verdict("<", r) == REFUTED
    # "about the same": the difference is significant, but its interval reaches inside ±5 points,
    # so it neither confirms nor refutes equivalence (the rule before TOST called it refuted)
    assert lo < 5 and verdict("~", r) == NOT_SEPARABLE and equivalence_rule_before(r) == REFUTED


def test_few_questions_are_not_separable():
    r = paired_test([1, 1, 0, 1], [0, 1, 0, 0])
    assert r.p_value == pytest.approx(0.5)          # 2 discordant, both for A
    assert verdict(">", r) == NOT_SEPARABLE and verdict("<", r) == NOT_SEPARABLE


def _tost_by_hand(b, c, n, margin=5.0):
    """TOST of paired proportions worked independently of the module: 0.5 added to each discordant
    cell, the null-restricted P(B only) found by maximizing the multinomial likelihood numerically,
    and the two one-sided score tests."""
    from scipy.optimize import minimize_scalar
    from scipy.stats import norm

    b, c, n = b + 0.5, c + 0.5, n + 1.0
    zs = []
    for d in (-margin / 100, margin / 100):
        def nll(p01):
            p10 = p01 + d
            return -(b * math.log(p10) + c * math.log(p01) + (n - b - c) * math.log(1 - p10 - p01))
        lo, hi = max(0.0, -d) + 1e-12, (1 - d) / 2 - 1e-12
        p01 = minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12}).x
        zs.append((b - c - n * d) / math.sqrt(n * (2 * p01 + d - d * d)))
    return max(norm.sf(zs[0]), norm.cdf(zs[1]))


def test_equal_systems_and_the_equivalence_margin():
    """TOST on 0/1 scores against the same test worked by hand (`_tost_by_hand`)."""
    same = [1, 0] * 50
    r = paired_test(same, same)
    assert r.p_value == 1.0 and r.diff == 0 and r.ci95 == (0.0, 0.0)
    # 0 of 100 disagree: equivalent within 5 points (p about 0.014)
    assert r.p_equiv == pytest.approx(_tost_by_hand(0, 0, 100), rel=1e-5) and r.p_equiv < 0.05
    assert verdict("~", r) == CONFIRMED and verdict(">", r) == NOT_SEPARABLE
    assert equivalence_rule_before(r) == CONFIRMED        # exact bound 3.62% <= 5: the old rule agreed here
    assert r.disagree_upper == pytest.approx(100 * (1 - 0.025 ** (1 / 100)))
    # two identical answers prove nothing
    tiny = paired_test([1, 0], [1, 0])
    assert tiny.p_equiv == pytest.approx(_tost_by_hand(0, 0, 2), rel=1e-5) and tiny.p_equiv > 0.3
    assert verdict("~", tiny) == NOT_SEPARABLE
    # 5 and 5 disagree of 20: far from equivalence within 5 points
    r = paired_test([1, 0, 1, 0] * 5, [1, 0, 0, 1] * 5)
    assert r.p_equiv == pytest.approx(_tost_by_hand(5, 5, 20), rel=1e-5) and r.p_equiv > 0.3
    assert verdict("~", r) == NOT_SEPARABLE
    # 3 and 1 disagree of 300: inside the margin
    a, b = [1] * 3 + [0] * 1 + [1] * 150 + [0] * 146, [0] * 3 + [1] * 1 + [1] * 150 + [0] * 146
    r = paired_test(a, b)
    assert r.p_equiv == pytest.approx(_tost_by_hand(3, 1, 300), rel=1e-5)
    assert r.p_equiv < 0.001 and verdict("~", r) == CONFIRMED
    # continuous scores: fewer than MIN_EQUIVALENCE_N pairs leave TOST undecided, at least that many decide it
    few = paired_test([0.5] * 10, [0.5] * 10)
    assert math.isnan(few.p_equiv) and verdict("~", few) == NOT_SEPARABLE
    assert verdict("~", paired_test([0.5] * MIN_EQUIVALENCE_N, [0.5] * MIN_EQUIVALENCE_N)) == CONFIRMED


def test_tost_on_binary_scores_is_not_anti_conservative_at_small_n():
    """At a true difference exactly on the margin, TOST may confirm equivalence at most alpha of
    the time. Simulated paired 0/1 outcomes with a 5-point difference, discordance split
    12.5 / 7.5% or all one way (5 / 0%, where a Wald test that sees no disagreement would confirm),
    on 20, 40, 100 and 300 questions."""
    import numpy as np

    rng = np.random.default_rng(3)
    for n in (20, 40, 100, 300):
        for cells in ([0.125, 0.075], [0.05, 0.0], [0.0, 0.05]):
            draws = rng.multinomial(n, [*cells, 1 - sum(cells)], size=2000)
            rate = np.mean([tost_proportions(int(a), int(b), n) < 0.05 for a, b, _ in draws])
            assert rate <= 0.055, (n, cells, rate)
    # and it has power: no true difference, 4% discordant, 300 questions
    draws = rng.multinomial(300, [0.02, 0.02, 0.96], size=1000)
    assert np.mean([tost_proportions(int(a), int(b), 300) < 0.05 for a, b, _ in draws]) > 0.9
    with pytest.raises(ValueError, match="discordant"):
        tost_proportions(6, 5, 10)


def test_tost_on_continuous_scores_matches_two_one_sided_t_tests():
    """p_equiv of F1-like scores equals the larger p of scipy's one-sided one-sample t-tests of
    d + margin > 0 and d - margin < 0 (computed here independently of the module)."""
    import numpy as np
    from scipy.stats import ttest_1samp

    rng = np.random.default_rng(11)
    b = rng.uniform(0.2, 0.8, 60)
    a = np.clip(b + rng.normal(0.01, 0.08, 60), 0, 1)
    r = paired_test(a, b, margin=5.0)
    d = 100 * (a - b)
    expected = max(ttest_1samp(d + 5.0, 0.0, alternative="greater").pvalue,
                   ttest_1samp(d - 5.0, 0.0, alternative="less").pvalue)
    assert r.test == "sign-flip permutation" and r.equiv_test == "tost paired t"
    assert r.sd_diff == pytest.approx(d.std(ddof=1))
    assert r.p_equiv == pytest.approx(expected, rel=1e-9)
    assert verdict("~", r) == (CONFIRMED if expected < 0.05 else NOT_SEPARABLE)
    assert tost_t(r.diff, r.sd_diff, 60) == pytest.approx(expected, rel=1e-9)
    assert math.isnan(tost_t(r.diff, r.sd_diff, MIN_EQUIVALENCE_N - 1))
    # a margin stated by the claim is used: a 1-point margin is far too tight for this spread
    assert verdict("~", r, margin=1.0) == NOT_SEPARABLE
    tight = paired_test(a, b, margin=1.0)
    assert tight.margin == 1.0 and tight.p_equiv > 0.05
    with pytest.raises(ValueError, match="margin"):
        paired_test(a, b, margin=0)


def test_equivalence_is_refuted_only_by_a_difference_wholly_outside_the_margin():
    a = [1] * 30 + [0] * 2 + [1] * 20 + [0] * 48
    b = [0] * 30 + [1] * 2 + [1] * 20 + [0] * 48
    r = paired_test(a, b)                                  # diff 28 points, interval far above 5
    assert r.p_value < 0.05 and r.ci95[0] > 5
    assert verdict("~", r) == REFUTED and r.p_equiv > 0.5
    assert decisive_p("~", REFUTED, r.p_value, r.p_equiv) == r.p_value     # refuted by the ordinary test
    same = paired_test([1, 0] * 50, [1, 0] * 50)
    assert decisive_p("~", CONFIRMED, same.p_value, same.p_equiv) == same.p_equiv
    assert decisive_p(">", NOT_SEPARABLE, 0.3, 0.01) == 0.3
    assert decisive_p("~", NOT_SEPARABLE, 0.3, float("nan")) == 0.3        # TOST undecided: only p can decide
    fields = claim_fields("~", r)
    assert fields["verdict before TOST"] == REFUTED and fields["margin"] == 5.0 and fields["p_equiv"] == r.p_equiv
    assert "verdict before TOST" not in claim_fields(">", r) and math.isnan(claim_fields(">", r)["p_equiv"])


def test_continuous_scores_use_the_sign_flip_test():
    a = [0.9, 0.8, 0.7, 1.0, 0.6] * 20
    b = [0.5, 0.6, 0.4, 0.7, 0.5] * 20
    r = paired_test(a, b, seed=1)
    assert r.test == "sign-flip permutation" and r.p_value < 0.01 and verdict(">", r) == CONFIRMED
    assert r.diff == pytest.approx(26.0)
    assert paired_test(a, b, seed=1) == r                       # seeded: reproducible


def test_bad_input():
    with pytest.raises(ValueError, match="equal-length"):
        paired_test([1, 0], [1])
    empty = paired_test([], [])
    assert empty.n == 0 and math.isnan(empty.diff) and verdict(">", empty) == NOT_SEPARABLE
    with pytest.raises(ValueError, match="relation"):
        verdict("=", paired_test([1], [0]))


def test_a_few_same_sign_differences_do_not_confirm_a_claim():
    """One question, or three that all favour A, cannot separate two systems: the exact sign-flip
    p is 1 and 2/8 (a bootstrap p was 0 there, since every resample keeps the sign)."""
    one = paired_test([0.12], [0.0])
    assert one.p_value == 1.0 and verdict(">", one) == NOT_SEPARABLE
    three = paired_test([0.5, 0.4, 0.9], [0.1, 0.2, 0.3])
    assert three.p_value == pytest.approx(0.25) and verdict(">", three) == NOT_SEPARABLE
    six = paired_test([0.5, 0.4, 0.9, 0.6, 0.7, 0.8], [0.1, 0.2, 0.3, 0.2, 0.1, 0.3])
    assert six.p_value == pytest.approx(2 / 64) and verdict(">", six) == CONFIRMED   # exact: 2 of 64 patterns


def test_sign_flip_p_is_exact_over_the_differing_questions():
    """Ties change nothing under a sign flip, so they are dropped; the p over the k differing
    questions is then exact (matched against brute force) up to EXACT_FLIP_N of them, so a
    verdict at the 0.05 threshold never hangs on Monte Carlo noise."""
    import itertools

    import numpy as np

    from kgrag_lib.eval.paired import EXACT_FLIP_N, sign_flip_p

    rng = np.random.default_rng(7)
    for k in (1, 2, 5, 9, 12):
        d = rng.normal(0.1, 0.3, k)
        brute = np.mean([abs(np.dot(s, d)) >= abs(d.sum()) - 1e-12 for s in itertools.product((-1, 1), repeat=k)])
        assert sign_flip_p(d) == pytest.approx(brute, abs=1e-12)
        assert sign_flip_p(np.concatenate([d, np.zeros(90)])) == sign_flip_p(d)    # 90 ties: same p
    # thirds and halves as Avg of EM/F1/Acc makes them: equal sums of different patterns count
    d = np.array([1 / 3, 1 / 3, 2 / 3, -1 / 3, 1.0, 1 / 3])
    brute = np.mean([abs(np.dot(s, d)) >= abs(d.sum()) - 1e-12 for s in itertools.product((-1, 1), repeat=6)])
    assert sign_flip_p(d) == pytest.approx(brute)
    # 30 differing questions among 100: exact, a multiple of 2^-30, and seed-free
    d = np.concatenate([rng.normal(0.08, 0.3, 30), np.zeros(70)])
    p = sign_flip_p(d, seed=1)
    assert 30 <= EXACT_FLIP_N and p == sign_flip_p(d, seed=2) and (p * 2 ** 30) == pytest.approx(round(p * 2 ** 30))
    # beyond EXACT_FLIP_N: the grid's bracket, seed-free, close to the normal approximation
    d = rng.normal(0.0, 0.3, 200)
    d += 1.96 * d.std() / np.sqrt(200) - d.mean()           # z ≈ 1.96: p ≈ 0.05
    assert sign_flip_p(d, seed=1) == sign_flip_p(d, seed=2)
    assert sign_flip_p(d) == pytest.approx(0.05, abs=0.006)


def test_sign_flip_bounds_bracket_the_exact_p_and_the_p_is_their_upper_end():
    """Beyond EXACT_FLIP_N the p comes from a grid: its bounds hold the brute-force p for any
    differences (thirds as Avg makes them, ties, negative sums), and the p taken is the upper one,
    so no draw decides a verdict and the test never rejects more often than its level."""
    import itertools

    import numpy as np

    from kgrag_lib.eval.paired import EXACT_FLIP_N, FLIP_P_WIDTH, sign_flip_bounds, sign_flip_p

    rng = np.random.default_rng(3)
    cases = [rng.normal(0.1, 0.3, 14), rng.choice([1 / 3, 2 / 3, -1 / 3, 0.5, -0.25], 16), -np.abs(rng.normal(0, 1, 12))]
    for d in cases:
        brute = np.mean([abs(np.dot(s, d)) >= abs(d.sum()) * (1 - 1e-9) for s in itertools.product((-1, 1), repeat=len(d))])
        for bins in (64, 1 << 12, 1 << 19):       # a coarse grid gives wide bounds, never wrong ones
            lo, hi = sign_flip_bounds(d, bins)
            assert lo <= brute <= hi, (bins, lo, brute, hi)
    # 237 questions as unit 1's Avg differences look: the p is the bracket's upper end, which
    # 100,000 random sign patterns agree with to within their own error
    d = np.round(rng.choice([0, 0, 0, 1 / 3, -1 / 3, 2 / 3, -2 / 3, 1], 237) + rng.normal(0.02, 0.05, 237), 4)
    p, (lo, hi) = sign_flip_p(d), sign_flip_bounds(d)
    assert len(d[d != 0]) > EXACT_FLIP_N and p == hi and hi - lo <= FLIP_P_WIDTH
    signs = np.random.default_rng(0).choice((-1.0, 1.0), size=(100_000, len(d)))
    mc = np.mean(np.abs(signs @ d) >= abs(d.sum()) * (1 - 1e-9))
    # thousands of differing questions: no grid is tried (it would take minutes), seeded Monte Carlo instead
    big = rng.normal(0.0, 0.3, 4000)
    big += 1.96 * big.std() / np.sqrt(4000) - big.mean()
    assert sign_flip_p(big, n_perm=20_000, seed=1) == pytest.approx(0.05, abs=0.01)
    assert mc == pytest.approx(p, abs=max(5 * np.sqrt(p * (1 - p) / len(signs)), 1e-3))


def test_a_metric_no_question_scores_on_tests_no_claim():
    """0 vs 0 (exact match against sentence answers) says nothing about either side: an equivalence
    claim is not "confirmed" by it, nor is an ordering claim merely short of questions. One scoring
    question on either side is a test again."""
    r = paired_test([0] * 100, [0] * 100)
    assert r.p_value == 1.0 and r.disagree_upper < 5 and r.p_equiv < 0.05   # TOST alone would confirm
    assert {verdict(rel, r) for rel in ("~", ">", "<")} == {NO_SIGNAL} and equivalence_rule_before(r) == NO_SIGNAL
    assert NO_SIGNAL.startswith("not testable")
    one = paired_test([0] * 200, [1] + [0] * 199)
    assert verdict("~", one) == CONFIRMED and verdict(">", one) == NOT_SEPARABLE


@pytest.mark.parametrize("margin", [0, -5.0, float("nan"), float("inf"), True, "5"])
def test_a_margin_that_is_no_margin_is_refused_everywhere_tost_reads_one(margin):
    """Issue 59, probed: `verdict('~', r, margin=inf)` confirmed any equivalence, 0 or a negative
    margin refuted one whose interval missed 0, NaN decided 'not separable', True was a 1-point
    margin; `paired_test` refused only some of them. Each TOST entry now refuses them in one line."""
    from kgrag_lib.errors import ConfigError
    from kgrag_lib.eval.paired import equivalence_rule_before, tost_proportions, tost_t

    r = paired_test([1, 0, 1, 1] * 10, [1, 0, 1, 1] * 9 + [1, 0, 1, 0])
    says = r"margin must be a finite positive number of points \(e\.g\. 5\.0\); got "
    for call in (lambda: paired_test([1, 0], [1, 0], margin=margin), lambda: verdict("~", r, margin=margin),
                 lambda: tost_proportions(3, 2, 40, margin=margin), lambda: tost_t(1.0, 10.0, 40, margin=margin),
                 lambda: equivalence_rule_before(r, margin=margin)):
        with pytest.raises(ConfigError, match=says):
            call()


def test_numpy_margins_are_margins_and_degenerate_pairs_decide_nothing():
    """A margin read from a table column (numpy) was refused by `paired_test` though `verdict` took
    it; no pairs, and a NaN spread, give no TOST p (a NaN spread used to count as no spread: p 0)."""
    from kgrag_lib.eval.paired import tost_proportions, tost_t

    a, b = [1, 0, 1, 1] * 10, [1, 0, 1, 1] * 9 + [1, 0, 1, 0]
    assert paired_test(a, b, margin=np.int64(5)).p_equiv == paired_test(a, b, margin=5.0).p_equiv
    assert paired_test(a, b, margin=np.float32(5)).margin == 5.0
    none = paired_test([], [])
    assert none.n == 0 and math.isnan(none.p_equiv) and verdict("~", none) == NOT_SEPARABLE
    assert math.isnan(tost_proportions(0, 0, 0)) and math.isnan(tost_t(0.0, 1.0, 0))
    assert math.isnan(tost_t(1.0, float("nan"), 40)) and math.isnan(tost_t(float("nan"), 1.0, 40))
    assert tost_t(1.0, 0.0, 40) == 0.0 and tost_t(6.0, 0.0, 40) == 1.0   # no spread: certain, as documented
