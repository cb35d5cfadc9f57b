"""Candidate triple retrieval (BFS up to N hops) and top-K selection (KG-RAG §3.4.2–3.4.3).

Candidates come from `KGStore.neighborhood` (vectorized CSR BFS). Selection (`top_k_dot`)
scores the candidates against the (sub-)question embedding with one matrix-vector product
over the rows of the whole-KB triple embedding matrix, which is computed once and
memory-mapped: nothing is embedded per question except the question itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ...config import check_values
from ...errors import ConfigError
from ...retrieval.embedder import encode_queries
from ...retrieval.index import top_k_dot

DIRECTIONS = ("out", "in", "both")


def candidate_triples(store: Any, entity_ids: Sequence[int], hops: int, direction: str) -> np.ndarray:
    """Sorted unique ids of every triple within `hops` hops of the entities.

    'out' follows edges subject -> object only (from a movie: its director, actors, ...);
    'both' also walks from an object back to every subject that points at it.
    """
    if direction not in DIRECTIONS:
        raise ConfigError(f"direction: expected one of {DIRECTIONS}, got {direction!r}")
    ids = [int(e) for e in entity_ids]
    if not ids or hops < 1:
        return np.empty(0, dtype=np.int64)
    return np.asarray(store.neighborhood(ids, hops, direction=direction), dtype=np.int64)


class torch_threads:
    """Run a block with `n` torch intra-op threads (None or 0: leave as is).

    One short query is too small to split across cores: on 1,000 3-hop MetaQA questions on an
    idle 2-core machine, one thread gave median 21.5 / p95 27 ms per question (BFS, embedding,
    top-K), two gave 23.8 / 87 ms (bench/metaqa_retrieval_bench.py --query-threads); on a busy
    machine the gap grows.
    """

    def __init__(self, n: int | None):
        self.n, self.old = n, None

    def __enter__(self) -> None:
        if self.n:
            import torch

            self.old = torch.get_num_threads()
            if self.old != self.n:
                torch.set_num_threads(self.n)

    def __exit__(self, *exc: Any) -> None:
        if self.old is not None and self.old != self.n:
            import torch

            torch.set_num_threads(self.old)


@dataclass
class Selection:
    """The triples selected for one (sub-)question."""

    ids: list[int]
    scores: list[float]
    texts: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"triple_ids": self.ids, "scores": [round(s, 4) for s in self.scores], "triples": self.texts}


class TripleSelector:
    """Candidates of a question and per-(sub-)question top-K, over one MetaQA KB."""

    def __init__(self, kb: Any, embedder: Any, cfg: Any):
        """`cfg`: the retrieval settings (`pipeline.RetrievalConfig`: hops, top_k, direction, query_threads)."""
        check_values(cfg)
        self.kb = kb
        self.embedder = embedder
        self.cfg = cfg

    def resolve(self, names: Sequence[str]) -> tuple[list[int], list[str]]:
        """Entity ids of the topic entities found in the KB, and the names not found."""
        ids, missing = [], []
        for name in names:
            i = self.kb.store.find_entity(name)
            (missing.append(name) if i is None else ids.append(int(i)))
        return ids, missing

    def candidates(self, entity_ids: Sequence[int]) -> np.ndarray:
        return candidate_triples(self.kb.store, entity_ids, self.cfg.hops, self.cfg.direction)

    def encode(self, text: str) -> np.ndarray:
        with torch_threads(self.cfg.query_threads):
            return encode_queries(self.embedder, [text])[0]

    def select(self, text: str, candidate_ids: np.ndarray) -> Selection:
        scores, ids = top_k_dot(self.encode(text), self.kb.embeddings, self.cfg.top_k, candidate_ids)
        return Selection(ids.tolist(), scores.tolist(), self.kb.texts(ids))
