"""Settings of the TCR-QF notebooks (40-43), the systems of the paper's Tables 1 and 2, and what
those notebooks need of a run besides `nb.run` / `nb.grid`: the question sample, the KG every
run of a notebook starts from, and the entity names of that KG before any feedback.

TCR-QF's KG is extracted from the pooled paragraphs of the sampled questions (§4 follows
HotpotQA's setting: the related contexts of each question are the corpus), so a notebook's KG is
a function of its own sample: `tcr:<dataset>[:<split>]:n=<n>:seed={seed}`
(`TcrQFRuns.kg_template`), read from the question files that ship paragraphs
(`PARAGRAPH_SPLITS`: 2Wiki's default split has none). Every run and KG of a notebook is built
from `TcrQFRuns.overrides(dataset)`, so notebook 40's KG is the one notebooks 41-43 start from
(extracted once, then read from the KG cache), and notebooks 41-43 run each system with the
profile's one `methods` block, so a system shared by two notebooks (ToG, TCR-QF) is answered
from the LLM cache the second time.
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
from ..kg.tcr_kg import TcrKG
from ..methods.common import resolve_spec
from ..methods.tcr_qf import VARIANTS
from .base import Sample, WithModel

if TYPE_CHECKING:  # pragma: no cover
    from ..kg.sources import BuiltKG
    from ..records import Question
    from .base import Setup

TCR = "tcr-qf"
DATASETS = ["2wiki", "hotpotqa", "musique"]
# The question file of each dataset whose questions carry their paragraphs (None: the default
# split): 2Wiki's default (corpus354) ships none, as for SA-RAG (`studies.sa_rag.PARAGRAPH_SPLITS`).
PARAGRAPH_SPLITS: dict[str, str | None] = {"2wiki": "dev200", "hotpotqa": None, "musique": None}
TABLE1_SYSTEMS = ["tcr-llm", "tcr-cot", "tcr-naive-rag", "tog", "graphrag-local", "tcr-qf"]
ABLATION_SYSTEMS = ["tog", "tog-tcr", "tog-qf", "tcr-qf", "tcr-af"]
ABLATION_DATASETS = ["2wiki", "hotpotqa"]   # Table 2's and Fig. 3's datasets
FEEDBACK = ("tog-qf", "tcr-qf", "tcr-af")   # the variants that grow the KG
KG_FREE = ("tcr-llm", "tcr-cot")   # the systems that never read the KG (Naive RAG retrieves its chunks)


def _check_datasets(datasets: Any) -> None:
    if not isinstance(datasets, list) or not datasets:
        raise ConfigError(f"parameter 'datasets': expected a non-empty list of {', '.join(DATASETS)}, got {datasets!r}")
    bad = [d for d in datasets if d not in PARAGRAPH_SPLITS]
    if bad:
        raise ConfigError(f"parameter 'datasets': TCR-QF runs on {', '.join(PARAGRAPH_SPLITS)}, got {bad}")


def _check_systems(systems: Any, allowed: Any = None) -> None:
    allowed = list(allowed or VARIANTS)
    if not isinstance(systems, list) or not systems:
        raise ConfigError(f"parameter 'systems': expected a non-empty list of {', '.join(allowed)}, got {systems!r}")
    unknown = [s for s in systems if s not in allowed]
    if unknown:
        raise ConfigError(f"parameter 'systems': unknown {unknown}; expected some of {', '.join(allowed)}")


@dataclass
class TcrQFRuns(Sample, WithModel):
    """What every TCR-QF notebook shares: datasets, sample, model and the KG of that sample."""

    family = TCR
    datasets: list[str] = opt(DATASETS, "datasets (the paper: 2wiki, hotpotqa, musique and two we lack)")
    kg: str | None = opt(None, "KG spec template ({dataset}, {seed} filled per run) (None: the pooled paragraphs "
                               "of this notebook's own sample, tcr:<dataset>[:dev200]:n=<n>:seed={seed})")

    def __post_init__(self) -> None:
        _check_datasets(self.datasets)

    def split(self, dataset: str) -> str | None:
        if dataset not in PARAGRAPH_SPLITS:
            raise ConfigError(f"parameter 'datasets': TCR-QF runs on {', '.join(PARAGRAPH_SPLITS)}, got {dataset!r}")
        return PARAGRAPH_SPLITS[dataset]

    def kg_template(self, dataset: str) -> str:
        """The `kg` method setting of this notebook's runs on `dataset`."""
        if self.kg is not None:
            return self.kg
        if self.n is None:
            raise ConfigError("parameter 'n': TCR-QF's KG is extracted from the paragraphs of the sampled "
                              "questions, so the sample needs a size (the paper: 1,200); or give kg explicitly")
        split = self.split(dataset)
        return f"tcr:{dataset}{':' + split if split else ''}:n={self.n}:seed={{seed}}"

    def overrides(self, dataset: str) -> dict[str, Any]:
        """Run settings every run and KG of the notebook on `dataset` shares."""
        return {"split": self.split(dataset), "kg": self.kg_template(dataset)}

    def kg_spec(self, dataset: str) -> str:
        """The KG spec a run on `dataset` resolves (its template with this sample's seed)."""
        return resolve_spec(self.kg_template(dataset), dataset, int(self.seed or 0))


@dataclass
class KGConstruction(TcrQFRuns):
    """40_tcr_qf_kg_construction: the KG of each corpus (§3.1), its statistics, the share of
    records the parser rejected, and what extraction cost."""

    from_methods = {"quote_check": (TCR, "quote_check")}
    records_shown: int = opt(8, "rejected records and failed outputs shown per corpus")
    quote_check: str | None = opt(None, "relations whose quote is not in their chunk: flag (kept, marked "
                                        "quote_in_chunk false) or drop (left out of the KG the runs read) (None: the "
                                        "profile's methods.tcr-qf.quote_check)", choices=("flag", "drop"))


@dataclass
class Main(TcrQFRuns):
    """41_tcr_qf_main: Table 1 (EM, F1 of every system), the claim that TCR-QF beats every baseline."""

    systems: list[str] = opt(TABLE1_SYSTEMS, "the systems of Table 1 (`kgrag run --list`, family tcr-qf)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_systems(self.systems)


@dataclass
class Ablation(TcrQFRuns):
    """42_tcr_qf_ablation: Table 2 (ToG, TCR, QF, TCR-QF, TCR-AF) and Fig. 3 (EM by round)."""

    from_methods = {"rounds": (TCR, "max_iterations")}
    datasets: list[str] = opt(ABLATION_DATASETS, "datasets (the paper: 2wiki, hotpotqa)")
    systems: list[str] = opt(ABLATION_SYSTEMS, "the variants of Table 2 (tog, tog-tcr, tog-qf, tcr-qf, tcr-af)")
    rounds: int | None = opt(None, "last round of Fig. 3 (None: the profile's methods.tcr-qf.max_iterations)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_systems(self.systems, ABLATION_SYSTEMS)
        _check_rounds(self.rounds)


@dataclass
class KGGrowth(TcrQFRuns):
    """43_tcr_qf_kg_growth: Table 3 and Fig. 4, the KG's nodes and edges and EM / F1 round by round."""

    from_methods = {"rounds": (TCR, "max_iterations")}
    datasets: list[str] = opt(["2wiki"], "datasets (the paper: 2wiki)")
    variant: str = opt(TCR, "the feedback variant whose KG grows: tcr-qf (the paper), tog-qf or tcr-af")
    rounds: int | None = opt(None, "last round of Table 3 (None: the profile's methods.tcr-qf.max_iterations; "
                                   "the paper shows 10 of its 20)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.variant not in FEEDBACK:
            raise ConfigError(f"parameter 'variant': the KG grows only under {', '.join(FEEDBACK)}, got "
                              f"{self.variant!r}")
        _check_rounds(self.rounds)


def _check_rounds(rounds: Any) -> None:
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0):
        raise ConfigError(f"parameter 'rounds': expected an integer >= 0, got {rounds!r}")


NOTEBOOKS = {
    "40_tcr_qf_kg_construction": KGConstruction,
    "41_tcr_qf_main": Main,
    "42_tcr_qf_ablation": Ablation,
    "43_tcr_qf_kg_growth": KGGrowth,
}


def grid_runs(systems: list[str]) -> list[GridRun]:
    """One run per system with the profile's settings (the runs a notebook's `nb.grid` makes)."""
    _check_systems(systems)
    return [GridRun.of(s) for s in systems]


def questions(nb: "Setup", dataset: str) -> list["Question"]:
    """The seeded sample a run of this notebook on `dataset` answers (the runner's own draw)."""
    s = nb.settings
    return load_questions(dataset, s.split(dataset), root=nb.ctx.data_root, n=s.n, seed=s.seed)


def reads_kg(systems: list[str]) -> bool:
    """Whether any of `systems` reads the sample's KG, so a notebook builds it before its grid (a
    build inside a run would be charged to that run's first question)."""
    return any(s not in KG_FREE for s in systems)


def built_kgs(nb: "Setup", systems: list[str]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Each dataset's KG, built (or read from the KG cache) before a grid whose systems read it, so no
    question is charged its extraction: its statistics (`kg_stats`) and its summary rows
    (`report.tcr_qf.kg_rows`: with the seconds it took here, `load_s`, and its extraction's request
    ids, which REPORT's cost table prices). Nothing is built when no system reads the KG."""
    import time

    from ..report.tcr_qf import kg_rows

    if not reads_kg(systems):
        return {}, []
    stats, load_s = {}, {}
    for d in nb.settings.datasets:
        t0 = time.perf_counter()
        built = tcr_kg(nb, d)
        load_s[d] = round(time.perf_counter() - t0, 1)
        stats[d] = kg_stats(nb, built)
    return stats, [{**r, "load_s": load_s[r["dataset"]]} for r in kg_rows(stats, profile=nb.profile_name)]


def tcr_kg(nb: "Setup", dataset: str) -> "BuiltKG":
    """The KG of the notebook's sample on `dataset` before any feedback, extracted by its model
    on first use (notebook 40), read from the KG cache afterwards."""
    return shared_kg(nb.ctx, nb.settings.kg_spec(dataset))


def kg_stats(nb: "Setup", built: "BuiltKG") -> dict[str, Any]:
    """The build's statistics (`kg.tcr_kg.build_stats`) with what the notebook's quote check
    keeps, flags and drops (`TcrKG.quote_counts`: quote_check, relations_kept, relations_flagged,
    relations_dropped, edges_kept), counted on the built KG as a run reads it, so a KG built
    before the check has them too."""
    from pathlib import Path

    folder = built.extra.get("tcr_folder")
    if folder is None:
        raise ConfigError(f"kg={built.spec!r} is not a TCR-QF KG; use tcr:<dataset>[:<split>]:n=<N>:seed=<S>")
    check = getattr(nb.settings, "quote_check", None) or "flag"
    return {**built.stats, **TcrKG.load(Path(folder), quote_check=check).quote_counts()}


def initial_entities(built: "BuiltKG") -> set[str]:
    """The normalized entity names of a TCR-QF KG as built (the keys feedback matches new names
    against, `kg.tcr_kg.TcrKG.entities`)."""
    from pathlib import Path

    folder = built.extra.get("tcr_folder")
    if folder is None:
        raise ConfigError(f"kg={built.spec!r} is not a TCR-QF KG; use tcr:<dataset>[:<split>]:n=<N>:seed=<S>")
    return set(TcrKG.load(Path(folder)).entities)


def method_config(nb: "Setup", name: str, dataset: str) -> Any:
    """The TcrQFConfig a run of `name` on `dataset` with this notebook's settings uses (for the
    settings shown under a table)."""
    s = nb.settings
    r = resolve_run(name, dataset, nb.out_dir, nb.profile, model=nb.model, n=s.n, seed=s.seed, **s.overrides(dataset))
    return r.method_config
