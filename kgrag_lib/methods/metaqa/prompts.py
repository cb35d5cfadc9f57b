"""Prompt templates of the four MetaQA systems (KG-RAG paper, §3.4), in our own words.

Each builder returns chat messages. The decomposition prompt carries hand-written
in-context examples for the MetaQA question types (one hop, two hops, three hops, and a
"describe this film" question that needs no split). Their facts are real KB facts, taken
from entities that are never a topic entity in the MetaQA dev/test files, so the examples
leak no benchmark answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

Messages = list[dict[str, str]]

# Marker that ends a decomposition (used as the stop string, as the paper's "<END>").
END_MARKER = "<END>"
REASONING_LABEL = "Reasoning:"
SUBQ_LABEL = "Sub-questions:"


@dataclass(frozen=True)
class DecompositionExample:
    question: str
    reasoning: str
    subquestions: tuple[str, ...]

    def render(self) -> str:
        lines = [f"{REASONING_LABEL} {self.reasoning}", SUBQ_LABEL]
        lines += [f"{i}. {q}" for i, q in enumerate(self.subquestions, 1)]
        lines.append(END_MARKER)
        return "\n".join(lines)


# KB facts behind the examples (kb.txt):
#   Lost Embrace|in_language|Spanish
#   Angel's Egg|has_tags|mamoru oshii ; Angel's Egg|has_genre|Animation
#   The Lovers|starred_actors|Jeanne Moreau ; The Lovers|directed_by|Louis Malle
#   Hedwig and the Angry Inch|written_by|Stephen Trask (and John Cameron Mitchell)
DECOMPOSITION_EXAMPLES: tuple[DecompositionExample, ...] = (
    DecompositionExample(
        question="which language is Lost Embrace in",
        reasoning="This asks for a single fact about one film, so it does not need to be split.",
        subquestions=("What language is the movie Lost Embrace in?",),
    ),
    DecompositionExample(
        question="describe Angel's Egg in a few words",
        reasoning="A short description of a film is given by its tags or genres; this is one lookup.",
        subquestions=("Which tags or genres describe the movie Angel's Egg?",),
    ),
    DecompositionExample(
        question="who directed the films that Jeanne Moreau acted in",
        reasoning=(
            "I first need the films Jeanne Moreau acted in. Then, for those films, I look up "
            "who directed them."
        ),
        subquestions=(
            "Which movies did Jeanne Moreau act in?",
            "Who directed these movies?",
        ),
    ),
    DecompositionExample(
        question="in which years were the movies released that share a writer with Hedwig and the Angry Inch",
        reasoning=(
            "First I find who wrote Hedwig and the Angry Inch. Next I find the other movies "
            "those writers wrote. Finally I look up the release years of those movies."
        ),
        subquestions=(
            "Who wrote the movie Hedwig and the Angry Inch?",
            "Which movies were written by these writers?",
            "In which years were these movies released?",
        ),
    ),
)

DECOMPOSE_SYSTEM = (
    "You split questions about movies into simpler sub-questions that can each be answered "
    "with one fact lookup. First write one or two sentences of reasoning after "
    f"'{REASONING_LABEL}'. Then write '{SUBQ_LABEL}' and a numbered list, one sub-question "
    "per line, in the order they must be answered; later sub-questions may refer to the "
    "answers of earlier ones. A question that already asks for one fact gets a single "
    f"sub-question. Write nothing else, and finish with {END_MARKER}."
)

ANSWER_SYSTEM = (
    "You answer questions about movies. Give the answer directly: the names, titles, years "
    "or words asked for, separated by commas. Add at most one short sentence. "
    "Do not repeat the question."
)

ANSWER_WITH_FACTS_SYSTEM = (
    "You answer questions about movies using facts from a movie knowledge graph, written as "
    "(subject, relation, object). Rely on the facts that match the question; use your own "
    "knowledge only when no fact helps. Give the answer directly: the names, titles, years "
    "or words asked for, separated by commas. Add at most one short sentence."
)

REFORMULATE_SYSTEM = (
    "You rewrite a follow-up question so that it can be understood on its own. Replace "
    "references such as 'these movies', 'that director', 'they' or 'it' by the concrete "
    "names found in the earlier answers. Keep the meaning; write only the rewritten question."
)

SYNTHESIZE_SYSTEM = (
    "You write the final answer to a question about movies from the answers to its "
    "sub-questions. Start with the answer itself (the names, titles, years or words asked "
    "for), then explain in one or two sentences how the sub-answers lead to it. Use only "
    "the information given."
)


def decompose_messages(question: str, examples: Sequence[DecompositionExample] = DECOMPOSITION_EXAMPLES) -> Messages:
    """System instruction, then the examples as earlier chat turns, then the question."""
    msgs: Messages = [{"role": "system", "content": DECOMPOSE_SYSTEM}]
    for ex in examples:
        msgs.append({"role": "user", "content": f"Question: {ex.question}"})
        msgs.append({"role": "assistant", "content": ex.render()})
    msgs.append({"role": "user", "content": f"Question: {question}"})
    return msgs


def answer_messages(question: str) -> Messages:
    """Zero-shot answer (the `llm` baseline, and each sub-question of `llm-qd`)."""
    return [
        {"role": "system", "content": ANSWER_SYSTEM},
        {"role": "user", "content": f"Question: {question}\nAnswer:"},
    ]


def answer_with_facts_messages(question: str, facts: Sequence[str]) -> Messages:
    """Answer from the top-K selected triples (KAPING, and each sub-question of KG-RAG)."""
    fact_block = "\n".join(facts) if facts else "(no facts found)"
    return [
        {"role": "system", "content": ANSWER_WITH_FACTS_SYSTEM},
        {"role": "user", "content": f"Facts:\n{fact_block}\n\nQuestion: {question}\nAnswer:"},
    ]


def reformulate_messages(subquestion: str, history: Sequence[tuple[str, str]]) -> Messages:
    """Rewrite `subquestion` using the earlier (question, answer) pairs."""
    earlier = "\n".join(f"Q{i}: {q}\nA{i}: {a}" for i, (q, a) in enumerate(history, 1))
    return [
        {"role": "system", "content": REFORMULATE_SYSTEM},
        {"role": "user", "content": f"Earlier questions and answers:\n{earlier}\n\n"
                                    f"Follow-up question: {subquestion}\nRewritten question:"},
    ]


def synthesize_messages(question: str, reasoning: str, steps: Sequence[tuple[str, str]]) -> Messages:
    """Final answer from the main question, the reasoning chain and the sub-answers."""
    qa = "\n".join(f"{i}. {q}\n   Answer: {a}" for i, (q, a) in enumerate(steps, 1))
    plan = reasoning.strip() or "(none)"
    return [
        {"role": "system", "content": SYNTHESIZE_SYSTEM},
        {"role": "user", "content": f"Question: {question}\n\nReasoning plan: {plan}\n\n"
                                    f"Sub-questions and their answers:\n{qa}\n\nFinal answer:"},
    ]
