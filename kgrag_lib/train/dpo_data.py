"""DPO data of KG-Infused RAG's knowledge-augmentation stage (Wu et al. §3.7, Appendix E).

For each sampled 2Wiki question that no table evaluates, and each activation-round count
r in `rounds`, the pipeline runs up to the KG-guided augmentation stage (seed entities →
activation with `rounds=r` → summary → KG-based query expansion → retrieval → note) through
the stage methods of `KGInfusedRAG`, so every request is byte-identical to an evaluation
run's and the LLM cache shares them. The augmentation request (eq. 10) is then sampled
with each decoding setting of Appendix E (temperature, top-p; the seed stays fixed, so
each candidate is cached too). A judge (GPT-4o-mini in the paper; here any LLM spec,
default the generator itself) sees the question, the note, the facts and the distinct
candidates and names the best and the worst (Table 17's task, our wording). Each verdict
with best != worst is one preference pair (x, y+, y-) of eq. 12.

Outputs in `out_dir`:
- `pairs.jsonl`: one pair per line in trl's conversational form (`prompt`: the chat
  messages the augmentation stage sends; `chosen` / `rejected`: one assistant message)
  plus metadata (qid, round, decodings of chosen / rejected, generator, judge);
  `load_dpo_dataset` returns the three trl columns as a `datasets.Dataset`.
- `questions.jsonl`: one line per finished question: every input's candidates, verdict
  and outcome (a pair, or the reason it was dropped). Resume reads it.
- `manifest.json`: settings, sampled qids, exclusion, versions, git commit.
- `stats.csv` / `stats.json`: Table 19's layout (pairs per round D_KA^r and in total)
  with questions, inputs, drop counts by reason and average lengths, beside the paper's rows.

Both JSONL files are appended and fsynced question by question: a killed build loses at
most the question in flight, and a rerun into the same folder skips finished questions
(without a single LLM request) after checking the manifest records the same settings.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from ..concurrency import as_they_finish, fan_out, parallel_map
from ..config import RunConfig, available_profiles, make_config, opt, profile_section
from ..data.registry import DATASETS, get_spec, load_questions
from ..errors import ConfigError, MissingDataError
from ..experiment import make_context, resolve_model
from ..jsonl import JsonlAppender, atomic_json, read_jsonl, rewrite_jsonl
from ..llm.base import LLM, PromptTooLongError, SamplingParams
from ..llm.parsing import LLMParseError, parse_json
from ..methods.base import RunContext
from ..methods.kg_infused import stages
from ..methods.kg_infused.pipeline import KGInfusedConfig, KGInfusedRAG
from ..progress import progress as progress_bar
from ..provenance import manifest as provenance_manifest
from ..records import Question
from ..methods.prompt_digest import digests as prompt_digests
from ..rundir import PROMPTS_KEY, check_resume, folder_lock, recorded_config
from ..studies import NOTEBOOKS
from ..studies.base import resolve
from . import judge_prompts

DATASET = "2wiki"
PAIRS_FILE = "pairs.jsonl"
QUESTIONS_FILE = "questions.jsonl"
MANIFEST_FILE = "manifest.json"
STATS_CSV = "stats.csv"
STATS_JSON = "stats.json"
TRL_COLUMNS = ("prompt", "chosen", "rejected")

# Appendix E: the six (temperature, top-p) decoding settings of the candidates.
PAPER_DECODINGS = [[0.0, 1.0], [0.3, 0.95], [0.5, 0.9], [0.7, 0.9], [0.9, 0.8], [1.0, 0.7]]
# Table 19: preference pairs kept per round (D_KA^1, D_KA^2) and in total, from 1,500 inputs per round.
PAPER_TABLE19 = {"LLaMA3.1-8B": {1: 1449, 2: 1460, "total": 2909},
                 "Qwen2.5-7B": {1: 1202, 2: 1259, "total": 2461}}
PAPER_INPUTS_PER_ROUND = 1500

# Why an input gave no pair. `stage_error`: a stage before the candidates failed on this input
# (unparsable model output, a prompt over the context window); the build goes on.
DROP_REASONS = ("identical_candidates", "tie", "unparsable_verdict", "invalid_verdict", "stage_error")


# ---- settings ------------------------------------------------------------------------------
@dataclass
class DPODataConfig:
    """Settings of one DPO data build (§3.7, Appendix E; defaults: the paper's where it gives them)."""

    n_questions: int = opt(100, "2Wiki questions to sample from the pool of non-evaluated ones (the paper: 1,500 "
                                "training questions; fewer when the pool is smaller, said in the stats)")
    seed: int = opt(0, "seed of the question sample, of the KG-Infused stages (triple sampling, LLM seed) and of "
                       "the candidates; keep the evaluation runs' seed so their requests are cache hits")
    split: str = opt("dev4000", "2Wiki question file to draw from (corpus354, dev200, dev4000); dev4000 because "
                                "the shipped gpu-paper profile evaluates all of corpus354")
    rounds: list[int] = opt([1, 2], "activation-round counts r whose augmentation inputs are collected (D_KA^r)")
    decodings: list[list[float]] = opt(PAPER_DECODINGS, "candidate decoding settings [temperature, top_p], one "
                                                        "candidate each (Appendix E's six)")
    max_tokens: int | None = opt(None, "max new tokens of a candidate (None: the KG-Infused max_tokens, so the "
                                       "greedy candidate is the evaluation run's request)")
    judge: str | None = opt(None, "LLM spec of the judge (None: the generator itself; the paper: gpt-4o-mini)")
    judge_max_tokens: int = opt(64, "max new tokens of a verdict")
    shuffle_candidates: bool = opt(True, "show the candidates to the judge in a seeded random order per input "
                                         "(against position bias) instead of the decoding order")
    kg_infused: dict[str, Any] = opt({}, "KGInfusedConfig overrides (kg, corpus, k_p, k_e, max_tokens, caps, ...); "
                                         "`rounds` comes from the rounds field")
    exclude_profiles: list[str] | None = opt(None, "profiles (names or YAML paths) whose 2Wiki samples count as "
                                                   "evaluated (None: every shipped profile)")
    exclude_results: list[str] = opt([], "result folders (searched for predictions.jsonl) or prediction files "
                                         "whose qids count as evaluated too")
    length_unit: str = opt("tokens", "unit of the average lengths in the stats: tokens (the generator's "
                                     "count_tokens) or words")

    def validate(self) -> None:
        def need(ok: bool, name: str, expected: str) -> None:
            if not ok:
                raise ConfigError(f"parameter {name!r} must be {expected}, got {getattr(self, name)!r}")

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        need(is_int(self.n_questions) and self.n_questions >= 1, "n_questions", "an integer >= 1")
        need(is_int(self.seed), "seed", "an integer")
        splits = DATASETS[DATASET].splits
        need(self.split in splits, "split", f"one of the 2wiki splits {', '.join(splits)}")
        need(isinstance(self.rounds, list) and bool(self.rounds) and all(is_int(r) and r >= 1 for r in self.rounds)
             and len(set(self.rounds)) == len(self.rounds), "rounds", "a non-empty list of distinct integers >= 1")
        ok = isinstance(self.decodings, list) and bool(self.decodings) and all(
            isinstance(d, (list, tuple)) and len(d) == 2 and all(is_num(x) for x in d) and d[0] >= 0 and 0 < d[1] <= 1
            for d in self.decodings)
        need(ok and len({tuple(map(float, d)) for d in self.decodings}) == len(self.decodings), "decodings",
             "a non-empty list of distinct [temperature >= 0, top_p in (0, 1]] pairs")
        need(self.max_tokens is None or (is_int(self.max_tokens) and self.max_tokens >= 1), "max_tokens",
             "an integer >= 1 or null")
        need(self.judge is None or (isinstance(self.judge, str) and self.judge.strip() != ""), "judge",
             "an LLM spec string or null (the generator)")
        need(is_int(self.judge_max_tokens) and self.judge_max_tokens >= 1, "judge_max_tokens", "an integer >= 1")
        need(isinstance(self.shuffle_candidates, bool), "shuffle_candidates", "true or false")
        need(isinstance(self.kg_infused, dict), "kg_infused", "a mapping of KGInfusedConfig fields")
        if "rounds" in self.kg_infused:
            raise ConfigError("parameter 'kg_infused' must not set 'rounds': the round counts are the 'rounds' "
                              f"field of DPODataConfig (got kg_infused.rounds={self.kg_infused['rounds']!r})")
        try:
            self.kg_infused_config(self.rounds[0])
        except ConfigError as exc:
            raise ConfigError(f"parameter 'kg_infused': {exc}") from None
        need(self.exclude_profiles is None or (isinstance(self.exclude_profiles, list)
                                               and all(isinstance(p, str) and p for p in self.exclude_profiles)),
             "exclude_profiles", "a list of profile names / YAML paths, or null (every shipped profile)")
        need(isinstance(self.exclude_results, list) and all(isinstance(p, str) and p for p in self.exclude_results),
             "exclude_results", "a list of result folders or prediction files")
        need(self.length_unit in ("tokens", "words"), "length_unit", "'tokens' or 'words'")

    def kg_infused_config(self, rounds: int) -> KGInfusedConfig:
        """The KG-Infused settings of the inputs with `rounds` activation rounds."""
        return make_config(KGInfusedConfig, self.kg_infused, {"rounds": rounds}, where="kg_infused")


def make_dpo_config(*layers: dict[str, Any] | None) -> DPODataConfig:
    """A checked DPODataConfig from layered dicts (later wins); unknown keys and bad values refused."""
    cfg = make_config(DPODataConfig, *layers, where="DPO data settings")
    cfg.validate()
    return cfg


def config_from_profile(profile: str | Path | dict = "cpu-smoke", **overrides: Any) -> tuple[DPODataConfig, RunContext]:
    """Settings and context that match a profile's KG-Infused runs (its `methods.kg-infused`
    section, `run.seed`, model and embedder), so the build reuses their cached requests."""
    from ..studies import load_profile

    prof = load_profile(profile)
    run = make_config(RunConfig, profile_section(prof, "run"), where=f"profile {prof['name']!r}, run")
    run.model = resolve_model(prof, "kg-infused")
    kgi = {k: v for k, v in profile_section(prof, "methods", "kg-infused").items() if k != "rounds"}
    cfg = make_dpo_config({"seed": run.seed, "kg_infused": kgi}, overrides)
    return cfg, make_context(run, prof)


# ---- which questions are evaluated ------------------------------------------------------------
@dataclass
class Exclusion:
    """The 2Wiki qids some table evaluates, and where each sample came from."""

    qids: set[str] = field(default_factory=set)
    samples: list[dict[str, Any]] = field(default_factory=list)   # one per (split, n, seed) draw
    result_files: list[str] = field(default_factory=list)
    missing_splits: list[str] = field(default_factory=list)       # split files absent here: nothing drawn

    def summary(self) -> dict[str, Any]:
        return {"evaluated_qids": len(self.qids), "samples": self.samples, "result_files": self.result_files,
                "missing_splits": self.missing_splits}


def _notebook_draws(prof: dict[str, Any]) -> list[tuple[str, str | None, int | None, int]]:
    """(source, split, n, seed) of every 2Wiki sample the profile draws: its run section (a
    `kgrag run --dataset 2wiki`) and each notebook whose resolved datasets include 2wiki."""
    run = make_config(RunConfig, profile_section(prof, "run"), where=f"profile {prof['name']!r}, run")
    draws = [(f"profile {prof['name']}: run", run.split, run.n, run.seed)]
    for name, cls in NOTEBOOKS.items():
        s = resolve(cls, name, prof, {})
        datasets = getattr(s, "datasets", None)
        if not isinstance(datasets, list):
            one = getattr(s, "dataset", None)
            datasets = [one] if isinstance(one, str) else []
        if DATASET not in datasets or not (hasattr(s, "n") or hasattr(s, "seed") or hasattr(s, "seeds")):
            continue
        split_of = getattr(s, "split", None)
        split = split_of(DATASET) if callable(split_of) else (split_of if isinstance(split_of, str) else run.split)
        n = getattr(s, "n", run.n)
        seeds = getattr(s, "seeds", None) or [getattr(s, "seed", None) if getattr(s, "seed", None) is not None
                                              else run.seed]
        draws += [(f"profile {prof['name']}: notebook {name}", split, n, int(seed)) for seed in seeds]
    return draws


def _result_files(paths: Iterable[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(p).expanduser()
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += sorted(path.rglob("predictions.jsonl"))
        else:
            raise ConfigError(f"parameter 'exclude_results': {path} is neither a result folder nor a predictions "
                              f"file")
    return out


def _qids_in(path: Path) -> set[str]:
    """2Wiki qids of a predictions file (rows of other datasets skipped; a torn last line ignored)."""
    return {row["qid"] for row in read_jsonl(path, torn_tail=True).rows
            if isinstance(row.get("qid"), str) and row.get("dataset", DATASET) == DATASET}


def evaluated_qids(profiles: list[str] | None = None, results: Iterable[str] = (),
                   root: str | Path | None = None) -> Exclusion:
    """Every 2Wiki qid a table evaluates: the union of the seeded samples the profiles draw
    (each (split, n, seed) drawn exactly as `load_questions` draws it: a smaller n is not a
    prefix of a larger one with the same seed) and the qids in the given result files."""
    from ..studies import load_profile

    ex = Exclusion()
    drawn: dict[tuple[str, int | None, int], list[str]] = {}
    default = get_spec(DATASET).default_split
    for name in (available_profiles() if profiles is None else profiles):
        prof = load_profile(name)
        for source, split, n, seed in _notebook_draws(prof):
            key = (split or default, n, seed)
            if key not in drawn:
                try:
                    drawn[key] = [q.qid for q in load_questions(DATASET, split=key[0], n=n, seed=seed, root=root)]
                except MissingDataError:
                    drawn[key] = []
                    if key[0] not in ex.missing_splits:
                        ex.missing_splits.append(key[0])
            ex.qids.update(drawn[key])
            ex.samples.append({"source": source, "split": key[0], "n": n, "seed": seed, "questions": len(drawn[key])})
    for f in _result_files(results):
        ex.qids.update(_qids_in(f))
        ex.result_files.append(str(f))
    return ex


def sample_questions(cfg: DPODataConfig, exclusion: Exclusion, root: str | Path | None = None
                     ) -> tuple[list[Question], dict[str, int]]:
    """The seeded sample of `n_questions` from the split's questions no table evaluates."""
    pool = load_questions(DATASET, split=cfg.split, root=root)
    free = [q for q in pool if q.qid not in exclusion.qids]
    counts = {"pool": len(pool), "excluded_evaluated": len(pool) - len(free), "available": len(free)}
    if not free:
        raise ConfigError(f"parameter 'split': every one of the {len(pool)} questions of 2wiki {cfg.split} is "
                          f"evaluated by some profile or result folder; use split dev4000 (or narrow "
                          f"exclude_profiles)")
    idx = np.random.default_rng(cfg.seed).choice(len(free), size=min(cfg.n_questions, len(free)), replace=False)
    return [free[i] for i in idx.tolist()], counts


# ---- one input: the stages, the candidates, the verdict ----------------------------------------
def _key(text: str) -> str:
    return " ".join(text.split())


def _as_id(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("[").rstrip("]").strip().isdigit():
        return int(v.strip().lstrip("[").rstrip("]"))
    return None


def parse_verdict(text: str, ids: list[int]) -> tuple[str, int | None, int | None]:
    """(status, best, worst) of a judge output: `ok`, `tie`, `unparsable_verdict` (no JSON
    object with both ids as integers) or `invalid_verdict` (an id that was not shown)."""
    obj = parse_json(text)
    if isinstance(obj, list) and len(obj) == 1 and isinstance(obj[0], dict):
        obj = obj[0]
    if not isinstance(obj, dict):
        return "unparsable_verdict", None, None
    best, worst = _as_id(obj.get("best_id")), _as_id(obj.get("worst_id"))
    if best is None or worst is None:
        return "unparsable_verdict", best, worst
    if best not in ids or worst not in ids:
        return "invalid_verdict", best, worst
    return ("tie" if best == worst else "ok"), best, worst


@dataclass
class StageInputs:
    """What the augmentation stage receives for one question at one round count."""

    messages: list[dict[str, str]]
    note: str
    summary: str
    expanded_query: str
    passages: list[str]
    activated: list[str]
    subgraph: list[str]


def augmentation_inputs(method: KGInfusedRAG, question: Question) -> StageInputs:
    """The kg-infused pipeline (§3.4-3.6) up to eq. 10, through the same stage methods and in
    the same order as `KGInfusedRAG.answer`, so each request equals an evaluation run's."""
    q = question.question
    corpus = method.corpus_for(question)
    qvec = method.embed(q)
    trace: dict[str, Any] = {}
    summary, act = method.kg_facts(q, trace, qvec)
    got = method.retrieve_expanded(corpus, q, summary, trace, qvec)
    q2 = trace["expanded_query"]
    note = method.write_note(q, got.passages)
    store = method.kg.store
    return StageInputs(stages.augment_request(q, note, summary or ""), note, summary, q2, [p.pid for p in got.passages],
                       [store.entity_name(e) for e in act.entity_ids],
                       [store.triple(t).verbalize() for t in act.triple_ids])


def _decoding(d: Iterable[float]) -> list[float]:
    t, p = d
    return [float(t), float(p)]


def build_input(method: KGInfusedRAG, judge: Any, question: Question, rounds: int, cfg: DPODataConfig,
                judge_name: str, generator_name: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One input x: its candidates and verdict. Returns (record for questions.jsonl, pair or None)."""
    rec: dict[str, Any] = {"round": rounds}
    try:
        inp = augmentation_inputs(method, question)
    except (LLMParseError, PromptTooLongError) as exc:
        rec.update(status="stage_error", error=f"{type(exc).__name__}: {exc}")
        return rec, None
    rec.update(activated=inp.activated, subgraph=inp.subgraph, summary=inp.summary,
               expanded_query=inp.expanded_query, passages=inp.passages, note=inp.note)
    base = method.params()
    if cfg.max_tokens is not None:
        base = base.replace(max_tokens=cfg.max_tokens)
    groups: dict[str, dict[str, Any]] = {}
    empty: list[list[float]] = []

    def decode(d: Iterable[float]) -> tuple[float, float, str | PromptTooLongError]:
        t, p = _decoding(d)
        try:
            return t, p, method.llm.generate(inp.messages, base.replace(temperature=t, top_p=p)).strip()
        except PromptTooLongError as exc:
            return t, p, exc

    # the decodings are independent requests: a server gets them together
    for t, p, text in parallel_map(decode, cfg.decodings, fan_out(method.llm)):
        if isinstance(text, PromptTooLongError):
            rec.update(status="stage_error", error=f"{type(text).__name__}: {text}")
            return rec, None
        if not text:
            empty.append([t, p])
            continue
        groups.setdefault(_key(text), {"text": text, "decodings": []})["decodings"].append([t, p])
    distinct = list(groups.values())
    rec.update(candidates=distinct, empty_candidates=empty, n_candidates=len(cfg.decodings), n_distinct=len(distinct))
    if len(distinct) < 2:
        rec["status"] = "identical_candidates"
        return rec, None
    order = list(range(len(distinct)))
    if cfg.shuffle_candidates:
        random.Random(f"{cfg.seed}|{question.qid}|{rounds}").shuffle(order)
    shown = [distinct[i] for i in order]
    ids = list(range(1, len(shown) + 1))
    msgs = judge_prompts.judge_request(question.question, inp.note, inp.summary, ids, [c["text"] for c in shown])
    params = SamplingParams(max_tokens=cfg.judge_max_tokens, temperature=0.0, seed=cfg.seed,
                            json_schema=judge_prompts.verdict_schema(ids))
    try:
        raw = judge.generate(msgs, params)
    except PromptTooLongError as exc:
        rec.update(status="stage_error", error=f"judge: {type(exc).__name__}: {exc}")
        return rec, None
    status, best, worst = parse_verdict(raw, ids)
    rec.update(shown_order=[distinct[i]["decodings"][0] for i in order], verdict=raw, best_id=best, worst_id=worst)
    if status != "ok":
        rec["status"] = status
        return rec, None
    chosen, rejected = shown[best - 1], shown[worst - 1]
    rec["status"] = "pair"
    pair = {
        "prompt": inp.messages,
        "chosen": [{"role": "assistant", "content": chosen["text"]}],
        "rejected": [{"role": "assistant", "content": rejected["text"]}],
        "qid": question.qid, "round": rounds,
        "chosen_decodings": chosen["decodings"], "rejected_decodings": rejected["decodings"],
        "n_distinct": len(distinct), "generator": generator_name, "judge": judge_name,
    }
    return rec, pair


# ---- files ------------------------------------------------------------------------------------
def load_dpo_dataset(path: str | Path):
    """The pairs of `pairs.jsonl` (or of a build folder) as a `datasets.Dataset` with only trl's
    columns `prompt`, `chosen`, `rejected` (conversational: trl applies the chat template). A
    torn last line from a killed build is skipped with a warning."""
    from datasets import Dataset

    path = Path(path)
    if path.is_dir():
        path = path / PAIRS_FILE
    if not path.is_file():
        raise MissingDataError(f"{path}: no DPO pairs file; build one with build_dpo_data")
    read = read_jsonl(path, torn_tail=True)
    rows, torn = read.rows, read.torn
    if torn:
        print(f"kgrag: warning: {path}: skipped an incomplete last line (a build was interrupted)", file=sys.stderr)
    bad = [i for i, r in enumerate(rows, 1) if not all(k in r for k in TRL_COLUMNS)]
    if bad:
        raise ConfigError(f"{path}: line {bad[0]} lacks one of {', '.join(TRL_COLUMNS)}; expected pairs written by "
                          f"build_dpo_data")
    return Dataset.from_list([{k: r[k] for k in TRL_COLUMNS} for r in rows])


# ---- statistics -------------------------------------------------------------------------------
def _length_fn(unit: str, llm: Any) -> tuple[Callable[[str], int], str]:
    if unit == "words":
        return (lambda s: len(s.split())), "words (whitespace-separated)"
    estimated = isinstance(llm, LLM) and type(llm).count_tokens is LLM.count_tokens
    how = f"tokens of {getattr(llm, 'name', 'the generator')}" + (" (estimated: 4 characters per token)"
                                                                   if estimated else "'s tokenizer")
    return llm.count_tokens, how + ", message contents without the chat template"


def _pair_key(p: dict[str, Any]) -> str:
    return json.dumps([p["prompt"], p["chosen"], p["rejected"]], sort_keys=True, ensure_ascii=False)


def table19(records: list[dict[str, Any]], pairs: list[dict[str, Any]], rounds: list[int], count: Callable[[str], int],
            unit: str):
    """Table 19's layout: columns D_KA^r per round and D_KA (their union); rows our counts
    (questions, inputs, pairs, drops by reason, average lengths) and the paper's pair counts."""
    import pandas as pd

    cols = [f"D_KA^{r}" for r in rounds] + ["D_KA"]
    rows: dict[str, dict[str, Any]] = {}

    def put(label: str, per_round: dict[int, Any], total: Any) -> None:
        rows[label] = {**{f"D_KA^{r}": per_round.get(r) for r in rounds}, "D_KA": total}

    inputs = [(rec["qid"], inp) for rec in records for inp in rec["inputs"]]
    put("questions", {r: len({q for q, i in inputs if i["round"] == r}) for r in rounds}, len(records))
    put("inputs", {r: sum(i["round"] == r for _, i in inputs) for r in rounds}, len(inputs))
    put("pairs", {r: sum(p["round"] == r for p in pairs) for r in rounds}, len(pairs))
    # A small model often selects no new triple in a later round, so that round's input (and pair)
    # repeats an earlier one's: D_KA as a set holds each such pair once.
    put("distinct pairs", {r: len({_pair_key(p) for p in pairs if p["round"] == r}) for r in rounds},
        len({_pair_key(p) for p in pairs}))
    for reason in DROP_REASONS:
        put(f"dropped: {reason}", {r: sum(i["round"] == r and i["status"] == reason for _, i in inputs)
                                   for r in rounds}, sum(i["status"] == reason for _, i in inputs))
    texts = {"prompt": lambda p: "\n".join(m["content"] for m in p["prompt"]),
             "chosen": lambda p: p["chosen"][0]["content"], "rejected": lambda p: p["rejected"][0]["content"]}
    lengths = {k: [(p["round"], count(f(p))) for p in pairs] for k, f in texts.items()}
    for k, vals in lengths.items():
        def avg(xs: list[int]) -> float | None:
            return round(float(np.mean(xs)), 1) if xs else None
        put(f"avg {k} {unit}", {r: avg([n for rr, n in vals if rr == r]) for r in rounds}, avg([n for _, n in vals]))
    for model, counts in PAPER_TABLE19.items():
        put(f"pairs (paper, {model})", {r: counts.get(r) for r in rounds}, counts["total"] if
            sorted(rounds) == [1, 2] else None)
    put("inputs (paper)", {r: PAPER_INPUTS_PER_ROUND for r in rounds if r in (1, 2)},
        2 * PAPER_INPUTS_PER_ROUND if sorted(rounds) == [1, 2] else None)
    return pd.DataFrame(list(rows.values()), index=list(rows), columns=cols, dtype=object)  # counts stay integers


# ---- the build --------------------------------------------------------------------------------
@dataclass
class DPOData:
    """Where a build wrote its files, and its statistics."""

    out_dir: Path
    pairs_path: Path
    questions_path: Path
    manifest_path: Path
    stats_csv: Path
    stats_json: Path
    stats: Any                    # pandas DataFrame in Table 19's layout
    drops: dict[str, int]
    summary: dict[str, Any]

    @property
    def n_pairs(self) -> int:
        return int(self.summary["pairs"])

    def dataset(self):
        """The pairs as trl reads them (`load_dpo_dataset`)."""
        return load_dpo_dataset(self.pairs_path)


def _judge_llm(cfg: DPODataConfig, ctx: RunContext, judge_llm: Any) -> Any:
    if judge_llm is not None:
        return judge_llm
    if cfg.judge is None or cfg.judge == ctx.model:
        return ctx.llm
    from ..llm import load_llm

    return ctx.memo(f"dpo-judge:{cfg.judge}",
                    lambda: load_llm(cfg.judge, cache_path=ctx.llm_cache_path))


# the prompts DPO data is made with: the KG-Infused stages' and the judge's (their digests are part of its identity)
DPO_PROMPT_MODULES = ("kg_infused.prompts", "train.judge_prompts")


def _identity(cfg: DPODataConfig, ctx: RunContext, judge: Any, qids: list[str]) -> dict[str, Any]:
    """What the files depend on; a resume must find the same (the exclusion lists only act
    through `qids`, so moving a result folder does not block a resume); the prompts' wording too."""
    dpo = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("exclude_profiles", "exclude_results",
                                                                          "length_unit")}
    kgi = dataclasses.asdict(cfg.kg_infused_config(cfg.rounds[0]))
    kgi.pop("rounds")
    llm = ctx.llm
    emb = ctx.embedder
    return json.loads(json.dumps({
        "dpo": dpo, "kg_infused": kgi,
        "generator": {"spec": ctx.model, "name": getattr(llm, "name", None), "identity": getattr(llm, "identity", None)},
        "judge": {"spec": cfg.judge, "name": getattr(judge, "name", None), "identity": getattr(judge, "identity", None)},
        "embedder": getattr(emb, "identity", ctx.embedder_spec),
        "qids": qids,
        PROMPTS_KEY: prompt_digests(DPO_PROMPT_MODULES),
    }, default=str))


def build_dpo_data(cfg: DPODataConfig, ctx: RunContext, out_dir: str | Path, progress: bool = True, *,
                   overwrite: bool = False, judge_llm: Any = None, kg_source: Any = None,
                   corpus_loader: Callable[[str], Any] | None = None) -> DPOData:
    """Build (or resume) the DPO pairs of §3.7 into `out_dir` and return their paths and stats.

    `ctx` supplies the generator (`ctx.llm`), embedder, data root and caches. `judge_llm` is an
    already built judge (else `cfg.judge` is loaded, else the generator judges). `kg_source`
    and `corpus_loader` replace the KG / corpus lookups of KGInfusedRAG (tests, notebooks that
    hold them). A rerun into the same folder skips finished questions; other settings are
    refused (StaleRunError) unless `overwrite`.
    """
    if not isinstance(cfg, DPODataConfig):
        raise ConfigError(f"cfg: expected a DPODataConfig (make_dpo_config(...)), got {type(cfg).__name__}")
    cfg.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    exclusion = evaluated_qids(cfg.exclude_profiles, cfg.exclude_results, ctx.data_root)
    questions, counts = sample_questions(cfg, exclusion, ctx.data_root)
    judge = _judge_llm(cfg, ctx, judge_llm)
    gen_name = str(getattr(ctx.llm, "name", ctx.model))
    judge_name = str(getattr(judge, "name", cfg.judge or ctx.model))
    identity = _identity(cfg, ctx, judge, [q.qid for q in questions])
    pairs_path, q_path = out / PAIRS_FILE, out / QUESTIONS_FILE
    with folder_lock(out):
        read_q = read_jsonl(q_path, torn_tail=True)
        records = read_q.rows
        prev = check_resume(out, identity, len(records), overwrite, items="finished DPO-data questions",
                            kind="DPO data", remedy="use another out_dir, or overwrite=True")
        if prev is None:
            records = []
            for f in (PAIRS_FILE, QUESTIONS_FILE, STATS_CSV, STATS_JSON):
                (out / f).unlink(missing_ok=True)
        finished = {r["qid"] for r in records}
        read_p = read_jsonl(pairs_path, torn_tail=True)
        pairs = read_p.rows
        kept = [p for p in pairs if p.get("qid") in finished]  # pairs of a question in flight are redone
        if read_q.torn:
            rewrite_jsonl(q_path, records)
        if read_p.torn or len(kept) != len(pairs):
            rewrite_jsonl(pairs_path, kept)
        pairs = kept
        man = provenance_manifest(recorded_config(prev, identity, len(records)))
        man.update({"exclusion": exclusion.summary(), "question_pool": counts, "files": {
            "pairs": PAIRS_FILE, "questions": QUESTIONS_FILE, "stats": [STATS_CSV, STATS_JSON]}})
        if prev is not None:
            man["resumed_from"] = prev.get("started")
            man["started"] = prev.get("started", man["started"])
        atomic_json(out / MANIFEST_FILE, man)

        methods = {r: KGInfusedRAG("kg-infused", cfg.kg_infused_config(r), ctx, seed=cfg.seed, kg_source=kg_source,
                                   corpus_loader=corpus_loader) for r in cfg.rounds}
        todo = [q for q in questions if q.qid not in finished]
        t0 = time.perf_counter()
        usage0 = ctx.llm.usage.snapshot() if hasattr(ctx.llm, "usage") else None
        def build(q: Question) -> tuple[dict[str, Any], list[dict[str, Any]]]:
            rec = {"qid": q.qid, "question": q.question, "answers": list(q.answers), "inputs": [],
                   "generator": gen_name, "judge": judge_name}
            new_pairs = []
            for r in cfg.rounds:
                inp, pair = build_input(methods[r], judge, q, r, cfg, judge_name, gen_name)
                rec["inputs"].append(inp)
                if pair is not None:
                    new_pairs.append(pair)
            return rec, new_pairs

        workers = fan_out(ctx.llm)
        with JsonlAppender(pairs_path) as pairs_log, JsonlAppender(q_path) as q_log:
            bar = progress_bar(total=len(questions), initial=len(questions) - len(todo), desc="DPO data", unit="q",
                               disable=not progress)
            with bar:
                for _, (rec, new_pairs) in as_they_finish(build, todo, workers):
                    pairs_log.extend(new_pairs)  # pairs first: a question counts as done once its record is written
                    q_log.append(rec)
                    pairs += new_pairs
                    records.append(rec)
                    bar.update(1)
                    bar.set_postfix(pairs=len(pairs))
        # questions finish in any order with several in flight; the files keep the sample's order,
        # which is the order DPO training reads the pairs in
        rank = {q.qid: i for i, q in enumerate(questions)}
        by_rank = sorted(records, key=lambda r: rank.get(r["qid"], len(rank)))
        if by_rank != records:
            records = by_rank
            pairs = sorted(pairs, key=lambda p: rank.get(p["qid"], len(rank)))   # stable: rounds stay in order
            rewrite_jsonl(q_path, records)
            rewrite_jsonl(pairs_path, pairs)
        this_run = {"built": len(todo), "reused": len(questions) - len(todo),
                    "wall_seconds": round(time.perf_counter() - t0, 2)}
        if usage0 is not None:
            used = ctx.llm.usage.since(usage0)
            this_run.update({"generator_calls_sent": used.calls, "generator_cache_hits": used.cache_hits})
        return _finish(cfg, ctx, out, records, pairs, exclusion, counts, gen_name, judge_name, this_run)


def _finish(cfg: DPODataConfig, ctx: RunContext, out: Path, records: list[dict[str, Any]], pairs: list[dict[str, Any]],
            exclusion: Exclusion, counts: dict[str, int], gen_name: str, judge_name: str,
            this_run: dict[str, Any]) -> DPOData:
    count, how = _length_fn(cfg.length_unit, ctx.llm)
    df = table19(records, pairs, cfg.rounds, count, cfg.length_unit)
    statuses = [i["status"] for r in records for i in r["inputs"]]
    drops = {reason: statuses.count(reason) for reason in DROP_REASONS}
    summary = {
        "questions": len(records), "inputs": len(statuses), "pairs": len(pairs), "drops": drops,
        "duplicate_candidates_merged": sum(i.get("n_candidates", 0) - i.get("n_distinct", 0)
                                           - len(i.get("empty_candidates", [])) for r in records for i in r["inputs"]
                                           if "n_distinct" in i),
        "empty_candidates": sum(len(i.get("empty_candidates", [])) for r in records for i in r["inputs"]),
        "requested_questions": cfg.n_questions, **counts, "excluded_evaluated_total": len(exclusion.qids),
        "split": cfg.split, "rounds": cfg.rounds, "decodings": cfg.decodings,
        "generator": gen_name, "judge": judge_name, "length_unit": cfg.length_unit, "lengths_counted_as": how,
        "this_run": this_run,
    }
    if cfg.n_questions > counts["available"]:
        summary["note"] = (f"asked for {cfg.n_questions} questions, only {counts['available']} of 2wiki "
                           f"{cfg.split} are not evaluated")
    stats_csv, stats_json = out / STATS_CSV, out / STATS_JSON
    df.to_csv(stats_csv, index_label="row")
    atomic_json(stats_json, {"table19": json.loads(df.to_json(orient="index")), **summary})
    return DPOData(out, out / PAIRS_FILE, out / QUESTIONS_FILE, out / MANIFEST_FILE, stats_csv, stats_json, df,
                   drops, summary)


__all__ = ["DPODataConfig", "DPOData", "Exclusion", "PAPER_DECODINGS", "PAPER_TABLE19", "DROP_REASONS",
           "build_dpo_data", "load_dpo_dataset", "evaluated_qids", "sample_questions", "make_dpo_config",
           "config_from_profile", "augmentation_inputs", "parse_verdict", "table19"]
