"""KG-Infused RAG (Wu et al.): LLM-guided spreading activation over a KG, KG-based query
expansion and KG-augmented generation, with the paper's baselines and ablations.

Importing the package registers the CLI methods nor, vanilla-rag, vanilla-qe, kg-infused,
kg-qe-only and kg-aug-only (family "kg-infused").
"""

from . import activation, corpus, grid, kg_sources, pipeline, prompts, stages
from .activation import ActivationResult, ActivationSettings, spread_activation
from .grid import GridReport, GridRun, count_requests, paper_grid, run_grid
from .pipeline import VARIANTS, KGInfusedConfig, KGInfusedRAG, make_method

__all__ = [
    "ActivationResult", "ActivationSettings", "GridReport", "GridRun", "KGInfusedConfig", "KGInfusedRAG",
    "VARIANTS", "activation", "corpus", "count_requests", "grid", "kg_sources", "make_method", "paper_grid",
    "pipeline", "prompts", "run_grid", "spread_activation", "stages",
]
