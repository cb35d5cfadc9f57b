"""`llm-kg`: KAPING — the question's top-K candidate triples in the prompt, no decomposition.

The KG-RAG paper's 'LLM+KG' baseline (§4.2.2): candidate retrieval up to N hops from the
question entity, top-K selection by embedding dot product with the whole question, and
one fact-grounded answer call.
"""

from __future__ import annotations

from typing import Any

from ...records import Prediction, Question
from ..base import Method
from . import stages
from .candidates import TripleSelector


class KapingQA(Method):
    name = "llm-kg"

    def __init__(self, llm: Any, selector: TripleSelector, cfg: Any, seed: int = 0):
        self.llm, self.selector, self.cfg = llm, selector, cfg
        self.config = cfg
        self.params = cfg.sampling(seed, repeat_penalty=cfg.repeat_penalty)

    def answer(self, question: Question) -> Prediction:
        trace = stages.new_trace(self.name, question)
        ids, missing = self.selector.resolve(question.topic_entities)
        if missing:
            trace["issues"].append(f"retrieval: topic entity not in the KB: {missing}")
        candidates = self.selector.candidates(ids)
        trace["retrieval"] = {"entity_ids": ids, "num_candidates": int(candidates.size),
                              "hops": self.cfg.hops, "direction": self.cfg.direction}
        step: dict[str, Any] = {"index": 1, "subquestion": question.question, "asked": question.question}
        trace["steps"].append(step)
        sel = self.selector.select(question.question, candidates)
        step.update(sel.to_dict())
        return stages.answer_once(self.llm, question, self.name, self.params, trace, step, sel.texts)
