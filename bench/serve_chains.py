"""Where a kgrag run's in-flight slots went idle: the dependency chains of its questions, measured.

`serve_bench.py` keeps c questions in flight; a plain client keeps c *requests* in flight. The
difference is the idle slot time of kgrag's run, split here from what the run recorded (each
call's end time and duration in its cold LLM cache, each question's request keys in
predictions.jsonl), so the bound is named with figures instead of guessed:

- chain: calls per question (mean, max): a question holds its slot until its last call returns;
- gaps: time inside a question's span with no call of it in flight (the client's own work between
  dependent calls: embeddings, KB scoring, parsing);
- tail: slot time left idle once every question has started (fewer than c questions remain,
  each finishing its chain alone: about (c-1)/2 question spans at a chain of L calls, against
  (c-1)/2 single calls for the plain client replaying a flat list);
- between: the rest (a slot between one question's end and the next one's first call: the
  runner's bookkeeping and the first stages before a question's first call).

    .venv/bin/python bench/serve_chains.py RUN_FOLDER LLM_CACHE IN_FLIGHT
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path


def slot_budget(run: Path, cache: Path, c: int) -> dict:
    """The idle-slot split of one run at `c` questions in flight (seconds and shares of c x wall)."""
    calls = {k[:16]: (end - s, end) for k, end, s in
             sqlite3.connect(cache).execute("SELECT key, created, seconds FROM calls")}
    questions = []
    for line in (run / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        iv = sorted(calls[k] for k in json.loads(line).get("requests") or [] if k in calls)
        if iv:
            questions.append(iv)
    if not questions:
        raise SystemExit(f"{run}: no question with recorded requests in {cache}")
    t0 = min(iv[0][0] for iv in questions)
    t1 = max(iv[-1][1] for iv in questions)
    wall = t1 - t0
    busy = sum(e - s for iv in questions for s, e in iv)
    spans = [(iv[0][0], max(e for _, e in iv)) for iv in questions]
    gaps = sum((b - a) - sum(e - s for s, e in iv) for (a, b), iv in zip(spans, questions))
    last_start = max(a for a, _ in spans)
    # once the last question has started, a slot whose question has ended stays idle to the end
    tail = c * (t1 - last_start) - sum(max(0.0, b - max(a, last_start)) for a, b in spans)
    total = c * wall
    between = total - busy - gaps - tail
    lengths = [len(iv) for iv in questions]
    share = lambda x: round(x / total, 3)  # noqa: E731
    return {"in_flight": c, "questions": len(questions), "calls": sum(lengths),
            "chain_mean": round(sum(lengths) / len(lengths), 2), "chain_max": max(lengths),
            "wall_s": round(wall, 2), "call_s_mean": round(busy / sum(lengths), 3),
            "busy": share(busy), "gaps": share(gaps), "tail": share(tail), "between": share(between)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a kgrag run folder (predictions.jsonl)")
    ap.add_argument("cache", type=Path, help="that run's own (cold) LLM cache")
    ap.add_argument("in_flight", type=int)
    a = ap.parse_args()
    print(json.dumps(slot_budget(a.run, a.cache, a.in_flight)))


if __name__ == "__main__":
    main()
