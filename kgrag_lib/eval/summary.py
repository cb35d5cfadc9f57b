"""Turn a run's prediction rows into the numbers a paper table needs.

Scores are in percent with bootstrap 95% intervals; failed questions (unparsable model
output) count as wrong and are reported separately; LLM cost is averaged per question.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from . import metrics as M
from .bootstrap import bootstrap_ci

DEFAULT_METRICS = ("em", "f1", "acc", "hit1", "mentions")


def _is_yes_no(answers: list[str]) -> bool:
    return bool(answers) and all(M.normalize_yes_no(a) is not None and a.strip().lower() in {"yes", "no", "true", "false"} for a in answers)


def per_item_scores(row: dict[str, Any], metrics: Iterable[str]) -> dict[str, float]:
    pred = row.get("prediction") or ""
    golds = list(row.get("answers") or [])
    if _is_yes_no(golds):  # StrategyQA: compare normalized yes/no, Acc only is meaningful
        p = M.normalize_yes_no(pred)
        g = {M.normalize_yes_no(a) for a in golds}
        hit = float(p is not None and p in g)
        return {m: hit for m in metrics}
    return {m: float(M.METRICS[m](pred, golds)) for m in metrics}


def summarize(rows: list[dict[str, Any]], metrics: Iterable[str] | None = None, ci: bool = True) -> dict[str, Any]:
    metrics = tuple(metrics or DEFAULT_METRICS)
    out: dict[str, Any] = {"n": len(rows), "failed": int(sum(bool(r.get("failed")) for r in rows))}
    if not rows:
        return out
    table = {m: np.array([per_item_scores(r, metrics)[m] for r in rows]) for m in metrics}
    for m, vals in table.items():
        out[m] = round(100.0 * float(vals.mean()), 2)
        if ci:
            lo, hi = bootstrap_ci(vals)
            out[f"{m}_ci95"] = [round(100.0 * lo, 2), round(100.0 * hi, 2)]
    if {"em", "f1", "acc"} <= set(metrics):
        out["avg"] = round((out["em"] + out["f1"] + out["acc"]) / 3, 2)
    cost_keys = sorted({k for r in rows for k in (r.get("cost") or {})})
    out["cost_per_question"] = {
        k: round(float(np.mean([float((r.get("cost") or {}).get(k, 0.0)) for r in rows])), 3) for k in cost_keys
    }
    return out
