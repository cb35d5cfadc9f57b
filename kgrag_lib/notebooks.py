"""Execute the study's notebooks with papermill and gather what they report.

Convention every notebook follows: a cell tagged `parameters` (papermill injects overrides
after it) with at least `profile` and `out_dir`; the notebook writes its figures to
`figures/` (under `figures_dir`) and a `summary.json` into `out_dir`: a list of flat rows
(labels + scores) that sweeps and the study table collect.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .config import profile_label, profile_section
from .errors import KgragError
from .executors.base import NotebookTask, resources_for
from .executors.execute import execute, export_html
from .executors.local import LocalExecutor
from .experiment import resolve_model
from .llm.shared_servers import shared
from .paths import IN_CHECKOUT, PACKAGE_DIR, REPO_ROOT
from .redact import refuse_secret
from .rundir import SUMMARY_FILE, read_summary, write_summary  # noqa: F401 (notebooks import them from here)
from .studies.order import study_graph

NOTEBOOKS_ENV = "KGRAG_NOTEBOOKS"


def notebook_dir() -> Path:
    """Where the study's notebooks are: $KGRAG_NOTEBOOKS, else the checkout's notebooks/, else
    the copy an installed package ships (kgrag_lib/study_notebooks, package data)."""
    if os.environ.get(NOTEBOOKS_ENV):
        return Path(os.environ[NOTEBOOKS_ENV]).expanduser().resolve()
    return REPO_ROOT / "notebooks" if IN_CHECKOUT else PACKAGE_DIR / "study_notebooks"


NOTEBOOK_DIR = notebook_dir()


def study_notebooks(directory: Path | None = None) -> list[Path]:
    """The study's notebooks in run order (their numeric prefixes)."""
    return sorted(p for p in (directory or NOTEBOOK_DIR).glob("[0-9][0-9]_*.ipynb"))



def effective_profile(profile: str | Path, run_overrides: dict[str, Any], path: Path, name: str | None = None,
                      server: dict[str, Any] | None = None) -> Path:
    """`profile` with its `run` section overridden (and its `server` section by `server`), checked, and
    written as YAML to `path`; `name` (the study's label) names the figures folder the notebooks write to."""
    import yaml

    from .studies import load_profile

    refuse_secret(run_overrides, "kgrag study", path)
    prof = load_profile(profile)
    if name:
        prof["name"] = name
    prof["run"] = {**(prof.get("run") or {}), **run_overrides}
    if server:
        prof["server"] = {**(prof.get("server") or {}), **server}
    if run_overrides.get("model"):
        _warn_models_replaced(prof.get("models") or {}, str(run_overrides["model"]))
        prof.pop("models", None)   # one model for every family: the profile's per-family choices would win
    if run_overrides.get("embedder"):
        prof.pop("embedders", None)   # likewise one embedder for every family
    load_profile(dict(prof))  # refuse a bad override here, not in the first notebook
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(prof, sort_keys=False), encoding="utf-8")
    return path


def _warn_models_replaced(models: dict[str, Any], model: str) -> None:
    """`--model` replaces every family's LLM, MetaQA's own (gpu-paper: Mistral-7B, the paper's model) too:
    say which families lose a model of their own, so a run meant for one family does not silently
    change the others' (`--only` runs those notebooks alone)."""
    import warnings

    lost = sorted(f"{fam} ({spec})" for fam, spec in models.items() if isinstance(spec, str) and spec != model)
    if lost:
        warnings.warn(f"--model {model} replaces the LLM of every study family, including {', '.join(lost)} "
                      "named in the profile's models: section; to change one family only, run its notebooks "
                      "with --only, or write the model into a profile that extends this one", stacklevel=3)


def run_study(profile: str = "cpu-smoke", out_root: str | Path | None = None, only: list[str] | None = None,
              progress: bool = True, extra: dict[str, Any] | None = None,
              run_overrides: dict[str, Any] | None = None, executor: Any = None,
              notebook_dir: Path | None = None, preflight: Any = None, plan_server: Any = None) -> dict[str, Any]:
    """Execute every study notebook, each after the ones it needs (`studies.order`); return the
    results folder, per-notebook wall time and summary rows. `run_overrides` (e.g. concurrency)
    change the profile's `run` section for every notebook: the effective profile is written to
    `<out_root>/profile.yaml` and passed to the notebooks, so their executed copies name the file
    that holds their settings. `executor` (`executors.base.make_executor`) runs them; the
    default runs them here one after another. A notebook that failed is reported in `failed`
    and the ones that need it are skipped as blocked; the others go on, under either executor.
    `preflight(profile, stems)` runs once the effective profile and the notebooks are known, before any
    server starts or any question is asked (`kgrag study` passes the doctor's GPU plan check);
    `plan_server(profile)`, the server settings a `run.engine` that serves the models gets (`study_engine`)."""
    label = profile_label(profile)
    out_root = Path(out_root or REPO_ROOT / "results" / label).resolve()  # notebooks run in notebooks/
    given = {k: v for k, v in (run_overrides or {}).items() if v is not None}
    server: dict[str, Any] = {}
    if executor is None or isinstance(executor, LocalExecutor):   # Ray tasks decide on the machine they run on
        pinned, server = study_engine(profile, given, plan_server)
        given.update(pinned)
    if given or server or label != Path(str(profile)).stem:   # overrides, or a profile file of the user's
        profile = str(effective_profile(profile, given, out_root / "profile.yaml", name=label, server=server))
    all_books = study_notebooks(notebook_dir)
    books = all_books
    if only:
        books = [b for b in books if any(b.stem.startswith(o) or b.name == o for o in only)]
        if not books:
            raise KgragError(f"no notebook matches {only}; have {[b.name for b in all_books]}")
    if hasattr(executor, "check_profile"):   # the Ray executor's own demands on a profile
        from .studies import load_profile

        executor.check_profile(load_profile(profile), f"profile {profile}")
    from .studies.data_needs import ensure_data

    ensure_data(profile, [b.stem for b in books])   # fetched into the per-user folder, or the fetch command named
    after = study_graph([b.stem for b in books])
    figures_root = Path(os.environ.get("KGRAG_FIGURES_DIR") or REPO_ROOT / "figures")
    tasks = [NotebookTask(key=nb.stem, notebook=nb, root=out_root, out_dir=out_root / nb.stem,
                          executed=out_root / "executed" / nb.name,
                          parameters={"profile": profile, **(extra or {})}, figures_root=figures_root,
                          after=after[nb.stem], resources=resources_for(_notebook_model(nb.stem, profile)),
                          label=f"{nb.name} (profile {profile})")
             for nb in books]
    executor = executor or LocalExecutor(progress=progress, run=execute)
    if preflight is not None:
        preflight(profile, [t.key for t in tasks])
    with _study_servers(executor, profile, tasks):
        results = executor.run(tasks)
    report: dict[str, Any] = {"profile": profile, "out_root": out_root, "notebooks": [], "failed": []}
    for t in tasks:
        r = results[t.key]
        if not r.ok:
            report["failed"].append({"notebook": t.notebook.name, "error": r.error, "blocked_by": r.blocked_by})
            continue
        rows = read_summary(t.out_dir)
        # many readers open HTML first: one beside each executed copy (made here, wherever it ran)
        html = export_html(t.executed) if t.executed.exists() else None
        report["notebooks"].append({"notebook": t.notebook.name, "seconds": r.seconds, "rows": rows,
                                    "html": str(html) if html else None})
    return report


def study_engine(profile: str | Path, given: dict[str, Any],
                 plan_server: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run overrides, server settings) that fix the engine for the whole study: `run.engine: auto` decided
    once here (`llm.engine`), so every notebook kernel runs the same specs and none probes again; where
    that is vLLM, `plan_server(profile)` (`kgrag study` passes the doctor's plan,
    `doctor.beside_server.planned_server`) gives the server settings, e.g. each server's
    gpu_memory_utilization, so notebook 27's training and 28's generator fit beside them."""
    from .llm.engine import decide
    from .studies import load_profile

    prof = load_profile(profile)
    asked = str(given.get("engine") or profile_section(prof, "run").get("engine") or "hf")
    if asked == "hf":
        return {}, {}
    engine, why = decide(asked)
    pinned = {"engine": engine} if asked == "auto" else {}
    if pinned:
        print(f"run.engine auto: {engine} ({why})", flush=True)
    if engine != "vllm-serve" or plan_server is None:
        return pinned, {}
    prof = {**prof, "run": {**(prof.get("run") or {}), **given, "engine": engine}}
    if given.get("model"):
        prof.pop("models", None)   # as effective_profile writes it: --model replaces every family's model
    return pinned, dict(plan_server(prof) or {})


def _study_servers(executor: Any, profile: str, tasks: list[Any]) -> Any:
    """Under the local executor, a server spec (`vllm-serve:...`) the notebooks load is started once for
    the whole study (`llm.shared_servers`), not once per notebook kernel. Ray tasks may run on other
    machines, so each starts its own."""
    import contextlib

    if not isinstance(executor, LocalExecutor):
        return contextlib.nullcontext()
    from .llm import is_managed_spec, load_llm
    from .studies import load_profile

    server = profile_section(load_profile(profile), "server")
    specs = [s for s in (_notebook_model(t.key, profile) for t in tasks) if s and is_managed_spec(s)]
    if server.get("gpu_memory_utilization") is None:   # a share set (or planned) was checked by the preflight
        _warn_in_process_beside_vllm(specs, [t.key for t in tasks], profile)
    return shared(specs, lambda spec: load_llm(spec, cache=False, server=server))


# Notebooks that load a model into kgrag's own process whatever --model says: DPO training (27) and
# Self-RAG's own model (28, Table 2).
IN_PROCESS_GPU_NOTEBOOKS = ("27_dpo_training", "28_plugins")


def _warn_in_process_beside_vllm(specs: list[str], stems: list[str], profile: str) -> None:
    """On a GPU machine, a vLLM started once for the study holds its share of the GPU while 27 and 28
    load their own models beside it: say so before the study starts, with the check that sizes it."""
    import shutil
    import warnings

    served = [s for s in specs if s.startswith("vllm-serve:")]
    beside = [s for s in stems if s in IN_PROCESS_GPU_NOTEBOOKS]
    if not served or not beside or shutil.which("nvidia-smi") is None:
        return
    warnings.warn(f"{served[0]} stays up for the whole study and takes its gpu_memory_utilization of the GPU "
                  f"(vLLM's default 0.9), while {' and '.join(beside)} load their own model into this process "
                  f"(DPO training; Self-RAG's generator). `kgrag doctor --profile {profile} --model {served[0]}` "
                  "says which share fits; or run them in a study of their own without vllm-serve: "
                  f"(--only {' '.join(b[:2] for b in beside)})", stacklevel=3)


def _notebook_model(stem: str, profile: str) -> str | None:
    """The LLM spec a study notebook loads (None: it loads none, or is not a study notebook)."""
    from .studies import NOTEBOOKS, load_profile

    if stem not in NOTEBOOKS or NOTEBOOKS[stem].family is None:
        return None
    return resolve_model(load_profile(profile), NOTEBOOKS[stem].family)
