"""The package's import graph has no cycle, counting imports inside functions too.

Every module of kgrag_lib is parsed with `ast`; each `import` / `from ... import` anywhere in
it (module level, functions, TYPE_CHECKING blocks) is an edge. `from pkg import name` where
`name` is a submodule is an edge to that submodule, and importing a module also imports the
`__init__` of every package above it, as Python does. A cycle means two layers that each
need the other: data should flow one way (dataset -> KG/corpus -> index -> method ->
predictions -> scores -> report).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PKG = "kgrag_lib"
ROOT = Path(__file__).resolve().parents[1] / PKG


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _is_package(mods: dict[str, Path], name: str) -> bool:
    return mods[name].name == "__init__.py"


def _targets(mods: dict[str, Path], name: str, importer: str) -> set[str]:
    """The kgrag_lib modules that `import name` executes from `importer`: the module and every
    package above it, less the packages above the importer (Python initialised those before
    the importer ran, so they are not a dependency of the import statement)."""
    out = set()
    parts = name.split(".")
    own = importer.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        is_own_ancestor = i < len(own) and own[:i] == parts[:i] and prefix != name
        if prefix in mods and not is_own_ancestor:
            out.add(prefix)
    return out


def import_graph() -> nx.DiGraph:
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = mod if _is_package(mods, mod) else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            names: set[str] = set()
            if isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                # `from pkg import sub` imports the submodule; `from pkg import name` needs pkg's __init__
                subs = {f"{src}.{a.name}" for a in node.names if f"{src}.{a.name}" in mods}
                names = subs | ({src} if len(subs) < len(node.names) else set())
            for name in names:
                if name == PKG or name.startswith(PKG + "."):
                    for t in _targets(mods, name, mod):
                        if t != mod:
                            g.add_edge(mod, t, line=node.lineno)
    return g


def _describe(g: nx.DiGraph, cycle: list[str]) -> str:
    hops = [f"{a} -> {b} (line {g.edges[a, b]['line']})" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
    return "\n    ".join(hops)


def test_graph_sees_function_local_and_submodule_imports():
    g = import_graph()
    # a function-local relative import (experiment.resolve_model: `from .llm import DEFAULT_SPEC`)
    assert g.has_edge("kgrag_lib.experiment", "kgrag_lib.llm")
    # importing a submodule runs its package's __init__
    assert g.has_edge("kgrag_lib.experiment", "kgrag_lib.methods")
    assert g.has_edge("kgrag_lib.experiment", "kgrag_lib.methods.base")


def test_no_import_cycle():
    g = import_graph()
    tangles = [scc for scc in nx.strongly_connected_components(g) if len(scc) > 1]
    shown = "\n".join(
        f"  {len(scc)} modules import each other, e.g.:\n    "
        + _describe(g, [a for a, _ in nx.find_cycle(g.subgraph(scc))])
        for scc in tangles
    )
    assert not tangles, f"import cycles in {PKG} (file line of each import):\n{shown}"


# The layers, lowest first: a module may import its own layer and those below, never above (issue 42).
# data, llm and retrieval are peers; the KG sits on them; methods on the KG; the runner on methods; the
# report reads run folders; studies arrange notebooks' reports; the CLI is on top.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "paths", "redact", "records", "jsonl", "config", "concurrency", "progress", "provenance", "hub", "blocksums"),
    ("data", "llm", "retrieval"),
    ("kg", "rundir"),
    ("eval",),
    ("methods",),
    ("runner", "experiment", "grid"),
    ("report", "executors"),
    ("studies",),
    ("notebooks", "train"),
    ("cli_choices", "doctor", "commands", "cli", "__main__"),
]


def _layer_of(module: str) -> int:
    if module == PKG:
        return 0   # the package's __init__ holds the version only
    top = module.split(".")[1]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: its top-level name {top!r} is in no layer of LAYERS; add it where it belongs")


def test_every_import_goes_down_the_layers():
    g = import_graph()
    backward = sorted(f"{a} -> {b} (line {d['line']}): layer {_layer_of(a)} imports layer {_layer_of(b)}"
                      for a, b, d in g.edges(data=True) if _layer_of(b) > _layer_of(a))
    assert not backward, "imports that run back up the layers:\n  " + "\n  ".join(backward)


def test_readme_layout_line_names_the_layers_in_order():
    readme = (ROOT.parent / "README.md").read_text(encoding="utf-8")
    line = next((ln for ln in readme.splitlines() if ln.startswith("**Layers**")), "")
    assert line, "README has no **Layers** line"
    shown = [name.strip("` ") for name in line.split(":", 1)[1].split("→")]
    assert shown == [" / ".join(names) for names in LAYERS], shown
