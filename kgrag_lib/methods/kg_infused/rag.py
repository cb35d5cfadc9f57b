"""The KG-Infused RAG method (`KGInfusedRAG`), its settings and variants, composed from `stages`
(§3.4-3.6, §4.2, Table 3); `pipeline.py` puts them in the paper's method table with the Self-RAG and
Self-Ask plug-ins, which build on this class.

| name         | retrieval                         | KG summary | note | KG-guided augmentation |
|--------------|-----------------------------------|------------|------|------------------------|
| nor          | none                              | -          | -    | -                      |
| vanilla-rag  | top k_p by q                      | -          | yes  | -                      |
| vanilla-qe   | q + q' (LLM-only expansion)       | -          | yes  | -                      |
| kg-qe-only   | q + q' (KG-based expansion)       | yes        | yes  | -                      |
| kg-aug-only  | top k_p by q                      | yes        | yes  | yes                    |
| kg-infused   | q + q' (KG-based expansion)       | yes        | yes  | yes                    |

Shared stages render identical requests, so through the LLM cache the variants reuse each
other's work: kg-aug-only's note is vanilla-rag's, kg-qe-only's note is kg-infused's, and all
KG variants with the same rounds share the activation, summary and expanded query.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from ...concurrency import fan_out, parallel_map
from ...config import MAX_SEED, check_values, make_config, opt
from ...errors import ConfigError
from ...llm.base import SamplingParams
from ...records import Prediction, Question
from ..base import Method, RunContext
from . import stages
from .activation import ActivationResult, ActivationSettings, spread_activation
from .corpus import CorpusIndex, check_corpus_setting, load_corpus_index, resolve_corpus_name
from .kg_sources import KGSource, load_kg_source


@dataclass
class KGInfusedConfig:
    """Settings of every KG-Infused RAG variant (defaults: the paper and its public code)."""

    kg: str = opt("2wiki-evidence-heldout", "KG to activate over: 2wiki-evidence-heldout, 2wiki-evidence-full, "
                                            "2wiki-evidence-oracle (upper bound), wikidata5m, wikidata5m:<folder> "
                                    "or the folder of a saved KGStore")
    corpus: str = opt("auto", "text corpus: auto (the question's dataset; pooled if it has none), pooled, "
                              "a dataset name, wikipedia, wikipedia:<psgs_w100.tsv>, or "
                              "sample:<dataset>[:<split>]:n=<N>[:seed=<S>] (the pooled paragraphs of that "
                              "question sample, as SA-RAG's and TCR-QF's KGs; {dataset}, {seed} filled per run)")
    rounds: int = opt(2, "max spreading-activation rounds k (stops earlier when no new entity remains)", min=1)
    max_entities_per_round: int = opt(10, "MAX_ENTITIES_PER_ROUND: cap on newly activated entities per round", min=1)
    max_triples_per_entity: int = opt(50, "MAX_TRIPLES_PER_ENTITY: 1-hop triples shown per entity (seeded sample)",
                                      min=1)
    k_p: int = opt(6, "passages per question (q and q' take k_p/2 each in the QE variants)", min=1)
    k_e: int = opt(3, "seed entities retrieved by description similarity", min=1)
    max_tokens: int = opt(1000, "max new tokens of the selection, summary, note and augmentation stages", min=1)
    answer_max_tokens: int | None = opt(None, "max new tokens of the final answer (default: max_tokens)", min=1)
    query_max_tokens: int | None = opt(None, "max new tokens of a query expansion (default: max_tokens)", min=1)
    temperature: float = opt(0.0, "sampling temperature of every stage (0 = greedy, as in the paper)", min=0)
    seed: int | None = opt(None, "seed of the LLM sampling and of the per-entity triple sample (default: the run seed)", min=0, max=MAX_SEED)
    index: str = opt("auto", "faiss index of the corpus and of the KG's seed descriptions: auto (exact flat up to 2M "
                             "vectors, IVF{nlist},SQ8 above), flat, hnsw or an index_factory string such as "
                             "IVF65536,SQ8 ({nlist}: about 4 sqrt(n)); +rescore<N> re-ranks its top k x N exactly "
                             "(IVF{nlist},PQ64+rescore10: PQ's 1.6 GB at 21M with near-exact recall); for a saved "
                             "passage or KG store (wikipedia, wikidata5m) built once and memory-mapped by later runs",
                 absent="auto")
    index_placement: str = opt("auto", "where the faiss indexes live: auto (the GPU when faiss sees one and the index "
                                       "fits 1 GiB beside the LLM, else CPU memory), cpu or gpu",
                               choices=("auto", "cpu", "gpu"), absent="auto")


@dataclass(frozen=True)
class Variant:
    name: str
    retrieval: str  # "none" | "q" | "vanilla-qe" | "kg-qe"
    kg_aug: bool
    summary: str

    @property
    def uses_kg(self) -> bool:
        return self.retrieval == "kg-qe" or self.kg_aug


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("nor", "none", False, "No retrieval: the LLM answers from its parameters (KG-Infused RAG baseline)"),
    Variant("vanilla-rag", "q", False, "Vanilla RAG: top-k_p passages by q, passage note, answer"),
    Variant("vanilla-qe", "vanilla-qe", False, "Vanilla QE: LLM query expansion, k_p/2 passages by q and by q', note, answer"),
    Variant("kg-infused", "kg-qe", True, "KG-Infused RAG: spreading activation, KG-based QE, note, KG-guided augmentation"),
    Variant("kg-qe-only", "kg-qe", False, "Ablation: Vanilla RAG + KG-based query expansion only"),
    Variant("kg-aug-only", "q", True, "Ablation: Vanilla RAG + KG-augmented generation only"),
)}


class KGInfusedRAG(Method):
    """One variant; `answer(question)` runs its stages and returns the answer with a full trace.

    The stages are also methods (`seed_entities`, `activate`, `summarize`, `retrieve`, ...) so a
    notebook can run and inspect one at a time. Parts are resolved lazily from the context: a
    variant only loads the KG, the corpus or the embedder it needs.
    """

    def __init__(self, variant: Variant | str, cfg: KGInfusedConfig, ctx: RunContext, *, seed: int = 0,
                 kg_source: KGSource | None = None,
                 corpus_loader: Callable[[str], CorpusIndex] | None = None) -> None:
        self.variant = VARIANTS[variant] if isinstance(variant, str) else variant
        self.name = self.variant.name
        check_values(cfg)
        check_corpus_setting(cfg.corpus)
        self.cfg = self.config = cfg
        self.ctx = ctx
        self._kg = kg_source
        self._corpus_loader = corpus_loader or (lambda name: load_corpus_index(ctx, name, cfg.index,
                                                                               cfg.index_placement))
        self.seed = int(seed) if cfg.seed is None else int(cfg.seed)
        self.run_seed = int(seed)   # fills {seed} of a sample corpus: the seed that drew the run's questions

    # ---- parts ----------------------------------------------------------------------
    @property
    def llm(self) -> Any:
        return self.ctx.llm

    @property
    def kg(self) -> KGSource:
        if self._kg is None:
            self._kg = load_kg_source(self.ctx, self.cfg.kg, self.cfg.index, self.cfg.index_placement)
        return self._kg

    def corpus_for(self, question: Question) -> CorpusIndex:
        return self._corpus_loader(resolve_corpus_name(self.cfg.corpus, question.dataset, self.run_seed))

    def params(self, stage: str = "long") -> Any:
        limit = {"answer": self.cfg.answer_max_tokens, "query": self.cfg.query_max_tokens}.get(stage)
        return SamplingParams(max_tokens=limit or self.cfg.max_tokens,
                              temperature=float(self.cfg.temperature), seed=self.seed)

    def settings(self) -> ActivationSettings:
        return ActivationSettings(rounds=self.cfg.rounds, max_entities_per_round=self.cfg.max_entities_per_round,
                                  max_triples_per_entity=self.cfg.max_triples_per_entity, seed=self.seed)

    # ---- stages ---------------------------------------------------------------------
    def embed(self, text: str):
        return stages.embed_query(self.ctx.embedder, text)

    def seed_entities(self, question: str, qvec=None) -> list[tuple[int, float]]:
        """E^0: the top-k_e entities by description similarity (eqs. 3-4)."""
        return self.kg.seed_entities(self.embed(question) if qvec is None else qvec, self.cfg.k_e)

    def activate(self, question: str, seeds: list[int]) -> ActivationResult:
        """§3.4: LLM-guided spreading activation from the seeds, up to `rounds` rounds."""
        return spread_activation(self.kg.store, self.llm, question, seeds, self.settings(), self.params())

    def summarize(self, question: str, activation: ActivationResult) -> str:
        """§3.4: the accumulated subgraph G_act as a paragraph."""
        lines = [self.kg.store.triple(t).verbalize() for t in activation.triple_ids]
        return stages.summarize_subgraph(self.llm, self.params(), question, lines)

    def expand_query(self, question: str, summary: str | None) -> str:
        """q': KG-based (with a summary) or vanilla (without); "" when the model wrote none."""
        if summary is None:
            return stages.expand_query_vanilla(self.llm, self.params("query"), question)
        return stages.expand_query_kg(self.llm, self.params("query"), question, summary)

    def retrieve(self, corpus: CorpusIndex, question: str, expanded: str | None = None, qvec=None) -> stages.Retrieved:
        """Top k_p passages by q, or k_p/2 by q plus k_p/2 new ones by q' (Appendix C.2)."""
        qvec = self.embed(question) if qvec is None else qvec
        if expanded is None:
            return stages.retrieve_single(corpus.passages, corpus.index, qvec, self.cfg.k_p)
        return stages.retrieve_dual(corpus.passages, corpus.index, qvec, self.embed(expanded), self.cfg.k_p)

    def write_note(self, question: str, passages) -> str:
        """§3.6 eq. 9: the query-focused passage note."""
        return stages.write_note(self.llm, self.params(), question, passages)

    def augment(self, question: str, note: str, summary: str) -> str:
        """§3.6 eq. 10: the note enhanced with the subgraph summary."""
        return stages.augment_note(self.llm, self.params(), question, note, summary)

    def generate_answer(self, question: str, context: str | None, yes_no: bool = False) -> tuple[str, str]:
        """§3.6 eq. 11 (or NoR without context): (raw output, cleaned answer)."""
        return stages.answer_question(self.llm, self.params("answer"), question, context, yes_no)

    # ---- stage groups every KG variant and plug-in shares ------------------------------
    def kg_facts(self, question: str, trace: dict[str, Any], qvec=None) -> tuple[str, ActivationResult]:
        """§3.4 for one query: seed entities, spreading activation and the subgraph summary S_G,
        each recorded in `trace`. Returns (S_G, the activation)."""
        kg = self.kg
        trace["kg"] = kg.name
        seeds = self.seed_entities(question, qvec)
        trace["seed_entity_scores"] = [{"entity": kg.store.entity_name(e), "score": round(s, 4)} for e, s in seeds]
        act = self.activate(question, [e for e, _ in seeds])
        trace["activation"] = act.to_trace(kg.store)
        summary = self.summarize(question, act)
        trace["summary"] = summary
        return summary, act

    def retrieve_expanded(self, corpus: CorpusIndex, question: str, summary: str | None, trace: dict[str, Any],
                          qvec=None) -> stages.Retrieved:
        """q' (KG-based with a summary, vanilla without) and the dual retrieval of Appendix C.2,
        recorded in `trace`. Without a q' the paper's code retrieves by the query for both halves;
        we do too, and say so."""
        q2 = self.expand_query(question, summary)
        if not q2:
            trace.setdefault("issues", []).append(
                "query expansion: the model wrote no q', retrieved by the query itself for both halves")
            q2 = question
        trace["expanded_query"] = q2
        got = self.retrieve(corpus, question, q2, qvec)
        trace["skipped_duplicates"] = [corpus.passages[i].pid for i in got.skipped_duplicates]
        return got

    # ---- the whole pipeline -----------------------------------------------------------
    def answer(self, question: Question) -> Prediction:
        v, cfg, q = self.variant, self.cfg, question.question
        yes_no = question.dataset == "strategyqa"
        trace: dict[str, Any] = {"variant": v.name, "kg": None, "corpus": None,
                                 "config": dataclasses.asdict(cfg), "seed": self.seed, "issues": []}
        if v.retrieval == "none":
            raw, ans = self.generate_answer(q, None, yes_no)
            return self._prediction(question, raw, ans, trace)

        corpus = self.corpus_for(question)
        trace["corpus"] = corpus.name
        qvec = self.embed(q)
        if v.retrieval == "q" and v.uses_kg:
            # the note over q's passages does not read the KG branch (activation rounds, summary): on a
            # batching backend both go out together; inline (fan_out 1) in the sequential order
            def note_by_q() -> tuple[stages.Retrieved, str]:
                hits = self.retrieve(corpus, q, None, qvec)
                return hits, self.write_note(q, hits.passages)

            summary, (got, note) = parallel_map(lambda f: f(), [lambda: self.kg_facts(q, trace, qvec)[0], note_by_q],
                                                min(2, fan_out(self.llm)))
            trace["passages"] = got.to_trace()
        else:
            summary = self.kg_facts(q, trace, qvec)[0] if v.uses_kg else None
            if v.retrieval == "q":
                got = self.retrieve(corpus, q, None, qvec)
            else:
                got = self.retrieve_expanded(corpus, q, summary if v.retrieval == "kg-qe" else None, trace, qvec)
            trace["passages"] = got.to_trace()
            note = self.write_note(q, got.passages)
        trace["note"] = note
        context = note
        if v.kg_aug:
            context = self.augment(q, note, summary or "")
            trace["augmented_note"] = context
        raw, ans = self.generate_answer(q, context, yes_no)
        return self._prediction(question, raw, ans, trace)

    def _prediction(self, question: Question, raw: str, ans: str, trace: dict[str, Any]) -> Prediction:
        trace["answer_raw"] = raw
        return Prediction(question.qid, question.question, ans, list(question.answers), self.name,
                          trace=trace, failed=not ans, error="" if ans else "empty answer from the model")


def make_method(name: str, ctx: RunContext, cfg: KGInfusedConfig | dict[str, Any] | None = None, seed: int = 0,
                **kw: Any) -> KGInfusedRAG:
    """Build a variant by name from its typed config, or a settings dict (unknown keys are a ConfigError)."""
    if name not in VARIANTS:
        raise ConfigError(f"unknown KG-Infused RAG variant {name!r}; expected one of {', '.join(VARIANTS)}")
    cfg_obj = cfg if isinstance(cfg, KGInfusedConfig) else make_config(KGInfusedConfig, cfg, where=f"method {name}")
    return KGInfusedRAG(name, cfg_obj, ctx, seed=seed, **kw)
