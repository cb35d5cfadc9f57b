"""Graph primitives of spreading activation over `KGStore` ids, shared by the methods that
spread (KG-Infused RAG's LLM-guided rounds, SA-RAG's weighted BFS): a reproducible per-entity
triple sample, the activated-set bookkeeping of a round, and embedding-based edge weights.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

import numpy as np

from ..errors import ConfigError
from ..records import Triple


class GraphView(Protocol):
    """The part of `KGStore` that spreading activation reads."""

    tails: np.ndarray

    def out_triples(self, e: int) -> np.ndarray: ...
    def entity_name(self, i: int) -> str: ...
    def triple(self, i: int) -> Triple: ...
    def verbalize(self, ids: Sequence[int] | np.ndarray) -> list[str]: ...


def _stable_seed(seed: int, key: str) -> int:
    digest = hashlib.blake2b(f"{seed}\0{key}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def sample_out_triples(kg: GraphView, entity: int, cap: int, seed: int) -> np.ndarray:
    """At most `cap` outgoing triple ids of `entity`, a seeded random sample when it has more.

    The sample depends on (seed, entity name) only, not on the question or the round, so an
    entity shows the same triples wherever it is activated (KG-Infused RAG samples
    MAX_TRIPLES_PER_ENTITY at random; we make that sample reproducible). Ids come back sorted.
    """
    ids = np.sort(np.asarray(kg.out_triples(entity), dtype=np.int64))
    if cap <= 0 or len(ids) <= cap:
        return ids
    rng = np.random.default_rng(_stable_seed(seed, kg.entity_name(entity)))
    return np.sort(rng.choice(ids, size=cap, replace=False))


@dataclass
class Step:
    """The next active entities from a round's triples, and the tails passed over."""

    entities: list[int]
    leaves: list[int] = field(default_factory=list)   # tails without an outgoing triple, once each
    capped: list[int] = field(default_factory=list)   # tails beyond the cap, as they came


class Frontier:
    """The activated entities, in activation order, and the step to the next active set."""

    def __init__(self, kg: GraphView):
        self.kg = kg
        self.activated: list[int] = []
        self._seen: set[int] = set()

    def __contains__(self, entity: int) -> bool:
        return entity in self._seen

    def activate(self, entities: Iterable[int]) -> None:
        """Add the entities not activated yet, keeping their order."""
        for e in entities:
            if e not in self._seen:
                self._seen.add(e)
                self.activated.append(e)

    def next_from_tails(self, triple_ids: Iterable[int], cap: int) -> Step:
        """The tails of `triple_ids` not activated yet, in triple order, at most `cap` of them.

        A tail with no outgoing triple (a literal or sink) leads nowhere and is skipped; tails
        found once `cap` are taken are reported as capped. Nothing is activated here.
        """
        step = Step([])
        for t in triple_ids:
            tail = int(self.kg.tails[t])
            if tail in self._seen or tail in step.entities:
                continue
            if len(self.kg.out_triples(tail)) == 0:
                if tail not in step.leaves:
                    step.leaves.append(tail)
                continue
            if len(step.entities) >= cap:
                step.capped.append(tail)
                continue
            step.entities.append(tail)
        return step


def rescaled_cosine(cosine: np.ndarray, c: float = 0.4) -> np.ndarray:
    """SA-RAG's edge weight `max(0, (w - c) / (1 - c))`: similarities below `c` weigh nothing,
    the rest are stretched back onto [0, 1]."""
    if not 0.0 <= c < 1.0:
        raise ConfigError(f"c={c!r}: the cosine threshold must lie in [0, 1)")
    w = np.asarray(cosine)
    if w.dtype.kind != "f":
        w = w.astype(np.float64)
    return np.maximum(0.0, (w - c) / (1.0 - c)).astype(w.dtype, copy=False)
