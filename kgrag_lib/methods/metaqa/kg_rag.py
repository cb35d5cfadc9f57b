"""`kg-rag`: the KG-RAG paper's full system (§3.3–3.4).

Question decomposition with in-context examples -> candidate triples up to N hops from the
question entity (once per question) -> for each sub-question: reformulation from the earlier
sub-answers, top-K triple selection over the pre-computed KB embeddings, sub-answer ->
answer synthesis that carries the reasoning chain. The loop is `DecomposedQA`; this module
gives it a triple selector.
"""

from __future__ import annotations

from typing import Any

from .candidates import TripleSelector
from .decompose import DecomposedQA


def build_kg_rag(llm: Any, selector: TripleSelector, cfg: Any, seed: int = 0) -> DecomposedQA:
    """KG-RAG from a model, a triple selector and a `pipeline.KGRAGConfig`."""
    return DecomposedQA("kg-rag", llm, cfg, seed, selector=selector)
