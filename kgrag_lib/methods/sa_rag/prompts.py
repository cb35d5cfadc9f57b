"""Prompts of SA-RAG and its baselines (Pavlović et al., Appendices A and B), in our own words.

- `ANSWER` (Listings 1 and 6): the final answer from a context. The paper asks for a JSON object
  with a reasoning field and a final answer; we ask for the short answer alone, as every other
  method of this study does, so small models spend their tokens on the answer.
- `REASONING` (Listings 2 and 7): one step of the iterative (CoT) loop: a summary of the
  relevant facts, whether they answer the question, and a follow-up question if not. One
  template serves the dense and the SA-RAG loop: its wording covers the "key relationships"
  section that only SA-RAG's context has.
- `DECOMPOSE` (Listing 3): the question as a short sequence of single-fact sub-questions.
- KG extraction (§3.1, `extraction`): two calls per chunk, one listing the entities (name, type,
  aliases, a one-sentence description), the other the relations among exactly those entities,
  each with a sentence saying how they are related; a third prompt repairs an output that does
  not parse. Any change to their bytes or a schema must bump `EXTRACTION_PROMPT_VERSION`: it
  names the KG build folder, so a changed prompt builds a new KG instead of mixing old and new
  extractions.

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


# ---- KG extraction (§3.1) -----------------------------------------------------------------------
EXTRACTION_PROMPT_VERSION = "tkg2"
ENTITY_TYPES = ("PERSON", "ORGANIZATION", "GPE", "MISC")

# Every list and string is bounded: a small model under a grammar otherwise loops (the 0.5B model
# repeated one alias until max_tokens on 14 of 35 MuSiQue chunks), and the bounds turn that loop
# into a short, valid answer. Generous for real text: a chunk of 500 words rarely names 20 entities. A
# loop that still runs into max_tokens leaves a cut-off list whose complete items are kept
# (`extraction.complete_items`).
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

_EXTRACTION_SYSTEM = ("You turn text into a knowledge graph. You read carefully, use only what the text says, "
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
    return [{"role": "system", "content": _EXTRACTION_SYSTEM}, {"role": "user", "content": _ENTITY_TASK.format(text=text)}]


def relation_messages(text: str, entity_names: list[str]) -> Messages:
    """The relation-extraction request for one chunk and the entity names extracted from it."""
    listed = "\n".join(f"- {name}" for name in entity_names)
    return [{"role": "system", "content": _EXTRACTION_SYSTEM},
            {"role": "user", "content": _RELATION_TASK.format(text=text, entities=listed)}]


def repair_messages(output: str, error: str, schema: str) -> Messages:
    """The one repair request for an output that failed to parse or validate."""
    return [{"role": "system", "content": _EXTRACTION_SYSTEM},
            {"role": "user", "content": _REPAIR_TASK.format(schema=schema, error=error, output=output)}]
