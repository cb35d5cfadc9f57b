"""bench/serve_chains.py: the idle-slot split of a run, on a hand-built run whose calls are known."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("serve_chains", REPO / "bench" / "serve_chains.py")
sc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sc)


def _run(tmp_path, questions):
    """questions: per question, its calls as (start, end) seconds; keys are made up."""
    db = sqlite3.connect(tmp_path / "llm.sqlite")
    db.execute("CREATE TABLE calls (key TEXT, created REAL, seconds REAL)")
    rows = []
    for q, calls in enumerate(questions):
        keys = []
        for j, (s, e) in enumerate(calls):
            key = f"{q:08x}{j:08x}" + "0" * 48
            db.execute("INSERT INTO calls VALUES (?, ?, ?)", (key, 1000.0 + e, float(e - s)))
            keys.append(key[:16])
        rows.append(json.dumps({"qid": f"q{q}", "requests": keys}))
    db.commit()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "predictions.jsonl").write_text("\n".join(rows) + "\n")
    return tmp_path / "run", tmp_path / "llm.sqlite"


def test_two_slots_split_into_calls_gaps_tail_and_between(tmp_path):
    # slot 1: q0 calls 0-1 and 2-3 (a 1 s gap between its dependent calls), then q2 4-5
    # slot 2: q1 calls 0-2, then idle to the end: from q2's start (4) that is the tail, 2-4 is between
    run, cache = _run(tmp_path, [[(0, 1), (2, 3)], [(0, 2)], [(4, 5)]])
    got = sc.slot_budget(run, cache, 2)
    assert (got["questions"], got["calls"], got["chain_mean"], got["chain_max"]) == (3, 4, 1.33, 2)
    assert got["wall_s"] == 5.0
    # 2 slots x 5 s = 10 slot-seconds: 5 busy, 1 gap, 1 tail (slot 2 from 4 to 5), 3 between (1 s on slot 1, 2 on slot 2)
    assert (got["busy"], got["gaps"], got["tail"], got["between"]) == pytest.approx((0.5, 0.1, 0.1, 0.3))


def test_a_run_with_no_recorded_request_is_refused(tmp_path):
    run, cache = _run(tmp_path, [])
    with pytest.raises(SystemExit, match="no question with recorded requests"):
        sc.slot_budget(run, cache, 1)
