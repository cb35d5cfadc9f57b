"""How much of the exact top-k an approximate index finds: recall@k against brute force.

Exact search streams over the vectors in blocks, so the ground truth for 21M memory-mapped
passages needs no fp32 flat index in RAM (64.5 GB): memory stays at one block plus the queries.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EXACT_BLOCK = 1 << 18  # rows per brute-force block: 768 MiB of float32 at d=768


def exact_search(vectors: Any, queries: Any, k: int, metric: str = "ip",
                 block_rows: int = EXACT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k (scores, ids), each (nq, min(k, n)), best first: faiss.knn per block of rows,
    merged. Ties between equal scores may order differently from a flat index."""
    import faiss

    if metric not in ("ip", "l2"):
        raise ValueError(f"metric must be 'ip' or 'l2'; got {metric!r}")
    q = np.ascontiguousarray(np.asarray(queries, dtype=np.float32))
    if q.ndim == 1:
        q = q[None, :]
    n = int(vectors.shape[0])
    k = min(int(k), n)
    if k < 1:
        raise ValueError(f"k must be >= 1 and the vectors non-empty; got k={k}, n={n}")
    fmetric = faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2
    sign = -1.0 if metric == "ip" else 1.0  # sort key: ascending
    best_s = np.empty((q.shape[0], 0), np.float32)
    best_i = np.empty((q.shape[0], 0), np.int64)
    for start in range(0, n, block_rows):
        block = np.ascontiguousarray(vectors[start:start + block_rows], dtype=np.float32)
        s, i = faiss.knn(q, block, min(k, block.shape[0]), metric=fmetric)
        cand_s = np.concatenate([best_s, s], axis=1)
        cand_i = np.concatenate([best_i, i + start], axis=1)
        order = np.lexsort((cand_i, sign * cand_s), axis=-1)[:, :k]  # by score, ties by the smaller id
        best_s = np.take_along_axis(cand_s, order, axis=1)
        best_i = np.take_along_axis(cand_i, order, axis=1)
    return best_s, best_i


def recall_at_k(index: Any, exact: Any, queries: Any, k: int) -> float:
    """Mean over queries of |index's top-k ∩ exact top-k| / k.

    `index` and `exact` are anything with `.search(queries, k) -> (scores, ids)` (a DenseIndex);
    `exact` may instead be the (nq, >=k) array of true ids (from `exact_search`). Ids of -1
    (fewer results than k) count as misses.
    """
    q = np.asarray(queries, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    got = np.asarray(index.search(q, k)[1])
    truth = np.asarray(exact.search(q, k)[1] if hasattr(exact, "search") else exact)
    if truth.ndim != 2 or truth.shape[0] != q.shape[0]:
        raise ValueError(f"exact ids must be (nq={q.shape[0]}, k); got shape {truth.shape}")
    kk = min(int(k), truth.shape[1])
    if kk < 1:
        raise ValueError(f"k must be >= 1; got {k}")
    hits = [len(set(a[a >= 0].tolist()) & set(t[:kk].tolist())) for a, t in zip(got[:, :kk], truth)]
    return float(np.mean(hits) / kk) if hits else float("nan")
