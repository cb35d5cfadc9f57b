"""Prompt of the Self-RAG plug-in baseline (KG-Infused RAG, §4.2 Table 2).

Self-RAG models answer the instruction format they were fine-tuned on, so that format is kept
as is; the one-line yes/no task statement is ours. The text has no run-dependent parts, so the
same question and passage always give byte-identical requests (served by the LLM cache).
"""

from __future__ import annotations

from ...records import Passage

# The instruction format the Self-RAG models were fine-tuned on (Alpaca style); the model's
# interface, not a prompt of ours. Questions go in as the instruction, as in the authors'
# open-domain QA runs; a yes/no task adds our one-line task statement with the question as input.
PROMPT = "### Instruction:\n{instruction}\n\n### Response:\n"
YES_NO_TASK = "Decide whether the answer to the question below is yes or no, and reply with that one word."
EVIDENCE = "[Retrieval]<paragraph>{passage}</paragraph>"


def instruction(question: str, yes_no: bool = False) -> str:
    """The Self-RAG prompt up to the response (a yes/no task states itself first)."""
    text = f"{YES_NO_TASK}\n\n## Input:\n\n{question}" if yes_no else question
    return PROMPT.format(instruction=text)


def with_evidence(prompt: str, passage: Passage) -> str:
    """The prompt with one passage appended as retrieved evidence (title line, then text)."""
    return prompt + EVIDENCE.format(passage=passage.as_text())
