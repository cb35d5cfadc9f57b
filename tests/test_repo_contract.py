"""Contracts of the repository itself: README commands, CI, clean notebooks."""

from __future__ import annotations

import json
import re

import pytest

from kgrag_lib.paths import REPO_ROOT
from kgrag_lib.notebooks import study_notebooks


def test_ci_runs_readme_test_command_exactly():
    readme = (REPO_ROOT / "README.md").read_text()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    setup = [b for b in blocks if b.startswith("bash scripts/install.sh")]
    assert len(setup) == 2, "README must hold exactly two set-up commands"
    main_job, tests = setup
    assert "kgrag study --profile cpu-smoke" in main_job
    assert tests in ci.splitlines()


@pytest.mark.parametrize("nb", study_notebooks(), ids=lambda p: p.name)
def test_notebooks_are_clean_sources(nb):
    data = json.loads(nb.read_text())
    code = [c for c in data["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "strip outputs"
    tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged `parameters`"
    src = "".join(tagged[0]["source"])
    assert "profile" in src and "out_dir" in src


@pytest.mark.parametrize("nb", study_notebooks(), ids=lambda p: p.name)
def test_papermill_reads_every_parameter_with_its_help(nb, caplog):
    """`papermill --help-notebook` lists each parameter; a stray '=' in a comment hides one of them."""
    import papermill

    with caplog.at_level("WARNING", logger="papermill"):
        params = list(papermill.inspect_notebook(str(nb)).values())
    assert not [r.getMessage() for r in caplog.records if "Unable to parse" in r.getMessage()]
    names = {p["name"] for p in params}
    assert {"profile", "out_dir"} <= names
    assert all(p["help"] for p in params if p["name"] not in ("profile", "out_dir")), "every parameter has a help comment"
