"""The table of every method `kgrag run` and the notebooks can run, by CLI name.

Each paper's package lists its `MethodSpec`s in `METHODS`; adding a paper adds one line here.
"""

from __future__ import annotations

from typing import Any

from ..config import profile_mapping, refuse_unknown
from ..errors import ConfigError
from .base import MethodSpec


def available_methods() -> dict[str, MethodSpec]:
    from . import kg_infused, metaqa, sa_rag, tcr_qf

    specs = [*metaqa.METHODS, *kg_infused.METHODS, *sa_rag.METHODS, *tcr_qf.METHODS]
    return {s.name: s for s in sorted(specs, key=lambda s: s.name)}


def get_method(name: str) -> MethodSpec:
    methods = available_methods()
    if name not in methods:
        raise ConfigError(f"unknown method {name!r}; expected one of: {', '.join(methods)}")
    return methods[name]


def check_dataset(spec: MethodSpec, dataset: str) -> None:
    """Refuse a dataset the method cannot run on, before anything is loaded."""
    if dataset not in spec.datasets:
        raise ConfigError(f"method {spec.name!r} does not run on dataset {dataset!r}; it supports "
                          f"{', '.join(spec.datasets)} (see `kgrag run --list`)")


def check_profile_methods(profile: dict[str, Any], where: str) -> None:
    """Refuse a profile's `models` entry for an unknown study family and any unknown method or
    bad setting in its `methods` sections (a check for `config.read_profile`)."""
    methods = available_methods()
    families = sorted({m.family for m in methods.values()})
    refuse_unknown(profile_mapping(profile, "models", where), families, f"{where}, section models",
                   "study family(ies)")
    sections = profile_mapping(profile, "methods", where)
    refuse_unknown(sections, methods, f"{where}, section methods", "method(s)")
    for name, sec in sections.items():
        methods[name].check_config(sec or {}, where=f"{where}, methods.{name}")
