"""The prompts and JSON schemas of text-to-KG extraction (`kg.text_index`), in our own words.

Two calls per chunk, as in SA-RAG §3.1: one lists the entities (name, type, aliases, a
one-sentence description), the other the relations among exactly those entities, each with a
sentence saying how they are related. A third prompt repairs an output that does not parse.
Any change to a prompt's bytes or a schema must bump `PROMPT_VERSION`: it names the KG build
folder, so a changed prompt builds a new KG instead of mixing old and new extractions.
"""

from __future__ import annotations

import json

from ..llm.base import Messages

PROMPT_VERSION = "tkg2"
ENTITY_TYPES = ("PERSON", "ORGANIZATION", "GPE", "MISC")

# Every list and string is bounded: a small model under a grammar otherwise loops (the 0.5B model
# repeated one alias until max_tokens on 14 of 35 MuSiQue chunks), and the bounds turn that loop
# into a short, valid answer. Generous for real text: a chunk of 500 words rarely names 20 entities. A
# loop that still runs into max_tokens leaves a cut-off list whose complete items are kept
# (`text_index.complete_items`).
def _text(max_length: int) -> dict:
    return {"type": "string", "maxLength": max_length}


MAX_ENTITIES, MAX_ALIASES, MAX_RELATIONS = 20, 3, 30
ENTITY_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"entities": {"type": "array", "maxItems": MAX_ENTITIES, "items": {
        "type": "object",
        "properties": {"name": _text(80), "type": {"type": "string", "enum": list(ENTITY_TYPES)},
                       "aliases": {"type": "array", "maxItems": MAX_ALIASES, "items": _text(80)},
                       "description": _text(200)},
        "required": ["name", "type", "aliases", "description"],
    }}},
    "required": ["entities"],
}, separators=(",", ":"))
RELATION_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"relations": {"type": "array", "maxItems": MAX_RELATIONS, "items": {
        "type": "object",
        "properties": {"source": _text(80), "relation": _text(60), "target": _text(80), "description": _text(200)},
        "required": ["source", "relation", "target", "description"],
    }}},
    "required": ["relations"],
}, separators=(",", ":"))

_SYSTEM = ("You turn text into a knowledge graph. You read carefully, use only what the text says, "
           "and answer with JSON and nothing else.")

_ENTITY_TASK = """Text:
<<<
{text}
>>>

Find every entity the text mentions: people, organizations, places and other specific things
(works, events, products, species, dates that matter). For each one give:
- "name": the most complete name the text uses for it
- "type": PERSON, ORGANIZATION, GPE (a country, city, state or other place with a government) or MISC (anything else)
- "aliases": the other names, spellings or abbreviations the text uses for the same entity (an empty list if none)
- "description": one sentence, using only the text, that says who or what the entity is

Answer with one JSON object of this shape:
{{"entities": [{{"name": "...", "type": "PERSON", "aliases": ["..."], "description": "..."}}]}}"""

_RELATION_TASK = """Text:
<<<
{text}
>>>

Entities found in this text:
{entities}

List the relationships the text states between two of these entities. Write each entity name
exactly as it appears in the list above. For each relationship give:
- "source" and "target": the two entities
- "relation": a short label for the relationship, a few words
- "description": one sentence, using only the text, that says how the two are related

Answer with one JSON object of this shape:
{{"relations": [{{"source": "...", "relation": "...", "target": "...", "description": "..."}}]}}"""

_REPAIR_TASK = """The output below should have been one JSON object following this JSON schema:
{schema}

It could not be used: {error}

Output:
<<<
{output}
>>>

Write the corrected JSON object, keeping the content of the output. Reply with the JSON only."""


def entity_messages(text: str) -> Messages:
    """The entity-extraction request for one chunk (`text`: its title line and words)."""
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _ENTITY_TASK.format(text=text)}]


def relation_messages(text: str, entity_names: list[str]) -> Messages:
    """The relation-extraction request for one chunk and the entity names extracted from it."""
    listed = "\n".join(f"- {name}" for name in entity_names)
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _RELATION_TASK.format(text=text, entities=listed)}]


def repair_messages(output: str, error: str, schema: str) -> Messages:
    """The one repair request for an output that failed to parse or validate."""
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _REPAIR_TASK.format(schema=schema, error=error, output=output)}]
