"""Dense retrieval: offline sentence embedders, an on-disk embedding cache, faiss indexes."""

from kgrag_lib.retrieval.emb_cache import cache_path, embed_cached, texts_digest
from kgrag_lib.retrieval.embedder import Embedder, load_embedder, mpnet_dir
from kgrag_lib.retrieval.index import DenseIndex, gpu_available, top_k_dot

__all__ = [
    "DenseIndex",
    "Embedder",
    "cache_path",
    "embed_cached",
    "gpu_available",
    "load_embedder",
    "mpnet_dir",
    "texts_digest",
    "top_k_dot",
]
