"""What a method is, and how `kgrag run` finds one.

A method is a small object with `answer(question) -> Prediction`. It is made by a factory
registered under a CLI name; the factory receives a `RunContext` (shared, lazily loaded
parts: LLM, embedder, KGs) and the method's own config dict (profile section merged with
overrides), so the same method runs from the CLI, a notebook or a test.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ..errors import ConfigError
from ..paths import cache_dir as _cache_dir
from ..paths import data_root as _data_root
from ..records import Prediction, Question


class Method(Protocol):
    name: str

    def answer(self, question: Question) -> Prediction: ...


Factory = Callable[["RunContext", dict], Method]


@dataclass
class MethodSpec:
    name: str
    factory: Factory
    datasets: tuple[str, ...]
    summary: str
    family: str  # which study (and profile `models:` entry) the method belongs to


_REGISTRY: dict[str, MethodSpec] = {}

# Modules that register methods on import; listed here so the CLI sees all of them.
METHOD_MODULES = (
    "kgrag_lib.methods.metaqa",
    "kgrag_lib.methods.kg_infused",
)


def register_method(
    name: str, *, family: str, datasets: tuple[str, ...] = (), summary: str = ""
) -> Callable[[Factory], Factory]:
    """Decorator: make `factory(ctx, cfg) -> Method` available to `kgrag run --method NAME`.

    `family` groups methods of one study ("metaqa", "kg-infused"); a profile's `models:`
    mapping picks the LLM per family (the papers used different models).
    """

    def deco(factory: Factory) -> Factory:
        doc = summary or (factory.__doc__ or "").strip().split("\n")[0]
        _REGISTRY[name] = MethodSpec(name, factory, tuple(datasets), doc, family)
        return factory

    return deco


def _load_all() -> None:
    for mod in METHOD_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:  # a real import error inside the module: surface it
                raise


def available_methods() -> dict[str, MethodSpec]:
    _load_all()
    return dict(sorted(_REGISTRY.items()))


def get_method(name: str) -> MethodSpec:
    methods = available_methods()
    if name not in methods:
        raise ConfigError(f"unknown method {name!r}; expected one of: {', '.join(methods)}")
    return methods[name]


@dataclass
class RunContext:
    """Shared parts of a run, loaded on first use so a method only pays for what it needs."""

    model: str = "qwen2.5-coder-0.5b-q4"
    embedder_spec: str = "minilm"
    seed: int = 0
    data_root_: str | None = None
    cache_dir_: str | None = None
    profile: dict[str, Any] = field(default_factory=dict)
    llm_: Any = None
    embedder_: Any = None
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def data_root(self) -> Path:
        return _data_root(self.data_root_)

    @property
    def cache_dir(self) -> Path:
        return _cache_dir(self.cache_dir_)

    @property
    def llm(self):
        if self.llm_ is None:
            from ..llm import load_llm

            self.llm_ = load_llm(self.model, cache_path=self.cache_dir / "llm_cache.sqlite")
        return self.llm_

    @property
    def embedder(self):
        if self.embedder_ is None:
            from ..retrieval import load_embedder

            self.embedder_ = load_embedder(self.embedder_spec)
        return self.embedder_

    def memo(self, key: str, build: Callable[[], Any]) -> Any:
        """Build a heavy shared object (a KG store, an index) once per context."""
        if key not in self.shared:
            self.shared[key] = build()
        return self.shared[key]
