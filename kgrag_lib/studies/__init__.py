"""What a notebook needs before its first experiment, in one call: `setup(name, ...)`.

Every study notebook starts with

    nb = setup("21_kg_infused_main", profile=profile, out_dir=out_dir, n=n, seed=seed, ...)

passing its papermill parameters. `nb.settings` are the notebook's typed settings (see
`studies.base` for the precedence), `nb.ctx` the one context its runs share (LLM, embedder,
KGs), `nb.run(...)` one run and `nb.grid(...)` many, both through `experiment.run_experiment`,
so their files equal those of the same `kgrag run` command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import RunConfig, make_config, profile_section
from ..errors import ConfigError
from ..experiment import make_context, resolve_embedder, resolve_model
from .base import NotebookSettings, Setup, resolve
from .profiles import NOTEBOOKS, check_profile_notebooks, load_profile


def notebook_settings(name: str, profile: str | Path | dict = "cpu-smoke", **given: Any) -> Any:
    """The typed settings of notebook `name` (papermill parameters that are not None win)."""
    if name not in NOTEBOOKS:
        raise ConfigError(f"no settings for notebook {name!r}; known: {', '.join(NOTEBOOKS)}")
    return resolve(NOTEBOOKS[name], name, load_profile(profile), given)


def setup(name: str, *, profile: str | Path | dict = "cpu-smoke", out_dir: str | Path, **given: Any) -> Setup:
    """Resolve a notebook's settings, make its context and output folder (see the module docstring)."""
    prof = load_profile(profile)
    settings = notebook_settings(name, prof, **given)
    run = make_config(RunConfig, profile_section(prof, "run"), where=f"profile {prof['name']!r}, run")
    run.model = resolve_model(prof, NOTEBOOKS[name].family, getattr(settings, "model", None))
    run.embedder = resolve_embedder(prof, NOTEBOOKS[name].family)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return Setup(name, prof, settings, out, make_context(run, prof))


__all__ = ["NOTEBOOKS", "NotebookSettings", "Setup", "check_profile_notebooks", "load_profile", "notebook_settings",
           "setup"]
