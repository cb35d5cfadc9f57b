"""MetaQA's claims under three readings of Hit@1, side by side (§4.2.1; issue 41, item 2).

The paper's figures count an answer correct when it names a gold entity (`hit1`, our primary
reading), but KG-RAG's answers are sentences and average two to three times the words of
KAPING's, so the lenient reading favours the longer answer. Every MetaQA claim is therefore
re-tested, on the same paired questions, under the first-entity reading (`hit1_first`, the usual
KGQA Hit@1) and a length-matched one (`hit1_sentence`: a gold in the answer's first sentence). A
claim whose verdict differs between readings says so beside its verdict. The readings are a
sensitivity analysis: each is judged at its own p, like the exploratory second metric. A reading
under which neither side scores a single question (answers in sentences never start with the
entity, so `hit1_first` is 0 for both) cannot tell the sides apart: it reads "not testable under
this reading", not "not separable", which would suggest a tie it never measured.

It reads only the committed per-question files (prediction and golds), so it runs on a
published results folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from ...eval.metrics import score_items
from ...eval.paired import NO_SIGNAL, NOT_RUN
from .paper_numbers import CLAIMS
from .tables import check_claims

READINGS = ("hit1", "hit1_first", "hit1_sentence")
NOTEBOOK_OF = {"exp1": "11", "exp2": "12"}   # experiment -> the notebook prefix whose runs test it
SILENT = "not testable under this reading (no question scores on either side)"


def _question_rows(folder: str | Path) -> list[dict[str, Any]]:
    for name in ("questions.jsonl", "predictions.jsonl"):
        path = Path(folder) / name
        if path.is_file():
            return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return []


def reading_scores(runs: pd.DataFrame, prefix: str, metrics: tuple[str, ...] = READINGS) -> pd.DataFrame:
    """Per-question values of every reading (or of `metrics`) for the MetaQA runs of the notebook
    `prefix`: dataset, method, hops, top_k, seed, qid and one column per reading."""
    if runs.empty or "notebook" not in runs:
        return pd.DataFrame()
    mine = runs[runs["notebook"].astype(str).str.startswith(prefix)
                & runs["dataset"].astype(str).str.startswith("metaqa")]
    rows = []
    for run in mine.to_dict("records"):
        qs = _question_rows(run["folder"])
        items = score_items(qs, metrics)
        for i, q in enumerate(qs):
            rows.append({"dataset": run["dataset"], "method": run["method"], "hops": run.get("hops"),
                         "top_k": run.get("top_k"), "seed": run.get("seed") or 0, "qid": q["qid"],
                         **{m: items[m][i] for m in metrics}})
    df = pd.DataFrame(rows)
    # a run repeated in a notebook (the same method, settings and sample) counts once
    return df.drop_duplicates(subset=[c for c in ("dataset", "method", "hops", "top_k", "seed", "qid")
                                      if c in df]) if not df.empty else df


def readings_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per MetaQA claim that ran: per reading its difference (points), p and verdict,
    and `flips`, the readings whose verdict differs from the primary reading's."""
    recs: dict[str, dict[str, Any]] = {}
    for exp, prefix in NOTEBOOK_OF.items():
        scores = reading_scores(runs, prefix)
        claims = [c for c in CLAIMS if c.experiment == exp]
        if scores.empty or not claims:
            continue
        for m in READINGS:
            for r in check_claims(scores, claims, metric=m).to_dict("records"):
                if r["verdict"] == NOT_RUN:
                    continue
                rec = recs.setdefault(r["claim"], {"claim": r["claim"], "dataset": r["dataset"],
                                                   "statement": r["statement"], "n_pairs": r["n_pairs"]})
                rec[f"{m} diff"] = round(float(r["diff"]), 1)
                rec[f"{m} p"] = r["p_value"]
                rec[f"{m} verdict"] = SILENT if r["verdict"] == NO_SIGNAL else r["verdict"]
    out = pd.DataFrame(list(recs.values()))
    if out.empty:
        return out
    out["flips"] = [", ".join(m for m in READINGS[1:] if rec.get(f"{m} verdict") not in (None, rec.get("hit1 verdict")))
                    for rec in out.to_dict("records")]
    return out


def retested_claims(runs: pd.DataFrame, metrics: tuple[str, ...] = ("hit1", "hit1_exact")) -> pd.DataFrame:
    """Every MetaQA claim that ran, re-tested by today's rules on the committed per-question files,
    once per metric (the primary and the exploratory one): what `claims.re_decide_equivalence`
    re-judges a stored `~` claim by."""
    frames = []
    for exp, prefix in NOTEBOOK_OF.items():
        scores = reading_scores(runs, prefix, metrics)
        claims = [c for c in CLAIMS if c.experiment == exp]
        if scores.empty or not claims:
            continue
        for m in metrics:
            df = check_claims(scores, claims, metric=m)
            frames.append(df[df["verdict"] != NOT_RUN].assign(metric=m))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def flip_notes(readings: pd.DataFrame) -> Mapping[str, str]:
    """claim id -> the text appended to its verdict where a reading changes it."""
    if readings.empty:
        return {}
    notes = {}
    for rec in readings.to_dict("records"):
        if rec["flips"]:
            parts = [f"{m} {rec[f'{m} verdict']}" for m in ("hit1", *rec["flips"].split(", "))]
            notes[rec["claim"]] = "the readings differ, each at its own p: " + ", ".join(parts)
    return notes
