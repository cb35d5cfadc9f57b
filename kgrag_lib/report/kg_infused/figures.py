"""KG-Infused RAG figures: our scores beside the paper's (Tables 1, 3 and 4 as bars), Figure 2
(score against activation rounds), KG out-degrees (notebook 20) and Figure 4's subgraph.

Each function returns a matplotlib figure; a notebook saves it with `report.figures.save_figure`.
"""

from __future__ import annotations

import textwrap
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ..figures import add_note, bar_values, errorbar_of
from . import paper_numbers
from .tables import (ABLATION_LABELS, METRIC_LABELS, ROUND_VARIANTS, VARIANT_LABELS, metrics_for, out_degrees,
                     paper_table4)


def _bars_beside_paper(ax, labels: Sequence[str], ours: Sequence[float], paper: Sequence[float],
                       ci: Sequence[Sequence[float] | None] | None = None) -> None:
    """One panel of our bars (values on top, 95% intervals where `ci` has them) beside the
    paper's hatched ones, a pair per row label."""
    import numpy as np

    x = np.arange(len(labels))
    err = errorbar_of(ci, ours)
    ax.bar(x - 0.2, ours, 0.4, label="ours", color="#4C72B0", yerr=err,
           error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#222222"})
    ax.bar(x + 0.2, paper, 0.4, label="paper", color="#BBBBBB", hatch="//", edgecolor="#777777")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7, rotation=35, ha="right")
    ax.set_ylim(0, 108)
    ax.set_yticks(range(0, 101, 20))
    bar_values(ax, x - 0.2, ours, err)
    ax.grid(axis="y", alpha=0.3)


def _row_ci(rows: Iterable[Mapping[str, Any]] | None, key: str) -> dict[tuple[str, str], Sequence[float]]:
    """(label, dataset) -> the row's `<key>_ci95` interval, for the rows that carry one."""
    return {(r["label"], r["dataset"]): r[f"{key}_ci95"] for r in rows or () if r.get(f"{key}_ci95") is not None}


def plot_side_by_side(ours: pd.DataFrame, paper: pd.DataFrame, metric: str = "Avg", title: str = "",
                      match: Mapping[str, str] | None = None, rows: Iterable[Mapping[str, Any]] | None = None,
                      note: str = ""):
    """Grouped bars per dataset: each of our rows beside the paper row it reproduces.

    `match` maps our row label to the paper's (default: same label). StrategyQA falls back to
    Acc (its only metric). `rows` (`grid_rows`) supply the 95% bootstrap intervals drawn on our
    bars (`avg_ci95` for Avg); `note` is a caption under the figure (e.g. `kg_domain_note`).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    match = dict(match or {})
    datasets = list(dict.fromkeys(c[0] for c in ours.columns))
    labels = list(ours.index)
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 3.4), squeeze=False, sharey=True)
    for ax, ds in zip(axes[0], datasets):
        m = metric if (ds, metric) in ours.columns else "Acc"
        ov = [ours.loc[l, (ds, m)] for l in labels]
        pv = [paper.loc[match.get(l, l), (ds, m)] if match.get(l, l) in paper.index and (ds, m) in paper.columns
              else np.nan for l in labels]
        key = {v: k for k, v in METRIC_LABELS.items()}.get(m, m.lower())
        ci = _row_ci(rows, key)
        dkey = {v: k for k, v in paper_numbers.DATASET_LABELS.items()}.get(ds, ds)
        _bars_beside_paper(ax, labels, ov, pv, [ci.get((l, dkey)) for l in labels])
        n = {int(r["n"]) for r in rows or () if r["dataset"] == dkey and r.get("n")}
        ax.set_title(f"{ds} ({m}{', n=' + '/'.join(map(str, sorted(n))) if n else ''})", fontsize=9)
    axes[0][0].set_ylabel(f"score (%){'; ours with 95% CI' if rows else ''}")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    add_note(fig, note)
    return fig


def plot_rounds(rows: Iterable[Mapping[str, Any]], metric: str = "avg",
                baselines: Iterable[Mapping[str, Any]] = (), title: str = "", note: str = ""):
    """Figure 2's layout: one panel per dataset, score against activation rounds, one line per
    KG variant (offset sideways by ±0.06 so equal values stay visible; 95% intervals as error
    bars where the rows carry `<metric>_ci95`); baselines (no rounds: Vanilla RAG, Vanilla QE)
    as dashed horizontal lines. `note` is a caption under the figure (e.g. `kg_domain_note`)."""
    import matplotlib.pyplot as plt

    rows = list(rows)
    baselines = list(baselines)
    datasets = [d for d in paper_numbers.DATASETS if any(r["dataset"] == d for r in rows)]
    styles = {"kg-infused": ("#C44E52", "o"), "kg-qe-only": ("#4C72B0", "s"), "kg-aug-only": ("#55A868", "^")}
    base_colors = {"vanilla-rag": "#555555", "vanilla-qe": "#999999", "nor": "#BBBBBB"}
    fig, axes = plt.subplots(1, max(len(datasets), 1), figsize=(3.6 * max(len(datasets), 1), 3.3), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        m = metric if metric in metrics_for(ds) else "acc"
        for j, variant in enumerate(ROUND_VARIANTS):
            pts = sorted((r["rounds"], r.get(m), r.get(f"{m}_ci95")) for r in rows
                         if r["dataset"] == ds and r["variant"] == variant and r.get("rounds"))
            if pts:
                color, marker = styles[variant]
                shift = 0.06 * (j - 1)  # a small sideways offset keeps equal values visible
                ys = [p[1] for p in pts]
                ax.errorbar([p[0] + shift for p in pts], ys, yerr=errorbar_of([p[2] for p in pts], ys),
                            marker=marker, color=color, alpha=0.9, capsize=2, elinewidth=0.8,
                            label=ABLATION_LABELS[variant] if variant != "kg-infused" else "KG-Infused RAG")
        for b in baselines:
            if b["dataset"] == ds and b.get(m) is not None:
                ax.axhline(b[m], ls="--", lw=1, color=base_colors.get(b["variant"], "#777777"),
                           label=VARIANT_LABELS.get(b["variant"], b["variant"]))
        all_rounds = sorted({r["rounds"] for r in rows if r["dataset"] == ds and r.get("rounds")})
        if all_rounds:
            ax.set_xticks(all_rounds)
        ax.set_xlabel("activation rounds")
        ax.set_ylabel(f"{METRIC_LABELS[m]} (%)")
        ax.set_ylim(-2, 102)
        ax.set_title(paper_numbers.DATASET_LABELS.get(ds, ds), fontsize=10)
        ax.grid(alpha=0.3)
    if datasets:
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8,
                   bbox_to_anchor=(0.5, -0.08))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    add_note(fig, note, y=-0.10)
    return fig


def plot_recall(ours: pd.DataFrame, k: int = 6, title: str = "", note: str = ""):
    """Table 4 as bars: our R@k per dataset for each run, the paper's beside it (hatched); `note`
    is a caption under the figure (e.g. `kg_domain_note`)."""
    import matplotlib.pyplot as plt
    import numpy as np

    paper = paper_table4()
    datasets = list(dict.fromkeys(c[0] for c in ours.columns if c[1] == f"R@{k}"))
    labels = list(ours.index)
    fig, axes = plt.subplots(1, max(len(datasets), 1), figsize=(3.4 * max(len(datasets), 1), 3.3), squeeze=False,
                             sharey=True)
    for ax, ds in zip(axes[0], datasets):
        ov = [ours.loc[l, (ds, f"R@{k}")] for l in labels]
        pv = [paper.loc[l, ds] if l in paper.index and ds in paper.columns else np.nan for l in labels]
        _bars_beside_paper(ax, labels, ov, pv)
        ns = ", ".join(str(int(ours.loc[l, (ds, "n")])) for l in labels[:1])
        ax.set_title(f"{ds} (n={ns})", fontsize=9)
    axes[0][0].set_ylabel(f"Recall@{k} (%)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    add_note(fig, note)
    return fig


def plot_out_degrees(kgs: Mapping[str, Any], title: str = ""):
    """Out-degree distributions (how many triples an activated entity offers the LLM), log-log,
    one line per KG; MAX_TRIPLES_PER_ENTITY caps what a round shows of the right tail."""
    import matplotlib.pyplot as plt
    import numpy as np

    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    top = 0
    for (name, heads), color in zip(kgs.items(), ("#4C72B0", "#C44E52", "#55A868", "#8172B2")):
        deg = out_degrees(heads)
        if deg.size == 0:
            continue
        top = max(top, int(deg.max()))
        vals, counts = np.unique(deg, return_counts=True)
        ax.plot(vals, counts, marker="o", ms=3, lw=1, color=color,
                label=f"{name} ({deg.size:,} heads, max {int(deg.max())})")
    if top > 30:  # heavy tails (Wikidata5M): log-log; small KGs: integer degrees on a linear axis
        ax.set_xscale("log")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yscale("log")
    ax.set_xlabel("outgoing triples per entity")
    ax.set_ylabel("entities")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def _is_dark(rgba) -> bool:
    """Relative luminance (ITU-R BT.709) below one half: a fill that needs white text."""
    r, g, b = rgba[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.5


def draw_subgraph(G, title: str = "", max_label: int = 40, ax=None):
    """Figure 4's picture: entities as nodes coloured by activation round (seeds ringed),
    selected triples as labelled arrows. Seeds from which nothing was selected are named in
    a note rather than drawn as loose dots; the axes keep a margin so no label is cut."""
    import matplotlib.pyplot as plt
    import networkx as nx

    loose = [v for v in G.nodes if G.degree(v) == 0]
    if loose:
        G = G.subgraph([v for v in G.nodes if G.degree(v) > 0]).copy()
    if ax is None:
        n = max(G.number_of_nodes(), 1)
        fig, ax = plt.subplots(figsize=(min(6 + 0.35 * n, 16), min(4.5 + 0.25 * n, 12)))
    else:
        fig = ax.figure
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=10)
    if loose:
        ax.text(0.01, 0.99, "activated, nothing selected from: " + textwrap.shorten(", ".join(map(str, loose)), 160),
                transform=ax.transAxes, ha="left", va="top", fontsize=7, wrap=True)
    if G.number_of_nodes() == 0:
        ax.text(0.5, 0.5, "no triple was selected (empty subgraph)", ha="center", va="center")
        return fig
    pos = nx.kamada_kawai_layout(nx.Graph(G)) if G.number_of_nodes() > 2 else nx.spring_layout(G, seed=0)
    rounds = sorted({d["round"] for _, d in G.nodes(data=True)})
    cmap = plt.get_cmap("viridis", max(len(rounds), 2))
    color = {r: cmap(i) for i, r in enumerate(rounds)}
    short = {v: textwrap.fill(textwrap.shorten(str(v), max_label, placeholder="…"), 12) for v in G.nodes}
    # a node wide and tall enough for its wrapped label (points^2), so no name spills out of it
    size = {v: max(1400, 40 * max(map(len, short[v].splitlines())) ** 2, 900 * len(short[v].splitlines()))
            for v in G.nodes}
    nx.draw_networkx_nodes(G, pos, ax=ax, node_size=[size[v] for v in G.nodes], alpha=0.9,
                           node_color=[color[G.nodes[v]["round"]] for v in G.nodes],
                           edgecolors=["#C44E52" if G.nodes[v].get("seed") else "#333333" for v in G.nodes],
                           linewidths=[3 if G.nodes[v].get("seed") else 1 for v in G.nodes])
    for dark in (True, False):   # white names on dark fills, black on light ones
        nodes = [v for v in G.nodes if _is_dark(color[G.nodes[v]["round"]]) == dark]
        nx.draw_networkx_labels(G, pos, labels={v: short[v] for v in nodes}, font_size=7, ax=ax,
                                font_color="white" if dark else "black")
    nx.draw_networkx_edges(G, pos, ax=ax, arrows=True, arrowstyle="-|>", arrowsize=14,
                           node_size=[size[v] for v in G.nodes], edge_color="#555555", connectionstyle="arc3,rad=0.08")
    elabels: dict[tuple[str, str], str] = {}
    for s, o, d in G.edges(data=True):
        key = (s, o)
        elabels[key] = (elabels[key] + "; " if key in elabels else "") + f"{d['relation']} (r{d['round']})"
    nx.draw_networkx_edge_labels(G, pos, edge_labels={k: textwrap.fill(v, 22) for k, v in elabels.items()},
                                 font_size=6, ax=ax, rotate=False)
    from matplotlib.patches import Patch

    handles = [Patch(color=color[r], label="seed entities" if r == 0 else f"reached in round {r}") for r in rounds]
    ax.legend(handles=handles, fontsize=7, loc="lower left")
    ax.margins(0.18)  # room for the labels of nodes at the edge of the layout
    return fig
