"""The published numbers of the KG-RAG on MetaQA paper, each with where it was read.

Only numbers printed in the paper's text are stored (seed 003, Linders & Tomczak 2025).
Figs. 4 and 5 show their Hit@1 values as bars without printed numbers; reading bar heights
off a picture would be invention, so those figures are listed in `FIGURE_ONLY` with no
value, and what the text says about them in words is kept as `CLAIMS` (ordinal statements
such as "LLM+KG beats LLM on 1-hop") that our own numbers can be checked against.

Values keep the paper's unit (Hit@1 as a fraction in [0, 1]); `value_percent` gives the
percent scale every kgrag table uses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

PAPER = "kg-rag-metaqa"
PAPER_TITLE = ("Linders & Tomczak (2025), Knowledge graph-extended retrieval augmented generation "
               "for question answering (seed 003)")


@dataclass(frozen=True)
class PaperNumber:
    """One number the paper prints, with its labels and its source."""

    key: str                      # what it measures, e.g. "kb.entities", "exp1.hit1"
    value: float
    source: str                   # section / figure / table of the paper
    quote: str                    # the sentence it was read from (short)
    unit: str = "count"           # count | fraction | percent | tokens | ...
    std: float | None = None      # published standard deviation, if printed
    bound: str = "exact"          # exact | upper | approx
    dataset: str | None = None
    method: str | None = None
    hops: int | None = None       # N
    top_k: int | None = None      # K
    n: int | None = None          # questions per sample
    seeds: int | None = None      # samples (seeds) averaged over
    note: str = ""

    def value_percent(self) -> float:
        """The value on the 0-100 scale (fractions are multiplied by 100)."""
        return self.value * 100.0 if self.unit == "fraction" else self.value

    def std_percent(self) -> float | None:
        if self.std is None:
            return None
        return self.std * 100.0 if self.unit == "fraction" else self.std


@dataclass(frozen=True)
class FigureOnly:
    """A result the paper shows only as a picture: nothing numeric is stored for it."""

    figure: str
    shows: str
    printed_in_text: str = ""     # which of its values the text does print (stored above)


@dataclass(frozen=True)
class Claim:
    """An ordinal statement of the text about two systems (or settings) on one dataset.

    `relation` is ">" (a scores higher than b), "<" or "~" (about the same). `a`/`b` are
    method names, or "N=<n>" / "K=<k>" for claims about kg-rag settings in Experiment 1.
    """

    cid: str
    experiment: str               # exp1 | exp2
    dataset: str
    a: str
    relation: str
    b: str
    source: str
    quote: str
    fixed: dict[str, Any] = field(default_factory=dict)   # settings held fixed (e.g. {"top_k": 30})
    note: str = ""
    margin: float | None = None   # a `~` claim's equivalence margin (points) where the paper states one


NUMBERS: tuple[PaperNumber, ...] = (
    # ---- the knowledge graph (§4.1, Fig. 3)
    PaperNumber("kb.entities", 43234, "§4.1 'Knowledge Graph'",
                "The KG comprises 43,234 entities and 9 relation types"),
    PaperNumber("kb.relations", 9, "§4.1 'Knowledge Graph'",
                "The KG comprises 43,234 entities and 9 relation types"),
    PaperNumber("kb.degree_median", 4, "§4.1 and Fig. 3",
                "most entities have few associated triples (median of 4)", unit="triples per entity"),
    PaperNumber("kb.degree_max", 4431, "§4.1 and Fig. 3",
                "the long-tailed distribution includes entities with up to 4431 triples",
                unit="triples per entity", bound="upper",
                note="'up to': the largest degree. The original kb.txt repeats 1,159 lines; if the paper "
                     "counted those, a de-duplicated KB gives a smaller maximum."),
    # ---- Experiment 1 (§4.2.1, §4.3.1, Fig. 4)
    PaperNumber("exp1.hit1", 0.787, "§4.3.1 (Experiment 1; one bar of Fig. 4)",
                "N = 3 is deemed the best choice despite a minor reduction ... in 2-hop performance (0.787 ± 0.046)",
                unit="fraction", std=0.046, dataset="metaqa-2hop", method="kg-rag", hops=3, top_k=30,
                n=100, seeds=10,
                note="K is not printed beside the number; K = 30 is the value chosen in the same paragraph."),
    PaperNumber("exp1.hit1_std_max", 0.063, "§4.3.1 (Experiment 1, Fig. 4 error bars)",
                "with standard deviations remaining low (≤ 0.063) across samples",
                unit="fraction", bound="upper", method="kg-rag", n=100, seeds=10,
                note="largest std over all 27 bars of Fig. 4 (3 datasets x N x K)"),
    # ---- Qualitative analysis (§4.4.3; samples of Table 4: exp. 1, seed 0, N=3, K=30)
    PaperNumber("qual.over_decomposition_1hop", 16, "§4.4.3 'Over-decomposition'",
                "In approximately 16% of 1-hop cases, ambiguous questions lead to extra sub-questions",
                unit="percent", bound="approx", dataset="metaqa-1hop", method="kg-rag", hops=3, top_k=30,
                n=100, seeds=1),
)

# The paper's settings beside the results (Table 3, §3.4, §4.2): what a faithful rerun uses.
SETTINGS: dict[str, tuple[Any, str]] = {
    "exp1.hops_grid": ([1, 2, 3], "§4.2.1: N tested with values 1, 2, 3"),
    "exp1.top_k_grid": ([10, 20, 30], "§4.2.1: K tested with values 10, 20, 30"),
    "exp1.n": (100, "§4.2.1: 100 questions sampled per MetaQA test dataset"),
    "exp1.seeds": (list(range(10)), "§4.2.1: repeated with 10 different seeds (0-9)"),
    "exp2.n": (500, "§4.2.2: 500 questions sampled per MetaQA dataset"),
    "exp2.seeds": (list(range(8)), "§4.2.2: 8 different seeds (0-7)"),
    "exp2.hops": (3, "§4.3.1: the optimal parameter configuration is N = 3 and K = 30"),
    "exp2.top_k": (30, "§4.3.1: the optimal parameter configuration is N = 3 and K = 30"),
    "qual.samples": ("exp. 1, seed 0, N=3, K=30, each MetaQA dataset", "Table 4"),
    "llm.model": ("Mistral-7B-Instruct-v0.2, 4-bit GGUF, llama.cpp", "§3.4.1 'Implementation Details'"),
    "llm.max_tokens": (256, "Table 3 (512 for the answer synthesis, §3.4.4)"),
    "llm.temperature": (0.3, "Table 3"),
    "llm.min_p": (0.05, "Table 3"),
    "llm.top_k": (40, "Table 3"),
    "llm.repeat_penalty_subanswer": (1.1, "§3.4.3"),
    "embedder": ("multi-qa-mpnet-base-dot-v1 (768-d, dot product)", "§3.4.3"),
}

FIGURE_ONLY: tuple[FigureOnly, ...] = (
    FigureOnly("Fig. 3", "histogram of triples per entity in the MetaQA KG, cut off at 30",
               "median 4 and maximum 4431 (§4.1)"),
    FigureOnly("Fig. 4", "mean ± std Hit@1 of KG-RAG for N in {1,2,3} x K in {10,20,30} on the 1-, 2- and "
                         "3-hop test sets (10 samples of 100 questions)",
               "only 2-hop at N = 3 (0.787 ± 0.046) and the largest std (0.063), §4.3.1"),
    FigureOnly("Fig. 5", "mean ± std Hit@1 of LLM, LLM+QD, LLM+KG and KG-RAG on the 1-, 2- and 3-hop test "
                         "sets (8 samples of 500 questions, N = 3, K = 30)",
               "no value is printed; §4.3.2 describes the ordering in words (see CLAIMS)"),
    FigureOnly("Fig. 7", "number of generated sub-questions per question for each MetaQA sample of Table 4",
               "only the ~16% over-decomposition rate on 1-hop (§4.4.3)"),
)

_E1 = "§4.3.1"
_E2 = "§4.3.2"
CLAIMS: tuple[Claim, ...] = (
    # Experiment 1 (kg-rag over N and K)
    *(Claim(f"exp1.2hop_N1_poor_vs_N{m}", "exp1", "metaqa-2hop", f"N={m}", ">", "N=1", _E1,
            "for the 2-hop dataset, N = 1 yields poor results", {"top_k": 30}) for m in (2, 3)),
    Claim("exp1.1hop_best_at_N1", "exp1", "metaqa-1hop", "N=1", ">", "N=3", _E1,
          "Performance is highest when the parameter N equals the actual number of hops", {"top_k": 30}),
    Claim("exp1.2hop_N2_over_N3", "exp1", "metaqa-2hop", "N=2", ">", "N=3", _E1,
          "N = 3 is deemed the best choice despite a minor reduction ... in 2-hop performance",
          {"top_k": 30}),
    Claim("exp1.1hop_K_flat", "exp1", "metaqa-1hop", "K=30", "~", "K=10", _E1,
          "increasing K ... from 10 to 30 shows minimal effect on the 1-hop dataset", {"hops": 3}),
    Claim("exp1.2hop_K_helps", "exp1", "metaqa-2hop", "K=30", ">", "K=10", _E1,
          "slight improvements observed for the 2-hop and 3-hop datasets", {"hops": 3}),
    Claim("exp1.3hop_K_helps", "exp1", "metaqa-3hop", "K=30", ">", "K=10", _E1,
          "slight improvements observed for the 2-hop and 3-hop datasets", {"hops": 3}),
    # Experiment 2 (the four systems at N = 3, K = 30)
    *(Claim(f"exp2.qd_alone_{d}", "exp2", f"metaqa-{d}", "llm-qd", "~", "llm", _E2,
            "the zero-shot prompt LLM performs similarly to LLM+QD") for d in ("1hop", "2hop", "3hop")),
    *(Claim(f"exp2.kg_helps_{d}", "exp2", f"metaqa-{d}", "llm-kg", ">", "llm", _E2,
            "There is a visible advantage of adding a knowledge graph component on 1-hop and 2-hop cases")
      for d in ("1hop", "2hop")),
    Claim("exp2.kg_flat_3hop", "exp2", "metaqa-3hop", "llm-kg", "~", "llm", _E2,
          "there is no difference between LLM+KG and the other two baselines on 3-hop"),
    *(Claim(f"exp2.ours_over_llm_{d}", "exp2", f"metaqa-{d}", "kg-rag", ">", "llm", _E2,
            "adding the QD component to LLM+KG ... allows to achieve a significant improvement of the "
            "performance in all three cases", note="read as: over the LLM baseline (on 1-hop the paper "
            "places KG-RAG below LLM+KG)") for d in ("1hop", "2hop", "3hop")),
    *(Claim(f"exp2.ours_over_kaping_{d}", "exp2", f"metaqa-{d}", "kg-rag", ">", "llm-kg", _E2,
            "outperforming LLM+KG on 2-hop and 3-hop") for d in ("2hop", "3hop")),
    Claim("exp2.ours_below_kaping_1hop", "exp2", "metaqa-1hop", "kg-rag", "<", "llm-kg", _E2,
          "improved performance on multi-hop questions with only a minor loss for 1-hop queries compared "
          "to the LLM+KG baseline"),
)


def paper_numbers(key: str | None = None, **labels: Any) -> pd.DataFrame:
    """The stored numbers as a table (one row each), optionally filtered by key and labels.

    Adds `value_pct` / `std_pct` on the percent scale used by every kgrag table.
    """
    rows = []
    for num in NUMBERS:
        if key is not None and num.key != key:
            continue
        if any(getattr(num, k) != v for k, v in labels.items()):
            continue
        row = asdict(num)
        row["value_pct"] = num.value_percent()
        row["std_pct"] = num.std_percent()
        rows.append(row)
    cols = [f.name for f in PaperNumber.__dataclass_fields__.values()] + ["value_pct", "std_pct"]
    return pd.DataFrame(rows, columns=cols)


def paper_number(key: str, **labels: Any) -> PaperNumber | None:
    """The one number with this key and labels, or None when the paper prints none."""
    hits = [n for n in NUMBERS if n.key == key and all(getattr(n, k) == v for k, v in labels.items())]
    if len(hits) > 1:
        raise ValueError(f"{len(hits)} paper numbers match {key!r} {labels}; add labels to pick one")
    return hits[0] if hits else None


def paper_claims(experiment: str | None = None) -> list[Claim]:
    return [c for c in CLAIMS if experiment is None or c.experiment == experiment]


def figure_only_table() -> pd.DataFrame:
    """The results the paper shows only as pictures, and which of their values the text prints."""
    return pd.DataFrame([asdict(f) for f in FIGURE_ONLY])


def settings_table() -> pd.DataFrame:
    return pd.DataFrame([{"setting": k, "paper": v, "source": s} for k, (v, s) in SETTINGS.items()])


# How our MetaQA reproduction differs from the paper, for the study report's single list.
DEVIATIONS = (
    "KG-RAG on MetaQA: Hit@1 (primary) counts an answer correct when a gold entity occurs in it, as the paper's "
    "figures behave (§4.2.1 words it as exact match, but Fig. 6, Table 5 and §4.5 count sentence answers); the "
    "literal reading is reported as hit1_exact and the usual KGQA one as hit1_first.",
    "KG-RAG on MetaQA: the paper ran 4-bit Mistral-7B-Instruct-v0.2 with multi-qa-mpnet-base-dot-v1 embeddings; "
    "answer, decomposition and synthesis budgets of 256/256/512 new tokens are cut to the profile's.",
    "KG-RAG on MetaQA: Experiment 2 used 500 questions x seeds 0-7 and Experiment 1 100 x seeds 0-9; the CPU "
    "reference uses one seed and 30-100 questions per table (each table states its n). Experiment 1's N x K grid "
    "runs N = 1, 2, 3 and K = 10, 30 only: K = 20 (§4.2.1) was never run. On the 2-hop column every (N, K) of that "
    "grid ran at n = 50; on the 1-hop column N = 1 and 3, on the 3-hop column N = 3 only, each at K = 10 and 30 "
    "and n = 30.",
    "KG-RAG on MetaQA: question decomposition is capped at 4 sub-questions (max_subquestions; the paper sets no "
    "cap); a longer decomposition is cut, which the trace records.",
    "KG-RAG on MetaQA: KG-RAG's synthesis prompt asks for the answer first, then one or two sentences of "
    "explanation (the paper's answers, Fig. 6 and Table 5, are sentences too). So answers differ in length between "
    "methods (in the committed runs KG-RAG's average 25-35 words, KAPING's 10-17), and the lenient Hit@1 (an answer containing a gold) "
    "favours the longer ones; the report shows first-entity Hit@1 (hit1_first) and the literal reading "
    "(hit1_exact) beside every MetaQA claim.",
    "KG-RAG on MetaQA: kb.txt without its 1,159 repeated lines (the paper does not say whether it kept them).",
    "KG-RAG on MetaQA: the decomposition prompt's in-context examples are four written here (one per question type: "
    "1, 2 and 3 hops and a no-split question; methods.metaqa.prompts.DECOMPOSITION_EXAMPLES) from real KB facts of "
    "entities that are never a topic entity of the dev/test files, where the paper builds its examples from the "
    "benchmark's own questions. The prompt is kept so cached runs stay valid; the effect of the difference on "
    "decomposition and Hit@1 is not measured.",
)
