"""The four MetaQA systems of the KG-RAG paper (Linders & Tomczak): `llm`, `llm-qd`,
`llm-kg` (KAPING) and `kg-rag`, listed in `METHODS` (settings, methods and deviations:
`pipeline`)."""

from . import decompose, kaping, kg_rag, pipeline, prompts, zero_shot
from .candidates import TripleSelector, candidate_triples
from .decompose import DecomposedQA
from .kaping import KapingQA
from .kb import MetaQAKB, load_kb, metaqa_kb, verbalize
from .kg_rag import build_kg_rag
from .pipeline import (CLI_FLAGS, DEVIATIONS, METHODS, DecomposeConfig, KapingConfig, KGRAGConfig, RetrievalConfig,
                       ZeroShotConfig)
from .stages import Decomposition, parse_decomposition
from .zero_shot import ZeroShotLLM

__all__ = [
    "CLI_FLAGS", "DEVIATIONS", "METHODS",
    "DecomposeConfig", "DecomposedQA", "Decomposition", "KGRAGConfig", "KapingConfig", "KapingQA",
    "MetaQAKB", "RetrievalConfig", "TripleSelector", "ZeroShotConfig", "ZeroShotLLM", "build_kg_rag",
    "candidate_triples", "load_kb", "metaqa_kb", "parse_decomposition", "pipeline", "prompts", "verbalize",
]
