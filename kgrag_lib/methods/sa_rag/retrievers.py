"""The three retrievers the loops run with: dense top-k (Naive RAG), SA-RAG, and PPR.

Each has `retrieve(query) -> Retrieved` (documents, relation texts, a trace, issues), so the
CoT and decomposition loops (`loops.py`) take any of them; SA-RAG + CoT is the CoT loop with
the SA-RAG retriever. Ranking ties go to the lower row (corpus order).

SA-RAG (§3.3-3.4, Algorithm 1), step by step:
1. seeds: the `k` descriptions most similar to the query (cosine), and the entities they
   describe, in order of their best description (repeats dropped, so at most `k` seeds);
2. subgraph: every entity at most `hops` related_to links from a seed (`direction` "both": either
   way, "out": source -> target only, as the paper's code fetches), and every link among them;
3. weights: w = cosine(query, link text), rescaled w' = max(0, (w - c) / (1 - c));
4. Algorithm 1 (`activation.spread_activation`) from the seeds, in seed order, over the
   subgraph with links undirected (as the paper's code spreads); activated: a > tau_a;
5. documents: chunks linked (`describes`) to an activated entity whose cosine to the query is
   >= tau_d, most similar first, at most `max_documents` (None: all, as the paper);
6. relations: links whose two ends are activated and whose weight (raw cosine by default, as
   the paper's text reads; `tau_r_on: rescaled` compares w' as the paper's code does, with one
   threshold for documents and links) is > tau_r, heaviest first, texts de-duplicated, at
   most `max_relations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from ...kg.traverse import rescaled_cosine
from .activation import csr_from_edges, spread_activation, within_hops
from .corpus import ChunkCorpus
from .graph_index import GraphIndex
from .ppr import personalized_pagerank, undirected_matrix

Embed = Callable[[str], np.ndarray]


def rank(scores: np.ndarray, k: int | None) -> np.ndarray:
    """Positions of the best scores, best first, ties in position order; all when k is None."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.lexsort((np.arange(scores.size), -scores))
    return order if k is None else order[:max(int(k), 0)]


@dataclass
class Document:
    """A retrieved chunk: `text` is what the reader sees (title line, then the words)."""

    cid: str
    pid: str
    title: str
    text: str
    score: float

    def to_trace(self) -> dict[str, Any]:
        return {"chunk": self.cid, "pid": self.pid, "title": self.title, "score": round(self.score, 4)}


@dataclass
class Retrieved:
    query: str
    documents: list[Document]
    relations: list[str]
    trace: dict[str, Any]
    issues: list[str] = field(default_factory=list)


class Retriever(Protocol):
    name: str

    def retrieve(self, query: str) -> Retrieved: ...


class DenseRetriever:
    """Naive RAG (Appendix A): the `top_k` chunks most similar to the query."""

    name = "dense"

    def __init__(self, corpus: ChunkCorpus, embed: Embed, top_k: int):
        self.corpus, self.embed, self.top_k = corpus, embed, top_k

    def retrieve(self, query: str) -> Retrieved:
        scores = self.corpus.vecs @ self.embed(query)
        docs = []
        for r in rank(scores, self.top_k).tolist():
            c = self.corpus.chunks[r]
            docs.append(Document(c.cid, c.pid, c.title, c.as_text(), float(scores[r])))
        return Retrieved(query, docs, [], {"retriever": self.name, "query": query,
                                            "documents": [d.to_trace() for d in docs]})


@dataclass(frozen=True)
class SASettings:
    """The settings of one SA-RAG retrieval (see the module doc)."""

    k: int
    hops: int
    c: float = 0.4
    tau_a: float = 0.5
    tau_d: float = 0.45
    tau_r: float = 0.5
    tau_r_on: str = "raw"
    direction: str = "both"
    max_documents: int | None = None
    max_relations: int | None = None


def _chunk_documents(index: GraphIndex, rows: np.ndarray, scores: np.ndarray) -> list[Document]:
    out = []
    for r, s in zip(rows.tolist(), scores.tolist()):
        ref = index.chunk_refs[r]
        out.append(Document(ref.cid, ref.pid, ref.title, index.chunk_text[r], float(s)))
    return out


@dataclass
class Activation:
    """Steps 1-4 of one SA-RAG retrieval: seeds, subgraph, link weights and activation values."""

    seeds: list[tuple[int, float]]  # (entity node, best description cosine), in spreading order
    nodes: np.ndarray               # subgraph entity nodes, ascending (local id = position)
    links: np.ndarray               # edge rows of the GraphIndex inside the subgraph
    cosine: np.ndarray              # per link: cosine(query, link text)
    weight: np.ndarray              # per link: rescaled w'
    values: np.ndarray              # per subgraph node: activation after Algorithm 1

    def local(self, entities: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.nodes, entities)


class SARetriever:
    """SA-RAG retrieval over a text KG (see the module doc)."""

    name = "sa"

    def __init__(self, index: GraphIndex, embed: Embed, settings: SASettings):
        self.index, self.embed, self.s = index, embed, settings

    def seeds(self, qvec: np.ndarray) -> list[tuple[int, float]]:
        """(entity, best description cosine) of the top-k descriptions' entities, best first."""
        g = self.index
        scores = g.desc_vecs @ qvec
        best: dict[int, float] = {}
        for r in rank(scores, self.s.k).tolist():
            best.setdefault(int(g.desc_entity[r]), float(scores[r]))
        return list(best.items())

    def activate(self, qvec: np.ndarray) -> Activation:
        """Steps 1-4: seeds, the n-hop subgraph, rescaled link weights, Algorithm 1."""
        g, s = self.index, self.s
        seeds = self.seeds(qvec)
        adj = g.both_adj if s.direction == "both" else g.out_adj
        nodes = within_hops(*adj, [e for e, _ in seeds], s.hops)
        inside = np.zeros(g.num_nodes, dtype=bool)
        inside[nodes] = True
        links = np.flatnonzero(inside[g.edge_head] & inside[g.edge_tail])
        cosine = (g.edge_vecs[links] @ qvec).astype(np.float64)
        weight = rescaled_cosine(cosine, s.c)
        heads, tails = np.searchsorted(nodes, g.edge_head[links]), np.searchsorted(nodes, g.edge_tail[links])
        indptr, nbr, arc = csr_from_edges(nodes.size, heads, tails)
        values = spread_activation(indptr, nbr, weight[arc], np.searchsorted(nodes, [e for e, _ in seeds]).tolist())
        return Activation(seeds, nodes, links, cosine, weight, values)

    def retrieve(self, query: str) -> Retrieved:
        g, s, q = self.index, self.s, self.embed(query)
        store = g.store
        a = self.activate(q)
        trace: dict[str, Any] = {"retriever": self.name, "query": query,
                                 "seeds": [{"entity": store.entity_name(e), "score": round(v, 4)} for e, v in a.seeds]}
        issues = [] if a.seeds else ["no seed entity: the KG has no entity description to seed from"]
        on = a.values > s.tau_a
        trace["subgraph"] = {"entities": int(a.nodes.size), "links": int(a.links.size)}
        trace["activation"] = {store.entity_name(int(a.nodes[i])): round(float(a.values[i]), 4)
                               for i in rank(a.values, None).tolist() if on[i]}

        rows = g.chunks_of(a.nodes[on])
        scores = (g.chunk_vecs[rows] @ q).astype(np.float64)
        passing = np.flatnonzero(scores >= s.tau_d)
        picked = passing[rank(scores[passing], s.max_documents)]
        docs = _chunk_documents(g, rows[picked], scores[picked])
        trace["documents"] = [d.to_trace() for d in docs]
        trace["documents_passing"] = int(passing.size)

        judged = a.cosine if s.tau_r_on == "raw" else a.weight
        ends_on = on[a.local(g.edge_head[a.links])] & on[a.local(g.edge_tail[a.links])]
        kept = np.flatnonzero(ends_on & (judged > s.tau_r))
        relations: list[str] = []
        shown = []
        for i in kept[rank(judged[kept], None)].tolist():
            e = int(a.links[i])
            text = g.edge_text[e]
            if text in relations:
                continue
            if s.max_relations is not None and len(relations) >= s.max_relations:
                break
            relations.append(text)
            shown.append({"text": text, "source": store.entity_name(int(g.edge_head[e])),
                          "target": store.entity_name(int(g.edge_tail[e])), "cosine": round(float(a.cosine[i]), 4),
                          "weight": round(float(a.weight[i]), 4)})
        trace["relations"] = shown
        trace["relations_passing"] = int(kept.size)
        return Retrieved(query, docs, relations, trace, issues)


class PPRRetriever:
    """"PPR (HippoRAG 2-style)": Personalized PageRank over the same KG's entity and chunk nodes.

    Graph: entity nodes and chunk nodes; an undirected edge of weight 1 per related_to triple and
    per `<chunk> describes <entity>` link. Reset vector: the `linking_k` entities most similar
    to the query (best description cosine; weight = that cosine, floored at 0) plus every chunk
    at `passage_weight` x its min-max-normalized query cosine (HippoRAG 2's passage node weight
    0.05). The `top_k` chunks with the most PageRank mass are the documents.
    """

    name = "ppr"

    def __init__(self, index: GraphIndex, embed: Embed, top_k: int, linking_k: int = 5, damping: float = 0.5,
                 passage_weight: float = 0.05):
        self.index, self.embed = index, embed
        self.top_k, self.linking_k, self.damping, self.passage_weight = top_k, linking_k, damping, passage_weight
        self.entities = index.text.ids("entity").astype(np.int64)
        n_ent, n_chunk = self.entities.size, index.chunk_nodes.size
        pos = np.full(index.num_nodes, -1, dtype=np.int64)
        pos[self.entities] = np.arange(n_ent)
        pos[index.chunk_nodes] = n_ent + np.arange(n_chunk)
        self.pos = pos
        triples = np.unique(index.edge_triple)
        heads = pos[np.asarray(index.store.heads, dtype=np.int64)[triples]]
        tails = pos[np.asarray(index.store.tails, dtype=np.int64)[triples]]
        indptr, rows = index.entity_chunks
        counts = np.diff(indptr)
        ent_of_link = np.repeat(np.arange(index.num_nodes), counts)
        self.matrix = undirected_matrix(n_ent + n_chunk, np.concatenate([heads, pos[ent_of_link]]),
                                        np.concatenate([tails, n_ent + rows]))

    def retrieve(self, query: str) -> Retrieved:
        g, q = self.index, self.embed(query)
        n_ent = self.entities.size
        ent_score = np.full(n_ent, -np.inf)
        np.maximum.at(ent_score, self.pos[g.desc_entity], (g.desc_vecs @ q).astype(np.float64))
        has = np.flatnonzero(np.isfinite(ent_score))
        seeds = has[rank(ent_score[has], self.linking_k)]
        reset = np.zeros(self.matrix.shape[0])
        reset[seeds] = np.maximum(ent_score[seeds], 0.0)
        dense = (g.chunk_vecs @ q).astype(np.float64)
        if dense.size:
            span = dense.max() - dense.min()
            reset[n_ent:] = self.passage_weight * ((dense - dense.min()) / span if span > 0 else np.ones(dense.size))
        trace: dict[str, Any] = {"retriever": self.name, "query": query, "seeds": [
            {"entity": g.store.entity_name(int(self.entities[i])), "score": round(float(ent_score[i]), 4)}
            for i in seeds.tolist()]}
        if reset.sum() <= 0:
            trace["documents"] = []
            return Retrieved(query, [], [], trace, ["ppr no seed weight: no positive entity or passage score"])
        mass = personalized_pagerank(self.matrix, reset, self.damping)[n_ent:]
        top = rank(mass, self.top_k)
        docs = _chunk_documents(g, top, dense[top])
        trace["documents"] = [{**d.to_trace(), "ppr": round(float(mass[r]), 6)} for d, r in zip(docs, top.tolist())]
        return Retrieved(query, docs, [], trace)
