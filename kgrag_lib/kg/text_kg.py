"""The KG SA-RAG extracts from documents (§3.1), as a `KGStore` plus the side tables it cannot hold.

Built from the per-chunk extraction records of `methods.sa_rag.extraction` (entities with type,
aliases and description; relations among them) by `assemble`.

Entity resolution (§3.1): chunks in corpus order, entities in output order; an entity whose
normalized name or any normalized alias (NFKC, case-folded, punctuation removed, spaces
collapsed) is already claimed joins the earliest entity claiming one of them, otherwise it is
new. Its name is the first surface form seen; every other surface form becomes an alias;
its type is the first one seen. Resolution never merges two existing entities.

The KG mapping (every node is a `KGStore` entity; `TextKG.kinds` says which kind):
- entity node: named by its resolved name; `store.aliases` holds its aliases, `store.description`
  its first description, `TextKG.entity_types` its type.
- description node `doc:<pid>/chunk:<i>/description:<j>` (the j-th entity of that chunk's
  output; none when the description is empty): `store.description` is its text,
  `TextKG.description_entity` its entity; triple `<description> describes <entity>`.
- chunk node `doc:<pid>/chunk:<i>` (only chunks with at least one entity): `store.description`
  is the chunk text as the LLM saw it (title line + words), `TextKG.chunks` its passage id,
  title and index; triple `<chunk> describes <entity>` for every entity extracted from it.
- `<source> related_to <target>` per kept relation, in the direction extracted (the store
  de-duplicates, so one triple holds every mention of the same ordered pair);
  `TextKG.relations[triple id]` lists its mentions (label, description text, chunk) in corpus
  order; a mention without a description gets the text "<source> <label> <target>".
- provenance: every triple carries the chunk id(s) it came from, `doc:<pid>/chunk:<i>`.
An extracted name that starts with "doc:" gets the suffix " (entity)" so it cannot collide
with a chunk or description node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ConfigError, DataFormatError
from ..jsonl import atomic_text
from .extraction import Chunk, normalize
from .store import KGStore

TEXT_KG_FILE = "text_kg.json"
TEXT_KG_FORMAT = "kgrag-text-kg"
KINDS = ("entity", "description", "chunk")
DESCRIBES, RELATED_TO = "describes", "related_to"
_RESERVED_PREFIX = "doc:"


# ---- resolution and the KG ----------------------------------------------------------------------
@dataclass
class _Entity:
    name: str
    type: str
    forms: dict[str, str] = field(default_factory=dict)  # normalized -> first surface form
    descriptions: list[str] = field(default_factory=list)

    def aliases(self) -> list[str]:
        own = normalize(self.name)
        return [form for key, form in self.forms.items() if key != own]


class _Resolver:
    """Entities merged by overlapping normalized names/aliases (see the module doc)."""

    def __init__(self) -> None:
        self.entities: list[_Entity] = []
        self._claimed: dict[str, int] = {}

    def add(self, name: str, etype: str, aliases: Sequence[str]) -> int:
        forms = [(normalize(f), f) for f in (name, *aliases)]
        hits = [self._claimed[key] for key, _ in forms if key in self._claimed]
        if hits:
            i = min(hits)
        else:
            i = len(self.entities)
            node = name if not name.startswith(_RESERVED_PREFIX) else f"{name} (entity)"
            self.entities.append(_Entity(node, etype))
        for key, form in forms:
            self._claimed.setdefault(key, i)
            self.entities[i].forms.setdefault(key, form)
        return i


@dataclass(frozen=True)
class RelationMention:
    """One extracted relation behind a `related_to` triple."""

    relation: str  # the short label the model gave
    text: str  # its description sentence (what SA-RAG embeds as the edge text)
    chunk: str  # the chunk id it came from


@dataclass(frozen=True)
class ChunkRef:
    pid: str
    title: str
    index: int

    @property
    def cid(self) -> str:
        return f"doc:{self.pid}/chunk:{self.index}"


@dataclass
class TextKG:
    """The side tables of a text-built KG that `KGStore` cannot hold (see the module doc)."""

    kinds: list[str]  # per store node id: "entity" | "description" | "chunk"
    entity_types: dict[int, str]  # entity node -> PERSON | ORGANIZATION | GPE | MISC
    description_entity: dict[int, int]  # description node -> the entity it describes
    chunks: dict[int, ChunkRef]  # chunk node -> where it came from
    relations: dict[int, list[RelationMention]]  # related_to triple id -> its mentions
    unparsable: list[dict[str, str]]  # {"chunk", "stage", "reason", "output"} per failed output

    def ids(self, kind: str) -> np.ndarray:
        """The node ids of one kind, ascending."""
        if kind not in KINDS:
            raise ConfigError(f"kind: expected one of {KINDS}, got {kind!r}")
        return np.flatnonzero(np.asarray(self.kinds) == kind)

    def save(self, folder: Path) -> Path:
        path = Path(folder) / TEXT_KG_FILE
        payload = {
            "format": TEXT_KG_FORMAT, "version": 1, "kinds": self.kinds,
            "entity_types": {str(k): v for k, v in self.entity_types.items()},
            "description_entity": {str(k): v for k, v in self.description_entity.items()},
            "chunks": {str(k): [c.pid, c.title, c.index] for k, c in self.chunks.items()},
            "relations": {str(k): [[m.relation, m.text, m.chunk] for m in ms] for k, ms in self.relations.items()},
            "unparsable": self.unparsable,
        }
        atomic_text(path, json.dumps(payload, ensure_ascii=False))
        return path

    @classmethod
    def load(cls, folder: Path) -> "TextKG":
        path = Path(folder) / TEXT_KG_FILE
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            if d.get("format") != TEXT_KG_FORMAT:
                raise ValueError(f"format {d.get('format')!r}")
            return cls(kinds=list(d["kinds"]),
                       entity_types={int(k): v for k, v in d["entity_types"].items()},
                       description_entity={int(k): int(v) for k, v in d["description_entity"].items()},
                       chunks={int(k): ChunkRef(*v) for k, v in d["chunks"].items()},
                       relations={int(k): [RelationMention(*m) for m in ms] for k, ms in d["relations"].items()},
                       unparsable=list(d["unparsable"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataFormatError(path, None, f"the side tables of a text KG ({TEXT_KG_FORMAT}, written by "
                                  "TextKG.save)", f"{type(exc).__name__}: {exc}") from None


def assemble(chunks: Sequence[Chunk], records: Sequence[dict[str, Any]]) -> tuple[KGStore, TextKG, dict[str, int]]:
    """The store and side tables from the journal records of `chunks` (same order), and counts."""
    resolver = _Resolver()
    triples: list[tuple[str, str, str]] = []
    prov: list[str] = []
    descriptions: dict[str, tuple[str, int]] = {}  # description node -> (text, entity index)
    chunk_nodes: dict[str, Chunk] = {}
    mentions: list[tuple[int, int, RelationMention]] = []
    dropped = 0
    for chunk, rec in zip(chunks, records):
        local: dict[str, int] = {}
        for j, e in enumerate(rec["entities"]):
            i = resolver.add(e["name"], e["type"], e["aliases"])
            for form in (e["name"], *e["aliases"]):
                local.setdefault(normalize(form), i)
            chunk_nodes[chunk.cid] = chunk
            triples.append((chunk.cid, DESCRIBES, resolver.entities[i].name))
            prov.append(chunk.cid)
            if e["description"]:
                node = f"{chunk.cid}/description:{j}"
                descriptions[node] = (e["description"], i)
                resolver.entities[i].descriptions.append(e["description"])
                triples.append((node, DESCRIBES, resolver.entities[i].name))
                prov.append(chunk.cid)
        for r in rec["relations"]:
            h, t = local.get(normalize(r["source"])), local.get(normalize(r["target"]))
            if h is None or t is None or h == t:
                dropped += 1
                continue
            text = r["description"] or f"{r['source']} {r['relation']} {r['target']}"
            mentions.append((h, t, RelationMention(r["relation"], text, chunk.cid)))
            triples.append((resolver.entities[h].name, RELATED_TO, resolver.entities[t].name))
            prov.append(chunk.cid)
    store = KGStore.from_triples(triples, provenance=prov)
    ent_ids = [store.entity_id(e.name) for e in resolver.entities]
    kinds = [""] * store.num_entities
    texts: dict[int, str] = {}
    for e, i in zip(resolver.entities, ent_ids):
        kinds[i] = "entity"
        texts[i] = e.descriptions[0] if e.descriptions else ""
    description_entity: dict[int, int] = {}
    for node, (text, ent) in descriptions.items():
        i = store.entity_id(node)
        kinds[i], texts[i], description_entity[i] = "description", text, ent_ids[ent]
    chunk_refs: dict[int, ChunkRef] = {}
    for cid, chunk in chunk_nodes.items():
        i = store.entity_id(cid)
        kinds[i], texts[i], chunk_refs[i] = "chunk", chunk.as_text(), ChunkRef(chunk.pid, chunk.title, chunk.index)
    store.set_descriptions(texts)
    store.set_aliases({i: e.aliases() for e, i in zip(resolver.entities, ent_ids) if e.aliases()})
    relations: dict[int, list[RelationMention]] = {}
    if mentions:
        rel = store.relation_id(RELATED_TO)
        tids = np.flatnonzero(np.asarray(store.rels) == rel)
        by_pair = dict(zip(zip(np.asarray(store.heads)[tids].tolist(), np.asarray(store.tails)[tids].tolist()),
                           tids.tolist()))
        for h, t, m in mentions:
            relations.setdefault(by_pair[(ent_ids[h], ent_ids[t])], []).append(m)
    unparsable = [{"chunk": rec["chunk"], **f} for rec in records for f in rec["failures"]]
    kg = TextKG(kinds, {i: e.type for e, i in zip(resolver.entities, ent_ids)}, description_entity, chunk_refs,
                relations, unparsable)
    counts = {"entity_nodes": len(ent_ids), "description_nodes": len(descriptions), "chunk_nodes": len(chunk_nodes),
              "relation_mentions": len(mentions), "related_to_triples": len(relations), "dropped_relations": dropped}
    return store, kg, counts


# ---- statistics ----------------------------------------------------------------------------------
def index_stats(chunks: Sequence[Chunk], records: Sequence[dict[str, Any]], counts: dict[str, int]) -> dict[str, Any]:
    """Per-corpus index statistics from the journal records (see `methods.sa_rag.extraction.build_text_kg`)."""
    n = max(len(chunks), 1)
    asked = sum(len(r["asked"]) for r in records)
    failed = [f["stage"] for r in records for f in r["failures"]]
    usage = {k: sum(r["usage"][k] for r in records)
             for k in ("requests", "calls", "prompt_tokens", "completion_tokens")}
    return {
        "chunks": len(chunks),
        "entity_mentions": sum(len(r["entities"]) for r in records),
        **counts,
        "entities_per_chunk": round(sum(len(r["entities"]) for r in records) / n, 3),
        "relations_per_chunk": round(counts["relation_mentions"] / n, 3),
        "chunks_with_zero_entities": sum(not r["entities"] for r in records),
        "outputs": asked,
        "unparsable_outputs": len(failed),
        "unparsable_entity_outputs": failed.count("entities"),
        "unparsable_relation_outputs": failed.count("relations"),
        "unparsable_rate": round(len(failed) / max(asked, 1), 4),
        "cut_off_outputs_salvaged": sum(r.get("salvaged", 0) for r in records),
        "repairs_attempted": sum(r["repairs"] for r in records),
        "repairs_succeeded": sum(r["repaired"] for r in records),
        "entity_types_coerced": sum(r["types_coerced"] for r in records),
        # the caps of `methods.sa_rag.extraction.ExtractionConfig` (absent from journals written before them)
        **{f"{k}_over_cap": sum(r.get("over_cap", {}).get(k, 0) for r in records)
           for k in ("entities", "aliases", "relations")},
        "strings_cut": sum(r.get("over_cap", {}).get("strings", 0) for r in records),
        "entity_outputs_at_cap": sum("entities" in r.get("at_cap", ()) for r in records),
        "relation_outputs_at_cap": sum("relations" in r.get("at_cap", ()) for r in records),
        "demo_entities_dropped": sum(r.get("demo_echoes", 0) for r in records),
        "llm_requests": usage["requests"], "llm_calls": usage["calls"],
        "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
    }
