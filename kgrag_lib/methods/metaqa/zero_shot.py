"""`llm`: the zero-shot baseline of the KG-RAG paper (§4.2.2, baseline 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...records import Prediction, Question
from ..base import Method, MethodSpec, RunContext
from . import stages
from .stages import METAQA_DATASETS, SamplingConfig


@dataclass
class ZeroShotConfig(SamplingConfig):
    """The answer call's inference parameters (the paper's sub-answer settings)."""


class ZeroShotLLM(Method):
    """Asks the model the question directly, with no decomposition and no KG."""

    name = "llm"

    def __init__(self, llm: Any, cfg: ZeroShotConfig, seed: int = 0):
        self.llm, self.cfg = llm, cfg
        self.config = cfg
        self.params = cfg.sampling(seed, repeat_penalty=cfg.repeat_penalty)

    def answer(self, question: Question) -> Prediction:
        trace = stages.new_trace(self.name, question)
        step: dict[str, Any] = {"index": 1, "subquestion": question.question, "asked": question.question}
        trace["steps"].append(step)
        return stages.answer_once(self.llm, question, self.name, self.params, trace, step)


def make_zero_shot(ctx: RunContext, cfg: dict, seed: int) -> ZeroShotLLM:
    return ZeroShotLLM(ctx.llm, SPEC.check_config(cfg, "methods.llm"), seed)


SPEC = MethodSpec("llm", make_zero_shot, ZeroShotConfig, METAQA_DATASETS,
                  "zero-shot LLM answer, no decomposition, no KG (KG-RAG baseline 'LLM')", "metaqa")
