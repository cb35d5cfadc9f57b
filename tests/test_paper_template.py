"""Every paper has the same shape, and the registry is the one list of papers.

A paper is `methods/<paper>/` (with `pipeline.py`: its settings, variants, `METHODS`,
`DEVIATIONS`, `CLI_FLAGS`; and `prompts.py`), `report/<paper>/` (`tables.py`, `figures.py`,
`paper_numbers.py` with the numbers it reproduces and the report's `DEVIATIONS`) and
`studies/<paper>.py` (its notebooks' settings, `NOTEBOOKS`). No paper imports another's code:
what two papers share lives in a shared layer (kg/, retrieval/, report/tables.py, ...).
"""

from __future__ import annotations

import dataclasses
from importlib import import_module
from pathlib import Path

import pytest

from kgrag_lib.methods.base import MethodSpec
from kgrag_lib.methods.registry import PAPERS, available_methods, cli_flags
from test_import_structure import import_graph

ROOT = Path(__file__).resolve().parents[1] / "kgrag_lib"
SHARED_METHODS = {"base.py", "common.py", "registry.py", "prompt_digest.py", "__init__.py", "__pycache__"}
SHARED_REPORT = {"__init__.py", "claims.py", "tables.py", "figures.py", "study.py", "mechanism.py", "rescore.py",
                 "papers.py", "cross_method.py", "multiplicity.py", "accounting.py", "findings.py", "publish.py",
                 "plan.py", "preregistration.py", "__pycache__"}
SHARED_STUDIES = {"__init__.py", "base.py", "profiles.py", "report.py", "order.py", "cross_method.py", "data_needs.py",
                  "__pycache__"}


@pytest.mark.parametrize("paper", PAPERS)
def test_every_paper_has_the_template_files(paper):
    expected = [f"methods/{paper}/pipeline.py", f"methods/{paper}/prompts.py", f"report/{paper}/tables.py",
                f"report/{paper}/figures.py", f"report/{paper}/paper_numbers.py", f"studies/{paper}.py"]
    missing = [p for p in expected if not (ROOT / p).is_file()]
    assert not missing, f"paper {paper!r} lacks {missing}"


@pytest.mark.parametrize("paper", PAPERS)
def test_every_paper_exports_what_the_other_layers_read(paper):
    package, pipeline = import_module(f"kgrag_lib.methods.{paper}"), import_module(f"kgrag_lib.methods.{paper}.pipeline")
    for module in (package, pipeline):
        assert isinstance(module.METHODS, tuple) and module.METHODS, f"{module.__name__}.METHODS"
        assert all(isinstance(s, MethodSpec) for s in module.METHODS)
        assert isinstance(module.DEVIATIONS, tuple) and all(isinstance(d, str) and d for d in module.DEVIATIONS)
        assert all(flag.startswith("--") and typ in (int, float, str) and hlp for flag, typ, hlp in module.CLI_FLAGS)
    assert set(pipeline.METHODS) <= set(package.METHODS)
    assert {s.family for s in package.METHODS} == {pipeline.FAMILY}, "one study family per paper"
    assert all(dataclasses.is_dataclass(s.config) for s in package.METHODS)
    for flag, _, _ in package.CLI_FLAGS:  # a flag sets a field of some method of the paper
        assert any(flag[2:].replace("-", "_") in {f.name for f in dataclasses.fields(s.config)} for s in package.METHODS)
    numbers = import_module(f"kgrag_lib.report.{paper}.paper_numbers")
    assert isinstance(numbers.DEVIATIONS, tuple) and all(isinstance(d, str) for d in numbers.DEVIATIONS)
    assert import_module(f"kgrag_lib.studies.{paper}").NOTEBOOKS


def test_the_registry_is_the_one_list_of_papers():
    """A paper's folder anywhere is a registered paper, and the CLI, the profile check and the
    report reach every registered paper through the registry."""
    found = {p.name for p in (ROOT / "methods").iterdir()} - SHARED_METHODS
    found |= {p.name for p in (ROOT / "report").iterdir()} - SHARED_REPORT
    found |= {p.stem for p in (ROOT / "studies").iterdir()} - {Path(s).stem for s in SHARED_STUDIES}
    assert found == set(PAPERS), f"folders of unregistered papers: {sorted(found - set(PAPERS))}"
    families = {s.family for s in available_methods().values()}
    assert families == {import_module(f"kgrag_lib.methods.{p}.pipeline").FAMILY for p in PAPERS}
    flags = {f for f, _, _ in cli_flags()}
    assert all(f in flags for p in PAPERS for f, _, _ in import_module(f"kgrag_lib.methods.{p}").CLI_FLAGS)

    from kgrag_lib.report.study import paper_deviations
    from kgrag_lib.studies import NOTEBOOKS

    every = paper_deviations()
    for p in PAPERS:
        for d in (*import_module(f"kgrag_lib.methods.{p}").DEVIATIONS,
                  *import_module(f"kgrag_lib.report.{p}.paper_numbers").DEVIATIONS):
            assert d in every
        assert set(import_module(f"kgrag_lib.studies.{p}").NOTEBOOKS) <= set(NOTEBOOKS)


def _paper_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] in ("methods", "report", "studies") and parts[2] in PAPERS:
        return parts[2]
    return None


def cross_paper_imports() -> list[str]:
    g = import_graph()
    return sorted(f"{a} -> {b} (line {g.edges[a, b]['line']})" for a, b in g.edges
                  if _paper_of(a) and _paper_of(b) and _paper_of(a) != _paper_of(b))


def test_no_paper_imports_another_papers_code():
    crossing = cross_paper_imports()
    assert not crossing, "a paper imports another paper's code:\n  " + "\n  ".join(crossing)
