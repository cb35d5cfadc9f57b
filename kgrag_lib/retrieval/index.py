"""Vector search: a faiss index wrapper and a numpy top-k over a candidate subset.

`DenseIndex` serves whole-corpus retrieval (passages, entity names); exact flat search by
default, IVF or HNSW when the corpus is large. `top_k_dot` serves the MetaQA method, which
ranks only the triples around a question's entity: one product over those rows (or over the
whole matrix when they are many) and an argpartition beat building an index per question.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kgrag_lib.errors import ConfigError

KINDS = ("flat", "ivf", "hnsw")
# Above this share of the matrix's rows, one contiguous product over the whole matrix plus a
# gather of scalars reads memory faster than gathering the candidate rows first.
FULL_SCAN_FRACTION = 0.12
GPU_MAX_K = 2048
METRICS = ("ip", "l2")


def _faiss():
    import faiss

    return faiss


def gpu_available() -> bool:
    """True when this faiss build has GPU support and sees a GPU."""
    faiss = _faiss()
    try:
        return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    except Exception:
        return False


def _as_matrix(x: Any, what: str, dim: int | None = None) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"{what} must be a 2-D (n, dim) array; got shape {a.shape}")
    if dim is not None and a.shape[1] != dim:
        raise ValueError(f"{what} have dimension {a.shape[1]}, the index has {dim}")
    return a


@dataclass
class DenseIndex:
    """A built faiss index (CPU or GPU) with the settings needed to search and save it."""

    index: Any = field(repr=False)
    kind: str
    metric: str
    dim: int
    on_gpu: bool = False
    gpu_resources: Any = field(default=None, repr=False)  # must outlive a GPU index

    @classmethod
    def build(
        cls,
        vectors: Any,
        kind: str = "flat",
        metric: str = "ip",
        *,
        nlist: int | None = None,
        nprobe: int | None = None,
        hnsw_m: int = 32,
        ef_construction: int = 64,
        ef_search: int = 128,
        use_gpu: bool | None = None,
        seed: int = 0,
    ) -> "DenseIndex":
        """Index `vectors` (n, dim). ip = inner product (cosine on unit vectors), l2 = distance.

        ivf: `nlist` defaults to ~2*sqrt(n) (at least 39 training points per list), k-means
        trains on at most 64 points per list, `nprobe` defaults to an eighth of the lists (at
        least 8). hnsw: M, efConstruction and efSearch as given.
        """
        if kind not in KINDS:
            raise ConfigError(f"index kind must be one of {KINDS}; got {kind!r}")
        if metric not in METRICS:
            raise ConfigError(f"index metric must be one of {METRICS}; got {metric!r}")
        faiss = _faiss()
        x = _as_matrix(vectors, "vectors")
        n, d = x.shape
        if n == 0:
            raise ValueError("cannot build an index over zero vectors")
        fmetric = faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2
        if kind == "flat":
            index = faiss.IndexFlatIP(d) if metric == "ip" else faiss.IndexFlatL2(d)
        elif kind == "ivf":
            if nlist is None:
                nlist = max(1, min(int(2 * math.sqrt(n)), n // 39))
            nlist = max(1, min(int(nlist), n))
            quantizer = faiss.IndexFlatIP(d) if metric == "ip" else faiss.IndexFlatL2(d)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, fmetric)
            index.cp.seed = seed
            index.cp.max_points_per_centroid = 64  # bounds training time on large corpora
            index.train(x)
            index.nprobe = int(nprobe) if nprobe else min(nlist, max(8, nlist // 8))
        else:
            index = faiss.IndexHNSWFlat(d, int(hnsw_m), fmetric)
            index.hnsw.efConstruction = int(ef_construction)
            index.hnsw.efSearch = int(ef_search)
        index.add(x)
        return cls._placed(index, kind, metric, d, use_gpu)

    @classmethod
    def _placed(cls, index: Any, kind: str, metric: str, d: int, use_gpu: bool | None) -> "DenseIndex":
        """Move flat/IVF indexes to the GPU when asked or available (HNSW is CPU-only in faiss)."""
        want = gpu_available() if use_gpu is None else bool(use_gpu)
        if want and kind != "hnsw":
            if not gpu_available():
                from kgrag_lib.errors import BackendUnavailableError

                raise BackendUnavailableError("use_gpu=True but this faiss build sees no GPU (install faiss-gpu)")
            faiss = _faiss()
            res = faiss.StandardGpuResources()
            gindex = faiss.index_cpu_to_gpu(res, 0, index)
            if kind == "ivf":
                gindex.nprobe = index.nprobe
            return cls(gindex, kind, metric, d, on_gpu=True, gpu_resources=res)
        return cls(index, kind, metric, d, on_gpu=False)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k per query: (scores, ids), each (nq, k'), k' = min(k, len); best first.

        Scores are inner products for 'ip' and squared L2 distances for 'l2'. Approximate
        indexes may return id -1 (score -inf/inf) when fewer than k' neighbours were found.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        q = _as_matrix(queries, "queries", self.dim)
        k = min(int(k), len(self))
        if q.shape[0] == 0:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        # faiss GPU search is limited to k <= 2048; a larger k is served by a CPU copy.
        index = _faiss().index_gpu_to_cpu(self.index) if self.on_gpu and k > GPU_MAX_K else self.index
        scores, ids = index.search(q, k)
        return scores, ids

    def save(self, path: str | os.PathLike) -> None:
        """Write with faiss.write_index (a GPU index is copied to CPU first); atomic rename."""
        faiss = _faiss()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        cpu = faiss.index_gpu_to_cpu(self.index) if self.on_gpu else self.index
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        faiss.write_index(cpu, str(tmp))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, use_gpu: bool | None = None) -> "DenseIndex":
        """Read an index saved by `save`; kind and metric are recovered from the faiss type."""
        faiss = _faiss()
        path = Path(path)
        if not path.is_file():
            from kgrag_lib.errors import MissingDataError

            raise MissingDataError(f"no faiss index at {path}")
        index = faiss.read_index(str(path))
        if isinstance(index, faiss.IndexHNSW):
            kind = "hnsw"
        elif isinstance(index, faiss.IndexIVF):
            kind = "ivf"
        else:
            kind = "flat"
        metric = "ip" if index.metric_type == faiss.METRIC_INNER_PRODUCT else "l2"
        return cls._placed(index, kind, metric, int(index.d), use_gpu)


def top_k_dot(
    query_vecs: Any,
    matrix: Any,
    k: int,
    candidate_ids: Sequence[int] | np.ndarray | None = None,
    *,
    full_scan_fraction: float = FULL_SCAN_FRACTION,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k rows of `matrix` by dot product with each query, optionally among candidates only.

    `matrix` may be a memory-mapped (N, dim) array. Up to `full_scan_fraction` * N candidates,
    only their rows are read; above it the whole matrix is multiplied and the candidates'
    scores picked out. Returns (scores, ids) with ids indexing `matrix`, best first, ties
    broken by the smaller id so results are deterministic. A 1-D query gives 1-D outputs;
    (nq, dim) gives (nq, k').
    """
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}")
    q = np.asarray(query_vecs, dtype=np.float32)
    if q.ndim not in (1, 2) or q.shape[-1] != matrix.shape[1]:
        raise ValueError(f"query_vecs must be (dim,) or (nq, dim) with dim = {matrix.shape[1]} (the matrix's); "
                         f"got shape {q.shape}")
    if candidate_ids is None:
        ids = np.arange(matrix.shape[0], dtype=np.int64)
    else:
        ids = np.asarray(candidate_ids, dtype=np.int64).ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= matrix.shape[0]):
            raise IndexError(f"candidate_ids must lie in [0, {matrix.shape[0]}); got range [{ids.min()}, {ids.max()}]")
    single = q.ndim == 1
    nq = 1 if single else q.shape[0]
    kk = min(int(k), ids.size)
    if kk == 0:
        empty = (np.zeros((nq, 0), np.float32), np.zeros((nq, 0), np.int64))
        return (empty[0][0], empty[1][0]) if single else empty
    scores = _dot_scores(q, matrix, ids, full_scan=ids.size > full_scan_fraction * matrix.shape[0])
    scores = scores[None, :] if single else scores
    out_s = np.empty((nq, kk), np.float32)
    out_i = np.empty((nq, kk), np.int64)
    for r in range(nq):
        row = scores[r]
        if kk < row.size:
            # Keep everything tied with the k-th best so the tie-break below is exact.
            thresh = np.partition(row, row.size - kk)[row.size - kk]
            pos = np.flatnonzero(row >= thresh)
        else:
            pos = np.arange(row.size)
        order = np.lexsort((ids[pos], -row[pos]))[:kk]
        out_i[r] = ids[pos[order]]
        out_s[r] = row[pos[order]]
    return (out_s[0], out_i[0]) if single else (out_s, out_i)


def _dot_scores(q: np.ndarray, matrix: Any, ids: np.ndarray, full_scan: bool) -> np.ndarray:
    """Scores of rows `ids`, (n,) for a 1-D query, else (nq, n). The two branches can differ
    in the last float bit (BLAS splits the products differently), which can reorder near-ties:
    keep each product as written, the MetaQA triple selection (and the LLM cache) depends on it."""
    if full_scan:
        whole = np.asarray(matrix, dtype=np.float32)
        return (whole @ q)[ids] if q.ndim == 1 else (q @ whole.T)[:, ids]
    sub = np.asarray(matrix[ids], dtype=np.float32)
    return sub @ q if q.ndim == 1 else q @ sub.T
