"""SA-RAG (Pavlović et al.): spreading activation over an LLM-built text KG to retrieve documents,
with the paper's baselines (Naive, CoT and decomposition RAG, a PPR baseline in the style of
HippoRAG 2) and its plug-in combinations (SA-RAG + CoT, SA-RAG + decomposition).

`METHODS` lists the CLI methods naive-rag, cot-rag, qd-rag, ppr-rag, sa-rag, sa-rag-cot and
sa-rag-qd (family "sa-rag"); `DEVIATIONS` says how the reproduction differs from the paper.
Importing the package provides the `text:` KG source (`extraction`) to `kg.sources`.
"""

from . import activation, corpus, extraction, graph_index, loops, pipeline, ppr, prompts, retrievers, stages
from .activation import csr_from_edges, spread_activation, within_hops
from .pipeline import CLI_FLAGS, DEVIATIONS, METHODS, VARIANTS, SARAG, SARAGConfig, make_method

__all__ = [
    "CLI_FLAGS", "DEVIATIONS", "METHODS", "SARAG", "SARAGConfig", "VARIANTS", "activation", "corpus", "csr_from_edges",
    "extraction",
    "graph_index", "loops", "make_method", "pipeline", "ppr", "prompts", "retrievers", "spread_activation", "stages",
    "within_hops",
]
