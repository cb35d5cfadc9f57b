"""The table of every notebook's settings, and the one full check of a profile.

A profile names sections of every layer; each layer checks its own (`config`: the top level
and `run`; `methods.registry`: `models` and `methods`; this module: `notebooks`).
`load_profile` runs them all, so a typo anywhere in a profile is refused whichever part of
it a command uses.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

from ..config import make_config, profile_mapping, read_profile, refuse_unknown
from ..methods.registry import PAPERS, check_profile_methods
from . import cross_method, report
from .base import NotebookSettings

# Every paper's notebooks (`studies/<paper>.py`, papers from the registry), then those across the
# papers (50: every method on the same questions), then the report's.
NOTEBOOKS: dict[str, type[NotebookSettings]] = {
    **{name: cls for paper in PAPERS for name, cls in import_module(f"{__package__}.{paper}").NOTEBOOKS.items()},
    **cross_method.NOTEBOOKS,
    **report.NOTEBOOKS,
}


def check_profile_notebooks(profile: dict[str, Any], where: str) -> None:
    """Refuse an unknown notebook or a bad setting in a profile's `notebooks` sections."""
    sections = profile_mapping(profile, "notebooks", where)
    refuse_unknown(sections, NOTEBOOKS, f"{where}, section notebooks", "notebook(s)")
    for name, sec in sections.items():
        make_config(NOTEBOOKS[name], sec or {}, where=f"{where}, notebooks.{name}")


def load_profile(name_or_path: str | Path | dict) -> dict[str, Any]:
    """A profile (shipped name, YAML path or dict) with every section checked."""
    return read_profile(name_or_path, check_profile_methods, check_profile_notebooks)
