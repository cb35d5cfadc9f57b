"""TCR-QF (Huang et al.), its ablations and baselines, one class for all nine variants.

| name           | label                        | retrieval (`search.py`)   | TCR | feedback |
|----------------|------------------------------|---------------------------|-----|----------|
| tcr-llm        | LLM only                     | none                      |     |          |
| tcr-cot        | CoT                          | none (step-by-step)       |     |          |
| tcr-naive-rag  | Naive RAG                    | dense top_k chunks        |     |          |
| graphrag-local | GraphRAG-style local search  | entities, relations, text |     |          |
| tog            | ToG (w/o TCR & QF)           | ToG beam search           |     |          |
| tog-tcr        | TCR (w/o QF)                 | ToG beam search           | yes |          |
| tog-qf         | QF (w/o TCR)                 | ToG beam search           |     | query    |
| tcr-qf         | TCR-QF                       | ToG beam search           | yes | query    |
| tcr-af         | TCR-AF                       | ToG beam search           | yes | answer   |

§3.4's loop, as we run it: answer from the retrieved subgraph (with restored sentences under
TCR) -> QF: the LLM lists the missing knowledge as questions from the question and the round's
contextual information (at most `max_missing` kept); each is answered by dense retrieval of
`feedback_top_k` chunks of the corpus, from which new triples are extracted in the EID-record
format, given the round's retrieved triples as the paper's Existing Triples, and added to the KG
(edit-distance de-duplication and the quote check `quote_check`, `kg.tcr_kg`)
-> the subgraph is retrieved again from the grown KG and the question answered again. AF instead
extracts the triples of the model's own answer. The loop stops when nothing is missing
(ΔK = ∅), when the KG did not change (the next answer would repeat: same KG, same greedy
prompts), or after `max_iterations` feedback rounds (I_max, the paper 20).

The KG grows across questions too: the run answers its questions in sample order (the order of
predictions.jsonl), every later question sees every earlier question's triples, and each
prediction records what it added (`trace.kg_added`). A resumed run replays those additions
(`resume`) before answering the next question, so a killed run ends with the same KG and answers.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Sequence

import numpy as np

from ...concurrency import fan_out, parallel_map
from ...config import MAX_SEED, check_values, make_config, opt
from ...errors import ConfigError
from ...kg.extraction import load_tokenizer
from ...kg.sources import shared_kg
from ...kg.tcr_kg import TcrKG
from ...llm.parsing import LLMParseError
from ...retrieval import embed_cached, encode_queries
from .context import SentenceIndex, restore_context, template
from .prompts import GRAMMAR, answer_messages, feedback_messages
from .records import parse_records
from ...llm.base import Meter, PromptTooLongError, SamplingParams
from ...records import Prediction, Question
from ..base import Method, RunContext, method_specs
from ..common import coverage_issue, resolve_spec
from . import prompts
from .search import EntityIndex, dense_top, entity_index, local_search, tog_search, topic_entities

FAMILY = "tcr-qf"
DATASETS = ("2wiki", "hotpotqa", "musique")

DEVIATIONS = (
    "TCR-QF: the KG is extracted by the run's own model with our wording of the paper's EID-record prompt "
    "(decoding constrained to the record format by a grammar on llama.cpp), chunks of 512 tokens of the shipped "
    "MiniLM WordPiece tokenizer (the paper does not name its tokenizer); the corpus is the pooled paragraphs of the "
    "sampled questions, as the paper does following HotpotQA's setting.",
    "TCR-QF: ToG runs over the extracted KG with topic entities found by name match and description similarity "
    "(ToG takes them from the dataset); relation pruning and entity scoring answer JSON restricted to the "
    "candidates; no call is sent when an entity has at most `width` relations (each scores 1/k) or a relation one "
    "target (it scores 1), so every candidate set's scores sum to 1 as ToG's do (the LLM's are normalised).",
    "TCR-QF: the dense retriever of feedback and Naive RAG is the run's embedder (MiniLM on CPU), not OpenAI's "
    "text-embedding-small; feedback reads the top feedback_top_k chunks per missing question.",
    "TCR-QF: feedback rounds run over the whole sample (schedule=sample, the default): round r answers every open "
    "question on KG_r, then the feedback of all of them, applied in sample order, forms KG_r+1, as Table 3's round "
    "counting implies (the paper does not say so in words); a question stops when nothing is missing for it, "
    "when no question changed its KG in a round, or at I_max. schedule=question (each question runs all its "
    "rounds on the KG grown by every earlier question) is how the committed cpu-reference TCR-QF runs were made.",
    "TCR-QF: duplicate feedback triples are dropped by rapidfuzz's normalized Indel similarity >= dedupe_threshold "
    "(0.85) on entity names and relation types; the paper names edit distance without a threshold.",
    "TCR-QF: GraphRAG is represented by our GraphRAG-style local search over the same KG (entities, their "
    "relations and source text units within a token budget), without GraphRAG's communities or reports.",
    "TCR-QF: on CPU the loop is cut (max_iterations, max_missing) and ToG's depth/width may be cut in the profile; "
    "every table states them.",
    "TCR-QF: the answer is read from the `Final Answer:` line the prompt asks for; when the model leaves it out, "
    "from its last 'the answer (to the question \"...\") is X' sentence, else from a reply that opens with a bare "
    "yes or no. Each question's issues name the form read, and mechanism health counts an answer read in any of "
    "these forms as parsed; an output with none (mostly a reasoning cut off by max_tokens) falls back to its last "
    "line and counts as not parsed. Runs made before this rule read only the `Final Answer:` line.",
)
# `kgrag run` flags for the settings most often changed (any other: --set KEY=VALUE).
CLI_FLAGS = (
    ("--kg", str, "TCR-QF: the extracted KG spec, e.g. tcr:2wiki:dev200:n=100:seed={seed}"),
    ("--top-k", int, "TCR-QF: chunks of the Naive RAG baseline"),
    ("--width", int, "TCR-QF: ToG beam width"),
    ("--depth", int, "TCR-QF: ToG maximum depth"),
    ("--max-iterations", int, "TCR-QF: feedback rounds I_max"),
)


@dataclass
class TcrQFConfig:
    """Settings of every TCR-QF variant (defaults: the paper §3-4 and ToG's defaults)."""

    kg: str = opt("tcr:{dataset}:n=100:seed={seed}",
                  "corpus and KG as a KG spec; {dataset} = the question's dataset, {seed} = the run seed; must select "
                  "the run's own sample (same split, n and seed), e.g. tcr:2wiki:dev200:n=100:seed={seed}")
    width: int = opt(3, "ToG beam width: relations kept per entity and paths kept per depth (ToG: 3)", min=1)
    depth: int = opt(3, "ToG maximum depth (ToG: 3)", min=1)
    topic_k: int = opt(3, "topic entities the search starts from", min=1)
    max_candidates: int = opt(20, "target entities shown to the entity scorer per relation, in store order", min=1)
    explore_temperature: float = opt(0.4, "temperature of relation pruning and entity scoring (ToG: 0.4)", min=0.0)
    temperature: float = opt(0.0, "temperature of answering, sufficiency, missing knowledge and extraction (ToG: 0)",
                             min=0.0)
    max_iterations: int = opt(20, "I_max: feedback rounds at most (the paper: 20)", min=0)
    max_missing: int = opt(5, "missing-knowledge questions kept per round (the paper sets no limit)", min=1)
    feedback_top_k: int = opt(3, "chunks retrieved per missing-knowledge question (the paper does not say)", min=1)
    quote_check: str = opt("flag", "a relation whose quote is not found in its chunk (whitespace and case "
                                   "normalised; §3.1 asks for an exact quote): flag = keep it marked "
                                   "quote_in_chunk false; drop = leave it out of the KG (the built KG and feedback)",
                           choices=("flag", "drop"), absent="flag")
    dedupe_threshold: float = opt(0.85, "normalized edit similarity at which a feedback entity or relation is a "
                                        "duplicate (the paper gives no value)", gt=0.0, max=1.0)
    top_k: int = opt(5, "chunks of the Naive RAG baseline", min=1)
    local_entities: int = opt(10, "GraphRAG-style local search: entities selected (GraphRAG: top_k_mapped_entities 10)",
                              min=1)
    local_relations: int = opt(10, "GraphRAG-style local search: relations kept (GraphRAG: top_k_relationships 10)",
                               min=1)
    local_budget: int = opt(1500, "GraphRAG-style local search: context budget in tokens of the chunk tokenizer", min=1)
    max_tokens: int = opt(512, "max new tokens of reasoning, missing knowledge and search stages", min=1)
    reason_max_tokens: int | None = opt(None, "max new tokens of a reasoning answer (CoT and every retrieval "
                                              "variant; None: max_tokens). A small model's steps can use up "
                                              "max_tokens before its answer line, which a cut search budget "
                                              "should not cause", min=1, absent=None)
    extract_max_tokens: int = opt(1024, "max new tokens of a feedback extraction", min=1)
    answer_max_tokens: int = opt(64, "max new tokens of the LLM-only answer", min=1)
    seed: int | None = opt(None, "seed of the LLM sampling (default: the run seed)", min=0, max=MAX_SEED)
    schedule: str = opt("sample", "feedback rounds over the whole sample (round r answers every open question on "
                                  "KG_r, then all their feedback forms KG_r+1; as Table 3 counts rounds) or "
                                  "question by question in sample order (each on the KG every earlier one grew)",
                        choices=("sample", "question"), absent="question")


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    retrieval: str  # "none" | "cot" | "dense" | "local" | "tog"
    tcr: bool
    feedback: str   # "" | "query" | "answer"
    summary: str


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("tcr-llm", "LLM only", "none", False, "", "LLM only: the model answers from its own knowledge"),
    Variant("tcr-cot", "CoT", "cot", False, "", "CoT: step-by-step reasoning without retrieval"),
    Variant("tcr-naive-rag", "Naive RAG", "dense", False, "", "Naive RAG: the top_k chunks most similar to the question"),
    Variant("graphrag-local", "GraphRAG-style local search", "local", False, "",
            "GraphRAG-style local search: entities, relations and source text of the TCR-QF KG"),
    Variant("tog", "ToG (w/o TCR & QF)", "tog", False, "", "ToG: LLM-guided beam search over the TCR-QF KG"),
    Variant("tog-tcr", "TCR (w/o QF)", "tog", True, "", "ToG + triple context restoration"),
    Variant("tog-qf", "QF (w/o TCR)", "tog", False, "query", "ToG + query-driven feedback"),
    Variant("tcr-qf", "TCR-QF", "tog", True, "query",
            "TCR-QF: ToG, triple context restoration and query-driven feedback that grows the KG"),
    Variant("tcr-af", "TCR-AF", "tog", True, "answer", "TCR-AF: feedback from triples of the model's own answer"),
)}


@dataclass
class _Parts:
    """What a variant reads for one KG spec: its private KG and the indexes built over it."""

    kg: TcrKG
    sentences: SentenceIndex
    chunk_ids: list[str]
    chunk_vecs: np.ndarray
    entities: EntityIndex
    pids: set[str]
    quotes: dict[str, Any]   # the built KG's relations by the quote check (`TcrKG.quote_counts`)


@dataclass
class _Open:
    """A question of `answer_sample` while its rounds run."""

    q: Question
    trace: dict[str, Any]
    meter: Meter
    parts: Any = None
    qvec: Any = None
    rt: dict[str, Any] = dataclasses.field(default_factory=dict)
    raw: str = ""
    ans: str = ""
    context: str = ""
    found: Any = None
    error: str = ""
    seconds: float = 0.0
    closed: bool = False
    yielded: bool = False

    def close(self, why: str) -> None:
        self.closed = True
        self.trace["stopped"] = why


def predicted_answer(raw: str) -> tuple[str, str | None]:
    """(prediction, form) of a reasoning output: `prompts.read_answer`, else its last non-empty line
    with form None (recorded as not parsed)."""
    ans, form = prompts.read_answer(raw)
    if ans is not None:
        return ans, form
    lines = [line.strip() for line in (raw or "").splitlines() if line.strip()]
    return (lines[-1] if lines else ""), None


class TcrQF(Method):
    """One variant; `answer(question)` retrieves, restores, answers and (with feedback) grows the KG."""

    def __init__(self, variant: Variant | str, cfg: TcrQFConfig, ctx: RunContext, *, seed: int = 0,
                 kg_folder: Callable[[str], Path] | None = None) -> None:
        self.variant = VARIANTS[variant] if isinstance(variant, str) else variant
        self.name = self.variant.name
        # feedback grows one KG across the questions: over the whole sample round by round (the
        # runner hands the sample to `answer_sample`), or question by question (one at a time)
        self.answers_sample = bool(self.variant.feedback) and cfg.schedule == "sample"
        self.parallel_safe = not self.variant.feedback or self.answers_sample
        check_values(cfg)
        self.cfg = self.config = cfg
        self.ctx = ctx
        self.run_seed = int(seed)
        self.seed = int(seed) if cfg.seed is None else int(cfg.seed)
        self._kg_folder = kg_folder or self._default_folder
        self._parts: dict[str, _Parts] = {}
        self._replayed: list[dict[str, Any]] = []
        self._tokenizer: Any = None

    # -- parts ------------------------------------------------------------------------------------
    def _default_folder(self, spec: str) -> Path:
        built = shared_kg(self.ctx, spec)
        folder = built.extra.get("tcr_folder")
        if folder is None:
            raise ConfigError(f"kg={spec!r} is not a TCR-QF KG; use tcr:<dataset>[:<split>]:n=<N>:seed=<S>")
        return Path(folder)

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.ctx.embedder.encode(texts), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """A question's vector through the embedder's query side (a retriever's query prompt)."""
        return encode_queries(self.ctx.embedder, [text])[0]

    def parts(self, spec: str) -> _Parts:
        if spec not in self._parts:
            folder = self._kg_folder(spec)
            kg = TcrKG.load(folder, threshold=self.cfg.dedupe_threshold, quote_check=self.cfg.quote_check)
            built_quotes = kg.quote_counts()
            name = f"tcr-{folder.name}"
            sentences = self.ctx.memo(f"tcr:sentences:{folder}:{self.ctx.embedder.identity}", lambda: SentenceIndex.build(
                kg.chunks.values(), self.ctx.embedder, Path(self.ctx.cache_dir), f"{name}-sentences"))
            ids = list(kg.chunks)
            vecs = self.ctx.memo(f"tcr:chunks:{folder}:{self.ctx.embedder.identity}", lambda: np.asarray(embed_cached(
                self.ctx.embedder, [kg.chunks[c].as_text() for c in ids], cache_dir=Path(self.ctx.cache_dir),
                name=f"{name}-chunks", show_progress=False), dtype=np.float32))
            ents = entity_index(kg, self.embed)
            self._parts[spec] = _Parts(kg, sentences, ids, vecs, ents, {c.pid for c in kg.chunks.values()},
                                       built_quotes)
            for added in self._replayed:
                kg.replay(added)
            ents.update(kg)
        return self._parts[spec]

    def resume(self, done: list[dict[str, Any]]) -> None:
        """Called by the runner with the predictions already written: their KG additions are
        replayed (in order) so the next question sees the KG an uninterrupted run would. Over the
        whole sample (`answers_sample`) nothing is replayed: `answer_sample` recomputes the rounds
        from KG_0, the finished questions' requests coming from the LLM cache."""
        if self.answers_sample:
            return
        self._replayed = [((r.get("trace") or {}).get("kg_added") or []) for r in done]
        for p in self._parts.values():
            for added in self._replayed:
                p.kg.replay(added)
            p.entities.update(p.kg)

    # -- stages -----------------------------------------------------------------------------------
    def _params(self, max_tokens: int, temperature: float | None = None) -> SamplingParams:
        t = self.cfg.temperature if temperature is None else temperature
        return SamplingParams(max_tokens=max_tokens, temperature=float(t), seed=self.seed)

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer("minilm")
        return len(self._tokenizer.offsets(text))

    @property
    def reason_budget(self) -> int:
        return self.cfg.reason_max_tokens or self.cfg.max_tokens

    def _answer(self, messages: Any, max_tokens: int, issues: list[str]) -> tuple[str, str]:
        raw = self.ctx.llm.generate(messages, self._params(max_tokens))
        ans, form = predicted_answer(raw)
        if form is None:
            issues.append("answer: no 'Final Answer:' line; took the last line")
        elif form != prompts.FORMS[0]:
            issues.append(f"answer: read from a {form} (no 'Final Answer:' line)")
        return raw, ans

    def _retrieve(self, p: _Parts, question: str, qvec: np.ndarray, trace: dict[str, Any]) -> str:
        """The context of one answer (and, for ToG variants, the search trace of this round)."""
        cfg, v = self.cfg, self.variant
        if v.retrieval == "dense":
            rows = dense_top(p.chunk_vecs, qvec, cfg.top_k)
            trace["chunks"] = [p.chunk_ids[i] for i in rows]
            return prompts.format_context([], [], [p.kg.chunks[p.chunk_ids[i]].as_text() for i in rows])
        if v.retrieval == "local":
            context, trace["local"] = local_search(p.kg, p.entities, qvec, self.count_tokens,
                                                   top_entities=cfg.local_entities, top_relations=cfg.local_relations,
                                                   budget=cfg.local_budget)
            return context
        topic = topic_entities(p.kg, p.entities, question, qvec, cfg.topic_k)
        res = tog_search(p.kg, self.ctx.llm, question, topic, width=cfg.width, depth=cfg.depth,
                         max_candidates=cfg.max_candidates,
                         explore=self._params(cfg.max_tokens, cfg.explore_temperature),
                         reason=self._params(cfg.max_tokens))
        trace.update(topic=res.topic, search=res.trace, stopped=res.stopped, triples=[list(t) for t in res.triples])
        trace.setdefault("issues", []).extend(res.issues)
        sentences: list[str] = []
        if v.tcr and res.triples:
            vecs = self.embed([template(t) for t in res.triples])
            sentences = restore_context(p.kg, p.sentences, res.triples, vecs)
            trace["restored"] = sentences
        return prompts.format_context(res.triples, sentences)

    def _feedback(self, p: _Parts, q: Question, raw: str, ans: str, context: str, it: int,
                  round_trace: dict[str, Any]) -> list[dict[str, Any]] | None:
        """One feedback round; the triples it added ([] = KG unchanged), None = nothing missing."""
        found = self._feedback_calls(p, q, raw, ans, context, it, round_trace)
        if found is None:
            return None
        added = self._apply_feedback(p, found, round_trace)
        p.entities.update(p.kg)
        return added

    def _feedback_calls(self, p: _Parts, q: Question, raw: str, ans: str, context: str, it: int,
                        round_trace: dict[str, Any]) -> list[tuple[str, Any, list[str], dict[str, Any]]] | None:
        """The LLM side of one feedback round, which reads but never changes the KG: what is
        missing and the records extracted for it, as (origin, records, chunk ids, trace entry);
        None = nothing missing."""
        cfg = self.cfg
        params = self._params(cfg.extract_max_tokens).replace(grammar=GRAMMAR)
        if self.variant.feedback == "query":
            out = self.ctx.llm.generate(prompts.missing_messages(q.question, context), self._params(cfg.max_tokens))
            needs = prompts.missing_questions(out, cfg.max_missing)
            round_trace["missing"] = needs
            if not needs:
                return None
            # Existing Triples of the enrichment prompt: the round's retrieved subgraph (see prompts)
            existing = [tuple(t) for t in round_trace.get("triples") or []]

            def extract(need: str) -> tuple[list[str], Any]:
                rows = dense_top(p.chunk_vecs, self.embed_query(need), cfg.feedback_top_k)
                cids = [p.chunk_ids[i] for i in rows]
                return cids, parse_records(self.ctx.llm.generate(feedback_messages(
                    need, [p.kg.chunks[c].as_text() for c in cids], existing), params))

            # the needs' extractions read the same KG and never each other's output, so they go to a
            # batching server together (one round trip instead of one per need); results keep need order
            got = parallel_map(extract, needs, fan_out(self.ctx.llm))
            return [(f"{q.qid}#{it}:{j}", ext, cids, {"need": need, "chunks": cids, **ext.counts()})
                    for j, (need, (cids, ext)) in enumerate(zip(needs, got))]
        ext = parse_records(self.ctx.llm.generate(answer_messages(q.question, raw), params))
        return [(f"{q.qid}#{it}:answer", ext, [], ext.counts())]

    def _apply_feedback(self, p: _Parts, found: list[tuple[str, Any, list[str], dict[str, Any]]],
                        round_trace: dict[str, Any]) -> list[dict[str, Any]]:
        """Add one question's extracted records to the KG (de-duplicated against it); the triples added."""
        added: list[dict[str, Any]] = []
        entries = []
        for origin, ext, cids, entry in found:
            got = p.kg.add(ext, origin, cids)
            added.extend(got.triples)
            more = {"new_triples": len(got.triples), "duplicates": got.duplicates,
                    "quotes_not_in_chunk": got.quotes_not_in_chunk, "dropped_quote": got.dropped_quote}
            if self.variant.feedback == "query":
                more["merged_entities"] = got.merged_entities
            entries.append({**entry, **more})
        round_trace["extracted"] = entries
        return added

    # -- one question -------------------------------------------------------------------------------
    def answer(self, question: Question) -> Prediction:
        if self.answers_sample:   # one question's rounds over the KG as it stands
            return next(iter(self.answer_sample([question])))[1]
        v, cfg = self.variant, self.cfg
        trace: dict[str, Any] = {"variant": v.name, "label": v.label, "config": dataclasses.asdict(cfg),
                                 "seed": self.seed, "issues": [], "rounds": [], "kg_added": []}
        try:
            if v.retrieval in ("none", "cot"):
                msgs = prompts.direct_messages(question.question) if v.retrieval == "none" else \
                    prompts.cot_messages(question.question)
                budget = cfg.answer_max_tokens if v.retrieval == "none" else self.reason_budget
                raw, ans = self._answer(msgs, budget, trace["issues"])
                trace["answer_raw"] = raw
                trace["rounds"].append({"answer": ans})
                return self._prediction(question, ans, trace)
            spec = resolve_spec(cfg.kg, question.dataset, self.run_seed)
            trace["kg"] = spec
            p = self.parts(spec)
            trace["kg_quotes"] = p.quotes
            missing = coverage_issue(question, p.pids, "TCR-QF KG's chunks")
            if missing:
                trace["issues"].append(missing)
            qvec = self.embed_query(question.question)
            rounds = cfg.max_iterations if v.feedback else 0
            ans = ""
            for it in range(rounds + 1):
                rt: dict[str, Any] = {"round": it, "nodes": p.kg.num_nodes, "edges": p.kg.num_edges}
                context = self._retrieve(p, question.question, qvec, rt)
                trace["issues"].extend(rt.pop("issues", []))
                raw, ans = self._answer(prompts.reasoning_messages(question.question, context), self.reason_budget,
                                        trace["issues"])
                rt.update(answer=ans, answer_raw=raw, context=context)
                trace["rounds"].append(rt)
                if it == rounds:
                    trace["stopped"] = "I_max reached" if v.feedback else ""
                    break
                added = self._feedback(p, question, raw, ans, context, it, rt)
                if added is None:
                    trace["stopped"] = f"round {it}: nothing missing"
                    break
                rt["added"] = len(added)
                trace["kg_added"].extend(added)
                if not added:
                    trace["stopped"] = f"round {it}: KG unchanged"
                    break
            trace["kg_size"] = {"nodes": p.kg.num_nodes, "edges": p.kg.num_edges}
        except PromptTooLongError as exc:
            return Prediction(question.qid, question.question, "", list(question.answers), self.name, trace=trace,
                              failed=True, error=f"PromptTooLongError: {exc}")
        return self._prediction(question, ans, trace)

    # -- the whole sample, round by round ----------------------------------------------------------
    def answer_sample(self, questions: Sequence[Question], skip: Collection[str] = (), workers: int = 1
                      ) -> Iterator[tuple[Question, Prediction, Meter]]:
        """§3.4's loop over the whole sample: round r answers every open question on KG_r (up to
        `workers` at once), then every open question's feedback is extracted (at once too) and
        added to the KG in sample order, which makes KG_r+1. Yields (question, prediction, its
        meter) as questions close, in sample order within a round, except those in `skip`
        (finished in an earlier run: their rounds are recomputed from the LLM cache, since the KG
        every later round sees depends on them)."""
        cfg = self.cfg
        states = [self._open(q) for q in questions]
        for it in range(cfg.max_iterations + 1):
            live = [st for st in states if not st.closed]
            if not live:
                break
            parallel_map(lambda st: self._step(st, self._answer_round, it), live, workers)
            live = [st for st in live if not st.closed]
            if it == cfg.max_iterations:
                for st in live:
                    st.close("I_max reached")
            else:
                parallel_map(lambda st: self._step(st, self._feedback_round, it), live, workers)
                changed: set[int] = set()
                for st in (st for st in live if not st.closed):
                    if st.found is None:
                        st.close(f"round {it}: nothing missing")
                        continue
                    added = self._apply_feedback(st.parts, st.found, st.rt)
                    st.rt["added"] = len(added)
                    st.trace["kg_added"].extend(added)
                    if added:
                        changed.add(id(st.parts))
                for part in {id(st.parts): st.parts for st in live}.values():
                    if id(part) in changed:
                        part.entities.update(part.kg)
                for st in live:
                    if not st.closed and id(st.parts) not in changed:
                        st.close(f"round {it}: KG unchanged")
            for st in states:
                if st.closed and not st.yielded:
                    st.yielded = True
                    if st.q.qid not in skip:
                        yield st.q, self._close(st), st.meter

    def _open(self, q: Question) -> "_Open":
        spec = resolve_spec(self.cfg.kg, q.dataset, self.run_seed)
        trace: dict[str, Any] = {"variant": self.variant.name, "label": self.variant.label,
                                 "config": dataclasses.asdict(self.cfg), "seed": self.seed, "issues": [], "rounds": [],
                                 "kg_added": [], "kg": spec}
        st = _Open(q, trace, Meter())
        t0 = time.perf_counter()
        st.parts = self.parts(spec)
        trace["kg_quotes"] = st.parts.quotes
        missing = coverage_issue(q, st.parts.pids, "TCR-QF KG's chunks")
        if missing:
            trace["issues"].append(missing)
        st.qvec = self.embed_query(q.question)
        st.seconds += time.perf_counter() - t0
        return st

    def _step(self, st: "_Open", stage: Callable[["_Open", int], None], it: int) -> None:
        """One stage of one question, counted in its meter and time; a prompt too long or an
        unparsable output ends that question as a recorded failure, not the run."""
        t0 = time.perf_counter()
        try:
            with self.ctx.llm.meter(st.meter):
                stage(st, it)
        except (PromptTooLongError, LLMParseError) as exc:
            st.error = f"{type(exc).__name__}: {exc}"
            st.close("failed")
        finally:
            st.seconds += time.perf_counter() - t0

    def _answer_round(self, st: "_Open", it: int) -> None:
        p, q = st.parts, st.q
        st.rt = {"round": it, "nodes": p.kg.num_nodes, "edges": p.kg.num_edges}
        st.context = self._retrieve(p, q.question, st.qvec, st.rt)
        st.trace["issues"].extend(st.rt.pop("issues", []))
        st.raw, st.ans = self._answer(prompts.reasoning_messages(q.question, st.context), self.reason_budget,
                                      st.trace["issues"])
        st.rt.update(answer=st.ans, answer_raw=st.raw, context=st.context)
        st.trace["rounds"].append(st.rt)

    def _feedback_round(self, st: "_Open", it: int) -> None:
        st.found = self._feedback_calls(st.parts, st.q, st.raw, st.ans, st.context, it, st.rt)

    def _close(self, st: "_Open") -> Prediction:
        st.trace["kg_size"] = {"nodes": st.parts.kg.num_nodes, "edges": st.parts.kg.num_edges}
        if st.error:
            pred = Prediction(st.q.qid, st.q.question, "", list(st.q.answers), self.name, trace=st.trace,
                              failed=True, error=st.error)
        else:
            pred = self._prediction(st.q, st.ans, st.trace)
        pred.cost = {"seconds": round(st.seconds, 3)}
        return pred

    def _prediction(self, q: Question, ans: str, trace: dict[str, Any]) -> Prediction:
        return Prediction(q.qid, q.question, ans, list(q.answers), self.name, trace=trace, failed=not ans,
                          error="" if ans else "empty answer from the model")


def make_method(name: str, ctx: RunContext, cfg: TcrQFConfig | dict[str, Any] | None = None, seed: int = 0,
                **kw: Any) -> TcrQF:
    """Build a variant by name from its typed config, or a settings dict (unknown keys are a ConfigError)."""
    if name not in VARIANTS:
        raise ConfigError(f"unknown TCR-QF variant {name!r}; expected one of {', '.join(VARIANTS)}")
    typed = cfg if isinstance(cfg, TcrQFConfig) else make_config(TcrQFConfig, cfg, where=f"method {name}")
    return TcrQF(name, typed, ctx, seed=seed, **kw)


# every variant answers through TCR-QF's prompt and parser, so each shows whether its answer line parsed
METHODS = method_specs(make_method, {v.name: v.summary for v in VARIANTS.values()}, TcrQFConfig, DATASETS, FAMILY,
                       mechanism="final-answer", needs=("question", "answers", "corpus"))   # the text KG's source
