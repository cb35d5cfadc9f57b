"""Retrieval over TCR-QF's KG: topic entities, the ToG beam search (§3.2, Sun et al. 2023), the
GraphRAG-style local search baseline, and dense chunk retrieval (Naive RAG, feedback).

ToG as we run it (the defaults are ToG's: width 3, depth 3, exploration temperature 0.4):
topic entities -> per beam entity, its relations (outgoing `r`, incoming `r (reverse)`) pruned
by the LLM to at most `width` with scores -> per kept relation, its target entities scored by
the LLM (at most `max_candidates` targets shown, in store order) -> the `width` best paths by
the product of scores form the next beam -> the LLM says whether the facts gathered are enough
(stop) or the search goes one level deeper. The ToG stages answer JSON constrained to enums of
the candidates; an output that still does not parse keeps the candidates in order with equal
scores and is listed as an issue.

One scale for every score (`_normalised`). ToG asks the model for scores that sum to 1: over
the `width` relations it keeps, and over all the candidate entities of a relation; its code
scores a lone candidate entity 1 (times the relation's score) and falls back to 1/k each when
the scores cannot be read. We do the same, and make the sums hold whatever the model wrote:
the scores of the kept relations, and those of a relation's candidate entities, are divided by
their sum (a candidate the model left out scores 0). Two shortcuts save calls where ToG would
make one, and give the scores a call could at best distribute: an entity with at most `width`
relations keeps all of them at 1/k each (no pruning call: there is nothing to prune, and the
uniform split is the one that assumes nothing), and a relation with one target gives it 1 (no
scoring call). So a path's score, the product along it, is comparable between paths whichever
branch scored them. When the model scores every candidate 0 the zeros are kept (nothing to
normalise): those candidates leave the beam, as before.

Topic entities: the KG entities whose name occurs in the question (whole words, longest first),
then the entities whose "name: description" is most similar to the question, up to `topic_k`.
ToG takes topic entities from the dataset; ours have none, so this is our choice.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...concurrency import fan_out, parallel_map
from ...kg.tcr_kg import TcrKG
from ...kg.extraction import normalize
from ...llm.base import SamplingParams
from ...records import Triple
from . import prompts

REVERSE = " (reverse)"


@dataclass
class EntityIndex:
    """Unit embeddings of "name: description" per entity key, extended as the KG grows."""

    keys: list[str]
    vecs: np.ndarray
    embed: Callable[[list[str]], np.ndarray]

    def update(self, kg: TcrKG) -> None:
        new = [k for k in kg.entities if k not in set(self.keys)]
        if new:
            texts = [_entity_text(kg, k) for k in new]
            self.vecs = np.vstack([self.vecs, np.asarray(self.embed(texts), dtype=np.float32)])
            self.keys.extend(new)

    def top(self, qvec: np.ndarray, k: int) -> list[str]:
        if not self.keys or k <= 0:
            return []
        scores = self.vecs @ qvec
        order = np.argsort(-scores, kind="stable")[:k]
        return [self.keys[i] for i in order]


def _entity_text(kg: TcrKG, key: str) -> str:
    e = kg.entities[key]
    return f"{e.name}: {e.description}" if e.description else e.name


def entity_index(kg: TcrKG, embed: Callable[[list[str]], np.ndarray]) -> EntityIndex:
    keys = list(kg.entities)
    vecs = np.asarray(embed([_entity_text(kg, k) for k in keys]), dtype=np.float32) if keys else \
        np.zeros((0, 1), dtype=np.float32)
    return EntityIndex(keys, vecs, embed)


def topic_entities(kg: TcrKG, index: EntityIndex, question: str, qvec: np.ndarray, k: int) -> list[str]:
    """Entity names (see the module doc): named in the question first, then the most similar."""
    text = f" {normalize(question)} "
    named = sorted((key for key in kg.entities if key and f" {key} " in text), key=len, reverse=True)
    out = list(dict.fromkeys(named))[:k]
    for key in index.top(qvec, k + len(out)):
        if len(out) >= k:
            break
        if key not in out:
            out.append(key)
    return [kg.entities[key].name for key in out]


def relations_of(kg: TcrKG, name: str) -> dict[str, list[tuple[str, str, str]]]:
    """An entity's relations as shown to the pruner -> the triples (h, r, t) behind each."""
    store = kg.store
    i = store.find_entity(name)
    out: dict[str, list[tuple[str, str, str]]] = {}
    if i is None:
        return out
    for tid in store.out_triples(i).tolist():
        t = store.triple(tid)
        out.setdefault(t.r, []).append((t.s, t.r, t.o))
    for tid in store.in_triples(i).tolist():
        t = store.triple(tid)
        out.setdefault(t.r + REVERSE, []).append((t.s, t.r, t.o))
    return out


def _scores(llm: Any, messages: Any, params: SamplingParams, key: str, item: str, options: list[str]
            ) -> tuple[dict[str, float], str | None]:
    """Scores per option from a JSON answer; (fallback scores, issue) when it does not parse."""
    raw = llm.generate(messages, params)
    try:
        value = json.loads(raw[raw.index("{"):]) if "{" in raw else None
        items = value.get(key) if isinstance(value, dict) else None
        if not isinstance(items, list):
            raise ValueError("no list")
        got: dict[str, float] = {}
        for it in items:
            if isinstance(it, dict) and it.get(item) in options and isinstance(it.get("score"), (int, float)):
                got.setdefault(it[item], max(0.0, float(it["score"])))
        if not got:
            raise ValueError("no known option")
        return got, None
    except ValueError:
        return {o: 1.0 / len(options) for o in options}, f"search: unusable {key} scores, kept the candidates in order"


def _normalised(scores: dict[str, float]) -> dict[str, float]:
    """Scores divided by their sum, so they add up to 1 (all zeros: unchanged; see the module doc)."""
    total = sum(scores.values())
    return {k: v / total for k, v in scores.items()} if total > 0 else dict(scores)


@dataclass
class SearchResult:
    triples: list[tuple[str, str, str]] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)
    topic: list[str] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    stopped: str = ""


@dataclass
class _Branch:
    """One beam entity's part of a depth: its relation scores, its relations' entity scores, the
    candidate paths they give and the issues met, in the order the calls were made."""

    chosen: dict[str, float] = field(default_factory=dict)
    entities: dict[str, dict[str, float]] = field(default_factory=dict)
    candidates: list[tuple[float, str, tuple[str, str, str]]] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)


def _branch(kg: TcrKG, llm: Any, question: str, entity: str, score: float, *, width: int, max_candidates: int,
            explore: SamplingParams) -> _Branch | None:
    """Relation pruning of one beam entity, then entity scoring per kept relation (None: no relation).

    The entity calls of different relations read only their own relation, so they are sent
    together on a batching backend (`fan_out`); their results and issues keep relation order."""
    rels = relations_of(kg, entity)
    if not rels:
        return None
    out = _Branch()
    names = list(rels)
    if len(names) <= width:   # nothing to prune: an equal share each (see the module doc)
        chosen = {r: 1.0 / len(names) for r in names}
    else:
        schema = prompts.choice_schema("relations", "relation", names, width)
        chosen, issue = _scores(llm, prompts.relation_messages(question, entity, names, width),
                                explore.replace(json_schema=schema), "relations", "relation", names)
        if issue:
            out.issues.append(issue)
        chosen = _normalised(dict(sorted(chosen.items(), key=lambda kv: -kv[1])[:width]))
    out.chosen = chosen

    def targets_of(rel: str) -> tuple[list[str], dict[str, tuple[str, str, str]]]:
        reverse = rel.endswith(REVERSE)
        ends: dict[str, tuple[str, str, str]] = {}
        for tr in rels[rel]:
            ends.setdefault(tr[0] if reverse else tr[2], tr)
        return list(ends)[:max_candidates], ends

    def score_targets(rel: str) -> tuple[dict[str, float], str | None]:
        targets, _ = targets_of(rel)
        if len(targets) == 1:
            return {targets[0]: 1.0}, None
        schema = prompts.choice_schema("entities", "entity", targets, len(targets))
        es, issue = _scores(llm, prompts.entity_messages(question, entity, rel, targets),
                            explore.replace(json_schema=schema), "entities", "entity", targets)
        return _normalised({t: es.get(t, 0.0) for t in targets}), issue

    scored = parallel_map(score_targets, list(chosen), fan_out(llm))
    for (rel, rs), (es, issue) in zip(chosen.items(), scored):
        if issue:
            out.issues.append(issue)
        targets, ends = targets_of(rel)
        out.entities[f"{entity} -> {rel}"] = es
        for target in targets:
            out.candidates.append((score * rs * es.get(target, 0.0), target, ends[target]))
    return out


def tog_search(kg: TcrKG, llm: Any, question: str, topic: list[str], *, width: int, depth: int,
               max_candidates: int, explore: SamplingParams, reason: SamplingParams) -> SearchResult:
    """ToG's LLM-guided beam search from `topic` (see the module doc).

    Within a depth the beam entities' branches read only the beam, so on a batching backend
    (`fan_out(llm)` > 1) they go out together; they are merged in beam order, so the trace, the
    next beam and the requests are those of the one-at-a-time search."""
    res = SearchResult(topic=list(topic))
    beam: list[tuple[str, float]] = [(e, 1.0) for e in topic]
    seen: set[tuple[str, str, str]] = set()
    for level in range(1, depth + 1):
        step: dict[str, Any] = {"depth": level, "relations": {}, "entities": {}}
        candidates: list[tuple[float, str, tuple[str, str, str]]] = []
        branches = parallel_map(
            lambda b: _branch(kg, llm, question, b[0], b[1], width=width, max_candidates=max_candidates,
                              explore=explore), beam, fan_out(llm))
        for (entity, _), br in zip(beam, branches):
            if br is None:
                continue
            res.issues.extend(br.issues)
            step["relations"][entity] = br.chosen
            step["entities"].update(br.entities)
            candidates.extend(br.candidates)
        if not candidates:
            res.stopped = f"depth {level}: no relation to follow"
            res.trace.append(step)
            break
        candidates.sort(key=lambda c: -c[0])  # stable: equal scores keep discovery order
        beam, kept = [], []
        for sc, target, tr in candidates:
            if len(beam) >= width:
                break
            if sc <= 0 or target in {b for b, _ in beam}:
                continue
            beam.append((target, sc))
            kept.append(tr)
        for tr in kept:
            if tr not in seen:
                seen.add(tr)
                res.triples.append(tr)
        step["beam"] = [[b, round(s, 4)] for b, s in beam]
        res.trace.append(step)
        if not beam:
            res.stopped = f"depth {level}: every candidate scored 0"
            break
        raw = llm.generate(prompts.enough_messages(question, res.triples), reason.replace(json_schema=prompts.ENOUGH_SCHEMA))
        enough = re.search(r'"enough"\s*:\s*true', raw or "") is not None
        step["enough"] = enough
        if enough:
            res.stopped = f"depth {level}: enough"
            break
    else:
        res.stopped = f"depth {depth}: maximum depth"
    return res


def dense_top(vecs: np.ndarray, qvec: np.ndarray, k: int) -> list[int]:
    """Row indices of the `k` most similar rows (ties keep row order)."""
    if vecs.shape[0] == 0 or k <= 0:
        return []
    return np.argsort(-(vecs @ qvec), kind="stable")[:k].tolist()


def local_search(kg: TcrKG, index: EntityIndex, qvec: np.ndarray, count_tokens: Callable[[str], int], *,
                 top_entities: int, top_relations: int, budget: int) -> tuple[str, dict[str, Any]]:
    """GraphRAG-style local search (Edge et al.'s local context, without communities): the entities
    most similar to the query, their relations (both ends selected first, then by how many
    triples the other end has), and the source chunks of the selected entities (most selected
    entities first); within `budget` tokens split 25% entities, 25% relations, 50% text."""
    keys = index.top(qvec, top_entities)
    ranked = list(dict.fromkeys(kg.entities[k].name for k in keys))  # similarity order, never a set's
    chosen = set(ranked)
    store = kg.store
    rels: dict[tuple[str, str, str], tuple[int, int]] = {}
    for name in ranked:
        i = store.find_entity(name)
        if i is None:
            continue
        for tid in np.concatenate([store.out_triples(i), store.in_triples(i)]).tolist():
            t = store.triple(tid)
            other = t.o if t.s == name else t.s
            both = int(t.s in chosen and t.o in chosen)
            j = store.find_entity(other)
            degree = len(store.out_triples(j)) + len(store.in_triples(j)) if j is not None else 0
            rels[(t.s, t.r, t.o)] = (both, degree)
    ranked_rels = sorted(rels, key=lambda k: (-rels[k][0], -rels[k][1]))[:top_relations]
    counts: dict[str, int] = {}
    for k in keys:
        for cid in kg.entities[k].sources:
            if cid in kg.chunks:
                counts[cid] = counts.get(cid, 0) + 1
    ranked_chunks = sorted(counts, key=lambda c: -counts[c])

    def fill(lines: list[str], cap: int) -> list[str]:
        out, used = [], 0
        for line in lines:
            n = count_tokens(line)
            if used + n > cap:
                break
            out.append(line)
            used += n
        return out

    ent_lines = fill([f"- {_entity_text(kg, k)}" for k in keys], budget // 4)
    rel_lines = fill([Triple(h, r, t).verbalize() for h, r, t in ranked_rels], budget // 4)
    text_lines = fill([kg.chunks[c].as_text() for c in ranked_chunks], budget - budget // 2)
    parts = []
    if ent_lines:
        parts.append("Entities:\n" + "\n".join(ent_lines))
    if rel_lines:
        parts.append("Triples:\n" + "\n".join(rel_lines))
    if text_lines:
        parts.append("Related Text:\n" + "\n\n".join(text_lines))
    trace = {"entities": [kg.entities[k].name for k in keys], "relations": [list(r) for r in ranked_rels],
             "chunks": ranked_chunks[:len(text_lines)]}
    return ("\n\n".join(parts) or "(none)"), trace
