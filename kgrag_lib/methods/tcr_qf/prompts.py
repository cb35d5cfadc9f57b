"""TCR-QF's prompts in our own words: the reasoning prompt and the missing-knowledge prompt of the
paper's appendix, the ToG beam-search prompts its retrieval builds on (Sun et al.: relation
pruning, entity scoring, a sufficiency check), and the LLM-only and CoT baselines.

Inputs and output formats follow the papers: triples written `<h | r | t>`, restored sentences
under "Related Text", a reasoning section then a line "Final Answer: <short phrase>", missing
knowledge as one atomic question per line. The ToG stages answer in JSON constrained to a
schema whose enums are the candidates, so a small model can only pick what exists.
"""

from __future__ import annotations

import json
import re

from ...llm.base import Messages

PROMPT_VERSION = "tcrq1"
FINAL = re.compile(r"final answer\s*[:：]\s*(.+)", re.IGNORECASE)

_SYSTEM = "You answer questions by careful reasoning over the information you are given."

_REASON = """Answer the question by reasoning step by step over the contextual information below.
Use the contextual information first; if it is not enough, you may use what you know yourself,
and say so in that step. Write:

Reasoning Process:
- one short numbered step per line, each saying whether it uses the context or your own knowledge

Final Answer: a short phrase (a name, a date, a number, yes or no), without explanation

Contextual Information:
{context}

Question: {question}

Output:"""

_DIRECT = """Answer the question with a short phrase (a name, a date, a number, yes or no), without
explanation, on one line that starts with "Final Answer:".

Question: {question}"""

_COT = """Think about the question step by step, one short step per line, then write the answer as a
short phrase (a name, a date, a number, yes or no) on a last line that starts with "Final Answer:".

Question: {question}

Reasoning Process:"""

_MISSING = """Here is what we know and a question. Decide which facts are still missing to answer the
question fully and correctly, and write each missing fact as one short, self-contained question.

- Ask only for information that is not already stated in the contextual information.
- Each question asks for exactly one fact, attribute or relation.
- Write at most {max_questions} questions, one per line, with no numbering, no explanation and
  nothing else. If nothing is missing, write only: NONE

Contextual Information:
{context}

Question: {question}

Current answer: {answer}

Missing questions:"""

_RELATIONS = """We are exploring a knowledge graph to answer a question. We are at the entity
"{entity}". Choose at most {width} of its relations below that are most likely to lead to the
answer, and give each a score between 0 and 1 (higher = more useful).

Question: {question}

Relations of "{entity}":
{relations}

Answer with JSON: {{"relations": [{{"relation": "...", "score": 0.5}}]}}"""

_ENTITIES = """We are exploring a knowledge graph to answer a question. Following the relation
"{relation}" from "{entity}" leads to the entities below. Give each a score between 0 and 1 for
how likely it helps answer the question.

Question: {question}

Entities:
{entities}

Answer with JSON: {{"entities": [{{"entity": "...", "score": 0.5}}]}}"""

_ENOUGH = """Here are facts from a knowledge graph. Are they enough to answer the question? Answer
with JSON: {{"enough": true}} or {{"enough": false}}.

Facts:
{facts}

Question: {question}"""

ENOUGH_SCHEMA = json.dumps({"type": "object", "properties": {"enough": {"type": "boolean"}}, "required": ["enough"]},
                           separators=(",", ":"))


def choice_schema(key: str, item: str, options: list[str], max_items: int) -> str:
    """A JSON schema: a list of at most `max_items` {item: one of options, score: number}."""
    return json.dumps({"type": "object", "properties": {key: {
        "type": "array", "maxItems": max_items, "items": {
            "type": "object", "properties": {item: {"type": "string", "enum": options}, "score": {"type": "number"}},
            "required": [item, "score"]}}}, "required": [key]}, separators=(",", ":"))


def format_context(triples: list[tuple[str, str, str]], sentences: list[str], passages: list[str] = ()) -> str:
    """The paper's contextual information: "Triples:" then "Related Text:" (restored sentences, or
    retrieved passages for text baselines)."""
    parts = []
    if triples:
        parts.append("Triples:\n" + "\n".join(f"<{h} | {r} | {t}>" for h, r, t in triples))
    text = [s for s in dict.fromkeys(sentences) if s] + list(passages)
    if text:
        parts.append("Related Text:\n" + "\n".join(text))
    return "\n\n".join(parts) if parts else "(none)"


def _chat(text: str) -> Messages:
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": text}]


def reasoning_messages(question: str, context: str) -> Messages:
    return _chat(_REASON.format(context=context, question=question))


def direct_messages(question: str) -> Messages:
    return _chat(_DIRECT.format(question=question))


def cot_messages(question: str) -> Messages:
    return _chat(_COT.format(question=question))


def missing_messages(question: str, answer: str, context: str, max_questions: int) -> Messages:
    return _chat(_MISSING.format(question=question, answer=answer or "(none)", context=context,
                                 max_questions=max_questions))


def relation_messages(question: str, entity: str, relations: list[str], width: int) -> Messages:
    return _chat(_RELATIONS.format(question=question, entity=entity, width=width,
                                   relations="\n".join(f"- {r}" for r in relations)))


def entity_messages(question: str, entity: str, relation: str, entities: list[str]) -> Messages:
    return _chat(_ENTITIES.format(question=question, entity=entity, relation=relation,
                                  entities="\n".join(f"- {e}" for e in entities)))


def enough_messages(question: str, facts: list[tuple[str, str, str]]) -> Messages:
    return _chat(_ENOUGH.format(question=question, facts="\n".join(f"<{h} | {r} | {t}>" for h, r, t in facts)))


def final_answer(text: str) -> str | None:
    """The phrase after the last "Final Answer:" (None when the output has none)."""
    found = FINAL.findall(text or "")
    if not found:
        return None
    ans = found[-1].strip(" *").rstrip(".").strip(" *")
    return ans or None


def missing_questions(text: str, limit: int) -> list[str]:
    """The missing-knowledge questions of an output: one per line, NONE -> []; bullets and numbers
    stripped, lines without a question mark or shorter than three words dropped, repeats kept once."""
    out: list[str] = []
    for line in (text or "").splitlines():
        q = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip()
        if not q or q.upper().startswith("NONE"):
            continue
        if "?" in q and len(q.split()) >= 3 and q not in out:
            out.append(q)
    return out[:limit]
