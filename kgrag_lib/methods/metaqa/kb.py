"""The MetaQA knowledge graph and its whole-KB triple embeddings, built once and reused.

The paper pre-processes kb.txt into an indexed KG and embeds every triple once into a
dictionary of embeddings (§3.4.2). Here the KG is the `metaqa:<kb.txt>` source of
`kgrag_lib.kg.sources.load_kg` (a `KGStore` built once into the KG cache) and the embeddings
are one (triples x dim) float32 matrix in the embedding cache, memory-mapped; row i belongs to
triple id i. Within a process `RunContext.memo` shares both between the four systems.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...kg.sources import load_kg, metaqa_kb_file, shared_kg
from ...retrieval import embed_cached

EMBEDDING_NAME = "metaqa-kb-triples"


def verbalize(s: str, r: str, o: str) -> str:
    """`(subject, relation, object)` with underscores of the relation read as spaces (§3.4.2)."""
    return f"({s}, {r.replace('_', ' ')}, {o})"


@dataclass
class MetaQAKB:
    """A KG store plus the embedding row of each of its triples."""

    store: Any
    embeddings: np.ndarray | None
    path: Path
    entity_names: list[str] = field(repr=False, default_factory=list)
    relation_names: list[str] = field(repr=False, default_factory=list)

    def __post_init__(self) -> None:
        if not self.entity_names:
            self.entity_names = [self.store.entity_name(i) for i in range(self.store.num_entities)]
        if not self.relation_names:
            self.relation_names = [self.store.relation_name(i) for i in range(self.store.num_relations)]
        self._heads = np.asarray(self.store.heads)
        self._rels = np.asarray(self.store.rels)
        self._tails = np.asarray(self.store.tails)

    def texts(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """Verbalized triples, in the order of `ids`."""
        E, R = self.entity_names, self.relation_names
        h, r, t = self._heads, self._rels, self._tails
        return [verbalize(E[h[i]], R[r[i]], E[t[i]]) for i in np.asarray(ids, dtype=np.int64).tolist()]

    def all_texts(self) -> list[str]:
        return self.texts(np.arange(self.store.num_triples))


def kb_file(data_root: Path, explicit: str | None = None) -> Path:
    """The kb.txt to read: an explicit path, else `<data root>/metaqa/kb.txt`."""
    return metaqa_kb_file(explicit or "", Path(data_root))


def load_store(path: Path, cache_dir: Path) -> Any:
    """The KG store of the kb.txt at `path`, built once into the KG cache under `cache_dir`."""
    return load_kg(f"metaqa:{path}", cache_dir=cache_dir).store


def load_kb(data_root: Path, cache_dir: Path, embedder: Any | None, kb: str | None = None,
            show_progress: bool = True) -> MetaQAKB:
    """Store and (when an embedder is given) the whole-KB embedding matrix, both cached."""
    path = kb_file(data_root, kb)
    store = load_store(path, cache_dir)
    out = MetaQAKB(store=store, embeddings=None, path=path)
    if embedder is not None:
        out.embeddings = kb_embeddings(out, embedder, cache_dir, show_progress=show_progress)
    return out


def kb_embeddings(kb: MetaQAKB, embedder: Any, cache_dir: Path, show_progress: bool = True) -> np.ndarray:
    """Embeddings of every verbalized triple (computed at most once per model and KB)."""
    arr = embed_cached(embedder, kb.all_texts(), cache_dir=cache_dir, name=EMBEDDING_NAME,
                       show_progress=show_progress)
    return np.asarray(arr)  # plain ndarray view over the memory map


def metaqa_kb(ctx: Any, kb: str | None = None, with_embeddings: bool = True) -> MetaQAKB:
    """The run context's shared MetaQA KB (one store and one embedding matrix per process)."""
    path = kb_file(ctx.data_root, kb)
    base = ctx.memo(f"metaqa.kb:{path}", lambda: MetaQAKB(store=shared_kg(ctx, f"metaqa:{path}").store,
                                                          embeddings=None, path=path))
    if not with_embeddings:
        return base
    return ctx.memo(f"metaqa.kb-emb:{path}:{ctx.embedder.identity}",
                    lambda: MetaQAKB(store=base.store, embeddings=kb_embeddings(base, ctx.embedder, ctx.cache_dir),
                                     path=path, entity_names=base.entity_names,
                                     relation_names=base.relation_names))
