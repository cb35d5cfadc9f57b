"""The LLM stages shared by the MetaQA systems: decompose, answer, reformulate, synthesize.

Each stage is one chat call with the paper's inference parameters (Table 3 and §3.4.3–3.4.4)
and a tolerant reader of what a small model writes back. Readers never raise: what they
cannot use is reported as an `issue` string that the method stores in its trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...llm import parsing
from ...llm.base import PromptTooLongError
from ...records import Prediction
from . import prompts

_SUBQ_HEADER = re.compile(r"^\s*[*#]*\s*sub[\s-]?questions?\s*[*]*\s*:?\s*[*]*\s*(.*)$", re.I)
_REASON_LABEL = re.compile(r"^\s*[*#]*\s*(reasoning|chain[\s-]of[\s-]thought|thought|cot)\s*[*]*\s*:\s*[*]*\s*", re.I)
_ITEM = re.compile(r"^\s*(?:(?:sub[\s-]?question\s*)?\d+\s*[.):-]|[-*\u2022])\s*(.+)$", re.I)
_Q_LABEL = re.compile(r"^\s*(sub[\s-]?)?question\s*\d*\s*:\s*", re.I)


# ---- decomposition ---------------------------------------------------------------------
@dataclass
class Decomposition:
    reasoning: str
    subquestions: list[str]
    raw: str
    issues: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"raw": self.raw, "reasoning": self.reasoning, "subquestions": list(self.subquestions),
                "issues": list(self.issues)}


def _clean_item(text: str) -> str:
    t = text.strip().strip("*").strip()
    t = re.sub(r"\s+", " ", t)
    if len(t) >= 2 and t[0] in "\"'\u201c" and t[-1] in "\"'\u201d":
        t = t[1:-1].strip()
    return t


def parse_decomposition(text: str, max_subquestions: int = 4) -> Decomposition:
    """Split a decomposition into its reasoning chain and sub-question list.

    Accepts the asked-for layout (reasoning, 'Sub-questions:' header, numbered lines, end
    marker) and common deviations: a missing header, bullets instead of numbers, items on
    the header line, markdown bold, an echoed 'Question:' line, text after the end marker.
    """
    raw = text or ""
    body = parsing.strip_think(raw)
    cut = body.find(prompts.END_MARKER)
    if cut != -1:
        body = body[:cut]
    lines = [ln.rstrip() for ln in body.splitlines()]
    issues: list[str] = []

    header = next((i for i, ln in enumerate(lines) if _SUBQ_HEADER.match(ln)), None)
    reasoning_lines: list[str]
    items: list[str] = []
    if header is not None:
        reasoning_lines = lines[:header]
        rest = _SUBQ_HEADER.match(lines[header]).group(1)
        tail = ([rest] if rest.strip() else []) + lines[header + 1:]
        for ln in tail:
            if not ln.strip():
                continue
            m = _ITEM.match(ln)
            if m:
                items.append(m.group(1))
            elif ln.strip().endswith("?") and not _REASON_LABEL.match(ln):
                items.append(ln)
    else:
        first_item = next((i for i, ln in enumerate(lines) if _ITEM.match(ln)), None)
        if first_item is not None:
            reasoning_lines = lines[:first_item]
            items = [m.group(1) for m in (_ITEM.match(ln) for ln in lines[first_item:]) if m]
        else:
            reasoning_lines = [ln for ln in lines if not ln.strip().endswith("?")]
            items = [ln for ln in lines if ln.strip().endswith("?")]
        if items:
            issues.append("decomposition: no 'Sub-questions:' header; took the numbered or question lines")

    reasoning_lines = [ln for ln in reasoning_lines if not re.match(r"^\s*question\s*:", ln, re.I)]
    reasoning = " ".join(ln.strip() for ln in reasoning_lines if ln.strip())
    reasoning = _REASON_LABEL.sub("", reasoning).strip()

    subqs: list[str] = []
    seen: set[str] = set()
    for it in items:
        q = _Q_LABEL.sub("", _clean_item(it)).strip()
        key = q.lower()
        if len(q) < 3 or key in seen:
            continue
        seen.add(key)
        subqs.append(q)
    if len(subqs) > max_subquestions:
        issues.append(f"decomposition: {len(subqs)} sub-questions, kept the first {max_subquestions}")
        subqs = subqs[:max_subquestions]
    if not subqs:
        issues.append("decomposition: no sub-questions found")
    return Decomposition(reasoning=reasoning, subquestions=subqs, raw=raw, issues=issues)


# ---- answers ---------------------------------------------------------------------------
def clean_reformulation(text: str, original: str) -> tuple[str, str | None]:
    """The rewritten question (the '?' stop string cut it off, so it is put back), or the
    original sub-question with an issue note when the output is unusable."""
    t = parsing.strip_think(text).strip()
    first = next((ln for ln in t.splitlines() if ln.strip()), "")
    q = parsing.drop_label(_clean_item(first)).strip().strip("\"'")
    if len(q) < 3:
        return original, "reformulation: empty output, kept the sub-question as written"
    return q.rstrip("?").rstrip() + "?", None


def answer(llm: Any, question: str, params: Any, facts: list[str] | None = None) -> tuple[str, str]:
    """(raw output, cleaned answer) of the zero-shot or fact-grounded answer prompt."""
    msgs = prompts.answer_messages(question) if facts is None else prompts.answer_with_facts_messages(question, facts)
    raw = llm.generate(msgs, params)
    return raw, parsing.clean_answer(raw, keep_lines=True)


def answer_once(llm: Any, question: Any, method: str, params: Any, trace: dict[str, Any], step: dict[str, Any],
                facts: list[str] | None = None) -> Any:
    """The one-call systems' last stage: answer the whole question, record it, make the prediction.

    A prompt too long for the model's context is a recorded failure of this question.
    """
    try:
        step["answer_raw"], step["answer"] = answer(llm, question.question, params, facts)
    except PromptTooLongError as exc:
        return make_prediction(question, method, "", trace, error=f"{type(exc).__name__}: {exc}")
    trace["final_answer"] = trace["final_output"] = step["answer"]
    return make_prediction(question, method, step["answer"], trace)


def decompose(llm: Any, question: str, params: Any, max_subquestions: int) -> Decomposition:
    raw = llm.generate(prompts.decompose_messages(question), params)
    return parse_decomposition(raw, max_subquestions)


def reformulate(llm: Any, subquestion: str, history: list[tuple[str, str]], params: Any) -> tuple[str, str, str | None]:
    """(raw, rewritten question, issue or None)."""
    raw = llm.generate(prompts.reformulate_messages(subquestion, history), params)
    q, issue = clean_reformulation(raw, subquestion)
    return raw, q, issue


def synthesize(llm: Any, question: str, reasoning: str, steps: list[tuple[str, str]], params: Any) -> tuple[str, str]:
    raw = llm.generate(prompts.synthesize_messages(question, reasoning, steps), params)
    return raw, parsing.clean_answer(raw, keep_lines=True)


# ---- predictions -----------------------------------------------------------------------
def new_trace(system: str, question: Any) -> dict[str, Any]:
    """The trace layout every MetaQA system fills (absent stages stay None / empty)."""
    return {
        "system": system,
        "question": question.question,
        "topic_entities": list(question.topic_entities),
        "retrieval": None,        # entity ids, candidate count (KG systems)
        "decomposition": None,    # raw output, reasoning chain, sub-questions (QD systems)
        "steps": [],              # per (sub-)question: asked text, triples, sub-answer
        "synthesis_raw": None,
        "final_answer": "",
        "final_output": "",       # final answer followed by the reasoning chain
        "issues": [],             # parse failures and fallbacks, in order
    }


def make_prediction(question: Any, method: str, final: str, trace: dict[str, Any], error: str = "") -> Any:
    """A Prediction; failed when nothing usable came out (the trace says why)."""
    failed = not final.strip() or bool(error)
    if failed and not error:
        error = "empty answer: " + ("; ".join(trace.get("issues") or []) or "the model wrote nothing usable")
    return Prediction(qid=question.qid, question=question.question, prediction=final,
                      answers=list(question.answers), method=method, trace=trace,
                      failed=failed, error=error)
