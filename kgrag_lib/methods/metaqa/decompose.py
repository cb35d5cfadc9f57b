"""`llm-qd`: question decomposition, then zero-shot sub-answers, reformulation and synthesis.

The same sequential loop runs the full KG-RAG system (kg_rag.py) when a triple selector is
given: then each (reformulated) sub-question is answered from its own top-K triples.
"""

from __future__ import annotations

from typing import Any

from ...concurrency import fan_out, parallel_map
from ...config import check_values
from ...llm.base import PromptTooLongError
from ...records import Prediction, Question
from ..base import Method
from . import prompts, stages
from .candidates import TripleSelector


class DecomposedQA(Method):
    """Decompose -> for each sub-question: reformulate, (select triples), answer -> synthesize."""

    def __init__(self, name: str, llm: Any, cfg: Any, seed: int = 0, selector: TripleSelector | None = None):
        check_values(cfg, where=name)
        self.name, self.llm, self.cfg, self.selector = name, llm, cfg, selector
        self.config = cfg
        self.p_decompose = cfg.sampling(seed, max_tokens=cfg.decompose_max_tokens, stop=(prompts.END_MARKER,))
        self.p_answer = cfg.sampling(seed, repeat_penalty=cfg.repeat_penalty)
        self.p_reformulate = cfg.sampling(seed, max_tokens=cfg.reformulate_max_tokens, stop=("?",))
        self.p_synthesize = cfg.sampling(seed, max_tokens=cfg.synthesis_max_tokens)

    def answer(self, question: Question) -> Prediction:
        trace = stages.new_trace(self.name, question)
        try:
            final = self._run(question, trace)
        except PromptTooLongError as exc:
            return stages.make_prediction(question, self.name, "", trace, error=f"{type(exc).__name__}: {exc}")
        return stages.make_prediction(question, self.name, final, trace)

    def _run(self, question: Question, trace: dict[str, Any]) -> str:
        issues: list[str] = trace["issues"]
        candidates = None
        if self.selector is not None:
            ids, missing = self.selector.resolve(question.topic_entities)
            if missing:
                issues.append(f"retrieval: topic entity not in the KB: {missing}")
            candidates = self.selector.candidates(ids)
            trace["retrieval"] = {"entity_ids": ids, "num_candidates": int(candidates.size),
                                  "hops": self.selector.cfg.hops, "direction": self.selector.cfg.direction}

        dec = stages.decompose(self.llm, question.question, self.p_decompose, self.cfg.max_subquestions)
        trace["decomposition"] = dec.to_dict()
        issues.extend(dec.issues)
        subqs = dec.subquestions
        if not subqs:
            issues.append("decomposition: fell back to the original question")
            subqs = [question.question]

        history: list[tuple[str, str]] = []
        steps: list[dict[str, Any]] = [{"index": i, "subquestion": sq} for i, sq in enumerate(subqs, 1)]
        workers = fan_out(self.llm)
        if self.cfg.reformulate or workers == 1:   # rewritten from the answers before it: a chain
            for step in steps:
                trace["steps"].append(step)   # first: a failed call leaves the step it stopped in
                asked, got = self._step(step, history, candidates)
                issues.extend(got)
                history.append((asked, step["answer"] or "(no answer)"))
        else:   # the sub-answers read nothing of each other: on a batching backend they go out together
            trace["steps"].extend(steps)
            done = parallel_map(lambda step: self._step(step, [], candidates), steps, workers)
            for step, (asked, got) in zip(steps, done):
                issues.extend(got)
                history.append((asked, step["answer"] or "(no answer)"))
        answered = [a for _, a in history if a != "(no answer)"]
        if len(subqs) > 1 or self.cfg.synthesize_single:
            trace["synthesis_raw"], final = stages.synthesize(
                self.llm, question.question, dec.reasoning, history, self.p_synthesize)
            if not final and answered:
                issues.append("synthesis: empty output, used the last sub-answer")
                final = answered[-1]
        else:
            final = answered[-1] if answered else ""
        trace["final_answer"] = final
        trace["final_output"] = final + (f"\n\nReasoning: {dec.reasoning}" if dec.reasoning and final else "")
        return final

    def _step(self, step: dict[str, Any], history: list[tuple[str, str]], candidates: Any) -> tuple[str, list[str]]:
        """Fill a sub-question's trace step: (reformulate from `history`), (select triples), answer.
        Returns the question asked and the step's issues."""
        issues: list[str] = []
        i, asked = step["index"], step["subquestion"]
        if i > 1 and self.cfg.reformulate:
            step["reformulation_raw"], asked, issue = stages.reformulate(self.llm, asked, history, self.p_reformulate)
            if issue:
                issues.append(f"step {i}: {issue}")
        step["asked"] = asked
        facts = None
        if self.selector is not None:
            sel = self.selector.select(asked, candidates)
            step.update(sel.to_dict())
            facts = sel.texts
        step["answer_raw"], step["answer"] = stages.answer(self.llm, asked, self.p_answer, facts)
        if not step["answer"]:
            issues.append(f"step {i}: empty sub-answer")
        return asked, issues
