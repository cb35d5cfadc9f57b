"""Settings of the KG-RAG-on-MetaQA notebooks (00 quickstart, 10-13)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import opt
from ..errors import ConfigError
from .base import Sample, WithModel

METAQA = ["metaqa-1hop", "metaqa-2hop", "metaqa-3hop"]
SYSTEMS = ["llm", "llm-qd", "llm-kg", "kg-rag"]
GRID_KEYS = {"n", "hops_grid", "top_k_grid"}


def check_per_dataset(per_dataset: Any, datasets: list[str], keys: set[str]) -> dict[str, dict]:
    """A notebook's `per_dataset` overrides, checked: each names one of its `datasets` and maps some of
    `keys` to a positive integer (`n`) or a non-empty list of them (a grid). An entry set to None is
    dropped, so a profile that `extends:` another can remove an override it inherits (mappings merge
    key by key) while keeping the others."""
    where = "parameter 'per_dataset'"
    if not isinstance(per_dataset, dict):
        raise ConfigError(f"{where}: expected a mapping of dataset -> {{{', '.join(sorted(keys))}}}, "
                          f"got {per_dataset!r}")
    kept = {d: over for d, over in per_dataset.items() if over is not None}
    for dataset, over in kept.items():
        if dataset not in datasets:
            raise ConfigError(f"{where}: {dataset!r} is not one of this notebook's datasets {datasets}")
        if not isinstance(over, dict) or not over or set(over) - keys:
            raise ConfigError(f"{where}.{dataset}: expected a non-empty mapping with keys among "
                              f"{', '.join(sorted(keys))}, got {over!r}")
        n = over.get("n")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigError(f"{where}.{dataset}.n: expected a positive integer, got {n!r}")
        for key in sorted(set(over) - {"n"}):
            grid = over[key]
            if not isinstance(grid, list) or not grid or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in grid):
                raise ConfigError(f"{where}.{dataset}.{key}: expected a non-empty list of positive integers, "
                                  f"got {grid!r}")
    return kept


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
                                           "its claims compare when the whole grid does not fit (a dataset set to "
                                           "null drops what a parent profile set for it)")

    def __post_init__(self) -> None:
        self.per_dataset = check_per_dataset(self.per_dataset, self.datasets, GRID_KEYS)

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
    per_dataset: dict[str, dict] = opt({}, "per-dataset n, e.g. {metaqa-1hop: {n: 269}}: one dataset at the n a "
                                           "claims plan gives it while the others keep `n` (a dataset set to null "
                                           "drops what a parent profile set for it)")

    def __post_init__(self) -> None:
        self.per_dataset = check_per_dataset(self.per_dataset, self.datasets, {"n"})

    def n_of(self, dataset: str) -> int | None:
        """Questions per sample on `dataset`: its `per_dataset` n, else `n`."""
        return self.per_dataset.get(dataset, {}).get("n", self.n)


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
