"""Metrics checked against values worked out by hand (see the comment on each case)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.eval import (
    accuracy,
    bootstrap_ci,
    exact_match,
    f1,
    hit1,
    hit1_exact,
    hit1_first,
    normalize_answer,
    normalize_yes_no,
    recall_at_k,
    register_metric,
    score_items,
    score_records,
    yesno_agree,
)
from kgrag_lib.eval.metrics import METRICS
from kgrag_lib.paths import data_root
from kgrag_lib.records import Prediction

DATA = data_root()


def test_normalize_answer_squad_rules():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("A cat, an apple and THE dog.") == "cat apple and dog"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("  \t\n") == ""
    assert normalize_answer("U.S.A.") == "usa"


def test_f1_hand_computed():
    # pred "eiffel tower in paris" (4 tokens), gold "eiffel tower" (2): 2 shared.
    # P = 2/4, R = 2/2 -> F1 = 2*0.5*1/1.5 = 2/3
    assert f1("the Eiffel tower in Paris", ["Eiffel Tower"]) == pytest.approx(2 / 3)
    # pred "its berlin" vs "berlin": P = 1/2, R = 1 -> 2/3 ("It's" loses its apostrophe)
    assert f1("It's Berlin.", ["Berlin"]) == pytest.approx(2 / 3)
    # repeated tokens count by multiplicity: pred "new new york" vs "new york": 2 shared of 3 -> P=2/3, R=1 -> 0.8
    assert f1("new new york", ["New York"]) == pytest.approx(0.8)
    assert f1("Paris", ["London"]) == 0.0


def test_max_over_golds_even_when_the_last_gold_is_worse():
    # golds: "Eiffel Tower" gives 2/3; "tower" gives P=1/4, R=1 -> 0.4. Max is 2/3, not the last (0.4).
    assert f1("the Eiffel tower in Paris", ["Eiffel Tower", "tower"]) == pytest.approx(2 / 3)
    assert f1("the Eiffel tower in Paris", ["tower", "Eiffel Tower"]) == pytest.approx(2 / 3)
    assert exact_match("paris", ["Paris", "France"]) == 1.0
    assert exact_match("France", ["Paris", "France"]) == 1.0
    assert hit1("Paris", ["Paris", "City of Light"]) == 1.0
    assert accuracy("it is Paris", ["Paris", "City of Light"]) == 1.0


def test_acc_and_the_three_hit1_differ_as_documented():
    pred = "It is Paris, France."
    assert accuracy(pred, ["paris"]) == 1.0  # substring, case-insensitive
    assert exact_match(pred, ["paris"]) == 0.0
    assert hit1(pred, ["paris"]) == 1.0       # a gold entity occurs in the answer
    assert hit1_exact(pred, ["paris"]) == 0.0  # §4.2.1 literally: the answer is the entity
    assert hit1_first(pred, ["paris"]) == 0.0  # first item "it is paris" is not an entity
    # substring vs whole tokens
    assert accuracy("Parisian", ["Paris"]) == 1.0
    assert hit1("Parisian", ["Paris"]) == 0.0
    # Hit@1 exact strips whitespace and lower-cases only: "Paris." keeps its full stop.
    assert hit1_exact("  PARIS \n", ["Paris"]) == 1.0
    assert hit1_exact("Paris.", ["Paris"]) == 0.0
    assert hit1("Paris.", ["Paris"]) == 1.0 and hit1_first("Paris.", ["Paris"]) == 1.0
    # The MetaQA paper's own example: label "Brad Pitt", answer "Pitt is the actor in question".
    assert hit1("Pitt is the actor in question", ["Brad Pitt"]) == 0.0
    assert hit1("The answer is Brad Pitt.", ["Brad Pitt"]) == 1.0
    # entity lists: the first entity decides hit1_first; any gold in the list is a hit1
    golds = ["Louis Malle"]
    assert hit1_first("Louis Malle, Jeanne Moreau", golds) == 1.0
    assert hit1_first("Jeanne Moreau, Louis Malle", golds) == 0.0 and hit1("Jeanne Moreau, Louis Malle", golds) == 1.0
    assert hit1_first("Louis Malle and Jeanne Moreau", golds) == 1.0
    assert hit1_first("\nLouis Malle\nJeanne Moreau", golds) == 1.0
    assert hit1_first("Louis Malle | The Lovers", golds) == 1.0


def test_empty_prediction_and_missing_golds():
    for fn in (exact_match, f1, accuracy, hit1, hit1_exact, hit1_first):
        assert fn("", ["London"]) == 0.0
        assert fn(None, ["London"]) == 0.0
        assert fn("London", []) is None
        assert fn("London", ["", "  "]) is None  # empty golds are ignored, not matched by everything
    assert exact_match("London", "london") == 1.0  # a bare string is one gold


def test_unicode_answers():
    assert exact_match("Zürich!", ["zürich"]) == 1.0
    # SQuAD normalization keeps accents: "São Paulo" and "Sao Paulo" differ (as in the official script)
    assert exact_match("São Paulo", ["Sao Paulo"]) == 0.0
    # "gödel escher bach" vs "gödel": P = 1/3, R = 1 -> 0.5
    assert f1("Gödel, Escher, Bach", ["Gödel"]) == pytest.approx(0.5)
    assert accuracy("Directed by Ингмар Бергман", ["ингмар бергман"]) == 1.0
    assert hit1("東京", ["東京"]) == 1.0


@pytest.mark.parametrize("text,expected", [
    ("Yes.", "yes"), ("yes, because the Nile is longer", "yes"), ("True", "yes"), ("**Yes**", "yes"),
    ("no", "no"), ("No, it is not.", "no"), ("False.", "no"), ("The answer is: No", "no"),
    ("So the answer is yes.", "yes"), (True, "yes"), (False, "no"),
    ("Maybe", None), ("", None), (None, None), ("Nobody knows", None), ("Norway", None),
])
def test_normalize_yes_no(text, expected):
    assert normalize_yes_no(text) == expected


def test_yesno_agree():
    assert yesno_agree("Yes, it is.", ["yes"]) == 1.0
    assert yesno_agree("no", [True]) == 0.0
    assert yesno_agree("Paris", ["yes"]) == 0.0  # an unknown prediction is wrong
    assert yesno_agree("yes", ["Paris"]) is None  # not a yes/no question
    assert yesno_agree("False", "false") == 1.0


def test_recall_at_k():
    assert recall_at_k(["a", "b", "c"], ["c", "d"], 2) == 0.0
    assert recall_at_k(["a", "b", "c"], ["c", "d"], 3) == 0.5
    assert recall_at_k(["c", "d"], ["c", "c"], 5) == 1.0  # golds counted once
    assert recall_at_k(["a"], [], 5) is None
    assert recall_at_k([], ["a"], 5) == 0.0
    with pytest.raises(ValueError):
        recall_at_k(["a"], ["a"], 0)


RECORDS = [
    # pred, golds                                    em  f1   acc hit1 hit1_exact hit1_first
    ("Paris", ["Paris"]),                          # 1   1    1   1    1          1
    ("the Eiffel tower in Paris", ["Eiffel Tower"]),  # 0   2/3  1   1    0          0
    ("", ["London"]),                              # 0   0    0   0    0          0
    ("It's Berlin.", ["Berlin"]),                  # 0   2/3  1   1    0          0
]


def test_score_records_hand_computed():
    recs = [{"prediction": p, "answers": a} for p, a in RECORDS]
    s = score_records(recs)
    assert s["n"] == 4
    assert s["em"] == pytest.approx(25.0)
    assert s["f1"] == pytest.approx((1 + 2 / 3 + 0 + 2 / 3) / 4 * 100)  # 58.33
    assert s["acc"] == pytest.approx(75.0)
    assert s["hit1"] == pytest.approx(75.0)
    full = score_records(recs, ("hit1", "hit1_exact", "hit1_first"))
    assert (full["hit1"], full["hit1_exact"], full["hit1_first"]) == (75.0, 25.0, 25.0)
    assert "per_item" not in s and not any(k.startswith("n_") for k in s)
    per = score_records(recs, ("em",), per_item=True)["per_item"]["em"]
    assert per == [1.0, 0.0, 0.0, 0.0]
    # Prediction objects score the same as dicts
    preds = [Prediction(qid=str(i), question="q", prediction=p, answers=a, method="m") for i, (p, a) in enumerate(RECORDS)]
    assert score_records(preds) == s


def test_score_records_skips_items_a_metric_does_not_apply_to():
    recs = [
        {"prediction": "yes", "answers": ["yes"], "trace": {"retrieved_ids": ["p1", "p2"]}, "supporting": ["p2"]},
        {"prediction": "no", "answers": ["yes"], "retrieved_ids": ["p3"], "gold_ids": ["p1", "p9"]},
        {"prediction": "Rome", "answers": ["Rome"]},
    ]
    s = score_records(recs, ("em", "yesno_agree", "recall@1", "recall@2"))
    assert s["n"] == 3 and s["em"] == pytest.approx(200 / 3)
    assert s["yesno_agree"] == pytest.approx(50.0) and s["n_yesno_agree"] == 2
    # item 1: p2 at rank 2 -> recall@1 0, recall@2 1; item 2: golds p1, p9 not retrieved -> 0; item 3: no golds
    assert s["recall@1"] == 0.0 and s["recall@2"] == pytest.approx(50.0) and s["n_recall@2"] == 2
    empty = score_records([], ("em",), ci=True)
    assert empty == {"n": 0, "em": None, "em_ci95": None}
    with pytest.raises(ConfigError, match="unknown metric"):
        score_records(recs, ("bleu",))


def test_registry_accepts_new_metrics():
    @register_metric("answer_len_le3")
    def _short(pred, golds):
        """1 when the prediction has at most 3 words."""
        return float(len(pred.split()) <= 3)

    try:
        vals = score_items([{"prediction": "a b c d", "answers": ["x"]}, {"prediction": "x", "answers": []}], ("answer_len_le3",))
        assert vals == {"answer_len_le3": [0.0, 1.0]}
        assert METRICS["em"] is exact_match and METRICS["hit1_exact"] is hit1_exact
    finally:
        METRICS.pop("answer_len_le3")


def test_yes_no_questions_get_standard_em_f1_and_raw_answer_acc():
    """SQuAD/HotpotQA EM and F1 on the normalized answer for every question; Acc is a gold
    substring of the raw final answer (the trace's answer_raw); yes/no agreement is its own
    column."""
    recs = [
        {"prediction": "Yes, because the Nile is longer.", "answers": ["yes"]},
        {"prediction": "No.", "answers": [True]},
        {"prediction": "I cannot tell", "answers": ["no"]},
        {"prediction": "Rome", "answers": ["Rome"], "trace": {"answer_raw": "Answer: Rome"}},
        {"prediction": "yes", "answers": ["no"], "trace": {"answer_raw": "yes, not no"}},
    ]
    s = score_records(recs, ("em", "f1", "acc", "yesno_agree"))
    # em: only "Rome" -> 1/5; f1: "yes because nile is longer" ("the" dropped) P=1/5, R=1 -> 1/3,
    # then 0, 0, 1, 0; acc: "yes" in item 1, "true" not in "no.", "no" in "cannot", "rome" in the
    # raw answer, "no" in the raw "yes, not no" (not in the cleaned "yes") -> 4/5
    assert s["em"] == pytest.approx(20.0)
    assert s["f1"] == pytest.approx((1 / 3 + 0 + 0 + 1 + 0) / 5 * 100)
    assert s["acc"] == pytest.approx(80.0)
    # yes/no agreement: items 1 (yes=yes) 2 (no vs True) 3 (unknown) 5 (yes vs no); item 4 n/a
    assert s["yesno_agree"] == pytest.approx(25.0) and s["n_yesno_agree"] == 4


def test_bootstrap_ci():
    assert bootstrap_ci([1.0] * 30) == (1.0, 1.0)
    v = np.array([1.0] * 200 + [0.0] * 200)
    lo, hi = bootstrap_ci(v, n_boot=2000, seed=1)
    assert lo < 0.5 < hi
    # normal approximation: half-width 1.96 * sqrt(0.25 / 400) = 0.049
    assert 0.07 < hi - lo < 0.13
    assert bootstrap_ci(v, seed=3) == bootstrap_ci(v, seed=3)
    assert bootstrap_ci(v, seed=3) != bootstrap_ci(v, seed=4)
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    # it is scipy's BCa interval with the seeded generator
    from scipy.stats import bootstrap
    ref = bootstrap((v,), np.mean, n_resamples=1000, method="BCa", rng=np.random.default_rng(3)).confidence_interval
    assert bootstrap_ci(v, seed=3) == pytest.approx((ref.low, ref.high))
    # a skewed small sample (1 of 10) still gets a finite interval around its mean
    lo, hi = bootstrap_ci([1.0] + [0.0] * 9)
    assert 0.0 <= lo <= 0.1 < hi <= 1.0
    s = score_records([{"prediction": p, "answers": a} for p, a in RECORDS * 10], ("em",), ci=True)
    lo, hi = s["em_ci95"]
    assert lo <= s["em"] <= hi and 0 <= lo and hi <= 100


@pytest.mark.skipif(not (DATA / "strategyqa" / "strategyqa_train.json").is_file(), reason="StrategyQA data not present")
def test_real_strategyqa_answers_are_yes_no():
    rows = json.load(open(DATA / "strategyqa" / "strategyqa_train.json", encoding="utf-8"))
    golds = [normalize_yes_no(r["answer"]) for r in rows]
    assert len(golds) == 2290 and set(golds) == {"yes", "no"}
    # always answering "Yes." scores the share of true answers
    s = score_records([{"prediction": "Yes.", "answers": [r["answer"]]} for r in rows], ("yesno_agree",))
    assert s["yesno_agree"] == pytest.approx(100 * np.mean([r["answer"] is True for r in rows]))


@pytest.mark.skipif(not (DATA / "metaqa" / "1-hop" / "vanilla" / "qa_test.txt").is_file(), reason="MetaQA data not present")
def test_real_metaqa_answers_under_the_three_hit1():
    lines = open(DATA / "metaqa" / "1-hop" / "vanilla" / "qa_test.txt", encoding="utf-8").read().splitlines()[:300]
    recs = [{"prediction": ans.split("|")[-1], "answers": ans.split("|")} for _, ans in (l.split("\t") for l in lines)]
    s = score_records(recs, ("hit1", "hit1_exact", "hit1_first", "em"))
    assert s["hit1"] == s["hit1_exact"] == s["hit1_first"] == 100.0
    # wrapping the gold in a sentence fails the literal and the first-entity Hit@1, not ours
    wrapped = [{"prediction": f"The answer is {r['prediction']}.", "answers": r["answers"]} for r in recs]
    s = score_records(wrapped, ("hit1", "hit1_exact", "hit1_first", "acc"))
    assert s["hit1"] == 100.0 and s["hit1_exact"] == 0.0 and s["hit1_first"] == 0.0 and s["acc"] == 100.0
