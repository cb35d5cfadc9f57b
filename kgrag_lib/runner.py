"""Run one method over a list of questions, writing results as it goes.

Every finished question is appended to `predictions.jsonl` and flushed to disk at once, so
a killed run loses at most the question in flight; a rerun with the same output folder
skips the questions already there (and, through the LLM cache, repeats no call of the one
that was interrupted). A torn last line from a kill is dropped on resume.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable

from .errors import KgragError
from .progress import progress as progress_bar
from .provenance import manifest
from .records import Prediction, Question

PRED_FILE = "predictions.jsonl"
METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """Read a predictions file, tolerating (and dropping) a torn final line left by a kill."""
    path = Path(path)
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines):  # torn tail from an interrupted write
                break
            raise KgragError(f"{path}:{i}: not a JSON line; expected one prediction object per line")
    return rows


def _rewrite_clean(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _failure_types() -> tuple[type[BaseException], ...]:
    """Errors that mean 'this question failed' (unparsable model output), not 'the run is broken'."""
    try:
        from .llm.parsing import LLMParseError
    except ImportError:  # pragma: no cover
        return ()
    return (LLMParseError,)


def run_method(
    method: Any,
    questions: Iterable[Question],
    out_dir: str | Path,
    config: dict[str, Any] | None = None,
    *,
    llm: Any = None,
    metrics: tuple[str, ...] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Answer every question not yet in `out_dir`, then score all of them.

    Returns the metrics dict (also written to metrics.json). `llm` (if given) is used to
    attribute LLM cost (calls, tokens, seconds) to each question.
    """
    from .eval.summary import summarize

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pred_path = out / PRED_FILE
    done = read_predictions(pred_path)
    if pred_path.exists():
        _rewrite_clean(pred_path, done)
    done_ids = {r["qid"] for r in done}
    man_path = out / MANIFEST_FILE
    man = manifest(config or {})
    if man_path.exists():
        prev = json.loads(man_path.read_text(encoding="utf-8"))
        man["resumed_from"] = prev.get("started")
        man["started"] = prev.get("started", man["started"])
    _atomic_json(man_path, man)

    questions = list(questions)
    todo = [q for q in questions if q.qid not in done_ids]
    fail_types = _failure_types()
    t_run = time.perf_counter()
    with open(pred_path, "a", encoding="utf-8") as fh:
        bar = progress_bar(todo, desc=f"{getattr(method, 'name', 'method')}", unit="q", disable=not progress,
                   initial=len(questions) - len(todo), total=len(questions))
        for q in bar:
            snap = llm.usage.snapshot() if llm is not None else None
            t0 = time.perf_counter()
            try:
                pred: Prediction = method.answer(q)
            except fail_types as exc:  # recorded, not fatal
                pred = Prediction(q.qid, q.question, "", list(q.answers), getattr(method, "name", ""),
                                  trace=getattr(exc, "trace", {}) or {}, failed=True, error=f"{type(exc).__name__}: {exc}")
            cost = {"seconds": round(time.perf_counter() - t0, 3)}
            if snap is not None:
                cost.update({f"llm_{k}": v for k, v in llm.usage.since(snap).to_dict().items()})
            pred.cost = {**cost, **(pred.cost or {})}
            row = pred.to_dict()
            row["dataset"] = q.dataset
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            done.append(row)
    wanted = {q.qid for q in questions}
    rows = [r for r in done if r["qid"] in wanted]
    result = summarize(rows, metrics=metrics)
    result["wall_seconds_this_run"] = round(time.perf_counter() - t_run, 2)
    _atomic_json(out / METRICS_FILE, result)
    return result
