"""TCR-QF (Huang et al.): ToG-style retrieval over an LLM-built KG with triple context restoration
and query-driven feedback that grows the KG, its ablations (ToG, TCR, QF, TCR-AF) and baselines
(LLM only, CoT, Naive RAG, GraphRAG-style local search).

`METHODS` lists the CLI methods (family "tcr-qf"); `DEVIATIONS` says how the reproduction
differs from the paper. The KG itself is `kg.tcr_kg` (spec `tcr:`).
"""

from . import pipeline, prompts, search
from .pipeline import CLI_FLAGS, DEVIATIONS, METHODS, VARIANTS, TcrQF, TcrQFConfig, make_method

__all__ = ["CLI_FLAGS", "DEVIATIONS", "METHODS", "TcrQF", "TcrQFConfig", "VARIANTS", "make_method", "pipeline",
           "prompts", "search"]
