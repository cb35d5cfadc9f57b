"""KG-Infused RAG as a plug-in (Wu et al. §4.2, §5.2, Appendix F.1): Table 2 (Self-RAG) and
Table 21 (Self-Ask) in the paper's layout, ours beside the paper's.

Our runs are the methods `self-rag` / `self-rag-kg-infused` and `self-ask` /
`self-ask-kg-infused`; the plug-in rows are labelled by their activation rounds as the paper
writes them ("+ KG-Infused RAG (w/ 2-Round)"). The paper's tables mix models (Self-RAG on
selfrag-llama2-7b, Self-Ask on Qwen2.5-7B, the plug-in module on DPO-trained LLaMA3.1-8B), so
every table names its models: ours in the `source` level of the side-by-side frame and in the
caption, the paper's from `paper_numbers.TABLE2_MODELS` / `TABLE21_MODELS`. Whether a
plug-in row really beats its base is judged on paired per-question scores
(`check_plugin_claims`: confirmed, refuted or not separable at this n), not on the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ...errors import ConfigError
from ..tables import check_paired_claims, ci_cell
from . import paper_numbers
from .tables import (METRIC_LABELS, Setting, layout, metrics_for, paper_layout, question_values, result_row,
                     side_by_side, with_deltas)

PLUGIN_ROW = "+ KG-Infused RAG"


@dataclass(frozen=True)
class PluginTable:
    """One plug-in table: our base and plug-in method names, and the paper's transcription."""

    key: str                 # "2" | "21"
    base: str                # our base method, e.g. "self-ask"
    plugin: str              # our plug-in method, e.g. "self-ask-kg-infused"
    base_label: str          # the base row's label in our layout (the paper's without its model)
    paper_base_label: str    # the base row's label as the paper prints it
    paper: Mapping[str, Any]
    source: str
    paper_models: Mapping[str, str]

    @property
    def methods(self) -> tuple[str, str]:
        return (self.base, self.plugin)

    @property
    def title(self) -> str:
        return f"Table {self.key}"

    def paper_model_text(self) -> str:
        return f"{self.base_label}: {self.paper_models['base']}; {PLUGIN_ROW}: {self.paper_models['plugin']}"


TABLES = {
    "2": PluginTable("2", "self-rag", "self-rag-kg-infused", "Self-RAG", "Self-RAG (selfrag-llama2-7b)",
                     paper_numbers.TABLE2, paper_numbers.TABLE2_SOURCE, paper_numbers.TABLE2_MODELS),
    "21": PluginTable("21", "self-ask", "self-ask-kg-infused", "Self-Ask", "Self-Ask",
                      paper_numbers.TABLE21, paper_numbers.TABLE21_SOURCE, paper_numbers.TABLE21_MODELS),
}
METHOD_TABLE = {m: t for t in TABLES.values() for m in t.methods}


def table_spec(table: str | int | PluginTable) -> PluginTable:
    """A plug-in table by its number: 2 (Self-RAG) or 21 (Self-Ask); 'Table 21' is accepted."""
    if isinstance(table, PluginTable):
        return table
    key = str(table).strip().lower().removeprefix("table").strip()
    if key not in TABLES:
        raise ConfigError(f"plug-in table {table!r}: expected 2 (Self-RAG) or 21 (Self-Ask)")
    return TABLES[key]


def plugin_label(method: str, rounds: int | None = None, full: bool = False) -> str:
    """The paper's row name: 'Self-Ask', '+ KG-Infused RAG (w/ 2-Round)'; `full` prefixes the
    base ('Self-Ask + KG-Infused RAG (w/ 2-Round)') for statements outside the table."""
    if method not in METHOD_TABLE:
        raise ConfigError(f"method {method!r} is not a plug-in table method; expected one of {', '.join(METHOD_TABLE)}")
    t = METHOD_TABLE[method]
    if method == t.base:
        return t.base_label
    label = f"{PLUGIN_ROW} (w/ {rounds}-Round)" if rounds else PLUGIN_ROW
    return f"{t.base_label} {label}" if full else label


def _order(t: PluginTable, labels: Iterable[str]) -> list[str]:
    """Base first, then the plug-in rows by rounds (unknown rounds last)."""
    def key(label: str) -> tuple[int, int]:
        if label == t.base_label:
            return (0, 0)
        rounds = label.split("w/ ")[1].split("-Round")[0] if "w/ " in label else ""
        return (1, int(rounds)) if rounds.isdigit() else (2, 0)

    return sorted(dict.fromkeys(labels), key=key)


# ------------------------------------------------------------------------- rows
def plugin_row(method: str, dataset: str, metrics: Mapping[str, Any], *, rounds: int | None = None,
               setting: Setting | None = None, **extra: Any) -> dict[str, Any]:
    """One flat row (for the layouts and `write_summary`) from a run's metrics dict, labelled
    as the paper labels the plug-in tables; `rounds` only for the plug-in method."""
    t = METHOD_TABLE.get(method)
    if t is None:
        raise ConfigError(f"method {method!r} is not a plug-in table method; expected one of {', '.join(METHOD_TABLE)}")
    rounds = rounds if method == t.plugin else None
    row = result_row(method, dataset, metrics, setting=setting, **extra)
    row.update(label=plugin_label(method, rounds), rounds=rounds, table=t.title)
    return row


def _run_rounds(run: Any, cell: Any) -> int | None:
    """The rounds of a grid run: its override, else what its predictions' traces recorded."""
    rounds = dict(run.cfg).get("rounds")
    if rounds is None:
        for r in cell.rows:
            rounds = ((r.get("trace") or {}).get("config") or {}).get("rounds")
            if rounds is not None:
                break
    return rounds


def plugin_grid_rows(report: Any, runs: Sequence[Any], setting: Setting | None = None) -> list[dict[str, Any]]:
    """`plugin_row` per (plug-in table run, dataset) of a grid (`kgrag_lib.grid.run_grid`);
    runs of other methods are skipped. `requests_per_q` counts cached requests too."""
    out = []
    for run in runs:
        if run.method not in METHOD_TABLE:
            continue
        for cell in (c for c in report.cells if c.run == run):
            row = plugin_row(run.method, cell.dataset, cell.metrics, rounds=_run_rounds(run, cell), setting=setting,
                             config=run.label)
            row["requests_per_q"] = (cell.metrics.get("cost_per_question") or {}).get("llm_requests")
            out.append(row)
    return out


def _rows_of(t: PluginTable, rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("variant") in t.methods]


# ------------------------------------------------------------------------- tables
def ours_table(rows: Iterable[Mapping[str, Any]], table: str | int, datasets: Sequence[str] | None = None
               ) -> pd.DataFrame:
    """Our rows of one plug-in table in the paper's layout (other methods' rows are ignored)."""
    t = table_spec(table)
    mine = _rows_of(t, rows)
    return layout(mine, datasets, order=_order(t, (r["label"] for r in mine)))


def paper_table(table: str | int, datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """The paper's Table 2 or 21, the base row under our label (its model is in
    `paper_models` and in every caption)."""
    t = table_spec(table)
    rows = {(t.base_label if label == t.paper_base_label else label): per for label, per in t.paper.items()}
    return paper_layout(rows, datasets)


def with_plugin_deltas(df: pd.DataFrame, table: str | int) -> pd.DataFrame:
    """The table with a `Δ plug-in row → base` line per plug-in row it holds."""
    t = table_spec(table)
    return with_deltas(df, [r for r in df.index if r != t.base_label], t.base_label)


def plugin_side_by_side(rows: Iterable[Mapping[str, Any]], table: str | int, model: str,
                        datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """Ours above the paper's, both in the paper's layout, the models named in the `source` level
    (ours: `model`; the paper's: per row kind). Only the datasets we ran are kept."""
    t = table_spec(table)
    ours = ours_table(rows, t, datasets)
    return side_by_side(ours, paper_table(t), ours_name=f"ours ({model})", paper_name=f"paper ({t.paper_model_text()})")


def interval_table(rows: Iterable[Mapping[str, Any]], table: str | int, datasets: Sequence[str] | None = None
                   ) -> pd.DataFrame:
    """The layout with 'value [low, high]' cells (95% intervals from the runs' `<metric>_ci95`);
    Avg has no interval of its own, its per-question paired test is `check_plugin_claims`."""
    t = table_spec(table)
    mine = _rows_of(t, rows)
    frame = ours_table(mine, t, datasets).astype(object)
    for r in mine:
        if r["label"] not in frame.index:
            continue
        for m in metrics_for(r["dataset"]):
            col = (paper_numbers.DATASET_LABELS.get(r["dataset"], r["dataset"]), METRIC_LABELS[m])
            if col in frame.columns:
                frame.loc[r["label"], col] = ci_cell(r, m)
    return frame.fillna("–")


def plugin_caption(table: str | int, setting: Setting) -> str:
    """What both halves of a plug-in table were made with: our setting, then the paper's."""
    t = table_spec(table)
    ns = ", ".join(f"{paper_numbers.DATASET_LABELS[d]} {paper_numbers.SAMPLE_SIZES[d]}" for d in paper_numbers.DATASETS)
    return (setting.caption(f"{t.title} layout ({t.base_label} plug-in)") +
            f"\npaper: {t.source}; models {t.paper_model_text()}; KG {paper_numbers.SETUP['kg']}; corpus {paper_numbers.SETUP['corpus']}; "
            f"n = {ns}")


# ------------------------------------------------------------------------- claims
def check_plugin_claims(report: Any, table: str | int | None = None, alpha: float = 0.05,
                        margin: float = 5.0) -> pd.DataFrame:
    """Each plug-in row against its base, per dataset, as the paper's numbers relate them
    (`paper_numbers.PLUGIN_CLAIMS`), tested on a grid's per-question scores paired on the same
    questions: confirmed, refuted, or not separable at this n; 'not run' where the grid lacks a
    side. A side is (method, rounds); rounds None matches any run of the method."""
    claims = paper_numbers.PLUGIN_CLAIMS
    if table is not None:
        title = table_spec(table).title
        claims = tuple(c for c in claims if c[1] == title)

    def side_values(side: tuple, dataset: str, metric: str) -> dict[str, float] | None:
        method, rounds = side
        cells = [c for c in report.cells if c.dataset == dataset and c.run.method == method
                 and (rounds is None or _run_rounds(c.run, c) == rounds)]
        return question_values(cells[0].rows, metric) if cells else None

    return check_paired_claims(claims, side_values, lambda side: plugin_label(side[0], side[1], full=True),
                               alpha=alpha, margin=margin)
