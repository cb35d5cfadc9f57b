"""Self-Ask and Self-Ask + KG-Infused RAG: the second plug-in baseline of KG-Infused RAG
(Wu et al., §4.2 "Plug-in Baselines", Appendix F.1, Table 21; prompt: Appendix D.3 Table 18).

Self-Ask decomposes a question into follow-up questions written one at a time from few-shot
demonstrations. As in the paper, the web search of the original Self-Ask is replaced by the
local corpus retriever: every follow-up retrieves passages and the model answers it from them
(the intermediate answer); the loop ends when the model writes "So the final answer is:" or
after `max_steps` follow-ups (then the final answer is asked for).

| name                | passages per follow-up (Table 7)  | before the intermediate answer        |
|---------------------|-----------------------------------|---------------------------------------|
| self-ask            | top k_p (6) by the follow-up      | nothing: the passages themselves      |
| self-ask-kg-infused | k_p/2 by it + k_p/2 by its q' (3+3)| note, KG-guided augmentation (eq. 10) |

The KG variant runs, for each follow-up, KG-Infused RAG's own stages (§3.4-3.6: seed entities,
spreading activation, subgraph summary, KG-based query expansion, dual retrieval, passage
note, augmentation, answer) through a `KGInfusedRAG` instance, so those requests are
byte-identical to the other variants' for equal inputs and the LLM cache shares them.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable

from ...config import check_values, make_config, opt
from ...errors import ConfigError
from ...llm.base import SamplingParams
from ...llm.parsing import clean_answer, strip_think
from ...records import Prediction, Question
from ..base import Method, RunContext
from . import prompts
from . import self_ask_prompts
from .corpus import CorpusIndex
from .kg_sources import KGSource
from .rag import KGInfusedConfig, KGInfusedRAG

NAMES = ("self-ask", "self-ask-kg-infused")
SUMMARIES = {
    "self-ask": "Self-Ask (KG-Infused RAG plug-in baseline, App. F.1): follow-up questions one at a time, "
                "each answered from top-k_p passages",
    "self-ask-kg-infused": "Self-Ask + KG-Infused RAG (App. F.1): each follow-up gets KG-based QE (k_p/2 + k_p/2 "
                           "passages), a passage note and KG-guided augmentation before its answer",
}


@dataclass
class SelfAskConfig(KGInfusedConfig):
    """KG-Infused RAG's settings (shared, so one profile block serves every variant and equal
    stages stay cache-identical) plus the Self-Ask loop's. The KG fields (kg, rounds, k_e,
    max_entities_per_round, max_triples_per_entity, query_max_tokens) only matter for
    self-ask-kg-infused."""

    max_steps: int = opt(4, "most follow-up questions per question; after that the final answer is asked for "
                            "(the paper states no cap; our demonstrations need at most 4)", min=1)
    step_max_tokens: int | None = opt(None, "max new tokens of one follow-up step (default: max_tokens); the step "
                                            "also stops at 'Intermediate answer:'", min=1)
    passage_note: bool = opt(False, "self-ask only: answer each follow-up from a passage note (as Vanilla RAG does) "
                                    "instead of from the passages; the KG variant always writes the note")

    def stage_config(self) -> KGInfusedConfig:
        """The KG-Infused RAG part, for the stages shared with the other variants."""
        return KGInfusedConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(KGInfusedConfig)})


# ---- parsing a step -------------------------------------------------------------------
_FOLLOW = re.compile(r"follow[\s-]*up(?:\s+question)?\s*\**\s*:\s*\**", re.I)
_FINAL = re.compile(r"(?:so\s+)?the\s+final\s+answer\s+is\s*\**\s*:?\s*\**|final\s+answer\s*\**\s*:\s*\**", re.I)
_NORM = re.compile(r"[^\w]+")


@dataclass(frozen=True)
class Step:
    """What one generation step wrote: a follow-up question, the final answer, or neither."""

    kind: str   # "follow_up" | "final" | "none"
    text: str


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().strip("*").strip()
        if line:
            return line
    return ""


def parse_step(output: str) -> Step:
    """The first 'Follow up:' or final-answer label in a step's output, whichever comes first,
    and the line after it. Echoed 'Are follow up questions needed here:' lines are ignored."""
    text = strip_think(output or "")
    fu, fin = _FOLLOW.search(text), _FINAL.search(text)
    if fin is not None and (fu is None or fin.start() < fu.start()):
        return Step("final", _first_line(text[fin.end():]))
    if fu is not None:
        q = _first_line(text[fu.end():]).strip("\"'`").strip()
        return Step("follow_up", q) if q else Step("none", "")
    return Step("none", "")


def _norm(q: str) -> str:
    return _NORM.sub(" ", q.lower()).strip()


class SelfAsk(Method):
    """Self-Ask over the local corpus (`self-ask`), optionally with KG-Infused RAG applied to
    each follow-up (`self-ask-kg-infused`). `answer(question)` returns the final answer and a
    trace with every step; `next_step`, `answer_follow_up` and `final_answer` run one stage."""

    def __init__(self, name: str, cfg: SelfAskConfig, ctx: RunContext, *, seed: int = 0,
                 kg_source: KGSource | None = None,
                 corpus_loader: Callable[[str], CorpusIndex] | None = None) -> None:
        if name not in NAMES:
            raise ConfigError(f"unknown Self-Ask variant {name!r}; expected one of {', '.join(NAMES)}")
        check_values(cfg)
        self.name = name
        self.uses_kg = name == "self-ask-kg-infused"
        self.cfg = self.config = cfg
        # The KG-Infused RAG stages, with exactly the settings (and so the requests) of the
        # kg-infused / vanilla-rag variants.
        self.rag = KGInfusedRAG("kg-infused" if self.uses_kg else "vanilla-rag", cfg.stage_config(), ctx,
                                seed=seed, kg_source=kg_source, corpus_loader=corpus_loader)
        self.seed = self.rag.seed

    @property
    def llm(self) -> Any:
        return self.rag.llm

    def _params(self, max_tokens: int | None, stop: tuple[str, ...]) -> Any:
        return SamplingParams(max_tokens=max_tokens or self.cfg.max_tokens, temperature=float(self.cfg.temperature),
                              seed=self.seed, stop=stop)

    # ---- stages -------------------------------------------------------------------------
    def next_step(self, question: str, steps: list[tuple[str, str]]) -> tuple[str, Step]:
        """Table 18: the model continues the reasoning with one follow-up (generation stops at
        'Intermediate answer:', which the retriever's answer fills) or the final answer."""
        params = self._params(self.cfg.step_max_tokens, (self_ask_prompts.INTERMEDIATE, "\nQuestion:"))
        raw = self.llm.generate(prompts.user(self_ask_prompts.self_ask_prompt(question, steps)), params)
        return raw, parse_step(raw)

    def final_answer(self, question: str, steps: list[tuple[str, str]]) -> str:
        """The answer forced after `max_steps` follow-ups (or a repeated one): the prompt ends
        with 'So the final answer is:'. Returns the raw output."""
        params = self._params(self.cfg.answer_max_tokens, ("\n" + self_ask_prompts.FOLLOW_UP, self_ask_prompts.INTERMEDIATE, "\nQuestion:"))
        return self.llm.generate(prompts.user(self_ask_prompts.self_ask_prompt(question, steps, force_final=True)), params)

    def answer_follow_up(self, corpus: CorpusIndex, follow_up: str) -> dict[str, Any]:
        """Retrieve for one follow-up and answer it (App. F.1). self-ask: top k_p passages by
        the follow-up, answered from them. self-ask-kg-infused: KG-based QE from the
        follow-up's seed entities (k_p/2 + k_p/2 passages), note, KG-guided augmentation
        (eq. 10), answer from the fact-enhanced note. Returns the step's trace; its
        'intermediate_answer' is what goes back into the prompt."""
        rag, rec = self.rag, {"follow_up": follow_up, "issues": []}
        qvec = rag.embed(follow_up)
        summary = None
        if self.uses_kg:
            summary, _ = rag.kg_facts(follow_up, rec, qvec)
            got = rag.retrieve_expanded(corpus, follow_up, summary, rec, qvec)
        else:
            got = rag.retrieve(corpus, follow_up, None, qvec)
        rec["passages"] = got.to_trace()
        if self.uses_kg or self.cfg.passage_note:
            context = rec["note"] = rag.write_note(follow_up, got.passages)
            if self.uses_kg:
                context = rec["augmented_note"] = rag.augment(follow_up, context, summary or "")
        else:
            context = prompts.format_passages(got.passages)
        raw, ans = rag.generate_answer(follow_up, context, False)
        rec["answer_raw"] = raw
        if not ans:
            rec["issues"].append("the model gave no intermediate answer; 'unknown' was written in its place")
        rec["intermediate_answer"] = ans or "unknown"
        return rec

    # ---- the whole loop -----------------------------------------------------------------
    def answer(self, question: Question) -> Prediction:
        q, cfg = question.question, self.cfg
        yes_no = question.dataset == "strategyqa"
        trace: dict[str, Any] = {"variant": self.name, "kg": None, "corpus": None,
                                 "config": dataclasses.asdict(cfg), "seed": self.seed, "steps": [], "issues": [],
                                 "retrieved_ids": []}
        corpus = self.rag.corpus_for(question)
        trace["corpus"] = corpus.name
        if self.uses_kg:
            trace["kg"] = self.rag.kg.name
        steps: list[tuple[str, str]] = []
        asked: set[str] = set()
        final_raw = final_text = None
        stop_reason = "max_steps"
        for i in range(cfg.max_steps):
            raw, step = self.next_step(q, steps)
            if step.kind == "final":
                final_raw, final_text, stop_reason = raw, step.text, "final_answer"
                break
            if step.kind == "none":
                trace["step_raw"] = raw
                return self._failed(question, trace, steps, raw,
                                    f"step {i + 1}: the model wrote neither '{self_ask_prompts.FOLLOW_UP}' nor '{self_ask_prompts.FINAL}' "
                                    f"(output: {raw.strip()[:120]!r})")
            if _norm(step.text) in asked:
                trace["issues"].append(f"step {i + 1}: follow-up repeated ({step.text!r}); final answer asked for")
                stop_reason = "repeated_follow_up"
                break
            asked.add(_norm(step.text))
            rec = {"step": i + 1, "raw": raw, **self.answer_follow_up(corpus, step.text)}
            trace["issues"] += [f"step {i + 1}: {m}" for m in rec.pop("issues")]
            trace["steps"].append(rec)
            trace["retrieved_ids"] += [p["pid"] for p in rec["passages"] if p["pid"] not in trace["retrieved_ids"]]
            steps.append((step.text, rec["intermediate_answer"]))
        if final_raw is None:
            final_raw = self.final_answer(q, steps)
            final_text = _first_line(final_raw)
        trace["stop_reason"] = stop_reason
        return self._finish(question, trace, steps, final_raw, final_text or "", yes_no)

    def _finish(self, question: Question, trace: dict[str, Any], steps: list[tuple[str, str]], raw: str,
                text: str, yes_no: bool) -> Prediction:
        ans = clean_answer(text, yes_no=yes_no) if text else ""
        trace["answer_raw"] = raw
        trace["final_answer"] = ans
        trace["transcript"] = self_ask_prompts.transcript(question.question, steps) + f"{self_ask_prompts.FINAL} {ans}".rstrip()
        error = "" if ans else f"empty final answer from the model ({raw.strip()[:120]!r})"
        return Prediction(question.qid, question.question, ans, list(question.answers), self.name, trace=trace,
                          failed=not ans, error=error)

    def _failed(self, question: Question, trace: dict[str, Any], steps: list[tuple[str, str]], raw: str,
                error: str) -> Prediction:
        trace["stop_reason"] = "unparsable_step"
        trace["answer_raw"] = raw
        trace["transcript"] = self_ask_prompts.transcript(question.question, steps)
        return Prediction(question.qid, question.question, "", list(question.answers), self.name, trace=trace,
                          failed=True, error=error)


def make_self_ask(name: str, ctx: RunContext, cfg: SelfAskConfig | dict[str, Any] | None = None, seed: int = 0,
                  **kw: Any) -> SelfAsk:
    """Build `self-ask` or `self-ask-kg-infused` from its typed config, or a settings dict (unknown keys:
    ConfigError)."""
    if name not in NAMES:
        raise ConfigError(f"unknown Self-Ask variant {name!r}; expected one of {', '.join(NAMES)}")
    typed = cfg if isinstance(cfg, SelfAskConfig) else make_config(SelfAskConfig, cfg, where=f"method {name}")
    return SelfAsk(name, typed, ctx, seed=seed, **kw)
