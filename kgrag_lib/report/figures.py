"""Where figures go: figures/<profile>/<name>.png, beside nothing the runs did not make; and the
bar chart of our numbers beside a paper's that the papers' reports share (`plot_ours_and_paper`).

The root is, in order: the `root` argument, $KGRAG_FIGURES_DIR (a sweep points it into each
combination's folder so runs do not overwrite each other's figures), then figures/.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..paths import REPO_ROOT


def figures_dir(profile: str = "cpu-smoke", root: str | Path | None = None) -> Path:
    d = Path(root or os.environ.get("KGRAG_FIGURES_DIR") or REPO_ROOT / "figures") / Path(str(profile)).stem
    d.mkdir(parents=True, exist_ok=True)
    return d


def save_figure(fig, name: str, profile: str = "cpu-smoke", root: str | Path | None = None, dpi: int = 130) -> Path:
    """Save a matplotlib figure as PNG (readable in any viewer and in the executed notebook)."""
    path = figures_dir(profile, root) / f"{name}.png"
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def plot_ours_and_paper(table: "pd.DataFrame", metric: str = "Correctness", title: str = ""):
    """One panel per dataset: each system's `metric` (ours, blue) beside the paper's (hatched);
    `table` has columns (dataset, metric, "ours" | "paper")."""
    import matplotlib.pyplot as plt
    import numpy as np

    datasets = list(dict.fromkeys(c[0] for c in table.columns))
    labels = list(table.index)
    fig, axes = plt.subplots(1, max(len(datasets), 1), figsize=(4.2 * max(len(datasets), 1), 3.6), squeeze=False,
                             sharey=True)
    x = np.arange(len(labels))
    for ax, ds in zip(axes[0], datasets):
        ours = table[(ds, metric, "ours")].to_numpy(dtype=float)
        paper = table[(ds, metric, "paper")].to_numpy(dtype=float)
        bars = ax.bar(x - 0.2, ours, 0.4, label="ours", color="#4C72B0")
        ax.bar_label(bars, labels=["–" if np.isnan(v) else f"{v:.0f}" for v in ours], fontsize=6, padding=1)
        ax.bar(x + 0.2, paper, 0.4, label="paper", color="#BBBBBB", hatch="//", edgecolor="#777777")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7, rotation=40, ha="right")
        ax.set_ylim(0, 100)
        ax.set_title(f"{ds} ({metric})", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"{metric} (%)")
    axes[0][-1].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
