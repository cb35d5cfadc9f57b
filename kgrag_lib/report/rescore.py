"""Rescore a published results folder (`results/reference`) after a scorer changed, from its
compact per-question files alone, so every committed number stays what today's scorer gives.

A published run keeps no traces (`study.compact_rows`), so only the answer metrics that read
the prediction and the golds are recomputed (EM, F1, the Hit@1 family); Acc reads the raw answer
kept in the trace, so its stored per-question value is kept, except that a failed question scores 0. Then, in each notebook's
summary.json: the result rows of a run whose scores changed (KG-Infused RAG's layout: variant,
dataset, rounds, kg), notebook 50's cross-method rows, notebook 21's "KG difference" and "KG minus placebo KG"
rows, and the paper's claims on those runs, the placebo claim (`m1.kg_over_placebo.*`, its side on the
notebook's KG against the same method on the placebo KG) included, re-tested on the same questions with
the same paired test. A changed run in a notebook whose claim this module cannot place is refused
by name rather than left stale.

    PYTHONPATH=. .venv/bin/python -m kgrag_lib.report.rescore results/reference

After a change to the paired test itself (its scores unchanged), `--retest` re-tests every claim and
KG-difference row it can place: only p and verdict change, and a claim whose p moved keeps its earlier
p and verdict (`claims.BEFORE_EXACT_FLIP`) so REPORT shows both. Then rebuild the folder's report
(`python -m kgrag_lib.report.publish FOLDER --profile P`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..errors import ConfigError
from ..eval.bootstrap import bootstrap_ci
from ..eval.metrics import get_metric
from ..eval.paired import claim_fields, paired_test, verdict
from .claims import BEFORE_EXACT_FLIP

KG_DIFFERENCE, PLACEBO_DIFFERENCE = "KG difference", "KG minus placebo KG"   # notebook 21's summary tables
RESCORED = ("em", "f1", "hit1", "hit1_exact", "hit1_first")   # per-question values a compact row recomputes
KEPT = ("acc",)      # read the raw answer: stored value kept, except a failed question's, which scores 0


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_json(path: Path, obj: Any, newline: bool = False) -> None:
    """As the run writes metrics.json and `notebooks.write_summary` summary.json (no final newline there)."""
    path.write_text(json.dumps(obj, indent=2, default=str) + ("\n" if newline else ""), encoding="utf-8")


def rescore_rows(rows: list[dict[str, Any]]) -> set[str]:
    """Recompute the RESCORED values each compact row carries, in place; the metrics that changed."""
    changed: set[str] = set()
    for m in RESCORED:
        fn = get_metric(m)
        for r in rows:
            if m in r:
                v = fn(r)
                if v != r[m]:
                    r[m] = v
                    changed.add(m)
    for m in KEPT:
        for r in rows:
            if r.get("failed") and r.get(m):
                r[m] = 0.0
                changed.add(m)
    return changed


def rescore_metrics(metrics: dict[str, Any], rows: list[dict[str, Any]], names: Iterable[str]) -> None:
    """Set `names`' means (percent, 2 decimals) and bootstrap intervals from the rows (in the
    order the run scored them: its sample's qids), as `eval.summary.summarize` computes them, and
    Avg (mean of Acc, F1, EM) when it is there. The intervals are today's BCa bootstrap; those of
    metrics not named keep what the run stored."""
    for m in names:
        vals = np.array([r[m] for r in rows if r.get(m) is not None], dtype=float)
        if m not in metrics or not vals.size:
            continue
        metrics[m] = round(100.0 * float(vals.mean()), 2)
        if f"{m}_ci95" in metrics:
            lo, hi = bootstrap_ci(vals)
            metrics[f"{m}_ci95"] = [round(100.0 * lo, 2), round(100.0 * hi, 2)]
    if "avg" in metrics and {"em", "f1", "acc"} <= set(metrics):
        metrics["avg"] = round((metrics["em"] + metrics["f1"] + metrics["acc"]) / 3, 2)


def _identity(folder: Path) -> dict[str, Any]:
    cfg = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["config"]
    mcfg = cfg.get("method_config") or {}
    return {"method": cfg["run"]["method"], "dataset": cfg["run"]["dataset"], "kg": mcfg.get("kg"),
            "rounds": mcfg.get("rounds")}


def question_avg(rows: list[dict[str, Any]], metric: str) -> dict[str, float]:
    """qid -> a question's stored value of `metric` (avg: mean of its Acc, F1, EM; Acc alone on
    StrategyQA, as `report.kg_infused.question_values`)."""
    out = {}
    for r in rows:
        if metric == "avg":
            out[r["qid"]] = r["acc"] if r.get("dataset") == "strategyqa" else (r["acc"] + r["f1"] + r["em"]) / 3
        elif r.get(metric) is not None:
            out[r["qid"]] = r[metric]
    return out


class _Notebook:
    """One notebook folder's runs, found by what the KG-Infused report labels them with."""

    def __init__(self, folder: Path, changed: set[Path]):
        self.runs = {p.parent: _identity(p.parent) for p in folder.rglob("manifest.json")
                     if (p.parent / "questions.jsonl").is_file()}
        self.changed = changed

    def touched(self) -> bool:
        """Whether a run of this notebook was rescored."""
        return any(f in self.changed for f in self.runs)

    def find(self, variant: str, rounds: Any, dataset: str, kg: str | None) -> Path | None:
        from .kg_infused.tables import ROUND_VARIANTS

        hits = [f for f, i in self.runs.items() if i["method"] == variant and i["dataset"] == dataset
                and (kg is None or i["kg"] == kg) and (variant not in ROUND_VARIANTS or i["rounds"] == rounds)]
        return sorted(hits)[0] if hits else None

    def by_label(self, label: str, dataset: str, kg: str) -> Path | None:
        from .kg_infused.tables import ABLATION_LABELS, round_label

        for f, i in sorted(self.runs.items()):
            if i["dataset"] == dataset and i["kg"] == kg and label in (
                    round_label(i["method"], i["rounds"]), round_label(i["method"], i["rounds"], ablation=True)) \
                    and i["method"] in {*ABLATION_LABELS, "kg-infused", "vanilla-rag", "vanilla-qe", "nor"}:
                return f
        return None


def _retest(rec: dict[str, Any], va: dict[str, float], vb: dict[str, float], p_only: bool = False) -> None:
    """Re-test a stored claim on its sides' per-question values. `p_only`: a re-test because the
    p's computation changed (`--retest`), its scores not: only p and verdict are replaced (the
    interval's resamples follow the question order, which need not be the notebook's), and a p that
    moves keeps the stored p and verdict in `BEFORE_EXACT_FLIP` (the first ones only), so the report
    can show the verdict under both."""
    both = [q for q in va if q in vb]
    r = paired_test([va[q] for q in both], [vb[q] for q in both])
    rel = ">" if " > " in rec["statement"] else "<" if " < " in rec["statement"] else "~"
    if p_only:
        if rec.get("p_value") != r.p_value:
            rec.setdefault(BEFORE_EXACT_FLIP, {"p_value": rec.get("p_value"), "verdict": rec.get("verdict")})
            rec.update(p_value=r.p_value, verdict=verdict(rel, r))
        return
    rec.update(n_pairs=r.n, ours_a=r.mean_a, ours_b=r.mean_b, diff=r.diff, ci95=[round(v, 1) for v in r.ci95],
               p_value=r.p_value, test=r.test, verdict=verdict(rel, r), **claim_fields(rel, r))


def rescore_published(root: str | Path, retest: bool = False) -> list[str]:
    """Rescore every run under `root` and the summary rows that rest on a changed run; the
    lines say what changed (empty when nothing did). `retest`: after a change of the paired test
    (not the scorer), re-test every claim and KG-difference row this module can place, changed
    runs or not."""
    from .kg_infused import paper_numbers as kgi

    root = Path(root)
    log: list[str] = []
    changed: set[Path] = set()
    for qfile in sorted(root.rglob("questions.jsonl")):
        rows = _read_jsonl(qfile)
        met_path = qfile.parent / "metrics.json"
        names = rescore_rows(rows) if met_path.is_file() else set()
        if not names:
            continue
        metrics = json.loads(met_path.read_text(encoding="utf-8"))
        before = {m: metrics.get(m) for m in (*RESCORED, *KEPT, "avg")}
        qids = json.loads((qfile.parent / "manifest.json").read_text(encoding="utf-8"))["config"].get("qids") or []
        by_qid = {r["qid"]: r for r in rows}
        ordered = [by_qid[q] for q in qids if q in by_qid] if len(by_qid) == len(rows) == len(qids) else rows
        rescore_metrics(metrics, ordered, sorted(names))
        qfile.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        _write_json(met_path, metrics)
        changed.add(qfile.parent)
        log.append(f"{qfile.parent.relative_to(root)}: " + ", ".join(
            f"{m} {before[m]} -> {metrics.get(m)}" for m in before if before[m] != metrics.get(m)))
    claims = {c[0]: c for c in (*kgi.CLAIMS, *kgi.MECHANISM_CLAIMS)}
    for summary in sorted(root.glob("*/summary.json")):
        nb = _Notebook(summary.parent, changed)
        rows = json.loads(summary.read_text(encoding="utf-8"))
        dirty = False
        for rec in rows:
            if "claim" in rec:
                base = str(rec["claim"]).split("@")[0]
                if rec.get("verdict") == "not run" or rec.get("metric") not in ("em", "f1", "avg"):
                    continue
                spec = claims.get(base)
                if spec is None:
                    if nb.touched():
                        raise ConfigError(f"{summary}: claim {rec['claim']!r} rests on runs of this notebook that "
                                          "were rescored, and this module cannot place its sides; re-run the "
                                          "notebook instead of leaving its verdict stale")
                    continue
                _, _, dataset, a, _, b, _, _ = spec
                # "<claim>@<kg>": the same claim on another KG's grid (the upper bound), its KG sides there
                on = next((t for t in str(rec["claim"]).split("@")[1:] if t != rec.get("metric")), None)
                fa = nb.find(a[0], a[1], dataset, side_kg(rows, dataset, a, on))
                fb = nb.find(b[0], b[1], dataset, side_kg(rows, dataset, b, on))
                if fa is None or fb is None or (fa not in changed and fb not in changed and not retest):
                    continue
                old = rec.get("verdict"), rec.get("diff"), rec.get("p_value")
                _retest(rec, question_avg(_read_jsonl(fa / "questions.jsonl"), rec["metric"]),
                        question_avg(_read_jsonl(fb / "questions.jsonl"), rec["metric"]),
                        p_only=fa not in changed and fb not in changed)
                if retest and (rec.get("verdict"), rec.get("diff"), rec.get("p_value")) == old:
                    continue
                dirty = True
                log.append(f"{summary.parent.name} {rec['claim']}: diff {old[1]:.2f} -> {rec['diff']:.2f}, "
                           f"p {old[2]:.4f} -> {rec['p_value']:.4f}, verdict {old[0]} -> {rec['verdict']}")
            elif rec.get("table") in (KG_DIFFERENCE, PLACEBO_DIFFERENCE):
                kgs = [k for k in rec if k.startswith("2wiki-evidence-")]
                if len(kgs) != 2:
                    raise ConfigError(f"{summary}: a {rec['table']} row without two KG columns: {rec}")
                if rec["table"] == KG_DIFFERENCE:   # the upper-bound (oracle) KG minus the notebook's
                    base_kg, other_kg = sorted(kgs, key=lambda k: k.endswith("oracle"))
                else:                               # the notebook's KG minus its placebo
                    main = kgi_kg(rows, rec["dataset"])
                    if main not in kgs:
                        raise ConfigError(f"{summary}: a {rec['table']} row whose KGs {kgs} do not include the "
                                          f"notebook's KG {main!r}")
                    base_kg, other_kg = [k for k in kgs if k != main][0], main
                fb = nb.by_label(rec["configuration"], rec["dataset"], base_kg)
                fa = nb.by_label(rec["configuration"], rec["dataset"], other_kg)
                if fa is None or fb is None or (fa not in changed and fb not in changed and not retest):
                    continue
                va = question_avg(_read_jsonl(fa / "questions.jsonl"), rec["metric"])
                vb = question_avg(_read_jsonl(fb / "questions.jsonl"), rec["metric"])
                both = [q for q in va if q in vb]
                r = paired_test([va[q] for q in both], [vb[q] for q in both])
                if fa not in changed and fb not in changed:   # --retest: the p's computation changed, not the scores
                    if rec.get("p_value") != r.p_value:
                        rec.update(p_value=r.p_value, separable="yes" if r.p_value < 0.05 else "not separable at this n")
                        dirty = True
                    continue
                rec.update({"n_pairs": r.n, base_kg: round(r.mean_b, 1), other_kg: round(r.mean_a, 1),
                            "diff": round(r.diff, 1), "ci95": [round(v, 1) for v in r.ci95], "p_value": r.p_value,
                            "separable": "yes" if r.p_value < 0.05 else "not separable at this n"})
                dirty = True
            elif rec.get("table") == "cross-method":   # notebook 50: one run per method and dataset
                hits = [f for f, i in nb.runs.items() if i["method"] == rec.get("method")
                        and i["dataset"] == rec.get("dataset") and (rec.get("kg") is None or i["kg"] in (None, rec["kg"]))]
                if len(hits) > 1:
                    raise ConfigError(f"{summary}: {len(hits)} runs of {rec.get('method')} on {rec.get('dataset')}; "
                                      "cannot tell which one its cross-method row shows")
                if not hits or hits[0] not in changed:
                    continue
                met = json.loads((hits[0] / "metrics.json").read_text(encoding="utf-8"))
                for k in (*RESCORED, *KEPT, "avg", *(f"{m}_ci95" for m in (*RESCORED, *KEPT))):
                    if k in rec and k in met:
                        rec[k] = met[k]
                dirty = True
            elif {"variant", "dataset", "kg"} <= set(rec) and "f1" in rec:
                f = nb.find(rec["variant"], rec.get("rounds"), rec["dataset"], rec["kg"])
                if f is None or f not in changed:
                    continue
                met = json.loads((f / "metrics.json").read_text(encoding="utf-8"))
                for k in ("em", "f1", "avg", "em_ci95", "f1_ci95"):
                    if k in rec and k in met:
                        rec[k] = met[k]
                dirty = True
        if dirty:
            _write_json(summary, rows)
    return log


def placebo_kg(rows: list[dict[str, Any]], dataset: str) -> str | None:
    """The placebo KG of a KG-Infused notebook for `dataset`: the KG of its "KG minus placebo KG"
    rows that is not the main grid's (None when no placebo ran)."""
    main = kgi_kg(rows, dataset)
    kgs = {k for r in rows if r.get("table") == PLACEBO_DIFFERENCE and r.get("dataset") == dataset
           for k in r if k.startswith("2wiki-evidence-") and k != main}
    if len(kgs) > 1:
        raise ConfigError(f"{dataset}: {len(kgs)} placebo KGs in one notebook ({sorted(kgs)}); expected one")
    return next(iter(kgs), None)


def side_kg(rows: list[dict[str, Any]], dataset: str, side: tuple, on: str | None = None) -> str | None:
    """The KG a claim's side ran on: the main grid's, or for a mechanism claim's `(variant, rounds,
    "placebo")` side the placebo KG (`paper_numbers.MECHANISM_CLAIMS`); a claim checked on another
    KG's grid (`<claim>@<kg>`, `on`) has its KG-Infused sides on that KG (`kg_infused.tables.check_claims`)."""
    from .kg_infused.tables import ROUND_VARIANTS

    if on and side[0] in ROUND_VARIANTS:
        return on
    return placebo_kg(rows, dataset) if len(side) > 2 and side[2] == "placebo" else kgi_kg(rows, dataset)


def kgi_kg(rows: list[dict[str, Any]], dataset: str) -> str | None:
    """The KG a KG-Infused notebook's main grid used for `dataset` (its result rows say)."""
    kgs = {r.get("kg") for r in rows if r.get("dataset") == dataset and "variant" in r and r.get("kg")}
    main = sorted(k for k in kgs if not str(k).endswith("oracle"))
    return main[0] if main else None


def main(argv: list[str] | None = None) -> int:
    import sys

    args = sys.argv[1:] if argv is None else argv
    retest = "--retest" in args
    args = [a for a in args if a != "--retest"]
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m kgrag_lib.report.rescore [--retest] RESULTS_FOLDER (e.g. results/reference); "
              "--retest re-tests every claim it can place after the paired test changed", file=sys.stderr)
        return 2
    for line in rescore_published(args[0], retest=retest):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
