"""TCR-QF figures: Tables 1 and 2 as bars beside the paper's, Fig. 3 (EM by round per variant)
and Fig. 4 (the KG's nodes and edges and EM / F1 by round, ours beside Table 3's).

Each function returns a matplotlib figure; a notebook saves it with `report.figures.save_figure`.
The paper's Figures 3 and 4 print no values; Fig. 4's are Table 3's, drawn dashed beside ours.
"""

from __future__ import annotations

import pandas as pd

from ..figures import add_note, intervals_and_n
from ..figures import plot_ours_and_paper as _plot_bars
from . import paper_numbers
from .tables import dataset_label, paper_growth, system_label

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def plot_table(table: pd.DataFrame, metric: str = "EM", title: str = "", rows=None, note: str = ""):
    """One panel per dataset we ran: each system's `metric` (ours, blue, with its bootstrap 95%
    interval `<metric>_ci95` from the result `rows` where given, and n in the panel title) beside
    the paper's (hatched); the paper-only datasets of `tables.table1` are left out. `note` is a
    caption under the figure (e.g. `mechanism.tcr_parse_note`)."""
    ran = [c for c in table.columns if c[2] == "ours" and c[1] == metric]
    keep = {c[0] for c in ran}
    sub = table.loc[:, [c for c in table.columns if c[0] in keep]]
    ci = None
    if rows:
        key = {v: k for k, v in paper_numbers.METRIC_LABELS.items()}.get(metric, metric.lower())
        sub, ci = intervals_and_n(sub, rows, key, lambda r: dataset_label(r["dataset"]),
                                  lambda r: system_label(r["method"]))
    return _plot_bars(sub, metric, title, ci=ci, note=note)


def plot_rounds(frame: pd.DataFrame, metric: str = "em", title: str = "", note: str = ""):
    """Fig. 3's layout: one panel per dataset, `metric` (percent) at each round, one line per
    variant (`tables.rounds_frame`); a variant without feedback is flat. `note`: a caption
    (`add_note`)."""
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(frame["dataset"])) if len(frame) else []
    fig, axes = plt.subplots(1, max(len(datasets), 1), figsize=(4.6 * max(len(datasets), 1), 3.6), squeeze=False,
                             sharey=True)
    for ax, ds in zip(axes[0], datasets):
        f = frame[frame["dataset"] == ds]
        for i, (label, g) in enumerate(f.groupby("label", sort=False)):
            g = g.sort_values("round")
            ax.plot(g["round"], g[metric], marker="o", color=PALETTE[i % len(PALETTE)], label=label)
        n = int(f["n"].max()) if len(f) else 0
        ax.set_title(f"{paper_numbers.DATASET_LABELS.get(ds, ds)} (n={n})", fontsize=9)
        ax.set_xlabel("round")
        ax.set_xticks(sorted(set(f["round"])))
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{metric.upper()} (%)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    add_note(fig, note)
    return fig


def plot_kg_growth(growth: pd.DataFrame, title: str = "", paper: bool = True, note: str = ""):
    """Fig. 4's layout in three panels: our KG's nodes and edges by round; their growth in
    percent of round 0 beside the paper's (dashed); EM and F1 by round beside the paper's
    (dashed). The paper's KG is ~100 times ours, so only the relative growth is comparable.
    `note`: a caption (`add_note`)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    theirs = paper_growth() if paper else None
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 3.6))
    ax = axes[0]
    for key, colour in (("nodes", PALETTE[0]), ("edges", PALETTE[1])):
        ax.plot(growth["round"], growth[key], marker="o", color=colour, label=f"{key} (ours)")
    ax.set_title("our KG", fontsize=9)
    ax.set_xlabel("round")
    ax.set_ylabel("count")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax = axes[1]
    for key, colour in (("nodes", PALETTE[0]), ("edges", PALETTE[1])):
        base = float(growth[key].iloc[0]) if len(growth) else 0.0
        if base:
            ax.plot(growth["round"], 100 * growth[f"delta_{key}"] / base, marker="o", color=colour,
                    label=f"{key} (ours)")
        if theirs is not None:
            ax.plot(theirs["round"], 100 * theirs[f"delta_{key}"] / theirs[key].iloc[0], ls="--", color=colour,
                    alpha=0.7, label=f"{key} (paper)")
    ax.set_title("KG growth since round 0", fontsize=9)
    ax.set_xlabel("round")
    ax.set_ylabel("% of round 0")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax = axes[2]
    for key, colour in (("em", PALETTE[2]), ("f1", PALETTE[3])):
        ax.plot(growth["round"], growth[key], marker="o", color=colour, label=f"{key.upper()} (ours)")
        if theirs is not None:
            ax.plot(theirs["round"], theirs[key], ls="--", color=colour, alpha=0.7, label=f"{key.upper()} (paper)")
    ax.set_title("answers at each round", fontsize=9)
    ax.set_xlabel("round")
    ax.set_ylabel("score (%)")
    ax.set_ylim(-2, 102)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    add_note(fig, note)
    return fig
