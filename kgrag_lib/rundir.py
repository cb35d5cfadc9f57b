"""A run folder's format, in one low module every layer may read: its file names, reading its
predictions, the folder lock, the resume check (a folder resumes only with the settings, prompts and
questions that made it) and the config its manifest records; and a notebook's `summary.json`.

The runner writes run folders; the scorer, the judge, the report and DPO's data read them, and
none of them need the runner for it (issue 42).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from .data.common import check_file
from .errors import DataFormatError, KgragError
from .jsonl import atomic_json, read_jsonl
from .records import Question
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




# What a run's results depend on: a resume must find the same values in manifest.json.
# Paths of the data and caches and the profile's other sections are not part of it.
_VOLATILE_RUN = ("out", "profile", "data_root", "cache_dir", "concurrency", "max_in_flight", "request_timeout",
                 "request_retries", "engine")   # engine: what it decides is run.model / a generator, recorded as such
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


# ---- a notebook's summary.json: the rows a sweep, the study table and the report collect -------------
SUMMARY_FILE = "summary.json"


def read_summary(out_dir: str | Path) -> list[dict[str, Any]]:
    p = Path(out_dir) / SUMMARY_FILE
    if not p.exists():
        return []
    data = json.loads(p.read_text(encoding="utf-8"))
    return data if isinstance(data, list) else [data]


def write_summary(out_dir: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Called from notebooks: the rows a sweep or the study table will collect (a token in a
    server spec among them redacted)."""
    p = Path(out_dir)
    p.mkdir(parents=True, exist_ok=True)
    tmp = p / (SUMMARY_FILE + ".tmp")
    tmp.write_text(json.dumps(redact(rows), indent=2, default=str), encoding="utf-8")
    tmp.replace(p / SUMMARY_FILE)
    return p / SUMMARY_FILE
