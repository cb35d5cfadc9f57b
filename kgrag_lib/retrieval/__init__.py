"""Dense retrieval: sentence embedders (shipped offline ones, the papers' retrievers by hub id), an on-disk embedding cache, faiss indexes."""

from kgrag_lib.retrieval.emb_cache import cache_path, embed_cached, texts_digest
from kgrag_lib.retrieval.embedder import Embedder, encode_queries, load_embedder, mpnet_dir
from kgrag_lib.retrieval.embedder_specs import RECIPES, parse_embedder_spec
from kgrag_lib.retrieval.index import DenseIndex, gpu_available, top_k_dot

__all__ = [
    "DenseIndex",
    "Embedder",
    "RECIPES",
    "cache_path",
    "embed_cached",
    "encode_queries",
    "gpu_available",
    "load_embedder",
    "mpnet_dir",
    "parse_embedder_spec",
    "texts_digest",
    "top_k_dot",
]
