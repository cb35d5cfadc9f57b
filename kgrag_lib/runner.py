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
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .errors import KgragError
from .jsonl import JsonlAppender, atomic_json, read_jsonl, rewrite_jsonl
from .methods.base import Method
from .progress import progress as progress_bar
from .provenance import manifest
from .records import Prediction, Question
from .redact import redact

PRED_FILE = "predictions.jsonl"
METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"


EXPECTED = 'a JSON object per line like {"prediction": "Paris", "answers": ["Paris", "City of Light"]}'


def read_predictions(path: str | Path, *, allow_torn_tail: bool = False, unique_qids: bool = False
                     ) -> list[dict[str, Any]]:
    """Read and check a predictions file (a run's predictions.jsonl, or predictions from elsewhere).

    Every line must be a JSON object with a string "prediction" and a list "answers"; a bad
    line raises DataFormatError naming the file and line. With `allow_torn_tail` (the runner
    resuming after a kill) an unparsable *last* line is dropped instead: it is the write the
    kill interrupted. With `unique_qids` (a run folder's file: one line per question) a qid
    seen twice is refused naming both lines: scoring would take the last copy silently.
    """
    from .data.common import check_file
    from .errors import DataFormatError

    path = check_file(path, EXPECTED)  # names a directory or binary file
    read = read_jsonl(path, expected=EXPECTED, torn_tail=allow_torn_tail)
    for lineno, rec in zip(read.lines, read.rows):
        pred, answers = rec.get("prediction"), rec.get("answers")
        if "prediction" not in rec or not (pred is None or isinstance(pred, str)):
            raise DataFormatError(path, lineno, EXPECTED, f'field "prediction" missing or not a string in {_shown(rec)}')
        if not isinstance(answers, list) or not all(isinstance(a, (str, int, float)) for a in answers):
            raise DataFormatError(path, lineno, EXPECTED, f'field "answers" missing or not a list of strings in {_shown(rec)}')
        rec["prediction"] = pred or ""
        rec["answers"] = [a if isinstance(a, str) else json.dumps(a) for a in answers]
    first: dict[Any, int] = {}
    for lineno, rec in zip(read.lines, read.rows) if unique_qids else ():   # the last copy would win silently
        qid = rec.get("qid")
        if qid is None:
            continue
        if qid in first:
            raise DataFormatError(path, lineno, f"one line per question id; {EXPECTED}",
                                  f"qid {qid!r} again (first at line {first[qid]}); keep one of the two lines")
        first[qid] = lineno
    return read.rows


def _shown(rec: dict[str, Any]) -> str:
    return json.dumps(rec, ensure_ascii=False)[:200]


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
    from .concurrency import check_workers

    n = check_workers(concurrency) if concurrency is not None else int(getattr(llm, "default_concurrency", 1) or 1)
    if n > 1 and not method.parallel_safe:
        import sys

        print(f"kgrag: {getattr(method, 'name', 'this method')} answers questions in order (its state grows "
              f"across questions), so it runs with 1 question in flight, not {n}", file=sys.stderr)
        return 1
    return n


# What a run's results depend on: a resume must find the same values in manifest.json.
# Paths of the data and caches and the profile's other sections are not part of it.
_VOLATILE_RUN = ("out", "profile", "data_root", "cache_dir", "concurrency", "max_in_flight", "request_timeout",
                 "request_retries")
LOCK_FILE = ".run.lock"
# A run config's map {flat key: value} of settings added after older runs were made: a stored
# identity without the key stands for that value (`config.opt(absent=...)`).
ABSENT_KEY = "absent_means"
# A run config's {prompt module: digest} of the wording its method sends (`methods.prompt_digest`).
# It is not an `absent_means` setting: a manifest written before digests were recorded says nothing
# about the wording its predictions were made with, so its absence stands for no value that could be
# compared. Such a folder is resumed with a warning, and the manifest then written records
# `prompts: null` (wording unknown) instead of today's digests, which would claim the old predictions
# for today's wording; only a fresh start (an overwrite) records digests again.
PROMPTS_KEY = "prompts"
PROMPTS_REMEDY = ("a prompt's wording changed: with overwrite, the LLM calls whose prompts did not change are "
                  "answered from the LLM cache, with no new calls")


class StaleRunError(KgragError):
    """The output folder holds a run made with other settings."""


class FolderBusyError(KgragError):
    """Another process is writing into the output folder."""


def run_identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's config that decides its results (see `_VOLATILE_RUN`), `redact`ed as
    the manifest records it: specs that differ only in a token are the same run."""
    ident = {k: v for k, v in config.items() if k not in ("profile", ABSENT_KEY)}
    if isinstance(ident.get("run"), dict):
        ident["run"] = {k: v for k, v in ident["run"].items() if k not in _VOLATILE_RUN}
    return json.loads(json.dumps(redact(ident), default=str))  # tuples and paths as the manifest stores them


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def prompts_unrecorded(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether `wanted` records prompt digests and `stored` does not (a run from before they were
    recorded, or resumed from one): the stored items' prompt wording is unknown."""
    return isinstance(wanted.get(PROMPTS_KEY), dict) and not isinstance(stored.get(PROMPTS_KEY), dict)


def prompt_diff(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """Prompt modules whose wording differs, e.g. `prompts kg_infused.prompts: 3f2a9c1b7d0e -> 9a0b...`;
    none when either side records no digests (see `PROMPTS_KEY`)."""
    a, b = stored.get(PROMPTS_KEY), wanted.get(PROMPTS_KEY)
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return []
    return [f"{PROMPTS_KEY} {m}: {a.get(m, '<absent>')} -> {b.get(m, '<absent>')}"
            for m in sorted(set(a) | set(b)) if a.get(m) != b.get(m)]


def identity_diff(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """Readable differences between two run identities, e.g. `run.method: 'llm-kg' -> 'llm'`;
    prompt digests are compared as `prompt_diff` says."""
    a_id, b_id = run_identity(stored), run_identity(wanted)
    a_id.pop(PROMPTS_KEY, None)
    b_id.pop(PROMPTS_KEY, None)
    a, b = _flat(a_id), _flat(b_id)
    a = {**(wanted.get(ABSENT_KEY) or {}), **a}   # settings added since: what their absence stood for
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k, "<absent>") != b.get(k, "<absent>"):
            if k == "qids":
                out.append(f"qids: another question sample ({len(a.get(k) or [])} stored, {len(b.get(k) or [])} asked)")
            else:
                out.append(f"{k}: {a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r}")
    return out + prompt_diff(stored, wanted)


@contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold the output folder for this process: a second run into it is refused, naming the holder."""
    import platform
    import sys

    from filelock import FileLock, Timeout

    lock = FileLock(str(out / LOCK_FILE), timeout=0)
    info = out / (LOCK_FILE + ".json")
    try:
        lock.acquire()
    except Timeout:
        try:
            h = json.loads(info.read_text(encoding="utf-8"))
            who = f"process {h.get('pid')} on {h.get('host')}, started {h.get('started')}: {h.get('command')}"
        except (OSError, ValueError):
            who = "another process"
        raise FolderBusyError(f"{out} is being written by {who}; wait for it to finish or use another output "
                              f"folder") from None
    try:
        atomic_json(info, {"pid": os.getpid(), "host": platform.node(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                            "command": redact(" ".join(sys.argv))})
        yield
    finally:
        lock.release()


RUN_REMEDY = "use another output folder (--out / out_dir), or overwrite it (--overwrite / overwrite=True)"


def check_resume(out: Path, config: dict[str, Any], n_stored: int, overwrite: bool, *, items: str = "predictions",
                 kind: str = "run", remedy: str = RUN_REMEDY) -> dict[str, Any] | None:
    """The stored manifest when resuming is safe; None when starting afresh. Refuses a folder
    whose stored `items` were made with other settings or other prompt wording, unless
    `overwrite` (every resumable writer shares this rule: runs, DPO data). A folder whose
    manifest records no prompt digests is resumed with a warning on stderr (`PROMPTS_KEY`), or
    started afresh with `overwrite`; the writer then records its config through `recorded_config`."""
    man_path = out / MANIFEST_FILE
    if not man_path.exists():
        if n_stored:
            raise StaleRunError(f"{out} holds {n_stored} {items} but no {MANIFEST_FILE}, so nothing says what made "
                                f"them; {remedy}")
        return None
    try:
        prev = json.loads(man_path.read_text(encoding="utf-8"))
        stored = prev["config"]
    except (ValueError, KeyError, TypeError):
        raise StaleRunError(f"{man_path}: not a {kind} manifest (damaged?); {remedy}") from None
    diff = identity_diff(stored, config)
    if not diff:
        if n_stored and prompts_unrecorded(stored, config):
            if overwrite:   # wording unknown: what overwrite discards, as it does a run with other settings
                return None
            import sys

            print(f"kgrag: warning: {out} holds {n_stored} {items} from a {kind} that predates recorded prompt "
                  f"digests, so they may come from older prompt wording; they are kept, and its manifest records "
                  f"{PROMPTS_KEY}: null (unknown). To make them all with today's prompts, overwrite it "
                  f"(--overwrite / overwrite=True): answers to prompts that did not change come from the LLM "
                  f"cache, with no new calls", file=sys.stderr)
        return prev
    if overwrite or not n_stored:
        return None
    shown = "; ".join(diff[:8]) + (f"; and {len(diff) - 8} more" if len(diff) > 8 else "")
    why = f" ({PROMPTS_REMEDY})" if prompt_diff(stored, config) else ""
    raise StaleRunError(f"{out} holds {n_stored} {items} made with other settings ({shown}); nothing was changed. "
                        f"To start again, {remedy} to discard them{why}")


def changed_questions(out: Path, done: list[dict[str, Any]], questions: Sequence[Question],
                      overwrite: bool) -> set[str]:
    """A stored prediction is resumed only for the question it answered: the same text and the
    same golds. An edited question file keeps its qids, so the run's settings match while its
    stored answers (and the golds they are scored against) belong to the old questions. Refused
    naming them; with `overwrite`, their qids are returned to be answered again."""
    now = {q.qid: q for q in questions}
    changed: dict[str, str] = {}   # qid -> what changed
    for row in done:
        q = now.get(row.get("qid"))
        if q is None:
            continue
        what = [w for w, same in (("text", row.get("question") == q.question),
                                  ("gold answers", list(row.get("answers") or []) == list(q.answers))) if not same]
        if what:
            changed[q.qid] = " and ".join(what)
    if changed and overwrite:
        return set(changed)
    if changed:
        listed = [f"{qid} ({what})" for qid, what in changed.items()]
        shown = ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")
        raise StaleRunError(f"{out} holds predictions for {len(changed)} question(s) whose content has changed since "
                            f"they were answered: {shown}; nothing was changed. To answer the questions as they are "
                            f"now, {RUN_REMEDY} to discard the stored predictions")
    return set()


def recorded_config(prev: dict[str, Any] | None, config: dict[str, Any], n_stored: int) -> dict[str, Any]:
    """The config a resumed folder's new manifest records: `config`, except that a folder whose
    stored items' prompt wording is unknown keeps `prompts: null` (see `PROMPTS_KEY`)."""
    if prev is not None and n_stored and prompts_unrecorded(prev.get("config") or {}, config):
        return {**config, PROMPTS_KEY: None}
    return config


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
    from .concurrency import as_they_finish
    from .eval.summary import summarize

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
