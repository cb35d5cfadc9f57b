"""REPORT's "The claims plan beside the outcomes" (issue 56, deliverable 1): the newest claims
plan frozen under `results/claims-plan/` (`report.plan --freeze`), set beside what the runs now
hold, so a reader sees that each claim's n was fixed before its result, and what still blocks
every claim without a verdict.

It reads the frozen plan only (no plan is made here: a plan made while the report is written
would be chosen after the results it reports). Without a frozen plan the section says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ..paths import shown_path
from .accounting import PAPER_NAMES

PLAN_DIR = "claims-plan"   # beside the published folders: results/claims-plan
TITLE = "### The claims plan beside the outcomes"
BLOCKER_ORDER = ("n", "data", "model", "not run")


def plan_folder(results_root: str | Path) -> Path:
    """Where frozen plans live for a published folder (`results/reference` -> `results/claims-plan`)."""
    return Path(results_root).parent / PLAN_DIR


def newest_plan(folder: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest frozen plan (`<date>.json`, newest by name) in `folder`, or None."""
    files = sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []
    for path in reversed(files):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "claims" in data:
            return path, data
    return None


def _n(v: Any) -> Any:
    """A planned or needed n as REPORT prints it ('unreachable' where no n gives the effect power)."""
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return None
    return int(v)


def _obj(values: list[Any], index: pd.Index) -> pd.Series:
    """Counts kept as integers beside missing ones (a float column would print 120 as 120.00)."""
    return pd.Series(values, index=index, dtype=object)


SPENT = "core-hours spent"


def spent_core_hours(runs: pd.DataFrame, notebook: str, dataset: str, request_seconds: dict[str, float],
                     built: dict[Any, set[str]]) -> float | None:
    """Core-hours (2 cores) a unit's runs took, from the LLM cache: the generation seconds of every
    distinct request its runs (`runs`: of the planned model) made, with its notebook's KG extraction on
    that dataset (`built`, `study.built_requests(..., by_dataset=True)`); None where no run records
    its requests. A request an earlier unit made too (a shared question) counts here as well."""
    sel = runs[(runs["notebook"] == notebook) & (runs["dataset"] == dataset)] if not runs.empty else runs
    if sel.empty or "requests" not in sel or not any(isinstance(r, tuple) for r in sel["requests"]):
        return None
    ids = {k for reqs in sel["requests"] if isinstance(reqs, tuple) for k in reqs} | built.get((notebook, dataset), set())
    return round(2 * sum(request_seconds.get(k, 0.0) for k in ids) / 3600, 2)


def report_section(results_root: str | Path, claims: pd.DataFrame, runs: pd.DataFrame, model: str,
                   md: Callable[..., str], request_seconds: dict[str, float] | None = None,
                   built: dict[Any, set[str]] | None = None) -> list[str]:
    """The section's lines: `claims` is the report's claims table (its final verdicts), `runs`
    its distinct runs, `model` the report's model, `md` the report's table formatter; with
    `request_seconds` (`study.cache_request_seconds`) each run unit's core-hours spent beside the
    plan's (`spent_core_hours`)."""
    folder = plan_folder(results_root)
    found = newest_plan(folder)
    parts = [TITLE, ""]
    if found is None:
        return parts + [f"No claims plan is frozen under `{shown_path(folder)}`: no claim's n in this report was fixed "
                        "before its result was seen. `python -m kgrag_lib.report.plan --freeze results/claims-plan` "
                        "writes one from the committed reports (each claim's blocker, the n at which its effect "
                        "reaches 80 % power in its paper's Holm family, and the core-hours), to be committed before "
                        "the runs it names.", ""]
    path, plan = found
    pc = pd.DataFrame(plan.get("claims") or [])
    units = pd.DataFrame(plan.get("units") or [])
    primary = claims[~claims["metric"].isin(("hit1_exact", "f1"))] if not claims.empty and "metric" in claims else claims
    now_verdict = {} if primary.empty else {c: str(v).split("; ")[0] for c, v in zip(primary["claim"], primary["verdict"])}
    now_n = {} if primary.empty else {c: n for c, n in zip(primary["claim"], primary["n_pairs"])}
    commit = str(plan.get("commit") or "unknown")[:12]
    parts += [f"The plan frozen in `{shown_path(path)}` ({plan.get('made')}, code at commit `{commit}`"
              f"{', dirty tree' if plan.get('dirty') else ''}; planned model `{plan.get('planned_model')}`, "
              f"{float(plan.get('power', 0.8)):.0%} power at alpha / m per paper) beside this report ({model}). "
              "`planned n` is the n the plan fixed, `n now` the n this report's runs have; a claim's verdict counts "
              "as pre-registered only when its run reached the planned n.", ""]
    if pc.empty:
        return parts + ["(the frozen plan lists no claim)", ""]
    counts = pc["status"].value_counts()
    open_ = pc[pc["status"] != "verdict"]
    rows = []
    for b in BLOCKER_ORDER:
        mine = open_[open_["status"] == b]
        rows.append({"blocker": b, "claims": int(counts.get(b, 0)),
                     "planned": int(mine["planned"].sum()) if "planned" in mine else 0,
                     "verdict now": int(sum(now_verdict.get(c) in ("confirmed", "refuted") for c in mine["claim"]))})
    parts += [f"Registered claims in the plan: {len(pc)}; with a verdict when it was frozen: {int(counts.get('verdict', 0))}. "
              "Claims without a verdict, by blocker (`planned`: those the plan runs; `verdict now`: those this "
              "report decides):", "", md(pd.DataFrame(rows), 0), ""]
    if not units.empty:
        here = runs[runs["model"].astype(str) == str(plan.get("planned_model"))] if not runs.empty and "model" in runs else runs.iloc[0:0]
        def n_now(nb: str, ds: str) -> Any:
            sel = here[(here["notebook"] == nb) & (here["dataset"] == ds)] if not here.empty else here
            return int(sel["n"].max()) if not sel.empty and sel["n"].notna().any() else None
        shown = units.assign(**{"n now": _obj([n_now(nb, ds) for nb, ds in zip(units["notebook"], units["dataset"])],
                                                units.index)})
        if request_seconds:
            shown[SPENT] = _obj([spent_core_hours(here, nb, ds, request_seconds, built or {})
                                 for nb, ds in zip(units["notebook"], units["dataset"])], units.index)
        cols = [c for c in ("rank", "notebook", "dataset", "model", "kg", "n", "n now", "claims", "expected_verdicts",
                            "core_hours", SPENT, "verdicts_per_core_hour") if c in shown]
        spent = (f"; `{SPENT}`: the model time its runs' requests took when generated, from the committed LLM cache, "
                 "on 2 cores, with its LLM-built KG's extraction where the notebook records its requests; – where its "
                 "runs record none") if SPENT in shown else ""
        parts += ["Run units as the plan ranked them (`n`: planned; `n now`: this report's runs of the unit at the "
                  f"planned model; `core_hours`: what the plan priced{spent}):", "",
                  md(shown[cols].rename(columns={"n": "planned n"}), 2), ""]
    def col(name: str) -> list[Any]:
        return list(open_[name]) if name in open_ else [None] * len(open_)

    listed = open_.assign(
        paper=open_["paper"].map(lambda p: PAPER_NAMES.get(p, p)),
        **{"n needed": _obj(["unreachable" if v == "unreachable" or v == float("inf") else _n(v)
                             for v in col("n_needed")], open_.index),
           "planned n": _obj([_n(v) for v in col("planned_n")], open_.index),
           "n now": _obj([_n(now_n.get(c)) for c in open_["claim"]], open_.index),
           "now": open_["claim"].map(lambda c: now_verdict.get(c, "not run")),
           "core-hours": col("unit_core_hours")})
    cols = [c for c in ("paper", "claim", "dataset", "status", "evidence", "effect_source", "n needed", "planned n",
                        "core-hours", "n now", "now") if c in listed]
    parts += ["Every registered claim without a verdict when the plan was frozen: its blocker and evidence, the "
              "n at which the effect seen reaches the planned power (`unreachable`: the effect seen is 0), the n "
              "planned for its run unit and the unit's core-hours, and what this report now says:", "",
              md(listed[cols].rename(columns={"status": "blocker", "effect_source": "effect from"}), 2), ""]
    return parts
