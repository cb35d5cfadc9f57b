"""Notebook settings: one typed dataclass per notebook, resolved in one way for all of them,
and `Setup`, what a notebook holds after `studies.setup`.

Precedence, lowest first: the dataclass defaults, the profile's `notebooks.<name>` section,
then the papermill parameters that are not None. A field left None after that takes the
profile's run settings (`n`, `seed`, `seeds`) or the profile's method settings named in
`from_methods` (e.g. a KG-Infused notebook's `kg` is `methods.kg-infused.kg`), so each
default is written once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Sequence

from ..config import RunConfig, make_config, opt, profile_section
from ..data.registry import load_questions
from ..experiment import run_experiment
from ..grid import run_grid
from ..methods.base import RunContext
from ..methods.registry import get_method
from ..paths import shown_path


@dataclass
class NotebookSettings:
    """Base of every notebook's settings."""

    family: ClassVar[str | None] = None   # the study whose `models:` entry picks the LLM (None: no LLM)
    from_methods: ClassVar[dict[str, tuple[str, str]]] = {}   # field -> (method, setting) when None
    # data manifest entries the notebook reads that none of its settings names (`studies.data_needs`)
    reads: ClassVar[tuple[str, ...]] = ()

    def check(self, where: str) -> None:
        """Refuse, once the settings are resolved, values a later cell would find wrong only after
        the earlier cells' runs (none here; a notebook's settings add theirs)."""


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
    settings.check(f"parameters of {name}")
    return settings


@dataclass
class Setup:
    """A notebook's resolved settings and the context its runs share."""

    name: str
    profile: dict[str, Any]
    settings: Any
    out_dir: Path
    ctx: RunContext

    @property
    def model(self) -> str:
        return self.ctx.model

    @property
    def profile_name(self) -> str:
        return str(self.profile["name"])

    def _run_overrides(self) -> dict[str, Any]:
        s = self.settings
        return {k: getattr(s, k) for k in ("model", "n", "seed") if hasattr(s, k)}

    def run(self, method: str, dataset: str, out: str | Path, **overrides: Any) -> dict[str, Any]:
        """One run (as `kgrag run` with the notebook's profile, model, n and seed, unless overridden)."""
        return run_experiment(method, dataset, out, profile=self.profile, ctx=self.ctx,
                              **{**self._run_overrides(), **overrides})

    def grid(self, runs: Sequence[Any], datasets: Sequence[str] | None = None, out: str | Path | None = None,
             progress: bool = True, **overrides: Any):
        """Every configuration on every dataset (`grid.run_grid`) under `out` (default: out_dir)."""
        datasets = list(datasets if datasets is not None else self.settings.datasets)
        return run_grid(runs, datasets, Path(out or self.out_dir), ctx=self.ctx, profile=self.profile,
                        progress=progress, **{**self._run_overrides(), **overrides})

    def questions(self, datasets: Sequence[str] | None = None) -> list[Any]:
        """The seeded sample the runs answer (the same draw the runner makes)."""
        s = self.settings
        datasets = list(datasets or getattr(s, "datasets", None) or [s.dataset])
        return [q for d in datasets for q in load_questions(d, root=self.ctx.data_root, n=s.n, seed=s.seed)]

    def describe(self) -> str:
        shown = {k: v for k, v in dataclasses.asdict(self.settings).items()}
        return (f"notebook {self.name}, profile {self.profile_name}: {self.profile.get('description', '')}\n"
                f"settings: {shown}\nmodel: {self.model}; outputs: {shown_path(self.out_dir)}")
