"""The MetaQA knowledge graph and its whole-KB triple embeddings, built once and reused.

The paper pre-processes kb.txt into an indexed KG and embeds every triple once into a
dictionary of embeddings (§3.4.2). Here the KG is a `KGStore` saved under the cache folder
(keyed by the KB file's path, size and mtime) and the embeddings are one (triples x dim)
float32 matrix in the embedding cache, memory-mapped; row i belongs to triple id i. Within
a process `RunContext.memo` shares both between the four systems.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import MissingDataError

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
    if explicit:
        p = Path(explicit).expanduser()
    else:
        from ...data.registry import metaqa_kb_path

        p = Path(metaqa_kb_path(data_root))
    if not p.exists():
        raise MissingDataError(
            f"MetaQA KB not found at {p}; expected a kb.txt with one 'subject|relation|object' per line "
            f"(set --kb, --data-root or $KGRAG_DATA_ROOT)"
        )
    return p.resolve()


def _store_key(path: Path) -> str:
    st = path.stat()
    return hashlib.sha256(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]


def load_store(path: Path, cache_dir: Path) -> Any:
    """The KG store of `path`, parsed once and then loaded from `cache_dir/metaqa/`."""
    from filelock import FileLock

    from ...data.metaqa import load_metaqa_kb
    from ...kg import KGStore

    folder = Path(cache_dir) / "metaqa"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"kg-{path.stem}-{_store_key(path)}"
    with FileLock(str(target) + ".lock"):
        if not (target / "header.json").exists():  # KGStore.save renames the folder into place
            store = KGStore.from_triples(load_metaqa_kb(path))
            store.save(target)
            return store
    return KGStore.load(target, mmap=True)


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
    from ...retrieval import embed_cached

    arr = embed_cached(embedder, kb.all_texts(), cache_dir=cache_dir, name=EMBEDDING_NAME,
                       show_progress=show_progress)
    return np.asarray(arr)  # plain ndarray view over the memory map


def metaqa_kb(ctx: Any, kb: str | None = None, with_embeddings: bool = True) -> MetaQAKB:
    """The run context's shared MetaQA KB (one store and one embedding matrix per process)."""
    path = kb_file(ctx.data_root, kb)
    base = ctx.memo(f"metaqa.kb:{path}", lambda: MetaQAKB(store=load_store(path, ctx.cache_dir),
                                                          embeddings=None, path=path))
    if not with_embeddings:
        return base
    return ctx.memo(f"metaqa.kb-emb:{path}:{ctx.embedder.identity}",
                    lambda: MetaQAKB(store=base.store, embeddings=kb_embeddings(base, ctx.embedder, ctx.cache_dir),
                                     path=path, entity_names=base.entity_names,
                                     relation_names=base.relation_names))
