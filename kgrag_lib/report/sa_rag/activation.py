"""What SA-RAG's retrieval did on a question, for Figures 4 and 5 and the c x tau_a sweep.

Reads a `SARetriever`'s steps (`activate`: seeds, subgraph, weights, activation values) and
its results (`retrieve`): which subgraph entities are *golden* (named by the question's gold
reasoning chain), how far each is from the seeds, and recall of gold paragraphs against the
size of the context over a grid of c and tau_a. Golden names: MuSiQue's decomposition (each
step's answer and the first step's subject, "X >> relation"), 2Wiki's evidence triples (both
ends), and the first gold answer; matched to KG entities by normalized name or alias
(`kg.extraction.normalize`, the key entity resolution uses).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ...kg.extraction import normalize


# ------------------------------------------------------------------------- golden entities
def golden_names(question: Any) -> list[str]:
    """The entity names of a question's gold reasoning chain (see the module doc), in order."""
    names: list[str] = []
    for k, step in enumerate(question.decomposition or []):
        if k == 0 and " >> " in str(step.get("question", "")):
            names.append(str(step["question"]).split(" >> ", 1)[0])
        if step.get("answer"):
            names.append(str(step["answer"]))
    for t in question.evidence or []:
        names += [t.s, t.o]
    names += list(question.answers[:1])
    return list(dict.fromkeys(n.strip() for n in names if n and n.strip()))


def entity_lookup(index: Any) -> dict[str, set[int]]:
    """Normalized entity name or alias -> the entity nodes it names (text KG entities only)."""
    store = index.store
    out: dict[str, set[int]] = {}
    for e in index.text.ids("entity").tolist():
        for form in (store.entity_name(e), *store.aliases(e)):
            key = normalize(form)
            if key:
                out.setdefault(key, set()).add(int(e))
    return out


def golden_entities(index: Any, question: Any,
                    lookup: Mapping[str, set[int]] | None = None) -> tuple[set[int], list[str]]:
    """The KG entities named by the question's gold chain, and the golden names no entity matches."""
    lookup = entity_lookup(index) if lookup is None else lookup
    found: set[int] = set()
    missing = []
    for name in golden_names(question):
        hit = lookup.get(normalize(name))
        if hit:
            found |= hit
        else:
            missing.append(name)
    return found, missing


# ------------------------------------------------------------------------- one activation
def distances(act: Any, index: Any) -> np.ndarray:
    """Per subgraph entity (local id): the fewest links from a seed inside the subgraph, links
    undirected as the spreading treats them (-1: no path from a seed)."""
    from ...methods.sa_rag.activation import csr_from_edges, within_hops

    n = act.nodes.size
    dist = np.full(n, -1, dtype=np.int64)
    if n == 0 or not act.seeds:
        return dist
    ptr, nbr, _ = csr_from_edges(n, act.local(index.edge_head[act.links]), act.local(index.edge_tail[act.links]))
    seeds = act.local(np.asarray([e for e, _ in act.seeds], dtype=np.int64))
    d, size = 0, -1
    while True:
        reached = within_hops(ptr, nbr, seeds, d)
        if reached.size == size:
            return dist
        dist[reached[dist[reached] < 0]] = d
        d, size = d + 1, reached.size


def activation_frame(act: Any, index: Any, tau_a: float, golden: Iterable[int] = ()) -> pd.DataFrame:
    """One line per subgraph entity: name, node, activation, activated (> tau_a), golden, seed,
    hop distance from the seeds."""
    golden = set(golden)
    seeds = {e for e, _ in act.seeds}
    values = np.asarray(act.values, dtype=float)
    return pd.DataFrame({
        "entity": [index.store.entity_name(int(e)) for e in act.nodes],
        "node": act.nodes.astype(np.int64),
        "activation": values,
        "activated": values > tau_a,
        "golden": [int(e) in golden for e in act.nodes],
        "seed": [int(e) in seeds for e in act.nodes],
        "distance": distances(act, index),
    })


def activation_summary(frame: pd.DataFrame, golden_in_kg: int) -> dict[str, Any]:
    """Counts of one activation: subgraph size, activated, golden inside it and activated."""
    return {"subgraph_entities": len(frame), "seeds": int(frame["seed"].sum()),
            "activated": int(frame["activated"].sum()), "golden_in_kg": golden_in_kg,
            "golden_in_subgraph": int(frame["golden"].sum()),
            "golden_activated": int((frame["golden"] & frame["activated"]).sum()),
            "activated_not_golden": int((frame["activated"] & ~frame["golden"]).sum())}


def link_frame(act: Any, index: Any) -> pd.DataFrame:
    """One line per subgraph link: its ends (names), text, query cosine and rescaled weight."""
    store = index.store
    return pd.DataFrame({
        "source": [store.entity_name(int(index.edge_head[e])) for e in act.links],
        "target": [store.entity_name(int(index.edge_tail[e])) for e in act.links],
        "text": [index.edge_text[int(e)] for e in act.links],
        "cosine": np.asarray(act.cosine, dtype=float), "weight": np.asarray(act.weight, dtype=float),
    })


def case_scores(retriever: Any, questions: Sequence[Any]) -> pd.DataFrame:
    """Per question: subgraph size and golden entities inside it / activated (for picking Fig. 4's)."""
    lookup = entity_lookup(retriever.index)
    recs = []
    for q in questions:
        golden, _ = golden_entities(retriever.index, q, lookup)
        frame = activation_frame(retriever.activate(retriever.embed(q.question)), retriever.index, retriever.s.tau_a,
                                 golden)
        recs.append({"qid": q.qid, **activation_summary(frame, len(golden))})
    return pd.DataFrame(recs)


def pick_question(scores: pd.DataFrame, by: Sequence[str] = ("golden_in_subgraph", "golden_activated")) -> str:
    """The qid with the most of `by` (first key first); ties keep sample order."""
    if scores.empty:
        raise ValueError("no question to pick from: the sample is empty")
    best = scores.sort_values(list(by), ascending=False, kind="stable")
    return str(best.iloc[0]["qid"])


# ------------------------------------------------------------------------- Fig. 5 and the sweep
def with_settings(retriever: Any, **changes: Any) -> Any:
    """The same retriever (index, embedder) with other SA settings (c, tau_a, caps...)."""
    return type(retriever)(retriever.index, retriever.embed, dataclasses.replace(retriever.s, **changes))


def memoized(retriever: Any) -> Any:
    """The same retriever embedding each query once (a sweep asks for the same queries many times)."""
    seen: dict[str, np.ndarray] = {}

    def embed(text: str) -> np.ndarray:
        if text not in seen:
            seen[text] = retriever.embed(text)
        return seen[text]

    return type(retriever)(retriever.index, embed, retriever.s)


def c_frames(retriever: Any, question: Any, c_values: Sequence[float]) -> dict[float, pd.DataFrame]:
    """Fig. 5's data: the question's `activation_frame` for each c (tau_a, seeds and subgraph as set)."""
    qvec = retriever.embed(question.question)
    golden, _ = golden_entities(retriever.index, question)
    out = {}
    for c in c_values:
        r = with_settings(retriever, c=float(c))
        out[float(c)] = activation_frame(r.activate(qvec), r.index, r.s.tau_a, golden)
    return out


def by_distance(retriever: Any, questions: Sequence[Any], c_values: Sequence[float]) -> pd.DataFrame:
    """Over many questions: per c and hop distance, subgraph entities, their mean activation and
    the share activated (> tau_a)."""
    recs = []
    for q in questions:
        qvec = retriever.embed(q.question)
        for c in c_values:
            r = with_settings(retriever, c=float(c))
            f = activation_frame(r.activate(qvec), r.index, r.s.tau_a)
            recs.append(f.assign(c=float(c), qid=q.qid))
    if not recs:
        return pd.DataFrame(columns=["c", "distance", "entities", "mean_activation", "share_activated"])
    df = pd.concat(recs)
    return (df[df["distance"] >= 0].groupby(["c", "distance"])
            .agg(entities=("activation", "size"), mean_activation=("activation", "mean"),
                 share_activated=("activated", "mean")).reset_index())


def sweep_rows(retriever: Any, questions: Sequence[Any], c_grid: Sequence[float], tau_a_grid: Sequence[float],
               capped: bool = False) -> list[dict[str, Any]]:
    """One row per (question, c, tau_a): what SA-RAG's retrieval returns and the recall of the
    question's gold paragraphs among its documents. Questions without gold paragraphs or
    without paragraphs of their own (none indexed) are left out. `capped` False drops the
    max_documents / max_relations caps (the context the paper would pass)."""
    caps = {} if capped else {"max_documents": None, "max_relations": None}
    rows = []
    for q in questions:
        gold = set(q.supporting)
        if not gold or not q.context:
            continue
        for c in c_grid:
            for tau in tau_a_grid:
                got = with_settings(retriever, c=float(c), tau_a=float(tau), **caps).retrieve(q.question)
                pids = {d.pid for d in got.documents}
                rows.append({"dataset": q.dataset, "qid": q.qid, "c": float(c), "tau_a": float(tau),
                             "subgraph_entities": got.trace["subgraph"]["entities"],
                             "activated": len(got.trace["activation"]), "documents": len(got.documents),
                             "relations": len(got.relations),
                             "context_words": sum(len(d.text.split()) for d in got.documents)
                             + sum(len(t.split()) for t in got.relations),
                             "gold": len(gold), "recall": len(gold & pids) / len(gold)})
    return rows


def recall_table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Per (dataset, c, tau_a): questions and the means of recall (percent), documents, relations,
    context words and activated entities."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return pd.DataFrame(columns=["dataset", "c", "tau_a", "questions", "recall", "documents", "relations",
                                     "context_words", "activated"])
    out = (df.groupby(["dataset", "c", "tau_a"])
           .agg(questions=("qid", "nunique"), recall=("recall", "mean"), documents=("documents", "mean"),
                relations=("relations", "mean"), context_words=("context_words", "mean"),
                activated=("activated", "mean")).reset_index())
    out["recall"] = (100 * out["recall"]).round(1)
    return out.round({"documents": 2, "relations": 2, "context_words": 1, "activated": 2})

