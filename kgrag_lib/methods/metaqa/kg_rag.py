"""`kg-rag`: the KG-RAG paper's full system (§3.3–3.4).

Question decomposition with in-context examples -> candidate triples up to N hops from the
question entity (once per question) -> for each sub-question: reformulation from the earlier
sub-answers, top-K triple selection over the pre-computed KB embeddings, sub-answer ->
answer synthesis that carries the reasoning chain. The loop is `DecomposedQA`; this module
gives it a triple selector.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base import MethodSpec, RunContext
from .candidates import RetrievalConfig, TripleSelector
from .decompose import DecomposedQA
from .kb import metaqa_kb
from .stages import METAQA_DATASETS, DecompositionConfig, SamplingConfig


@dataclass
class KGRAGConfig(SamplingConfig, DecompositionConfig, RetrievalConfig):
    """Decomposition, retrieval (N, K, direction) and every stage's inference parameters."""


def build_kg_rag(llm, selector: TripleSelector, cfg: KGRAGConfig, seed: int = 0) -> DecomposedQA:
    return DecomposedQA("kg-rag", llm, cfg, seed, selector=selector)


def make_kg_rag(ctx: RunContext, cfg: dict, seed: int) -> DecomposedQA:
    c = SPEC.check_config(cfg, "methods.kg-rag")
    kb = metaqa_kb(ctx, c.kb)  # a bad KB file is refused before the model loads
    return build_kg_rag(ctx.llm, TripleSelector(kb, ctx.embedder, c), c, seed)


SPEC = MethodSpec("kg-rag", make_kg_rag, KGRAGConfig, METAQA_DATASETS,
                  "KG-RAG: decomposition + per-sub-question top-K triples + reformulation + synthesis", "metaqa")
