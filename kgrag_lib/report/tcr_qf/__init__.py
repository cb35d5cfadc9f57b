"""Report of TCR-QF (Huang et al.): the KG statistics, Table 1, Table 2 with Fig. 3, and Table 3
with Fig. 4.

Notebooks 40-43 read it as one namespace beside the paper's numbers:

    from kgrag_lib.report import tcr_qf as tcr_qf_report
    from kgrag_lib.report.tcr_qf import paper_numbers
    tcr_qf_report.table1(tcr_qf_report.result_rows(report)), paper_numbers.TABLE1_SOURCE
"""

from . import figures, paper_numbers, tables
from .figures import plot_kg_growth, plot_rounds, plot_table
from .tables import (
    CORPUS,
    answer_at,
    answers_frame,
    caption,
    check_claims,
    claim_verdicts,
    cost_note,
    dataset_label,
    final_kg_size,
    intervals,
    journal,
    kg_cost,
    kg_growth,
    kg_rows,
    kg_table,
    last_round,
    origin_round,
    paper_growth,
    paper_kg_scale,
    paper_table,
    question_rounds,
    question_values,
    rejected_frame,
    rejection_reasons,
    result_rows,
    round_scores,
    rounds_frame,
    rounds_pivot,
    settings_note,
    stopped_counts,
    stopped_table,
    system_label,
    table1,
    table2,
    table3,
    with_metric,
)

__all__ = [
    "CORPUS", "answer_at", "answers_frame", "caption", "check_claims", "claim_verdicts", "cost_note", "dataset_label",
    "figures", "final_kg_size", "intervals", "journal", "kg_cost", "kg_growth", "kg_rows", "kg_table", "last_round",
    "origin_round", "paper_growth", "paper_kg_scale", "paper_numbers", "paper_table", "plot_kg_growth",
    "plot_rounds", "plot_table", "question_rounds", "question_values", "rejected_frame", "rejection_reasons",
    "result_rows", "round_scores", "rounds_frame", "rounds_pivot", "settings_note", "stopped_counts", "stopped_table",
    "system_label", "table1",
    "table2", "table3", "tables", "with_metric",
]
