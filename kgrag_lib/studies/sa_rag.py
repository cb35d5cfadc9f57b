"""Settings of the SA-RAG notebooks (30-33), the paper's Table 1 grid, and what those notebooks
need of a run besides `nb.run` / `nb.grid`: the question sample, the KG and the SA-RAG retriever
a run with the same settings uses, and the judge.

SA-RAG indexes the pooled paragraphs of the sampled questions (§3.1), so a notebook's KG is a
function of its own sample: `text:<dataset>[:<split>]:n=<n>:seed={seed}` (`SARAGRuns.kg_template`),
read from the question files that ship paragraphs (`PARAGRAPH_SPLITS`: 2Wiki's default split has
none). Every run, KG and retriever of a notebook is built from `SARAGRuns.overrides(dataset)`, so
notebook 30's KG is the one notebooks 31-33 retrieve from (built once, then read from the KG cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import opt
from ..data.registry import load_questions
from ..errors import ConfigError
from ..experiment import resolve_run
from ..grid import GridRun
from ..kg.sources import shared_kg
from ..methods.common import resolve_spec
from .base import Sample, WithModel

if TYPE_CHECKING:  # pragma: no cover
    from ..kg.sources import BuiltKG
    from ..llm.base import LLM
    from ..methods.sa_rag import SARAG
    from ..records import Question
    from .base import Setup

SA = "sa-rag"
DATASETS = ["musique", "2wiki"]
# The question file of each dataset whose questions carry their paragraphs (None: the default split).
PARAGRAPH_SPLITS: dict[str, str | None] = {"musique": None, "2wiki": "dev200"}
SYSTEMS = ["naive-rag", "cot-rag", "qd-rag", "ppr-rag", "sa-rag", "sa-rag-cot", "sa-rag-qd"]
DENSE_K = ("naive-rag", "cot-rag")  # the systems the paper runs at two k (§3.2: 5 and 10)


@dataclass
class SARAGRuns(Sample, WithModel):
    """What every SA-RAG notebook shares: datasets, sample, model and the KG of that sample."""

    family = SA
    datasets: list[str] = opt(DATASETS, "datasets (the paper: musique, 2wiki, 100 questions each)")
    kg: str | None = opt(None, "KG spec template ({dataset}, {seed} filled per run) (None: the pooled paragraphs "
                               "of this notebook's own sample, text:<dataset>[:dev200]:n=<n>:seed={seed})")

    def split(self, dataset: str) -> str | None:
        if dataset not in PARAGRAPH_SPLITS:
            raise ConfigError(f"parameter 'datasets': SA-RAG runs on {', '.join(PARAGRAPH_SPLITS)}, got {dataset!r}")
        return PARAGRAPH_SPLITS[dataset]

    def kg_template(self, dataset: str) -> str:
        """The `kg` method setting of this notebook's runs on `dataset`."""
        if self.kg is not None:
            return self.kg
        if self.n is None:
            raise ConfigError("parameter 'n': SA-RAG indexes the paragraphs of the sampled questions, so the "
                              "sample needs a size (the paper: 100); or give kg explicitly")
        split = self.split(dataset)
        return f"text:{dataset}{':' + split if split else ''}:n={self.n}:seed={{seed}}"

    def overrides(self, dataset: str) -> dict[str, Any]:
        """Run settings every run, KG and retriever of the notebook on `dataset` shares."""
        return {"split": self.split(dataset), "kg": self.kg_template(dataset)}

    def kg_spec(self, dataset: str) -> str:
        """The KG spec a run on `dataset` resolves (its template with this sample's seed)."""
        return resolve_spec(self.kg_template(dataset), dataset, int(self.seed or 0))


@dataclass
class Indexing(SARAGRuns):
    """30_sa_rag_indexing: the text KG of each corpus and its index statistics (§3.1)."""

    failures_shown: int = opt(5, "unparsable extraction outputs shown per corpus")


@dataclass
class Main(SARAGRuns):
    """31_sa_rag_main: Table 1a/1b (EM, F1, correctness), the paper's claims on paired questions."""

    systems: list[str] = opt(SYSTEMS, "the systems of Table 1 (`kgrag run --list`, family sa-rag)")
    dense_top_k: list[int] = opt([5, 10], "k of the Naive and CoT RAG rows (the paper: 5 and 10)")
    judge_model: str | None = opt(None, "LLM that judges correctness (None: this notebook's model)")
    paper_model: str = opt("phi4", "Table 1 block beside ours: phi4 | gemma3")

    def __post_init__(self) -> None:
        from ..report.sa_rag.paper_numbers import MODELS

        if self.paper_model not in MODELS:
            raise ConfigError(f"parameter 'paper_model': Table 1 has {', '.join(MODELS)}, got {self.paper_model!r}")
        table1_runs(self.systems, self.dense_top_k)


@dataclass
class Activation(SARAGRuns):
    """32_sa_rag_activation: Fig. 4, one question's subgraph with golden / activated entities."""

    datasets: list[str] = opt(["musique"], "datasets the question is drawn from (the paper: a MuSiQue question)")
    qid: str | None = opt(None, "the question drawn (None: the sampled question with the most golden entities "
                                "in its subgraph)")
    max_nodes: int = opt(40, "entities drawn at most: seeds, golden, activated, then the most activated others")


@dataclass
class CSweep(SARAGRuns):
    """33_sa_rag_c_sweep: Fig. 5 (activation for c in {0.5, 0.4, 0.3}) and recall of gold
    paragraphs against context size over c x tau_a."""

    figure_c: list[float] = opt([0.5, 0.4, 0.3], "c of Fig. 5's columns (the paper: 0.5, 0.4, 0.3)")
    qid: str | None = opt(None, "Fig. 5's question (None: the sampled question with the largest subgraph)")
    c_grid: list[float] = opt([0.2, 0.3, 0.4, 0.5, 0.6], "c values of the recall sweep (the paper: 0.4)")
    tau_a_grid: list[float] = opt([0.3, 0.4, 0.5, 0.6, 0.7], "tau_a values of the recall sweep (the paper: 0.5)")
    capped: bool = opt(False, "apply the profile's max_documents / max_relations (False: the uncapped context, "
                              "as the paper)")

    def __post_init__(self) -> None:
        for name, span in (("figure_c", "[0, 1)"), ("c_grid", "[0, 1)"), ("tau_a_grid", "[0, 1]")):
            bad = [v for v in getattr(self, name) if isinstance(v, bool) or not isinstance(v, (int, float))
                   or not (0 <= v < 1 or (v == 1 and span.endswith("]")))]
            if bad:
                raise ConfigError(f"parameter {name!r}: values must lie in {span}, got {bad}")


NOTEBOOKS = {
    "30_sa_rag_indexing": Indexing,
    "31_sa_rag_main": Main,
    "32_sa_rag_activation": Activation,
    "33_sa_rag_c_sweep": CSweep,
}


def table1_runs(systems: list[str], dense_top_k: list[int]) -> list[GridRun]:
    """Table 1's rows: Naive and CoT RAG once per k, every other system once (profile settings)."""
    from ..methods.sa_rag import VARIANTS

    unknown = [s for s in systems if s not in VARIANTS]
    if unknown:
        raise ConfigError(f"parameter 'systems': unknown {unknown}; expected some of {', '.join(VARIANTS)}")
    if not dense_top_k or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in dense_top_k):
        raise ConfigError(f"parameter 'dense_top_k': expected integers >= 1, got {dense_top_k!r}")
    return [run for s in systems
            for run in ([GridRun.of(s, top_k=k) for k in dense_top_k] if s in DENSE_K else [GridRun.of(s)])]


def questions(nb: "Setup", dataset: str) -> list["Question"]:
    """The seeded sample a run of this notebook on `dataset` answers (the runner's own draw)."""
    s = nb.settings
    return load_questions(dataset, s.split(dataset), root=nb.ctx.data_root, n=s.n, seed=s.seed)


def text_kg(nb: "Setup", dataset: str) -> "BuiltKG":
    """The text KG of the notebook's sample on `dataset`, extracted by its model on first use."""
    return shared_kg(nb.ctx, nb.settings.kg_spec(dataset))


def method(nb: "Setup", name: str, dataset: str, **overrides: Any) -> "SARAG":
    """The method object a run of `name` on `dataset` with this notebook's settings builds
    (for its retriever: `method(...).retriever(spec, dataset)`)."""
    s = nb.settings
    r = resolve_run(name, dataset, nb.out_dir, nb.profile, model=nb.model, n=s.n, seed=s.seed,
                    **{**s.overrides(dataset), **overrides})
    return r.spec.factory(nb.ctx, r.method_config, r.run.seed)


def judge(nb: "Setup") -> "LLM":
    """The correctness judge: `judge_model`, or the notebook's own model (then loaded once)."""
    from ..llm import load_llm

    wanted = nb.settings.judge_model
    if wanted is None or wanted == nb.model:
        return nb.ctx.llm
    return nb.ctx.memo(f"judge:{wanted}", lambda: load_llm(wanted, cache_path=nb.ctx.llm_cache_path))
