"""One experiment = one method on one dataset sample under one profile.

The CLI (`kgrag run`) and the notebooks both call `run_experiment`, so a notebook cell and a
shell command with the same parameters produce the same files (and share the LLM cache).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .config import RunConfig, load_profile, make_config, profile_section
from .methods.base import RunContext, get_method

RUN_FIELDS = {f.name for f in dataclasses.fields(RunConfig)}


def make_context(profile: str | dict = "cpu-smoke", *, model: str | None = None, family: str | None = None,
                 embedder: str | None = None, seed: int = 0, data_root: str | None = None,
                 cache_dir: str | None = None) -> RunContext:
    """A RunContext for a profile; the LLM is picked by `model`, else the profile's `models[family]`."""
    prof = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    run = profile_section(prof, "run")
    chosen = model or (profile_section(prof, "models").get(family) if family else None) or run.get("model")
    return RunContext(
        model=chosen or RunConfig.model,
        embedder_spec=embedder or run.get("embedder") or RunConfig.embedder,
        seed=seed,
        data_root_=data_root,
        cache_dir_=cache_dir,
        profile=prof,
    )


def run_experiment(method: str, dataset: str, out: str | Path, *, profile: str | dict = "cpu-smoke",
                   ctx: RunContext | None = None, progress: bool = True, **overrides: Any) -> dict[str, Any]:
    """Run `method` on `dataset` into `out`; `overrides` are RunConfig fields or method config fields.

    Pass the same `ctx` to several calls (as the notebooks do) to share the loaded LLM,
    embedder, KGs and indexes between them.
    """
    from .data.registry import load_questions
    from .runner import run_method

    prof = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    spec = get_method(method)
    run_over = {k: v for k, v in overrides.items() if k in RUN_FIELDS}
    method_over = {k: v for k, v in overrides.items() if k not in RUN_FIELDS and v is not None}
    run_cfg = make_config(RunConfig, profile_section(prof, "run"),
                          {"method": method, "dataset": dataset, "out": str(out), "profile": prof.get("name")},
                          run_over, where=f"profile {prof.get('name')!r} / run overrides")
    if ctx is None:
        ctx = make_context(prof, model=run_over.get("model"), family=spec.family, embedder=run_over.get("embedder"),
                           seed=run_cfg.seed, data_root=run_cfg.data_root, cache_dir=run_cfg.cache_dir)
    method_cfg = {**profile_section(prof, "methods", method), **method_over}
    runner_method = spec.factory(ctx, method_cfg)
    questions = load_questions(dataset, split=run_cfg.split, path=run_cfg.qa_file, root=run_cfg.data_root,
                               n=run_cfg.n, seed=run_cfg.seed)
    method_config = getattr(runner_method, "config", None)
    config = {
        "run": dataclasses.asdict(run_cfg),
        "model": ctx.model,
        "embedder": ctx.embedder_spec,
        "method_config": dataclasses.asdict(method_config) if dataclasses.is_dataclass(method_config) else method_cfg,
        "profile": prof,
        "qids": [q.qid for q in questions],
    }
    llm = ctx.llm
    config["llm_identity"] = getattr(llm, "identity", None)
    return run_method(runner_method, questions, out, config, llm=llm, progress=progress)
