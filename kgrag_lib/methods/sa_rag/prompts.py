"""Prompts of SA-RAG and its baselines (Pavlović et al., Appendices A and B), in our own words.

- `ANSWER` (Listings 1 and 6): the final answer from a context. The paper asks for a JSON object
  with a reasoning field and a final answer; we ask for the short answer alone, as every other
  method of this study does, so small models spend their tokens on the answer.
- `REASONING` (Listings 2 and 7): one step of the iterative (CoT) loop: a summary of the
  relevant facts, whether they answer the question, and a follow-up question if not. One
  template serves the dense and the SA-RAG loop: its wording covers the "key relationships"
  section that only SA-RAG's context has.
- `DECOMPOSE` (Listing 3): the question as a short sequence of single-fact sub-questions.
- KG extraction (§3.1, Listings 4 and 5, `extraction`): two calls per chunk, one listing the
  entities (name, type, aliases, a description holding the facts the paper's per-type rules
  name), the other the relations the text states among exactly those entities, pronouns
  resolved, each with a sentence saying how they are related; each call shows one worked
  example (our own passage, `DEMO_TEXT`) before the chunk, as the paper's one-shot
  demonstrations do. The paper's output is a bare list of entities (their text in
  `entity_information`) and a list of [entity, relation, entity] triples; ours is an object per
  call, constrained to a schema, whose relations carry a description sentence: SA-RAG embeds a
  related_to link by its text, and the parser and the cut-off salvage read one object shape. A
  third prompt repairs an output that does not parse. Any change to their bytes or a schema
  must bump `EXTRACTION_PROMPT_VERSION`: it names the KG build folder, so a changed prompt
  builds a new KG instead of mixing old and new extractions (tkg2, the prompts of the committed
  cpu-reference runs, had no per-type rules and no demonstrations).

Plain format strings without run-dependent parts: equal inputs give byte-identical requests,
so the LLM cache shares a stage between the variants (SA-RAG's single step and the first
retrieval of SA-RAG + CoT read the same context).
"""

from __future__ import annotations

import json
from typing import Sequence

Messages = list[dict[str, str]]

ANSWER = """Answer the question using only the context below. The context holds passages and, where given, key relationships between the entities they mention. Reply with the answer alone: a single word, yes or no, or a short phrase naming one thing; no explanation and no full sentence.

Context:
{context}

Question: {question}
Answer:"""

REASONING = """The question below needs facts from several documents put together. Work with the context only:
1. Write the facts from the context that matter for the question as one short paragraph ("summary").
2. Decide whether the summary answers the question ("answer_possible": true or false).
3. If it does, give the short answer ("answer"). If it does not, write one specific follow-up question that would find the missing fact ("follow_up").

Reply with one JSON object and nothing else:
{{"summary": "...", "answer_possible": false, "answer": "", "follow_up": "..."}}

Context:
{context}

Question: {question}"""

DECOMPOSE = """Rewrite the question below as the shortest list of simple questions that, answered in order, give its answer. Each simple question asks for one missing fact; a later one may refer to the answer of an earlier one ("that person", "that city"). Use only what the question says: no background questions, no guessed conditions. A question that is already simple is the only item of its list.

Example: "Where was the director of Taxi! born?" gives {{"subquestions": ["Who directed Taxi!?", "Where was that person born?"]}}

Reply with one JSON object and nothing else: {{"subquestions": ["...", "..."]}}

Question: {question}"""

REASONING_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"summary": {"type": "string"}, "answer_possible": {"type": "boolean"},
                   "answer": {"type": "string"}, "follow_up": {"type": "string"}},
    "required": ["summary", "answer_possible", "answer", "follow_up"],
}, separators=(",", ":"))
DECOMPOSE_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"subquestions": {"type": "array", "items": {"type": "string"}}},
    "required": ["subquestions"],
}, separators=(",", ":"))

NO_CONTEXT = "(nothing found)"


def user(text: str) -> Messages:
    """One user turn (no system turn), as the other methods of the study send their prompts."""
    return [{"role": "user", "content": text}]


def format_context(documents: Sequence[str], relations: Sequence[str]) -> str:
    """Numbered passages (each its title line, then its words), then the key relationships."""
    parts = []
    if documents:
        parts.append("Passages:\n" + "\n\n".join(f"[{i}] {text}" for i, text in enumerate(documents, 1)))
    if relations:
        parts.append("Key relationships:\n" + "\n".join(f"- {r}" for r in relations))
    return "\n\n".join(parts) or NO_CONTEXT


def known_and_new(summary: str, context: str) -> str:
    """The CoT loop's context after a follow-up retrieval: what the last step summarized, then the new finds."""
    return f"Known so far:\n{summary or NO_CONTEXT}\n\nNewly found:\n{context}"


def subanswer_line(question: str, answer: str) -> str:
    return f"Sub-question: {question}\nAnswer: {answer}"


def with_subanswers(context: str, lines: Sequence[str]) -> str:
    """The decomposition loop's final context: the last retrieval, then every sub-question's answer."""
    return f"{context}\n\nAnswers to the sub-questions:\n" + "\n\n".join(lines)


# ---- KG extraction (§3.1, Appendix B Listings 4 and 5) --------------------------------------------
EXTRACTION_PROMPT_VERSION = "tkg4"
ENTITY_TYPES = ("PERSON", "ORGANIZATION", "GPE", "MISC")

# The caps of one extraction call (defaults of `extraction.ExtractionConfig`, whose fields say what
# each bounds; the paper states none). Every list and string of the schemas is bounded: a small
# model under a grammar otherwise loops (the 0.5B model repeated one alias until max_tokens on 14 of
# 35 MuSiQue chunks), and the bounds turn that loop into a short, valid answer. Generous for real
# text: a chunk of 500 words rarely names 20 entities. A loop that still runs into max_tokens
# leaves a cut-off list whose complete items are kept (`extraction.complete_items`).
MAX_ENTITIES, MAX_ALIASES, MAX_RELATIONS = 20, 3, 30
MAX_NAME_CHARS, MAX_LABEL_CHARS, MAX_DESCRIPTION_CHARS = 80, 60, 300


def _text(max_length: int) -> dict:
    return {"type": "string", "maxLength": max_length}


def entity_schema(max_entities: int = MAX_ENTITIES, max_aliases: int = MAX_ALIASES,
                  max_name_chars: int = MAX_NAME_CHARS, max_description_chars: int = MAX_DESCRIPTION_CHARS) -> str:
    """The JSON schema of an entity-call output under the given caps (compact JSON text)."""
    return json.dumps({
        "type": "object",
        "properties": {"entities": {"type": "array", "maxItems": max_entities, "items": {
            "type": "object",
            "properties": {"name": _text(max_name_chars), "type": {"type": "string", "enum": list(ENTITY_TYPES)},
                           "aliases": {"type": "array", "maxItems": max_aliases, "items": _text(max_name_chars)},
                           "description": _text(max_description_chars)},
            "required": ["name", "type", "aliases", "description"],
        }}},
        "required": ["entities"],
    }, separators=(",", ":"))


def relation_schema(max_relations: int = MAX_RELATIONS, max_name_chars: int = MAX_NAME_CHARS,
                    max_label_chars: int = MAX_LABEL_CHARS, max_description_chars: int = MAX_DESCRIPTION_CHARS) -> str:
    """The JSON schema of a relation-call output under the given caps (compact JSON text)."""
    return json.dumps({
        "type": "object",
        "properties": {"relations": {"type": "array", "maxItems": max_relations, "items": {
            "type": "object",
            "properties": {"source": _text(max_name_chars), "relation": _text(max_label_chars),
                           "target": _text(max_name_chars), "description": _text(max_description_chars)},
            "required": ["source", "relation", "target", "description"],
        }}},
        "required": ["relations"],
    }, separators=(",", ":"))


ENTITY_SCHEMA = entity_schema()
RELATION_SCHEMA = relation_schema()

_EXTRACTION_SYSTEM = ("You turn text into a knowledge graph. You read carefully, use only what the text says, "
           "and answer with JSON and nothing else.")

# The one-shot demonstration both calls share (Listings 4 and 5 each carry one; ours is our own
# passage, not the paper's). Written as data so that a test can check it parses, fits the caps
# and keeps the rules it demonstrates; rendered once, at import, into the constant prompt text.
DEMO_TEXT = ("Ada Lovelace\n"
             "Augusta Ada King, Countess of Lovelace (10 December 1815 - 27 November 1852), better known as Ada "
             "Lovelace, was an English mathematician born in London, England. She was the only legitimate child of "
             "the poet Lord Byron. Her notes on the Analytical Engine, a mechanical general-purpose computer proposed "
             "by Charles Babbage, hold what is often called the first computer program. The British Computer Society "
             "names its Lovelace Medal after her.")
_ADA = "Augusta Ada King, Countess of Lovelace"
DEMO_ENTITIES = [
    {"name": _ADA, "type": "PERSON", "aliases": ["Ada Lovelace"],
     "description": "English mathematician, born 10 December 1815 in London, died 27 November 1852; only legitimate "
                    "child of Lord Byron; her notes on the Analytical Engine hold what is often called the first "
                    "computer program."},
    {"name": "London", "type": "GPE", "aliases": [], "description": "City in England."},
    {"name": "England", "type": "GPE", "aliases": [], "description": "Country."},
    {"name": "Lord Byron", "type": "PERSON", "aliases": [], "description": "Poet; father of Ada Lovelace."},
    {"name": "Analytical Engine", "type": "MISC", "aliases": [],
     "description": "Mechanical general-purpose computer proposed by Charles Babbage."},
    {"name": "Charles Babbage", "type": "PERSON", "aliases": [],
     "description": "Person who proposed the Analytical Engine."},
    {"name": "British Computer Society", "type": "ORGANIZATION", "aliases": [],
     "description": "Organization that awards the Lovelace Medal."},
    {"name": "Lovelace Medal", "type": "MISC", "aliases": [],
     "description": "Medal of the British Computer Society, named after Ada Lovelace."},
]
# What the GPE rule forbids, shown beside the demonstration as the paper shows "forbidden outputs".
DEMO_FORBIDDEN = {"name": "London", "type": "GPE", "aliases": [],
                  "description": "City in England where Ada Lovelace was born."}
DEMO_RELATIONS = [
    {"source": _ADA, "relation": "born in", "target": "London",
     "description": "Ada Lovelace was born in London."},
    {"source": "London", "relation": "located in", "target": "England", "description": "London is in England."},
    {"source": _ADA, "relation": "child of", "target": "Lord Byron",
     "description": "Ada Lovelace was the only legitimate child of Lord Byron."},
    {"source": _ADA, "relation": "wrote notes on", "target": "Analytical Engine",
     "description": "Ada Lovelace wrote notes on the Analytical Engine that hold an early computer program."},
    {"source": "Charles Babbage", "relation": "proposed", "target": "Analytical Engine",
     "description": "Charles Babbage proposed the Analytical Engine."},
    {"source": "British Computer Society", "relation": "awards", "target": "Lovelace Medal",
     "description": "The British Computer Society awards the Lovelace Medal."},
    {"source": "Lovelace Medal", "relation": "named after", "target": _ADA,
     "description": "The British Computer Society named the Lovelace Medal after Ada Lovelace."},
]


def render_items(key: str, items: list[dict]) -> str:
    """`{"key": [...]}` on one line. With one item per line (prompt version tkg3), the Qwen models
    answered `{"relations": []}` under the JSON-schema grammar for every chunk (measured on 20 2Wiki
    chunks, 0.5B and 1.5B), while the same request without the grammar, or with this one-line
    demonstration, lists the relations."""
    return json.dumps({key: items}, ensure_ascii=False)


def _names(names: Sequence[str]) -> str:
    return "\n".join(f"- {name}" for name in names)


# Listing 4 in our words: the four types, names and aliases, and per type which facts belong in the
# description (so that one fact is not written into the descriptions of several related entities:
# a place is described in general terms, never as "where someone was born").
_ENTITY_RULES = """Find every entity the text names and describe each one from the text alone.

Types:
- PERSON: a person.
- ORGANIZATION: a company, institution, team, party or other organized group.
- GPE: a country, city, state, region or territory.
- MISC: any other named thing, e.g. an event, a work of art, a building, a product, an award or a patent.

Names: "name" is the fullest official name the text gives the entity; "aliases" lists every other name, short form or abbreviation the text uses for it (an empty list if none).

The "description" holds, by type, the facts the text states (leave out what it does not state):
- PERSON: dates and places of birth and death, nationality, occupation, titles, achievements.
- ORGANIZATION: when it was founded and by whom, where its headquarters are, its industry or field, the institutions it is part of or linked to, criticism it received.
- GPE: what kind of place it is, where it lies and what it belongs to, its capital, population, history, culture or administration. Never describe a place through what happened to someone or something there ("birthplace of ...", "where ... died", "the city ... moved to"): such facts belong to the other entity and to the relations.
- MISC: when it happened or was made, its size or scale, why it matters, other facts about it.

Use only what the text says: add nothing you know from elsewhere and guess nothing.

Answer with one JSON object: {"entities": [...]}, each entity an object with exactly the keys "name", "type", "aliases" and "description".

Example
Text:
<<<
""" + DEMO_TEXT + """
>>>

Answer:
""" + render_items("entities", DEMO_ENTITIES) + """

Wrong, because it describes the place through a person's birth:
""" + json.dumps(DEMO_FORBIDDEN, ensure_ascii=False) + """

Now the real text.
"""

_ENTITY_INPUT = """Text:
<<<
{text}
>>>

Answer:"""

# Listing 5 in our words: pairs from the given list only, stated relations only, pronouns resolved.
# Ours adds a description sentence per relation (SA-RAG embeds it as the related_to link's text).
_RELATION_RULES = """List the relationships the text states between two entities of the given entity list.

- Use only entities of the list, and write each name exactly as the list writes it.
- Use only relationships the text states; infer nothing and add nothing you know from elsewhere.
- Resolve pronouns: when the text says "he", "she", "it", "they" or "her", name the entity it stands for.
- "source" and "target" are the two entities, "relation" a short label of a few words ("born in", "founded", "part of"), "description" one sentence, using only the text and naming both entities, that says how they are related.

Answer with one JSON object: {"relations": [...]}, each relation an object with exactly the keys "source", "relation", "target" and "description".

Example
Text:
<<<
""" + DEMO_TEXT + """
>>>

Entities found in this text:
""" + _names([e["name"] for e in DEMO_ENTITIES]) + """

Answer:
""" + render_items("relations", DEMO_RELATIONS) + """

Now the real text.
"""

_RELATION_INPUT = """Text:
<<<
{text}
>>>

Entities found in this text:
{entities}

Answer:"""

_REPAIR_TASK = """The output below should have been one JSON object following this JSON schema:
{schema}

It could not be used: {error}

Output:
<<<
{output}
>>>

Write the corrected JSON object, keeping the content of the output. Reply with the JSON only."""


def entity_messages(text: str) -> Messages:
    """The entity-extraction request for one chunk (`text`: its title line and words): the rules and
    the demonstration (constant), then the chunk."""
    return [{"role": "system", "content": _EXTRACTION_SYSTEM},
            {"role": "user", "content": _ENTITY_RULES + _ENTITY_INPUT.format(text=text)}]


def relation_messages(text: str, entity_names: list[str]) -> Messages:
    """The relation-extraction request for one chunk and the entity names extracted from it."""
    return [{"role": "system", "content": _EXTRACTION_SYSTEM},
            {"role": "user",
             "content": _RELATION_RULES + _RELATION_INPUT.format(text=text, entities=_names(entity_names))}]


def repair_messages(output: str, error: str, schema: str) -> Messages:
    """The one repair request for an output that failed to parse or validate."""
    return [{"role": "system", "content": _EXTRACTION_SYSTEM},
            {"role": "user", "content": _REPAIR_TASK.format(schema=schema, error=error, output=output)}]
