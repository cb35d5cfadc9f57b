"""The embedding index over a text KG that SA-RAG and the PPR baseline retrieve from (§3.1-3.3).

From a `text:` KG (`kgrag_lib.kg.text_kg`): every description node, every distinct relation
text and every chunk node, embedded once with the run's embedder (cached on disk by
`embed_cached`, built once per run context by `load_graph_index`), plus the adjacency the
retrieval walks:

- descriptions: embedded as "<entity name>: <description>". The extraction prompt asks for a
  sentence about the entity, which often omits its name ("A 1932 American film."); with the
  name a query naming the entity finds it. One row per description node.
- edges: one per distinct (source, target, text) among the mentions of each `related_to` triple
  (`TextKG.relations`), in triple then mention order. SA-RAG stores one link per extracted
  relation, each with its text; two chunks stating the same relation in other words are two
  links. The text is the extracted description sentence (or "<source> <label> <target>").
- chunks: the chunk node's text as the extraction LLM read it (title line + words).
- `entity_chunks`: the chunk rows with a `describes` link to each entity (CSR over node ids).
- `out_*` / `both_*`: the related_to adjacency over node ids, directed and undirected, for the
  n-hop fetch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...kg.csr import expand_ranges, sorted_unique
from ...kg.sources import BuiltKG, shared_kg
from ...kg.text_kg import DESCRIBES, ChunkRef, TextKG
from ...retrieval import embed_cached
from .activation import csr_from_edges


@dataclass
class GraphIndex:
    """A text KG with its embeddings and adjacency (see the module doc); rows are local ids."""

    name: str
    store: Any                    # kgrag_lib.kg.KGStore
    text: TextKG
    desc_nodes: np.ndarray        # description row -> its node id
    desc_entity: np.ndarray       # description row -> the entity node it describes
    desc_vecs: np.ndarray
    edge_head: np.ndarray         # edge row -> source entity node
    edge_tail: np.ndarray         # edge row -> target entity node
    edge_triple: np.ndarray       # edge row -> the related_to triple id
    edge_text: list[str]
    edge_vecs: np.ndarray
    chunk_nodes: np.ndarray       # chunk row -> its node id
    chunk_refs: list[ChunkRef]
    chunk_text: list[str]
    chunk_vecs: np.ndarray
    entity_chunks: tuple[np.ndarray, np.ndarray]          # (indptr over node ids, chunk rows)
    out_adj: tuple[np.ndarray, np.ndarray]                # (indptr, neighbours) source -> target
    both_adj: tuple[np.ndarray, np.ndarray]               # either way

    @property
    def num_nodes(self) -> int:
        return int(self.store.num_entities)

    def chunks_of(self, entities: np.ndarray) -> np.ndarray:
        """Sorted distinct chunk rows with a `describes` link to any of `entities`."""
        indptr, rows = self.entity_chunks
        ents = np.asarray(entities, dtype=np.int64)
        return sorted_unique(rows[expand_ranges(indptr[ents], indptr[ents + 1])])

    def chunk_pids(self) -> set[str]:
        return {ref.pid for ref in self.chunk_refs}


def text_tables(kg: BuiltKG) -> TextKG:
    """The `TextKG` side tables of a built KG, or a ConfigError saying what SA-RAG needs."""
    tables = kg.extra.get("text")
    if not isinstance(tables, TextKG):
        raise ConfigError(f"kg={kg.spec!r}: SA-RAG and the PPR baseline need a KG built from text "
                          "(text:<dataset>[:<split>][:n=<N>][:seed=<S>], or a folder holding its text_kg.json)")
    return tables


def _edges(store: Any, tables: TextKG) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    heads, tails, triples, texts = [], [], [], []
    for tid in sorted(tables.relations):
        seen: set[str] = set()
        for mention in tables.relations[tid]:
            if mention.text in seen:
                continue
            seen.add(mention.text)
            heads.append(int(store.heads[tid]))
            tails.append(int(store.tails[tid]))
            triples.append(tid)
            texts.append(mention.text)
    as_ids = (lambda xs: np.asarray(xs, dtype=np.int64))
    return as_ids(heads), as_ids(tails), as_ids(triples), texts


def _entity_chunks(store: Any, chunk_nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR node id -> chunk rows from the `<chunk> describes <entity>` triples."""
    n = store.num_entities
    if chunk_nodes.size == 0:
        return np.zeros(n + 1, dtype=np.int64), np.empty(0, dtype=np.int64)
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[chunk_nodes] = np.arange(chunk_nodes.size)
    heads, tails = np.asarray(store.heads, dtype=np.int64), np.asarray(store.tails, dtype=np.int64)
    keep = (np.asarray(store.rels) == store.relation_id(DESCRIBES)) & (row_of[heads] >= 0)
    indptr, rows, _ = csr_from_edges(n, tails[keep], row_of[heads[keep]], undirected=False)
    return indptr, rows


def build_graph_index(kg: BuiltKG, embedder: Any, cache_dir: Path, show_progress: bool = True) -> GraphIndex:
    """Embed a text KG's descriptions, relation texts and chunks (cached) and index them."""
    store, tables = kg.store, text_tables(kg)

    def embed(texts: list[str], what: str) -> np.ndarray:
        return np.asarray(embed_cached(embedder, texts, cache_dir=cache_dir, name=f"sa-rag-{kg.name}-{what}",
                                       show_progress=show_progress), dtype=np.float32)

    desc_nodes = tables.ids("description").astype(np.int64)
    desc_entity = np.asarray([tables.description_entity[int(d)] for d in desc_nodes], dtype=np.int64)
    desc_texts = [f"{store.entity_name(int(e))}: {store.description(int(d))}" for d, e in zip(desc_nodes, desc_entity)]
    heads, tails, triples, edge_text = _edges(store, tables)
    chunk_nodes = tables.ids("chunk").astype(np.int64)
    chunk_text = [store.description(int(c)) for c in chunk_nodes]
    n = store.num_entities
    out_ptr, out_nbr, _ = csr_from_edges(n, heads, tails, undirected=False)
    both_ptr, both_nbr, _ = csr_from_edges(n, heads, tails, undirected=True)
    return GraphIndex(
        name=kg.name, store=store, text=tables,
        desc_nodes=desc_nodes, desc_entity=desc_entity, desc_vecs=embed(desc_texts, "descriptions"),
        edge_head=heads, edge_tail=tails, edge_triple=triples, edge_text=edge_text,
        edge_vecs=embed(edge_text, "relations"),
        chunk_nodes=chunk_nodes, chunk_refs=[tables.chunks[int(c)] for c in chunk_nodes], chunk_text=chunk_text,
        chunk_vecs=embed(chunk_text, "chunks"),
        entity_chunks=_entity_chunks(store, chunk_nodes),
        out_adj=(out_ptr, out_nbr), both_adj=(both_ptr, both_nbr),
    )


def load_graph_index(ctx: Any, spec: str) -> GraphIndex:
    """The graph index of KG `spec` for a run context, built once per context (`ctx.memo`); the
    KG itself is extracted by the context's LLM on first use (`shared_kg`)."""
    key = f"sa-rag:graph:{spec}:{ctx.llm.identity}:{ctx.embedder.identity}"
    return ctx.memo(key, lambda: build_graph_index(shared_kg(ctx, spec), ctx.embedder, Path(ctx.cache_dir)))
