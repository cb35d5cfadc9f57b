"""What a notebook needs before its first experiment, in one call: `setup(name, ...)`.

Every study notebook starts with

    nb = setup("21_kg_infused_main", profile=profile, out_dir=out_dir, n=n, seed=seed, ...)

passing its papermill parameters. `nb.settings` are the notebook's typed settings (see
`studies.base` for the precedence), `nb.ctx` the one context its runs share (LLM, embedder,
KGs), `nb.run(...)` one run and `nb.grid(...)` many, both through `experiment.run_experiment`,
so their files equal those of the same `kgrag run` command.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..config import RunConfig, load_profile, make_config, profile_section
from ..errors import ConfigError
from ..methods.base import RunContext
from . import kg_infused, metaqa, report, sa_rag, tcr_qf
from .base import NotebookSettings, resolve

NOTEBOOKS: dict[str, type[NotebookSettings]] = {**metaqa.NOTEBOOKS, **kg_infused.NOTEBOOKS, **sa_rag.NOTEBOOKS,
                                                **tcr_qf.NOTEBOOKS, **report.NOTEBOOKS}


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
        from ..experiment import run_experiment

        return run_experiment(method, dataset, out, profile=self.profile, ctx=self.ctx,
                              **{**self._run_overrides(), **overrides})

    def grid(self, runs: Sequence[Any], datasets: Sequence[str] | None = None, out: str | Path | None = None,
             progress: bool = True, **overrides: Any):
        """Every configuration on every dataset (`grid.run_grid`) under `out` (default: out_dir)."""
        from ..grid import run_grid

        datasets = list(datasets if datasets is not None else self.settings.datasets)
        return run_grid(runs, datasets, Path(out or self.out_dir), ctx=self.ctx, profile=self.profile,
                        progress=progress, **{**self._run_overrides(), **overrides})

    def questions(self, datasets: Sequence[str] | None = None) -> list[Any]:
        """The seeded sample the runs answer (the same draw the runner makes)."""
        from ..data.registry import load_questions

        s = self.settings
        datasets = list(datasets or getattr(s, "datasets", None) or [s.dataset])
        return [q for d in datasets for q in load_questions(d, root=self.ctx.data_root, n=s.n, seed=s.seed)]

    def describe(self) -> str:
        shown = {k: v for k, v in dataclasses.asdict(self.settings).items()}
        return (f"notebook {self.name}, profile {self.profile_name}: {self.profile.get('description', '')}\n"
                f"settings: {shown}\nmodel: {self.model}; outputs: {self.out_dir}")


def notebook_settings(name: str, profile: str | Path | dict = "cpu-smoke", **given: Any) -> Any:
    """The typed settings of notebook `name` (papermill parameters that are not None win)."""
    if name not in NOTEBOOKS:
        raise ConfigError(f"no settings for notebook {name!r}; known: {', '.join(NOTEBOOKS)}")
    return resolve(NOTEBOOKS[name], name, load_profile(profile), given)


def setup(name: str, *, profile: str | Path | dict = "cpu-smoke", out_dir: str | Path, **given: Any) -> Setup:
    """Resolve a notebook's settings, make its context and output folder (see the module docstring)."""
    from ..experiment import make_context, resolve_model

    prof = load_profile(profile)
    settings = notebook_settings(name, prof, **given)
    run = make_config(RunConfig, profile_section(prof, "run"), where=f"profile {prof['name']!r}, run")
    run.model = resolve_model(prof, NOTEBOOKS[name].family, getattr(settings, "model", None))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return Setup(name, prof, settings, out, make_context(run))


__all__ = ["NOTEBOOKS", "NotebookSettings", "Setup", "notebook_settings", "setup"]
