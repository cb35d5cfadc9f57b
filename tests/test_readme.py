"""README is the front door: short, the two set-up commands CI and users run, and findings that
only point at the generated report (numbers live in results/reference/REPORT.md)."""

from __future__ import annotations

import re

from kgrag_lib.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_short_and_has_the_two_commands():
    assert len(README.splitlines()) < 150
    assert "bash scripts/install.sh && .venv/bin/kgrag study --profile cpu-smoke\n" in README
    assert "bash scripts/install.sh && .venv/bin/python -m pytest -ra\n" in README
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash scripts/install.sh && .venv/bin/python -m pytest -ra" in ci


def test_findings_summary_only_links_to_the_report():
    block = re.search(r"<!-- findings[^>]*-->\n(.*?)<!-- /findings -->", README, re.S)
    assert block, "README has no findings block"
    lines = [ln for ln in block.group(1).splitlines() if ln.strip()]
    assert 1 <= len(lines) <= 6
    for ln in lines:
        assert "(results/reference/REPORT.md" in ln, f"a findings line without its link to REPORT.md: {ln}"


def test_report_carries_the_hand_written_findings():
    findings = (REPO_ROOT / "results" / "reference" / "FINDINGS.md").read_text(encoding="utf-8")
    report = (REPO_ROOT / "results" / "reference" / "REPORT.md").read_text(encoding="utf-8")
    assert findings.startswith("## Findings\n") and findings.strip() in report
