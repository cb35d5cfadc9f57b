"""Dense retrieval: sentence embedders (shipped offline ones, the papers' retrievers by hub id), an on-disk embedding cache, faiss indexes."""

from kgrag_lib.retrieval.emb_cache import BlockTexts, ShardResult, cache_path, embed_cached, embed_shard, shard_path, texts_digest
from kgrag_lib.retrieval.embedder import Embedder, encode_queries, load_embedder, mpnet_dir
from kgrag_lib.retrieval.embedder_specs import RECIPES, parse_embedder_spec
from kgrag_lib.retrieval.gpu_placement import Placement, decide_placement
from kgrag_lib.retrieval.index import DenseIndex, gpu_available, top_k_dot
from kgrag_lib.retrieval.index_recall import exact_search, recall_at_k
from kgrag_lib.retrieval.index_store import cached_index, source_index

__all__ = [
    "BlockTexts",
    "DenseIndex",
    "Embedder",
    "Placement",
    "RECIPES",
    "cache_path",
    "cached_index",
    "decide_placement",
    "embed_cached",
    "embed_shard",
    "encode_queries",
    "exact_search",
    "gpu_available",
    "load_embedder",
    "mpnet_dir",
    "parse_embedder_spec",
    "recall_at_k",
    "ShardResult",
    "shard_path",
    "source_index",
    "texts_digest",
    "top_k_dot",
]
