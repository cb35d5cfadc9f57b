"""Report of KG-RAG on MetaQA (Linders & Tomczak): tables, figures, traces and error categories.

    from kgrag_lib.report.metaqa import grouped_bars, check_claims
    from kgrag_lib.report.metaqa.paper_numbers import paper_number

The published numbers stay in `paper_numbers` (not re-exported: its function `paper_numbers`
would hide the module of the same name).
"""

from . import case_study, errors, figures, paper_numbers, tables
from .case_study import pick_example, subquestion_counts, subquestions, trace_text
from .errors import CATEGORIES, CATEGORY_COLORS, categorize, categorize_rows, category_table, plot_categories
from .figures import PALETTE, grouped_bars, plot_candidate_counts, plot_degree_distribution, plot_subquestion_counts
from .tables import (
    METHOD_LABELS,
    beside_paper,
    candidate_counts,
    check_claims,
    config_label,
    dataset_hops,
    dataset_label,
    degree_summary,
    entity_degrees,
    method_label,
    relation_counts,
    top_entities,
)

__all__ = [
    "CATEGORIES", "CATEGORY_COLORS", "METHOD_LABELS", "PALETTE", "beside_paper", "candidate_counts", "case_study",
    "categorize", "categorize_rows", "category_table", "check_claims", "config_label", "dataset_hops",
    "dataset_label", "degree_summary", "entity_degrees", "errors", "figures", "grouped_bars", "method_label",
    "paper_numbers", "pick_example", "plot_candidate_counts", "plot_categories", "plot_degree_distribution",
    "plot_subquestion_counts", "relation_counts", "subquestion_counts", "subquestions", "tables", "top_entities",
    "trace_text",
]
