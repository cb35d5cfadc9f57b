"""Settings of the cross-method notebook (50) and its one core function, `run_cross_method`.

Every method that answers open-domain multi-hop questions, from every paper, on the same
questions: one seeded 2Wiki dev200 sample (its questions ship their context paragraphs), one
LLM, one embedder, and one corpus, the pooled paragraphs of that sample. Each method keeps the
profile's `methods.<name>` block; only what it reads is pointed at the sample:

- SA-RAG and its baselines (family sa-rag): `kg = text:<dataset>:<split>:n=<n>:seed={seed}`, the
  KG the model extracts from those paragraphs (the dense baselines chunk the same passages);
- TCR-QF, its ablations and baselines (family tcr-qf): `kg = tcr:<dataset>:<split>:n=<n>:seed={seed}`;
- KG-Infused RAG, its baselines, ablations and Self-Ask (family kg-infused): the profile's KG
  (`kg`, default `methods.kg-infused.kg`: Wikidata facts, not an LLM-built KG) and
  `corpus = sample:<dataset>:<split>:n=<n>:seed={seed}`, the same paragraphs as a dense corpus.

So the only thing that differs between two rows is the method. The two LLM-built KGs are
built (or read from the KG cache) before any question is answered, so their cost is reported
once, apart from the answering cost (`CrossMethodResult.kg_rows`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import opt
from ..data.registry import load_questions
from ..errors import ConfigError
from ..grid import GridReport, GridRun
from ..kg.sources import shared_kg
from ..methods.common import resolve_spec
from ..methods.registry import available_methods, check_dataset, get_method, methods_by_paper
from ..methods.tcr_qf import VARIANTS as TCR_VARIANTS
from .base import Sample, WithModel

if TYPE_CHECKING:  # pragma: no cover
    from ..records import Question
    from .base import Setup

NAME = "50_cross_method"
KGI = "kg-infused"
# Every registered method that answers open-domain multi-hop questions (it runs on 2Wiki) on a CPU, paper by
# paper, read from the registry (`MethodSpec.needs_gpu` leaves out Self-RAG and Self-RAG + KG-Infused RAG, whose
# reflection-token model needs a GPU)
METHODS = [s.name for s in methods_by_paper() if "2wiki" in s.datasets and not s.needs_gpu]
# The KG spec prefix of each family whose KG is extracted from the sample's paragraphs.
SAMPLE_KG = {"sa-rag": "text", "tcr-qf": "tcr"}
SAMPLE_CORPUS = "sample"   # KG-Infused RAG's corpus=sample:... (methods.kg_infused.corpus)


@dataclass
class CrossMethod(Sample, WithModel):
    """50_cross_method: every method on the same questions, model, embedder and corpus."""

    family = KGI
    from_methods = {"kg": (KGI, "kg")}
    dataset: str = opt("2wiki", "dataset whose sample every method answers (its questions must ship paragraphs)")
    split: str | None = opt("dev200", "question file of the sample (2wiki: dev200, the split that ships paragraphs; "
                                      "None: the dataset's default)")
    methods: list[str] = opt(METHODS, "methods, one row each (`kgrag run --list`; default: every CPU method of "
                                      "the three open-domain papers)")
    kg: str | None = opt(None, "the KG of the KG-Infused RAG family and Self-Ask + KG-Infused "
                               "(None: methods.kg-infused.kg, e.g. 2wiki-evidence-heldout)")

    def __post_init__(self) -> None:
        if not isinstance(self.methods, list) or not self.methods:
            raise ConfigError(f"parameter 'methods': expected a non-empty list of method names, got {self.methods!r}")
        known = available_methods()
        unknown = [m for m in self.methods if m not in known]
        if unknown:
            raise ConfigError(f"parameter 'methods': unknown {unknown}; expected some of {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError(f"parameter 'methods': {self.methods} names a method twice")
        for m in self.methods:
            try:
                check_dataset(known[m], self.dataset)
            except ConfigError as exc:
                raise ConfigError(f"parameter 'methods': {exc}") from None

    def selection(self) -> str:
        """`<dataset>[:<split>]:n=<n>:seed={seed}`: the sample whose paragraphs every method reads."""
        if self.n is None:
            raise ConfigError("parameter 'n': every method reads the pooled paragraphs of the sampled questions, "
                              "so the sample needs a size (notebooks.50_cross_method.n or run.n)")
        return f"{self.dataset}{':' + self.split if self.split else ''}:n={self.n}:seed={{seed}}"

    def method_overrides(self, method: str) -> dict[str, Any]:
        """The settings of `method` that point it at the sample (see the module docstring); the
        rest of its settings are the profile's `methods.<method>`."""
        spec = get_method(method)
        names = {f.name for f in dataclasses.fields(spec.config)}
        out: dict[str, Any] = {}
        if spec.family in SAMPLE_KG and "kg" in names:
            out["kg"] = f"{SAMPLE_KG[spec.family]}:{self.selection()}"
        if "corpus" in names:
            out["corpus"] = f"{SAMPLE_CORPUS}:{self.selection()}"
            if "kg" in names and self.kg is not None:
                out["kg"] = self.kg
        return out

    def grids(self) -> list[tuple[dict[str, Any], list[GridRun]]]:
        """The methods grouped by their overrides (one group per family), in `methods` order: one
        grid each, so every run's folder is named by its method alone."""
        groups: dict[tuple, tuple[dict[str, Any], list[GridRun]]] = {}
        for m in self.methods:
            over = self.method_overrides(m)
            groups.setdefault(tuple(sorted(over.items())), (over, []))[1].append(GridRun.of(m))
        return list(groups.values())

    def sample_kgs(self) -> dict[str, str]:
        """The LLM-built KGs the selected methods read, by family: spec resolved with this seed."""
        families = {family_of(m) for m in self.methods if reads_sample_kg(m)}
        return {fam: resolve_spec(f"{prefix}:{self.selection()}", self.dataset, int(self.seed or 0))
                for fam, prefix in SAMPLE_KG.items() if fam in families}


NOTEBOOKS = {NAME: CrossMethod}


def family_of(method: str) -> str:
    """The study family (and so the paper) of a registered method."""
    return get_method(method).family


def reads_sample_kg(method: str) -> bool:
    """Whether `method` reads the KG its family's LLM extracts from the sample (so the notebook
    builds it first): SA-RAG's PPR and spreading-activation retrievers do, its dense baselines
    only chunk the passages; every TCR-QF variant with retrieval reads the KG's chunks, LLM only
    and CoT read nothing."""
    family = family_of(method)
    if family == "sa-rag":
        from ..methods.sa_rag import VARIANTS as SA_VARIANTS

        return SA_VARIANTS[method].retriever != "dense"
    if family == "tcr-qf":
        return TCR_VARIANTS[method].retrieval not in ("none", "cot")
    return False


@dataclass
class CrossMethodResult:
    """What `run_cross_method` returns: the grid, one summary row per method, one per KG built."""

    report: "GridReport"
    rows: list[dict[str, Any]]
    kg_rows: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


def questions(nb: "Setup") -> list["Question"]:
    """The seeded sample every run of the notebook answers (the runner's own draw)."""
    s = nb.settings
    return load_questions(s.dataset, s.split, root=nb.ctx.data_root, n=s.n, seed=s.seed)


def run_cross_method(nb: "Setup", progress: bool = True) -> CrossMethodResult:
    """The notebook's work without the notebook: build (or load) the sample's KGs, timed, then
    one grid of every method on the sample with one model and embedder, then the rows.

    Every cell is an ordinary run under `out_dir/runs/<dataset>/n<n>_seed<seed>/<method>/`, the
    files `kgrag run --method <m> --split <split> --set kg=... --set corpus=...` writes; a rerun
    resumes and a run with other settings in the same folder is refused (`runner`)."""
    from ..report.cross_method import kg_build_rows, method_rows

    s = nb.settings
    loaded: dict[str, tuple[Any, float]] = {}
    for family, spec in s.sample_kgs().items():
        t0 = time.perf_counter()
        built = shared_kg(nb.ctx, spec)
        loaded[family] = (built, round(time.perf_counter() - t0, 1))
    t0 = time.perf_counter()
    parts = [nb.grid(runs, datasets=[s.dataset], progress=progress, split=s.split, embedder=nb.ctx.embedder_spec,
                     **over) for over, runs in s.grids()]
    wall = time.perf_counter() - t0
    order = {m: i for i, m in enumerate(s.methods)}
    report = GridReport(sorted((c for p in parts for c in p.cells), key=lambda c: order[c.run.method]),
                        sent=sum(p.sent for p in parts),
                        per_config=sorted((r for p in parts for r in p.per_config), key=lambda r: order[r["config"]]))
    labels = {"profile": nb.profile_name, "model": nb.model, "embedder": nb.ctx.embedder_spec,
              "split": s.split, "seed": s.seed}
    rows = method_rows(report, notebook=NAME, **labels)
    kg_rows = kg_build_rows({fam: b for fam, (b, _) in loaded.items()},
                            {fam: sec for fam, (_, sec) in loaded.items()}, **labels)
    return CrossMethodResult(report, rows, kg_rows, wall)
