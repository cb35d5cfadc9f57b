"""Notebook settings: one typed dataclass per notebook, resolved in one way for all of them.

Precedence, lowest first: the dataclass defaults, the profile's `notebooks.<name>` section,
then the papermill parameters that are not None. A field left None after that takes the
profile's run settings (`n`, `seed`, `seeds`) or the profile's method settings named in
`from_methods` (e.g. a KG-Infused notebook's `kg` is `methods.kg-infused.kg`), so each
default is written once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ..config import RunConfig, make_config, opt, profile_section


@dataclass
class NotebookSettings:
    """Base of every notebook's settings."""

    family: ClassVar[str | None] = None   # the study whose `models:` entry picks the LLM (None: no LLM)
    from_methods: ClassVar[dict[str, tuple[str, str]]] = {}   # field -> (method, setting) when None


@dataclass
class Sample(NotebookSettings):
    """A seeded question sample."""

    n: int | None = opt(None, "questions per dataset (None: the profile's run.n; null there: all)")
    seed: int | None = opt(None, "seed of the question sample and of the LLM calls (None: the profile's run.seed)")


@dataclass
class WithModel(NotebookSettings):
    model: str | None = opt(None, "LLM (None: the profile's models.<family>, else run.model)")


def resolve(cls: type[NotebookSettings], name: str, profile: dict[str, Any], given: dict[str, Any]) -> NotebookSettings:
    """The settings of notebook `name` (see the module docstring)."""
    from ..methods.registry import get_method

    where = f"profile {profile.get('name')!r}, notebooks.{name}"
    settings = make_config(cls, profile_section(profile, "notebooks", name), where=where)
    settings = make_config(cls, {f.name: getattr(settings, f.name) for f in fields(cls)}, given,
                           where=f"parameters of {name}")
    run = make_config(RunConfig, profile_section(profile, "run"), where=f"profile {profile.get('name')!r}, run")
    names = {f.name for f in fields(cls)}
    if "n" in names and settings.n is None:
        settings.n = run.n
    if "seed" in names and settings.seed is None:
        settings.seed = run.seed
    if "seeds" in names and settings.seeds is None:
        settings.seeds = [run.seed]
    for key, (method, setting) in cls.from_methods.items():
        if getattr(settings, key) is None:
            cfg = get_method(method).check_config(profile_section(profile, "methods", method),
                                                  where=f"profile {profile.get('name')!r}, methods.{method}")
            setattr(settings, key, getattr(cfg, setting))
    return settings
