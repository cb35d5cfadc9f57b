"""`kgrag run`: one method on one dataset sample, written to an output folder."""

from __future__ import annotations

import argparse
import json

from ..cli_choices import dataset_names, method_names, profile_choices, profile_help
from ..llm import spec_help
from ..methods.registry import cli_flags


def _parse_set(items: list[str]) -> dict:
    from ..config import parse_set_items

    return parse_set_items(items)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run one method on one dataset", description=__doc__)
    p.add_argument("--list", action="store_true", help="list the available methods and exit")
    p.add_argument("--show-config", action="store_true",
                   help="print --method's settings as --profile resolves them (each value, whether the profile sets it "
                        "or it is the default, and its help) and exit")
    p.add_argument("--method", choices=method_names(), metavar="METHOD",
                   help=f"method: {', '.join(method_names())} (see `kgrag run --list`)")
    p.add_argument("--dataset", choices=dataset_names(), metavar="DATASET", help=f"dataset: {', '.join(dataset_names())}")
    p.add_argument("--split", default=None, help="dataset split (default: the dataset's own, e.g. MetaQA test; see `kgrag data check`)")
    p.add_argument("--qa-file", default=None, help="a question file in the dataset's own format")
    p.add_argument("--n", type=int, default=None, help="sample N questions (default: the profile's n)")
    p.add_argument("--seed", type=int, default=None, help="sample and method seed (default: profile's)")
    p.add_argument("--profile", default="cpu-smoke", choices=profile_choices(), metavar="PROFILE", help=profile_help())
    p.add_argument("--model", default=None, help=spec_help())
    p.add_argument("--embedder", default=None,
                   help="minilm, mpnet (shipped), multi-qa-mpnet-dot, contriever-msmarco, bge-large, hf:<id|folder>, "
                        "a folder or a hub id (default: the profile's embedders.<family>, else run.embedder)")
    p.add_argument("--engine", default=None, choices=("auto", "vllm-serve", "hf"),
                   help="what runs the profile's hub-model presets (models:, Self-RAG's generator): auto = vLLM (vllm-serve:, one "
                        "server per model) where .venv-vllm's CUDA build and a CUDA GPU are here, else hf = transformers "
                        "in kgrag's process; vllm-serve = vLLM or an error (default: the profile's run.engine; "
                        "gpu-paper: auto, the CPU profiles: hf)")
    p.add_argument("--data-root", default=None, help="dataset root (default $KGRAG_DATA_ROOT, then ../shared/data)")
    p.add_argument("--cache-dir", default=None, help="cache folder (default $KGRAG_CACHE_DIR, then .cache/)")
    p.add_argument("--request-timeout", type=float, default=None,
                   help="seconds one server request may take (default 60; server models only)")
    p.add_argument("--request-retries", type=int, default=None,
                   help="retries of a failed server request (default 2; server models only)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="questions answered at once (default: the profile's run.concurrency, else 1 for an "
                        "in-process model and 8 for a server); llama.cpp's answers do not "
                        "depend on it, batched engines' (vLLM, hf:) may differ a little; the LLM cache replays a run exactly")
    p.add_argument("--max-in-flight", type=int, default=None,
                   help="requests a server model is sent at once within one step: a text KG's chunk extraction "
                        "(SA-RAG, TCR-QF), a batch (default: --concurrency, else 8; server models only)")
    for flag, typ, hlp in cli_flags():  # each paper's most used settings; passed only when given
        p.add_argument(flag, type=typ, default=None, help=hlp)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="any other method config field (repeatable)")
    p.add_argument("--out", help="output folder (predictions.jsonl, metrics.json, manifest.json)")
    p.add_argument("--overwrite", action="store_true",
                   help="if --out holds a run made with other settings or prompts (or from before prompt digests "
                        "were recorded), discard it and start again (without this flag such a folder is refused; "
                        "a run with the same settings resumes)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--dry-run", action="store_true",
                   help="print the first requests (messages and sampling parameters) the run would send for the "
                        "first question of its sample (the first --n with --n), answered by a scripted LLM: no model "
                        "is loaded, the answers are not a model's, and nothing is written (--out not needed)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..experiment import run_experiment
    from ..methods import available_methods
    from ..methods.registry import runs_on
    from ..studies import load_profile

    if args.list:
        for name, spec in available_methods().items():
            generic = "" if spec.needs is None else f"; and any in kgrag's question format with {', '.join(spec.needs)}"
            print(f"{name:14s} [{spec.family}] {spec.summary}  (datasets: {', '.join(runs_on(spec))}{generic})")
        return 0
    if args.show_config:
        return _show_config(args.method, args.profile, _overrides(args))
    dry = getattr(args, "dry_run", False)
    missing = [f for f in ("method", "dataset", *(() if dry else ("out",))) if not getattr(args, f)]
    if missing:
        raise ConfigError(f"kgrag run needs --{', --'.join(missing)} (see `kgrag run --help`)")
    for flag in ("model", "embedder", "qa_file", "data_root", "cache_dir"):   # an unset $MODEL must not mean the default
        value = getattr(args, flag, None)
        if value is not None and not str(value).strip():
            raise ConfigError(f"--{flag.replace('_', '-')} is empty (an unset shell variable?); give a value or "
                              f"leave the flag out for the profile's")
    profile = load_profile(args.profile)  # every section checked, not only those this run reads
    if dry:
        return _dry_run(args, profile)
    metrics = run_experiment(args.method, args.dataset, args.out, profile=profile,
                             progress=not args.no_progress, overwrite=args.overwrite, **_overrides(args))
    print(json.dumps(metrics, indent=2))
    print(cost_line(metrics))
    print(f"wrote {args.out}/predictions.jsonl, metrics.json, manifest.json")
    return 0


def _dry_run(args: argparse.Namespace, profile: dict) -> int:
    """Print what `dry_run` saw: the run's identity (model named, not loaded; prompt digests), then each
    request as the method sent it, then why it ended and that its answers were scripted."""
    import dataclasses

    from ..experiment import DRY_RUN_ANSWER, dry_run
    from ..methods.prompt_digest import prompt_digests
    from ..redact import redact

    d = dry_run(args.method, args.dataset, profile=profile, questions=args.n or 1, **_overrides(args))
    r = d.resolved
    print(f"kgrag run --dry-run: {args.method} on {args.dataset} ({r.run.split or 'default split'}), profile "
          f"{r.profile['name']}, n={r.run.n}, seed={r.run.seed}")
    print(f"model {redact(r.run.model)} NOT loaded: every request below is answered by a scripted LLM with "
          f"{DRY_RUN_ANSWER!r}, not by a model")
    print("prompts: " + ", ".join(f"{mod} {dig}" for mod, dig in prompt_digests(r.spec).items()))
    for i, q in enumerate(d.questions):
        print(f"question {i + 1} [{q.qid}]: {q.question}")
    default = dataclasses.asdict(type(d.requests[0][2].params)()) if d.requests else {}
    for k, (qi, spec, req) in enumerate(d.requests, 1):
        params = {f: v for f, v in dataclasses.asdict(req.params).items() if f in ("max_tokens", "temperature", "seed")
                  or v != default.get(f)}
        where = f"question {qi + 1}" if qi is not None else "a round over the sample"
        if spec != r.run.model:   # a model the method loads itself (Self-RAG's generator)
            where += f", to {redact(spec)}"
        print(f"\n=== request {k} ({where}) sampling: {json.dumps(params, default=str)}")
        for msg in req.messages:
            print(f"--- {msg['role']}\n{msg['content']}")
    print()
    for line in d.stopped:
        print(f"note: {line}")
    print(f"{len(d.requests)} request(s) shown; the answers were scripted ({DRY_RUN_ANSWER!r}), so what follows "
          f"the first request of each step is the method's reaction to that text, not to a model's answer. "
          f"Nothing was written (no run folder, no cache).")
    return 0


def _overrides(args: argparse.Namespace) -> dict:
    """What the command line sets (None: not given): run fields, each paper's flags and `--set`."""
    overrides = {
        "split": args.split, "qa_file": args.qa_file, "n": args.n, "seed": args.seed, "model": args.model,
        "embedder": args.embedder, "data_root": args.data_root, "cache_dir": args.cache_dir,
        "concurrency": args.concurrency, "max_in_flight": args.max_in_flight, "request_timeout": args.request_timeout,
        "request_retries": args.request_retries, "engine": getattr(args, "engine", None),
    }
    for flag, _, _ in cli_flags():
        key = flag.lstrip("-").replace("-", "_")
        val = getattr(args, key)
        if val is not None:
            overrides[key] = val
    overrides.update(_parse_set(args.set))
    return overrides


def _show_config(method: str | None, profile_name: str, overrides: dict | None = None) -> int:
    """A profile leaves out settings equal to their defaults: this prints all of them, with what
    the command line overrides (`--set`, each paper's flags) as the run would take it; a spec's
    token is masked (`redact`)."""
    import dataclasses

    from ..config import field_help, fill_run_n, profile_section
    from ..experiment import RUN_FIELDS
    from ..errors import ConfigError
    from ..methods import available_methods
    from ..redact import redact
    from ..studies import load_profile

    if not method:
        raise ConfigError("kgrag run --show-config needs --method (see `kgrag run --list`)")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    method_over = {k: v for k, v in given.items() if k not in RUN_FIELDS}
    profile = load_profile(profile_name)
    profile = fill_run_n(profile, given.get("n", profile_section(profile, "run").get("n")),
                         f"profile {profile['name']!r}")  # `{n}` at the run's n: --n, else the profile's
    section = profile_section(profile, "methods", method)
    cfg = available_methods()[method].check_config({**section, **method_over},
                                                   where=f"profile {profile['name']!r}, methods.{method} + overrides")
    helps = field_help(type(cfg))
    print(f"{method} under profile {profile['name']} ({type(cfg).__name__}):")
    for f in dataclasses.fields(cfg):
        source = "command line" if f.name in method_over else "profile" if f.name in section else "default"
        print(f"  {f.name:24s} {redact(repr(getattr(cfg, f.name))):32s} [{source}]  {helps.get(f.name, '')}")
    for k, v in given.items():
        if k in RUN_FIELDS:
            print(f"  run.{k:20s} {redact(repr(v)):32s} [command line]")
    return 0


def cost_line(metrics: dict) -> str:
    """What this invocation did and sent, then what a question costs on average (cache hits
    included: what the method needs, whichever run computed it)."""
    this, cost = metrics.get("this_run") or {}, metrics.get("cost_per_question") or {}
    return (f"this run: answered {this.get('answered', 0)} of {metrics.get('n', 0)} questions "
            f"({this.get('reused', 0)} reused from predictions.jsonl), sent {this.get('llm_calls_sent', 0)} LLM calls "
            f"({this.get('llm_cache_hits', 0)} more answered by the cache) in {this.get('wall_seconds', 0)} s\n"
            f"per question (all {metrics.get('n', 0)}): {cost.get('llm_requests', 0)} LLM requests, "
            f"{cost.get('llm_total_prompt_tokens', 0)} prompt + {cost.get('llm_total_completion_tokens', 0)} "
            f"completion tokens, {cost.get('seconds', 0)} s when answered")
