"""MetaQA views for the KG-RAG paper's figures: KB degrees (Fig. 3), grouped mean ± std bars
(Figs. 4 and 5), sub-question counts (Fig. 7) and a readable trace (Fig. 6).

Inputs are what the library already produces: a `KGStore`, rows of `predictions.jsonl`
(the trace layout of `kgrag_lib.methods.metaqa.stages.new_trace`), and seed-aggregated
tables from `report.tables.aggregate_seeds`. Functions that draw take an optional `ax`
and return it, so a notebook decides the layout and saves with `save_figure`.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974")
_HOPS = re.compile(r"(\d)\s*-?\s*hop", re.I)

# The paper's names for the four systems of Experiment 2 (§4.2.2, Fig. 5).
METHOD_LABELS = {"llm": "LLM", "llm-qd": "LLM+QD", "llm-kg": "LLM+KG (KAPING)", "kg-rag": "KG-RAG"}


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def config_label(hops: int, top_k: int) -> str:
    """'N=3, K=30': one bar of Fig. 4."""
    return f"N={int(hops)}, K={int(top_k)}"


def dataset_hops(dataset: str | None) -> int | None:
    """3 for 'metaqa-3hop' (the number of KB hops between question entity and answer)."""
    m = _HOPS.search(dataset or "")
    return int(m.group(1)) if m else None


def dataset_label(dataset: str) -> str:
    """'metaqa-2hop' -> '2-hop' (axis labels as in the paper's figures)."""
    h = dataset_hops(dataset)
    return f"{h}-hop" if h else dataset


# ---------------------------------------------------------------------------- the KB (Fig. 3)

def entity_degrees(store: Any) -> np.ndarray:
    """Triples per entity (as subject or object; a self-loop counts once), indexed by entity id."""
    heads = np.asarray(store.heads, dtype=np.int64)
    tails = np.asarray(store.tails, dtype=np.int64)
    n = int(store.num_entities)
    return np.bincount(heads, minlength=n) + np.bincount(tails[tails != heads], minlength=n)


def degree_summary(degrees: np.ndarray, cutoff: int = 30) -> dict[str, float]:
    d = np.asarray(degrees)
    return {
        "entities": int(d.size),
        "median": float(np.median(d)),
        "mean": round(float(d.mean()), 2),
        "max": int(d.max()),
        f"share_above_{cutoff}_pct": round(100.0 * float((d > cutoff).mean()), 2),
    }


def relation_counts(store: Any) -> pd.DataFrame:
    """Triples per relation type, most frequent first, with their share of the KB."""
    counts = np.bincount(np.asarray(store.rels, dtype=np.int64), minlength=int(store.num_relations))
    df = pd.DataFrame({"relation": [store.relation_name(i) for i in range(len(counts))], "triples": counts})
    df["share_pct"] = (100.0 * df["triples"] / max(1, int(counts.sum()))).round(2)
    return df.sort_values("triples", ascending=False, kind="stable").reset_index(drop=True)


def top_entities(store: Any, degrees: np.ndarray, n: int = 10) -> pd.DataFrame:
    """The hubs that make N-hop candidate sets explode (ties broken by entity id)."""
    order = np.lexsort((np.arange(len(degrees)), -np.asarray(degrees)))[:n]
    return pd.DataFrame({"entity": [store.entity_name(int(i)) for i in order], "triples": np.asarray(degrees)[order]})


def plot_degree_distribution(degrees: np.ndarray, cutoff: int = 30, ax: Any = None, color: str = PALETTE[0]) -> Any:
    """Histogram of triples per entity up to `cutoff` (the paper's Fig. 3 cuts off at 30)."""
    import matplotlib.pyplot as plt

    d = np.asarray(degrees)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    counts = np.bincount(np.clip(d, 0, cutoff + 1), minlength=cutoff + 2)[1:cutoff + 1]
    ax.bar(np.arange(1, cutoff + 1), counts, width=0.85, color=color)
    med = float(np.median(d))
    ax.axvline(med, color="black", linestyle="--", linewidth=1)
    above = int((d > cutoff).sum())
    ax.text(0.98, 0.95, f"median {med:g}, max {int(d.max()):,}\n{above:,} entities above {cutoff} not shown",
            transform=ax.transAxes, ha="right", va="top", fontsize=9)
    ax.set_xlabel("degree (triples per entity)")
    ax.set_ylabel("entities")
    ax.set_xlim(0.3, cutoff + 0.7)
    return ax


def candidate_counts(store: Any, questions: Iterable[Any], hops: Sequence[int] = (1, 2, 3),
                     direction: str = "both") -> pd.DataFrame:
    """How many candidate triples N-hop retrieval gathers around each question's entity (§3.4.2)."""
    rows = []
    for q in questions:
        for name in q.topic_entities:
            e = store.find_entity(name)
            for n in hops:
                size = 0 if e is None else int(len(store.neighborhood(int(e), n, direction=direction)))
                rows.append({"dataset": q.dataset, "qid": q.qid, "entity": name, "found": e is not None,
                             "hops": n, "candidates": size})
    return pd.DataFrame(rows)


def plot_candidate_counts(cands: pd.DataFrame, ax: Any = None) -> Any:
    """Box plots (log scale) of candidate triples per question, grouped by N, one colour per dataset."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    datasets = list(pd.unique(cands["dataset"]))
    hops = sorted(pd.unique(cands["hops"]))
    width = len(datasets) + 1
    data, pos, colors = [], [], []
    for i, h in enumerate(hops):
        for j, d in enumerate(datasets):
            sel = cands[(cands["dataset"] == d) & (cands["hops"] == h)]["candidates"]
            data.append(sel.clip(lower=1).to_numpy())
            pos.append(i * width + j)
            colors.append(PALETTE[j % len(PALETTE)])
    bp = ax.boxplot(data, positions=pos, widths=0.7, patch_artist=True,
                    medianprops={"color": "black", "linewidth": 1.5})
    for patch, c in zip(bp["boxes"], colors):
        patch.set_facecolor(c)
    ax.set_yscale("log")
    ax.set_xticks([i * width + (len(datasets) - 1) / 2 for i in range(len(hops))])
    ax.set_xticklabels([f"N = {h}" for h in hops])
    ax.set_ylabel("candidate triples (log scale)")
    ax.legend(bp["boxes"][:len(datasets)], [f"{dataset_label(d)} questions" for d in datasets],
              fontsize=8, frameon=False, loc="upper left")
    return ax


# ---------------------------------------------------------------------------- Figs. 4 and 5

def grouped_bars(agg: pd.DataFrame, group: str, bar: str, metric: str = "hit1", ax: Any = None,
                 paper: pd.DataFrame | None = None, bar_order: Sequence[Any] | None = None,
                 group_order: Sequence[Any] | None = None, bar_label: Any = None, group_label: Any = None,
                 ylabel: str | None = None, ylim: tuple[float, float] = (0, 100), annotate: bool = True) -> Any:
    """Bars of `<metric>_mean` with ±`<metric>_std` error bars, one cluster per `group` value.

    `paper` (columns `group`, `bar`, `value`, optional `std`, percent) adds the paper's printed
    numbers as black diamonds at the matching bars; bars the paper prints no number for get none.
    A single-seed std is undefined and drawn without an error bar.
    """
    import matplotlib.pyplot as plt

    groups = list(group_order or pd.unique(agg[group]))
    bars = list(bar_order or pd.unique(agg[bar]))
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 1.2 * len(groups) * max(1, len(bars)) / 2), 4))
    width = 0.8 / max(1, len(bars))
    x = np.arange(len(groups))
    for j, b in enumerate(bars):
        sub = agg[agg[bar] == b].set_index(group)
        means = np.array([float(sub.loc[g, f"{metric}_mean"]) if g in sub.index else np.nan for g in groups])
        stds = np.array([float(sub.loc[g, f"{metric}_std"]) if g in sub.index else np.nan for g in groups])
        pos = x - 0.4 + width * (j + 0.5)
        label = bar_label(b) if callable(bar_label) else str(b)
        ax.bar(pos, np.nan_to_num(means), width * 0.92, color=PALETTE[j % len(PALETTE)], label=label)
        has_std = ~np.isnan(stds) & ~np.isnan(means)
        if has_std.any():  # undefined (single-seed) deviations get no bar at all, not a zero-length one
            ax.errorbar(pos[has_std], means[has_std], yerr=stds[has_std], fmt="none", ecolor="black",
                        elinewidth=1, capsize=3)
        if annotate:
            for p, m, sd in zip(pos, means, stds):
                if not np.isnan(m):
                    top = min(m + (0 if np.isnan(sd) else sd), ylim[1])  # above the error bar
                    ax.text(p, top + 0.01 * (ylim[1] - ylim[0]), f"{m:.0f}", ha="center", va="bottom", fontsize=7)
        if paper is not None and len(paper):
            for gi, g in enumerate(groups):
                hit = paper[(paper[group] == g) & (paper[bar] == b)]
                if len(hit):
                    v = float(hit["value"].iloc[0])
                    s = float(hit["std"].iloc[0]) if "std" in hit and pd.notna(hit["std"].iloc[0]) else 0.0
                    ax.errorbar(pos[gi], v, yerr=s, fmt="D", color="black", markersize=5, capsize=3, zorder=5)
    if paper is not None and len(paper):
        ax.plot([], [], "D", color="black", markersize=5, label="paper (printed value)")
    ax.set_xticks(x)
    ax.set_xticklabels([group_label(g) if callable(group_label) else str(g) for g in groups])
    ax.set_ylim(ylim[0], ylim[1] + 0.08 * (ylim[1] - ylim[0]))  # headroom for the labels above full bars
    ax.set_yticks([t for t in ax.get_yticks() if ylim[0] <= t <= ylim[1]])
    ax.set_ylabel(ylabel or f"{metric} (%)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return ax


# ---------------------------------------------------------------------------- traces (Figs. 6, 7)

def _trace(row: Mapping[str, Any]) -> Mapping[str, Any]:
    return row.get("trace") or {}


def subquestions(row: Mapping[str, Any]) -> list[str]:
    """The sub-questions the decomposition produced ([] when it produced none or did not run)."""
    dec = _trace(row).get("decomposition") or {}
    return list(dec.get("subquestions") or [])


def subquestion_counts(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per question: dataset, qid and the number of generated sub-questions."""
    return pd.DataFrame([{"dataset": r.get("dataset", ""), "qid": r.get("qid"), "n_subquestions": len(subquestions(r))}
                         for r in rows], columns=["dataset", "qid", "n_subquestions"])


def plot_subquestion_counts(counts: pd.DataFrame, ax: Any = None, max_count: int | None = None) -> Any:
    """Share of questions per number of sub-questions, one bar colour per dataset (the paper's Fig. 7)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    datasets = list(pd.unique(counts["dataset"]))
    top = int(max_count or max(1, int(counts["n_subquestions"].max() if len(counts) else 1)))
    ks = np.arange(0, top + 1)
    width = 0.8 / max(1, len(datasets))
    for j, d in enumerate(datasets):
        c = counts.loc[counts["dataset"] == d, "n_subquestions"]
        share = np.array([100.0 * float((c == k).mean()) for k in ks])
        ax.bar(ks - 0.4 + width * (j + 0.5), share, width * 0.92, color=PALETTE[j % len(PALETTE)],
               label=f"{dataset_label(d)} (n={len(c)})")
    ax.set_xticks(ks)
    ax.set_xlabel("generated sub-questions (0 = decomposition unusable)")
    ax.set_ylabel("questions (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8, frameon=False)
    return ax


def pick_example(rows: Sequence[Mapping[str, Any]], dataset: str | None = None) -> Mapping[str, Any] | None:
    """A row worth reading as a Fig. 6 example: from `dataset` if there is one, preferring an
    answer that names a gold entity and a decomposition into several sub-questions."""
    from ..eval.metrics import mentions_gold

    pool = [r for r in rows if dataset is None or r.get("dataset") == dataset] or list(rows)
    if not pool:
        return None

    def score(r: Mapping[str, Any]) -> tuple[int, int]:
        named = bool(mentions_gold(r.get("prediction") or "", r.get("answers") or []))
        return (int(named), int(len(subquestions(r)) >= 2))

    return max(pool, key=score)  # max keeps the first of equals: the sample's order decides ties


def _clip(text: Any, limit: int) -> str:
    t = " ".join(str(text or "").split())
    return t if len(t) <= limit else t[:limit].rstrip() + f" … (+{len(t) - limit} characters)"


def trace_text(row: Mapping[str, Any], max_triples: int = 3, max_chars: int = 300) -> str:
    """A Fig. 6 style account of one answer: question, reasoning chain, each sub-question with
    its first triples and sub-answer, and the final answer beside the gold (markdown).
    Answers longer than `max_chars` (a small model can ramble to its token limit) are cut."""
    t = _trace(row)
    dec = t.get("decomposition") or {}
    lines = [f"**Question:** {row.get('question', t.get('question', ''))}"]
    if t.get("topic_entities"):
        lines.append(f"**Question entity:** {', '.join(t['topic_entities'])}")
    if dec.get("reasoning"):
        lines.append(f"**Chain-of-thought:** {dec['reasoning']}")
    for s in t.get("steps") or []:
        i = s.get("index", "?")
        sq = s.get("subquestion", "")
        lines.append(f"**Sub-question {i}:** {sq}")
        if s.get("asked") and s.get("asked") != sq:
            lines.append(f"**Reformulated {i}:** {s['asked']}")
        triples = s.get("triples") or []
        if triples:
            more = f" … ({len(triples)} in all)" if len(triples) > max_triples else ""
            lines.append(f"**Triples {i}:** " + " ".join(triples[:max_triples]) + more)
        lines.append(f"**Sub-answer {i}:** {_clip(s.get('answer', ''), max_chars)}")
    lines.append(f"**Final answer:** {_clip(row.get('prediction', ''), max_chars)}")
    lines.append(f"**Gold:** {' | '.join(row.get('answers') or [])}")
    if t.get("issues"):
        lines.append(f"**Issues:** {'; '.join(t['issues'])}")
    return "\n\n".join(lines)
