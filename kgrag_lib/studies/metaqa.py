"""Settings of the KG-RAG-on-MetaQA notebooks (00 quickstart, 10-13)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import opt
from ..errors import ConfigError
from .base import Sample, WithModel

METAQA = ["metaqa-1hop", "metaqa-2hop", "metaqa-3hop"]
SYSTEMS = ["llm", "llm-qd", "llm-kg", "kg-rag"]
GRID_KEYS = {"n", "hops_grid", "top_k_grid"}


@dataclass
class Quickstart(Sample, WithModel):
    """00_quickstart: KAPING on a small MetaQA sample."""

    family = "metaqa"
    dataset: str = opt("metaqa-1hop", "metaqa-1hop | metaqa-2hop | metaqa-3hop")
    method: str = opt("llm-kg", "the method to run (`kgrag run --list`)")
    hops: int = opt(1, "candidate triples up to N hops from the question entity")
    top_k: int = opt(10, "K triples shown to the LLM")


@dataclass
class KBProfile(Sample):
    """10_metaqa_kb: the MetaQA KG (no LLM)."""

    reads = ("metaqa",)   # the KB and the questions of every hop count

    hops: list[int] = opt([1, 2, 3], "N values for the candidate-set counts")
    cutoff: int = opt(30, "last degree drawn in the histogram (the paper cuts at 30)")


@dataclass
class ParameterGrid(WithModel):
    """11_metaqa_parameter_grid: Experiment 1, N x K."""

    family = "metaqa"
    datasets: list[str] = opt(METAQA, "MetaQA datasets")
    hops_grid: list[int] = opt([1, 2, 3], "N values")
    top_k_grid: list[int] = opt([10, 20, 30], "K values")
    n: int | None = opt(None, "questions per sample (paper: 100; None: the profile's run.n)")
    seeds: list[int] | None = opt(None, "one sample per seed, which also seeds the LLM calls (paper: 0-9; None: [run.seed])")
    method: str = opt("kg-rag", "the system whose N and K are swept")
    per_dataset: dict[str, dict] = opt({}, "per-dataset overrides of n, hops_grid and top_k_grid, e.g. "
                                           "{metaqa-1hop: {n: 30, hops_grid: [1, 3]}}: a column cut to the settings "
                                           "its claims compare when the whole grid does not fit")

    def __post_init__(self) -> None:
        where = "parameter 'per_dataset'"
        if not isinstance(self.per_dataset, dict):
            raise ConfigError(f"{where}: expected a mapping of dataset -> {{n, hops_grid, top_k_grid}}, "
                              f"got {self.per_dataset!r}")
        for dataset, over in self.per_dataset.items():
            if dataset not in self.datasets:
                raise ConfigError(f"{where}: {dataset!r} is not one of this notebook's datasets {self.datasets}")
            if not isinstance(over, dict) or not over or set(over) - GRID_KEYS:
                raise ConfigError(f"{where}.{dataset}: expected a non-empty mapping with keys among "
                                  f"{', '.join(sorted(GRID_KEYS))}, got {over!r}")
            n = over.get("n")
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise ConfigError(f"{where}.{dataset}.n: expected a positive integer, got {n!r}")
            for key in ("hops_grid", "top_k_grid"):
                grid = over.get(key)
                if grid is not None and (not isinstance(grid, list) or not grid or not all(
                        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in grid)):
                    raise ConfigError(f"{where}.{dataset}.{key}: expected a non-empty list of positive integers, "
                                      f"got {grid!r}")

    def column(self, dataset: str) -> tuple[int | None, list[int], list[int]]:
        """(n, N values, K values) of one dataset's column: its `per_dataset` entry over the shared grid."""
        over = self.per_dataset.get(dataset, {})
        return over.get("n", self.n), over.get("hops_grid", self.hops_grid), over.get("top_k_grid", self.top_k_grid)


@dataclass
class Baselines(WithModel):
    """12_metaqa_baselines: Experiment 2, four systems."""

    family = "metaqa"
    from_methods = {"hops": ("kg-rag", "hops"), "top_k": ("kg-rag", "top_k")}
    datasets: list[str] = opt(METAQA, "MetaQA datasets")
    methods: list[str] = opt(SYSTEMS, "the systems compared")
    n: int | None = opt(None, "questions per sample (paper: 500; None: the profile's run.n)")
    seeds: list[int] | None = opt(None, "one sample per seed, which also seeds the LLM calls (paper: 0-7; None: [run.seed])")
    hops: int | None = opt(None, "N for the KG systems (paper: 3; None: methods.kg-rag.hops)")
    top_k: int | None = opt(None, "K for the KG systems (paper: 30; None: methods.kg-rag.top_k)")


@dataclass
class Qualitative(Sample, WithModel):
    """13_metaqa_qualitative: reading KG-RAG's traces."""

    family = "metaqa"
    from_methods = {"hops": ("kg-rag", "hops"), "top_k": ("kg-rag", "top_k")}
    datasets: list[str] = opt(METAQA, "MetaQA datasets")
    hops: int | None = opt(None, "N (paper: 3; None: methods.kg-rag.hops)")
    top_k: int | None = opt(None, "K (paper: 30; None: methods.kg-rag.top_k)")
    method: str = opt("kg-rag", "the system read")
    baseline: str = opt("llm", "compared with it as in Table 5 (an empty string skips it)")
    example_dataset: str = opt("metaqa-2hop", "where the Fig. 6 example comes from")


NOTEBOOKS = {
    "00_quickstart": Quickstart,
    "10_metaqa_kb": KBProfile,
    "11_metaqa_parameter_grid": ParameterGrid,
    "12_metaqa_baselines": Baselines,
    "13_metaqa_qualitative": Qualitative,
}
