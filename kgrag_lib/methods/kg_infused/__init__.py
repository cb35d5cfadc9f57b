"""KG-Infused RAG (Wu et al.): LLM-guided spreading activation over a KG, KG-based query
expansion and KG-augmented generation, with the paper's baselines and ablations.

`METHODS` lists the CLI methods nor, vanilla-rag, vanilla-qe, kg-infused, kg-qe-only and
kg-aug-only (family "kg-infused").
"""

from . import activation, corpus, kg_sources, pipeline, prompts, stages
from .activation import ActivationResult, ActivationSettings, spread_activation
from .pipeline import METHODS, VARIANTS, KGInfusedConfig, KGInfusedRAG, make_method

__all__ = [
    "METHODS", "ActivationResult", "ActivationSettings", "KGInfusedConfig", "KGInfusedRAG", "VARIANTS",
    "activation", "corpus", "kg_sources", "make_method", "pipeline", "prompts", "spread_activation", "stages",
]
