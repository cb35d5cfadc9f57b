"""The four MetaQA systems of the KG-RAG paper (Linders & Tomczak): `llm`, `llm-qd`,
`llm-kg` (KAPING) and `kg-rag`, listed in `METHODS`."""

from . import decompose, kaping, kg_rag, zero_shot
from .candidates import RetrievalConfig, TripleSelector, candidate_triples
from .decompose import DecomposeConfig, DecomposedQA
from .kaping import KapingConfig, KapingQA
from .kb import MetaQAKB, load_kb, metaqa_kb, verbalize
from .kg_rag import KGRAGConfig, build_kg_rag
from .stages import Decomposition, parse_decomposition
from .zero_shot import ZeroShotConfig, ZeroShotLLM

METHODS = (zero_shot.SPEC, decompose.SPEC, kaping.SPEC, kg_rag.SPEC)

__all__ = [
    "METHODS",
    "DecomposeConfig", "DecomposedQA", "Decomposition", "KGRAGConfig", "KapingConfig", "KapingQA",
    "MetaQAKB", "RetrievalConfig", "TripleSelector", "ZeroShotConfig", "ZeroShotLLM", "build_kg_rag",
    "candidate_triples", "load_kb", "metaqa_kb", "parse_decomposition", "verbalize",
]
