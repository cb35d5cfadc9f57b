"""KG-RAG on MetaQA figures: KB degrees (Fig. 3), candidate triples per N, grouped mean ± std
bars (Figs. 4 and 5) and sub-question counts (Fig. 7).

Functions that draw take an optional `ax` and return it, so a notebook decides the layout
and saves with `report.figures.save_figure`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from .tables import dataset_label

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974")


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


def grouped_bars(agg: pd.DataFrame, group: str, bar: str, metric: str = "hit1", ax: Any = None,
                 paper: pd.DataFrame | None = None, bar_order: Sequence[Any] | None = None,
                 group_order: Sequence[Any] | None = None, bar_label: Any = None, group_label: Any = None,
                 ylabel: str | None = None, ylim: tuple[float, float] = (0, 100), annotate: bool = True) -> Any:
    """Bars of `<metric>_mean` with ±`<metric>_std` error bars, one cluster per `group` value.

    `paper` (columns `group`, `bar`, `value`, optional `std`, percent) adds the paper's printed
    numbers as black diamonds at the matching bars; bars the paper prints no number for get none.
    A single-seed std is undefined: where `agg` has `<metric>_ci95_low_mean` and
    `<metric>_ci95_high_mean` (aggregate_seeds over `tables.ci_columns` of the runs), that run's
    bootstrap 95% interval over questions is drawn instead, else no error bar.
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
        lo_col, hi_col = f"{metric}_ci95_low_mean", f"{metric}_ci95_high_mean"
        if lo_col in sub and hi_col in sub:   # one seed: its bootstrap 95% interval over questions instead
            lo = np.array([float(sub.loc[g, lo_col]) if g in sub.index else np.nan for g in groups])
            hi = np.array([float(sub.loc[g, hi_col]) if g in sub.index else np.nan for g in groups])
            ci = ~has_std & ~np.isnan(lo) & ~np.isnan(hi) & ~np.isnan(means)
            if ci.any():
                ax.errorbar(pos[ci], means[ci], yerr=[means[ci] - lo[ci], hi[ci] - means[ci]], fmt="none",
                            ecolor="#333333", elinewidth=1, capsize=3)
                stds = np.where(ci, hi - means, stds)   # labels above the interval
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
