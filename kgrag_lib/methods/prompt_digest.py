"""Short digests of the prompt wording a method sends, so that a run records which wording made it.

A run's predictions depend on its prompts as much as on its settings, but prompts are code, not
config: rewording one (as KG-Infused RAG's answer prompt and TCR-QF's prompts were) leaves every
setting unchanged. `run_config` therefore records `{module: digest}` for the prompt modules of the
method (`prompt_digests`), and `rundir.check_resume` refuses to resume a folder whose digests differ.

What a digest covers, per prompt module (`prompts.py` and `*_prompts.py` under `methods/`):
- every module-level constant by name and value: strings, numbers, compiled patterns (the answer
  formats a prompt asks for), and tuples, lists, dicts and dataclass instances of those (few-shot
  demonstrations). Values, not source: a constant computed at import (a JSON schema, a rendered
  demonstration block) counts as the text it renders to;
- the string literals inside the module's functions and classes (the `f"Question: {question}\\nAnswer:"`
  a helper wraps a template in), in order, read from the syntax tree.
Comments and docstrings are not part of it, nor are the functions' other code: editing those
changes nothing. A refactor that moves the same wording between a literal and a constant does
change the digest; the remedy (a rerun with overwrite) then answers everything from the LLM cache.

Which modules a method uses: `MethodSpec.prompts` when it names them (KG-Infused RAG's plain
baselines do not send the Self-RAG or Self-Ask prompts), else every prompt module of the method's
paper package (`registry.PAPERS`).

`closure_digest` hashes only the part of a module that some entry points reach (the KG extraction
prompts, which KG build folders identify by a manual version; tests/test_prompt_digest.py pins them).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import pkgutil
import re
from functools import lru_cache
from importlib import import_module
from types import ModuleType
from typing import Any, Iterable

from ..errors import KgragError
from .registry import PAPERS, paper_package

METHODS_PACKAGE = __package__  # "kgrag_lib.methods"
DIGEST_CHARS = 12
_SKIP = object()


def is_prompt_module(name: str) -> bool:
    """`prompts` or `<something>_prompts` (the last part of a dotted module name)."""
    last = name.rsplit(".", 1)[-1]
    return last == "prompts" or last.endswith("_prompts")


def short_name(module: ModuleType | str) -> str:
    """`kg_infused.prompts` for `kgrag_lib.methods.kg_infused.prompts` (other modules keep their name
    below `kgrag_lib`, e.g. `train.judge_prompts`)."""
    name = module if isinstance(module, str) else module.__name__
    for root in (f"{METHODS_PACKAGE}.", f"{METHODS_PACKAGE.rsplit('.', 1)[0]}."):
        if name.startswith(root):
            return name[len(root):]
    return name


def _module(name: str) -> ModuleType:
    """A prompt module by short or full name."""
    try:
        return import_module(f"{METHODS_PACKAGE}.{name}")
    except ModuleNotFoundError:
        return import_module(f"{METHODS_PACKAGE.rsplit('.', 1)[0]}.{name}")


def _canon(value: Any) -> Any:
    """A JSON form of a constant, or `_SKIP` for what is not wording (functions, classes, modules, types)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, re.Pattern):
        return {"pattern": value.pattern, "flags": int(value.flags)}
    if isinstance(value, (tuple, list, set, frozenset)):
        items = [_canon(v) for v in value]
        if any(v is _SKIP for v in items):
            return _SKIP
        return sorted(items, key=json.dumps) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return _SKIP
        items = {k: _canon(v) for k, v in value.items()}
        return _SKIP if any(v is _SKIP for v in items.values()) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _canon({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    return _SKIP


class _Literals(ast.NodeVisitor):
    """The string literals of a function or class body, in order; docstrings and annotations left out."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def _body(self, node: ast.AST) -> None:
        body = list(getattr(node, "body", []))
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]   # the docstring
        for stmt in body:
            self.visit(stmt)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in (*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)):
            self.visit(d)
        self._body(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(d)
        self._body(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.found.append(node.value)


@lru_cache(maxsize=None)
def _tree(module_name: str) -> ast.Module:
    try:
        source = inspect.getsource(import_module(module_name))
    except (OSError, TypeError) as e:
        raise KgragError(f"cannot read the source of {module_name} to digest its prompt wording ({e}); install "
                         f"kgrag from its source files (a wheel or an editable install ships them)") from None
    return ast.parse(source)


def _definitions(module: ModuleType) -> dict[str, ast.AST]:
    """The module's top-level functions and classes, and its assignments, by the names they bind."""
    out: dict[str, ast.AST] = {}
    for node in _tree(module.__name__).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = node
    return out


def _wording(module: ModuleType, names: Iterable[str] | None = None) -> dict[str, Any]:
    """{name: value} of the module's constants and {def name: literals} of its functions and classes,
    for `names` (None: all of them)."""
    defs = _definitions(module)
    keep = None if names is None else set(names)
    out: dict[str, Any] = {}
    for name, value in vars(module).items():
        if name.startswith("__") or (keep is not None and name not in keep):
            continue
        canon = _canon(value)
        if canon is not _SKIP:
            out[name] = canon
    for name, node in defs.items():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (keep is None or name in keep):
            lit = _Literals()
            lit.visit(node)
            out[f"def {name}"] = lit.found
    return out


def _digest(wording: dict[str, Any]) -> str:
    text = json.dumps(wording, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def module_digest(module: ModuleType | str) -> str:
    """The digest of one prompt module's wording (see the module doc)."""
    mod = _module(module) if isinstance(module, str) else module
    return _digest(_wording(mod))


def reached_names(module: ModuleType | str, entries: Iterable[str]) -> set[str]:
    """`entries` and every module-level name they use, transitively (through function bodies,
    default arguments and the expressions that compute constants)."""
    mod = _module(module) if isinstance(module, str) else module
    defs = _definitions(mod)
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in defs and name not in vars(mod):
            raise KeyError(f"{mod.__name__} has no name {name!r}")
        seen.add(name)
        node = defs.get(name)
        if node is not None:
            todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in defs and n.id not in seen]
    return seen


def closure_digest(module: ModuleType | str, entries: Iterable[str], exclude: Iterable[str] = ()) -> str:
    """The digest of the wording `entries` reach in `module` (`reached_names`), less `exclude`
    (a version constant, which names the wording rather than being part of it)."""
    mod = _module(module) if isinstance(module, str) else module
    return _digest(_wording(mod, reached_names(mod, entries) - set(exclude)))


def paper_prompt_modules(paper: str) -> tuple[str, ...]:
    """Short names of the prompt modules of a paper package (`kg_infused.prompts`, ...), sorted."""
    pkg = import_module(f"{METHODS_PACKAGE}.{paper}")
    return tuple(sorted(f"{paper}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__) if is_prompt_module(m.name)))


def method_prompt_modules(spec: Any) -> tuple[str, ...]:
    """The prompt modules a method sends prompts from: its spec's `prompts`, else its paper's."""
    named = tuple(getattr(spec, "prompts", ()) or ())
    if named:
        return tuple(sorted(named))
    for paper in PAPERS:
        if any(s.name == spec.name for s in paper_package(paper).METHODS):
            return paper_prompt_modules(paper)
    raise KeyError(f"method {spec.name!r} belongs to no paper of registry.PAPERS")


def digests(modules: Iterable[str]) -> dict[str, str]:
    """{short module name: digest} for the named prompt modules."""
    return {short_name(m): module_digest(m) for m in sorted(modules)}


def prompt_digests(spec: Any) -> dict[str, str]:
    """{module: digest} of a method's prompt modules, as a run's config records it (`prompts`)."""
    return digests(method_prompt_modules(spec))
