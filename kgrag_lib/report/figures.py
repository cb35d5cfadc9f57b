"""Where figures go: figures/<profile>/<name>.png, beside nothing the runs did not make.

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
