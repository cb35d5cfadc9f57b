"""Turn a run's prediction rows into the numbers a paper table needs.

Scores are in percent with bootstrap 95% intervals; failed questions (unparsable model
output) count as wrong and are reported separately; questions whose trace records issues
(a topic entity missing from the KB, a fallback the method took) are counted by kind of
issue; LLM cost is averaged per question.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .metrics import score_items
from .bootstrap import bootstrap_ci

DEFAULT_METRICS = ("em", "f1", "acc", "hit1", "hit1_exact", "hit1_first", "yesno_agree")


def summarize(rows: list[dict[str, Any]], metrics: Iterable[str] | None = None, ci: bool = True) -> dict[str, Any]:
    metrics = tuple(metrics or DEFAULT_METRICS)
    out: dict[str, Any] = {"n": len(rows), "failed": int(sum(bool(r.get("failed")) for r in rows))}
    if not rows:
        return out
    items = score_items(rows, metrics)
    for m, raw in items.items():
        vals = np.array([v for v in raw if v is not None], dtype=float)
        if not len(vals):  # e.g. recall@k on rows without gold passages
            continue
        out[m] = round(100.0 * float(vals.mean()), 2)
        if len(vals) != len(rows):   # e.g. a question without gold: the score is over the others only
            out[f"n_{m}"] = int(len(vals))
        if ci:
            lo, hi = bootstrap_ci(vals)
            out[f"{m}_ci95"] = [round(100.0 * lo, 2), round(100.0 * hi, 2)]
    if {"em", "f1", "acc"} <= set(out):
        out["avg"] = round((out["em"] + out["f1"] + out["acc"]) / 3, 2)
    kinds: dict[str, int] = {}
    with_issues = 0
    for r in rows:
        issues = (r.get("trace") or {}).get("issues") or []
        with_issues += bool(issues)
        for kind in dict.fromkeys(str(i).split(":", 1)[0].strip() for i in issues):
            kinds[kind] = kinds.get(kind, 0) + 1
    out["questions_with_issues"] = with_issues
    out["issues"] = dict(sorted(kinds.items(), key=lambda kv: -kv[1]))
    cost_keys = sorted({k for r in rows for k in (r.get("cost") or {})})
    out["cost_per_question"] = {
        k: round(float(np.mean([float((r.get("cost") or {}).get(k, 0.0)) for r in rows])), 3) for k in cost_keys
    }
    return out
