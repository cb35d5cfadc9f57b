"""Prompts of KG-Infused RAG and its baselines (Wu et al., Appendix D.1), in our own words.

Each template has the paper's inputs and asks for the paper's output. They are plain format
strings with no run-dependent parts (no round count, no date, no sample size): the same
stage with the same inputs renders byte-identical text in every configuration, which is
what lets the LLM cache share a stage across the round sweep and the ablations.
"""

from __future__ import annotations

from typing import Sequence

from ...records import Passage

Messages = list[dict[str, str]]

# Worded without the word "no": the 0.5B model echoed an earlier "no explanation, no full sentence"
# into 6-11 of 100 HotpotQA answers, which substring Acc then credited against a gold "no".
ANSWER_ONLY = "Reply with the answer alone, in as few words as it takes."
ANSWER_YES_NO = "Reply with one word, yes or no."

# Table 8: answer without retrieval.
NO_RETRIEVAL = """{style}

Question: {question}
Answer:"""

# Table 9: answer from retrieved text (a passage note, possibly fact-enhanced).
WITH_RETRIEVAL = """Answer the question using the passages below. {style}

Passages:
{passages}

Question: {question}
Answer:"""

# Table 10: query expansion from the question alone.
VANILLA_QE = """Write one new short search query. It must differ from the question but stay on its subject, and it should find further passages with the missing or complementary information needed to answer the question fully. Make it precise and relevant. Reply with the new query alone.

Question:
{question}

New query:"""

# Table 11: passage note.
PASSAGE_NOTE = """Read the documents and write a note for answering the question below. The note is one coherent paragraph that keeps every piece of information from the documents that could help answer the question, as stated in the documents.

Question: {question}

Documents:
{passages}

Note:"""

# Table 12: triple selection (round 1).
TRIPLE_SELECTION = """Below are a question and facts taken from a knowledge graph, one per line, written as <subject | relation | object>. Choose the facts that are relevant to the question, directly or as background: about a person, e.g. their name, work and relatives; about an event or thing, its related context. The objects of the facts you choose will be explored next to find further facts.

Rules:
- Choose only among the listed facts; never write a new fact.
- Copy each chosen fact exactly as listed, angle brackets included, one per line.

Question: {question}

Facts:
{triples}

Chosen facts:"""

# Table 13: triple update (rounds 2..k).
TRIPLE_UPDATE = """Below are a question, facts from a knowledge graph already chosen as relevant to it, and a new set of facts, all written as <subject | relation | object>. From the NEW facts, choose those that extend or complement the chosen facts and help answer the question. The objects of the facts you choose will be explored next.

Rules:
- Choose only among the new facts; do not repeat already chosen facts and never write a new fact.
- Leave out facts unrelated to the question or that add nothing to the chosen facts.
- Copy each chosen fact exactly as listed, angle brackets included, one per line.

Question: {question}

Already chosen facts:
{previous}

New facts:
{new}

Chosen new facts:"""

# Table 14: subgraph summary.
SUBGRAPH_SUMMARY = """Summarize the knowledge-graph facts below in a short plain-text paragraph. Keep every detail the facts give, even details that do not answer the question directly; if they do not settle the question, summarize them anyway.

Question: {question}

Facts:
{triples}

Summary:"""

# Table 15: KG-based query expansion.
KG_QE = """Write one new short search query. It must differ from the question but stay on its subject; use both the question and the background paragraph so that the query finds further passages with the missing or complementary information needed to answer the question. Make it precise and relevant. Reply with the new query alone.

Question: {question}

Background paragraph: {summary}

New query:"""

# Table 16: KG-guided knowledge augmentation of the passage note.
KNOWLEDGE_AUGMENTATION = """Improve the passage below by working in the useful details of the facts, so that it helps answer the question better. Keep the passage coherent and well organized, keep its meaning, and add nothing unrelated to the question.

Question: {question}

Passage: {passage}

Facts: {summary}

Improved passage:"""

NO_FACTS = "(none)"


def user(text: str) -> Messages:
    """One user turn, as the paper's code sends every prompt (chat template, no system turn)."""
    return [{"role": "user", "content": text}]


def answer_style(yes_no: bool) -> str:
    return ANSWER_YES_NO if yes_no else ANSWER_ONLY


def format_passages(passages: Sequence[Passage]) -> str:
    """`[i] title` then the text, as in the paper's code."""
    blocks = []
    for i, p in enumerate(passages, 1):
        head = f"[{i}] {p.title}" if p.title else f"[{i}]"
        blocks.append(f"{head}\n{p.text}")
    return "\n".join(blocks)


def format_grouped_triples(groups: Sequence[tuple[str, Sequence[str]]]) -> str:
    """Candidate triples grouped under their head entity: `[i] entity` then `<s | r | o>` lines."""
    blocks = []
    for i, (entity, lines) in enumerate(groups, 1):
        blocks.append(f"[{i}] {entity}\n" + "\n".join(lines))
    return "\n\n".join(blocks)


def format_triple_lines(lines: Sequence[str]) -> str:
    return "\n".join(lines) if lines else NO_FACTS
