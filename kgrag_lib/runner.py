"""Run one method over a list of questions, writing results as it goes.

Every finished question is appended to `predictions.jsonl` and flushed to disk at once, so
a killed run loses at most the question in flight; a rerun with the same output folder
skips the questions already there (and, through the LLM cache, repeats no call of the one
that was interrupted). A torn last line from a kill is dropped on resume.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any, Iterable, Iterator

from .concurrency import as_they_finish, check_workers
from .errors import KgragError
from .eval.summary import summarize
from .jsonl import JsonlAppender, atomic_json, rewrite_jsonl
from .methods.base import Method
from .progress import progress as progress_bar
from .provenance import manifest
from .records import Prediction, Question
from .rundir import (  # noqa: F401 (re-exported: the run folder's format, for code that knew it here)
    ABSENT_KEY, EXPECTED, LOCK_FILE, MANIFEST_FILE, METRICS_FILE, PRED_FILE, PROMPTS_KEY, FolderBusyError,
    StaleRunError, changed_questions, check_resume, folder_lock, identity_diff, read_predictions, recorded_config,
    run_identity)


def _not_unicode(q: Question) -> str:
    """Which part of a question cannot be encoded as UTF-8 ("text", "gold answers"), or ""."""
    for what, texts in (("text", [q.question]), ("gold answers", list(q.answers))):
        try:
            for t in texts:
                str(t).encode("utf-8")
        except UnicodeEncodeError:
            return what
    return ""


def _failure_types() -> tuple[type[BaseException], ...]:
    """Errors that mean 'this question failed' (unparsable model output), not 'the run is broken'."""
    try:
        from .llm.parsing import LLMParseError
    except ImportError:  # pragma: no cover
        return ()
    return (LLMParseError,)


@contextmanager
def _metering(llm: Any) -> Iterator[Any]:
    """The LLM's meter during one question (request ids and usage), None without an LLM."""
    if llm is None or not hasattr(llm, "meter"):
        yield None
        return
    with llm.meter() as m:
        yield m


def resolve_concurrency(concurrency: int | None, llm: Any, method: Any) -> int:
    """Questions in flight: the run's setting, else the backend's default (1 in-process, more
    for servers); 1 for a method whose state grows across questions (`parallel_safe` False)."""
    n = check_workers(concurrency) if concurrency is not None else int(getattr(llm, "default_concurrency", 1) or 1)
    if n > 1 and not method.parallel_safe:
        import sys

        print(f"kgrag: {getattr(method, 'name', 'this method')} answers questions in order (its state grows "
              f"across questions), so it runs with 1 question in flight, not {n}", file=sys.stderr)
        return 1
    return n


def run_method(
    method: Method,
    questions: Iterable[Question],
    out_dir: str | Path,
    config: dict[str, Any] | None = None,
    *,
    llm: Any = None,
    metrics: tuple[str, ...] | None = None,
    progress: bool = True,
    overwrite: bool = False,
    concurrency: int | None = None,
) -> dict[str, Any]:
    """Answer every question not yet in `out_dir`, then score all of them.

    `concurrency` questions are answered at once (None: the LLM backend's default), each
    question's pipeline unchanged; lines are written as questions finish, so the file's order
    may differ from the sample's while the scores do not.

    Resuming is refused when the folder's manifest records other settings (`run_identity`),
    unless `overwrite` (which discards the stored predictions). The folder is locked while
    the run writes. Returns the metrics dict (also written to metrics.json): scores over the
    whole sample, per-question costs, and `this_run`, what this invocation answered, reused
    and sent. `llm` (if given) attributes LLM cost (calls, tokens, seconds) to each question.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise KgragError(f"output folder {out} is a file; name a folder for predictions.jsonl, metrics.json and "
                         f"manifest.json")
    try:
        str(out).encode("utf-8")
    except UnicodeEncodeError:   # the folder is recorded in manifest.json, which is UTF-8: refused before it exists
        raise KgragError(f"output folder {str(out).encode('utf-8', 'backslashreplace').decode()}: its name holds a byte "
                         f"that is not UTF-8; name a folder in UTF-8 (its path is written into manifest.json)") from None
    out.mkdir(parents=True, exist_ok=True)
    config = config or {}
    questions = list(questions)
    if not questions:
        raise KgragError(f"no questions to run into {out}: the question sample is empty")
    workers = resolve_concurrency(concurrency, llm, method)   # a bad setting is refused before anything is discarded
    with folder_lock(out):
        pred_path = out / PRED_FILE
        done = read_predictions(pred_path, allow_torn_tail=True, unique_qids=True) if pred_path.exists() else []
        prev = check_resume(out, config, len(done), overwrite)
        if prev is not None and done:
            changed = changed_questions(out, done, questions, overwrite)
            done = [r for r in done if r.get("qid") not in changed]   # with overwrite: answered again
        if prev is None:
            done = []
            for f in (PRED_FILE, METRICS_FILE):
                (out / f).unlink(missing_ok=True)
        elif pred_path.exists():
            rewrite_jsonl(pred_path, done)
        man = manifest(recorded_config(prev, config, len(done)))
        if callable(getattr(llm, "describe", None)):
            man["llm"] = llm.describe()   # what served the run (server flavour, where the weights' identity came from)
        if prev is not None:
            man["resumed_from"] = prev.get("started")
            man["started"] = prev.get("started", man["started"])
        atomic_json(out / MANIFEST_FILE, man)
        result = _answer_and_score(method, questions, done, pred_path, llm, progress, metrics, workers)
        atomic_json(out / METRICS_FILE, result)
    _warn_issues(result, out)
    return result


def _answer_and_score(method: Method, questions: list[Question], done: list[dict[str, Any]], pred_path: Path,
                      llm: Any, progress: bool, metrics: tuple[str, ...] | None, concurrency: int = 1) -> dict[str, Any]:
    done_ids = {r["qid"] for r in done}
    todo = [q for q in questions if q.qid not in done_ids]
    method.resume(list(done))  # a method whose state grows over questions (TCR-QF's KG) rebuilds it first
    fail_types = _failure_types()
    name = method.name

    def row_of(q: Question, pred: Prediction, meter: Any, seconds: float) -> dict[str, Any]:
        cost: dict[str, Any] = {"seconds": round(seconds, 3)}
        if meter is not None:
            cost.update({f"llm_{k}": v for k, v in meter.usage.to_dict().items()})
        pred.cost = {**cost, **(pred.cost or {})}
        row = pred.to_dict()
        row["dataset"] = q.dataset
        if q.supporting:   # gold passage ids: Recall@k recomputes from the published rows (`study.compact_rows`)
            row["gold_ids"] = list(q.supporting)
        row["requests"] = list(meter.keys) if meter is not None else []  # request ids: what a grid shares
        return row

    def answer(q: Question) -> dict[str, Any]:
        t0 = time.perf_counter()
        bad = _not_unicode(q)
        if bad:   # a lone surrogate cannot be sent, cached or written: that question fails, the run goes on
            esc = (lambda t: t.encode("utf-8", "backslashreplace").decode("utf-8"))
            pred = Prediction(q.qid, esc(q.question), "", [esc(a) for a in q.answers], name, failed=True,
                              error=f"the question's {bad} holds text that is not valid Unicode (a lone surrogate); "
                                    "fix the question file")
            return row_of(q, pred, None, time.perf_counter() - t0)
        with _metering(llm) as meter:
            try:
                pred: Prediction = method.answer(q)
            except fail_types as exc:  # recorded, not fatal
                pred = Prediction(q.qid, q.question, "", list(q.answers), name,
                                  trace=getattr(exc, "trace", {}) or {}, failed=True,
                                  error=f"{type(exc).__name__}: {exc}")
        return row_of(q, pred, meter, time.perf_counter() - t0)

    t_run = time.perf_counter()
    usage0 = llm.usage.snapshot() if llm is not None else None
    bar = progress_bar(total=len(questions), initial=len(questions) - len(todo), desc=f"{name or 'method'}",
                       unit="q", disable=not progress)
    if method.answers_sample:
        # the method's state grows over the whole sample round by round (TCR-QF's KG): it takes
        # the sample and closes questions as their rounds end (those done earlier are replayed, not written)
        flow = ((None, row_of(q, pred, meter, 0.0)) for q, pred, meter in
                (method.answer_sample(questions, done_ids, concurrency) if todo else ()))
    else:
        # The first question runs alone: it builds what the method loads lazily (indexes, KG parts),
        # which the questions in flight after it then share instead of building it side by side.
        flow = chain(as_they_finish(answer, todo[:1], 1), as_they_finish(answer, todo[1:], concurrency))
    with JsonlAppender(pred_path, default=str) as out, bar:
        for _, row in flow:
            out.append(row)
            done.append(row)
            bar.update(1)
    answer_seconds = time.perf_counter() - t_run
    by_qid = {r["qid"]: r for r in done}
    result = summarize([by_qid[q.qid] for q in questions], metrics=metrics)
    # answering alone, and with the scoring (bootstrap intervals take seconds) on top
    this = {"answered": len(todo), "reused": len(questions) - len(todo), "answer_seconds": round(answer_seconds, 2),
            "wall_seconds": round(time.perf_counter() - t_run, 2), "concurrency": concurrency}
    if usage0 is not None:
        used = llm.usage.since(usage0)
        this.update({"llm_calls_sent": used.calls, "llm_cache_hits": used.cache_hits,
                     "llm_prompt_tokens_sent": used.prompt_tokens, "llm_completion_tokens_sent": used.completion_tokens,
                     "llm_seconds": round(used.seconds, 2)})
    result["this_run"] = this
    return result


def _warn_issues(result: dict[str, Any], out: Path) -> None:
    """Questions whose method recorded a problem (a topic entity missing from the KB, an
    unusable decomposition, ...) are counted in metrics.json and said at the end of the run."""
    import sys

    for m in ("em", "f1", "acc", "hit1"):   # a question without gold is left out of that score: say so
        k = result.get(f"n_{m}")
        if k is not None and k < result.get("n", 0):
            print(f"kgrag: warning: {m} is over {k} of {result['n']} questions: the others have no gold answer "
                  f"(metrics.json n_{m})", file=sys.stderr)
    n_bad = result.get("questions_with_issues") or 0
    if n_bad:
        kinds = ", ".join(f"{k} {v}" for k, v in (result.get("issues") or {}).items())
        print(f"kgrag: warning: {n_bad} of {result['n']} questions recorded issues ({kinds}); their traces say "
              f"which (trace.issues in {out / PRED_FILE})", file=sys.stderr)
