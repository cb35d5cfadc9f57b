"""SA-RAG's graph algorithms over CSR arrays: the subgraph fetch (§3.3) and Algorithm 1 (§3.4).

Pure functions of numpy arrays, with no KG, embedder or LLM, so they are tested on hand-computed
graphs and timed on synthetic ones. Node ids are whatever the caller uses (global store ids for
the fetch, local subgraph ids for the spreading); an edge list becomes a CSR adjacency whose
arcs keep the edge index they came from, so a weight per edge serves every arc of it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import ConfigError
from ...kg.csr import difference_sorted, expand_ranges, sorted_unique


def csr_from_edges(n: int, heads: np.ndarray, tails: np.ndarray,
                   undirected: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, neighbours, arc edge) of `n` nodes from edges `heads[j] -> tails[j]`.

    `undirected`: edge j gives the arcs head -> tail and tail -> head, as the paper's code
    builds its adjacency dictionary. A node's arcs are in edge order (the order Algorithm 1
    visits them in); `arc edge[k]` is the edge index of arc k.
    """
    heads = np.asarray(heads, dtype=np.int64).ravel()
    tails = np.asarray(tails, dtype=np.int64).ravel()
    if heads.shape != tails.shape:
        raise ValueError(f"heads and tails differ in length: {heads.size} != {tails.size}")
    edge = np.arange(heads.size, dtype=np.int64)
    src, dst = (np.concatenate([heads, tails]), np.concatenate([tails, heads])) if undirected else (heads, tails)
    arc_edge = np.concatenate([edge, edge]) if undirected else edge
    if src.size and (src.min() < 0 or src.max() >= n):
        raise ValueError(f"edge endpoint out of range [0, {n})")
    order = np.lexsort((arc_edge, src))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order], arc_edge[order]


def within_hops(indptr: np.ndarray, neighbours: np.ndarray, seeds: Sequence[int] | np.ndarray,
                hops: int) -> np.ndarray:
    """Sorted ids of the nodes at most `hops` arcs from a seed (the seeds included)."""
    if isinstance(hops, bool) or not isinstance(hops, (int, np.integer)) or hops < 0:
        raise ConfigError(f"hops: expected an integer >= 0, got {hops!r}")
    reached = sorted_unique(np.array(seeds, dtype=np.int64).ravel())
    frontier = reached
    for _ in range(int(hops)):
        if frontier.size == 0:
            break
        found = neighbours[expand_ranges(indptr[frontier], indptr[frontier + 1])]
        frontier = difference_sorted(sorted_unique(found.astype(np.int64)), reached)
        reached = np.union1d(reached, frontier)
    return reached


def _spread(ptr, nbr, w, seeds, a, queued, queue):
    """The loop of Algorithm 1 over indexable sequences (numpy arrays under numba, lists in
    plain Python): `a` is updated in place; `queued` (n zeros) and `queue` (n slots) are
    scratch space.

    The paper's queue may hold a node several times and skips the repeats as visited, so a node
    is popped at the place it was first queued. Queuing each node once, at its first discovery,
    pops the nodes in the same order with n queue slots instead of one per arc. An arc whose
    increment w * a[node] is 0 (most of them: rescaled weights are 0 below c, and most nodes
    hold no activation) leaves a[target] as it is and is not written."""
    n = len(ptr) - 1
    for s in seeds:
        a[s] = 1.0
        for i in range(n):
            queued[i] = 0
        head = 0
        tail = 1
        queue[0] = s
        queued[s] = 1
        while head < tail:
            node = queue[head]
            head += 1
            for k in range(ptr[node], ptr[node + 1]):
                t = nbr[k]
                inc = w[k] * a[node]
                if inc != 0.0:
                    x = a[t] + inc
                    a[t] = x if x < 1.0 else 1.0
                if not queued[t]:
                    queued[t] = 1
                    queue[tail] = t
                    tail += 1


try:  # numba compiles the same loop to machine code (about 40x faster); without it, plain Python
    import numba

    _spread_compiled = numba.njit(cache=True, nogil=True)(_spread)
except ImportError:  # pragma: no cover - numba is in the cpu extra
    _spread_compiled = None


def spread_activation(indptr: np.ndarray, neighbours: np.ndarray, weights: np.ndarray,
                      seeds: Sequence[int]) -> np.ndarray:
    """Algorithm 1: the activation of every node after spreading from `seeds`, in order.

    For each seed in turn: its activation is set to 1, then a breadth-first walk from it (a
    fresh visited set per seed) pops each reachable node once and, for each of its arcs in
    order, raises the target to min(1, a[target] + w * a[node]), reading a[node] as it is at
    that moment; targets not yet popped are queued. Activation accumulates across seeds, so
    the result depends on the seed order. `weights[k]` is the weight of arc k; with
    non-negative weights every activation lies in [0, 1].

    Exact to these sequential semantics (a node popped later in the same level already sees
    the activation its earlier siblings passed it), so every walk visits each arc of the
    seed's component once: compiled by numba when it is installed, else a plain Python loop
    (about 0.2 us per arc visit).
    """
    n = len(indptr) - 1
    ptr = np.ascontiguousarray(indptr, dtype=np.int64)
    nbr = np.ascontiguousarray(neighbours, dtype=np.int64)
    w = np.ascontiguousarray(weights, dtype=np.float64)
    if nbr.size != w.size or int(ptr[-1]) != nbr.size:
        raise ValueError(f"CSR arrays disagree: {nbr.size} arcs, {w.size} weights, indptr ends at {int(ptr[-1])}")
    order = np.asarray([int(s) for s in seeds], dtype=np.int64)
    bad = [int(s) for s in order if not 0 <= s < n]
    if bad:
        raise ValueError(f"seed {bad[0]} out of range [0, {n})")
    a = np.zeros(n, dtype=np.float64)
    if _spread_compiled is not None:
        _spread_compiled(ptr, nbr, w, order, a, np.zeros(n, dtype=np.uint8), np.empty(n, dtype=np.int64))
        return a
    out = [0.0] * n
    _spread(ptr.tolist(), nbr.tolist(), w.tolist(), order.tolist(), out, bytearray(n), [0] * n)
    return np.asarray(out, dtype=np.float64)
