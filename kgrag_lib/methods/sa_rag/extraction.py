"""SA-RAG's extraction of a KG from documents (§3.1): the per-chunk LLM calls and their parsing.

Pipeline: passages -> word chunks (500 words, 200 overlap; the title kept with every chunk) ->
per chunk an entity call and, when it found two or more entities, a relation call among them
(`prompts`, JSON constrained to a schema where the backend can) -> one journal line per
chunk -> entity resolution -> `KGStore` + `TextKG` side tables (`kg.text_kg`).

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

`text_source` plans the `text:` KG of `kg.sources` (provided to it when this package is
imported). Resumable (`kg.extraction.extract_journaled`): each extracted chunk is one fsynced
journal line; a rerun extracts only the chunks the journal lacks.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ...errors import ConfigError
from ...kg.extraction import Chunk, chunk_passages, extract_journaled, metered, normalize
from ...kg.sources import SourcePlan, provide, text_tables
from ...kg.store import KGStore
from ...kg.text_kg import TextKG, assemble, index_stats
from ...llm.base import PromptTooLongError
from ...llm.parsing import strip_think
from ...records import Passage
from .prompts import (ENTITY_SCHEMA, ENTITY_TYPES, EXTRACTION_PROMPT_VERSION, RELATION_SCHEMA, entity_messages,
                      relation_messages, repair_messages)

if TYPE_CHECKING:  # pragma: no cover
    from ...llm.base import LLM, Messages, SamplingParams

_SHOWN_OUTPUT = 300  # characters of a failed output kept in the journal


# ---- strict parsing ---------------------------------------------------------------------------
class InvalidOutput(ValueError):
    """An output that is not the JSON asked for; the message is what the repair request shows."""


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
    return metered(llm, lambda: _extract_chunk(llm, chunk, config))


def _extract_chunk(llm: "LLM", chunk: Chunk, config: ExtractionConfig) -> dict[str, Any]:
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
    return record


# ---- the build ---------------------------------------------------------------------------------------
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
    start = time.perf_counter()
    chunks = chunk_passages(passages, config.chunk_size, config.overlap)
    with llm.meter() as meter:
        records, extracted = extract_journaled(chunks, journal, lambda chunk: extract_chunk(llm, chunk, config),
                                               desc="indexing chunks", show_progress=show_progress,
                                               workers=getattr(llm, "default_concurrency", 1))
    store, kg, counts = assemble(chunks, records)
    stats = {
        "kg": "text", **(about or {}),
        "model": llm.name, "model_identity": llm.identity, "prompt_version": EXTRACTION_PROMPT_VERSION,
        "chunk_size": config.chunk_size, "chunk_overlap": config.overlap, "max_tokens": config.max_tokens,
        "passages": len(passages),
        **index_stats(chunks, records, counts),
        "chunks_extracted_this_build": extracted, "llm_calls_this_build": meter.usage.calls,
        "seconds_this_build": round(time.perf_counter() - start, 3),
        "entities": store.num_entities, "relations": store.num_relations, "triples": store.num_triples,
    }
    return store, stats, kg


# ---- the text: KG source ------------------------------------------------------------------------
def text_source(arg: str, data_root: Path, llm: "LLM | None") -> SourcePlan:
    """The KG `llm` extracts from the passages `arg` selects (`CorpusSelection`), resumable."""
    from ...data.selection import CorpusSelection

    selection = CorpusSelection.parse(arg)
    if llm is None:
        raise ConfigError("a text KG is extracted by an LLM: pass llm= to load_kg/shared_kg "
                          "(or run `kgrag kg build --from-corpus`)")
    config = ExtractionConfig()
    base = llm.default_params.to_dict()
    identity = "\0".join([EXTRACTION_PROMPT_VERSION, llm.backend, llm.identity, config.key(),
                          json.dumps(base, sort_keys=True), str(selection)])

    def build(journal: Path) -> tuple[KGStore, dict[str, Any], Any]:
        passages, about = selection.passages(data_root)
        return build_text_kg(passages, llm, journal, config=config, about=about)

    return SourcePlan(f"{selection.name}-{EXTRACTION_PROMPT_VERSION}", selection.input_files(data_root), build,
                      identity=identity, resumable=True, load_extra=text_tables)


provide("text", text_source)
