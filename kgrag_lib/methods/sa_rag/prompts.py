"""Prompts of SA-RAG and its baselines (Pavlović et al., Appendices A and B), in our own words.

- `ANSWER` (Listings 1 and 6): the final answer from a context. The paper asks for a JSON object
  with a reasoning field and a final answer; we ask for the short answer alone, as every other
  method of this study does, so small models spend their tokens on the answer.
- `REASONING` (Listings 2 and 7): one step of the iterative (CoT) loop: a summary of the
  relevant facts, whether they answer the question, and a follow-up question if not. One
  template serves the dense and the SA-RAG loop: its wording covers the "key relationships"
  section that only SA-RAG's context has.
- `DECOMPOSE` (Listing 3): the question as a short sequence of single-fact sub-questions.

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
