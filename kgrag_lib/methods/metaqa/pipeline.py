"""The MetaQA systems of the KG-RAG paper (Linders & Tomczak): their settings, the four CLI
methods (`METHODS`: llm, llm-qd, llm-kg, kg-rag; family "metaqa") and how the reproduction
differs from the paper (`DEVIATIONS`).

Every setting defaults to the paper's value (Table 3, §3.4); the systems share the sampling,
decomposition and retrieval settings by inheritance, so one profile block per method sets them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...config import MAX_SEED, opt
from ...llm import SamplingParams
from ..base import MethodSpec, RunContext
from .candidates import DIRECTIONS, TripleSelector
from .decompose import DecomposedQA
from .kaping import KapingQA
from .kb import metaqa_kb
from .kg_rag import build_kg_rag
from .zero_shot import ZeroShotLLM

FAMILY = "metaqa"
DATASETS = ("metaqa-1hop", "metaqa-2hop", "metaqa-3hop")
# The reproduction's deviations from the paper are all about its reported numbers: they are
# listed with them (`report.metaqa.paper_numbers.DEVIATIONS`).
DEVIATIONS: tuple[str, ...] = ()
# `kgrag run` flags for the settings most often changed (any other: --set KEY=VALUE).
CLI_FLAGS = (
    ("--kb", str, "MetaQA: path of a KB file in kb.txt format (default: the data root's metaqa/kb.txt)"),
    ("--hops", int, "max hops N of candidate triple retrieval (MetaQA methods)"),
    ("--top-k", int, "K triples kept per (sub-)question (MetaQA methods)"),
    ("--direction", str, "BFS direction for candidate triples: out or both (MetaQA methods)"),
)


# ---- settings -------------------------------------------------------------------------
@dataclass
class SamplingConfig:
    """Inference parameters of the paper (Table 3 and §3.4.3–3.4.4); all overridable."""

    max_tokens: int = opt(256, "max new tokens of each answer call (paper: 256)")
    temperature: float = opt(0.3, "sampling temperature of every LLM call (paper: 0.3)")
    min_p: float = opt(0.05, "min-p sampling filter (paper: 0.05)")
    top_k_sampling: int = opt(40, "top-k sampling filter of the LLM, 0 = off (paper: 40)")
    repeat_penalty: float = opt(1.1, "repeat penalty of the answer calls (paper: 1.1 for sub-answers)")
    seed: int | None = opt(None, "LLM sampling seed (default: the run seed, as the paper seeds every call)", min=0, max=MAX_SEED)

    def sampling(self, ctx_seed: int, **kw: Any):
        base = dict(max_tokens=self.max_tokens, temperature=self.temperature, min_p=self.min_p,
                    top_k=self.top_k_sampling, repeat_penalty=1.0,
                    seed=int(self.seed if self.seed is not None else ctx_seed))
        base.update(kw)
        return SamplingParams(**base)


@dataclass
class DecompositionConfig:
    """Settings of the decomposition, reformulation and synthesis stages."""

    decompose_max_tokens: int = opt(256, "max new tokens of the decomposition call (paper: 256)")
    reformulate_max_tokens: int = opt(256, "max new tokens of a reformulation call ('?' stops it earlier)")
    synthesis_max_tokens: int = opt(512, "max new tokens of the final answer synthesis (paper: 512)")
    max_subquestions: int = opt(4, "sub-questions kept from a decomposition (extra ones are dropped and noted)",
                                min=1)
    reformulate: bool = opt(True, "rewrite each later sub-question with the earlier sub-answers (paper: on)")
    synthesize_single: bool = opt(True, "run the synthesis call even when there is one sub-question (paper: always)")


@dataclass
class RetrievalConfig:
    """Candidate retrieval and triple selection (paper: N = 3, K = 30, bidirectional)."""

    hops: int = opt(3, "N: triples up to this many hops from the question entity are candidates (paper: 3)",
                    min=1)
    top_k: int = opt(30, "K: triples selected per (sub-)question by embedding dot product (paper: 30)",
                     min=1)
    direction: str = opt("both", "BFS direction over the directed KB: out (unidirectional), in, or both (paper: both)",
                         choices=DIRECTIONS)
    kb: str | None = opt(None, "MetaQA KB file in kb.txt format (default: <data root>/metaqa/kb.txt)")
    query_threads: int = opt(1, "torch threads for embedding one (sub-)question (0 = torch default)")


@dataclass
class ZeroShotConfig(SamplingConfig):
    """The answer call's inference parameters (the paper's sub-answer settings)."""


@dataclass
class DecomposeConfig(SamplingConfig, DecompositionConfig):
    """LLM+QD: decomposition (Table 3, stop '<END>'), sub-answers (repeat penalty 1.1),
    reformulation (stop '?'), synthesis (max tokens 512)."""


@dataclass
class KapingConfig(SamplingConfig, RetrievalConfig):
    """Retrieval (N, K, direction) and the answer call's inference parameters."""


@dataclass
class KGRAGConfig(SamplingConfig, DecompositionConfig, RetrievalConfig):
    """Decomposition, retrieval (N, K, direction) and every stage's inference parameters."""


# ---- the four methods -------------------------------------------------------------------
# Each factory takes its typed config (`MethodSpec.check_config` makes it from a settings dict).
def make_zero_shot(ctx: RunContext, cfg: ZeroShotConfig, seed: int) -> ZeroShotLLM:
    return ZeroShotLLM(ctx.llm, cfg, seed)


def make_decompose(ctx: RunContext, cfg: DecomposeConfig, seed: int) -> DecomposedQA:
    return DecomposedQA("llm-qd", ctx.llm, cfg, seed)


def make_kaping(ctx: RunContext, cfg: KapingConfig, seed: int) -> KapingQA:
    kb = metaqa_kb(ctx, cfg.kb)  # a bad KB file is refused before the model loads
    return KapingQA(ctx.llm, TripleSelector(kb, ctx.embedder, cfg), cfg, seed)


def make_kg_rag(ctx: RunContext, cfg: KGRAGConfig, seed: int) -> DecomposedQA:
    kb = metaqa_kb(ctx, cfg.kb)  # a bad KB file is refused before the model loads
    return build_kg_rag(ctx.llm, TripleSelector(kb, ctx.embedder, cfg), cfg, seed)


METHODS = (
    MethodSpec("llm", make_zero_shot, ZeroShotConfig, DATASETS,
               "zero-shot LLM answer, no decomposition, no KG (KG-RAG baseline 'LLM')", FAMILY),
    MethodSpec("llm-qd", make_decompose, DecomposeConfig, DATASETS,
               "question decomposition + zero-shot sub-answers + synthesis, no KG (baseline 'LLM+QD')", FAMILY,
               mechanism="decomposition"),
    MethodSpec("llm-kg", make_kaping, KapingConfig, DATASETS,
               "KAPING: top-K of the triples up to N hops from the question entity, one answer call "
               "(baseline 'LLM+KG')", FAMILY),
    MethodSpec("kg-rag", make_kg_rag, KGRAGConfig, DATASETS,
               "KG-RAG: decomposition + per-sub-question top-K triples + reformulation + synthesis", FAMILY,
               mechanism="decomposition"),
)
