"""`llm`: the zero-shot baseline of the KG-RAG paper (§4.2.2, baseline 1)."""

from __future__ import annotations

from typing import Any

from ...records import Prediction, Question
from ..base import Method
from . import stages


class ZeroShotLLM(Method):
    """Asks the model the question directly, with no decomposition and no KG."""

    name = "llm"

    def __init__(self, llm: Any, cfg: Any, seed: int = 0):
        self.llm, self.cfg = llm, cfg
        self.config = cfg
        self.params = cfg.sampling(seed, repeat_penalty=cfg.repeat_penalty)

    def answer(self, question: Question) -> Prediction:
        trace = stages.new_trace(self.name, question)
        step: dict[str, Any] = {"index": 1, "subquestion": question.question, "asked": question.question}
        trace["steps"].append(step)
        return stages.answer_once(self.llm, question, self.name, self.params, trace, step)
