"""Many runs of the one runner, sharing one context and the LLM cache, and what that saves.

A paper's table is a grid: configurations x datasets (x seeds). Each cell is an ordinary run
(`experiment.run_experiment`) in its own folder with predictions, metrics and manifest, so it
resumes after a kill and can be repeated alone with `kgrag run`. All cells share one context:
the LLM, the embedder, the KGs and the persistent LLM cache, so a request two configurations
share is computed once. The runner records the id of every request each question made; from
those the grid counts what independent runs would send (`requests`) and how many of those
are distinct (what a cold shared cache sends), from the files, even after a resume.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from .experiment import resolve_run, run_experiment
from .methods.base import RunContext
from .progress import progress as progress_bar
from .records import Prediction
from .rundir import MANIFEST_FILE, PRED_FILE, read_predictions


@dataclass(frozen=True)
class GridRun:
    """One configuration: a method and its config overrides."""

    method: str
    cfg: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, method: str, **cfg: Any) -> "GridRun":
        return cls(method, tuple(sorted(cfg.items())))

    @property
    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.cfg)
        return self.method + (f"[{extra}]" if extra else "")

    @property
    def folder(self) -> str:
        return re.sub(r"[^A-Za-z0-9=._-]+", "_", self.label).strip("_")


@dataclass
class Cell:
    """One finished run of the grid."""

    run: GridRun
    dataset: str
    out: Path
    metrics: dict[str, Any]
    rows: list[dict[str, Any]]
    sent: int                      # LLM calls this cell sent to the model in this process


@dataclass
class GridReport:
    """The cells of a grid and its request counts."""

    cells: list[Cell]
    sent: int                      # requests that reached the model in this process (cache misses)
    per_config: list[dict[str, Any]] = field(default_factory=list)

    @property
    def requests(self) -> int:
        """Every request the cells made: what independent runs, each with its own cold cache, send."""
        return sum(len(r.get("requests") or []) for c in self.cells for r in c.rows)

    @property
    def distinct(self) -> int:
        """Distinct requests among them: what one shared cache computes from cold."""
        return len({k for c in self.cells for r in c.rows for k in r.get("requests") or []})

    @property
    def ratio(self) -> float:
        return self.distinct / self.requests if self.requests else 0.0

    @property
    def n_questions(self) -> int:
        return len({r["qid"] for c in self.cells for r in c.rows})

    @cached_property
    def predictions(self) -> dict[str, list[Prediction]]:
        """Each configuration's predictions over all datasets, in question order."""
        out: dict[str, list[Prediction]] = {}
        for c in self.cells:
            out.setdefault(c.run.label, []).extend(prediction_of(r) for r in c.rows)
        return out

    def rows(self, label: str) -> list[dict[str, Any]]:
        return [r for c in self.cells if c.run.label == label for r in c.rows]

    def table(self) -> list[dict[str, Any]]:
        return self.per_config

    def summary(self) -> str:
        return (f"{self.n_questions} questions x {len(self.per_config)} configurations: independent runs would send "
                f"{self.requests} requests; {self.distinct} are distinct (ratio {self.ratio:.2f}); "
                f"{self.sent} reached the model this time")

    def counts_row(self, what: str, wall_s: float | None = None) -> dict[str, Any]:
        """The request counts as one summary row for `write_summary`."""
        return {"label": f"request counts: {what}", "configs": len(self.per_config), "questions": self.n_questions,
                "independent_requests": self.requests, "distinct_requests": self.distinct,
                "sent_this_run": self.sent, "ratio_distinct_to_independent": round(self.ratio, 3),
                "wall_s": None if wall_s is None else round(wall_s, 1)}


def prediction_of(row: dict[str, Any]) -> Prediction:
    """A Prediction from a predictions.jsonl row (extra fields such as `dataset` are dropped)."""
    fields = Prediction.__dataclass_fields__
    return Prediction(**{k: v for k, v in row.items() if k in fields})


def run_grid(runs: Sequence[GridRun], datasets: Sequence[str], out_dir: str | Path, *, ctx: RunContext,
             profile: str | Path | dict, progress: bool = True, overwrite: bool = False,
             **overrides: Any) -> GridReport:
    """Run every configuration on every dataset into
    `out_dir/runs/<dataset>/n<n>_seed<seed>/<configuration>/` (another sample gets its own folder).

    `overrides` (n, seed, model, method settings such as kg or corpus) apply to every cell;
    each configuration's own settings win over them.
    """
    out_dir = Path(out_dir)
    cells: list[Cell] = []
    calls0 = ctx.llm.usage.calls
    plan = [(run, d) for run in runs for d in datasets]
    for run, d in progress_bar(plan, desc="grid", unit="run", disable=not progress):
        settings = {**overrides, **dict(run.cfg)}
        r = resolve_run(run.method, d, out_dir, profile, **settings).run
        folder = out_dir / "runs" / d / f"n{r.n if r.n is not None else 'all'}_seed{r.seed}" / run.folder
        before = ctx.llm.usage.calls
        metrics = run_experiment(run.method, d, folder, profile=profile, ctx=ctx, progress=False,
                                 overwrite=overwrite, **settings)
        wanted = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))["config"]["qids"]
        by_qid = {r["qid"]: r for r in read_predictions(folder / PRED_FILE)}
        rows = [by_qid[q] for q in wanted]   # this sample's rows, in sample order
        cells.append(Cell(run, d, folder, metrics, rows, ctx.llm.usage.calls - before))
    report = GridReport(cells, sent=ctx.llm.usage.calls - calls0)
    report.per_config = _per_config(report, runs)
    return report


def _per_config(report: GridReport, runs: Sequence[GridRun]) -> list[dict[str, Any]]:
    """Requests and tokens per question of each configuration (cached or not), what it added
    to the distinct requests of the configurations before it, and what it sent."""
    seen: set[str] = set()
    out = []
    for run in runs:
        cells = [c for c in report.cells if c.run == run]
        rows = [r for c in cells for r in c.rows]
        keys = [k for r in rows for k in r.get("requests") or []]
        n = max(len(rows), 1)
        new = set(keys) - seen
        seen |= new

        def per_q(key: str) -> float:
            return round(sum(float((r.get("cost") or {}).get(key, 0.0)) for r in rows) / n, 1)

        out.append({"config": run.label, "requests_per_q": round(len(keys) / n, 2),
                    "prompt_tokens_per_q": per_q("llm_total_prompt_tokens"),
                    "completion_tokens_per_q": per_q("llm_total_completion_tokens"),
                    "requests": len(keys), "new_distinct": len(new), "sent": sum(c.sent for c in cells)})
    return out
