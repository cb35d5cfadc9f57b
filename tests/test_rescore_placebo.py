"""The rescorer (`report.rescore`) covers notebook 21's placebo arm (issue 56): when a scorer change
moves a run's scores, the placebo claim `m1.kg_over_placebo.2wiki` and the "KG minus placebo KG" row
are re-tested on the same questions, and a claim it cannot place is refused, never left stale."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.eval.metrics import get_metric
from kgrag_lib.eval.paired import CONFIRMED, NOT_SEPARABLE
from kgrag_lib.report.kg_infused.paper_numbers import MECHANISM_CLAIMS
from kgrag_lib.report.kg_infused.tables import round_label
from kgrag_lib.report.claims import BEFORE_EXACT_FLIP
from kgrag_lib.report.rescore import PLACEBO_DIFFERENCE, placebo_kg, rescore_published

FULL, HELDOUT = "2wiki-evidence-full", "2wiki-evidence-heldout"
QIDS = [f"q{i}" for i in range(16)]
GOLD = "Paris"


def _run(folder: Path, kg: str, right: int, stale_em: bool = False, method: str = "kg-infused") -> None:
    """A published KG-Infused run (rounds 2) on `kg` answering the first `right` questions correctly;
    `stale_em`: its first row stores EM 0 for a right answer, as a scorer change would leave it."""
    folder.mkdir(parents=True)
    rows = []
    for i, q in enumerate(QIDS):
        pred = GOLD if i < right else "Lyon"
        row = {"qid": q, "dataset": "2wiki", "prediction": pred, "answers": [GOLD], "acc": float(i < right)}
        for m in ("em", "f1"):
            row[m] = get_metric(m)(row)
        rows.append(row)
    if stale_em:
        rows[0]["em"] = 0.0
    (folder / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "manifest.json").write_text(json.dumps({"config": {
        "run": {"method": method, "dataset": "2wiki"}, "method_config": {"kg": kg, "rounds": 2},
        "qids": QIDS}}), encoding="utf-8")
    mean = {m: round(100 * float(np.mean([r[m] for r in rows])), 2) for m in ("em", "f1", "acc")}
    (folder / "metrics.json").write_text(json.dumps({**mean, "avg": round(sum(mean.values()) / 3, 2)}),
                                         encoding="utf-8")


def _notebook(root: Path, extra_claims: list[dict] = ()) -> Path:
    nb = root / "21_kg_infused_main"
    _run(nb / "runs" / "2wiki" / "n16_seed0" / "kg-infused", FULL, right=13, stale_em=True)
    _run(nb / "placebo" / "runs" / "2wiki" / "n16_seed0" / "kg-infused", HELDOUT, right=3)
    cid, table, dataset, a, rel, b, metric, _ = MECHANISM_CLAIMS[0]
    stale = {"n_pairs": 16, "ours_a": 0.0, "ours_b": 0.0, "diff": 0.0, "ci95": [0.0, 0.0], "p_value": 1.0,
             "verdict": NOT_SEPARABLE}
    summary = [
        {"variant": "kg-infused", "rounds": 2, "dataset": "2wiki", "kg": FULL, "em": 0.0, "f1": 0.0, "avg": 0.0},
        {"claim": cid, "table": table, "dataset": dataset, "metric": metric,
         "statement": f"KG-Infused RAG on {FULL} {rel} KG-Infused RAG on {HELDOUT}", **stale},
        {"table": PLACEBO_DIFFERENCE, "configuration": round_label("kg-infused", 2), "dataset": "2wiki",
         "metric": "avg", HELDOUT: 0.0, FULL: 0.0, **stale, "separable": "not separable at this n"},
        *extra_claims,
    ]
    (nb / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return nb


def _avg(folder: Path) -> np.ndarray:
    rows = [json.loads(x) for x in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["qid"] for r in rows] == QIDS
    return np.array([(r["em"] + r["f1"] + r["acc"]) / 3 for r in rows])


def test_the_placebo_claim_and_its_difference_row_are_retested_after_a_rescore(tmp_path):
    nb = _notebook(tmp_path)
    summary = json.loads((nb / "summary.json").read_text(encoding="utf-8"))
    assert placebo_kg(summary, "2wiki") == HELDOUT
    log = rescore_published(tmp_path)
    assert any("m1.kg_over_placebo.2wiki" in line for line in log)
    # independently: per-question Avg of the rescored rows, full KG minus placebo, same questions
    full = _avg(nb / "runs" / "2wiki" / "n16_seed0" / "kg-infused")
    held = _avg(nb / "placebo" / "runs" / "2wiki" / "n16_seed0" / "kg-infused")
    assert full[0] == 1.0                             # the stale EM was rescored
    claim, row = json.loads((nb / "summary.json").read_text(encoding="utf-8"))[1:3]
    assert claim["diff"] == pytest.approx(100 * (full.mean() - held.mean()), abs=0.05)
    assert claim["ours_a"] == pytest.approx(100 * full.mean(), abs=0.05) and claim["n_pairs"] == 16
    assert claim["verdict"] == CONFIRMED and claim["p_value"] < 0.05     # 10 questions only the full KG gets
    assert row[FULL] == round(100 * full.mean(), 1) and row[HELDOUT] == round(100 * held.mean(), 1)
    assert row["diff"] == pytest.approx(100 * (full.mean() - held.mean()), abs=0.05)
    assert row["separable"] == "yes"
    # a second pass finds nothing left to change
    assert rescore_published(tmp_path) == []


def test_a_claim_the_rescorer_cannot_place_is_refused_when_its_notebook_changed(tmp_path):
    unknown = {"claim": "x.unplaced.2wiki", "table": "Table 9", "dataset": "2wiki", "metric": "avg",
               "statement": "A > B", "verdict": NOT_SEPARABLE, "diff": 0.0, "p_value": 1.0}
    _notebook(tmp_path, [unknown])
    with pytest.raises(ConfigError, match="x.unplaced.2wiki"):
        rescore_published(tmp_path)


def test_retest_after_the_p_changed_replaces_p_and_verdict_only_and_keeps_the_stored_ones(tmp_path):
    """`rescore --retest` (the sign-flip p made exact): every claim it can place is re-tested though no
    run changed; only p and verdict move (the interval's resamples follow the question order), the
    stored ones are kept once in BEFORE_EXACT_FLIP, and a claim on another KG's grid (`...@<kg>`) is
    re-tested on that KG's runs."""
    nb = _notebook(tmp_path)
    rescore_published(tmp_path)                       # the scores are right from here on
    oracle = "2wiki-evidence-oracle"
    _run(nb / "upper-bound" / "runs" / "2wiki" / "n16_seed0" / "kg-infused", oracle, right=15)
    _run(nb / "runs" / "2wiki" / "n16_seed0" / "vanilla-rag", FULL, right=4, method="vanilla-rag")
    summary = json.loads((nb / "summary.json").read_text(encoding="utf-8"))
    summary[1].update(p_value=0.5, verdict=NOT_SEPARABLE)     # as a Monte Carlo p might have stored it
    ci = summary[1]["ci95"] = [-1.0, 99.0]
    summary.append({"claim": f"t1.kg_infused_over_vanilla_rag.2wiki@{oracle}", "table": "Table 1", "dataset": "2wiki",
                    "metric": "avg", "statement": "KG-Infused RAG (w/ 2-Round) > Vanilla RAG", "n_pairs": 16,
                    "ours_a": 0.0, "ours_b": 0.0, "diff": 0.0, "ci95": ci, "p_value": 0.2, "verdict": NOT_SEPARABLE})
    (nb / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    assert rescore_published(tmp_path) == []          # no run changed: a plain rescore leaves them
    log = rescore_published(tmp_path, retest=True)
    assert len(log) == 2
    claim, upper = [r for r in json.loads((nb / "summary.json").read_text(encoding="utf-8")) if "claim" in r]
    assert claim[BEFORE_EXACT_FLIP] == {"p_value": 0.5, "verdict": NOT_SEPARABLE}
    assert claim["verdict"] == CONFIRMED and claim["ci95"] == ci        # the interval is not redrawn
    # the oracle run gets 15 right, Vanilla RAG 4: 11 questions differ, all one way, so the exact
    # two-sided p is 2 / 2^11; on the main grid's run (13 right) it would be 2 / 2^9
    assert upper["p_value"] == pytest.approx(2 / 2 ** 11) and upper["verdict"] == CONFIRMED
    assert upper[BEFORE_EXACT_FLIP] == {"p_value": 0.2, "verdict": NOT_SEPARABLE} and upper["diff"] == 0.0
    assert rescore_published(tmp_path, retest=True) == []     # and a second pass keeps the first stored ones
    assert json.loads((nb / "summary.json").read_text(encoding="utf-8"))[1][BEFORE_EXACT_FLIP]["p_value"] == 0.5
