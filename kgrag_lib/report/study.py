"""The study's report: everything the notebooks and runs of one results folder found, in one
REPORT.md (and HTML), plus a compact copy of the results that can be committed.

It reads only files: each notebook's `summary.json` (its result rows, including the paper's
claims tested on paired questions: rows with a "claim" key) and each run's `manifest.json`,
`metrics.json` and `predictions.jsonl` under `<results>/<notebook>/runs/` (or `run/`). So a method added
later (SA-RAG, TCR-QF) appears in the claims, the table of every distinct run and the cost lines
as soon as its notebooks and runs exist, without editing the report notebook; notebook 50's
summary rows (every method on the same questions) become the report's first table.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from importlib import import_module
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

import pandas as pd

from ..eval.metrics import get_metric, score_items
from ..eval.paired import paired_test
from ..eval.power import n_for_equivalence
from ..methods.registry import PAPERS, available_methods, paper_package
from ..paths import shown_path
from ..provenance import git_commit
from ..redact import redact
from ..rundir import PRED_FILE, read_predictions, read_summary
from . import cross_method, multiplicity, preregistration
from .accounting import account, registered_count
from .claims import (BEFORE_EXACT_FLIP, BEFORE_TOST, EQUIVALENCE_CHANGE, EXACT_FLIP_CHANGE, re_decide_equivalence,
                     re_decide_silent)
from .mechanism import (KG_VERDICT_RULE, NOT_RECORDED, apply_testability, health_table, judge_health, mechanism_record,
                        sa_rag_index_health)
from .metaqa.readings import flip_notes, readings_table, retested_claims
from .metaqa.readings import report_section as readings_section
from .papers import PAPER_SETUP
from .tables import COST_KEYS, to_markdown

RUN_SCORES = ("hit1", "hit1_exact", "em", "f1", "acc")
# What every paper's reproduction here differs in from the paper, whatever the profile.
DEVIATIONS_COMMON = (
    "Runs on CPU use the profile's small instruction model (cpu profiles: Qwen2.5-Coder 0.5B/1.5B, 4-bit, "
    "llama.cpp), not the papers' 7-8B models; token budgets per stage are cut (see methods.* in the profile).",
    "Sample sizes are the profile's (cpu-reference: about 100 questions per dataset), not the papers' 500-1,000 "
    "x seeds; every table states its n and every claim is tested on paired questions.",
    "2WikiMultiHopQA EM/F1 are scored against the answer each question file gives (plus any aliases the file "
    "carries): the official v1.1 scorer also accepts every alias of the answer's Wikidata id from the ID-enhanced "
    "release's id_aliases.json, which the data here lacks. So every 2Wiki EM/F1 without aliases is a lower bound; a "
    "run given the alias file ($KGRAG_2WIKI_ALIASES or data/2wiki/id_aliases.json) uses it and its manifest says so.",
    "The 2Wiki questions of TCR-QF, SA-RAG and the cross-method table come from the 200-question file that ships "
    "paragraphs (MIGRES_200_2wiki.jsonl); 36 of its 200 questions ship none, 6 of the 30 in the cpu-reference "
    "sample: their corpus lacks the gold paragraphs, so every retrieval method starts from a lower ceiling there.",
    "A failed question (output the method could not parse, e.g. Self-Ask with neither a follow-up nor a final "
    "answer) scores 0 on every metric, Acc included, though the papers' code scores Acc on the raw output: a "
    "raw text that happens to contain the gold is not an answer the method gave. This changed one committed "
    "number: notebook 50's self-ask-kg-infused Acc 16.67 -> 13.33 (Avg 14.72 -> 13.61).",
)

def setup_deviations(runs: pd.DataFrame) -> list[str]:
    """One line per study family whose runs used another model or retriever than its paper, naming
    what they used (from the runs' manifests, so the report says what ran, whatever the profile)."""
    if runs.empty or "method" not in runs:
        return []
    families = {name: spec.family for name, spec in available_methods().items()}
    out = []
    for family, paper in PAPER_SETUP.items():
        mine = runs[runs["method"].map(families.get) == family]
        if mine.empty:
            continue
        models = sorted({str(m) for m in mine["model"].dropna()} if "model" in mine else set())
        embedders = sorted({str(e) for e in mine["embedder"].dropna()} if "embedder" in mine else set())
        other_models = [m for m in models if m.lower() not in paper["models"]]
        if other_models:
            alike = all(m.lower() in paper.get("quantized_alike", set()) for m in other_models)
            what = ("the paper's model at full precision (bf16), without its 4-bit quantization"
                    if alike else "not the paper's model")
            out.append(f"{paper['paper']}: generated with {', '.join(other_models)}: {what} ({paper['model']}).")
        other_emb = [e for e in embedders if e.lower().removeprefix("hf:") not in paper["embedders"]]
        if other_emb:
            out.append(f"{paper['paper']}: retrieved with {', '.join(other_emb)}, not the paper's {paper['retriever']}.")
    return out


def paper_deviations() -> list[str]:
    """Every paper's deviations, paper by paper (`methods.registry.PAPERS`): those of its methods
    (`methods.<paper>.DEVIATIONS`), then those of its report (`report.<paper>.paper_numbers`)."""
    return [d for paper in PAPERS for d in (*paper_package(paper).DEVIATIONS,
                                            *import_module(f"{__package__}.{paper}.paper_numbers").DEVIATIONS)]


@dataclass
class StudyResults:
    """What one results folder holds."""

    root: Path
    summaries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)   # notebook -> rows
    runs: list[dict[str, Any]] = field(default_factory=list)                   # one record per run folder

    @property
    def claims(self) -> pd.DataFrame:
        rows = [{"notebook": nb, **r} for nb, rs in self.summaries.items() for r in rs if "claim" in r]
        return pd.DataFrame(rows)


def shown_model(model: Any) -> Any:
    """A model named by a local path (`hf:/home/me/kgrag/.cache/hf_from_gguf/1d96...`, a DPO-trained
    folder under results/) as the reader can find it in any checkout: the path from its `.cache/`
    or `results/` folder on. Other names (registry names, hub ids) are returned unchanged."""
    if not isinstance(model, str):
        return model
    prefix, sep, path = model.rpartition(":")
    if not path.startswith("/"):
        return model
    for marker in ("/results/", "/.cache/"):
        at = path.rfind(marker)
        if at >= 0:
            return f"{prefix}{sep}{path[at + 1:]}"
    return model


def read_run(folder: Path) -> dict[str, Any] | None:
    """One run folder as a flat record: identity, scores, cost, and its per-question rows."""
    try:
        man = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        met = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cfg = man.get("config") or {}
    run = cfg.get("run") or {}
    mcfg = cfg.get("method_config") or {}
    rec = {"folder": str(folder), "method": run.get("method"), "dataset": run.get("dataset"), "n": met.get("n"),
           "seed": run.get("seed"), "model": shown_model(run.get("model")), "embedder": run.get("embedder"),
           "kg": mcfg.get("kg") or (mcfg.get("kb") and "metaqa:" + str(mcfg.get("kb"))) or None,
           "rounds": mcfg.get("rounds"), "hops": mcfg.get("hops"), "top_k": mcfg.get("top_k"),
           "qids": tuple(cfg.get("qids") or ()), "commit": (man.get("git") or {}).get("commit"),
           "llm_identity": cfg.get("llm_identity"), "answer_aliases": cfg.get("answer_aliases"),
           "failed": met.get("failed"), "questions_with_issues": met.get("questions_with_issues")}
    rec.update({m: met.get(m) for m in RUN_SCORES})
    rec.update({f"{m}_ci95": met.get(f"{m}_ci95") for m in RUN_SCORES})
    cost = met.get("cost_per_question") or {}
    rec.update({f"{k}_per_q": cost.get(k) for k in COST_KEYS})
    rec["answer_seconds_total"] = round(float(cost.get("seconds") or 0.0) * int(met.get("n") or 0), 1)
    rec["requests"] = run_requests(folder)
    return rec


def run_requests(folder: Path) -> tuple[str, ...] | None:
    """The LLM request ids (a cache key's first 16 hex digits) a run's questions made, from its
    questions.jsonl (published) or predictions.jsonl; None where its rows do not record them."""
    for name in ("questions.jsonl", PRED_FILE):
        path = folder / name
        if path.is_file():
            ids: list[str] = []
            seen = False
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    if '"requests"' in line:
                        seen = True
                        ids += [str(k) for k in (json.loads(line).get("requests") or [])]
            return tuple(ids) if seen else None
    return None


def collect(root: str | Path, exclude: Iterable[str] = ("90_report",)) -> StudyResults:
    """Every notebook summary and every run under a results folder (`results/<profile>`),
    except the report's own folder."""
    root = Path(root)
    out = StudyResults(root)
    skip = set(exclude)
    for nb in sorted(p for p in root.iterdir() if p.is_dir() and (p / "summary.json").exists() and p.name not in skip):
        out.summaries[nb.name] = read_summary(nb)
    # A notebook's grids may sit one level down (21's upper-bound KG, 27's base and +DPO models);
    # a notebook with a single run (00) keeps it in `run/`.
    found = (set(root.glob("*/runs/**/manifest.json")) | set(root.glob("*/*/runs/**/manifest.json"))
             | set(root.glob("*/run/manifest.json")))
    for man in sorted(found):
        rec = read_run(man.parent)
        if rec is not None:
            rec["notebook"] = man.relative_to(root).parts[0]
            out.runs.append(rec)
    return out


def unique_runs(runs: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per distinct run (several notebooks rerun the same method on the same sample)."""
    df = pd.DataFrame(list(runs))
    if df.empty:
        return df
    key = ["method", "dataset", "model", "seed", "kg", "rounds", "hops", "top_k", "qids"]
    return df.drop_duplicates(subset=[k for k in key if k in df.columns]).reset_index(drop=True)


def cross_method_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Every distinct run, one block per (dataset, sample, model): the answer scores and the LLM
    cost per question. Blocks differ in sample, corpus and KG; the like-for-like table of every
    method on one sample is notebook 50's (`report.cross_method`)."""
    if runs.empty:
        return runs
    cols = ["dataset", "n", "seed", "model", "method", "kg", "rounds", "hops", "top_k", *RUN_SCORES,
            "failed", "questions_with_issues", *[f"{k}_per_q" for k in COST_KEYS]]
    df = runs[[c for c in cols if c in runs.columns]].copy()
    df = df.dropna(axis=1, how="all")
    return df.sort_values([c for c in ("dataset", "n", "seed", "model", "method") if c in df.columns]).reset_index(drop=True)


MODEL_HOURS = "model hours (LLM cache)"


def built_requests(summaries: Mapping[str, Iterable[Mapping[str, Any]]], by_dataset: bool = False) -> dict[Any, set[str]]:
    """Per notebook (`by_dataset`: per (notebook, dataset)), the request ids of the LLM-built KGs its
    summary rows describe (a KG row's `requests`: its extraction's requests, which no run makes: a KG
    is built before the answers)."""
    out: dict[Any, set[str]] = {}
    for nb, rows in summaries.items():
        for r in rows:
            if "claim" not in r and isinstance(r.get("requests"), list):
                out.setdefault((nb, r.get("dataset")) if by_dataset else nb, set()).update(str(k) for k in r["requests"])
    return out


def cost_by_notebook(runs: pd.DataFrame, request_seconds: dict[str, float] | None = None,
                     built: Mapping[str, set[str]] | None = None) -> pd.DataFrame:
    """Hours the machine spent answering the questions of each notebook's distinct runs
    (per-question seconds of the run that wrote them; a resume or a cache hit adds nothing, so an
    answer replayed after a fresh checkout counts about 0). With `request_seconds` (a request id's
    seconds when generated, `cache_request_seconds`): `MODEL_HOURS`, the model time of the distinct
    requests each notebook's runs made, and of its LLM-built KGs' extraction (`built`, from
    `built_requests`), each counted in the first notebook (in name order) that made it, however often
    it was replayed since; missing where no run of the notebook records its requests."""
    if runs.empty:
        return runs
    g = runs.groupby("notebook")["answer_seconds_total"].sum() / 3600
    out = pd.DataFrame({"answering wall hours": g.round(2), "core-hours (2 cores)": (2 * g).round(2),
                        "runs": runs.groupby("notebook").size()})
    built = built or {}
    if request_seconds and "requests" in runs:
        seen: set[str] = set()
        hours: dict[str, float | None] = {}
        for nb, grp in runs.groupby("notebook", sort=True):
            ids = {k for reqs in grp["requests"] if isinstance(reqs, tuple) for k in reqs} | built.get(nb, set())
            recorded = any(isinstance(reqs, tuple) for reqs in grp["requests"])
            new = ids - seen
            seen |= ids
            hours[nb] = round(sum(request_seconds.get(k, 0.0) for k in new) / 3600, 2) if recorded else None
        out[MODEL_HOURS] = pd.Series(hours, dtype=object)
    return out


LONG_ANSWER_S = 600   # an answer the cache says took longer: a run paused mid-answer, or one beside another job


def cache_model_time(folder: str | Path) -> dict[str, Any] | None:
    """What the committed LLM cache of a published folder (`<folder>/llm-cache/part-*.jsonl.gz`) says the
    model spent: every answer once, at the seconds it took when generated. The cost table counts the
    seconds of the run that wrote each question, so an answer that run replayed from the cache (after a
    fresh checkout, or a run re-made) adds ~0 there: the table is a lower bound of the model time, this an
    upper one (it holds answers of runs replaced since, and answers slowed by a pause). None without parts."""
    entries = cache_entries(folder)
    if entries is None:
        return None
    seconds = [e.seconds for e in entries]
    return {"answers": len(seconds), "hours": sum(seconds) / 3600, "long": sum(s > LONG_ANSWER_S for s in seconds)}


def cache_request_seconds(folder: str | Path) -> dict[str, float] | None:
    """Request id (a cache key's first 16 hex digits, as runs record `requests`) -> the seconds its
    answer took when generated, from the folder's committed LLM cache; None without parts."""
    entries = cache_entries(folder)
    if entries is None:
        return None
    out: dict[str, float] = {}
    for e in entries:
        out.setdefault(e.key[:16], e.seconds)
    return out


class CacheEntry(NamedTuple):
    """One committed answer as the reports read it: its key, the seconds it took when generated, the
    model identity that made it and its tokens (the plan fits a model's throughput from them)."""

    key: str
    seconds: float
    identity: str
    prompt_tokens: int
    completion_tokens: int


def cache_entries(folder: str | Path) -> tuple[CacheEntry, ...] | None:
    """Every answer in the folder's cache parts (None without parts). The REPORT and a findings render
    ask several times (the cost table, its paragraph, each notebook's cost); the parts are read once
    while they stay as they are (name, size and mtime of each)."""
    parts = sorted((Path(folder) / "llm-cache").glob("part-*.jsonl.gz"))
    if not parts:
        return None
    return _read_parts(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in parts))


@lru_cache(maxsize=4)
def _read_parts(parts: tuple[tuple[str, int, int], ...]) -> tuple[CacheEntry, ...]:
    import gzip

    out = []
    for part, _, _ in parts:
        with gzip.open(part, "rt", encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    rec = json.loads(line)
                    out.append(CacheEntry(str(rec.get("key") or ""), float(rec.get("seconds") or 0.0),
                                          str(rec.get("identity") or ""), int(rec.get("prompt_tokens") or 0),
                                          int(rec.get("completion_tokens") or 0)))
    return tuple(out)


def format_p(v: Any) -> str | None:
    """p as text with four decimals, so a p at the 0.05 threshold reads on the side its verdict
    took (the report's tables print floats with one decimal; summary.json keeps the float)."""
    if v is None or pd.isna(v):
        return None
    return "<0.0001" if float(v) < 0.0001 else f"{float(v):.4f}"


def claims_table(claims: pd.DataFrame) -> pd.DataFrame:
    if claims.empty:
        return claims
    cols = ["paper", "table", "claim", "dataset", "statement", "metric", "n_pairs", "ours_a", "ours_b", "diff", "ci95",
            "p_value", "p_equiv", "p_holm", "verdict", "statistical verdict", "unadjusted verdict", "mechanism",
            *EQUIVALENCE_DETAIL]
    df = claims[[c for c in cols if c in claims.columns]].copy()
    for c in ("ours_a", "ours_b", "diff"):
        if c in df:
            df[c] = df[c].map(lambda v: None if v is None or pd.isna(v) else round(float(v), 1))
    return df


SECONDARY_METRICS = ("hit1_exact", "f1")   # claims also tested on another metric, listed apart
EQUIVALENCE_DETAIL = ("sd_diff", "margin", "test", BEFORE_TOST)   # kept for the `~` claims' table, not the claims table


def equivalence_table(claims: pd.DataFrame) -> pd.DataFrame:
    """Every `~` claim that ran, under both rules (`claims.EQUIVALENCE_CHANGE`): its difference,
    the spread of the per-question difference, the margin, the TOST p, the verdict of the rule
    before TOST and today's verdict, and the n at which TOST would confirm it with 80% power if
    the true difference were the one seen (`eval.power.n_for_equivalence`)."""
    if claims.empty or BEFORE_TOST not in claims:
        return pd.DataFrame()
    rows = claims[claims[BEFORE_TOST].map(lambda v: isinstance(v, str))]
    recs = []
    for r in rows.to_dict("records"):
        sd, diff, margin = (pd.to_numeric(pd.Series([r.get(k)]), errors="coerce").iloc[0]
                            for k in ("sd_diff", "diff", "margin"))
        n_needed = (n_for_equivalence(float(margin), float(sd), diff=float(diff),
                                      binary=str(r.get("test", "")).startswith("mcnemar"))
                    if pd.notna(sd) and sd > 0 and pd.notna(diff) and pd.notna(margin) else None)
        recs.append({"claim": r["claim"], "dataset": r["dataset"], "metric": r.get("metric"),
                     "n_pairs": r.get("n_pairs"), "diff": r.get("diff"), "sd_diff": sd, "margin": margin,
                     "p_value": r.get("p_value"), "p_equiv": r.get("p_equiv"), "p_holm": r.get("p_holm"),
                     BEFORE_TOST: r[BEFORE_TOST], "verdict (TOST)": str(r["verdict"]).split("; ")[0],
                     "n for TOST at 80% power": "never (|diff| >= margin)" if n_needed is None and pd.notna(sd)
                     and pd.notna(diff) and pd.notna(margin) and abs(diff) >= margin else n_needed})
    return pd.DataFrame(recs)


def verdict_counts(claims: pd.DataFrame) -> pd.DataFrame:
    """Claims per table and verdict (primary metrics only)."""
    if claims.empty:
        return claims
    main = claims[~claims["metric"].isin(SECONDARY_METRICS)] if "metric" in claims else claims
    main = main.assign(verdict=main["verdict"].astype(str).str.split("; ").str[0])   # without reading notes
    counts = main.groupby(["table", "verdict"]).size().unstack(fill_value=0)
    counts.columns.name = None
    return counts.reset_index()


def _md(df: pd.DataFrame, digits: int = 1) -> str:
    for col in df.columns:   # "p_holm (Monte Carlo p)" too
        if str(col).split(" ")[0] in ("p_value", "p_equiv", "p_holm"):
            df = df.assign(**{col: df[col].map(format_p)})
    return to_markdown(df, digits=digits) if not df.empty else "(none)"




def claim_papers(claims: pd.DataFrame, runs: pd.DataFrame) -> pd.Series:
    """The paper each claim belongs to (its Holm family), read from the methods its notebook ran
    (`MethodSpec.family` -> the paper's name); a notebook whose runs span papers, or that has none,
    is a family of its own, named after it."""
    specs = available_methods()
    papers: dict[str, set[str]] = {}
    if not runs.empty and {"notebook", "method"} <= set(runs.columns):
        for nb, method in zip(runs["notebook"], runs["method"]):
            spec = specs.get(str(method))
            papers.setdefault(str(nb), set()).add(cross_method.paper_of(spec.family) if spec else str(method))
    return claims["notebook"].map(lambda nb: next(iter(papers[nb])) if len(papers.get(nb, ())) == 1 else str(nb))


def exact_flip_changes(res: StudyResults, claims: pd.DataFrame, readings: pd.DataFrame | None = None
                       ) -> tuple[int, pd.DataFrame]:
    """(claims re-tested with the exact sign-flip p, the verdicts that differ from the Monte Carlo p's):
    the claims table assessed again with each re-tested claim's stored `BEFORE_EXACT_FLIP` p and
    verdict (`claims.EXACT_FLIP_CHANGE`), Holm included, beside today's."""
    before = {nb: [{**r, **r[BEFORE_EXACT_FLIP]} if isinstance(r.get(BEFORE_EXACT_FLIP), dict) else r for r in rows]
              for nb, rows in res.summaries.items()}
    n = sum(isinstance(r.get(BEFORE_EXACT_FLIP), dict) for rows in res.summaries.values() for r in rows)
    if not n or claims.empty:
        return n, pd.DataFrame()
    old = assessed_claims(StudyResults(res.root, before, res.runs), readings)
    key = ["claim", "dataset", "metric"]
    both = claims.merge(old[key + ["p_value", "p_holm", "verdict"]], on=key, suffixes=("", " (Monte Carlo p)"))
    moved = both[both["verdict"] != both["verdict (Monte Carlo p)"]]
    cols = [multiplicity.PAPER, *key, "p_value (Monte Carlo p)", "p_holm (Monte Carlo p)", "verdict (Monte Carlo p)",
            "p_value", "p_holm", "verdict"]
    return n, moved[[c for c in cols if c in moved.columns]].reset_index(drop=True)


def assessed_claims(res: StudyResults, readings: pd.DataFrame | None = None) -> pd.DataFrame:
    """The claims table as REPORT prints it: Holm-adjusted p (one family per paper) and verdicts,
    testability from each claim's own sides and mechanism health, and MetaQA's reading flips beside
    the verdict (findings read it too). `readings`: `readings_table` of the study's runs, when the
    caller has it already (it reads every MetaQA question file)."""
    every_run = pd.DataFrame(res.runs)
    claims = re_decide_silent(res.claims)
    claims = re_decide_equivalence(claims, retested_claims(every_run))
    if not claims.empty and "notebook" in claims:
        claims = claims.assign(paper=claim_papers(claims, every_run))
    claims = claims_table(apply_testability(multiplicity.adjust(claims, SECONDARY_METRICS), every_run,
                                            health_table(every_run)))
    notes = flip_notes(readings_table(every_run) if readings is None else readings)
    if notes and not claims.empty:
        claims["verdict"] = [f"{v}; {notes[c]}" if c in notes and m == "hit1" else v
                             for c, m, v in zip(claims["claim"], claims["metric"], claims["verdict"])]
    return claims


def report_markdown(res: StudyResults, profile: str, deviations: Iterable[str] = (), extra: str = "",
                    findings: str = "") -> str:
    """REPORT.md: the `findings` (markdown rendered from the published results, placed first), then every method on the
    same questions (notebook 50's table, when it ran: `report.cross_method`), the claims and their
    verdicts, every distinct run, what every table cost, each notebook's tables, and every
    deviation from the papers in one list."""
    runs = unique_runs(res.runs)
    every_run = pd.DataFrame(res.runs)
    health = health_table(runs)
    readings = readings_table(every_run)
    claims = assessed_claims(res, readings)
    commit = git_commit()
    models = sorted({str(m) for m in runs.get("model", pd.Series(dtype=str)).dropna()})
    hours = float(runs["answer_seconds_total"].sum()) / 3600 if not runs.empty else 0.0
    parts = [f"# kgrag study report ({profile})", "",
             f"Made {time.strftime('%Y-%m-%d %H:%M')} from `{shown_path(res.root)}` at commit "
             f"`{(commit.get('commit') or 'unknown')[:12]}`{' (dirty tree)' if commit.get('dirty') else ''}. "
             f"Models: {', '.join(models) or 'none'}. {len(runs)} distinct runs; answering them took "
             f"{hours:.2f} wall hours on this machine ({2 * hours:.2f} core-hours on 2 cores).", ""]
    if extra:
        parts += [extra, ""]
    if findings:
        parts += [findings, ""]
    # the like-for-like table (notebook 50) comes first, when the study ran it
    parts += cross_method.report_section(res.summaries, _md)
    if not runs.empty and "dataset" in runs:
        twowiki = runs[runs["dataset"] == "2wiki"]
        bare = twowiki[twowiki.get("answer_aliases", pd.Series(index=twowiki.index, dtype=object)).isna()]
        if not bare.empty:
            parts += [f"**2Wiki scores without aliases (lower bound):** {len(bare)} of the {len(twowiki)} 2Wiki runs "
                      "were scored against the answer each question file gives, without the official id aliases "
                      "(id_aliases.json, not in the data here), so their EM/F1 are lower bounds of the official "
                      "scorer's (see the deviations).", ""]
    parts += ["## The papers' claims, tested", "",
              "Each claim: both sides on the same questions; **confirmed** / **refuted** at p < 0.05 (McNemar's "
              "exact test on 0/1 scores, else a paired sign-flip permutation test), otherwise **not separable at this n**; `~` "
              "claims are confirmed by two one-sided tests (TOST, `p_equiv`) of the paired difference within ±5 points "
              "(or the margin a paper states) and refuted by a significant difference whose interval lies wholly "
              "outside them (see below); where no "
              "question scores on either side (0 vs 0) "
              "the metric tests nothing and the claim reads **not testable on this metric**. `diff` and `ci95` are "
              "A − B in points. "
              "**Multiplicity**: the verdict is read from `p_holm`, the Holm-adjusted decisive p (`p_equiv` for a `~` "
              f"claim TOST decides, else `p_value`) over one family, {multiplicity.FAMILY_TEXT} "
              f"({multiplicity.family_text(claims)}); `unadjusted verdict` is what the claim's own p said, as the "
              "notebooks print it. The claims on a second metric are exploratory: unadjusted, they confirm nothing. "
              "A claim whose KG holds no fact of its dataset, or none of its questions' own (a held-out KG), reads "
              "**not testable with the data here**; one whose "
              "mechanism ran for fewer than half its questions **not testable at this model (mechanism ran for x "
              "of n)**; `statistical verdict` keeps what the paired test alone said, `mechanism` the health of the "
              f"mechanism the claim is about (`kgrag_lib.report.mechanism`). **The verdict rule for a KG**: {KG_VERDICT_RULE}", "",
              _md(verdict_counts(claims), 0) if not claims.empty else "(no claims were tested)", ""]
    changed = multiplicity.changed_by_adjustment(claims)
    if not changed.empty:
        parts += ["Verdicts the adjustment changed:", "", _md(changed), ""]
    n_exact, moved = exact_flip_changes(res, claims, readings)
    if n_exact:
        parts += ["### The sign-flip p made exact", "", EXACT_FLIP_CHANGE + f" Comparisons re-tested: {n_exact}; verdicts "
                  f"moved: {len(moved)}.", ""]
        if len(moved):
            parts += [_md(moved), ""]
    equivalence = equivalence_table(claims)
    if not equivalence.empty:
        parts += ["### `~` claims: the equivalence rule before and after TOST", "", EQUIVALENCE_CHANGE + " `sd_diff` is "
                  "the standard deviation of the per-question difference (points); `n for TOST at 80% power` the "
                  "questions TOST would need to confirm the claim if the true difference were the one seen.", "",
                  _md(equivalence), ""]
    outcomes, idle = account(claims, profile, SECONDARY_METRICS)
    parts += ["### Every claim of the four papers", "",
              f"**{registered_count()} claims are registered** across the four papers. Each paper's registered claims "
              "(`report.<paper>.paper_numbers`: the tables' and figures' claims, KG-Infused RAG's "
              "plug-in, StrategyQA and DPO claims), by their outcome here on the primary metric; a claim with no row "
              "above counts as not run.", "", _md(outcomes, 0), "",
              "Why the claims not run were not run:", "", _md(idle, 0) if not idle.empty else "(every claim ran)", ""]
    if not claims.empty:
        secondary = claims["metric"].isin(SECONDARY_METRICS) if "metric" in claims else claims["claim"].isna()
        shown = claims.drop(columns=[c for c in EQUIVALENCE_DETAIL if c in claims])
        parts += [_md(shown[~secondary]), "",
                  "The same claims on a second metric, exploratory (unadjusted p; MetaQA: Hit@1 exact, §4.2.1 read "
                  "literally; SA-RAG and TCR-QF: F1):", "", _md(shown[secondary]), ""]
    parts += readings_section(readings, _md, format_p)
    main_model = runs["model"].dropna().astype(str).value_counts() if not runs.empty and "model" in runs else pd.Series(dtype=int)
    parts += preregistration.report_section(res.root, claims, runs, str(main_model.index[0]) if len(main_model) else "no model",
                                            _md, cache_request_seconds(res.root), built_requests(res.summaries, by_dataset=True))
    parts += ["## Mechanism health", "",
              "Did the part of each method a claim is about run? Per run: the signal and for how many of its "
              f"questions it held. \"{NOT_RECORDED}\": the published per-question files of that run lack the "
              "field (runs made since record it as `mechanism` in questions.jsonl).", "",
              _md(health.drop(columns=[c for c in ("notebook",) if c in health]).drop_duplicates()
                  if not health.empty else health), "",
              "The LLM-built KGs (SA-RAG's index, notebook 30; TCR-QF's text KG, notebook 40):", "", _md(sa_rag_index_health(res.summaries)), "",
              "LLM judges and their controls (a judge that accepts other questions' answers tests nothing):", "",
              _md(judge_health(res.summaries)), ""]
    parts += ["## Every distinct run", "",
              "One row per distinct run of every notebook, in blocks of (dataset, sample, model): runs of different "
              "samples, corpora and KGs, so compare rows within a block only (the table of every method on the "
              "same questions, corpus and model is notebook 50's, first in this report when it ran). Scores in "
              "percent; cost per question counts every LLM request, cached or not, and the seconds it took when "
              "first computed.", "", _md(cross_method_table(runs)), ""]
    parts += ["## What each notebook's runs cost", "",
              _md(cost_by_notebook(runs, cache_request_seconds(res.root), built_requests(res.summaries))
                  .rename_axis("notebook").reset_index(), 2), ""]
    paid = cache_model_time(res.root)
    if paid:
        parts += [f"`answering wall hours` counts each question's seconds in the run that wrote it, so an answer that run "
                  f"replayed from the LLM cache (after a fresh checkout, or a run re-made) adds about 0: a lower bound of "
                  f"the model time. `{MODEL_HOURS}` counts the seconds each distinct request's answer took when generated "
                  f"(the committed cache keeps them), in the first notebook that made it, with the extraction of an LLM-built KG whose "
                  f"summary row records its requests; it is missing for runs whose "
                  f"published rows do not record their requests (published before 2026-12-07). The committed LLM cache (`llm-cache/`) records {paid['hours']:.2f} wall hours "
                  f"({2 * paid['hours']:.2f} core-hours on 2 cores) for its {paid['answers']:,} answers, each once at the "
                  f"seconds it took when generated: an upper bound, as it also holds answers of runs replaced since, and "
                  f"{paid['long']} answers over {LONG_ANSWER_S} s (a run paused mid-answer, or beside another job).", ""]
    parts += ["## Each notebook's results", ""]
    for nb, rows in res.summaries.items():
        kinds: dict[tuple, list[dict[str, Any]]] = {}
        shown_first = [r for r in rows if r.get("table") in cross_method.TABLES]
        for r in rows:
            if "claim" not in r and r not in shown_first:
                kinds.setdefault(tuple(r), []).append(r)
        parts += [f"### {nb}", ""]
        if shown_first:
            parts += ["Every method on the same questions: the report's first table.", ""]
        for group in kinds.values():   # a KG row's request ids price it (`built_requests`); they are no table cell
            parts += [_md(pd.DataFrame(group).drop(columns="requests", errors="ignore").dropna(axis=1, how="all")), ""]
    every = [*DEVIATIONS_COMMON, *setup_deviations(runs), *paper_deviations(), *deviations]
    parts += ["## Deviations from the papers", ""] + [f"- {d}" for d in every] + [""]
    return "\n".join(parts)


def write_report(res: StudyResults, dest: str | Path, profile: str, deviations: Iterable[str] = (),
                 extra: str = "", findings: str = "") -> tuple[Path, Path]:
    """REPORT.md and REPORT.html in `dest`."""
    import markdown

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    text = redact(report_markdown(res, profile, deviations, extra, findings))   # runs may name a server's URL
    md_path, html_path = dest / "REPORT.md", dest / "REPORT.html"
    md_path.write_text(text, encoding="utf-8")
    body = markdown.markdown(text, extensions=["tables", "fenced_code"])
    html_path.write_text(f"<!doctype html><meta charset='utf-8'><title>kgrag report ({profile})</title>"
                         f"<style>body{{font-family:sans-serif;max-width:1200px;margin:auto}}table{{border-collapse:"
                         f"collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:2px 5px}}</style>{body}",
                         encoding="utf-8")
    return md_path, html_path


def compact_rows(run_folder: Path, metrics: Iterable[str] = RUN_SCORES) -> list[dict[str, Any]]:
    """A run's questions without traces: qid, dataset, prediction, golds, per-question scores, cost;
    and, where the run records them, `retrieved` (the passage ids its trace retrieved, in rank order)
    and `gold_ids` (the question's gold supporting passages, which the runner records), so Recall@k
    (KG-Infused RAG's Table 4) recomputes from the published rows (issue 56)."""
    from .kg_infused.tables import retrieved_ids

    rows = read_predictions(run_folder / PRED_FILE)
    items = score_items(rows, tuple(metrics))
    keep = ("qid", "dataset", "prediction", "answers", "failed", "error", "cost", "requests")
    out = []
    for i, r in enumerate(rows):
        trace = r.get("trace") or {}
        rec = {**{k: r.get(k) for k in keep if k != "requests" or r.get(k) is not None}, "issues": trace.get("issues") or [],
               **{m: items[m][i] for m in items}}
        mech = mechanism_record(trace, r.get("question"), r.get("answers"))
        if mech:
            rec["mechanism"] = mech
        got = retrieved_ids(trace)
        if got:
            rec["retrieved"] = got
        if r.get("gold_ids"):
            rec["gold_ids"] = [str(g) for g in r["gold_ids"]]
        out.append(rec)
    return out


def compare_runs(folder_a: str | Path, folder_b: str | Path, metric: str) -> dict[str, Any]:
    """Two runs of the same questions (e.g. two models): `metric` per question paired (A − B,
    points) and what a question cost each (seconds when answered, LLM calls), so a choice can
    weigh quality against CPU time. `metric` may be "avg" (mean of Acc, F1, EM)."""
    def values(folder: Path) -> tuple[dict[str, float], float, float]:
        rows = read_predictions(Path(folder) / PRED_FILE)
        names = ("acc", "f1", "em") if metric == "avg" else (metric,)
        vals = {r["qid"]: sum(get_metric(m)(r) or 0.0 for m in names) / len(names) for r in rows}
        secs = sum(float((r.get("cost") or {}).get("seconds", 0.0)) for r in rows) / max(len(rows), 1)
        calls = sum(float((r.get("cost") or {}).get("llm_requests", 0.0)) for r in rows) / max(len(rows), 1)
        return vals, secs, calls

    va, sa, ca = values(Path(folder_a))
    vb, sb, cb = values(Path(folder_b))
    both = [q for q in va if q in vb]
    r = paired_test([va[q] for q in both], [vb[q] for q in both])
    return {"metric": metric, "n": r.n, "a": round(r.mean_a, 1), "b": round(r.mean_b, 1), "diff": round(r.diff, 1),
            "ci95": [round(v, 1) for v in r.ci95], "p_value": r.p_value, "test": r.test,
            "seconds_per_q_a": round(sa, 1), "seconds_per_q_b": round(sb, 1),
            "requests_per_q_a": round(ca, 2), "requests_per_q_b": round(cb, 2),
            "correct_per_cpu_hour_a": round(3600 * r.mean_a / 100 / max(sa, 1e-9), 1),
            "correct_per_cpu_hour_b": round(3600 * r.mean_b / 100 / max(sb, 1e-9), 1)}
