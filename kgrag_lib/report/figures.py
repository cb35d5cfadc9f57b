"""Where figures go: figures/<profile>/<name>.png, beside nothing the runs did not make; and the
bar chart of our numbers beside a paper's that the papers' reports share (`plot_ours_and_paper`).

The root is, in order: the `root` argument, $KGRAG_FIGURES_DIR (a sweep points it into each
combination's folder so runs do not overwrite each other's figures), then figures/.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

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


def add_note(fig, note: str, y: float = -0.01, width: int | None = None) -> None:
    """A caption under the figure (wrapped, dark red): what a reader must know before comparing
    bars, e.g. that a panel's KG holds none of its dataset's facts. `y` is in figure coordinates;
    `save_figure` saves with a tight box, so a caption below 0 is kept. `width` (characters per
    line) defaults to what the figure's width holds, so the caption does not widen the figure."""
    if not note:
        return
    import textwrap

    width = width or max(60, int(fig.get_figwidth() * 17))
    fig.text(0.5, y, "\n".join(textwrap.fill(p, width) for p in str(note).split("\n")), ha="center", va="top",
             fontsize=7.5, color="#8B1A1A", style="italic")


def errorbar_of(ci, values) -> "np.ndarray | None":
    """(2, n) distances below and above each value for `ax.errorbar`/`ax.bar(yerr=)` from one
    (lo, hi) pair per value (None or NaN where a value has no interval); None if none has one."""
    import numpy as np

    if ci is None or all(c is None for c in ci):
        return None
    err = np.full((2, len(values)), np.nan)   # NaN: no bar drawn for a value without an interval
    for i, (v, c) in enumerate(zip(values, ci)):
        if c is None or v is None or np.isnan(v) or any(x is None or np.isnan(x) for x in c):
            continue
        err[0, i], err[1, i] = max(v - c[0], 0.0), max(c[1] - v, 0.0)
    return err


def bar_values(ax, x, values, err=None, fontsize: int = 6) -> None:
    """Each bar's value above its interval's top (or above the bar), "–" where there is none;
    capped below the panel's top so that a full bar's label stays under the panel title."""
    import numpy as np

    for i, (xi, v) in enumerate(zip(x, values)):
        v = float("nan") if v is None else float(v)
        y = 0.0 if np.isnan(v) else v + (err[1, i] if err is not None else 0.0)
        ax.text(xi, min(y + 1.0, 101.0), "–" if np.isnan(v) else f"{v:.0f}", ha="center", va="bottom",
                fontsize=fontsize)


def intervals_and_n(table: "pd.DataFrame", rows, key: str, dataset_of, system_of):
    """From a notebook's result `rows`: `table` with each dataset column renamed "<dataset> (n=N)"
    and the `ci` mapping of `plot_ours_and_paper` ((renamed dataset, system) -> `<key>_ci95`).
    `dataset_of` / `system_of` give a row's dataset column and system (index) label."""
    n: dict[str, set] = {}
    for r in rows:
        n.setdefault(dataset_of(r), set()).add(r.get("n"))
    names = {d: f"{d} (n={'/'.join(str(k) for k in sorted(v, key=str))})" for d, v in n.items()}
    ci = {(names[dataset_of(r)], system_of(r)): r.get(f"{key}_ci95") for r in rows}
    return table.rename(columns=names, level=0), ci


def plot_ours_and_paper(table: "pd.DataFrame", metric: str = "Correctness", title: str = "",
                        ci: "Mapping[tuple[str, str], Sequence[float]] | None" = None, note: str = ""):
    """One panel per dataset: each system's `metric` (ours, blue, with its 95% interval where `ci`
    gives one for (dataset, system)) beside the paper's (hatched); `table` has columns
    (dataset, metric, "ours" | "paper"). `note` is a caption under the figure (`add_note`)."""
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
        err = errorbar_of([(ci or {}).get((ds, lab)) for lab in labels], ours)
        bars = ax.bar(x - 0.2, ours, 0.4, label="ours", color="#4C72B0", yerr=err,
                      error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#222222"})
        bar_values(ax, x - 0.2, ours, err)
        ax.bar(x + 0.2, paper, 0.4, label="paper", color="#BBBBBB", hatch="//", edgecolor="#777777")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7, rotation=40, ha="right")
        ax.set_ylim(0, 108)
        ax.set_yticks(range(0, 101, 20))
        ax.set_title(f"{ds} ({metric})", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"{metric} (%)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    add_note(fig, note)
    return fig
