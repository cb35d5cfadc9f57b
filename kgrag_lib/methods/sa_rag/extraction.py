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

Caps (`ExtractionConfig`; the paper states none, we bound every call for the CPU budget and
against small models looping under a grammar): output tokens per call, entities, aliases per
entity and relations per call, characters per name, label and description. The JSON schema
carries the list and string caps, so a backend with constrained decoding never exceeds them;
a backend without it may, and then the parser enforces them the same way (items beyond a list
cap dropped, strings cut) and counts every dropped item and cut string (`over_cap`), as well
as the outputs whose list reached its cap (`at_cap`: more may have been cut there). A `text:`
KG spec sets any cap (`text:2wiki:dev200:n=30:seed=0:max_relations=60`, `split_caps`). An entity
the model copied from the prompt's demonstration (a demonstration name the chunk does not
contain) is dropped and counted (`demo_echoes`). The journal keeps the first 300 characters
of a failed output (a record, not an input of the KG).

`text_source` plans the `text:` KG of `kg.sources` (provided to it when this package is
imported). Resumable (`kg.extraction.extract_journaled`): each extracted chunk is one fsynced
journal line; a rerun extracts only the chunks the journal lacks.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ...concurrency import fan_out
from ...config import check_values, opt
from ...data.selection import CorpusSelection
from ...errors import ConfigError
from ...kg.extraction import Chunk, chunk_passages, extract_journaled, metered, normalize, request_ids
from ...kg.sources import SourcePlan, provide, text_tables
from ...kg.store import KGStore
from ...kg.text_kg import TextKG, assemble, index_stats
from ...llm.base import PromptTooLongError
from ...llm.parsing import strip_think
from ...records import Passage
from .prompts import (DEMO_ENTITIES, ENTITY_TYPES, EXTRACTION_PROMPT_VERSION, MAX_ALIASES, MAX_DESCRIPTION_CHARS,
                      MAX_ENTITIES, MAX_LABEL_CHARS, MAX_NAME_CHARS, MAX_RELATIONS, entity_messages, entity_schema,
                      relation_messages, relation_schema, repair_messages)

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
    """Everything besides the model and the prompts that changes what is extracted (§3.1 gives the
    chunking; every cap is ours: the paper states none). The caps bound the cost of one call on
    CPU and turn a small model's loop under a grammar into a short, valid answer; the KG build's
    identity and stats record every field."""

    chunk_size: int = opt(500, "words per chunk (§3.1: 500)", min=1)
    overlap: int = opt(200, "words shared by consecutive chunks (§3.1: 200)", min=0)
    max_tokens: int = opt(1024, "max new tokens of one entity, relation or repair call (ours; the paper states "
                                "none): an output cut off there keeps its complete items", min=1)
    max_entities: int = opt(MAX_ENTITIES, "entities kept per chunk, in output order (ours: the schema's maxItems; "
                                          "further ones are dropped and counted)", min=1)
    max_aliases: int = opt(MAX_ALIASES, "aliases kept per entity (ours: the schema's maxItems; further ones are "
                                        "dropped and counted)", min=0)
    max_relations: int = opt(MAX_RELATIONS, "relations kept per chunk, in output order (ours: the schema's maxItems; "
                                            "further ones are dropped and counted)", min=0)
    max_name_chars: int = opt(MAX_NAME_CHARS, "characters of an entity name, alias, relation source or target "
                                              "(ours: the schema's maxLength; longer ones are cut and counted)", min=1)
    max_label_chars: int = opt(MAX_LABEL_CHARS, "characters of a relation label (ours: the schema's maxLength; "
                                                "longer ones are cut and counted)", min=1)
    max_description_chars: int = opt(MAX_DESCRIPTION_CHARS, "characters of an entity or relation description (ours: "
                                                            "the schema's maxLength; longer ones are cut and counted)",
                                     min=1)

    def __post_init__(self) -> None:
        check_values(self, "ExtractionConfig")

    def cross_check(self) -> None:
        if self.overlap >= self.chunk_size:
            raise ConfigError(f"parameter 'overlap' must be below chunk_size={self.chunk_size}, got {self.overlap!r}")

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def caps(self) -> dict[str, int]:
        """The cap fields and their values (for the build's stats)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name.startswith("max_")}

    def entity_schema(self) -> str:
        return entity_schema(self.max_entities, self.max_aliases, self.max_name_chars, self.max_description_chars)

    def relation_schema(self) -> str:
        return relation_schema(self.max_relations, self.max_name_chars, self.max_label_chars,
                               self.max_description_chars)


CAP_COUNTS = ("entities", "aliases", "relations", "strings")
_DEMO_NAMES = {normalize(form) for e in DEMO_ENTITIES for form in (e["name"], *e["aliases"])}


def _cut(value: str, limit: int, over: dict[str, int]) -> str:
    if len(value) <= limit:
        return value
    over["strings"] += 1
    return value[:limit].rstrip()


def cap_entities(entities: list[dict[str, Any]], config: ExtractionConfig, text: str
                 ) -> tuple[list[dict[str, Any]], dict[str, int], int]:
    """`entities` within the caps (what the schema asks a constrained backend for), how many items
    were dropped or strings cut over each cap, and how many demonstration entities were dropped:
    a name of the prompt's demonstration that `text` (the chunk) does not contain was copied from
    the prompt, not read in the chunk."""
    over = dict.fromkeys(CAP_COUNTS, 0)
    within = normalize(text)
    kept = [e for e in entities if normalize(e["name"]) not in _DEMO_NAMES or normalize(e["name"]) in within]
    echoes = len(entities) - len(kept)
    over["entities"] = max(0, len(kept) - config.max_entities)
    out = []
    for e in kept[:config.max_entities]:
        over["aliases"] += max(0, len(e["aliases"]) - config.max_aliases)
        aliases = [_cut(a, config.max_name_chars, over) for a in e["aliases"][:config.max_aliases]]
        out.append({"name": _cut(e["name"], config.max_name_chars, over), "type": e["type"], "aliases": aliases,
                    "description": _cut(e["description"], config.max_description_chars, over)})
    return out, over, echoes


def cap_relations(relations: list[dict[str, str]], config: ExtractionConfig
                  ) -> tuple[list[dict[str, str]], dict[str, int]]:
    """`relations` within the caps, and how many items were dropped or strings cut over each cap."""
    over = dict.fromkeys(CAP_COUNTS, 0)
    over["relations"] = max(0, len(relations) - config.max_relations)
    limits = {"source": config.max_name_chars, "relation": config.max_label_chars, "target": config.max_name_chars,
              "description": config.max_description_chars}
    return [{k: _cut(r[k], limits[k], over) for k in limits} for r in relations[:config.max_relations]], over


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
                              "failures": [], "salvaged": 0, "repairs": 0, "repaired": 0, "types_coerced": 0,
                              "over_cap": dict.fromkeys(CAP_COUNTS, 0), "at_cap": [], "demo_echoes": 0}
    text = chunk.as_text()

    def count(over: dict[str, int]) -> None:
        for k, v in over.items():
            record["over_cap"][k] += v

    found = _structured(llm, entity_messages(text), base.replace(json_schema=config.entity_schema()),
                        parse_entities, "entities", record) or []
    if found and len(found) >= config.max_entities:
        record["at_cap"].append("entities")
    entities, over, record["demo_echoes"] = cap_entities(found, config, text)
    count(over)
    record["entities"] = entities
    names = list(dict.fromkeys(e["name"] for e in entities))
    if len({normalize(n) for n in names}) >= 2:
        record["asked"].append("relations")
        found = _structured(llm, relation_messages(text, names), base.replace(json_schema=config.relation_schema()),
                            parse_relations, "relations", record) or []
        if found and len(found) >= config.max_relations:
            record["at_cap"].append("relations")
        record["relations"], over = cap_relations(found, config)
        count(over)
    return record


# ---- the build ---------------------------------------------------------------------------------------
def build_text_kg(passages: Sequence[Passage], llm: "LLM", journal: Path, *,
                  config: ExtractionConfig = ExtractionConfig(), show_progress: bool = True,
                  about: dict[str, Any] | None = None) -> tuple[KGStore, dict[str, Any], TextKG]:
    """Index `passages` into a KG, resuming from `journal`; returns the store, stats and side tables.

    Stats: `about` (what the corpus is), the model and prompt version, chunking, the caps, the
    counts of `assemble`, and from the journal: entities and relations per chunk, chunks with zero
    entities, outputs asked for / unparsable after repair (by stage) / their rate, repairs
    attempted and succeeded, entity types coerced, items dropped and strings cut over a cap,
    outputs that reached a list cap, demonstration entities dropped, and LLM requests, backend calls and tokens
    summed over the chunks when first extracted (tokens of cache hits included); `*_this_build`
    count what this call itself extracted and sent.
    """
    start = time.perf_counter()
    chunks = chunk_passages(passages, config.chunk_size, config.overlap)
    with llm.meter() as meter:
        records, extracted = extract_journaled(chunks, journal, lambda chunk: extract_chunk(llm, chunk, config),
                                               desc="indexing chunks", show_progress=show_progress,
                                               workers=fan_out(llm))
    store, kg, counts = assemble(chunks, records)
    stats = {
        "kg": "text", **(about or {}),
        "model": llm.name, "model_identity": llm.identity, "prompt_version": EXTRACTION_PROMPT_VERSION,
        "chunk_size": config.chunk_size, "chunk_overlap": config.overlap, "max_tokens": config.max_tokens,
        "caps": config.caps(),
        "passages": len(passages),
        **index_stats(chunks, records, counts),
        "chunks_extracted_this_build": extracted, "llm_calls_this_build": meter.usage.calls,
        "seconds_this_build": round(time.perf_counter() - start, 3),
        "request_ids": request_ids(records),
        "entities": store.num_entities, "relations": store.num_relations, "triples": store.num_triples,
    }
    return store, stats, kg


# ---- the text: KG source ------------------------------------------------------------------------
def split_caps(arg: str) -> tuple[str, ExtractionConfig]:
    """A `text:` spec's corpus selection, and the `ExtractionConfig` its caps set (`max_relations=60`:
    any `max_*` field), so a profile can sweep a cap without a code change; a cap
    left at its default leaves the KG's folder name and identity as they were."""
    names = ExtractionConfig().caps()
    keep, caps = [], {}
    for part in arg.split(":"):
        key, eq, value = part.partition("=")
        if not (eq and key.startswith("max_")):
            keep.append(part)
        elif key not in names:
            raise ConfigError(f"{part!r}: unknown extraction cap; expected one of "
                              f"{', '.join(f'{k}=<N>' for k in names)}")
        elif key in caps or not value.isdigit():
            what = "given twice" if key in caps else f"expected a non-negative integer, got {value!r}"
            raise ConfigError(f"{key}: {what}")
        else:
            caps[key] = int(value)
    return ":".join(keep), ExtractionConfig(**caps)   # refuses a value out of bounds, naming the field


def text_source(arg: str, data_root: Path, llm: "LLM | None") -> SourcePlan:
    """The KG `llm` extracts from the passages `arg` selects (`CorpusSelection`) under the caps it
    sets (`split_caps`), resumable."""
    arg, config = split_caps(arg)
    selection = CorpusSelection.parse(arg)
    if llm is None:
        raise ConfigError("a text KG is extracted by an LLM: pass llm= to load_kg/shared_kg "
                          "(or run `kgrag kg build --from-corpus`)")
    base = llm.default_params.to_dict()
    # the identity its schema-constrained requests are keyed by (hf's changed when it began enforcing schemas)
    model = llm.key_identity(llm.default_params.replace(json_schema=config.entity_schema()))
    identity = "\0".join([EXTRACTION_PROMPT_VERSION, llm.backend, model, config.key(),
                          json.dumps(base, sort_keys=True), str(selection)])

    def build(journal: Path) -> tuple[KGStore, dict[str, Any], Any]:
        passages, about = selection.passages(data_root)
        return build_text_kg(passages, llm, journal, config=config, about=about)

    default = ExtractionConfig().caps()
    changed = [f"{k}{v}" for k, v in sorted(config.caps().items()) if v != default[k]]
    name = "-".join([selection.name, EXTRACTION_PROMPT_VERSION, *changed])
    return SourcePlan(name, selection.input_files(data_root), build,
                      identity=identity, resumable=True, load_extra=text_tables)


provide("text", text_source)
