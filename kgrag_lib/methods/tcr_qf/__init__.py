"""TCR-QF (Huang et al.): ToG-style retrieval over an LLM-built KG with triple context restoration
and query-driven feedback that grows the KG, its ablations (ToG, TCR, QF, TCR-AF) and baselines
(LLM only, CoT, Naive RAG, GraphRAG-style local search).

`METHODS` lists the CLI methods (family "tcr-qf"); `DEVIATIONS` says how the reproduction
differs from the paper. The KG itself is `kg.tcr_kg`, extracted by `extraction` (spec `tcr:`, provided
to `kg.sources` when the package is imported); `context` restores triple context (§3.3).
"""

from . import context, extraction, pipeline, prompts, records, search
from .pipeline import CLI_FLAGS, DEVIATIONS, METHODS, VARIANTS, TcrQF, TcrQFConfig, make_method

__all__ = ["CLI_FLAGS", "DEVIATIONS", "METHODS", "TcrQF", "TcrQFConfig", "VARIANTS", "context", "extraction",
           "make_method", "pipeline", "prompts", "records", "search"]
