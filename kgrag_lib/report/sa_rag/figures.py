"""SA-RAG figures: Table 1 as bars beside the paper's, Figure 4 (a question's subgraph with golden
/ activated entities), Figure 5 (activation against hop distance for several c) and recall of
gold paragraphs against context size over c x tau_a.

Each function returns a matplotlib figure; a notebook saves it with `report.figures.save_figure`.
Figure 4's colours are the paper's: golden yellow, activated red, both pink, others light blue.
"""

from __future__ import annotations

import textwrap
from typing import Mapping

import pandas as pd

from ..figures import intervals_and_n, plot_ours_and_paper
from . import paper_numbers

GOLDEN, ACTIVATED, BOTH, OTHER = "#F2D13B", "#D9534F", "#F4A6C8", "#A9D3F0"


def plot_table1(table: pd.DataFrame, metric: str = "Correctness", title: str = "", rows=None, note: str = ""):
    """One panel per dataset: each system's `metric` (ours, blue, with its 95% interval
    `<metric>_ci95` from the result `rows` where given, and n in the panel title) beside the
    paper's (hatched). `note`: a caption, e.g. `mechanism.judge_note` when the judge failed its
    controls (then the correctness bars measure the judge, not the answers)."""
    ci = None
    if rows:
        key = {v: k for k, v in paper_numbers.METRIC_LABELS.items()}.get(metric, metric.lower())
        table, ci = intervals_and_n(table, rows, key, lambda r: paper_numbers.DATASET_LABELS.get(r["dataset"], r["dataset"]),
                                    lambda r: r["label"])
    return plot_ours_and_paper(table, metric, title, ci=ci, note=note)


def subgraph_view(frame: pd.DataFrame, links: pd.DataFrame, max_nodes: int = 40):
    """The part of an activation worth drawing: seeds, golden and activated entities first, then
    the most activated others, at most `max_nodes`; links among them (networkx Graph with the
    frame's columns as node attributes and weight / text on edges)."""
    import networkx as nx

    rank = frame.assign(_key=frame["seed"] * 4 + frame["golden"] * 2 + frame["activated"] * 1)
    keep = rank.sort_values(["_key", "activation"], ascending=False, kind="stable").head(max_nodes)
    G = nx.Graph()
    for rec in keep.to_dict("records"):
        G.add_node(rec["entity"], **{k: rec[k] for k in ("activation", "activated", "golden", "seed", "distance")})
    for rec in links.to_dict("records"):
        s, t = rec["source"], rec["target"]
        if s in G and t in G and s != t:
            if not G.has_edge(s, t) or G[s][t]["weight"] < rec["weight"]:
                G.add_edge(s, t, weight=float(rec["weight"]), text=rec["text"])
    return G


def node_colour(attrs: Mapping) -> str:
    if attrs.get("golden") and attrs.get("activated"):
        return BOTH
    return GOLDEN if attrs.get("golden") else ACTIVATED if attrs.get("activated") else OTHER


def draw_activation(G, title: str = "", max_label: int = 28, ax=None):
    """Figure 4: entities coloured golden / activated / both / neither (seeds ringed), labelled
    with their activation; link width grows with its rescaled weight."""
    import matplotlib.pyplot as plt
    import networkx as nx
    from matplotlib.patches import Patch

    if ax is None:
        n = max(G.number_of_nodes(), 1)
        fig, ax = plt.subplots(figsize=(min(6 + 0.3 * n, 16), min(4.5 + 0.22 * n, 12)))
    else:
        fig = ax.figure
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=10)
    if G.number_of_nodes() == 0:
        ax.text(0.5, 0.5, "empty subgraph (no seed entity)", ha="center", va="center")
        return fig
    pos = nx.kamada_kawai_layout(G) if G.number_of_nodes() > 2 and nx.is_connected(G) else nx.spring_layout(G, seed=0)
    nodes = list(G.nodes)
    nx.draw_networkx_edges(G, pos, ax=ax, edge_color="#777777", alpha=0.7,
                           width=[0.5 + 3 * G[u][v]["weight"] for u, v in G.edges])
    nx.draw_networkx_nodes(G, pos, ax=ax, nodelist=nodes, node_size=700,
                           node_color=[node_colour(G.nodes[v]) for v in nodes],
                           edgecolors=["#222222" if G.nodes[v]["seed"] else "#888888" for v in nodes],
                           linewidths=[3 if G.nodes[v]["seed"] else 0.8 for v in nodes])
    labels = {v: textwrap.fill(textwrap.shorten(str(v), max_label, placeholder="…"), 14)
              + f"\n{G.nodes[v]['activation']:.2f}" for v in nodes}
    nx.draw_networkx_labels(G, pos, labels=labels, font_size=6, ax=ax)
    handles = [Patch(color=GOLDEN, label="golden"), Patch(color=ACTIVATED, label="activated"),
               Patch(color=BOTH, label="activated golden"), Patch(color=OTHER, label="not activated"),
               Patch(facecolor="white", edgecolor="#222222", linewidth=3, label="seed")]
    ax.legend(handles=handles, fontsize=7, loc="lower left")
    ax.margins(0.12)
    return fig


def plot_c_dynamics(frames: Mapping[float, pd.DataFrame], tau_a: float,
                    by_distance: pd.DataFrame | None = None, title: str = ""):
    """Figure 5's layout, one column per c: the question's subgraph entities, activation against
    hop distance from the seeds (golden marked), tau_a dashed; below, with `by_distance`, the
    mean activation and the share activated per distance over all sampled questions."""
    import matplotlib.pyplot as plt
    import numpy as np

    cs = list(frames)
    rows = 2 if by_distance is not None and not by_distance.empty else 1
    fig, axes = plt.subplots(rows, max(len(cs), 1), figsize=(3.6 * max(len(cs), 1), 3.2 * rows), squeeze=False,
                             sharey="row")
    rng = np.random.default_rng(0)
    for j, c in enumerate(cs):
        f = frames[c][frames[c]["distance"] >= 0]
        ax = axes[0][j]
        jitter = rng.uniform(-0.15, 0.15, len(f))
        ax.scatter(f["distance"] + jitter, f["activation"], s=18, alpha=0.8,
                   c=[node_colour(r) for r in f.to_dict("records")], edgecolors="#555555", linewidths=0.4)
        ax.axhline(tau_a, ls="--", lw=1, color="#333333")
        ax.set_title(f"c = {c}: {int(f['activated'].sum())} of {len(f)} activated", fontsize=9)
        ax.set_xlabel("hops from the seeds")
        ax.set_ylim(-0.03, 1.05)
        ax.grid(alpha=0.3)
        if rows == 2:
            g = by_distance[np.isclose(by_distance["c"], c)]
            ax2 = axes[1][j]
            ax2.plot(g["distance"], g["mean_activation"], marker="o", label="mean activation")
            ax2.plot(g["distance"], g["share_activated"], marker="s", label="share activated")
            ax2.set_xlabel("hops from the seeds (all sampled questions)")
            ax2.set_ylim(-0.03, 1.05)
            ax2.grid(alpha=0.3)
    axes[0][0].set_ylabel("activation")
    if rows == 2:
        axes[1][0].set_ylabel("mean / share")
        axes[1][-1].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_recall_vs_context(table: pd.DataFrame, x: str = "context_words", title: str = ""):
    """Recall of gold paragraphs against context size (mean per (c, tau_a)), one panel per dataset,
    one line per c through its tau_a values (each distinct point labelled with the tau_a values
    that reach it); the paper's setting (c 0.4, tau_a 0.5) ringed. The x range is at least +-5%
    of the mean context, so that a sweep that barely changes the context looks flat."""
    import matplotlib.pyplot as plt
    import numpy as np

    from matplotlib.ticker import FormatStrFormatter

    datasets = list(dict.fromkeys(table["dataset"])) if not table.empty else []
    fig, axes = plt.subplots(1, max(len(datasets), 1), figsize=(4.6 * max(len(datasets), 1), 3.6), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        t = table[table["dataset"] == ds]
        for c, g in t.groupby("c"):
            g = g.sort_values("tau_a")
            ax.plot(g[x], g["recall"], marker="o", label=f"c = {c}")
        # one label per distinct point (several (c, tau_a) often land on the same one), on four
        # levels above and below so that neighbouring points' labels do not overlap
        spots = t.assign(_x=t[x].round(1), _y=t["recall"].round(1)).groupby(["_x", "_y"], sort=True)["tau_a"]
        for i, ((px, py), taus) in enumerate(spots):
            text = ",".join(f"{v:g}" for v in sorted(set(taus)))
            dy = (6, -7, 15, -16)[i % 4]
            ax.annotate(text, (px, py), fontsize=6, ha="center", va="bottom" if dy > 0 else "top",
                        xytext=(0, dy), textcoords="offset points", color="#333333")
        lo, hi = float(t[x].min()), float(t[x].max())
        mid, half = (lo + hi) / 2, max((hi - lo) / 2 * 1.2, 0.05 * abs((lo + hi) / 2), 1.0)
        ax.set_xlim(mid - half, mid + half)   # a sweep whose context barely changes is shown as such
        ax.xaxis.set_major_formatter(FormatStrFormatter("%.0f"))
        paper = t[np.isclose(t["c"], 0.4) & np.isclose(t["tau_a"], 0.5)]
        if not paper.empty:
            ax.scatter(paper[x], paper["recall"], s=160, facecolors="none", edgecolors="#C44E52", linewidths=1.5,
                       label="paper: c 0.4, tau_a 0.5", zorder=3)
        n = int(t["questions"].max()) if len(t) else 0
        ax.set_title(f"{paper_numbers.DATASET_LABELS.get(ds, ds)} (n={n}; labels: tau_a)", fontsize=9)
        ax.set_xlabel({"context_words": "context words (documents + relations)",
                       "documents": "documents in the context"}.get(x, x))
        ax.set_ylabel("recall of gold paragraphs (%)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    if datasets:
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
