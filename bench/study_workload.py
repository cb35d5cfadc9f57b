"""What the whole study asks of its LLM, per notebook: question-runs at a profile's sizes, and the
requests and tokens each one costs, read from the committed reference runs.

Why from committed runs: they are the only record of how many requests each method really sends
(dependent chains, cache hits between notebooks, extraction chunks) and how long its prompts are.
Each unit below is one configuration on one dataset at the profile's n and seeds; its cost per
question-run is the committed runs' mean of every request a question sent (cache hits included:
the committed runs were resumed and rerun, so their misses say what was cached then, not what a
cold study sends), looked up from the most specific match:

1. the same notebook, configuration and dataset;
2. the same notebook and configuration on other datasets (their mean);
3. the same configuration in other notebooks (their mean);
4. a KG-Infused round count nobody committed: a straight line through the two committed round
   counts of that variant, or its one count plus KG-Infused RAG's per-round slope;
5. a MetaQA N x K cell nobody committed: the committed cells of the same N (else all) on that dataset.

A unit whose `identity` an earlier unit of the study already ran (22-25 repeat 21's and 23's runs,
27's base-model rows repeat them too, 13 repeats 11's seed-0 cell) is answered from the LLM cache
and costs no request. Requests shared between different configurations of one question (a vanilla
QE request that KG-Infused RAG sends again) are counted in each, so the totals are an upper bound.
The committed runs were made by a 0.5B model at cpu-reference's token caps, so completions are the
lengths that model wrote; `StudyWorkload.capped_share` says how many of its requests hit their cap.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from statistics import fmean
from typing import Any, Callable, Iterable

from kgrag_lib.config import profile_section
from kgrag_lib.methods.registry import get_method

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "results" / "reference"
SEED_DIR = re.compile(r"^n(\d+)_seed(\d+)$")
ROUNDS = re.compile(r"^(?P<m>[a-z-]+)_rounds=(?P<r>\d+)$")
GRID = re.compile(r"^N(?P<n>\d+)_K(?P<k>\d+)$")
# question-run -> the study family whose client-CPU figure applies (see study_time.CLIENT_CPU_S)
FAMILY_OF_NOTEBOOK = {"0": "metaqa", "1": "metaqa", "2": "kg-infused", "3": "sa-rag", "4": "tcr-qf", "5": "cross"}


@dataclass(frozen=True)
class Cost:
    """Mean LLM work of one question-run (or one extracted question's chunks)."""

    requests: float           # requests one question-run sends
    prompt_tokens: float
    completion_tokens: float
    source: str               # which committed runs gave it, and how (the lookup rule)

    def scaled(self, k: float, source: str) -> "Cost":
        return Cost(self.requests * k, self.prompt_tokens * k, self.completion_tokens * k, source)


@dataclass(frozen=True)
class Unit:
    """One configuration of one notebook on one dataset at the profile's sizes."""

    notebook: str
    config: str               # the run folder's name (`kg-infused_rounds=2`, `N3_K30`, `extraction`, ...)
    dataset: str
    question_runs: int        # questions x seeds
    identity: tuple = ()      # what makes its requests the same as another unit's (default: config, dataset, runs)
    in_process: bool = False  # decoded in kgrag's process whatever engine serves the study (today: 27's +DPO rows, 28's Self-RAG)
    independent: bool = False  # its requests do not wait on each other (extraction chunks): all in flight at once

    @property
    def key(self) -> tuple:
        return self.identity or (self.config.removeprefix("base/"), self.dataset, self.question_runs)


@dataclass
class CommittedCosts:
    """Per question-run means of the committed runs, keyed (notebook, config, dataset)."""

    totals: dict[tuple[str, str, str], Cost] = field(default_factory=dict)
    lines: dict[tuple[str, str, str], int] = field(default_factory=dict)   # question lines read

    def lookup(self, u: Unit) -> Cost:
        """The cost of one question-run of `u` (the module docstring's rules, in order)."""
        table, bare = self.totals, u.config.rpartition("/")[2]
        key = (u.notebook, u.config, u.dataset)
        if key in table:
            return table[key]
        same_nb = [k for k in table if k[:2] == key[:2]]
        if same_nb:
            return _mean([table[k] for k in same_nb], f"{u.notebook[:2]}/{u.config} on {_ds(same_nb)}")
        other = [k for k in table if k[1] == bare]
        if other:
            return _mean([table[k] for k in other], f"{bare} in {_nbs(other)}")
        m = ROUNDS.match(bare)
        if m:
            return self._rounds_line(m["m"], int(m["r"]))
        g = GRID.match(bare)
        if g:
            cells = [k for k in table if k[0] == u.notebook and k[2] == u.dataset and GRID.match(k[1])]
            same_n = [k for k in cells if GRID.match(k[1])["n"] == g["n"]] or cells
            if same_n:
                return _mean([table[k] for k in same_n], f"{u.notebook[:2]} {u.dataset} cells {_cfgs(same_n)}")
        raise LookupError(f"no committed run of {u.notebook}/{u.config} on {u.dataset} or any stand-in: "
                          f"commit one under {REFERENCE}/{u.notebook} or price the unit in stated_cost")

    def _rounds_line(self, method: str, r: int) -> Cost:
        """A straight line through the first two committed round counts of `method`; with one count,
        that count plus KG-Infused RAG's per-round slope (a round adds the same stages to each variant)."""
        def counts(m: str) -> dict[int, Cost]:
            by_r: dict[int, list[Cost]] = defaultdict(list)
            for (nb, cfg, ds), c in self.totals.items():
                g = ROUNDS.match(cfg)
                if g and g["m"] == m:
                    by_r[int(g["r"])].append(c)
            return {k: _mean(v, "") for k, v in sorted(by_r.items())}

        own, ref = counts(method), counts("kg-infused")
        if len(own) >= 2:
            (r1, a), (r2, b) = list(own.items())[:2]
            how = f"{method}: line through rounds {r1} and {r2}, at {r}"
        elif own and len(ref) >= 2:
            (r1, a), = own.items()
            (k1, x), (k2, y) = list(ref.items())[:2]
            r2 = r1 + 1
            b = Cost(a.requests + (y.requests - x.requests) / (k2 - k1),
                     a.prompt_tokens + (y.prompt_tokens - x.prompt_tokens) / (k2 - k1),
                     a.completion_tokens + (y.completion_tokens - x.completion_tokens) / (k2 - k1), "")
            how = f"{method} at {r1} rounds + kg-infused's per-round slope, at {r}"
        else:
            raise LookupError(f"{method} at {r} rounds: no committed round count to extrapolate from")
        t = (r - r1) / (r2 - r1)
        line = lambda x, y: max(0.0, x + t * (y - x))   # noqa: E731
        return Cost(line(a.requests, b.requests), line(a.prompt_tokens, b.prompt_tokens),
                    line(a.completion_tokens, b.completion_tokens), how)


def _mean(costs: list[Cost], source: str) -> Cost:
    return Cost(fmean(c.requests for c in costs), fmean(c.prompt_tokens for c in costs),
                fmean(c.completion_tokens for c in costs), source)


def _ds(keys) -> str:
    return ",".join(sorted({k[2] for k in keys}))


def _nbs(keys) -> str:
    return ",".join(sorted({k[0][:2] for k in keys}))


def _cfgs(keys) -> str:
    return ",".join(sorted({k[1] for k in keys}))


def _run_key(notebook: str, rel: Path) -> tuple[str, str] | None:
    """(config, dataset) of a run folder under a notebook's results, or None when it is not one."""
    parts = list(rel.parts)
    prefix = ""
    if parts and parts[0] in ("upper-bound", "runs-dpo", "runs-base"):
        prefix = {"upper-bound": "upper-bound/", "runs-dpo": "dpo/", "runs-base": "base/"}[parts[0]]
        parts = parts[1:]
    if len(parts) == 4 and parts[0] == "runs":
        _, ds, a, b = parts
        cfg = b if SEED_DIR.match(a) else a     # runs/<ds>/n_seed/<cfg> or (notebook 11) runs/<ds>/<cfg>/n_seed
        return prefix + cfg, ds
    return None


def read_committed(root: Path = REFERENCE) -> CommittedCosts:
    """Every committed per-question file (runs) and extraction summary (notebooks 30 and 40) under `root`."""
    out = CommittedCosts()
    for q in sorted(root.glob("[0-9][0-9]_*/**/questions.jsonl")):
        notebook = q.relative_to(root).parts[0]
        rel = q.parent.relative_to(root / notebook)
        key = _run_key(notebook, rel)
        if key is None:   # 00's single run folder: its manifest names the method and dataset
            run = json.loads((q.parent / "manifest.json").read_text())["config"]["run"]
            key = (run["method"], run["dataset"])
        costs = [json.loads(line)["cost"] for line in q.read_text().splitlines() if line.strip()]
        if not costs:
            continue
        k = (notebook, *key)
        src = f"{notebook[:2]}/{key[0]} on {key[1]}"
        out.lines[k] = len(costs)
        out.totals[k] = Cost(fmean(c.get("llm_requests", c.get("llm_calls", 0)) for c in costs),
                             fmean(c.get("llm_total_prompt_tokens", c.get("llm_prompt_tokens", 0)) for c in costs),
                             fmean(c.get("llm_total_completion_tokens", c.get("llm_completion_tokens", 0)) for c in costs),
                             src)
    for notebook in ("30_sa_rag_indexing", "40_tcr_qf_kg_construction"):
        f = root / notebook / "summary.json"
        if not f.is_file():
            continue
        for row in json.loads(f.read_text()):
            if "llm_calls" not in row or not row.get("questions"):
                continue
            n, calls = row["questions"], row["llm_calls"]
            per_call = lambda x: x / calls if calls else 0.0   # noqa: E731
            k = (notebook, "extraction", row["dataset"])
            src = f"{notebook} summary, {row['dataset']}, {n} questions"
            out.lines[k] = n
            total = row.get("llm_requests", calls)   # a request that hit the cache: as long as the misses on average
            out.totals[k] = Cost(total / n, per_call(row["prompt_tokens"]) * total / n,
                                 per_call(row["completion_tokens"]) * total / n, src)
    return out


@lru_cache(maxsize=1)
def completion_lengths(root: Path = REFERENCE) -> tuple[tuple[tuple[int, ...], ...], float]:
    """Completion tokens of every request in the committed LLM cache, grouped by request kind (its
    sampling parameters: what kgrag's hf batcher joins into one batch), and the share that hit its cap."""
    groups: dict[str, list[int]] = defaultdict(list)
    capped = n = 0
    for part in sorted((root / "llm-cache").glob("part-*.jsonl.gz")):
        with gzip.open(part, "rt") as fh:
            for line in fh:
                row = json.loads(line)
                d = int(row.get("completion_tokens") or 0)
                try:
                    params = json.loads(row["request"])["params"]
                except (KeyError, ValueError, TypeError):
                    params = {}
                groups[json.dumps(params, sort_keys=True)].append(d)
                cap = params.get("max_tokens")
                n += 1
                capped += bool(cap) and d >= int(cap)
    return tuple(tuple(sorted(g)) for _, g in sorted(groups.items())), (capped / n if n else 0.0)


# ---- the units of each notebook at a profile's sizes ----------------------------------------------
def _n(s: Any, dataset: str, size: Callable[[str], int | None]) -> int:
    """Questions a run answers: the notebook's n, or the whole set when it has fewer (or n is None)."""
    have = size(dataset)
    n = getattr(s, "n", None)
    if n is None:
        if have is None:
            raise ValueError(f"n is null (the whole set) and the size of {dataset} is unknown")
        return have
    return min(n, have) if have else n


def _capped(n: int | None, dataset: str, size: Callable[[str], int | None]) -> int:
    """A per-dataset n (None: the whole set), at most the set's size."""
    have = size(dataset)
    if n is None:
        if have is None:
            raise ValueError(f"n is null (the whole set) and the size of {dataset} is unknown")
        return have
    return min(n, have) if have else n


def _metaqa(name: str, s: Any, p: dict, size) -> list[Unit]:
    if name == "00_quickstart":
        q = _n(s, s.dataset, size)
        return [Unit(name, s.method, s.dataset, q, identity=(s.method, s.hops, s.top_k, s.dataset, q, s.seed))]
    if name == "11_metaqa_parameter_grid":
        out = []
        for ds in s.datasets:
            n, hops, ks = s.column(ds)
            q = _capped(n, ds, size)
            out += [Unit(name, f"N{h}_K{k}", ds, q, identity=(s.method, h, k, ds, q, seed))
                    for h in hops for k in ks for seed in s.seeds]
        return out
    if name == "12_metaqa_baselines":
        n_of = lambda ds: _capped(s.n_of(ds), ds, size)   # noqa: E731
        return [Unit(name, m, ds, n_of(ds), identity=(m, *_nk(m, s), ds, n_of(ds), seed))
                for ds in s.datasets for m in s.methods for seed in s.seeds]
    if name == "13_metaqa_qualitative":
        systems = [s.method] + ([s.baseline] if s.baseline else [])
        return [Unit(name, m, ds, _n(s, ds, size), identity=(m, *_nk(m, s), ds, _n(s, ds, size), s.seed))
                for ds in s.datasets for m in systems]
    return []


def _nk(method: str, s: Any) -> tuple:
    """N and K of a MetaQA system that reads the KG (the others have none)."""
    return (s.hops, s.top_k) if method in ("llm-kg", "kg-rag") else ()


def _kgi(name: str, s: Any, p: dict, size) -> list[Unit]:
    r = getattr(s, "rounds", None)
    ds_units = lambda cfgs, prefix="", **kw: [Unit(name, prefix + c, ds, _n(s, ds, size), **kw)   # noqa: E731
                                              for ds in s.datasets for c in cfgs]
    if name == "21_kg_infused_main":
        out = ds_units(["nor", "vanilla-rag", "vanilla-qe", f"kg-infused_rounds={r}"])
        if s.upper_bound_kg:
            out += ds_units([f"kg-infused_rounds={r}"], "upper-bound/")
        if s.placebo_kg:
            out += [Unit(name, f"placebo/kg-infused_rounds={r}", ds, _n(s, ds, size),
                         identity=(f"kg-infused_rounds={r}", ds, _n(s, ds, size), s.placebo_kg)) for ds in s.datasets]
        return out
    if name == "22_kg_infused_ablation":
        kg = [f"{m}_rounds={r}" for m in ("kg-infused", "kg-qe-only", "kg-aug-only")]
        return ds_units(["vanilla-rag", *kg]) + (ds_units(kg, "upper-bound/") if s.upper_bound_kg else [])
    if name == "23_activation_rounds":
        from kgrag_lib.studies.kg_infused import paper_grid

        return ds_units([g.folder for g in paper_grid(s.rounds, s.main_rounds)])
    if name == "24_retrieval_recall":
        return ds_units(["vanilla-rag", *(f"kg-qe-only_rounds={k}" for k in s.rounds)])
    if name == "25_case_study":
        return ds_units(["vanilla-rag", "vanilla-qe", f"kg-infused_rounds={r}"])
    if name == "27_dpo_training":
        cfgs = [m if m in ("nor", "vanilla-rag", "vanilla-qe") else f"{m}_rounds={r}" for m in s.methods]
        cfgs += [f"{m}_rounds={k}" for k in s.round_sweep for m in ("kg-infused", "kg-qe-only", "kg-aug-only")
                 if f"{m}_rounds={k}" not in cfgs]
        base = [Unit(name, "base/" + c, ds, _n(s, ds, size)) for ds in s.datasets for c in cfgs]
        # the trained model's rows: nothing earlier answered them; they cost what the base model's runs do
        dpo = [Unit(name, "dpo/" + c, ds, _n(s, ds, size), in_process=True) for ds in s.datasets for c in cfgs]
        return base + dpo
    if name == "28_plugins":
        out = []
        if "21" in s.tables:
            out += ds_units(["self-ask", *(f"self-ask-kg-infused_rounds={k}" for k in s.rounds)])
        if "2" in s.tables:
            out += [Unit(name, c, ds, _n(s, ds, size), in_process=True)
                    for ds in s.datasets for c in ["self-rag", *(f"self-rag-kg-infused_rounds={k}" for k in s.rounds)]]
        return out
    return []


def _dpo_data_units(name: str, s: Any, p: dict, size) -> list[Unit]:
    """26: each training question x round: KG-Infused RAG's stages and answer (the committed 2Wiki runs of
    23 at that round count: training questions are not evaluated ones), five further sampled
    candidates (Appendix E's six decodings, the greedy one being the answer request) and one verdict."""
    return [Unit(name, f"dpo-data/kg-infused_rounds={k}", "2wiki", s.n_questions) for k in s.rounds] + \
           [Unit(name, f"dpo-candidates+judge_rounds={k}", "2wiki", s.n_questions) for k in s.rounds]


def _sa_rag(name: str, s: Any, p: dict, size) -> list[Unit]:
    if name == "30_sa_rag_indexing":
        return [Unit(name, "extraction", ds, _n(s, ds, size), independent=True) for ds in s.datasets]
    if name == "31_sa_rag_main":
        cfgs = []
        for m in s.systems:
            cfgs += [f"{m}_top_k={k}" for k in s.dense_top_k] if m in ("naive-rag", "cot-rag") else [m]
        return [Unit(name, c, ds, _n(s, ds, size)) for ds in s.datasets for c in cfgs]
    return []   # 32 and 33 read 30's KG and 31's runs: no LLM request


def _tcr(name: str, s: Any, p: dict, size) -> list[Unit]:
    if name == "40_tcr_qf_kg_construction":
        return [Unit(name, "extraction", ds, _n(s, ds, size), independent=True, identity=(name, ds, _n(s, ds, size)))
                for ds in s.datasets]
    if name == "43_tcr_qf_kg_growth":
        return [Unit(name, s.variant, ds, _n(s, ds, size)) for ds in s.datasets]
    return [Unit(name, m, ds, _n(s, ds, size)) for ds in s.datasets for m in s.systems]


def _cross(name: str, s: Any, p: dict, size) -> list[Unit]:
    """50: every method on one sample; SA-RAG's and TCR-QF's rows on 2Wiki dev200 repeat 31's and 41's runs
    (same questions, KG and settings), Naive and CoT RAG at the profile's top_k."""
    q = _n(s, s.dataset, size)
    top_k = {m: getattr(get_method(m).check_config(profile_section(p, "methods", m), where=m), "top_k", None)
             for m in ("naive-rag", "cot-rag")} if p else {}
    name_of = lambda m: f"{m}_top_k={top_k[m]}" if top_k.get(m) else m   # noqa: E731
    return [Unit(name, m, s.dataset, q, identity=(name_of(m), s.dataset, q)) for m in s.methods]


UNITS: dict[str, Callable[[str, Any, dict, Callable], list[Unit]]] = {
    "00_quickstart": _metaqa, "11_metaqa_parameter_grid": _metaqa, "12_metaqa_baselines": _metaqa,
    "13_metaqa_qualitative": _metaqa,
    **{nb: _kgi for nb in ("21_kg_infused_main", "22_kg_infused_ablation", "23_activation_rounds",
                           "24_retrieval_recall", "25_case_study", "27_dpo_training", "28_plugins")},
    "26_dpo_data": _dpo_data_units,
    **{nb: _sa_rag for nb in ("30_sa_rag_indexing", "31_sa_rag_main", "32_sa_rag_activation", "33_sa_rag_c_sweep")},
    **{nb: _tcr for nb in ("40_tcr_qf_kg_construction", "41_tcr_qf_main", "42_tcr_qf_ablation", "43_tcr_qf_kg_growth")},
    "50_cross_method": _cross,
}
NO_LLM = ("10_metaqa_kb", "20_kg_preprocessing", "32_sa_rag_activation", "33_sa_rag_c_sweep", "90_report")


@dataclass
class Priced:
    """A unit, its cost per question-run, and whether an earlier unit already sent its requests."""

    unit: Unit
    per_run: Cost
    replayed: bool = False

    def _total(self, x: float) -> float:
        return 0.0 if self.replayed else x * self.unit.question_runs

    @property
    def requests(self) -> float:
        return self._total(self.per_run.requests)

    @property
    def prompt_tokens(self) -> float:
        return self._total(self.per_run.prompt_tokens)

    @property
    def completion_tokens(self) -> float:
        return self._total(self.per_run.completion_tokens)


@dataclass
class StudyWorkload:
    profile: str
    notebooks: dict[str, list[Priced]]
    capped_share: float          # of the committed requests, the share that stopped at their max_tokens
    committed_root: str

    def question_runs(self, notebook: str) -> int:
        return sum(p.unit.question_runs for p in self.notebooks.get(notebook, []))


# Questions per evaluation set (the default split `load_questions` reads), counted from the data root on
# 2026-12-07: a notebook's n above this uses the whole set. Written here so the table does not depend on
# which data a machine holds; `--sizes-from-data` counts them again.
QUESTION_SET_SIZES = {"metaqa-1hop": 9947, "metaqa-2hop": 14872, "metaqa-3hop": 14274, "hotpotqa": 500,
                      "2wiki": 354, "musique": 200, "bamboogle": 125, "strategyqa": 2290}


def dataset_sizes(data_root: str | None = None) -> Callable[[str], int | None]:
    """Questions per dataset read from the data (None where its files are not at hand: n is then taken as given)."""
    @lru_cache(maxsize=None)
    def size(ds: str) -> int | None:
        from kgrag_lib.data.registry import load_questions

        try:
            return len(load_questions(ds, root=data_root, n=None, seed=0))
        except Exception:   # noqa: BLE001 -- a missing or unreadable set: fall back to n, said by None
            return None
    return size


def study_workload(profile: str = "gpu-paper", notebooks: Iterable[str] | None = None, *,
                   committed: CommittedCosts | None = None, root: Path = REFERENCE,
                   size: Callable[[str], int | None] | None = None) -> StudyWorkload:
    """Every notebook's units at `profile`'s sizes, each priced from the committed runs."""
    from kgrag_lib.studies import NOTEBOOKS, load_profile, notebook_settings

    committed = committed or read_committed(root)
    size = size or QUESTION_SET_SIZES.get
    prof = load_profile(profile)
    wanted = set(notebooks) if notebooks else set(NOTEBOOKS)
    out: dict[str, list[Priced]] = {}
    seen: set[tuple] = set()
    for nb in NOTEBOOKS:   # study order: what a notebook repeats was sent by an earlier one
        if nb not in wanted or nb in NO_LLM or nb not in UNITS:
            continue
        units = UNITS[nb](nb, notebook_settings(nb, prof), prof, size)
        out[nb] = []
        for u in units:
            out[nb].append(Priced(u, stated_cost(u, committed) or committed.lookup(u), replayed=u.key in seen))
            seen.add(u.key)
    return StudyWorkload(profile, out, completion_lengths(root)[1], str(root))


def stated_cost(u: Unit, committed: CommittedCosts) -> Cost | None:
    """Units no committed run covers, priced from stated assumptions over committed pieces (None: look up).

    26's candidates and verdict per input: five more answer-sized requests (Appendix E's six decodings,
    the greedy one being the evaluation request; answer-sized = 23's vanilla-rag request on 2wiki, one
    per question, its prompt the passages) and one judge request (that prompt with the six candidates,
    at most 64 new tokens).
    Self-RAG (28, Table 2; its 7B model needs a GPU, so nothing is committed): k_p candidates per
    question, each prompt the question and one passage (~160 tokens: a 100-word psgs_w100 passage and
    the instruction), each decoded to its cap (`max_tokens`, 100); + KG-Infused adds the KG stages of
    its round count, the committed kg-qe-only runs at that count (their one answer included)."""
    if u.config.startswith("dpo-candidates+judge"):
        ans = committed.lookup(Unit("23_activation_rounds", "vanilla-rag", "2wiki", 1))
        p, d = ans.prompt_tokens / max(ans.requests, 1e-9), ans.completion_tokens / max(ans.requests, 1e-9)
        return Cost(6.0, 5 * p + (p + 6 * d), 5 * d + 64.0,
                    "5 sampled candidates + 1 verdict, answer-sized from 23/vanilla-rag on 2wiki (stated)")
    if u.config.startswith("self-rag"):
        from kgrag_lib.methods.kg_infused.self_rag import SelfRAGConfig

        cfg = SelfRAGConfig()
        base = Cost(cfg.k_p, cfg.k_p * 160.0, cfg.k_p * float(cfg.max_tokens),
                    f"Self-RAG: k_p={cfg.k_p} x (160 prompt + {cfg.max_tokens} new tokens), stated")
        m = ROUNDS.match(u.config)
        if not m:
            return base
        kg = committed.lookup(Unit(u.notebook, f"kg-qe-only_rounds={m['r']}", u.dataset, 1))
        return Cost(base.requests + kg.requests, base.prompt_tokens + kg.prompt_tokens,
                    base.completion_tokens + kg.completion_tokens, base.source + " + " + kg.source)
    return None
