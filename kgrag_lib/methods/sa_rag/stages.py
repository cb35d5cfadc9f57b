"""The LLM stages of SA-RAG and its baselines (§3.5, Appendices A-B): answer, reason, decompose.

`Reader` sends one request per stage, rendered from `prompts.py`. The JSON stages ask the
backend to constrain decoding to their schema (where it can) and read the output tolerantly
(`parse_json`); an output that still gives no usable object is returned as an error for the
trace, never raised, and the loop that asked falls back (see `loops.py`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...llm.base import Generator, SamplingParams
from ...llm.parsing import clean_answer, parse_json
from . import prompts


@dataclass
class Reasoning:
    """One CoT step's output (Listings 2 / 7); `error` says why it is unusable, else ""."""

    summary: str = ""
    answer_possible: bool = False
    answer: str = ""
    follow_up: str = ""
    error: str = ""

    def to_trace(self) -> dict[str, Any]:
        d = asdict(self)
        return d if self.error else {k: v for k, v in d.items() if k != "error"}


def _text(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def parse_reasoning(raw: str) -> Reasoning:
    value = parse_json(raw)
    if not isinstance(value, dict):
        return Reasoning(error="no JSON object in the output")
    possible = value.get("answer_possible")
    if isinstance(possible, str) and possible.strip().lower() in ("true", "false"):
        possible = possible.strip().lower() == "true"
    if not isinstance(possible, bool):
        return Reasoning(error='"answer_possible" is not true or false')
    return Reasoning(_text(value.get("summary")), possible, _text(value.get("answer")), _text(value.get("follow_up")))


def parse_subquestions(raw: str, limit: int) -> tuple[list[str], str]:
    """At most `limit` distinct sub-questions in order, and an error ("" when there is one)."""
    value = parse_json(raw)
    items = value.get("subquestions") if isinstance(value, dict) else value
    if not isinstance(items, list):
        return [], 'no JSON object with a "subquestions" list in the output'
    found = [_text(i.get("question")) if isinstance(i, dict) else _text(i) for i in items]
    subs = list(dict.fromkeys(s for s in found if s))[:limit]
    return subs, "" if subs else "an empty list of sub-questions"


class Reader:
    """The LLM side of every variant: `answer` with `answer_params`, the JSON stages with `params`."""

    def __init__(self, llm: Generator, params: SamplingParams, answer_params: SamplingParams):
        self.llm, self.params, self.answer_params = llm, params, answer_params

    def answer(self, question: str, context: str) -> tuple[str, str]:
        """Listings 1 / 6: (raw output, short answer) from the context."""
        raw = self.llm.generate(prompts.user(prompts.ANSWER.format(context=context, question=question)), self.answer_params)
        return raw, clean_answer(raw)

    def reason(self, question: str, context: str) -> Reasoning:
        """Listings 2 / 7: summary, answerable?, answer or follow-up question."""
        raw = self.llm.generate(prompts.user(prompts.REASONING.format(context=context, question=question)),
                                self.params.replace(json_schema=prompts.REASONING_SCHEMA))
        out = parse_reasoning(raw)
        if out.error:
            out.error = f"{out.error}; output: {raw[:200]!r}"
        return out

    def decompose(self, question: str, limit: int) -> tuple[list[str], str]:
        """Listing 3: the sub-questions, and an error ("" when usable)."""
        raw = self.llm.generate(prompts.user(prompts.DECOMPOSE.format(question=question)),
                                self.params.replace(json_schema=prompts.DECOMPOSE_SCHEMA))
        subs, error = parse_subquestions(raw, limit)
        return subs, f"{error}; output: {raw[:200]!r}" if error else ""
