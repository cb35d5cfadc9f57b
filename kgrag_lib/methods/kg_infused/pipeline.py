"""KG-Infused RAG's method table: its variants (`rag.py`), the Self-RAG and Self-Ask plug-ins (§4.2,
App. F.1), the datasets they run on, how the reproduction deviates, and the `kgrag run` flags of the
settings most often changed. Every KG-Infused method is put together here, as every other paper's.
"""

from __future__ import annotations

from ..base import method_specs
from . import self_ask, self_rag
from .rag import VARIANTS, KGInfusedConfig, KGInfusedRAG, Variant, make_method

FAMILY = "kg-infused"
DATASETS = ("hotpotqa", "2wiki", "musique", "bamboogle", "strategyqa")
# a generic dataset needs only questions with answers: the KG is the profile's, the corpus its own or the pool
NEEDS = ("question", "answers")
# The reproduction's deviations from the paper (KG, corpus, models, DPO) are listed with its
# reported numbers (`report.kg_infused.paper_numbers.DEVIATIONS`).
DEVIATIONS: tuple[str, ...] = ()
# `kgrag run` flags for the settings most often changed (any other: --set KEY=VALUE).
CLI_FLAGS = (
    ("--kg", str, "KG-Infused RAG: 2wiki-evidence-heldout, 2wiki-evidence-full, 2wiki-evidence-oracle (upper bound), "
                  "wikidata5m or a saved KG store"),
    ("--corpus", str, "KG-Infused RAG: text corpus: auto, pooled, a dataset name, wikipedia (psgs_w100.tsv under "
                      "the data root), wikipedia:<tsv> or sample:<dataset>[:<split>]:n=<N>"),
    ("--index", str, "KG-Infused RAG: faiss index of the corpus and KG descriptions: auto, flat, hnsw or an "
                     "index_factory string (IVF{nlist},SQ8)"),
    ("--rounds", int, "KG-Infused RAG: spreading-activation rounds k"),
    ("--max-entities-per-round", int, "KG-Infused RAG: cap on newly activated entities per round"),
    ("--max-triples-per-entity", int, "KG-Infused RAG: cap on sampled 1-hop triples per entity"),
)


METHODS = (
    *method_specs(make_method, {v.name: v.summary for v in VARIANTS.values()}, KGInfusedConfig, DATASETS, FAMILY,
                  prompts=("kg_infused.prompts",),
                  mechanism={v.name: "kg-subgraph" for v in VARIANTS.values() if v.uses_kg}, needs=NEEDS),
    # Self-RAG needs its reflection-token generator, which no CPU profile serves
    *method_specs(self_rag.make_method, self_rag.METHOD_SUMMARIES, self_rag.CONFIGS, DATASETS, FAMILY,
                  prompts=("kg_infused.prompts", "kg_infused.self_rag_prompts"),   # its retrieval stages too
                  mechanism={"self-rag-kg-infused": "kg-subgraph"}, needs_gpu=True, needs=NEEDS),
    *method_specs(self_ask.make_self_ask, self_ask.SUMMARIES, self_ask.SelfAskConfig, DATASETS, FAMILY,
                  prompts=("kg_infused.prompts", "kg_infused.self_ask_prompts"),
                  mechanism={"self-ask-kg-infused": "kg-subgraph"}, needs=NEEDS),
)

__all__ = ["CLI_FLAGS", "DATASETS", "DEVIATIONS", "FAMILY", "METHODS", "VARIANTS", "KGInfusedConfig", "KGInfusedRAG",
           "Variant", "make_method"]
