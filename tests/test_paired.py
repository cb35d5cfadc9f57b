"""Paired tests and claim verdicts on hand-made per-question scores."""

from __future__ import annotations

import math

import pytest

from kgrag_lib.eval.paired import CONFIRMED, NO_SIGNAL, NOT_SEPARABLE, REFUTED, paired_test, verdict


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
    assert verdict(">", r) == CONFIRMED and verdict("<", r) == REFUTED and verdict("~", r) == REFUTED


def test_few_questions_are_not_separable():
    r = paired_test([1, 1, 0, 1], [0, 1, 0, 0])
    assert r.p_value == pytest.approx(0.5)          # 2 discordant, both for A
    assert verdict(">", r) == NOT_SEPARABLE and verdict("<", r) == NOT_SEPARABLE


def test_equal_systems_and_the_equivalence_margin():
    same = [1, 0] * 50
    r = paired_test(same, same)
    assert r.p_value == 1.0 and r.diff == 0 and r.ci95 == (0.0, 0.0)
    # 0 of 100 disagree: exact upper bound 1 - 0.025 ** (1 / 100) = 3.62% <= 5 points
    assert r.disagree_upper == pytest.approx(100 * (1 - 0.025 ** (1 / 100)))
    assert verdict("~", r) == CONFIRMED and verdict(">", r) == NOT_SEPARABLE
    # two identical answers prove nothing: the bootstrap interval is [0, 0], the bound is 84 points
    tiny = paired_test([1, 0], [1, 0])
    assert tiny.ci95 == (0.0, 0.0) and tiny.disagree_upper > 80 and verdict("~", tiny) == NOT_SEPARABLE
    # continuous scores: an interval from fewer than 30 questions never confirms equivalence
    assert verdict("~", paired_test([0.5] * 10, [0.5] * 10)) == NOT_SEPARABLE
    assert verdict("~", paired_test([0.5] * 40, [0.5] * 40)) == CONFIRMED
    # a 20-question sample cannot show equivalence within 5 points even when nothing differs much
    r = paired_test([1, 0, 1, 0] * 5, [1, 0, 0, 1] * 5)
    assert verdict("~", r) == NOT_SEPARABLE


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
    # beyond EXACT_FLIP_N: Monte Carlo, seeded, close to the normal approximation
    d = rng.normal(0.0, 0.3, 200)
    d += 1.96 * d.std() / np.sqrt(200) - d.mean()           # z ≈ 1.96: p ≈ 0.05
    assert sign_flip_p(d, seed=1) == sign_flip_p(d, seed=1)
    assert sign_flip_p(d, seed=1) == pytest.approx(0.05, abs=0.006)


def test_a_metric_no_question_scores_on_tests_no_claim():
    """0 vs 0 (exact match against sentence answers) says nothing about either side: an equivalence
    claim is not "confirmed" by it, nor is an ordering claim merely short of questions. One scoring
    question on either side is a test again."""
    r = paired_test([0] * 100, [0] * 100)
    assert r.p_value == 1.0 and r.disagree_upper < 5
    assert {verdict(rel, r) for rel in ("~", ">", "<")} == {NO_SIGNAL}
    assert NO_SIGNAL.startswith("not testable")
    one = paired_test([0] * 200, [1] + [0] * 199)
    assert verdict("~", one) == CONFIRMED and verdict(">", one) == NOT_SEPARABLE
