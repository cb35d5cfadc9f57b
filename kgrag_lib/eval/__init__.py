"""Scoring: the papers' answer metrics, Recall@k, and bootstrap confidence intervals."""

from kgrag_lib.eval.bootstrap import bootstrap_ci
from kgrag_lib.eval.metrics import (
    METRICS,
    accuracy,
    exact_match,
    f1,
    get_metric,
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

__all__ = [
    "METRICS",
    "accuracy",
    "bootstrap_ci",
    "exact_match",
    "f1",
    "get_metric",
    "hit1",
    "hit1_exact",
    "hit1_first",
    "normalize_answer",
    "normalize_yes_no",
    "recall_at_k",
    "register_metric",
    "score_items",
    "score_records",
    "yesno_agree",
]
