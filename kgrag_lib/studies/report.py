"""Settings of the study report notebook (90)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import opt
from .base import NotebookSettings


@dataclass
class Report(NotebookSettings):
    """90_report: REPORT.md from every notebook and run of the results folder."""

    publish_dir: str | None = opt(None, "also copy the compact results (no traces) and the report here, to commit "
                                        "them (cpu-reference: results/reference)")
    note: str = opt("", "a paragraph put at the top of the report (e.g. what the reference run showed)")


NOTEBOOKS = {"90_report": Report}
