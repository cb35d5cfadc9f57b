"""MetaQA's claims under three readings of Hit@1, side by side (§4.2.1; issue 41, item 2; issue 56, item 7).

The paper's figures count an answer correct when it names a gold entity (`hit1`, our primary
reading), but KG-RAG's answers are sentences and average two to three times the words of
KAPING's, so the lenient reading favours the longer answer. Every MetaQA claim is therefore
re-tested, on the same paired questions, under the first-entity reading (`hit1_first`, the usual
KGQA Hit@1) and a length-matched one (`hit1_sentence`: a gold in the answer's first sentence).

Each reading's tests are judged in the same Holm family as the primary claims (`multiplicity`):
the paper's family, each member tested under that reading, so `hit1` reproduces the claims
table's adjusted p exactly and another reading's verdict is as strict as the primary one. A
reading under which neither side scores above `FLOOR` points cannot tell the sides apart (answers
in sentences never start with the entity, so KG-RAG scores about 0 under `hit1_first`): it reads
as a **floor effect** with both means, not "not separable", which would suggest a tie it never
measured. Its test stays in the family (at p = 1 where no question scores), so every reading's
family keeps the primary family's size. A claim whose verdict differs between readings says so
beside its verdict in the claims table.

It reads only the committed per-question files (prediction and golds), so it runs on a
published results folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from ...eval.metrics import score_items
from ...eval.paired import NO_SIGNAL, NOT_RUN, NOT_SEPARABLE
from .. import multiplicity
from ..papers import PAPER_SETUP
from .paper_numbers import CLAIMS
from .tables import check_claims

READINGS = ("hit1", "hit1_first", "hit1_sentence")
NOTEBOOK_OF = {"exp1": "11", "exp2": "12"}   # experiment -> the notebook prefix whose runs test it
FLOOR = 2.0   # points: a reading under which neither side scores above this tests nothing (a floor effect)
FLOOR_EFFECT = "floor effect"
PAPER = str(PAPER_SETUP["metaqa"]["paper"])   # the Holm family the readings are judged in
OWN_P = "verdict at own p"   # a reading's verdict under the rule before the family (`RULE_CHANGE`)
RULE_CHANGE = (
    "The rule for the readings changed after the committed results were seen (issue 56): each reading used to be "
    "judged at its own p; it is now judged in the paper's Holm family, as the primary claims are. Because the rule "
    "changed after the results, both outcomes are shown: `p` and `Holm` side by side for every reading above, and "
    "here every reading whose verdict differs between the two rules.")


def floor_verdict(mean_a: float, mean_b: float, floor: float = FLOOR) -> str | None:
    """"floor effect (A 0.0 vs B 0.0 %)" when neither side scores above `floor` points, else None."""
    if pd.isna(mean_a) or pd.isna(mean_b) or max(float(mean_a), float(mean_b)) > floor:
        return None
    return f"{FLOOR_EFFECT} (A {float(mean_a):.1f} vs B {float(mean_b):.1f} %)"


def is_floor(verdict: Any) -> bool:
    return str(verdict).startswith(FLOOR_EFFECT)


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


def tested_readings(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """One record per (MetaQA claim that ran, reading): its sides' means, difference, p and own verdict."""
    out = []
    for exp, prefix in NOTEBOOK_OF.items():
        scores = reading_scores(runs, prefix)
        claims = [c for c in CLAIMS if c.experiment == exp]
        if scores.empty or not claims:
            continue
        for m in READINGS:
            out += [{**r, "reading": m} for r in check_claims(scores, claims, metric=m).to_dict("records")
                    if r["verdict"] != NOT_RUN]
    return out


def judge_in_family(tests: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """`tests` (claim, reading, statement, p_value, verdict, ours_a, ours_b) with `p_holm` and the
    verdict re-read from it, each reading in the paper's Holm family: the claims the primary reading
    (`hit1`) tests, as `multiplicity.in_family` decides; a member whose reading no question scores
    on enters at p = 1 (it tested nothing, and the family keeps its size). Then a reading under
    which neither side exceeds `FLOOR` reads as a floor effect. `OWN_P` keeps the verdict the
    test's own p gave (the rule before the family, `RULE_CHANGE`), floor effects labelled alike;
    `p_decisive` the p Holm adjusts (`multiplicity.decisive_p_values`)."""
    if tests.empty:
        return tests.assign(p_holm=pd.Series(dtype=float), **{OWN_P: pd.Series(dtype=object)})
    primary = tests[tests["reading"] == READINGS[0]]
    members = set(primary.loc[multiplicity.in_family(primary.assign(metric="hit1"), ()), "claim"])
    parts = []
    for m, group in tests.groupby("reading", sort=False):
        g = group.assign(metric="hit1", paper=PAPER)
        fam = g["claim"].isin(members)
        silent = fam & (g["verdict"] == NO_SIGNAL)
        g.loc[silent, "verdict"] = NOT_SEPARABLE
        g.loc[silent, "p_value"] = 1.0
        if "p_equiv" in g:   # TOST on 0 vs 0 would "confirm" a `~` claim: the member enters at p = 1, not at it
            g.loc[silent, "p_equiv"] = np.nan
        g["p_decisive"] = multiplicity.decisive_p_values(g)
        judged = multiplicity.adjust(g[fam], (), alpha=alpha)
        outside = g[~fam].assign(p_holm=np.nan, **{"unadjusted verdict": g.loc[~fam, "verdict"]})
        parts.append(pd.concat([judged, outside]).loc[g.index].drop(columns=["metric", "paper", "family"],
                                                                        errors="ignore"))
    out = pd.concat(parts).loc[tests.index]
    floors = [floor_verdict(a, b) for a, b in zip(out["ours_a"], out["ours_b"])]
    out["verdict"] = [f or v for f, v in zip(floors, out["verdict"])]
    out[OWN_P] = [f or v for f, v in zip(floors, out["unadjusted verdict"])]
    return out.drop(columns=["unadjusted verdict"])


def readings_table(runs: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per MetaQA claim that ran: per reading both sides' means, the difference (points),
    its decisive p (TOST's for a `~` claim it decides, as Holm adjusts it), Holm-adjusted p in the paper's family, the verdict read from it and the one its own p gave
    (`OWN_P`, the old rule); `flips`, the readings whose verdict differs from the primary reading's."""
    tests = pd.DataFrame(tested_readings(runs))
    if tests.empty:
        return tests
    tests = judge_in_family(tests, alpha=alpha)
    recs: dict[str, dict[str, Any]] = {}
    for r in tests.to_dict("records"):
        rec = recs.setdefault(r["claim"], {"claim": r["claim"], "dataset": r["dataset"],
                                           "statement": r["statement"], "n_pairs": r["n_pairs"]})
        m = r["reading"]
        rec[f"{m} a"] = round(float(r["ours_a"]), 1)
        rec[f"{m} b"] = round(float(r["ours_b"]), 1)
        rec[f"{m} diff"] = round(float(r["diff"]), 1)
        rec[f"{m} p"] = r["p_decisive"]
        rec[f"{m} p_holm"] = r["p_holm"]
        rec[f"{m} verdict"] = r["verdict"]
        rec[f"{m} {OWN_P}"] = r[OWN_P]
    out = pd.DataFrame(list(recs.values()))
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
            notes[rec["claim"]] = "the readings differ (Holm, the paper's family): " + ", ".join(parts)
    return notes


def report_table(readings: pd.DataFrame, format_p: Callable[[Any], Any]) -> pd.DataFrame:
    """The readings as REPORT prints them: per reading `A vs B` (both sides' means, %), diff, p, Holm and verdict."""
    if readings.empty:
        return readings
    shown = readings[["claim", "dataset", "statement", "n_pairs"]].copy()
    for m in READINGS:
        if f"{m} verdict" not in readings:
            continue
        shown[f"{m} A vs B"] = [f"{a:.1f} vs {b:.1f}" for a, b in zip(readings[f"{m} a"], readings[f"{m} b"])]
        shown[f"{m} diff"] = readings[f"{m} diff"]
        shown[f"{m} p"] = readings[f"{m} p"].map(format_p)
        shown[f"{m} Holm"] = readings[f"{m} p_holm"].map(format_p)
        shown[f"{m} verdict"] = readings[f"{m} verdict"]
    shown["flips"] = readings["flips"]
    return shown


def rule_change_table(readings: pd.DataFrame, format_p: Callable[[Any], Any]) -> pd.DataFrame:
    """Every (claim, reading) whose verdict at its own p (the old rule) differs from its verdict in
    the paper's Holm family (the rule now), with both p-values and both verdicts."""
    rows = []
    for rec in ([] if readings.empty else readings.to_dict("records")):
        for m in READINGS:
            if f"{m} {OWN_P}" in rec and rec[f"{m} {OWN_P}"] != rec[f"{m} verdict"]:
                rows.append({"claim": rec["claim"], "dataset": rec["dataset"], "reading": m,
                             "A vs B": f"{rec[f'{m} a']:.1f} vs {rec[f'{m} b']:.1f}", "diff": rec[f"{m} diff"],
                             "p": format_p(rec[f"{m} p"]), "Holm": format_p(rec[f"{m} p_holm"]),
                             "verdict at own p (old rule)": rec[f"{m} {OWN_P}"],
                             "verdict in the family (now)": rec[f"{m} verdict"]})
    return pd.DataFrame(rows)


SECTION_TEXT = (
    "The paper's figures count an answer right when it names a gold entity (`hit1`, the primary reading); KG-RAG "
    "answers in sentences two to three times as long as KAPING's, which that reading favours. So each MetaQA claim is "
    "re-tested on the same questions under the first-entity reading (`hit1_first`, the usual KGQA Hit@1) and a "
    "length-matched one (`hit1_sentence`: a gold in the answer's first sentence). Every reading is judged in the same "
    "Holm family as the primary claims (the paper's family, each member tested under that reading; `p` is the "
    "test's own decisive p, TOST's `p_equiv` for a `~` claim TOST decides, `Holm` its adjusted p, and `hit1` repeats "
    "the claims table). `A vs B`: both sides' means (%). A reading under which neither "
    f"side scores above {FLOOR:g} % reads **{FLOOR_EFFECT}** with its means: it cannot tell the sides apart (sentence "
    "answers never start with the entity). `flips` names the readings whose verdict differs from `hit1`'s, and the "
    "claims table says so beside the verdict.")


def report_section(readings: pd.DataFrame, md: Callable[[pd.DataFrame], str],
                   format_p: Callable[[Any], Any]) -> list[str]:
    """REPORT's readings section (empty without MetaQA claims)."""
    if readings.empty:
        return []
    changed = rule_change_table(readings, format_p)
    return ["### MetaQA: every claim under three readings of Hit@1", "", SECTION_TEXT, "",
            md(report_table(readings, format_p)), "", RULE_CHANGE, "",
            md(changed) if not changed.empty else "(no reading's verdict differs between the two rules)", ""]
