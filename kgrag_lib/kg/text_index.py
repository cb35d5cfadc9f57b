"""A KG built from documents by an LLM (SA-RAG §3.1; TCR-QF reuses it), stored in `KGStore`.

Pipeline: passages -> word chunks (500 words, 200 overlap; the title kept with every chunk) ->
per chunk an entity call and, when it found two or more entities, a relation call among them
(`text_prompts`, JSON constrained to a schema where the backend can) -> one journal line per
chunk -> entity resolution -> `KGStore` + `TextKG` side tables.

Parsing is strict: the first JSON value in the output must decode as it is and match the
expected shape (`{"entities": [...]}`; a bare list is taken as the list). An output cut off
inside its list (max_tokens reached: small models loop under a grammar) keeps its complete
items, exact repeats dropped (counted as salvaged). Otherwise ONE repair
request (the output, the error, the schema) is sent; if its answer fails too, the failure is
recorded with the reason and indexing goes on (a prompt too long for the model is recorded
the same way, without a repair).
An entity type outside PERSON / ORGANIZATION / GPE / MISC becomes MISC (counted). A relation
whose source or target is not an entity extracted from the same chunk, or that links an
entity to itself, is dropped (counted: SA-RAG's code drops them silently).

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

Resumable: each extracted chunk is one fsynced JSON line in the journal; a rerun reads it,
drops a torn last line, and extracts only the chunks it lacks. With the LLM call cache a
complete re-extraction sends no backend call.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import ConfigError, DataFormatError
from ..jsonl import JsonlAppender, atomic_text, drop_torn_tail, read_jsonl
from ..llm.base import PromptTooLongError
from ..llm.parsing import strip_think
from ..records import Passage
from . import text_prompts
from .store import KGStore
from .text_prompts import (ENTITY_SCHEMA, ENTITY_TYPES, RELATION_SCHEMA, entity_messages, relation_messages,
                           repair_messages)

if TYPE_CHECKING:  # pragma: no cover
    from ..llm.base import LLM, Messages, SamplingParams

TEXT_KG_FILE = "text_kg.json"
TEXT_KG_FORMAT = "kgrag-text-kg"
KINDS = ("entity", "description", "chunk")
DESCRIBES, RELATED_TO = "describes", "related_to"
_RESERVED_PREFIX = "doc:"
_SHOWN_OUTPUT = 300  # characters of a failed output kept in the journal


# ---- chunking -------------------------------------------------------------------------------
def chunk_words(text: str, size: int = 500, overlap: int = 200) -> list[str]:
    """Windows of `size` whitespace-separated words, each starting `size - overlap` words after the
    previous one; the last window ends at the last word. No words: no chunks."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"chunk size: expected an int >= 1, got {size!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < size:
        raise ConfigError(f"chunk overlap: expected an int in [0, size={size}), got {overlap!r}")
    words = text.split()
    out, step = [], size - overlap
    for start in range(0, len(words), step):
        out.append(" ".join(words[start:start + size]))
        if start + size >= len(words):
            break
    return out


@dataclass(frozen=True)
class Chunk:
    """A window of a passage; `cid` is `doc:<pid>/chunk:<i>`."""

    pid: str
    index: int
    title: str
    text: str

    @property
    def cid(self) -> str:
        return f"doc:{self.pid}/chunk:{self.index}"

    def as_text(self) -> str:
        """What the LLM reads: the passage title on its own line, then the words."""
        return f"{self.title}\n{self.text}" if self.title else self.text


def chunk_passages(passages: Iterable[Passage], size: int = 500, overlap: int = 200) -> list[Chunk]:
    """Every passage's word chunks, in corpus order, each keeping the passage title."""
    return [Chunk(p.pid, i, p.title, words)
            for p in passages for i, words in enumerate(chunk_words(p.text, size, overlap))]


# ---- strict parsing ---------------------------------------------------------------------------
class InvalidOutput(ValueError):
    """An output that is not the JSON asked for; the message is what the repair request shows."""


def normalize(name: str) -> str:
    """The key entity resolution compares: NFKC, case-folded, punctuation removed, spaces collapsed."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return " ".join("".join(" " if unicodedata.category(c).startswith("P") else c for c in folded).split())


def _clean(text: str) -> str:
    return " ".join(text.split())


def load_json(text: str) -> Any:
    """The first JSON object or array in `text` (reasoning blocks and surrounding prose ignored),
    decoded strictly: no repair of its syntax."""
    text = strip_think(text)
    match = re.search(r"[{\[]", text)
    if match is None:
        raise InvalidOutput("no JSON object in the output")
    try:
        value, _ = json.JSONDecoder().raw_decode(text, match.start())
    except json.JSONDecodeError as exc:
        raise InvalidOutput(f"not valid JSON: {exc.msg} at character {exc.pos}") from None
    return value


def complete_items(text: str, key: str) -> str | None:
    """The complete items of a JSON list cut off by max_tokens (a small model that loops under a
    grammar repeats items until the budget ends), exact repeats dropped, as `{"key": [...]}`;
    None if not one item is complete. Cheaper and more faithful than an LLM repair of the cut."""
    text = strip_think(text)
    match = re.search(r'"%s"\s*:\s*\[' % re.escape(key), text)
    if match is None:
        return None
    decoder, pos, items = json.JSONDecoder(), match.end(), {}
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] != "{":
            break
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        items.setdefault(json.dumps(item, sort_keys=True), item)
    if pos < len(text) and text[pos] != "{":
        return None  # the list goes on or closes: a syntax error for the repair, not a cut-off
    return json.dumps({key: list(items.values())}) if items else None


def _items(value: Any, key: str) -> list:
    items = value.get(key) if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise InvalidOutput(f'expected a JSON object {{"{key}": [...]}}')
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidOutput(f"{key}[{k}] is not a JSON object")
    return items


def _string(item: dict, key: str, where: str, required: bool) -> str:
    value = item.get(key, "")
    if not isinstance(value, str):
        raise InvalidOutput(f'{where}."{key}" is not a string')
    if required and not normalize(value):
        raise InvalidOutput(f'{where} has no "{key}"')
    return _clean(value)


def parse_entities(text: str) -> tuple[list[dict[str, Any]], int]:
    """The entities of an entity-call output, and how many types were coerced to MISC."""
    out, coerced = [], 0
    for k, item in enumerate(_items(load_json(text), "entities")):
        where = f"entities[{k}]"
        name = _string(item, "name", where, True)
        etype = _string(item, "type", where, False).upper()
        if etype not in ENTITY_TYPES:
            etype, coerced = "MISC", coerced + 1
        aliases = item.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise InvalidOutput(f'{where}."aliases" is not a list of strings')
        out.append({"name": name, "type": etype, "aliases": [_clean(a) for a in aliases if normalize(a)],
                    "description": _string(item, "description", where, False)})
    return out, coerced


def parse_relations(text: str) -> tuple[list[dict[str, str]], int]:
    """The relations of a relation-call output (the 0 keeps the shape of `parse_entities`)."""
    out = []
    for k, item in enumerate(_items(load_json(text), "relations")):
        where = f"relations[{k}]"
        out.append({"source": _string(item, "source", where, True), "relation": _string(item, "relation", where, False),
                    "target": _string(item, "target", where, True),
                    "description": _string(item, "description", where, False)})
    return out, 0


# ---- extraction ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExtractionConfig:
    """Everything besides the model and the prompts that changes what is extracted."""

    chunk_size: int = 500
    overlap: int = 200
    max_tokens: int = 1024

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _ask(llm: "LLM", messages: "Messages", params: "SamplingParams") -> tuple[str | None, str]:
    """The output, or None and the reason when the prompt does not fit the model."""
    try:
        return llm.generate(messages, params), ""
    except PromptTooLongError as exc:
        return None, f"prompt too long: {exc}"


def _structured(llm: "LLM", messages: "Messages", params: "SamplingParams",
                parse: Callable[[str], tuple[list, int]], stage: str, record: dict) -> list | None:
    """A parsed output after at most one repair request; None (failure recorded) if none parses."""
    out, reason = _ask(llm, messages, params)
    if out is None:
        record["failures"].append({"stage": stage, "reason": reason, "output": ""})
        return None
    try:
        items, coerced = parse(out)
    except InvalidOutput as first:
        kept = complete_items(out, stage)
        if kept is not None:
            try:
                items, coerced = parse(kept)
            except InvalidOutput:
                pass
            else:
                record["salvaged"] += 1
                record["types_coerced"] += coerced
                return items
        record["repairs"] += 1
        fixed, reason = _ask(llm, repair_messages(out, str(first), params.json_schema), params)
        try:
            if fixed is None:
                raise InvalidOutput(reason)
            items, coerced = parse(fixed)
        except InvalidOutput as second:
            record["failures"].append({"stage": stage, "reason": f"{second} (after one repair; first error: {first})",
                                       "output": (fixed or out)[:_SHOWN_OUTPUT]})
            return None
        record["repaired"] += 1
    record["types_coerced"] += coerced
    return items


def extract_chunk(llm: "LLM", chunk: Chunk, config: ExtractionConfig = ExtractionConfig()) -> dict[str, Any]:
    """One chunk's journal record: its entities and relations as parsed, failures, repairs, usage."""
    before = llm.usage.snapshot()
    base = llm.default_params.replace(max_tokens=config.max_tokens)
    record: dict[str, Any] = {"chunk": chunk.cid, "entities": [], "relations": [], "asked": ["entities"],
                              "failures": [], "salvaged": 0, "repairs": 0, "repaired": 0, "types_coerced": 0}
    text = chunk.as_text()
    entities = _structured(llm, entity_messages(text), base.replace(json_schema=ENTITY_SCHEMA),
                           parse_entities, "entities", record) or []
    record["entities"] = entities
    names = list(dict.fromkeys(e["name"] for e in entities))
    if len({normalize(n) for n in names}) >= 2:
        record["asked"].append("relations")
        record["relations"] = _structured(llm, relation_messages(text, names),
                                          base.replace(json_schema=RELATION_SCHEMA), parse_relations, "relations",
                                          record) or []
    used = llm.usage.since(before)
    record["usage"] = {"requests": used.requests, "calls": used.calls, "prompt_tokens": used.total_prompt_tokens,
                       "completion_tokens": used.total_completion_tokens}
    return record


# ---- the journal ----------------------------------------------------------------------------------
class Journal:
    """The extraction journal: one JSON line per extracted chunk (`"chunk"` is its id), each on
    disk before the next chunk starts, so a kill loses at most the chunk in flight."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._log = JsonlAppender(self.path)

    def read(self) -> dict[str, dict[str, Any]]:
        """The records by chunk id; a torn last line (a kill mid-write) is cut off the file."""
        expected = "one JSON object per extracted chunk"
        read = read_jsonl(self.path, expected=expected, torn_tail=True)
        for n, rec in zip(read.lines, read.rows):
            if "chunk" not in rec:
                raise DataFormatError(self.path, n, expected, json.dumps(rec, ensure_ascii=False)[:120])
        drop_torn_tail(read)
        return {rec["chunk"]: rec for rec in read.rows}

    def append(self, record: dict[str, Any]) -> None:
        self._log.append(record)

    def close(self) -> None:
        self._log.close()


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


# ---- the build ---------------------------------------------------------------------------------------
def index_stats(chunks: Sequence[Chunk], records: Sequence[dict[str, Any]], counts: dict[str, int]) -> dict[str, Any]:
    """Per-corpus index statistics from the journal records (see `build_text_kg`)."""
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
        "llm_requests": usage["requests"], "llm_calls": usage["calls"],
        "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
    }


def build_text_kg(passages: Sequence[Passage], llm: "LLM", journal: Path, *,
                  config: ExtractionConfig = ExtractionConfig(), show_progress: bool = True,
                  about: dict[str, Any] | None = None) -> tuple[KGStore, dict[str, Any], TextKG]:
    """Index `passages` into a KG, resuming from `journal`; returns the store, stats and side tables.

    Stats: `about` (what the corpus is), the model and prompt version, chunking, the counts of
    `assemble`, and from the journal: entities and relations per chunk, chunks with zero
    entities, outputs asked for / unparsable after repair (by stage) / their rate, repairs
    attempted and succeeded, entity types coerced, and LLM requests, backend calls and tokens
    summed over the chunks when first extracted (tokens of cache hits included); `*_this_build`
    count what this call itself extracted and sent.
    """
    from ..progress import progress

    start = time.perf_counter()
    chunks = chunk_passages(passages, config.chunk_size, config.overlap)
    log = Journal(journal)
    done = log.read()
    todo = [c for c in chunks if c.cid not in done]
    calls_before = llm.usage.calls
    bar = progress(total=len(chunks), initial=len(chunks) - len(todo), unit="chunk", desc="indexing chunks",
                   disable=not show_progress)
    try:
        for chunk in todo:
            record = extract_chunk(llm, chunk, config)
            log.append(record)
            done[chunk.cid] = record
            bar.update(1)
    finally:
        bar.close()
        log.close()
    records = [done[c.cid] for c in chunks]
    store, kg, counts = assemble(chunks, records)
    stats = {
        "kg": "text", **(about or {}),
        "model": llm.name, "model_identity": llm.identity, "prompt_version": text_prompts.PROMPT_VERSION,
        "chunk_size": config.chunk_size, "chunk_overlap": config.overlap, "max_tokens": config.max_tokens,
        "passages": len(passages),
        **index_stats(chunks, records, counts),
        "chunks_extracted_this_build": len(todo), "llm_calls_this_build": llm.usage.calls - calls_before,
        "seconds_this_build": round(time.perf_counter() - start, 3),
        "entities": store.num_entities, "relations": store.num_relations, "triples": store.num_triples,
    }
    return store, stats, kg


# ---- which corpus ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CorpusSelection:
    """The passages a `text:` KG indexes: `<dataset>[:<split>][:n=<N>][:seed=<S>]`.

    Without `n`: the dataset's corpus (`load_corpus`: MuSiQue and HotpotQA pool the paragraphs
    of every question of the split, 2Wiki has its own corpus file). With `n`: the pooled,
    de-duplicated paragraphs of a seeded sample of `n` questions (`load_questions`), as SA-RAG
    and its code do. Titles are kept either way.
    """

    dataset: str
    split: str | None = None
    n: int | None = None
    seed: int = 0

    @classmethod
    def parse(cls, arg: str) -> "CorpusSelection":
        from ..data.registry import get_spec

        dataset, *rest = arg.split(":")
        if not dataset:
            raise ConfigError("expected text:<dataset>[:<split>][:n=<N>][:seed=<S>], e.g. text:musique:dev200:n=100")
        spec = get_spec(dataset)
        split, n, seed = None, None, 0
        for part in rest:
            key, eq, value = part.partition("=")
            if eq and key in ("n", "seed"):
                if not value.isdigit() or (key == "n" and int(value) < 1):
                    kind = "positive" if key == "n" else "non-negative"
                    raise ConfigError(f"{key}={value!r}: expected a {kind} integer")
                n, seed = (int(value), seed) if key == "n" else (n, int(value))
            elif eq or split is not None or part not in spec.splits:
                raise ConfigError(f"{part!r}: expected a split of {dataset} ({', '.join(spec.splits)}), "
                                  "n=<N> or seed=<S>")
            else:
                split = part
        if spec.corpus == "none":
            raise ConfigError(f"{dataset} ships no passages to index")
        if n is None and split is not None and spec.corpus not in ("pooled", "facts"):
            raise ConfigError(f"{dataset}'s corpus is one file whatever the split; drop {split!r} or add n=<N> "
                              "to index the paragraphs of sampled questions")
        return cls(dataset, split, n, seed)

    @property
    def whole_corpus_file(self) -> bool:
        from ..data.registry import get_spec

        return self.n is None and get_spec(self.dataset).corpus not in ("pooled", "facts")

    @property
    def name(self) -> str:
        sample = [f"n{self.n}s{self.seed}"] if self.n else []
        return "-".join(["text", self.dataset, self.split or "default", *sample])

    def input_files(self, root: Path) -> list[Path]:
        """The files the passages come from (MissingDataError names what is absent)."""
        from ..data.registry import default_path, get_spec

        if self.whole_corpus_file:
            return [root / get_spec(self.dataset).corpus]
        return [default_path(self.dataset, self.split, root, must_exist=True)]

    def passages(self, root: Path) -> tuple[list[Passage], dict[str, Any]]:
        """The passages and a description of them for the statistics."""
        from ..data.common import pool_passages
        from ..data.registry import load_corpus, load_questions

        about: dict[str, Any] = {"dataset": self.dataset, "split": self.split}
        if self.n is None:
            passages = load_corpus(self.dataset, root, split=self.split)
            about["corpus"] = (f"the {self.dataset} corpus file" if self.whole_corpus_file else
                               f"pooled paragraphs of every {self.dataset} question of the split") + ", titles kept"
        else:
            questions = load_questions(self.dataset, self.split, root=root, n=self.n, seed=self.seed)
            passages = pool_passages(q.context for q in questions)
            about.update(questions=len(questions), seed=self.seed,
                         questions_without_paragraphs=sum(not q.context for q in questions),
                         corpus=f"pooled paragraphs of {len(questions)} sampled {self.dataset} questions "
                                f"(seed {self.seed}), titles kept")
        if not passages:
            from ..data.registry import get_spec

            others = [s for s in get_spec(self.dataset).splits if s != self.split]
            raise ConfigError(f"{self.dataset}{':' + self.split if self.split else ''}: no passages to index (the "
                              "selected questions carry no paragraphs); select a split whose questions ship them "
                              f"in the KG spec and the run ({', '.join(others)}; for 2wiki: dev200, e.g. --split "
                              "dev200 --set kg=tcr:2wiki:dev200:n=<n>:seed={seed})")
        return passages, about
