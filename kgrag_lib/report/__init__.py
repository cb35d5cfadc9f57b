"""Tables in the papers' layouts and figures, from run outputs.

Shared by every paper: `tables` (seed aggregation, 'mean ± std', JSON rows, markdown) and
`figures` (where figures are saved). One package per paper, the layout a new paper copies:
`<paper>/tables.py` (labels, tables in the paper's layouts, ours beside the paper's),
`<paper>/figures.py` (matplotlib figures), `<paper>/paper_numbers.py` (the published numbers,
each with its source), plus modules for what only that paper does (`case_study.py`,
`metaqa/errors.py`). A paper's `__init__` re-exports its tables, figures and extra modules;
`paper_numbers` stays a namespace (`P.TABLE1`) so the paper's numbers never read as ours.
"""
