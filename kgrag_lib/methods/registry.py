"""The papers, and the table of every method `kgrag run` and the notebooks can run, by CLI name.

`PAPERS` is the one list of the reproduced papers; every layer finds a paper's parts from it
by the one template (`methods/<paper>/pipeline.py` and `prompts.py`, `report/<paper>/`,
`studies/<paper>.py`; tests/test_paper_template.py checks it). A paper's package exports
`METHODS` (its `MethodSpec`s), `DEVIATIONS` (how the reproduction differs from the paper) and
`CLI_FLAGS` (the `kgrag run` flags of its most used settings). Adding a paper adds its name here.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import Any

from ..config import profile_mapping, refuse_unknown
from ..data.registry import DATASETS, get_spec
from ..errors import ConfigError
from .base import MethodSpec


PAPERS = ("metaqa", "kg_infused", "sa_rag", "tcr_qf")  # in the order the study reports them


def paper_package(paper: str) -> ModuleType:
    """`methods.<paper>`, imported on first use (so reading settings loads no paper)."""
    return import_module(f"{__package__}.{paper}")


def available_methods() -> dict[str, MethodSpec]:
    return {s.name: s for s in sorted(methods_by_paper(), key=lambda s: s.name)}


def methods_by_paper() -> list[MethodSpec]:
    """Every method, paper by paper in `PAPERS` order and each paper's in its table's order (a study's rows)."""
    return [s for paper in PAPERS for s in paper_package(paper).METHODS]


def cli_flags() -> list[tuple[str, type, str]]:
    """Every paper's `CLI_FLAGS` as one list of (flag, type, help): a flag several papers share
    (--kg, --top-k) appears once, with their help texts joined."""
    merged: dict[str, tuple[type, list[str]]] = {}
    for paper in PAPERS:
        for flag, typ, hlp in paper_package(paper).CLI_FLAGS:
            known = merged.setdefault(flag, (typ, []))
            if known[0] is not typ:
                raise TypeError(f"{flag} is {known[0].__name__} in one paper and {typ.__name__} in {paper}")
            known[1].append(hlp)
    return [(flag, typ, "; ".join(helps)) for flag, (typ, helps) in merged.items()]


def get_method(name: str) -> MethodSpec:
    methods = available_methods()
    if name not in methods:
        raise ConfigError(f"unknown method {name!r}; expected one of: {', '.join(methods)}")
    return methods[name]


def check_dataset(spec: MethodSpec, dataset: str) -> None:
    """Refuse a dataset the method cannot run on (an unknown one, one not in its list, a generic one that
    lacks a part it reads), before anything is loaded."""
    refusal = spec.refusal(get_spec(dataset))
    if refusal:
        raise ConfigError(f"{refusal} (see `kgrag run --list`)")


def runs_on(spec: MethodSpec) -> list[str]:
    """The registered datasets the method accepts: its list, then the generic ones that provide what it reads."""
    return [*spec.datasets, *(d.name for d in DATASETS.values() if d.name not in spec.datasets and not spec.refusal(d))]


def check_profile_methods(profile: dict[str, Any], where: str) -> None:
    """Refuse a profile's `models` or `embedders` entry for an unknown study family, an embedder
    spec that cannot name a model, and any unknown method or bad setting in its `methods`
    sections (a check for `config.read_profile`)."""
    from ..retrieval.embedder_specs import parse_embedder_spec

    methods = available_methods()
    families = sorted({m.family for m in methods.values()})
    for section in ("models", "embedders"):
        refuse_unknown(profile_mapping(profile, section, where), families, f"{where}, section {section}",
                       "study family(ies)")
    specs = {f"embedders.{fam}": spec for fam, spec in profile_mapping(profile, "embedders", where).items()}
    if profile_mapping(profile, "run", where).get("embedder") is not None:
        specs["run.embedder"] = profile["run"]["embedder"]
    for key, spec in specs.items():
        try:
            parse_embedder_spec(spec)
        except ConfigError as e:
            raise ConfigError(f"{where}, {key}: {e}") from None
    sections = profile_mapping(profile, "methods", where)
    refuse_unknown(sections, methods, f"{where}, section methods", "method(s)")
    for name, sec in sections.items():
        methods[name].check_config(sec or {}, where=f"{where}, methods.{name}")
