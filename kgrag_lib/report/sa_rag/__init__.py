"""Report of SA-RAG (Pavlović et al.): Table 1, the index statistics, Figures 4 and 5 and the
recall sweep over c x tau_a.

Notebooks 30-33 read it as one namespace beside the paper's numbers:

    from kgrag_lib.report import sa_rag as sa_rag_report
    from kgrag_lib.report.sa_rag import paper_numbers
    sa_rag_report.table1(sa_rag_report.result_rows(report, judged), "phi4"), paper_numbers.TABLE1_SOURCE
"""

from . import activation, figures, paper_numbers, tables
from .activation import (
    activation_frame,
    activation_summary,
    by_distance,
    c_frames,
    case_scores,
    distances,
    entity_lookup,
    golden_entities,
    golden_names,
    link_frame,
    memoized,
    pick_question,
    recall_table,
    sweep_rows,
    with_settings,
)
from .figures import draw_activation, plot_c_dynamics, plot_recall_vs_context, plot_table1, subgraph_view
from .tables import (
    CORPUS,
    Judged,
    answers_frame,
    caption,
    check_claims,
    claim_verdicts,
    failures_frame,
    index_rows,
    index_table,
    intervals,
    JUDGE_UNINFORMATIVE,
    judge_cells,
    judge_controls,
    paper_row,
    paper_table1,
    question_values,
    result_rows,
    system_label,
    table1,
    type_counts,
    with_metric,
)

__all__ = [
    "CORPUS", "Judged", "activation", "activation_frame", "activation_summary", "answers_frame", "by_distance",
    "c_frames", "caption", "case_scores", "check_claims", "claim_verdicts", "distances", "draw_activation",
    "entity_lookup", "failures_frame", "figures", "golden_entities", "golden_names", "index_rows", "index_table",
    "intervals", "JUDGE_UNINFORMATIVE", "judge_cells", "judge_controls", "link_frame", "memoized", "paper_numbers", "paper_row", "paper_table1",
    "pick_question", "plot_c_dynamics", "plot_recall_vs_context", "plot_table1", "question_values", "recall_table",
    "result_rows", "subgraph_view", "sweep_rows", "system_label", "table1", "tables", "type_counts", "with_metric",
    "with_settings",
]
