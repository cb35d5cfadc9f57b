"""The claims plan (issue 56, deliverable 1): for every registered claim of the four papers, its
verdict, or what blocks one and what it would take, fixed before the runs it names.

    python -m kgrag_lib.report.plan [--freeze DIR] [--results FOLDER ...]

It reads the committed reports only (each results folder's notebook summaries and run files, as
REPORT reads them: `study.collect`, `study.assessed_claims`), with no model call, and writes:

- per claim: its verdict (confirmed or refuted at any model), else its **blocker**, the first that
  applies of `n` (ran, not separable at this n), `data` (no KG or corpus holds its facts, or its
  KG is the held-out 2Wiki KG), `model` (the model could not run the mechanism: SA-RAG's judge
  failed its controls, TCR-QF's answer line does not parse, Self-RAG's own 7B, DPO at 7-8B; or no
  question scores on either side), `not run` (never run here), with the evidence;
- per claim whose blocker is the model, or that a run at the planned model would need a mechanism
  for: what the committed mechanism probes (`results/mechanism-probe/`, `read_probes`) say of
  that mechanism at the planned model: a **known remedy** (the probe saw it run there: TCR-QF's
  answer line, KG-Infused RAG's subgraph at 1.5B), **not a remedy** (the probe saw it fail
  there: the 1.5B correctness judge, so SA-RAG's judged `correct` claims stay `model`, unplanned,
  with the probe as evidence; a never-run claim that needs it is `model` too), or **untested** at
  the planned model (planned, and said so);
- for a claim blocked by n, never run, or blocked at a model other than the planned one (a
  remedy the CPU can try, unless a probe shows it is none): the n at which the paired effect
  seen so far reaches 80 % power at alpha / m (`eval.power`; m = the claims of that paper that
  can enter its Holm family: those a paired test decided in some committed report, plus those
  this plan would run; alpha / m is the Bonferroni bound on Holm's first step, so the n is
  conservative), with the effect from the claim's own run, else the same claim on the nearest
  dataset or model, else the paper's printed difference (the source is named); n is capped at
  the questions the dataset's split holds;
- run units (notebook x dataset x model x KG), each at the largest n its claims need (capped), its
  expected verdicts (the sum of its claims' power at that n) and its core-hours at the committed
  per-question LLM seconds of the planned model, ranked by expected verdicts per core-hour; only
  planned claims (those the plan expects a run to decide) count towards a unit's expected verdicts.

`--freeze DIR` writes `DIR/<date>.json` and `.md` with the commit of the code that made it; REPORT
shows the newest frozen plan beside the outcomes (`report.preregistration`), so no claim's n is
chosen after its result is seen.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..eval.paired import CONFIRMED, EQUIVALENCE_MARGIN, NO_SIGNAL, NOT_SEPARABLE, REFUTED
from ..eval.power import (n_for_equivalence, n_for_power, n_for_power_discordant, power_discordant, power_equivalence,
                          power_paired)
from ..errors import ConfigError
from ..kg.sources import FULL_KG
from ..provenance import git_commit
from .accounting import PAPER_NAMES, REFERENCE_REASONS
from .claims import JUDGE_UNINFORMATIVE
from .kg_infused import paper_numbers as kgi
from .mechanism import NOT_TESTABLE_DATA, NOT_TESTABLE_MODEL, ran_too_rarely, run_health, signal_of
from .metaqa import paper_numbers as mq
from .sa_rag import paper_numbers as sar
from .tables import to_markdown
from .tcr_qf import paper_numbers as tcr

VERDICT, N, DATA, MODEL, NOT_RUN = "verdict", "n", "data", "model", "not run"
BLOCKERS = (N, DATA, MODEL, NOT_RUN)
# Across models a claim takes the first status that any model's report gives it, in this order: a
# run that was testable but not separable says more than a blocked one, and a KG without the
# facts blocks whatever the model.
PRIORITY = (VERDICT, N, DATA, MODEL, NOT_RUN)
BINARY_METRICS = ("hit1", "hit1_exact", "em", "acc", "correct")
SECONDARY_METRICS = ("hit1_exact", "f1")
DEFAULT_RESULTS = ("results/reference", "results/reference-1.5b")
DEFAULT_PROBES = "results/mechanism-probe"

# Questions each split holds (the data manifests, `data/manifests/datasets.yaml`): the cap of a
# planned n. MetaQA: the vanilla test files; 2Wiki dev200 is the file with paragraphs (164 of 200
# carry them), corpus354 the KG-Infused sample.
SPLIT_QUESTIONS: dict[tuple[str, str], int] = {
    ("metaqa-1hop", "test"): 9947, ("metaqa-2hop", "test"): 14872, ("metaqa-3hop", "test"): 14274,
    ("hotpotqa", "distractor500"): 500, ("hotpotqa", "dev100"): 100,
    ("2wiki", "corpus354"): 354, ("2wiki", "dev200"): 200, ("2wiki", "dev4000"): 4000,
    ("musique", "dev200"): 200, ("bamboogle", "test"): 125, ("strategyqa", "train"): 2290,
}
DEFAULT_SPLIT = {"metaqa-1hop": "test", "metaqa-2hop": "test", "metaqa-3hop": "test", "hotpotqa": "distractor500",
                 "2wiki": "corpus354", "musique": "dev200", "bamboogle": "test", "strategyqa": "train"}
# SA-RAG and TCR-QF draw 2Wiki from the file with paragraphs (their corpus is the pooled paragraphs).
PAPER_SPLIT = {("sa_rag", "2wiki"): "dev200", ("tcr_qf", "2wiki"): "dev200"}
# Paragraphs each question brings to a pooled corpus (HotpotQA distractor and 2Wiki: 10, MuSiQue: 20):
# what an LLM-built KG of a new dataset costs per question, from the committed build's seconds per passage.
PARAGRAPHS_PER_QUESTION = {"2wiki": 10, "hotpotqa": 10, "musique": 20}
# The notebook that builds the LLM-built KG a paper's runs search (its summary row records the build's seconds).
KG_BUILD_NOTEBOOK = {"sa_rag": "30_sa_rag_indexing", "tcr_qf": "40_tcr_qf_kg_construction"}
# A registered claim not run anywhere goes to the notebook that runs its table.
TABLE_NOTEBOOK = {("metaqa", "exp1"): "11_metaqa_parameter_grid", ("metaqa", "exp2"): "12_metaqa_baselines",
                  ("kg_infused", "t1"): "21_kg_infused_main", ("kg_infused", "t3"): "22_kg_infused_ablation",
                  ("kg_infused", "f2"): "23_activation_rounds", ("kg_infused", "t4"): "24_retrieval_recall",
                  ("kg_infused", "table2"): "28_plugins", ("kg_infused", "table21"): "28_plugins",
                  ("sa_rag", "c1"): "31_sa_rag_main", ("sa_rag", "c2"): "31_sa_rag_main",
                  ("sa_rag", "c3"): "31_sa_rag_main", ("sa_rag", "c4"): "31_sa_rag_main",
                  ("tcr_qf", "c1"): "41_tcr_qf_main", ("tcr_qf", "c5"): "42_tcr_qf_ablation",
                  ("tcr_qf", "c6"): "42_tcr_qf_ablation", ("kg_infused", "m1"): "21_kg_infused_main"}
ORACLE_KG, HELDOUT_KG = "2wiki-evidence-oracle", "2wiki-evidence-heldout"


@dataclass(frozen=True)
class PlanConfig:
    """What the plan reads and the targets it plans for."""

    results: tuple[str, ...] = field(default=DEFAULT_RESULTS, metadata={
        "help": "published results folders (one per model), each read as its REPORT reads it"})
    planned_model: str | None = field(default=None, metadata={
        "help": "the model the plan's runs use; default: the main model of the last results folder"})
    alpha: float = field(default=0.05, metadata={"help": "family-wise level; each claim is planned at alpha / m"})
    power: float = field(default=0.8, metadata={"help": "the power a claim's planned n reaches"})
    cores: int = field(default=2, metadata={"help": "cores the llama.cpp runs use: core-hours = cores x wall hours"})
    probes: str | None = field(default=DEFAULT_PROBES, metadata={
        "help": "folder of the committed mechanism probes (judge/, answer/, run folders) that say whether the "
                "planned model runs a mechanism a smaller model failed; None: no probe read (every such "
                "remedy is untested)"})

    full_kg_notebooks: tuple[str, ...] = field(default=("21_kg_infused_main",), metadata={
        "help": f"notebooks the reference profiles now run on {FULL_KG} (issue 56; profiles/cpu-reference.yaml, "
                "`kg:`): their KG-Infused 2Wiki claims, not testable on the held-out KG, are planned there"})

    def __post_init__(self) -> None:
        if not self.results:
            raise ConfigError("results: expected at least one published results folder, e.g. results/reference")
        if not 0 < self.alpha < 1 or not 0 < self.power < 1:
            raise ConfigError(f"alpha={self.alpha!r}, power={self.power!r}: expected both in (0, 1)")
        if self.cores < 1:
            raise ConfigError(f"cores={self.cores!r}: expected a positive number of cores")


# ------------------------------------------------------------------ the registry


def registry() -> pd.DataFrame:
    """paper, claim, table, dataset, relation, sides (a, b) and primary metric of every registered claim."""
    rows = [{"paper": "metaqa", "claim": c.cid, "table": c.source, "dataset": c.dataset, "relation": c.relation,
             "a": c.a, "b": c.b, "metric": "hit1", "margin": getattr(c, "margin", None) or EQUIVALENCE_MARGIN}
            for c in mq.CLAIMS]
    for paper, claims in (("kg_infused", (*kgi.CLAIMS, *kgi.PLUGIN_CLAIMS, *kgi.UNTESTED_CLAIMS, *kgi.MECHANISM_CLAIMS)),
                          ("sa_rag", sar.CLAIMS), ("tcr_qf", tcr.CLAIMS)):
        rows += [{"paper": paper, "claim": c[0], "table": c[1], "dataset": c[2], "relation": c[4], "a": c[3],
                  "b": c[5], "metric": c[6],
                  "margin": c[8] if len(c) > 8 and isinstance(c[8], (int, float)) else EQUIVALENCE_MARGIN} for c in claims]
    return pd.DataFrame(rows)


def claim_key(claim: str, dataset: str) -> str:
    """The claim with its dataset taken out, so the same claim on another dataset shares it
    ("c1.tcr_qf_over_baselines.*.tog"; MetaQA's ids end in the hop count: "exp2.kg_helps_*")."""
    parts = str(claim).split(".")
    short = str(dataset).split("-")[-1]
    return ".".join("*" if p == dataset else (p[: -len(short)] + "*" if dataset.startswith("metaqa") and
                                              p.endswith("_" + short) else p) for p in parts)


# ------------------------------------------------------------------ the paper's printed differences

_SA_ROWS = {("naive-rag", 5): "Naive RAG", ("naive-rag", 10): "Naive RAG (k=10)", ("cot-rag", 5): "CoT RAG",
            ("cot-rag", 10): "CoT RAG (k=10)", ("qd-rag", None): "Query-decomposition", ("ppr-rag", None): "HippoRAG 2",
            ("sa-rag", None): "SA-RAG", ("sa-rag-cot", None): "SA-RAG + CoT", ("sa-rag-qd", None): "SA-RAG + decomposition"}
_KGI_T1 = {("kg-infused", 2): "KG-Infused RAG (w/ 2-Round)", ("vanilla-rag", None): "Vanilla RAG",
           ("vanilla-qe", None): "Vanilla QE", ("nor", None): "NoR", ("kg-infused+dpo", 2): "+DPO (w/ 2-Round)"}
_KGI_T3 = {("kg-qe-only", 2): "+ KG-Based QE (w/ 2-Round)", ("kg-aug-only", 2): "+ KG-Aug Gen (w/ 2-Round)",
           ("vanilla-rag", None): "Vanilla RAG (LLaMA3.1-8B)"}
_KGI_T4 = {("kg-qe-only", 1): "+ KG-Based QE (1-Round)", ("vanilla-rag", None): "Vanilla RAG"}


def paper_values(paper: str, claim: str, dataset: str, a: Any, b: Any, metric: str) -> tuple[float, float, str] | None:
    """(A, B, where) as the paper prints them for a claim, in percent, or None where the paper
    prints no number for it (MetaQA's figures, KG-Infused RAG's Figure 2)."""
    try:
        if paper == "sa_rag":
            t = sar.TABLE1["phi4"]
            return t[_SA_ROWS[tuple(a)]][dataset]["correct"], t[_SA_ROWS[tuple(b)]][dataset]["correct"], \
                "SA-RAG Table 1 (phi4, correctness)"
        if paper == "tcr_qf":
            if claim.startswith("c1."):
                t, rows, where = tcr.TABLE1, tcr.TABLE1_ROW, "TCR-QF Table 1 (EM)"
            else:
                t, rows, where = tcr.TABLE2, tcr.TABLE2_ROW, "TCR-QF Table 2 (EM)"
            return t[rows[a]][dataset]["em"], t[rows[b]][dataset]["em"], where
        if paper == "kg_infused":
            m = "acc" if dataset == "strategyqa" else "avg"
            prefix = claim.split(".")[0]
            if prefix == "t1":
                t = kgi.TABLE1["Qwen2.5-7B"]
                return t[_KGI_T1[tuple(a)]][dataset][m], t[_KGI_T1[tuple(b)]][dataset][m], "KG-Infused Table 1 (Qwen2.5-7B)"
            if prefix == "t3":
                t = kgi.TABLE3
                return t[_KGI_T3[tuple(a)]][dataset][m], t[_KGI_T3[tuple(b)]][dataset][m], "KG-Infused Table 3"
            if prefix == "t4":
                t = kgi.TABLE4
                return t[_KGI_T4[tuple(a)]][dataset], t[_KGI_T4[tuple(b)]][dataset], "KG-Infused Table 4 (R@6)"
            if prefix in ("table2", "table21"):
                t = kgi.TABLE2 if prefix == "table2" else kgi.TABLE21
                base = next(iter(t))
                label = f"+ KG-Infused RAG (w/ {a[1]}-Round)"
                return t[label][dataset][m], t[base][dataset][m], f"KG-Infused {prefix.replace('table', 'Table ')}"
    except (KeyError, TypeError, IndexError):
        return None
    return None


# ------------------------------------------------------------------ effects


@dataclass(frozen=True)
class Effect:
    """A paired effect to plan from: A − B in points, and either the discordant shares (0/1
    scores) or the sd of the per-question differences (points)."""

    delta: float
    source: str
    p_a: float | None = None
    p_b: float | None = None
    sd: float | None = None

    def n_needed(self, alpha: float, power: float) -> float:
        """Questions for `power` at `alpha`; inf when the effect is 0 (no n gives it power)."""
        try:
            if self.p_a is not None and self.p_b is not None:
                return float(n_for_power_discordant(self.p_a, self.p_b, alpha, power))
            if self.sd:
                return float(n_for_power(self.delta, self.sd, alpha, power))
        except ValueError:
            return math.inf
        return math.inf

    @property
    def sd_points(self) -> float | None:
        """The sd of the per-question difference in points (0/1 scores: from the discordant shares)."""
        if self.p_a is not None and self.p_b is not None:
            spread = self.p_a + self.p_b - (self.p_a - self.p_b) ** 2
            return 100 * math.sqrt(spread) if spread > 0 else None
        return self.sd or None

    def equivalence_n(self, margin: float, alpha: float, power: float) -> tuple[float, str]:
        """Questions a `~` claim needs at `alpha` with `power`, and what that n decides: TOST confirms
        |A - B| < margin when the effect seen is inside the margin (`eval.power.n_for_equivalence`);
        an effect at or beyond it can only be refuted, by an interval wholly outside the margin,
        planned as the power to tell |effect| - margin from 0. inf when neither can be planned."""
        sd = self.sd_points
        if not sd:
            return math.inf, "no spread of the per-question difference to plan from"
        binary = self.p_a is not None
        if abs(self.delta) < margin:
            n = n_for_equivalence(margin, sd, alpha, power, diff=self.delta, binary=binary)
            return (float(n) if n else math.inf), f"TOST at margin {margin:g} (confirms equivalence)"
        if abs(self.delta) == margin:
            return math.inf, f"the effect seen equals the margin {margin:g}: no n decides it"
        try:
            return float(n_for_power(abs(self.delta) - margin, sd, alpha, power)), \
                f"|effect| beyond the margin {margin:g}: n to refute (interval outside the margin)"
        except ValueError:
            return math.inf, "no n reaches the power"

    def equivalence_power(self, n: int, margin: float, alpha: float) -> float:
        sd = self.sd_points
        if not sd or n < 2:
            return 0.0
        if abs(self.delta) < margin:
            return power_equivalence(margin, sd, n, alpha, self.delta)
        return power_paired(abs(self.delta) - margin, sd, n, alpha) if abs(self.delta) > margin else 0.0

    def power_at(self, n: int, alpha: float) -> float:
        if self.p_a is not None and self.p_b is not None:
            return power_discordant(self.p_a, self.p_b, n, alpha)
        return power_paired(self.delta, self.sd or 0.0, n, alpha) if self.sd else alpha


def discordant_from_p(n: int, diff_points: float, p_value: float) -> tuple[int, int] | None:
    """(A only, B only) of a McNemar result, recovered from its n, difference and exact p: the
    p is binomial in the discordant count k for a fixed A-only minus B-only, and grows with k, so
    one k matches. None when the difference is 0 (every k gives p = 1)."""
    from scipy.stats import binomtest

    d = int(round(diff_points * n / 100))
    if d == 0 or n <= 0:
        return None
    best, gap = None, math.inf
    for k in range(abs(d), n + 1, 2):
        p = float(binomtest((k + d) // 2, k, 0.5).pvalue)
        if abs(p - p_value) < gap:
            best, gap = k, abs(p - p_value)
    return ((best + d) // 2, (best - d) // 2) if best is not None else None


def effect_from_row(row: dict[str, Any], source: str) -> Effect | None:
    """The effect a committed claim row shows: discordant shares recovered from McNemar's exact p
    (0/1 scores), else the sd of the differences from the bootstrap interval's width."""
    n = int(row.get("n_pairs") or 0)
    a, b = row.get("ours_a"), row.get("ours_b")
    if n <= 0 or a is None or b is None or pd.isna(a) or pd.isna(b):
        return None
    delta = float(a) - float(b)
    binary = str(row.get("test", "")).startswith("mcnemar") or row.get("metric") in BINARY_METRICS
    if delta == 0:
        return Effect(0.0, source)
    if binary and row.get("p_value") is not None and not pd.isna(row.get("p_value")):
        counts = discordant_from_p(n, delta, float(row["p_value"]))
        if counts:
            return Effect(delta, source, p_a=counts[0] / n, p_b=counts[1] / n)
    ci = row.get("ci95")
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and ci[1] is not None and float(ci[1]) > float(ci[0]):
        return Effect(delta, source, sd=(float(ci[1]) - float(ci[0])) / (2 * 1.959964) * math.sqrt(n))
    return None


def effect_from_paper(values: tuple[float, float, str]) -> Effect:
    """The paper's printed A and B as an effect: with no per-question data, the discordant shares
    of two independent 0/1 scores at those rates, pa(1 − pb) and pb(1 − pa), which overstates the
    discordance of two systems answering the same questions, so the n is an upper figure."""
    pa, pb = values[0] / 100, values[1] / 100
    return Effect(values[0] - values[1], f"the paper's printed difference ({values[2]})",
                  p_a=pa * (1 - pb), p_b=pb * (1 - pa))


# ------------------------------------------------------------------ mechanism probes

# The mechanisms a claim needs the model to run (issue 28's probes test them one at a time).
JUDGE = "the correctness judge (eval.judge)"
ANSWER_LINE = "TCR-QF's final-answer line"
KG_SUBGRAPH = "KG-Infused RAG's subgraph"
DECOMPOSITION = "KG-RAG's decomposition"
ACTIVATION = "SA-RAG's spreading activation"
# What the probes say of a mechanism at the planned model.
KNOWN_REMEDY, NOT_A_REMEDY, UNTESTED = "known remedy", "not a remedy", "untested at the planned model"
_PAPER_MECHANISM = {"tcr_qf": ANSWER_LINE, "kg_infused": KG_SUBGRAPH, "metaqa": DECOMPOSITION, "sa_rag": ACTIVATION}


def claim_mechanism(paper: str, metric: str) -> str:
    """The mechanism a run of the claim needs the model for: an LLM-judged metric (`correct`,
    SA-RAG Table 1's correctness) needs the judge, whatever the paper; otherwise the paper's own
    mechanism (SA-RAG's F1 needs no judge, only its activation)."""
    return JUDGE if metric == "correct" else _PAPER_MECHANISM.get(paper, "")


_SIGNAL_MECHANISM = {"final-answer": ANSWER_LINE, "kg-subgraph": KG_SUBGRAPH, "decomposition": DECOMPOSITION,
                     "activation": ACTIVATION}


def _method_mechanism(method: str) -> str:
    """The mechanism a method's runs probe, from its registered signal (`MethodSpec.mechanism`)."""
    return _SIGNAL_MECHANISM.get(signal_of(method), "")


@dataclass(frozen=True)
class ProbeFinding:
    """One probe's reading of one mechanism at one model: did it run (the mechanism-health rule,
    at least half the questions; for a judge, its controls passed), and the figures that say so."""

    mechanism: str
    model: str
    works: bool
    detail: str
    source: str


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable JSON file ({exc}); expected a mechanism probe's output "
                          "(scripts/judge_probe.py, scripts/answer_probe.py, a `kgrag run` folder)") from exc


def read_probes(folder: str | Path) -> list[ProbeFinding]:
    """The findings of the committed mechanism probes in `folder` (`results/mechanism-probe`):
    `judge/summary.json` (scripts/judge_probe.py: per judge model, informative or not),
    `answer/summary.json` (scripts/answer_probe.py: TCR-QF's answer read for x of n) and every
    run folder (`manifest.json` + `questions.jsonl`, read by `mechanism.run_health`). A missing
    part is no finding; a part that is there but unreadable is an error."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"probes: {folder} is not a folder; expected the mechanism probes' folder, e.g. "
                          f"{DEFAULT_PROBES}")
    found: list[ProbeFinding] = []
    judge = root / "judge" / "summary.json"
    if judge.is_file():
        by_model: dict[str, list[dict[str, Any]]] = {}
        for r in _read_json(judge).get("runs") or []:
            by_model.setdefault(str(r.get("model")), []).append(r)
        for model, rs in by_model.items():
            sums = [r.get("summary") or {} for r in rs]
            works = bool(sums) and all(bool(x.get("judge_informative")) for x in sums)
            detail = "; ".join(
                f"{r.get('run')}: other questions' answers accepted {float(x.get('control_wrong_accepted') or 0):.0f}%, "
                f"predictions sharing no word with a gold accepted {float(x.get('no_overlap_accepted') or 0):.0f}% of "
                f"{int(x.get('no_overlap_n') or 0)}, {'informative' if x.get('judge_informative') else 'uninformative'}"
                for r, x in zip(rs, sums))
            found.append(ProbeFinding(JUDGE, model, works, detail, str(judge)))
    answer = root / "answer" / "summary.json"
    if answer.is_file():
        for m in _read_json(answer).get("models") or []:
            x, n = int(m.get("read") or 0), int(m.get("questions") or 0)
            found.append(ProbeFinding(ANSWER_LINE, str(m.get("model")), n > 0 and not ran_too_rarely(x, n),
                                      f"answer read for {x} of {n} (the final reasoning request replayed)", str(answer)))
    for man_path in sorted(root.glob("*/manifest.json")):
        if not (man_path.parent / "questions.jsonl").is_file():
            continue
        run = ((_read_json(man_path).get("config") or {}).get("run") or {})
        mech = _method_mechanism(str(run.get("method")))
        if not mech:
            continue
        h = run_health({"method": run.get("method"), "dataset": run.get("dataset"), "model": run.get("model"),
                        "folder": str(man_path.parent)})
        if h.get("ran") is None or not h.get("n"):
            continue
        x, n = int(h["ran"]), int(h["n"])
        found.append(ProbeFinding(mech, str(run.get("model")), not ran_too_rarely(x, n),
                                  f"{run.get('method')} on {run.get('dataset')}: {h.get('signal')} {x} of {n}",
                                  str(man_path.parent)))
    return found


def remedy(mechanism: str, model: str, probes: Iterable[ProbeFinding]) -> tuple[str, str]:
    """(KNOWN_REMEDY | NOT_A_REMEDY | UNTESTED, the evidence) for running `mechanism` at `model`:
    not a remedy when any probe saw it fail there, a known one when probes saw it run there."""
    mine = [f for f in probes if f.mechanism == mechanism and f.model == model]
    if not mechanism or not mine:
        return UNTESTED, f"{UNTESTED} ({model}): no mechanism probe of {mechanism or 'its mechanism'} there"
    bad = [f for f in mine if not f.works]
    kind, shown = (NOT_A_REMEDY, bad) if bad else (KNOWN_REMEDY, mine)
    verb = "fails" if bad else "runs"
    return kind, f"{kind} at {model}: {mechanism} {verb} there (" + "; ".join(f"{f.detail}; {f.source}" for f in shown) + ")"


# ------------------------------------------------------------------ reading the reports


@dataclass
class Outcomes:
    """One results folder as the plan reads it."""

    folder: str
    model: str
    claims: pd.DataFrame      # primary rows: claim, dataset, metric, n_pairs, ours_a, ours_b, ci95, p_value, test, verdict, notebook
    runs: pd.DataFrame        # one row per distinct run, with `split` and `llm_seconds_per_q`
    builds: list[dict[str, Any]] = field(default_factory=list)   # LLM-built KG rows (notebooks 30, 40)


def read_outcomes(folder: str | Path) -> Outcomes:
    """A published results folder's claims (with REPORT's final verdicts) and runs."""
    from .study import assessed_claims, collect, unique_runs

    res = collect(folder)
    final = assessed_claims(res)
    raw = res.claims
    if not raw.empty:
        raw = raw[~raw["metric"].isin(SECONDARY_METRICS)].drop_duplicates(["claim", "metric"])
        verdicts = {} if final.empty else {(c, m): v for c, m, v in zip(final["claim"], final["metric"], final["verdict"])}
        raw = raw.assign(verdict=[verdicts.get((c, m), v) for c, m, v in zip(raw["claim"], raw["metric"], raw["verdict"])])
    runs = unique_runs(res.runs)
    if not runs.empty:
        splits, secs = [], []
        for f in runs["folder"]:
            try:
                man = json.loads((Path(f) / "manifest.json").read_text(encoding="utf-8"))
                met = json.loads((Path(f) / "metrics.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                man, met = {}, {}
            splits.append(((man.get("config") or {}).get("run") or {}).get("split"))
            cost = met.get("cost_per_question") or {}
            # the seconds the answers took when first computed, cached or not
            secs.append(float(cost.get("llm_seconds") or 0) + float(cost.get("llm_cached_seconds") or 0))
        runs = runs.assign(split=splits, llm_seconds_per_q=secs)
    models = runs["model"].dropna().astype(str).value_counts() if not runs.empty else pd.Series(dtype=int)
    builds = [dict(r, notebook=nb) for nb in KG_BUILD_NOTEBOOK.values() for r in res.summaries.get(nb, [])
              if r.get("seconds_this_build")]
    return Outcomes(str(folder), str(models.index[0]) if len(models) else "unknown", raw, runs, builds)


def _status(verdict: Any) -> str:
    v = str(verdict).split("; ")[0]
    if v in (CONFIRMED, REFUTED):
        return VERDICT
    if v == NOT_SEPARABLE:
        return N
    if v.startswith(NOT_TESTABLE_DATA):
        return DATA
    if v.startswith(NOT_TESTABLE_MODEL) or v in (JUDGE_UNINFORMATIVE, NO_SIGNAL) or v.startswith("not testable"):
        return MODEL
    return NOT_RUN


def not_run_blocker(paper: str, claim: str, dataset: str) -> tuple[str, str]:
    """Why a claim no report ran was not run, as a blocker: model (Self-RAG's own 7B, DPO at
    7-8B), data (a KG-Infused claim on a dataset no KG here holds, or on 2Wiki whose only KG is
    the held-out one; a retrieval claim without a real corpus), else not run; with the evidence
    (the reason REPORT states for the CPU reference, `accounting.REFERENCE_REASONS`, where it has one)."""
    reason = next((why for p, test, why in REFERENCE_REASONS if p == paper and test(claim, dataset)), "")
    if paper == "kg_infused" and (claim.startswith("table2.") or claim.startswith("t1.dpo_helps.")):
        return MODEL, reason
    if paper == "kg_infused" and ".retrieval_over_nor." in f".{claim}.":
        # Vanilla RAG over NoR needs a corpus, not a KG: Bamboogle ships none, StrategyQA's is gold-derived
        if dataset in ("bamboogle", "strategyqa"):
            return DATA, reason or f"{dataset} has no real retrieval corpus here"
        return NOT_RUN, "never run here (it needs the dataset's pooled corpus, no KG)"
    if paper == "kg_infused":
        return DATA, (reason if dataset != "2wiki" and reason else
                      "the only 2Wiki KG a KG-Infused claim may use here is 2wiki-evidence-heldout, without the "
                      "evaluated questions' facts: not testable with the data here" if dataset == "2wiki" else
                      "no KG here holds this dataset's facts (the KGs hold 2Wiki's): not testable with the data here")
    return NOT_RUN, reason or "never run here"


# ------------------------------------------------------------------ the plan


CLAIM_COLUMNS = ("paper", "claim", "dataset", "relation", "metric", "status", "at", "evidence", "remedy", "notebook", "planned",
                 "effect", "effect_source", "alpha_m", "n_needed", "planned_n", "power", "unit_core_hours", "note")


@dataclass
class Plan:
    """The plan: one row per registered claim and one per run unit, with how it was made."""

    claims: pd.DataFrame
    units: pd.DataFrame
    meta: dict[str, Any]

    @property
    def blocker_counts(self) -> pd.DataFrame:
        c = self.claims["status"].value_counts()
        return pd.DataFrame({"status": list(PRIORITY), "claims": [int(c.get(s, 0)) for s in PRIORITY]})

    def to_json(self) -> dict[str, Any]:
        def clean(df: pd.DataFrame) -> list[dict[str, Any]]:
            out = []
            for r in df.to_dict("records"):
                out.append({k: ("unreachable" if isinstance(v, float) and math.isinf(v) else
                                None if isinstance(v, float) and math.isnan(v) else
                                v.item() if isinstance(v, np.generic) else v) for k, v in r.items()})
            return out
        return {**self.meta, "claims": clean(self.claims), "units": clean(self.units)}

    def to_markdown(self) -> str:
        m = self.meta
        lines = [f"# The claims plan ({m['made']})", "",
                 f"Made at commit `{(m.get('commit') or 'unknown')[:12]}`{' (dirty tree)' if m.get('dirty') else ''} "
                 f"from {', '.join(f'`{f}` ({mod})' for f, mod in m['folders'].items())}; planned model "
                 f"`{m['planned_model']}`; {m['power']:.0%} power at alpha / m (alpha {m['alpha']}, "
                 f"m per paper: {', '.join(f'{PAPER_NAMES.get(p, p)} {k}' for p, k in m['m'].items())}); core-hours at "
                 f"{m['cores']} cores; " + _pricing(m) + " A unit runs its notebook's whole grid on the dataset at its "
                 "n, on a fresh sample (samples are not nested in n: `shared_with_now` counts the questions it shares "
                 "with the run it replaces).", "",
                 "Mechanism probes read (whether the planned model runs what a smaller one failed): "
                 + ("; ".join(f"{f['mechanism']} at `{f['model']}` {'runs' if f['works'] else 'fails'} (`{f['source']}`)"
                              for f in m.get("probes") or []) or "none (every remedy at the planned model untested)")
                 + ".", "",
                 "## Claims by status", "", to_markdown(self.blocker_counts, digits=0), "",
                 "## Run units, by expected verdicts per core-hour", "",
                 to_markdown(self.units, digits=2) if not self.units.empty else "(no unit to run)", "",
                 "## Every registered claim", "", to_markdown(self.claims[[c for c in CLAIM_COLUMNS if c in self.claims]],
                                                                digits=1), ""]
        return "\n".join(lines)


def build_plan(outcomes: list[Outcomes], config: PlanConfig = PlanConfig(), reg: pd.DataFrame | None = None,
               probes: Iterable[ProbeFinding] | None = None) -> Plan:
    """The plan from the folders' outcomes (see the module doc); `reg` the registered claims
    (default: the four papers' registries); `probes` the mechanism probes' findings
    (`read_probes`; none: every remedy at the planned model is untested)."""
    reg = registry() if reg is None else reg
    if not outcomes:
        raise ConfigError("outcomes: expected at least one results folder's outcomes")
    planned = config.planned_model or outcomes[-1].model
    rows_at = {o.model: ({} if o.claims.empty else {c: r for c, r in zip(o.claims["claim"], o.claims.to_dict("records"))})
               for o in outcomes}
    recs = []
    for r in reg.to_dict("records"):
        paper, cid, ds = r["paper"], r["claim"], r["dataset"]
        seen = {model: rows[cid] for model, rows in rows_at.items() if cid in rows}
        statuses = {model: _status(row.get("verdict")) for model, row in seen.items()}
        statuses = {k: v for k, v in statuses.items() if v != NOT_RUN}
        if statuses:
            status = min(statuses.values(), key=PRIORITY.index)
            at = [m for m, s in statuses.items() if s == status]
            evidence = "; ".join(f"{m}: {str(seen[m].get('verdict')).split('; ')[0]} (n = {int(seen[m].get('n_pairs') or 0)}"
                                 f", diff {_fmt(seen[m].get('ours_a'), seen[m].get('ours_b'))})" for m in at)
        else:
            status, evidence = not_run_blocker(paper, cid, ds)
            at = []
        notebook = next((str(row.get("notebook")) for row in seen.values() if row.get("notebook")), None)
        recs.append({**r, "key": claim_key(cid, ds), "status": status, "at": ", ".join(at), "evidence": evidence,
                     "notebook": notebook, "tried_at_planned": planned in statuses})
    claims = pd.DataFrame(recs)
    # notebooks of claims never run: the same claim on another dataset, else the table's notebook
    nb_of_key = {k: nb for k, nb in zip(claims["key"], claims["notebook"]) if isinstance(nb, str) and nb}
    claims["notebook"] = [(nb if isinstance(nb, str) and nb else None) or nb_of_key.get(k) or TABLE_NOTEBOOK.get((p, c.split(".")[0]))
                          or TABLE_NOTEBOOK.get((p, c.split("_")[0])) or "?"
                          for nb, k, p, c in zip(claims["notebook"], claims["key"], claims["paper"], claims["claim"])]
    # a model block seen at another model than the planned one (not one the CPU cannot run): is the
    # planned model a remedy? The probes say: known, not (the claim stays `model`, unplanned), or
    # untested (planned). A claim blocked by n or never run whose mechanism a probe saw fail at the
    # planned model is blocked by that model too: no run there would decide it.
    findings = list(probes or [])
    kinds, statuses, ats, evidences = [], [], [], []
    for r in claims.to_dict("records"):
        to_remedy = r["status"] == MODEL and not r["tried_at_planned"] and r["at"] != ""
        kind, why = (remedy(claim_mechanism(r["paper"], r["metric"]), planned, findings)
                     if to_remedy or r["status"] in (N, NOT_RUN) else ("", ""))
        blocked = kind == NOT_A_REMEDY
        kinds.append(kind if to_remedy or blocked else "")
        statuses.append(MODEL if blocked else r["status"])
        ats.append(r["at"] if to_remedy or not blocked else f"{planned} (mechanism probe)")
        evidences.append("; ".join(x for x in (r["evidence"], why) if x) if to_remedy or blocked else r["evidence"])
    claims = claims.assign(status=statuses, at=ats, evidence=evidences, remedy=kinds)
    # KG-Infused claims on 2Wiki, not testable on the held-out KG, in a notebook the reference
    # profiles now run on the full 2Wiki KG: not run there yet, so planned (their effect: `_effect`)
    switch = ((claims["paper"] == "kg_infused") & (claims["dataset"] == "2wiki") & (claims["status"] == DATA)
              & claims["notebook"].isin(config.full_kg_notebooks))
    claims = claims.assign(
        on_full_kg=switch, status=claims["status"].where(~switch, NOT_RUN),
        evidence=[(f"registered before its runs (issue 56): {nb} runs KG-Infused RAG on {FULL_KG} and, as the "
                   f"placebo arm, on {HELDOUT_KG}; not yet run" if c.startswith("m1.") else
                   f"{e}; {nb} now runs on {FULL_KG} (issue 56), not yet run there") if sw else e
                  for c, e, nb, sw in zip(claims["claim"], claims["evidence"], claims["notebook"], switch)])
    # what the plan runs: blocked by n, never run, or blocked at another model than the planned one
    # where the planned model is not known to fail the same way
    to_try = (claims["status"] == MODEL) & ~claims["tried_at_planned"] & (claims["at"] != "") & \
        (claims["remedy"] != NOT_A_REMEDY)
    claims["planned"] = claims["status"].isin([N, NOT_RUN]) | to_try
    in_family = {p: int(((claims["paper"] == p) & (claims["planned"] | _tested(claims, rows_at))).sum())
                 for p in claims["paper"].unique()}
    eff_rows = []
    every_run = _all_runs(outcomes)
    for r in claims.to_dict("records"):
        if not r["planned"]:
            eff_rows.append({})
            continue
        alpha_m = config.alpha / max(in_family[r["paper"]], 1)
        eff = _effect(r, claims, rows_at, planned, every_run)
        if r["relation"] == "~":
            margin = float(r.get("margin") or EQUIVALENCE_MARGIN)
            need, what = eff.equivalence_n(margin, alpha_m, config.power) if eff else (math.nan, "")
            eff_rows.append({"alpha_m": alpha_m, "effect": eff.delta if eff else None,
                             "effect_source": eff.source if eff else "no effect to plan from (no run, no printed number)",
                             "n_needed": need, "_eff": eff, "note": f"equivalence (~): {what}" if what else None})
            continue
        need = eff.n_needed(alpha_m, config.power) if eff else math.nan
        eff_rows.append({"alpha_m": alpha_m, "effect": eff.delta if eff else None,
                         "effect_source": eff.source if eff else "no effect to plan from (no run, no printed number)",
                         "n_needed": need, "_eff": eff})
    extra = pd.DataFrame(eff_rows, index=claims.index)
    claims = pd.concat([claims, extra], axis=1)
    tp = fit_throughput(outcomes, planned)
    units = _units(claims, outcomes, planned, config, tp)
    # each planned claim runs in its unit, at the unit's n: its power there and the unit's cost
    at_unit = {} if units.empty else {(nb, ds): (n, h) for nb, ds, n, h in
                                      zip(units["notebook"], units["dataset"], units["n"], units["core_hours"])}
    planned_n, power_n, hours = [], [], []
    for r in claims.to_dict("records"):
        n, h = at_unit.get((r["notebook"], r["dataset"]), (None, None)) if r["planned"] else (None, None)
        eff = r.get("_eff")
        planned_n.append(n)
        hours.append(h)
        power_n.append(round(_power(r, eff, int(n)), 3) if isinstance(eff, Effect) and n else None)
    claims = claims.assign(planned_n=planned_n, power=power_n, unit_core_hours=hours)
    claims = claims.drop(columns=[c for c in ("_eff", "tried_at_planned") if c in claims])
    commit = git_commit()
    meta = {"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit.get("commit"),
            "dirty": commit.get("dirty"), "folders": {o.folder: o.model for o in outcomes}, "planned_model": planned,
            "alpha": config.alpha, "power": config.power, "cores": config.cores, "m": in_family,
            "model_cost_ratio": round(model_cost_ratio(_all_runs(outcomes), planned), 3),
            "throughput": asdict(tp) if tp else None,
            "registered": int(len(claims)),
            "probes": [{"mechanism": f.mechanism, "model": f.model, "works": f.works, "source": f.source}
                       for f in findings]}
    return Plan(claims, units, meta)


def _pricing(meta: dict[str, Any]) -> str:
    """How the plan priced a unit only another model ran (a plan frozen before the throughput fit
    has no `throughput` and was priced by the ratio)."""
    t = meta.get("throughput")
    if not t:
        return (f"a unit only another model ran is priced at its seconds x {meta['model_cost_ratio']} (the planned "
                "model's median cost ratio).")
    return (f"a unit only another model ran is priced from its requests and tokens at the planned model's throughput, "
            f"fitted over {t['answers']:,} of its committed answers: {t['per_request']:.3f} s per request, "
            f"{t['per_prompt_token']:.5f} s per prompt token, {t['per_completion_token']:.4f} s per completion token "
            f"(the median per-question cost ratio, {meta['model_cost_ratio']}, under-prices generation-bound work).")


def _power(r: dict[str, Any], eff: Effect, n: int) -> float:
    """A planned claim's power at n: TOST's (or, beyond the margin, refutation's) for `~`, else the paired test's."""
    if r.get("relation") == "~":
        return eff.equivalence_power(n, float(r.get("margin") or EQUIVALENCE_MARGIN), r["alpha_m"])
    return eff.power_at(n, r["alpha_m"])


def _tested(claims: pd.DataFrame, rows_at: dict[str, dict[str, dict]]) -> pd.Series:
    """Claims a paired test decided in some committed report (they carry a p)."""
    def has_p(cid: str) -> bool:
        return any(cid in rows and rows[cid].get("p_value") is not None and not pd.isna(rows[cid].get("p_value"))
                   and _status(rows[cid].get("verdict")) != NOT_RUN for rows in rows_at.values())
    return claims["claim"].map(has_p)


def _fmt(a: Any, b: Any) -> str:
    try:
        return f"{float(a) - float(b):+.1f}"
    except (TypeError, ValueError):
        return "–"


def _usable(row: dict[str, Any]) -> bool:
    v = str(row.get("verdict")).split("; ")[0]
    return int(row.get("n_pairs") or 0) > 0 and v not in (JUDGE_UNINFORMATIVE, NO_SIGNAL) and _status(v) != NOT_RUN


def _effect(r: dict[str, Any], claims: pd.DataFrame, rows_at: dict[str, dict[str, dict]], planned: str,
            outcomes_runs: pd.DataFrame | None = None) -> Effect | None:
    """The claim's own run (the planned model first), else the same claim on the nearest dataset
    or model (the most questions, the planned model first), else the paper's printed difference."""
    order = [planned, *[m for m in rows_at if m != planned]]
    if r.get("on_full_kg"):
        # the held-out KG's row says nothing about the full KG; the oracle KG (77 % of the evaluated
        # evidence, the full KG 100 %) is the nearest run, and the placebo claim is oracle minus held-out
        if r["claim"].startswith("m1.kg_over_placebo"):
            return placebo_effect(outcomes_runs, order)
        for m in order:
            row = rows_at.get(m, {}).get(f"{r['claim']}@{ORACLE_KG}")
            if row and _usable(row):
                eff = effect_from_row(row, f"the same claim on {ORACLE_KG} ({m}, n = {int(row['n_pairs'])})")
                if eff:
                    return eff
    for m in order:
        row = rows_at.get(m, {}).get(r["claim"])
        if row and _usable(row):
            eff = effect_from_row(row, f"own run ({m}, n = {int(row['n_pairs'])})")
            if eff:
                return eff
    sibs = claims[(claims["key"] == r["key"]) & (claims["claim"] != r["claim"])]["claim"]
    for m in order:
        found = [rows_at.get(m, {}).get(c) for c in sibs]
        found = sorted([x for x in found if x and _usable(x)], key=lambda x: -int(x.get("n_pairs") or 0))
        for row in found:
            eff = effect_from_row(row, f"the same claim on {row['dataset']} ({m}, n = {int(row['n_pairs'])})")
            if eff:
                return eff
    vals = paper_values(r["paper"], r["claim"], r["dataset"], r["a"], r["b"], r["metric"])
    return effect_from_paper(vals) if vals else None


def placebo_effect(runs: pd.DataFrame | None, models: Iterable[str]) -> Effect | None:
    """The placebo claim's effect from the committed runs: KG-Infused RAG on the oracle KG minus the
    same method on the held-out KG, same questions (notebook 21), per-question Avg (mean of EM, F1,
    Acc), at the first of `models` that ran both."""
    from ..eval.metrics import get_metric
    from .mechanism import run_rows

    if runs is None or runs.empty:
        return None
    for m in models:
        sel = runs[(runs["model"] == m) & (runs["notebook"] == "21_kg_infused_main") & (runs["method"] == "kg-infused")
                   & (runs["dataset"] == "2wiki")]
        a, b = sel[sel["kg"] == ORACLE_KG], sel[sel["kg"] == HELDOUT_KG]
        if a.empty or b.empty:
            continue

        def avg(folder: str) -> dict[str, float]:
            out = {}
            for row in run_rows(folder):
                vals = [get_metric(k)(row) for k in ("em", "f1", "acc")]
                if all(v is not None for v in vals):
                    out[row["qid"]] = 100 * sum(vals) / 3
            return out
        va, vb = avg(a["folder"].iloc[0]), avg(b["folder"].iloc[0])
        common = sorted(set(va) & set(vb))
        if len(common) < 2:
            continue
        d = np.array([va[q] - vb[q] for q in common])
        sd = float(d.std(ddof=1))
        if sd <= 0:
            continue
        return Effect(float(d.mean()), f"{ORACLE_KG} minus {HELDOUT_KG}, same method and questions ({m}, n = {len(common)})",
                      sd=sd)
    return None


def available_questions(dataset: str, split: str | None) -> int | None:
    return SPLIT_QUESTIONS.get((dataset, split or DEFAULT_SPLIT.get(dataset, "")))


def _units(claims: pd.DataFrame, outcomes: list[Outcomes], planned: str, config: PlanConfig,
           tp: Throughput | None = None) -> pd.DataFrame:
    """One row per (notebook, dataset, planned model, KG) with its claims' n, power and cost."""
    todo = claims[claims["planned"] & claims["n_needed"].notna()] if "n_needed" in claims else claims.iloc[0:0]
    if todo.empty:
        return pd.DataFrame()
    all_runs = _all_runs(outcomes)
    ratio = model_cost_ratio(all_runs, planned)
    recs = []
    for (nb, ds), g in todo.groupby(["notebook", "dataset"], sort=False):
        paper = g["paper"].iloc[0]
        runs = all_runs[(all_runs["notebook"] == nb) & (all_runs["dataset"] == ds)] if not all_runs.empty else all_runs
        kgs = sorted({str(k) for k in runs["kg"].dropna()}) if not runs.empty and "kg" in runs else []
        if paper == "kg_infused" and ds == "2wiki" and nb in config.full_kg_notebooks:
            kgs = [f"{FULL_KG} (placebo {HELDOUT_KG}, upper bound {ORACLE_KG})"]
        split = next((s for s in (runs["split"].dropna() if not runs.empty else []) if s), None) \
            or PAPER_SPLIT.get((paper, ds)) or DEFAULT_SPLIT.get(ds)
        cap = available_questions(ds, split)
        needs = [n for n in g["n_needed"] if n is not None and not pd.isna(n) and not math.isinf(n)]
        per_q, cost_source = question_seconds(all_runs, nb, ds, planned, ratio, tp)
        if paper == "kg_infused" and ds == "2wiki" and nb in config.full_kg_notebooks and per_q is not None:
            # the placebo arm is one more KG-Infused RAG run per question than the committed grid had
            kgi_runs = runs[(runs["method"] == "kg-infused") & (runs["model"] == planned)] if not runs.empty else runs
            if not kgi_runs.empty:
                per_q += float(kgi_runs["llm_seconds_per_q"].min())
                cost_source += " + one KG-Infused run per question for the placebo arm"
        build = kg_build_seconds(outcomes, paper, ds, planned, ratio, tp)
        recs_g = g.to_dict("records")

        def expected(n: int) -> float:
            return float(sum(_power(r, e, n) for r, e in zip(recs_g, g["_eff"]) if isinstance(e, Effect)))

        def hours(n: int) -> float:
            return config.cores * (per_q * n + build * n) / 3600 if per_q is not None else math.nan
        # the unit's n: among the n its claims need (capped), the one with the most expected verdicts
        # per core-hour (the smaller on a tie), so one claim needing thousands does not price the rest
        candidates = sorted({min(int(x), cap) if cap else int(x) for x in needs}) or [cap or 0]
        n = max(candidates, key=lambda k: ((expected(k) / hours(k)) if hours(k) and hours(k) > 0 else expected(k), -k))
        powers = [expected(n)]
        core_h = hours(n)
        now = int(runs["n"].max()) if not runs.empty and runs["n"].notna().any() else 0
        recs.append({"notebook": nb, "dataset": ds, "model": planned, "kg": ", ".join(kgs) or "–", "split": split,
                     "available": cap, "n": n, "n_now": now, "claims": len(g), "reachable": len(needs),
                     "decided_at_n": int(sum(1 for x in needs if x <= n)),
                     "expected_verdicts": round(float(sum(powers)), 2),
                     "llm_s_per_q": round(per_q, 1) if per_q is not None else None,
                     "kg_build_s_per_q": round(build, 1), "core_hours": round(core_h, 2),
                     "verdicts_per_core_hour": round(float(sum(powers)) / core_h, 3) if core_h and core_h > 0 else None,
                     "cost_source": cost_source, "shared_with_now": shared_questions(now, n, cap) if cap and now else 0})
    units = pd.DataFrame(recs)
    units = units.sort_values("verdicts_per_core_hour", ascending=False, na_position="last", kind="stable")
    units = units.reset_index(drop=True)
    units.index = units.index + 1
    return units.rename_axis("rank").reset_index()


def _all_runs(outcomes: list[Outcomes]) -> pd.DataFrame:
    frames = [o.runs for o in outcomes if not o.runs.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


MIN_FIT_ANSWERS = 50   # fewer committed answers of the planned model: price by the cost ratio instead


@dataclass(frozen=True)
class Throughput:
    """What one answer of a model costs here, fitted (non-negative least squares) over its committed
    LLM cache: seconds per request, per prompt token and per completion token. A unit only another
    model ran is priced from that model's tokens at these rates: a median ratio of per-question seconds
    comes from short, prompt-bound answers and under-prices generation-bound work (TCR-QF's extraction
    and reasoning: 49 s per chunk at 1.5B against the ratio's 15, docs/NEXT-UNITS.md)."""

    per_request: float
    per_prompt_token: float
    per_completion_token: float
    answers: int

    def seconds(self, requests: float, prompt_tokens: float, completion_tokens: float) -> float:
        return (self.per_request * float(requests) + self.per_prompt_token * float(prompt_tokens)
                + self.per_completion_token * float(completion_tokens))


def fit_throughput(outcomes: list[Outcomes], planned: str) -> Throughput | None:
    """The planned model's `Throughput` from the LLM cache of the results folder whose runs it made
    (its identity as those runs record it); answers over `study.LONG_ANSWER_S` (a paused run) are left
    out. None with fewer than `MIN_FIT_ANSWERS` answers."""
    from scipy.optimize import nnls

    from .study import LONG_ANSWER_S, cache_entries

    for o in outcomes:
        runs = o.runs
        if runs.empty or "llm_identity" not in runs:
            continue
        ids = set(runs.loc[runs["model"].astype(str) == planned, "llm_identity"].dropna().astype(str))
        entries = [e for e in (cache_entries(o.folder) or ()) if e.identity in ids and 0 < e.seconds <= LONG_ANSWER_S]
        if len(entries) < MIN_FIT_ANSWERS:
            continue
        x = np.array([[1.0, e.prompt_tokens, e.completion_tokens] for e in entries])
        coef, _ = nnls(x, np.array([e.seconds for e in entries]))
        return Throughput(*(round(float(c), 6) for c in coef), answers=len(entries))
    return None


def model_cost_ratio(runs: pd.DataFrame, planned: str) -> float:
    """Median ratio of the planned model's per-question LLM seconds to another model's, over the
    (notebook, dataset, method) both ran: how the plan prices a unit only the other model ran."""
    if runs.empty:
        return 1.0
    key = ["notebook", "dataset", "method"]
    mine = runs[runs["model"] == planned].groupby(key)["llm_seconds_per_q"].mean()
    other = runs[runs["model"] != planned].groupby(key)["llm_seconds_per_q"].mean()
    both = mine.index.intersection(other.index)
    ratios = [mine[k] / other[k] for k in both if other[k] > 0 and mine[k] > 0]
    return float(np.median(ratios)) if ratios else 1.0


TOKEN_COLUMNS = ("llm_requests_per_q", "llm_total_prompt_tokens_per_q", "llm_total_completion_tokens_per_q")


def question_seconds(runs: pd.DataFrame, notebook: str, dataset: str, planned: str, ratio: float,
                     throughput: Throughput | None = None) -> tuple[float | None, str]:
    """LLM seconds one question of a unit costs: the sum over the notebook's distinct runs
    (methods) on the dataset at the planned model; else the same notebook on another dataset at
    it; else at another model: its requests and tokens at the planned model's `throughput`, or
    without one its seconds times `model_cost_ratio`."""
    if runs.empty:
        return None, "no committed run"
    nb = runs[runs["notebook"] == notebook]
    by_tokens = throughput is not None and all(c in nb for c in TOKEN_COLUMNS)
    other = ("their tokens at the planned model's throughput" if by_tokens else "x the model cost ratio")
    for sel, src, same in ((nb[(nb["dataset"] == dataset) & (nb["model"] == planned)], "its runs at the planned model", True),
                           (nb[nb["model"] == planned], "the notebook's runs on other datasets, planned model", True),
                           (nb[nb["dataset"] == dataset], f"its runs at another model, {other}", False),
                           (nb, f"the notebook's runs on other datasets and models, {other}", False)):
        if sel.empty:
            continue
        if same or not by_tokens:
            per_ds = sel.groupby(["dataset", "model"])["llm_seconds_per_q"].sum()
            return float(per_ds.mean()) * (1.0 if same else ratio), src
        secs = [throughput.seconds(*(0.0 if pd.isna(r[c]) else r[c] for c in TOKEN_COLUMNS)) for _, r in sel.iterrows()]
        per_ds = sel.assign(_s=secs).groupby(["dataset", "model"])["_s"].sum()
        return float(per_ds.mean()), src
    return None, "no committed run of this notebook"


def kg_build_seconds(outcomes: list[Outcomes], paper: str, dataset: str, planned: str, ratio: float,
                     throughput: Throughput | None = None) -> float:
    """Seconds per question of building the LLM-built KG a unit searches (SA-RAG's index, TCR-QF's
    KG: a larger sample pools more paragraphs, so the KG is built anew): the committed build's
    seconds per passage times the passages a question brings. A build by another model is priced from
    its requests and tokens at the planned model's `throughput` (else its seconds x `ratio`)."""
    for o in outcomes:
        for b in o.builds:
            if b.get("notebook") != KG_BUILD_NOTEBOOK.get(paper) or not b.get("passages"):
                continue
            per_q = (float(b["passages"]) / float(b.get("questions") or 1) if b.get("dataset") == dataset
                     else PARAGRAPHS_PER_QUESTION.get(dataset, 10))
            if str(b.get("model")) == planned or o.model == planned:
                return float(b["seconds_this_build"]) / float(b["passages"]) * per_q
            tokens = [b.get(k) for k in ("llm_requests", "prompt_tokens", "completion_tokens")]
            if throughput is not None and all(t is not None for t in tokens):
                return throughput.seconds(*tokens) / float(b["passages"]) * per_q
            return float(b["seconds_this_build"]) / float(b["passages"]) * per_q * ratio
    return 0.0


def shared_questions(n1: int, n2: int, total: int, seed: int = 0) -> int:
    """Questions two samples of sizes n1 and n2 of one file share. `data.registry.load_questions`
    draws `numpy.random.default_rng(seed).choice(total, n, replace=False)`, which is not nested in
    n: the 30 questions of an n = 30 sample are not the first 30 of the n = 100 one. So a unit run
    at a larger n re-answers nearly every question (cached answers cover only the shared ones),
    and the plan prices it at its full n."""
    if min(n1, n2) <= 0 or total <= 0:
        return 0
    a = np.random.default_rng(seed).choice(total, size=min(n1, total), replace=False)
    b = np.random.default_rng(seed).choice(total, size=min(n2, total), replace=False)
    return int(np.intersect1d(a, b).size)


def make_plan(config: PlanConfig = PlanConfig()) -> Plan:
    """The plan of the committed results folders `config.results`."""
    missing = [f for f in config.results if not (Path(f) / "REPORT.md").is_file()]
    if missing:
        raise ConfigError(f"results: {', '.join(missing)} holds no REPORT.md: expected published results folders, "
                          "e.g. results/reference")
    return build_plan([read_outcomes(f) for f in config.results], config,
                      probes=read_probes(config.probes) if config.probes else None)


def frozen_files(dest: str | Path, day: str) -> tuple[Path, Path]:
    """The two files a plan frozen into `dest` on `day` (YYYY-MM-DD, UTC) is written to."""
    return Path(dest) / f"{day}.json", Path(dest) / f"{day}.md"


def refuse_refreezing(dest: str | Path, day: str) -> None:
    """A plan frozen into `dest` on `day` is never written over: its point is to be fixed before the
    runs it plans, and a second freeze the same day (after a result was seen) would replace it silently."""
    there = [p for p in frozen_files(dest, day) if p.exists()]
    if there:
        raise ConfigError(f"--freeze {dest}: {there[0]} exists, a plan frozen on {day}; a frozen plan is never "
                          "written over. Freeze into another folder, or remove that plan by hand (git keeps it) "
                          "if it was frozen by mistake")


def freeze(plan: Plan, dest: str | Path) -> tuple[Path, Path]:
    """`dest/<date>.json` and `.md`: the plan as made, with the commit of the code that made it;
    refused if a plan was frozen there that day (`refuse_refreezing`). Each file written atomically."""
    from ..jsonl import atomic_text

    dest = Path(dest)
    day = plan.meta["made"][:10]
    refuse_refreezing(dest, day)
    dest.mkdir(parents=True, exist_ok=True)
    js, md = frozen_files(dest, day)
    atomic_text(md, plan.to_markdown())
    atomic_text(js, json.dumps(plan.to_json(), indent=1, ensure_ascii=False, default=str) + "\n")
    return js, md


def main(argv: Iterable[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kgrag_lib.report.plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--freeze", metavar="DIR", help="write DIR/<date>.json and .md (e.g. results/claims-plan)")
    ap.add_argument("--results", nargs="+", default=list(DEFAULT_RESULTS), help=PlanConfig.__dataclass_fields__["results"].metadata["help"])
    ap.add_argument("--probes", default=DEFAULT_PROBES, help=PlanConfig.__dataclass_fields__["probes"].metadata["help"])
    ap.add_argument("--planned-model", default=None, help=PlanConfig.__dataclass_fields__["planned_model"].metadata["help"])
    args = ap.parse_args(list(argv) if argv is not None else None)
    try:
        _check_arguments(args)
        plan = make_plan(PlanConfig(results=tuple(args.results), planned_model=args.planned_model,
                                    probes=args.probes or None))
        written = freeze(plan, args.freeze) if args.freeze else ()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:   # --freeze below a file, on a read-only disk, ...
        print(f"error: --freeze {args.freeze}: {exc.filename or args.freeze}: {exc.strerror or exc}; expected a "
              "folder to write the plan into, e.g. results/claims-plan", file=sys.stderr)
        return 2
    print(plan.to_markdown())
    for p in written:
        print(f"wrote {p}")
    return 0


def _check_arguments(args: Any) -> None:
    """The command line's values, before the plan is made (which reads every results folder): an
    empty value (`--freeze "$UNSET"`) would silently mean "not given", a folder named twice counts
    its runs twice, and a --freeze that cannot be a folder fails only after the work."""
    for flag, value in (("--freeze", args.freeze), ("--planned-model", args.planned_model), ("--probes", args.probes)):
        if value is not None and not str(value).strip():
            raise ConfigError(f"{flag} {value!r} is empty (an unset shell variable?); give a value or leave the "
                              "flag out")
    resolved = [Path(r).resolve() for r in args.results]
    if len(set(resolved)) != len(resolved):
        raise ConfigError(f"--results {' '.join(args.results)}: a folder is named twice; name each once")
    if args.freeze:
        dest = Path(args.freeze)
        blocker = next((p for p in (dest, *dest.parents) if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise ConfigError(f"--freeze {args.freeze}: {blocker} is not a folder; expected a folder to write the "
                              "plan into, e.g. results/claims-plan")
        refuse_refreezing(dest, time.strftime("%Y-%m-%d", time.gmtime()))   # before the plan is made


if __name__ == "__main__":
    sys.exit(main())
