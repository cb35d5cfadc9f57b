"""The cross-method table (notebook 50, REPORT's first table): every method on the same
questions, one row each, with its scores, its cost per question and the health of its
mechanism; the LLM-built KGs' one-off build cost apart; a figure of F1 per method.

The rows are flat dicts, written to the notebook's summary.json (`method_rows`, `kg_build_rows`)
and read back by the report (`from_summaries`), so REPORT.md is made from files alone. A row's
mechanism health is `mechanism.run_health` of its run folder, the same verdict the claims read:
a method whose mechanism ran for fewer than half its questions is marked `mechanism_dead`, so
its score is read as the fallback's, not the method's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from ..methods.registry import get_method
from ..rundir import MANIFEST_FILE
from . import mechanism
from .figures import add_note
from .papers import PAPER_SETUP
from .tables import COST_KEYS

TABLE = "cross-method"                 # the `table` of a method row in summary.json
KG_TABLE = "cross-method KG build"     # the `table` of a KG build row
TABLES = (TABLE, KG_TABLE)
SCORES = ("em", "f1", "acc")
# The cost columns, named as `study.read_run` names a run's cost per question.
COST_COLUMNS = tuple(f"{k}_per_q" for k in COST_KEYS)
SHOWN = {"method": "method", "paper": "paper", "n": "n", "em": "EM", "f1": "F1", "acc": "Acc",
         "llm_requests_per_q": "LLM calls / q", "llm_total_prompt_tokens_per_q": "prompt tokens / q",
         "llm_total_completion_tokens_per_q": "completion tokens / q", "seconds_per_q": "seconds / q",
         "failed": "failed", "mechanism": "mechanism health"}
KG_SHOWN = {"paper": "paper", "kg": "KG", "chunks": "chunks", "llm_requests": "LLM calls", "prompt_tokens":
            "prompt tokens", "completion_tokens": "completion tokens", "build_seconds": "build seconds",
            "triples": "triples", "questions": "questions", "build_seconds_per_q": "build seconds / q"}
NO_SIGNAL = "–"   # a method with no mechanism beyond retrieval and answering (NoR, Naive RAG, ...)


def paper_of(family: str) -> str:
    """The paper a study family reproduces (`papers.PAPER_SETUP`), or the family itself."""
    return str(PAPER_SETUP.get(family, {}).get("paper", family))


def health_cells(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run's mechanism health as three cells: the text shown, the questions it ran for
    ("x of n", None where the method has no signal or its files do not record it), and whether
    it ran for fewer than half (the rule of `mechanism.testability`)."""
    h = mechanism.run_health(run)
    signal, ran, n = h.get("signal") or "", h.get("ran"), h.get("n") or 0
    if not signal:
        return {"mechanism": NO_SIGNAL, "mechanism_ran": None, "mechanism_dead": None}
    if ran is None:
        return {"mechanism": f"{signal}: {h.get('note') or mechanism.NOT_RECORDED}", "mechanism_ran": None,
                "mechanism_dead": None}
    extra = [f"{k} {h[k]}" for k in ("q' != q", "feedback produced triples") if h.get(k) not in (None, "–")]
    dead = mechanism.ran_too_rarely(ran, n)
    text = f"{signal}: {ran} of {n}" + (f" ({'; '.join(extra)})" if extra else "") + (" — DEAD" if dead else "")
    return {"mechanism": text, "mechanism_ran": f"{ran} of {n}", "mechanism_dead": dead}


def mechanism_split(rows: Iterable[Mapping[str, Any]], exclude: Iterable[str] = ()
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(dead, alive): the method rows with a mechanism signal, split by whether it ran for fewer than
    half the questions (`mechanism_dead`), each as {method, ran ("x of n")}, in the rows' order; rows
    without a signal and the methods in `exclude` left out. The findings read their quantifiers from
    this, not from a sentence written once."""
    skip = set(exclude)
    dead: list[dict[str, Any]] = []
    alive: list[dict[str, Any]] = []
    for r in rows:
        if r.get("table", TABLE) != TABLE or r.get("method") in skip or r.get("mechanism_dead") is None:
            continue
        (dead if r["mechanism_dead"] else alive).append({"method": r["method"], "ran": r.get("mechanism_ran")})
    return dead, alive


def method_rows(report: Any, **labels: Any) -> list[dict[str, Any]]:
    """One summary row per cell of the notebook's grid (`grid.GridReport`): method, paper, the
    KG and corpus it read, n, failed, EM / F1 / Acc (percent) with 95% intervals, the LLM calls,
    tokens and seconds per question, and its mechanism health."""
    out = []
    for cell in report.cells:
        m = cell.metrics
        cost = m.get("cost_per_question") or {}
        man = json.loads((Path(cell.out) / MANIFEST_FILE).read_text(encoding="utf-8"))
        cfg = (man.get("config") or {}).get("method_config") or {}
        spec = get_method(cell.run.method)
        run = {"folder": str(cell.out), "method": cell.run.method, "dataset": cell.dataset,
               "notebook": labels.get("notebook"), "model": labels.get("model"), "kg": cfg.get("kg")}
        row: dict[str, Any] = {
            "table": TABLE, "method": cell.run.method, "paper": paper_of(spec.family), "family": spec.family,
            "dataset": cell.dataset, "kg": cfg.get("kg"), "corpus": cfg.get("corpus"),
            "n": m.get("n"), "failed": m.get("failed", 0), **{s: m.get(s) for s in SCORES},
            **{f"{s}_ci95": m.get(f"{s}_ci95") for s in SCORES},
            **{f"{k}_per_q": cost.get(k) for k in COST_KEYS},
            "questions_with_issues": m.get("questions_with_issues"), **health_cells(run)}
        row.update(labels)
        out.append(row)
    return out


def kg_build_rows(kgs: Mapping[str, Any], load_s: Mapping[str, float] | None = None,
                  **labels: Any) -> list[dict[str, Any]]:
    """One summary row per LLM-built KG (`kg.sources.BuiltKG` by family): what building it cost
    once, before any answer (LLM calls and tokens when its chunks were first extracted, the wall
    seconds of the build that made it) and its size; `load_s`: seconds it took here (0 when read
    from the KG cache)."""
    out = []
    for family, built in kgs.items():
        st = built.stats
        questions = st.get("questions")
        secs = st.get("seconds_this_build")
        out.append({"table": KG_TABLE, "paper": paper_of(family), "family": family, "kg": built.spec,
                    "questions": questions, "passages": st.get("passages"), "chunks": st.get("chunks"),
                    "llm_requests": st.get("llm_requests"), "prompt_tokens": st.get("prompt_tokens"),
                    "completion_tokens": st.get("completion_tokens"), "build_seconds": secs,
                    "build_seconds_per_q": round(float(secs) / questions, 1) if secs is not None and questions else None,
                    "triples": built.store.num_triples, "load_s": (load_s or {}).get(family),
                    "requests": st.get("request_ids"), **labels})
    return out


def from_summaries(summaries: Mapping[str, Iterable[Mapping[str, Any]]]) -> tuple[list[dict], list[dict]]:
    """The method rows and KG build rows of every notebook summary that holds them."""
    rows = [dict(r) for rs in summaries.values() for r in rs if r.get("table") == TABLE]
    kgs = [dict(r) for rs in summaries.values() for r in rs if r.get("table") == KG_TABLE]
    return rows, kgs


def table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The reader's table: one line per method in the rows' order, the columns of `SHOWN`."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return df
    df = df[[c for c in SHOWN if c in df.columns]].rename(columns=SHOWN)
    return df.reset_index(drop=True)


def kg_table(kg_rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(kg_rows))
    if df.empty:
        return df
    return df[[c for c in KG_SHOWN if c in df.columns]].rename(columns=KG_SHOWN).reset_index(drop=True)


def title(rows: list[Mapping[str, Any]]) -> str:
    """'Every method on the same questions (2Wiki dev200, n=30, one model)', from the rows."""
    first = rows[0] if rows else {}
    ns = sorted({r.get("n") for r in rows if r.get("n") is not None})
    models = sorted({str(r.get("model")) for r in rows if r.get("model")})
    where = " ".join(str(x) for x in (first.get("dataset"), first.get("split")) if x).replace("2wiki", "2Wiki")
    n = "/".join(str(v) for v in ns) or "?"
    model = "one model" if len(models) <= 1 else f"{len(models)} models"
    return f"Every method on the same questions ({where}, n={n}, {model})"


def caption(rows: list[Mapping[str, Any]]) -> str:
    """What the rows share and how to read them (one paragraph of markdown)."""
    first = rows[0] if rows else {}
    dead = [r["method"] for r in rows if r.get("mechanism_dead")]
    corpus = next((r.get("corpus") for r in rows if r.get("corpus")), None)
    kg = next((r.get("kg") for r in rows if r.get("corpus") and r.get("kg")), None)
    text = (f"Model {first.get('model')}, embedder {first.get('embedder')}, seed {first.get('seed')}; every method "
            f"answers the same questions and retrieves from one corpus, the pooled paragraphs of the sample "
            f"(SA-RAG and TCR-QF build their KGs from them; KG-Infused RAG and Self-Ask read them as corpus "
            f"{corpus or '–'}, with KG {kg or '–'}). Scores in percent; cost per question counts every LLM "
            "request, cached or not, and the seconds when first computed; the KGs' one-off build cost is in the "
            "next table. Mechanism health: did the part of the method its paper is about run (per question, "
            "`kgrag_lib.report.mechanism`); \"–\": a method with no such part.")
    if dead:
        text += (f" **Mechanism dead** (ran for fewer than half the questions) in {', '.join(dead)}: their scores "
                 "are the fallback's, not the method's.")
    return text


def plot_f1(rows: list[Mapping[str, Any]], metric: str = "f1", title_text: str | None = None):
    """Horizontal bars of `metric` per method with its 95% interval, coloured by paper, the rows
    whose mechanism is dead hatched and labelled, in the rows' order."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = list(rows)
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(rows) + 1.4))
    papers = list(dict.fromkeys(r["paper"] for r in rows))
    colours = dict(zip(papers, plt.get_cmap("tab10").colors))
    y = np.arange(len(rows))[::-1]
    vals = [float(r.get(metric) or 0.0) for r in rows]
    for yi, r, v in zip(y, rows, vals):
        dead = bool(r.get("mechanism_dead"))
        ax.barh(yi, v, color=colours[r["paper"]], alpha=0.45 if dead else 0.9, hatch="///" if dead else None,
                edgecolor="#444" if dead else None)
        ci = r.get(f"{metric}_ci95")
        if ci and all(c is not None for c in ci):
            ax.plot(ci, [yi, yi], color="#222", lw=1)
        ax.text(v + 0.5, yi, f"{v:.1f}" + (" (mechanism dead)" if dead else ""), va="center", fontsize=7)
    ax.set_yticks(y, [r["method"] for r in rows], fontsize=8)
    ax.set_xlabel(f"{metric.upper()} (%)")
    ax.set_xlim(0, max([100.0, *[v + 25 for v in vals]]))
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[p]) for p in papers]
    ax.legend(handles, papers, fontsize=7, loc="lower right")
    ax.set_title(title_text or title(rows), fontsize=9)
    if any(r.get("mechanism_dead") for r in rows):
        add_note(fig, "Hatched: the method's mechanism ran for fewer than half the questions, so its bar is the "
                      "fallback's score, not the method's (mechanism health).")
    fig.tight_layout()
    return fig


def report_section(summaries: Mapping[str, Iterable[Mapping[str, Any]]], md: Any) -> list[str]:
    """REPORT.md's first table (empty when no notebook wrote cross-method rows): the title, the
    caption, the table, then the KG build cost; `md` renders a DataFrame as markdown."""
    rows, kgs = from_summaries(summaries)
    if not rows:
        return []
    parts = [f"## {title(rows)}", "", caption(rows), "", md(table(rows)), ""]
    if kgs:
        parts += ["What the LLM-built KGs cost, once, before any answer (LLM calls and tokens when their chunks "
                  "were first extracted; seconds of the build that made them):", "", md(kg_table(kgs)), ""]
    return parts
