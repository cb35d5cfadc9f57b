"""Report of KG-Infused RAG (Wu et al.): Tables 1, 3, 4 and 5, Figure 2 and the case study.

Notebooks 20-25 read it as one namespace beside the paper's numbers:

    from kgrag_lib.report import kg_infused as kg_infused_report
    from kgrag_lib.report.kg_infused import paper_numbers
    kg_infused_report.with_deltas(kg_infused_report.layout(rows), ...), kg_infused_report.paper_table1(), paper_numbers.TABLE1_SOURCE
"""

from . import case_study, figures, paper_numbers, tables
from .case_study import case_study_markdown, pick_case, rounds_table, split_triple, subgraph
from .figures import draw_subgraph, plot_out_degrees, plot_recall, plot_rounds, plot_side_by_side
from .tables import (
    ABLATION_LABELS,
    CORPUS_LOCAL,
    KG_DESCRIPTIONS,
    METRIC_LABELS,
    RETRIEVED_KEYS,
    ROUND_VARIANTS,
    VARIANT_LABELS,
    Setting,
    activation_depth,
    check_claims,
    check_placebo_claims,
    answers_frame,
    corpus_description,
    delta,
    gold_sources,
    kg_difference,
    avg_ci95,
    grid_rows,
    layout,
    metrics_for,
    out_degrees,
    paper_layout,
    paper_table1,
    paper_table3,
    paper_table4,
    question_values,
    recall_rows,
    recall_runs,
    recall_summary_rows,
    recall_table,
    relation_frequencies,
    removed_pct,
    result_row,
    retrieved_ids,
    round_label,
    rounds_frame,
    scores,
    side_by_side,
    table5_frame,
    with_deltas,
)

__all__ = [
    "ABLATION_LABELS", "CORPUS_LOCAL", "KG_DESCRIPTIONS", "METRIC_LABELS", "RETRIEVED_KEYS",
    "ROUND_VARIANTS", "VARIANT_LABELS", "Setting", "activation_depth", "check_claims", "check_placebo_claims", "answers_frame", "case_study",
    "case_study_markdown", "corpus_description", "delta", "draw_subgraph", "figures", "gold_sources",
    "avg_ci95", "grid_rows", "layout", "metrics_for", "out_degrees",
    "paper_layout", "paper_numbers", "paper_table1", "paper_table3", "paper_table4", "question_values", "pick_case", "plot_out_degrees",
    "plot_recall", "plot_rounds", "plot_side_by_side", "recall_rows", "recall_runs", "recall_summary_rows",
    "recall_table", "relation_frequencies", "removed_pct", "result_row", "retrieved_ids", "round_label",
    "rounds_frame", "rounds_table", "scores", "side_by_side", "split_triple", "subgraph",
    "table5_frame", "tables", "with_deltas",
]
