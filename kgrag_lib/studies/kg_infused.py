"""Settings of the KG-Infused RAG notebooks (20-28) and the paper's grid of configurations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..config import opt
from ..errors import ConfigError
from ..kg.sources import check_spec
from ..grid import GridRun
from .base import NotebookSettings, Sample, WithModel

KGI = "kg-infused"
SHARED = {"kg": (KGI, "kg"), "corpus": (KGI, "corpus")}
VARIANTS = ("nor", "vanilla-rag", "vanilla-qe", "kg-infused", "kg-qe-only", "kg-aug-only")
ROUND_VARIANTS = ("kg-infused", "kg-qe-only", "kg-aug-only")


@dataclass
class KGPreprocessing(NotebookSettings):
    """20_kg_preprocessing: Table 5 and the KG the runs use (no LLM)."""

    from_methods = {"kg": (KGI, "kg")}
    kg: str | None = opt(None, "the KG to profile (None: methods.kg-infused.kg)")
    wikidata5m_dir: str | None = opt(None, "folder with the official Wikidata5M files (None: <data root>/wikidata5m)")
    slice_files: list[str] = opt(["wikidata5m/libkge_test.txt", "wikidata5m/libkge_valid.txt"],
                                 "the id-only Wikidata5M slice under the data root")


@dataclass
class KGInfusedRuns(Sample, WithModel):
    """What every KG-Infused RAG notebook that runs methods shares."""

    family = KGI
    from_methods = SHARED
    datasets: list[str] = opt(["2wiki", "hotpotqa"], "datasets (the paper: hotpotqa, 2wiki, musique, bamboogle, strategyqa)")
    kg: str | None = opt(None, "2wiki-evidence-full | 2wiki-evidence-heldout | 2wiki-evidence-oracle (upper bound) | wikidata5m | wikidata5m:<folder> | a saved store (None: methods.kg-infused.kg)")
    corpus: str | None = opt(None, "auto | pooled | wikipedia (None: methods.kg-infused.corpus)")


@dataclass
class KGInfusedNotebook(KGInfusedRuns):
    """A notebook that runs KG-Infused RAG with one number of rounds."""

    from_methods = {**SHARED, "rounds": (KGI, "rounds")}
    rounds: int | None = opt(None, "activation rounds (paper: 2; None: methods.kg-infused.rounds)")
    upper_bound_kg: str | None = opt(None, "also run the KG variants with this KG (e.g. 2wiki-evidence-oracle) and "
                                           "show the paired difference (None: skip)")

    def check(self, where: str) -> None:
        """The extra KGs, run after the main grid: a typo must not cost that grid first."""
        if self.upper_bound_kg is not None:
            check_spec(self.upper_bound_kg, f"{where}: upper_bound_kg")


@dataclass
class Main(KGInfusedNotebook):
    """21_kg_infused_main: Table 1."""

    paper_model: str = opt("Qwen2.5-7B", "Table 1 block beside ours: Qwen2.5-7B | LLaMA3.1-8B")
    placebo_kg: str | None = opt(None, "also run KG-Infused RAG on this placebo KG, same questions (the "
                                       "reference: 2wiki-evidence-heldout, without the evaluated questions' own "
                                       "facts), and test m1.kg_over_placebo (None: skip; the claim reads 'not run')")

    def check(self, where: str) -> None:
        """A placebo must be a KG, and neither the notebook's KG (the placebo claim would compare a
        KG with itself) nor its upper bound (which holds the very facts a placebo lacks)."""
        super().check(where)
        if self.placebo_kg is None:
            return
        check_spec(self.placebo_kg, f"{where}: placebo_kg")
        for other, label in ((self.kg, "kg"), (self.upper_bound_kg, "upper_bound_kg")):
            if other is not None and self.placebo_kg.strip() == str(other).strip():
                raise ConfigError(f"{where}: placebo_kg {self.placebo_kg!r} is also the notebook's {label}; a placebo "
                                  "is a KG without the evaluated questions' facts, e.g. 2wiki-evidence-heldout "
                                  "(None: no placebo)")


@dataclass
class Ablation(KGInfusedNotebook):
    """22_kg_infused_ablation: Table 3."""


@dataclass
class RoundSweep(KGInfusedRuns):
    """23_activation_rounds: Figure 2 and the whole grid's request counts."""

    from_methods = {**SHARED, "main_rounds": (KGI, "rounds")}
    rounds: list[int] = opt([1, 2, 3, 4, 5, 6], "round counts of the sweep (the paper: 1-6)")
    main_rounds: int | None = opt(None, "the rounds of Tables 1 and 3 (None: methods.kg-infused.rounds)")


@dataclass
class Recall(KGInfusedRuns):
    """24_retrieval_recall: Table 4."""

    rounds: list[int] = opt([1, 2], "activation rounds of the KG-based QE rows (the paper: 1 and 2)")
    k: int = opt(6, "Recall@k")


@dataclass
class CaseStudy(KGInfusedNotebook):
    """25_case_study: Table 22 and Figure 4 for one question."""

    qid: str | None = opt(None, "a question id from the sample (None: pick one as the notebook says)")


@dataclass
class DPOPairs(WithModel):
    """26_dpo_data: the preference pairs of §3.7 / App. E and Table 19. The KG-Infused settings
    are the profile's `methods.kg-infused` (so the greedy candidate is the evaluation request)."""

    family = KGI
    reads = ("2wiki",)   # the pool is a 2Wiki question file (`split`)
    n_questions: int | None = opt(None, "2Wiki training questions drawn from the non-evaluated pool (None: "
                                        "DPODataConfig's 100; the paper: 1,500)")
    seed: int | None = opt(None, "seed of the question sample, the KG stages and the candidates (None: run.seed)")
    rounds: list[int] = opt([1, 2], "activation-round counts whose augmentation inputs give pairs (D_KA^1, D_KA^2)")
    judge: str | None = opt(None, "LLM spec of the judge (None: the generator itself; the paper: gpt-4o-mini)")
    split: str | None = opt(None, "2Wiki question file the pool comes from (None: DPODataConfig's dev4000)")


@dataclass
class DPOTraining(KGInfusedRuns):
    """27_dpo_training: the DPO run (Table 20 settings or the CPU deviations), its curves, and the
    "+DPO" rows of Table 1 / Table 3 / Fig. 2 beside the base model's rows on the same questions."""

    from_methods = {**SHARED, "rounds": (KGI, "rounds")}
    pairs: str | None = opt(None, "pairs.jsonl from notebook 26 (None: ../26_dpo_data/pairs.jsonl beside out_dir)")
    training: str = opt("cpu-smoke", "default set of DPOTrainConfig: cpu-smoke (LoRA, fp32, minutes) | gpu-paper "
                                     "(one GPU: bf16 LoRA, Table 20's data and schedule) | gpu-paper-full (Table 20: "
                                     "full fine-tune, bf16, TR-DPO; several GPUs, see docs/GPU.md)")
    training_overrides: dict[str, Any] = opt({}, "DPOTrainConfig fields that replace the default set's")
    methods: list[str] = opt(["kg-infused"], "configurations answered by the base and by the trained model (Table 1: "
                                             "nor, vanilla-rag, vanilla-qe, kg-infused; Table 3 adds kg-qe-only, "
                                             "kg-aug-only)")
    rounds: int | None = opt(None, "activation rounds of the KG variants (None: methods.kg-infused.rounds)")
    round_sweep: list[int] = opt([], "Fig. 2 on both models: rounds of the three KG variants (empty: skip; the "
                                     "paper: 1-6)")


@dataclass
class Plugins(KGInfusedRuns):
    """28_plugins: Self-RAG (Table 2) and Self-Ask (Table 21) with and without KG-Infused RAG as a
    plug-in module (§4.2, App. F.1)."""

    tables: list[str] = opt(["2", "21"], "plug-in tables to run: 2 (Self-RAG: needs a Self-RAG model with "
                                         "reflection tokens, e.g. selfrag-llama2-7b on a GPU) and 21 (Self-Ask)")
    rounds: list[int] = opt([2], "activation rounds of the + KG-Infused RAG rows (Table 2: 2, 3; Table 21: 1, 2, 3)")
    selfrag_generator: str | None = opt(None, "the Self-RAG model (None: methods.self-rag.generator)")


NOTEBOOKS = {
    "20_kg_preprocessing": KGPreprocessing,
    "21_kg_infused_main": Main,
    "22_kg_infused_ablation": Ablation,
    "23_activation_rounds": RoundSweep,
    "24_retrieval_recall": Recall,
    "25_case_study": CaseStudy,
    "26_dpo_data": DPOPairs,
    "27_dpo_training": DPOTraining,
    "28_plugins": Plugins,
}


def paper_grid(rounds: Iterable[int] = range(1, 7), main_rounds: int = 2) -> list[GridRun]:
    """Table 1 (NoR, Vanilla RAG, Vanilla QE, KG-Infused RAG) + Table 3 (the two single-component
    ablations) + Fig. 2 (the three KG variants over `rounds`), each distinct configuration once."""
    runs = [GridRun.of("nor"), GridRun.of("vanilla-rag"), GridRun.of("vanilla-qe")]
    for k in sorted(set(rounds) | {main_rounds}):
        runs += [GridRun.of(m, rounds=k) for m in ROUND_VARIANTS]
    return runs
