"""Run many KG-Infused RAG configurations through one LLM and count what that saves.

The paper's Table 1, Table 3 and Fig. 2 need 21 configurations (3 baselines, and 3 KG
variants x 6 rounds). Run independently, each would send all of its own requests. Here they
run through one cached LLM: a (k+1)-round activation replays the k-round one, the variants
share retrieval, notes, summaries and expanded queries, so only distinct requests reach the
model (about 0.4x as many), and a warm rerun sends none.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ...progress import progress as progress_bar
from ...records import Prediction, Question
from ..base import RunContext
from .pipeline import VARIANTS, make_method


@dataclass(frozen=True)
class GridRun:
    """One configuration: a variant name and its config overrides."""

    method: str
    cfg: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, method: str, **cfg: Any) -> "GridRun":
        return cls(method, tuple(sorted(cfg.items())))

    @property
    def label(self) -> str:
        rounds = dict(self.cfg).get("rounds")
        extra = ",".join(f"{k}={v}" for k, v in self.cfg if k != "rounds")
        label = self.method + (f"@{rounds}" if rounds is not None and VARIANTS[self.method].uses_kg else "")
        return label + (f"[{extra}]" if extra else "")


def paper_grid(rounds: Iterable[int] = range(1, 7), main_rounds: int = 2) -> list[GridRun]:
    """Table 1 (NoR, Vanilla RAG, Vanilla QE, KG-Infused RAG w/ 2 rounds) + Table 3 (the two
    single-component ablations) + Fig. 2 (the three KG variants over `rounds`), each distinct
    configuration once."""
    runs = [GridRun.of("nor"), GridRun.of("vanilla-rag"), GridRun.of("vanilla-qe")]
    for k in sorted(set(rounds) | {main_rounds}):
        runs += [GridRun.of(m, rounds=k) for m in ("kg-infused", "kg-qe-only", "kg-aug-only")]
    return runs


class RecordingLLM:
    """Wraps an LLM: counts every request, answers a repeated one from memory, and keeps the
    token cost each distinct request had, so a grid can report what independent runs would
    have sent and what reached the model."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "llm")
        self.identity = getattr(inner, "identity", "")
        self.counts: Counter[str] = Counter()
        self._memo: dict[str, str] = {}
        self.cost: dict[str, tuple[int, int]] = {}   # key -> (prompt, completion) tokens

    @property
    def usage(self) -> Any:
        return self.inner.usage

    @staticmethod
    def key(messages: Any, params: Any, overrides: dict[str, Any]) -> str:
        p = params.to_dict() if hasattr(params, "to_dict") else params
        return json.dumps([messages, p, overrides], sort_keys=True, ensure_ascii=False, default=str)

    def generate(self, messages: list[dict[str, str]], params: Any = None, **overrides: Any) -> str:
        k = self.key(messages, params, overrides)
        self.counts[k] += 1
        if k in self._memo:
            return self._memo[k]
        before = self.inner.usage.snapshot()
        out = self.inner.generate(messages, params, **overrides)
        d = self.inner.usage.since(before)
        self.cost[k] = (int(d.prompt_tokens + d.cached_prompt_tokens), int(d.completion_tokens + d.cached_completion_tokens))
        self._memo[k] = out
        return out

    def generate_batch(self, list_of_messages: Sequence[Any], params: Any = None, **overrides: Any) -> list[str]:
        return [self.generate(m, params, **overrides) for m in list_of_messages]


@dataclass
class GridReport:
    """Counts of one grid run (requests = what independent runs would send)."""

    n_questions: int
    requests: int                # all requests the configurations made
    distinct: int                # distinct requests among them
    sent: int                    # requests that reached the model (cache misses of the LLM)
    per_config: list[dict[str, Any]] = field(default_factory=list)
    predictions: dict[str, list[Prediction]] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """distinct / independent: the share of requests a shared-cache grid has to compute."""
        return self.distinct / self.requests if self.requests else 0.0

    def table(self) -> list[dict[str, Any]]:
        return self.per_config

    def summary(self) -> str:
        return (f"{self.n_questions} questions x {len(self.per_config)} configurations: independent runs would send "
                f"{self.requests} requests; {self.distinct} are distinct (ratio {self.ratio:.2f}); "
                f"{self.sent} reached the model this time")


def run_grid(ctx: RunContext, questions: Sequence[Question], runs: Sequence[GridRun] | None = None, *,
             base_cfg: dict[str, Any] | None = None, progress: bool = False,
             method_kw: dict[str, Any] | None = None) -> GridReport:
    """Answer `questions` with every configuration in `runs` (default: `paper_grid()`), all through
    one recording wrapper around `ctx.llm`; returns counts and the predictions per configuration.
    `base_cfg` is merged under every run's config; `method_kw` goes to `make_method` (e.g. a
    prebuilt `kg_source`)."""
    runs = list(runs) if runs is not None else paper_grid()
    rec = RecordingLLM(ctx.llm)
    sub = dataclasses.replace(ctx, llm_=rec)  # shares ctx.shared: KG and corpus built once
    sent0 = rec.usage.calls
    rows: list[dict[str, Any]] = []
    preds: dict[str, list[Prediction]] = {}
    seen_before: set[str] = set()
    n = max(len(questions), 1)
    for run in progress_bar(runs, desc="grid", disable=not progress):
        method = make_method(run.method, sub, {**(base_cfg or {}), **dict(run.cfg)}, **(method_kw or {}))
        before_counts = Counter(rec.counts)
        calls0 = rec.usage.calls
        out = [method.answer(q) for q in questions]
        mine = rec.counts - before_counts
        new = [k for k in mine if k not in seen_before]
        seen_before.update(mine)
        preds[run.label] = out
        rows.append({
            "config": run.label,
            "requests_per_q": round(sum(mine.values()) / n, 2),
            "prompt_tokens_per_q": round(sum(rec.cost[k][0] * c for k, c in mine.items()) / n, 1),
            "completion_tokens_per_q": round(sum(rec.cost[k][1] * c for k, c in mine.items()) / n, 1),
            "requests": int(sum(mine.values())),
            "new_distinct": len(new),
            "sent": int(rec.usage.calls - calls0),
        })
    return GridReport(
        n_questions=len(questions), requests=int(sum(rec.counts.values())), distinct=len(rec.counts),
        sent=int(rec.usage.calls - sent0), per_config=rows, predictions=preds,
    )


def count_requests(ctx: RunContext, questions: Sequence[Question], runs: Sequence[GridRun] | None = None,
                   **kw: Any) -> tuple[int, int]:
    """(requests sent to the model, requests independent runs would send) for a grid."""
    report = run_grid(ctx, questions, runs, **kw)
    return report.sent, report.requests
