"""`kgrag study`: execute the study's notebooks in order (the README's main job).

Executed copies go to results/<profile>/executed/, figures to figures/<profile>/, and one
results table gathering every notebook's summary rows to results/<profile>/results.{csv,md}.
"""

from __future__ import annotations

import argparse
import json

from ..cli_choices import profile_choices, profile_help
from ..llm import spec_help
from ..executors import add_arguments as add_executor_arguments


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="execute all study notebooks with papermill", description=__doc__)
    p.add_argument("--profile", default="cpu-smoke", choices=profile_choices(), metavar="PROFILE", help=profile_help())
    p.add_argument("--list", action="store_true", help="list the study's notebooks (and where they are read from) and exit")
    p.add_argument("--only", nargs="*", default=None, help="notebook name prefixes to run, e.g. 00 11")
    p.add_argument("--out", default=None, help="results folder (default results/<profile>)")
    p.add_argument("--model", default=None,
                   help="one LLM for every notebook (instead of the profile's models.<family>). " + spec_help())
    p.add_argument("--embedder", default=None, help="embedding model of every notebook, instead of the profile's embedders.<family> (minilm, mpnet, "
                        "multi-qa-mpnet-dot, contriever-msmarco, bge-large, hf:<id|folder>, a folder or a hub id)")
    p.add_argument("--engine", default=None, choices=("auto", "vllm-serve", "hf"),
                   help="what runs the profile's hub-model presets (models:, Self-RAG's generator): auto = vLLM (vllm-serve:, one "
                        "server per model) where .venv-vllm's CUDA build and a CUDA GPU are here, else hf = transformers "
                        "in kgrag's process; vllm-serve = vLLM or an error (default: the profile's run.engine; "
                        "gpu-paper: auto, the CPU profiles: hf)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="questions answered at once in every run (default: the profile's run.concurrency, else 1 "
                        "for an in-process model, 8 for a server); llama.cpp's answers do not "
                        "depend on it, batched engines' (vLLM, hf:) may differ a little; the LLM cache replays a run exactly")
    add_executor_arguments(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..concurrency import check_workers
    from ..executors import make_executor, require_notebook_tools
    from ..notebooks import NOTEBOOK_DIR, run_study, study_notebooks

    if getattr(args, "list", False):
        print(f"notebooks in {NOTEBOOK_DIR}:")
        print("\n".join(f"  {p.name}" for p in study_notebooks()))
        return 0
    require_notebook_tools("kgrag study")

    given = {k: getattr(args, k, None) for k in ("concurrency", "model", "embedder", "engine")}  # one profile for all
    from ..errors import ConfigError

    for k in ("model", "embedder"):
        if given[k] is not None and not str(given[k]).strip():
            raise ConfigError(f"--{k} is empty (an unset shell variable?); give a value or leave the flag out")
    if args.only is not None and (not args.only or any(not str(o).strip() for o in args.only)):
        raise ConfigError("--only needs notebook name prefixes, e.g. --only 00 11 (an empty one would match every "
                          "notebook); leave the flag out to run them all")
    if given["concurrency"] is not None:
        check_workers(given["concurrency"], "--concurrency")
    executor = make_executor(getattr(args, "executor", "local"), address=getattr(args, "address", None),
                             num_cpus=getattr(args, "num_cpus", None))
    from ..doctor.beside_server import planned_server, refuse_beside_server

    # on this machine, notebooks 27/28's in-process models must fit beside the study's LLM server: checked
    # before any question (Ray tasks may run on other machines, each with its own GPU)
    preflight = refuse_beside_server if getattr(args, "executor", "local") == "local" else None
    report = run_study(args.profile, args.out, only=args.only, run_overrides=given, executor=executor,
                       preflight=preflight, plan_server=planned_server if preflight is not None else None)
    out_root = report["out_root"]
    rows = [{"notebook": nb["notebook"], **r} for nb in report["notebooks"] for r in nb["rows"]]
    pd.DataFrame(rows).to_csv(out_root / "results.csv", index=False)
    lines = [f"# kgrag study results ({report['profile']})", ""]
    lines += [f"- {nb['notebook']}: {nb['seconds']} s" for nb in report["notebooks"]]
    lines += [f"- {f['notebook']}: FAILED" for f in report.get("failed") or []]
    lines += ["", f"executed notebooks: {out_root / 'executed'}"]
    for nb in report["notebooks"]:  # one table per notebook: their columns differ
        lines += ["", f"## {nb['notebook']}", "", notebook_table(nb["rows"])]
    (out_root / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out_root / "study.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    print("\n".join(lines))
    print(f"\nresults table: {out_root / 'results.md'} (all rows: {out_root / 'results.csv'})")
    return _report_failures(report.get("failed") or [])


def _report_failures(failed: list[dict]) -> int:
    """The notebooks that failed (after their retry) or never ran because one they need failed;
    exit status 1 when there are any (the rest of the study finished and is in the tables)."""
    import sys

    for f in failed:
        why = f"not run: it needs {f['blocked_by']}, which failed" if f.get("blocked_by") else f["error"]
        print(f"kgrag: error: {f['notebook']}: {why}", file=sys.stderr)
    return 1 if failed else 0


def notebook_table(rows: list[dict]) -> str:
    """One notebook's summary rows as fixed-width text: one table per kind of row (rows with the
    same fields, e.g. scores vs request counts), each without the columns it never fills. Claim
    rows leave out the claims a notebook did not run and the paper's quote (both stay in
    results.csv), so the table fits a screen."""
    import pandas as pd

    from ..eval.paired import NOT_RUN

    if not rows:
        return "(no result rows)"
    kinds: dict[tuple, list[dict]] = {}
    for r in rows:
        kinds.setdefault(tuple(r), []).append(r)
    tables = []
    for group in kinds.values():
        table = pd.DataFrame(group)
        if "verdict" in table and "claim" in table:
            not_run = table["verdict"] == NOT_RUN
            if not_run.all():
                tables.append(f"({_claims(len(table))}, none run by this notebook's datasets)")
                continue
            table = table[~not_run].drop(columns=[c for c in ("quote",) if c in table])
            if not_run.any():
                tables.append(f"({_claims(int(not_run.sum()))} on datasets this notebook did not run left out)")
        table = table.dropna(axis=1, how="all")
        tables.append("```\n" + table.to_string(index=False, na_rep="–", float_format=lambda v: f"{v:.4g}") + "\n```")
    return "\n\n".join(tables)


def _claims(k: int) -> str:
    return f"{k} claim" + ("" if k == 1 else "s")
