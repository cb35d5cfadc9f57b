"""The table of every method `kgrag run` and the notebooks can run, by CLI name.

Each paper's package lists its `MethodSpec`s in `METHODS`; adding a paper adds one line here.
"""

from __future__ import annotations

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
