"""KG-Infused RAG (Wu et al.): LLM-guided spreading activation over a KG, KG-based query
expansion and KG-augmented generation, with the paper's baselines and ablations.

`METHODS` lists the CLI methods nor, vanilla-rag, vanilla-qe, kg-infused, kg-qe-only and
kg-aug-only, and the plug-in experiments self-rag, self-rag-kg-infused, self-ask and
self-ask-kg-infused (§4.2, App. F.1)
(family "kg-infused"), all put together in `pipeline.py`.
"""

from . import (activation, corpus, kg_sources, pipeline, prompts, rag, self_ask, self_ask_prompts, self_rag,
               self_rag_prompts, stages)
from .activation import ActivationResult, ActivationSettings, spread_activation
from .pipeline import CLI_FLAGS, DEVIATIONS, METHODS, VARIANTS, KGInfusedConfig, KGInfusedRAG, make_method

__all__ = [
    "CLI_FLAGS", "DEVIATIONS", "METHODS", "ActivationResult", "ActivationSettings", "KGInfusedConfig", "KGInfusedRAG",
    "VARIANTS", "activation", "corpus", "kg_sources", "make_method", "pipeline", "prompts", "rag", "self_ask",
    "self_ask_prompts", "self_rag", "self_rag_prompts", "spread_activation", "stages",
]
