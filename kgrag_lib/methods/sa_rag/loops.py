"""How a variant gathers its context: one retrieval, the CoT loop, or the decomposition loop.

Every loop takes a retriever (`retrievers.py`: dense, SA-RAG or PPR) and a `stages.Reader`, so
CoT RAG and SA-RAG + CoT are the same loop with another retriever (§4: "plug-and-play").
Each returns the context for the final answer, its trace, and the issues met on the way; an
unusable reasoning or decomposition output ends the loop with a fallback, recorded as an issue.

- CoT (Appendix A, Listing 2): retrieve for the question; then, up to `max_steps - 1` times, ask
  whether the context answers it; if not, retrieve for the follow-up question and continue with
  "the summary so far + the new finds". `max_steps` counts retrievals (the paper's "maximum of
  three steps"; its code runs 2 reasoning steps after the first retrieval).
- Decomposition (Listing 3): sub-questions answered in order, each retrieved for with the
  sub-question followed by the earlier sub-questions and answers; then one retrieval for the
  original question, whose context with every sub-answer feeds the final answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import prompts
from .retrievers import Retrieved, Retriever
from .stages import Reader


@dataclass
class Gathered:
    context: str
    trace: dict[str, Any]
    issues: list[str] = field(default_factory=list)
    retrievals: list[Retrieved] = field(default_factory=list)

    def add(self, r: Retrieved) -> Retrieved:
        self.retrievals.append(r)
        self.issues.extend(r.issues)
        return r

    def retrieved_pids(self) -> list[str]:
        """Distinct passage ids of every retrieval, in the order found (for gold-paragraph recall)."""
        return list(dict.fromkeys(d.pid for r in self.retrievals for d in r.documents))


def render(r: Retrieved) -> str:
    return prompts.format_context([d.text for d in r.documents], r.relations)


def single_step(retriever: Retriever, question: str) -> Gathered:
    out = Gathered("", {})
    r = out.add(retriever.retrieve(question))
    out.context, out.trace["retrieval"] = render(r), r.trace
    return out


def cot_loop(retriever: Retriever, reader: Reader, question: str, max_steps: int) -> Gathered:
    out = Gathered("", {})
    r = out.add(retriever.retrieve(question))
    steps: list[dict[str, Any]] = [{"retrieval": r.trace}]
    context = render(r)
    for _ in range(max_steps - 1):
        step = reader.reason(question, context)
        steps[-1]["reasoning"] = step.to_trace()
        if step.error:
            out.issues.append(f"cot reasoning unusable: {step.error}; answered from the context so far")
            break
        if step.answer_possible:
            break
        if not step.follow_up:
            out.issues.append("cot no follow-up: the step found the context insufficient but asked nothing")
            break
        r = out.add(retriever.retrieve(step.follow_up))
        steps.append({"retrieval": r.trace})
        context = prompts.known_and_new(step.summary, render(r))
    out.context, out.trace["steps"] = context, steps
    return out


def decomposition_loop(retriever: Retriever, reader: Reader, question: str, max_subquestions: int) -> Gathered:
    out = Gathered("", {})
    subs, error = reader.decompose(question, max_subquestions)
    if error:
        out.issues.append(f"decomposition unusable: {error}; the question is its only sub-question")
        subs = [question]
    memory: list[str] = []
    parts = []
    for sub in subs:
        query = "\n\n".join([sub, *memory])
        r = out.add(retriever.retrieve(query))
        raw, answer = reader.answer(sub, render(r))
        memory.append(prompts.subanswer_line(sub, answer))
        parts.append({"question": sub, "retrieval": r.trace, "answer": answer, "answer_raw": raw})
    r = out.add(retriever.retrieve(question))
    out.context = prompts.with_subanswers(render(r), memory)
    out.trace.update(subquestions=parts, final_retrieval=r.trace)
    return out
