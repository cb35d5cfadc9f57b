"""Published numbers of KG-Infused RAG (Wu et al.), transcribed from the paper's tables.

Every number carries its source (table and section of seeds/000_6837262a4de0142e.txt) so a
notebook can print it beside ours. Only tables that print values are here: Figure 2 (rounds
1..6) shows curves without printed values, so for it we keep the paper's own words and no
numbers. The Δ rows the paper prints are kept separately (`TABLE1_DELTAS`) only to check
the transcription: tests recompute them from the method rows.

Scores are percentages. Multi-hop sets report Acc, F1, EM and their mean (Avg); StrategyQA
(yes/no) reports Acc only (§4.1, Table 6).
"""

from __future__ import annotations

PAPER = "Wu et al., KG-Infused RAG: Augmenting Corpus-Based RAG with External Knowledge Graphs"

# Our dataset names (kgrag_lib.data.registry) in the order of the paper's tables, and the
# paper's column labels.
DATASETS = ("hotpotqa", "2wiki", "musique", "bamboogle", "strategyqa")
DATASET_LABELS = {
    "hotpotqa": "HotpotQA",
    "2wiki": "2WikiMQA",
    "musique": "MuSiQue",
    "bamboogle": "Bamboogle",
    "strategyqa": "StrategyQA",
}
MULTI_HOP_METRICS = ("acc", "f1", "em", "avg")
YES_NO_METRICS = ("acc",)

# Table 6 (Appendix C.1): evaluation sample sizes; metrics per dataset.
SAMPLE_SIZES = {"hotpotqa": 500, "2wiki": 500, "musique": 500, "bamboogle": 125, "strategyqa": 500}
SAMPLE_SIZES_SOURCE = "Table 6 (Appendix C.1)"

# §4.3 and Appendix C.2 (Table 7): the method configuration behind every number below.
SETUP = {
    "kg": "Wikidata5M-KG (~21M triples, §3.3, Appendix B)",
    "corpus": "Wikipedia-2018 (DPR psgs_w100, 21,015,324 passages, §4.3)",
    "retriever": "Contriever-MS MARCO for entities and passages (§4.3)",
    "passages_k_p": 6,          # §4.3.1: 6 passages; with QE 3 from q and 3 from q'
    "seed_entities_k_e": 3,     # §4.3.1
    "max_rounds": 6,            # §4.3.1 / §5.4
    "source": "§4.3, §4.3.1, Table 7 (Appendix C.2)",
}


def _row(*vals: float) -> dict[str, dict[str, float]]:
    """17 values in the paper's column order -> {dataset: {metric: value}}."""
    if len(vals) != 17:
        raise ValueError(f"a Table 1/3 row has 17 values (4 x Acc/F1/EM/Avg + StrategyQA Acc); got {len(vals)}")
    out: dict[str, dict[str, float]] = {}
    for i, ds in enumerate(DATASETS[:4]):
        out[ds] = dict(zip(MULTI_HOP_METRICS, vals[4 * i: 4 * i + 4]))
    out["strategyqa"] = {"acc": vals[16]}
    return out


# Table 1 (§5.1): overall results (%), two activation rounds for KG-Infused RAG.
TABLE1_SOURCE = "Table 1 (§5.1): overall results (%)"
TABLE1 = {
    "Qwen2.5-7B": {
        "NoR": _row(19.8, 25.8, 18.0, 21.2, 23.4, 26.8, 22.0, 24.1, 4.0, 11.6, 3.4, 6.3, 10.4, 16.6, 8.0, 11.7, 64.4),
        "Vanilla RAG": _row(35.0, 41.9, 31.0, 36.0, 30.6, 33.5, 27.2, 30.4, 5.2, 11.5, 3.6, 6.8, 22.4, 30.1, 21.6, 24.7, 68.6),
        "Vanilla QE": _row(35.0, 41.8, 30.8, 35.9, 28.6, 31.5, 25.4, 28.5, 5.4, 11.1, 2.2, 6.2, 20.8, 28.6, 18.4, 22.6, 72.2),
        "KG-Infused RAG (w/ 2-Round)": _row(39.0, 44.7, 34.4, 39.4, 44.8, 44.5, 36.0, 41.8, 10.8, 16.7, 7.6, 11.7,
                                            26.4, 34.1, 24.0, 28.2, 68.2),
        "+DPO (w/ 2-Round)": _row(37.2, 43.9, 31.0, 37.4, 45.6, 45.8, 35.8, 42.4, 12.8, 19.2, 8.6, 13.5,
                                  36.8, 41.8, 31.2, 36.6, 72.8),
    },
    "LLaMA3.1-8B": {
        "NoR": _row(22.2, 27.0, 20.6, 23.3, 28.0, 29.3, 24.4, 27.2, 3.6, 8.8, 3.0, 5.1, 11.2, 16.4, 8.0, 11.9, 68.4),
        "Vanilla RAG": _row(32.2, 39.0, 28.8, 33.4, 30.6, 31.6, 25.0, 29.1, 3.6, 9.6, 2.0, 5.1, 20.0, 24.8, 18.4, 21.1, 66.2),
        "Vanilla QE": _row(32.6, 38.8, 28.8, 33.4, 26.6, 28.6, 21.6, 25.6, 5.2, 11.0, 3.4, 6.5, 18.4, 23.3, 15.2, 19.0, 68.0),
        "KG-Infused RAG (w/ 2-Round)": _row(34.4, 39.8, 30.2, 34.8, 37.0, 36.0, 27.4, 33.5, 12.0, 16.9, 7.4, 12.1,
                                            24.0, 28.5, 22.4, 25.0, 67.0),
        "+DPO (w/ 2-Round)": _row(36.6, 43.8, 31.0, 37.1, 45.0, 46.8, 37.0, 42.9, 12.2, 18.5, 8.8, 13.2,
                                  31.2, 33.6, 24.8, 29.9, 69.4),
    },
}
# The Δ rows printed in Table 1 ("Δ X → Vanilla RAG" = X minus Vanilla RAG), for checking only.
TABLE1_DELTAS = {
    "Qwen2.5-7B": {
        "KG-Infused RAG (w/ 2-Round)": _row(4.0, 2.8, 3.4, 3.4, 14.2, 11.0, 8.8, 11.4, 5.6, 5.2, 4.0, 4.9,
                                            4.0, 4.0, 2.4, 3.5, -0.4),
        "+DPO (w/ 2-Round)": _row(2.2, 2.0, 0.0, 1.4, 15.0, 12.3, 8.6, 12.0, 7.6, 7.7, 5.0, 6.7,
                                  14.4, 11.7, 9.6, 11.9, 4.2),
    },
    "LLaMA3.1-8B": {
        "KG-Infused RAG (w/ 2-Round)": _row(2.2, 0.8, 1.4, 1.4, 6.4, 4.4, 2.4, 4.4, 8.4, 7.3, 5.4, 7.0,
                                            4.0, 3.7, 4.0, 3.9, 0.8),
        "+DPO (w/ 2-Round)": _row(4.4, 4.8, 2.2, 3.7, 14.4, 15.2, 12.0, 13.8, 8.6, 8.9, 6.8, 8.1,
                                  11.2, 8.8, 6.4, 8.8, 3.2),
    },
}

# Table 3 (§5.3): ablation. Vanilla RAG on LLaMA3.1-8B, the other rows on DPO-trained LLaMA3.1-8B.
TABLE3_SOURCE = "Table 3 (§5.3): ablation study (%); Vanilla RAG on LLaMA3.1-8B, the rest on DPO-trained LLaMA3.1-8B"
TABLE3 = {
    "Vanilla RAG (LLaMA3.1-8B)": _row(32.2, 39.0, 28.8, 33.4, 30.6, 31.6, 25.0, 29.1, 3.6, 9.6, 2.0, 5.1,
                                      20.0, 24.8, 18.4, 21.1, 66.2),
    "+ KG-Based QE (w/ 2-Round)": _row(36.2, 42.9, 31.0, 36.7, 34.6, 36.9, 28.8, 33.4, 9.6, 15.8, 6.2, 10.5,
                                       25.6, 30.2, 22.4, 26.1, 69.0),
    "+ KG-Aug Gen (w/ 2-Round)": _row(36.0, 41.9, 29.8, 35.9, 42.6, 45.8, 35.4, 41.3, 10.8, 16.2, 7.0, 11.3,
                                      32.8, 38.5, 29.6, 33.6, 69.0),
    "+ Both (w/ 2-Round)": _row(36.6, 43.8, 31.0, 37.1, 45.0, 46.8, 37.0, 42.9, 12.2, 18.5, 8.8, 13.2,
                                31.2, 33.6, 24.8, 29.9, 69.4),
}

# Table 4 (§5.4): Recall@6 of gold supporting passages (%), no StrategyQA column.
TABLE4_SOURCE = "Table 4 (§5.4): retrieval performance, R@6 (%); Vanilla RAG top-6 by q, with QE 3 by q + 3 by q'"
TABLE4 = {
    "Vanilla RAG": {"hotpotqa": 41.0, "2wiki": 34.4, "musique": 13.4, "bamboogle": 20.8},
    "+ KG-Based QE (1-Round)": {"hotpotqa": 45.0, "2wiki": 40.0, "musique": 19.4, "bamboogle": 24.8},
    "+ KG-Based QE (2-Round)": {"hotpotqa": 47.0, "2wiki": 41.0, "musique": 21.8, "bamboogle": 24.8},
}

# Table 5 (Appendix B.2): KG statistics before and after the two completeness filters.
TABLE5_SOURCE = "Table 5 (Appendix B.2): statistics of Wikidata5M and Wikidata5M-KG"
TABLE5 = {
    "Wikidata5M": {"entities": 4_944_931, "relations": 828, "triples": 21_354_359},
    "Wikidata5M-KG": {"entities": 4_665_331, "relations": 810, "triples": 20_987_217},
}
# Appendix B.1/B.2 text: the share removed by the filters (percent of the original).
TABLE5_REMOVED_PCT = {"entities": 5.65, "relations": 2.17, "triples": 1.72}

# Figure 2 (§5.4) prints no values; these are the paper's qualitative findings about it (each is a
# registered claim below: f2.round2_over_round1, f2.round1_peak, f2.kg_aug_over_kg_qe, f2.kg_qe_over_full).
FIGURE2_SOURCE = "Figure 2 (§5.4): impact of the number of activation rounds (1..6); curves only, no printed values"
FIGURE2_FINDINGS = (
    "2WikiMQA and MuSiQue see clear gains in the second activation round, then fluctuate slightly.",
    "HotpotQA peaks at the first activation round, followed by a slight drop.",
    "On 2WikiMQA and MuSiQue, KG-Aug Gen contributes more than KG-Based QE; on HotpotQA, KG-Based QE alone "
    "outperforms the full method.",
    "Vanilla RAG and Vanilla QE use LLaMA3.1-8B; the KG variants use the DPO-trained version.",
)

# Claims in the text that a reader may want to hold against the tables.
TEXT_CLAIMS = {
    "abstract_gain_range": ("Abstract / §5.1: Avg gain of KG-Infused RAG (+DPO, LLaMA3.1-8B) over Vanilla RAG "
                            "'3.8% to 13.8%'; Table 1's own Δ row gives 3.7 (HotpotQA) to 13.8 (2WikiMQA)."),
    "dpo_gain_range": "§5.1: DPO on LLaMA3.1-8B raises Avg by 1.1% to 9.4% across the five datasets.",
    "recall_gain_range": "§5.4: KG-Based QE raises R@6 by 4.0% to 8.4% across four datasets (Table 4).",
}


# §5.3: combining both modules ("+ Both", the full method) is the strongest or close to it "in most
# cases". One claim per multi-hop dataset and single module, its relation from Table 3's own
# numbers as for the plug-in claims (`PLUGIN_CLAIM_MIN_GAP`): '>' where +Both leads by at least a
# point, '<' where the module leads by that much (Bamboogle's KG-Aug Gen), '~' in between.
CLAIM_MIN_GAP = 1.0
_MODULE_ROWS = {"kg-qe-only": "+ KG-Based QE (w/ 2-Round)", "kg-aug-only": "+ KG-Aug Gen (w/ 2-Round)"}


def _gap_relation(gap: float) -> str:
    return ">" if gap >= CLAIM_MIN_GAP else "<" if gap <= -CLAIM_MIN_GAP else "~"


BOTH_STRONGEST_CLAIMS = tuple(
    (f"t3.both_strongest.{d}.over_{module.split('-')[1]}", "Table 3", d, ("kg-infused", 2),
     _gap_relation(round(TABLE3["+ Both (w/ 2-Round)"][d]["avg"] - TABLE3[row][d]["avg"], 1)), (module, 2), "avg",
     "§5.3: using both modules gives the best or a close result in most cases; Table 3 (Avg): +Both "
     f"{TABLE3['+ Both (w/ 2-Round)'][d]['avg']} vs {row.split(' (')[0].lstrip('+ ')} {TABLE3[row][d]['avg']} "
     f"({TABLE3['+ Both (w/ 2-Round)'][d]['avg'] - TABLE3[row][d]['avg']:+.1f})")
    for d in DATASETS[:4] for module, row in _MODULE_ROWS.items())


# The "A beats B" statements behind the tables, tested on paired per-question scores
# (`report.kg_infused.tables.check_claims`). A side is (variant, rounds); the metric is a
# per-question value (Avg = mean of Acc, F1, EM; Acc on StrategyQA; recall@6 for Table 4).
# The relation is what the paper's own numbers show on the dataset in its main setting
# (Qwen2.5-7B for Table 1, LLaMA3.1-8B + DPO for Tables 3-4, Figure 2's findings).
CLAIMS = (
    *(("t1.kg_infused_over_vanilla_rag." + d, "Table 1", d, ("kg-infused", 2), ">", ("vanilla-rag", None), "avg",
       "§5.1: KG-Infused RAG improves over Vanilla RAG (Table 1, Qwen2.5-7B)") for d in DATASETS[:4]),
    *(("t1.kg_infused_over_vanilla_qe." + d, "Table 1", d, ("kg-infused", 2), ">", ("vanilla-qe", None), "avg",
       "§5.1: KG-based expansion beats LLM-only expansion (Table 1)") for d in DATASETS[:4]),
    *(("t1.retrieval_over_nor." + d, "Table 1", d, ("vanilla-rag", None), ">", ("nor", None), "avg",
       "Table 1: retrieval helps the model (Vanilla RAG above NoR)") for d in DATASETS[:4]),
    *(("t3.kg_qe_helps." + d, "Table 3", d, ("kg-qe-only", 2), ">", ("vanilla-rag", None), "avg",
       "§5.3: KG-Based QE alone improves over Vanilla RAG") for d in DATASETS[:4]),
    *(("t3.kg_aug_helps." + d, "Table 3", d, ("kg-aug-only", 2), ">", ("vanilla-rag", None), "avg",
       "§5.3: KG-Aug Gen alone improves over Vanilla RAG") for d in DATASETS[:4]),
    *(("t4.kg_qe_recall." + d, "Table 4", d, ("kg-qe-only", 1), ">", ("vanilla-rag", None), "recall@6",
       "§5.4: KG-Based QE raises R@6 by 4.0 to 8.4 points") for d in DATASETS[:4]),
    ("f2.round2_over_round1.2wiki", "Figure 2", "2wiki", ("kg-infused", 2), ">", ("kg-infused", 1), "avg",
     "§5.4: 2WikiMQA sees clear gains in the second activation round"),
    ("f2.round1_peak.hotpotqa", "Figure 2", "hotpotqa", ("kg-infused", 1), ">", ("kg-infused", 2), "avg",
     "§5.4: HotpotQA peaks at the first activation round, followed by a slight drop"),
    *BOTH_STRONGEST_CLAIMS,
    # §5.4, read off Figure 2 (no printed values); Table 3's 2-round rows give the numbers.
    *(("f2.kg_aug_over_kg_qe." + d, "Figure 2", d, ("kg-aug-only", 2), ">", ("kg-qe-only", 2), "avg",
       "§5.4: on 2WikiMQA and MuSiQue the KG-Aug Gen module adds more to the method than KG-Based QE; Figure 2 "
       f"prints no values; Table 3 (2 rounds, Avg): KG-Aug Gen {TABLE3['+ KG-Aug Gen (w/ 2-Round)'][d]['avg']} vs "
       f"KG-Based QE {TABLE3['+ KG-Based QE (w/ 2-Round)'][d]['avg']}") for d in ("2wiki", "musique")),
    ("f2.kg_qe_over_full.hotpotqa", "Figure 2", "hotpotqa", ("kg-qe-only", 2), ">", ("kg-infused", 2), "avg",
     "§5.4: on HotpotQA, KG-Based QE on its own does better than the full method; Figure 2 prints no values, and "
     f"Table 3's 2-round rows show the opposite (Avg: KG-Based QE {TABLE3['+ KG-Based QE (w/ 2-Round)']['hotpotqa']['avg']}"
     f" vs +Both {TABLE3['+ Both (w/ 2-Round)']['hotpotqa']['avg']})"),
)

# A mechanism claim of this study (issue 56), not a row of the paper: the same method on the same
# questions over the KG of the claims (2wiki-evidence-full, every real 2Wiki triple) and over a placebo
# KG without the evaluated questions' own facts (2wiki-evidence-heldout). If the KG is what helps, the
# full KG beats its placebo. Sides are (variant, rounds, KG role): "kg" is the notebook's KG, "placebo"
# its `placebo_kg` (notebook 21; `tables.check_placebo_claims`). It belongs to KG-Infused RAG's Holm
# family and is testable by the rule stated before its runs (`report.mechanism.KG_VERDICT_RULE`).
MECHANISM_CLAIMS = (
    ("m1.kg_over_placebo.2wiki", "Mechanism (placebo KG)", "2wiki", ("kg-infused", 2, "kg"), ">",
     ("kg-infused", 2, "placebo"), "avg",
     "same method, same questions: KG-Infused RAG on the full 2Wiki KG beats it on the held-out (placebo) KG"),
)

# Claims of the paper that no notebook tests here: StrategyQA's columns of Tables 1 and 3 (§5.1,
# "Performance on Commonsense QA Task") and the effect of DPO (§5.1, "Effect of DPO Training").
# They are counted in the report's claims accounting (`report.accounting`), read "not run" with
# the reason, so the count covers every claim of the paper.
UNTESTED_CLAIMS = (
    *((f"t1.{cid}.strategyqa", "Table 1", "strategyqa", a, ">", b, "acc",
       "§5.1: on StrategyQA our method still brings positive improvements over baselines")
      for cid, a, b in (("kg_infused_over_vanilla_rag", ("kg-infused", 2), ("vanilla-rag", None)),
                        ("kg_infused_over_vanilla_qe", ("kg-infused", 2), ("vanilla-qe", None)),
                        ("kg_infused_over_nor", ("kg-infused", 2), ("nor", None)))),
    *((f"t3.{cid}.strategyqa", "Table 3", "strategyqa", (m, 2), ">", ("vanilla-rag", None), "acc",
       "§5.3 / Table 3: each KG module alone improves over Vanilla RAG (StrategyQA column)")
      for cid, m in (("kg_qe_helps", "kg-qe-only"), ("kg_aug_helps", "kg-aug-only"))),
    *(("t1.dpo_helps." + d, "Table 1", d, ("kg-infused+dpo", 2), ">", ("kg-infused", 2), "acc" if d == "strategyqa" else "avg",
       "§5.1: in most cases, models perform better after lightweight DPO tuning") for d in DATASETS),
)

# How our KG-Infused RAG reproduction differs from the paper, for the study report's single list.
DEVIATIONS = (
    "KG-Infused RAG: the KG is a 2Wiki slice, not Wikidata5M-KG (21M triples). The runs committed before issue 56, "
    "and notebooks 22-25 still, use 2wiki-evidence-heldout (Wikidata facts of 2Wiki dev questions other than the "
    "evaluated ones, 8,281 triples), whose claims are not testable; the reference profiles' notebook 21 uses "
    "2wiki-evidence-full (every real 2Wiki triple here, 9,505: the evaluated questions' evidence is 14.2% of its "
    "triples and would be 0.0064% of Wikidata5M-KG's; `kgrag kg coverage`) with 2wiki-evidence-heldout as a "
    "placebo arm (m1.kg_over_placebo.2wiki); 2wiki-evidence-oracle, which holds every evaluated question's own "
    "gold facts, is reported only as an upper bound.",
    "KG-Infused RAG: the corpus is each dataset's pooled question contexts (2Wiki: HippoRAG's 6,119 passages), "
    "not Wikipedia-2018 (21M passages), so retrieval is far easier and recall far higher than the paper's.",
    "KG-Infused RAG: the evaluated questions are not the paper's. HotpotQA is AMOR's test500 file: in the "
    "cpu-reference sample of 100, only 38 questions have all their gold paragraphs in the pooled corpus and 11 "
    "have none, so part of the HotpotQA gap is retrieval that cannot succeed. 2Wiki is the subset of dev "
    "questions whose gold titles are in HippoRAG's corpus (DERIVED_..._354.json), not the IRCoT subsets the "
    "paper follows: a selection for answerable questions, which raises every method's score.",
    "KG-Infused RAG: the seed index holds, per KG entity, a description built here (the paper uses Wikidata5M's "
    "entity descriptions): a corpus passage where the KG builder found one for the entity, else the entity's "
    "triples verbalised (kg_sources.seed_candidates). On "
    "2wiki-evidence-oracle this puts the evaluated questions' gold facts into the seed index itself, one more "
    "reason the oracle rows are an upper bound only. On 2wiki-evidence-full the seed texts are real passages only "
    "(an entity without one is never a seed; one with a passage and no triple is a seed that activates nothing).",
    "KG-Infused RAG: DPO (§3.7) on CPU trains a LoRA adapter on the embedded 0.5B model dequantized to a "
    "transformers folder (fp32, a few dozen pairs, the deviations from Table 20 listed by notebook 27), on pairs "
    "judged by the same 0.5B model instead of GPT-4o-mini; the +DPO rows (notebook 27) set the trained model beside "
    "the same dequantized base through the same backend. Tables 3 / Figure 2 (notebooks 22, 23) use the base model, "
    "where the paper uses the DPO-trained LLaMA3.1-8B.",
    "KG-Infused RAG: Table 2 (Self-RAG plug-in) needs a Self-RAG model with its reflection tokens "
    "(selfrag-llama2-7b, a GPU); on CPU it is not run, and the methods refuse any other model. Table 21 "
    "(Self-Ask) runs the 0.5B model for Self-Ask and the KG stages, with our own few-shot demonstrations.",
    "KG-Infused RAG: max new tokens per stage cut from 1,000 to the profile's; retriever MiniLM, not "
    "Contriever-MS MARCO.",
    "KG-Infused RAG: yes/no comparison questions of 2Wiki and HotpotQA get the open-answer prompt (the paper "
    "gives the yes/no prompt to StrategyQA only); F1 is the max over golds (the paper's code kept the last).",
    "KG-Infused RAG: the DPO preference pairs come from 2Wiki dev4000 questions (none of which any run evaluates), not from a training split as the paper's; notebook 26 says so.",
    "KG-Infused RAG: our Self-RAG plug-in differs from the official short-form inference: 20 log-probabilities read per token (official: 5,000), relevance read at the first relevance token (official: position 0), w_use 0.5 (official command: 1.0), and the answer cut at its first line.",
    "KG-Infused RAG: the committed 0.5B runs (results/reference) were made with an answer prompt containing the words \"no explanation, no full sentence\", which the 0.5B model echoed in 6-11 of 100 HotpotQA answers (substring Acc then credits a gold \"no\" falsely); the prompt now reads \"Reply with the answer alone, in as few words as it takes.\" and the 1.5B re-runs (results/reference-1.5b) use it.",
    "HotpotQA and 2Wiki F1 follow the official scripts (hotpot_evaluate_v1.py; 2Wiki's v1.1 copies it): F1 0 when either side is yes/no/noanswer and they differ. The committed HotpotQA runs were rescored from their per-question files (F1 0.66-1.00 points lower); the F1 intervals of those runs are today's bootstrap.",
)


# ------------------------------------------------------------------ plug-in tables (§5.2, App. F.1)
# Table 2 (§5.2): KG-Infused RAG as a plug-in to Self-RAG. Self-RAG runs selfrag-llama2-7b
# (§4.3); the plug-in module runs DPO-trained LLaMA3.1-8B (the table's caption).
TABLE2_SOURCE = "Table 2 (§5.2): plug-in results (%) of Self-RAG"
TABLE2_MODELS = {"base": "selfrag-llama2-7b", "plugin": "DPO-trained LLaMA3.1-8B (the KG-Infused RAG module)"}
TABLE2 = {
    "Self-RAG (selfrag-llama2-7b)": _row(26.2, 33.7, 24.0, 28.0, 23.0, 27.3, 22.0, 24.1, 4.4, 10.4, 3.8, 6.2,
                                         8.8, 17.3, 8.0, 11.4, 58.0),
    "+ KG-Infused RAG (w/ 2-Round)": _row(26.6, 32.1, 22.8, 27.2, 35.2, 39.6, 30.0, 34.9, 9.4, 15.8, 8.8, 11.3,
                                          27.2, 32.8, 24.8, 28.3, 63.8),
    "+ KG-Infused RAG (w/ 3-Round)": _row(25.8, 32.7, 21.6, 26.7, 38.8, 41.0, 31.4, 37.1, 10.8, 17.4, 9.0, 12.4,
                                          25.6, 31.9, 22.4, 26.6, 63.4),
}

# Table 21 (Appendix F.1): KG-Infused RAG as a plug-in to Self-Ask. §4.3: "For the Self-Ask
# baseline, Qwen2.5-7B is selected"; the caption: the plug-in module is DPO-trained LLaMA3.1-8B.
TABLE21_SOURCE = "Table 21 (Appendix F.1): plug-in results (%) of Self-Ask"
TABLE21_MODELS = {"base": "Qwen2.5-7B", "plugin": "DPO-trained LLaMA3.1-8B (the KG-Infused RAG module)"}
TABLE21 = {
    "Self-Ask": _row(36.6, 42.6, 35.4, 38.2, 39.2, 42.4, 33.6, 38.4, 11.8, 16.7, 7.8, 12.1,
                     32.8, 40.1, 29.6, 34.2, 65.6),
    "+ KG-Infused RAG (w/ 1-Round)": _row(34.2, 40.3, 31.8, 35.4, 44.8, 45.9, 35.2, 42.0, 13.2, 18.9, 10.8, 14.3,
                                          32.0, 38.5, 28.0, 32.8, 69.6),
    "+ KG-Infused RAG (w/ 2-Round)": _row(34.8, 41.1, 32.0, 36.0, 41.8, 43.1, 33.0, 39.3, 12.6, 17.8, 9.0, 13.1,
                                          30.4, 37.0, 26.4, 31.3, 69.2),
    "+ KG-Infused RAG (w/ 3-Round)": _row(35.6, 41.6, 33.0, 36.7, 40.6, 41.3, 30.8, 37.6, 12.4, 18.0, 9.2, 13.2,
                                          33.6, 40.5, 30.4, 34.8, 68.2),
}

# The text's reading of the two tables, for holding against ours.
PLUGIN_TEXT_CLAIMS = {
    "table2": ("§5.2: with 2-round activation, the plug-in raises Self-RAG's Avg on four datasets by 5.1% to "
               "16.9%; HotpotQA's Avg drops by 0.8%."),
    "table21": ("Appendix F.1: Self-Ask + KG-Infused RAG gives moderate gains on four datasets and a slight drop "
                "on HotpotQA; smaller and less consistent gains than with Self-RAG."),
}
# A plug-in claim's relation follows the paper's own numbers: '>' or '<' when the plug-in row is
# at least this many points (Avg; Acc on StrategyQA) from its base row, '~' (no difference) below.
PLUGIN_CLAIM_MIN_GAP = CLAIM_MIN_GAP


def _plugin_claims(table: str, source: str, rows: dict, base_label: str, base: str, plugin: str) -> tuple:
    out = []
    for label, per in rows.items():
        if label == base_label:
            continue
        rounds = int(label.split("w/ ")[1].split("-Round")[0])
        for d in DATASETS:
            m = "acc" if d == "strategyqa" else "avg"
            gap = round(per[d][m] - rows[base_label][d][m], 1)
            rel = ">" if gap >= PLUGIN_CLAIM_MIN_GAP else "<" if gap <= -PLUGIN_CLAIM_MIN_GAP else "~"
            out.append((f"{table}.{plugin}.r{rounds}.{d}", table.replace("table", "Table "), d, (plugin, rounds), rel,
                        (base, None), "avg",
                        f"{source}: {label} {per[d][m]} vs {base_label} {rows[base_label][d][m]} "
                        f"({'Acc' if m == 'acc' else 'Avg'}, {gap:+.1f})"))
    return tuple(out)


# Sides are (our method name, rounds); the metric 'avg' is Acc alone on StrategyQA.
PLUGIN_CLAIMS = (
    *_plugin_claims("table2", TABLE2_SOURCE, TABLE2, "Self-RAG (selfrag-llama2-7b)", "self-rag", "self-rag-kg-infused"),
    *_plugin_claims("table21", TABLE21_SOURCE, TABLE21, "Self-Ask", "self-ask", "self-ask-kg-infused"),
)
