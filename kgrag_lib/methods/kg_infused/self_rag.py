"""Self-RAG and Self-RAG + KG-Infused RAG: the plug-in baselines of KG-Infused RAG (§4.2, Table 2).

**Self-RAG** (Asai et al., ICLR 2024) short-form inference as the KG-Infused paper ran it: the
"always retrieve" setting, retrieval once, k_p = 6 passages by the question (Table 7). Each
passage goes to the Self-RAG model on its own, appended to the prompt as
`[Retrieval]<paragraph>...</paragraph>`; the model writes one candidate per passage and
critiques it with reflection tokens. A candidate's score is read from the probabilities of
those tokens (Self-RAG §3.3, segment-level critique-guided search):

    relevance  p([Relevant]) / (p([Relevant]) + p([Irrelevant]))
    support    (p(full) + 0.5 p(partial)) / (p(full) + p(partial) + p(no support))
    utility    sum_i w_i p([Utility:i]) / sum_i p([Utility:i]),  w = (-1, -0.5, 0, 0.5, 1)
    score      w_rel * relevance + w_sup * support + w_use * utility (+ the sequence probability)

with the Self-RAG defaults w_rel = 1, w_sup = 1, w_use = 0.5; the sequence probability is the
length-normalised one, exp(mean token log-probability). Relevance is read at the first
relevance token the model writes (the first generated token in practice); support and
utility at the first token of their group in the output, and count 0 when the model wrote
none (as in the authors' inference). Log-probabilities are the backend's top-`top_logprobs`
alternatives, so a group token outside them counts as probability 0. The best candidate wins
(ties: the higher-ranked passage); its answer is the text with every reflection token removed.

**Self-RAG + KG-Infused RAG** (§4.2 "Plug-in Baselines"): KG-guided spreading activation,
KG-based query expansion, k_p/2 passages by q plus k_p/2 by q' replacing the original ones,
KG-augmented generation (eq. 10) applied to *each passage on its own*, then the unchanged
Self-RAG generation over the augmented passages. The KG stages run on the run's model (the
paper: DPO-trained LLaMA3.1-8B) through `KGInfusedRAG`'s own stages, the Self-RAG step on
`generator` (the paper: selfrag-llama2-7b).

A model whose vocabulary lacks the reflection tokens is refused (ConfigError) before any
answer is written; a backend that cannot show its vocabulary (an OpenAI-compatible server) is
refused when none of the tokens appears among the returned top log-probabilities.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...config import MAX_SEED, check_values, make_config, opt
from ...errors import ConfigError
from ...llm.base import Generation, SamplingParams, TokenLogprob, raw_prompt
from ...llm.parsing import clean_answer
from ...records import Passage, Prediction, Question
from ..base import Method, RunContext
from .corpus import CorpusIndex
from .kg_sources import KGSource
from .rag import KGInfusedConfig, KGInfusedRAG
from .self_rag_prompts import instruction, with_evidence

# ---- the Self-RAG model's vocabulary and prompt format ------------------------------------
RELEVANCE = ("[Relevant]", "[Irrelevant]")
SUPPORT = ("[Fully supported]", "[Partially supported]", "[No support / Contradictory]")
UTILITY = tuple(f"[Utility:{i}]" for i in range(1, 6))
RETRIEVAL = ("[No Retrieval]", "[Retrieval]", "[Continue to Use Evidence]")
PARAGRAPH = ("<paragraph>", "</paragraph>")
SUPPORT_WEIGHTS = dict(zip(SUPPORT, (1.0, 0.5, 0.0)))
UTILITY_WEIGHTS = dict(zip(UTILITY, (-1.0, -0.5, 0.0, 0.5, 1.0)))
# What inference reads or writes: the scored groups and the retrieval marker of the prompt.
REQUIRED_TOKENS = RELEVANCE + SUPPORT + UTILITY + ("[Retrieval]",)
REFLECTION_TOKENS = RETRIEVAL + RELEVANCE + SUPPORT + UTILITY + PARAGRAPH
_STRIP = re.compile("|".join(re.escape(t) for t in sorted(REFLECTION_TOKENS + ("</s>", "<s>"), key=len, reverse=True)))

def strip_reflection(text: str) -> str:
    """The output without reflection tokens, paragraph tags or sequence markers."""
    return " ".join(_STRIP.sub(" ", text or "").split())


# ---- scoring ---------------------------------------------------------------------------------
def _norm(token: str) -> str:
    return token.strip().lstrip("\u2581\u0120").strip()


def _probs_at(step: TokenLogprob, group: Sequence[str]) -> dict[str, float]:
    """Probabilities of a token group at one position, from the chosen token and the top
    alternatives; a token not among them counts as 0."""
    seen: dict[str, float] = {}
    for tok, lp in ((step.token, step.logprob),) + step.top:
        key = _norm(tok)
        if key in group:
            seen[key] = max(seen.get(key, float("-inf")), lp)
    return {t: math.exp(seen[t]) if t in seen else 0.0 for t in group}


def _first(tokens: Sequence[TokenLogprob], group: Sequence[str]) -> int | None:
    return next((i for i, t in enumerate(tokens) if _norm(t.token) in group), None)


@dataclass
class CandidateScore:
    """The critique of one candidate; None where the output has no token of that group."""

    relevance: float | None
    support: float | None
    utility: float | None
    sequence: float
    total: float

    def to_trace(self) -> dict[str, Any]:
        r = lambda v: None if v is None else round(v, 4)  # noqa: E731
        return {"relevance": r(self.relevance), "support": r(self.support), "utility": r(self.utility),
                "sequence": r(self.sequence), "total": r(self.total)}


def score_candidate(gen: Generation, w_rel: float = 1.0, w_sup: float = 1.0, w_use: float = 0.5,
                    use_seq_score: bool = True) -> CandidateScore:
    """Self-RAG §3.3: the weighted critique score of one candidate (see the module docstring)."""
    toks = gen.tokens
    relevance = support = utility = None
    if toks:
        at = _first(toks, RELEVANCE)
        p = _probs_at(toks[0 if at is None else at], RELEVANCE)
        total = sum(p.values())
        if total > 0:
            relevance = p["[Relevant]"] / total
        at = _first(toks, SUPPORT)
        if at is not None:
            p = _probs_at(toks[at], SUPPORT)
            total = sum(p.values())
            support = sum(SUPPORT_WEIGHTS[t] * v for t, v in p.items()) / total
        at = _first(toks, UTILITY)
        if at is not None:
            p = _probs_at(toks[at], UTILITY)
            total = sum(p.values())
            utility = sum(UTILITY_WEIGHTS[t] * v for t, v in p.items()) / total
    sequence = math.exp(gen.logprob / len(toks)) if toks else 0.0
    total = w_rel * (relevance or 0.0) + w_sup * (support or 0.0) + w_use * (utility or 0.0)
    if use_seq_score:
        total += sequence
    return CandidateScore(relevance, support, utility, sequence, total)


def saw_reflection_tokens(generations: Sequence[Generation]) -> bool:
    """True when any generated token or top alternative is a scored reflection token."""
    wanted = set(RELEVANCE + SUPPORT + UTILITY)
    return any(_norm(tok) in wanted
               for g in generations for t in g.tokens for tok in (t.token, *(a for a, _ in t.top)))


# ---- configuration ---------------------------------------------------------------------------
@dataclass
class SelfRAGConfig:
    """Self-RAG short-form inference (defaults: Self-RAG's and the KG-Infused paper's, Table 7)."""

    generator: str = opt("selfrag-llama2-7b", "LLM spec of the Self-RAG model (needs its reflection tokens); "
                                              "'run' = the run's model")
    corpus: str = opt("auto", "text corpus: auto (the question's dataset; pooled if it has none), pooled, "
                              "a dataset name, wikipedia, wikipedia:<psgs_w100.tsv> or "
                              "sample:<dataset>[:<split>]:n=<N>[:seed=<S>] (see KGInfusedConfig)")
    k_p: int = opt(6, "passages per question, each critiqued on its own (Self-RAG+KG: k_p/2 by q and by q')", min=1)
    max_tokens: int = opt(100, "max new tokens of each Self-RAG candidate (the authors' short-form setting)", min=1)
    top_logprobs: int = opt(20, "alternatives read per generated token (1..20); reflection tokens outside "
                                "them count as probability 0", min=1, max=20)
    w_rel: float = opt(1.0, "weight of the relevance critique ([Relevant] vs [Irrelevant])", gt=-math.inf, lt=math.inf)
    w_sup: float = opt(1.0, "weight of the support critique (fully 1, partially 0.5, none 0)",
                       gt=-math.inf, lt=math.inf)
    w_use: float = opt(0.5, "weight of the utility critique ([Utility:1..5] weighted -1..1)", gt=-math.inf, lt=math.inf)
    use_seq_score: bool = opt(True, "add the candidate's length-normalised sequence probability to its score")
    seed: int | None = opt(None, "seed of the LLM calls (default: the run seed)", min=0, max=MAX_SEED)

    def cross_check(self) -> None:
        if not self.generator.strip():
            raise ConfigError(f"parameter 'generator' must be an LLM spec (e.g. 'selfrag-llama2-7b') or 'run', "
                              f"got {self.generator!r}")


@dataclass
class SelfRAGKGConfig(SelfRAGConfig):
    """Self-RAG + KG-Infused RAG: the Self-RAG settings plus those of the KG stages."""

    kg: str = opt("2wiki-evidence-heldout", "KG to activate over: 2wiki-evidence-heldout, 2wiki-evidence-full, "
                                            "2wiki-evidence-oracle (upper bound), wikidata5m, wikidata5m:<folder> or "
                                            "a saved KGStore folder")
    rounds: int = opt(2, "max spreading-activation rounds (Table 2 reports 2 and 3)", min=1)
    max_entities_per_round: int = opt(10, "MAX_ENTITIES_PER_ROUND: cap on newly activated entities per round", min=1)
    max_triples_per_entity: int = opt(50, "MAX_TRIPLES_PER_ENTITY: 1-hop triples shown per entity (seeded sample)",
                                      min=1)
    k_e: int = opt(3, "seed entities retrieved by description similarity", min=1)
    kg_max_tokens: int = opt(1000, "max new tokens of the KG stages (selection, summary, augmentation)", min=1)
    query_max_tokens: int | None = opt(None, "max new tokens of the query expansion (default: kg_max_tokens)", min=1)
    kg_temperature: float = opt(0.0, "sampling temperature of the KG stages (0 = greedy, as in the paper)", min=0)

    def kg_config(self) -> KGInfusedConfig:
        return KGInfusedConfig(kg=self.kg, corpus=self.corpus, rounds=self.rounds,
                               max_entities_per_round=self.max_entities_per_round,
                               max_triples_per_entity=self.max_triples_per_entity, k_p=self.k_p, k_e=self.k_e,
                               max_tokens=self.kg_max_tokens, query_max_tokens=self.query_max_tokens,
                               temperature=float(self.kg_temperature), seed=self.seed)


# ---- the generator ---------------------------------------------------------------------------
def check_generator(llm: Any, label: str) -> bool:
    """Refuse a generator that cannot run Self-RAG; True when its vocabulary was verified,
    False when the backend cannot show it (checked later on the returned log-probabilities)."""
    who = f"{label} ({getattr(llm, 'identity', type(llm).__name__)})"
    check = getattr(llm, "missing_tokens", None)
    missing = check(list(REQUIRED_TOKENS)) if callable(check) else None
    if missing:  # the fundamental reason first: no prompt format can make up for missing tokens
        raise ConfigError(
            f"Self-RAG needs a model fine-tuned with its reflection tokens; {who} lacks {missing} as single "
            f"tokens of its vocabulary. Use generator='selfrag-llama2-7b' (a GPU) or another Self-RAG model")
    if getattr(llm, "chat", False):
        raise ConfigError(f"Self-RAG generator {who} was loaded with a chat template; Self-RAG models take the "
                          "raw '### Instruction: ... ### Response:' prompt: load it with chat=False")
    return missing is not None


def load_generator(ctx: RunContext, spec: str) -> Any:
    """The Self-RAG model: the run's model for 'run', else `spec` loaded for raw prompts
    (shared by every Self-RAG method of the context)."""
    if spec == "run":
        return ctx.llm

    def build() -> Any:
        from ...llm import is_managed_spec, is_server_spec, load_llm

        # a server kgrag starts (gpu-paper's engine: vllm-serve:selfrag-llama2-7b) with the run's server settings
        options = dict(getattr(ctx, "server_options", None) or {}) if is_server_spec(spec) else {}
        if getattr(ctx, "server", None) is not None and is_managed_spec(spec):
            options["server"] = ctx.server
        return load_llm(spec, cache_path=ctx.llm_cache_path, chat=False, **options)

    return ctx.memo(f"self-rag-generator:{spec}", build)


# ---- the method ------------------------------------------------------------------------------
class SelfRAG(Method):
    """Self-RAG short-form inference, alone (`self-rag`) or after the KG-Infused RAG stages
    (`self-rag-kg-infused`). `answer(question)` returns the best candidate with every
    candidate's critique in the trace."""

    def __init__(self, name: str, cfg: SelfRAGConfig, ctx: RunContext, *, seed: int = 0,
                 generator: Any = None, kg_source: KGSource | None = None,
                 corpus_loader: Callable[[str], CorpusIndex] | None = None) -> None:
        if name not in METHOD_SUMMARIES:
            raise ConfigError(f"unknown Self-RAG method {name!r}; expected one of {', '.join(METHOD_SUMMARIES)}")
        self.kg_infused = name == "self-rag-kg-infused"
        if self.kg_infused and not isinstance(cfg, SelfRAGKGConfig):
            raise ConfigError(f"{name}: expected a SelfRAGKGConfig, got {type(cfg).__name__}")
        check_values(cfg)
        self.name = name
        self.cfg = self.config = cfg
        self.ctx = ctx
        self.seed = int(seed) if cfg.seed is None else int(cfg.seed)
        kg_cfg = cfg.kg_config() if isinstance(cfg, SelfRAGKGConfig) else KGInfusedConfig(
            corpus=cfg.corpus, k_p=cfg.k_p, seed=cfg.seed)
        # retrieval and the KG stages are KG-Infused RAG's own, on the run's model
        self.kgr = KGInfusedRAG("kg-infused" if self.kg_infused else "vanilla-rag", kg_cfg, ctx, seed=seed,
                                kg_source=kg_source, corpus_loader=corpus_loader)
        self._generator = generator
        self._verified: bool | None = None

    @property
    def generator(self) -> Any:
        """The Self-RAG model, loaded and checked on first use."""
        if self._generator is None:
            self._generator = load_generator(self.ctx, self.cfg.generator)
        if self._verified is None:
            self._verified = check_generator(self._generator, getattr(self._generator, "name", self.cfg.generator))
        return self._generator

    def params(self) -> SamplingParams:
        return SamplingParams(max_tokens=self.cfg.max_tokens, temperature=0.0, seed=self.seed,
                              logprobs=self.cfg.top_logprobs)

    # ---- stages ------------------------------------------------------------------------
    def retrieve(self, question: Question, trace: dict[str, Any]) -> tuple[list[Passage], str | None]:
        """The passages Self-RAG critiques, and the KG summary (None for plain Self-RAG)."""
        kgr, q = self.kgr, question.question
        corpus = kgr.corpus_for(question)
        trace["corpus"] = corpus.name
        qvec = kgr.embed(q)
        if not self.kg_infused:
            got = kgr.retrieve(corpus, q, None, qvec)
            trace["passages"] = got.to_trace()
            return got.passages, None
        summary, _ = kgr.kg_facts(q, trace, qvec)
        got = kgr.retrieve_expanded(corpus, q, summary, trace, qvec)
        trace["passages"] = got.to_trace()
        return got.passages, summary

    def augment(self, question: str, passages: Sequence[Passage], summary: str) -> list[Passage]:
        """§4.2: KG-augmented generation (eq. 10) on each passage on its own (title and text, as
        the note stage sees passages); the title is kept so the evidence keeps Self-RAG's
        'title, then text' layout."""
        return [Passage(p.pid, self.kgr.augment(question, p.as_text(), summary), p.title) for p in passages]

    def generate(self, question: Question, passages: Sequence[Passage]) -> list[Generation]:
        """One Self-RAG candidate per passage (sent as one batch)."""
        prompt = instruction(question.question, question.dataset == "strategyqa")
        requests = [raw_prompt(with_evidence(prompt, p)) for p in passages]
        return self.generator.generate_logprobs_batch(requests, self.params())

    # ---- the whole method --------------------------------------------------------------
    def answer(self, question: Question) -> Prediction:
        cfg, q = self.cfg, question.question
        yes_no = question.dataset == "strategyqa"
        gen_llm = self.generator
        trace: dict[str, Any] = {"method": self.name, "config": dataclasses.asdict(cfg), "seed": self.seed,
                                 "generator": {"name": getattr(gen_llm, "name", ""),
                                               "identity": getattr(gen_llm, "identity", "")},
                                 "kg": None, "corpus": None, "issues": []}
        usage0 = gen_llm.usage.snapshot() if hasattr(gen_llm, "usage") else None
        passages, summary = self.retrieve(question, trace)
        if summary is not None:
            passages = self.augment(q, passages, summary)
            trace["augmented_passages"] = [p.text for p in passages]
        if not passages:
            return self._failed(question, trace, "retrieval returned no passage", gen_llm, usage0)
        gens = self.generate(question, passages)
        if not self._verified and not saw_reflection_tokens(gens):
            raise ConfigError(
                f"Self-RAG generator {getattr(gen_llm, 'name', cfg.generator)} "
                f"({getattr(gen_llm, 'identity', '')}) wrote no reflection token and none is among its top "
                f"{cfg.top_logprobs} log-probabilities at any position: it is not a Self-RAG model "
                f"(expected tokens such as {', '.join(RELEVANCE)})")
        self._verified = True
        candidates = []
        for p, g in zip(passages, gens):
            s = score_candidate(g, cfg.w_rel, cfg.w_sup, cfg.w_use, cfg.use_seq_score)
            ans = clean_answer(strip_reflection(g.text), yes_no=yes_no)
            candidates.append({"pid": p.pid, "output": g.text, "answer": ans, **s.to_trace()})
        trace["candidates"] = candidates
        usable = [i for i, c in enumerate(candidates) if c["answer"]]
        if len(usable) < len(candidates):
            trace["issues"].append(f"{len(candidates) - len(usable)} candidate(s) had no answer text and were not ranked")
        if not usable:
            return self._failed(question, trace, "no Self-RAG candidate had answer text (unparsable outputs)",
                                gen_llm, usage0)
        best = max(usable, key=lambda i: (candidates[i]["total"], -i))  # ties: the higher-ranked passage
        trace["chosen"] = best
        trace["answer_raw"] = candidates[best]["output"]
        pred = Prediction(question.qid, q, candidates[best]["answer"], list(question.answers), self.name, trace=trace)
        pred.cost = self._generator_cost(gen_llm, usage0)
        return pred

    def _failed(self, question: Question, trace: dict[str, Any], error: str, gen_llm: Any, usage0) -> Prediction:
        pred = Prediction(question.qid, question.question, "", list(question.answers), self.name, trace=trace,
                          failed=True, error=error)
        pred.cost = self._generator_cost(gen_llm, usage0)
        return pred

    def _generator_cost(self, gen_llm: Any, usage0) -> dict[str, float]:
        """The Self-RAG model's own usage for this question (the runner counts the run's model);
        empty when the generator is the run's model, which the runner already counts."""
        if usage0 is None or gen_llm is self.ctx.loaded_llm:
            return {}
        return {f"generator_llm_{k}": v for k, v in gen_llm.usage.since(usage0).to_dict().items()}


# ---- registration ----------------------------------------------------------------------------
METHOD_SUMMARIES = {
    "self-rag": "Self-RAG (short form, always retrieve): one candidate per passage, ranked by reflection-token "
                "probabilities (KG-Infused RAG plug-in baseline, Table 2)",
    "self-rag-kg-infused": "Self-RAG + KG-Infused RAG: spreading activation, KG-based QE (3+3 passages), "
                           "KG-augmented passages, then Self-RAG (Table 2)",
}
CONFIGS = {"self-rag": SelfRAGConfig, "self-rag-kg-infused": SelfRAGKGConfig}


def make_method(name: str, ctx: RunContext, cfg: SelfRAGConfig | dict[str, Any] | None = None, seed: int = 0,
                **kw: Any) -> SelfRAG:
    """Build `self-rag` or `self-rag-kg-infused` from its typed config, or a settings dict (unknown keys are a
    ConfigError)."""
    if name not in CONFIGS:
        raise ConfigError(f"unknown Self-RAG method {name!r}; expected one of {', '.join(CONFIGS)}")
    typed = cfg if isinstance(cfg, CONFIGS[name]) else make_config(CONFIGS[name], cfg, where=f"method {name}")
    return SelfRAG(name, typed, ctx, seed=seed, **kw)
