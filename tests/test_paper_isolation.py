"""No paper's code imports another paper's: `methods/<paper>`, `report/<paper>` and
`studies/<paper>` import only their own paper and the shared modules (what two papers share
lives in kg/, retrieval/, methods/common, report/claims, report/figures, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "kgrag_lib"
PAPERS = ("metaqa", "kg_infused", "sa_rag", "tcr_qf")
LAYERS = ("methods", "report", "studies")


def _imports(path: Path) -> list[tuple[int, str]]:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    package = parts[:-1]  # the package a relative import starts from (also for an __init__)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - (node.level - 1)] if node.level else []
            src = ".".join(base + ([node.module] if node.module else []))
            out += [(node.lineno, src)] + [(node.lineno, f"{src}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def _paper_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 3 and parts[0] == "kgrag_lib" and parts[1] in LAYERS and parts[2] in PAPERS:
        return parts[2]
    return None


def test_no_paper_imports_another_papers_code():
    found = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            own = _paper_of(".".join(path.relative_to(ROOT.parent).with_suffix("").parts))
            if own is None:
                continue
            for line, target in _imports(path):
                other = _paper_of(target)
                if other is not None and other != own:
                    found.append(f"{path.relative_to(ROOT.parent)}:{line} ({own}) imports {target}")
    assert not found, "cross-paper imports:\n" + "\n".join(found)


def test_the_check_sees_a_relative_cross_paper_import():
    mod = ROOT / "methods" / "tcr_qf" / "pipeline.py"
    assert _paper_of("kgrag_lib.methods.sa_rag.corpus") == "sa_rag" and _paper_of("kgrag_lib.kg.store") is None
    assert any(t == "kgrag_lib.methods.tcr_qf.context" for _, t in _imports(mod))  # `from .context import ...`
