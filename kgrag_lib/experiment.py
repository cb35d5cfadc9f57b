"""One experiment = one method on one dataset sample under one profile: the one run path.

`resolve_run` is the one place settings are merged (code defaults < profile < explicit
overrides) and the model is chosen; `run_experiment` answers the sample through the one
runner. `kgrag run`, every notebook (`kgrag_lib.studies.setup`) and every grid
(`kgrag_lib.grid`) call it, so a notebook cell and a shell command with the same parameters
write the same files and share the LLM cache.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .config import (RunConfig, ServerConfig, absent_values, fill_n, fill_run_n, make_config, profile_section,
                     read_profile)
from .data.registry import load_questions
from .errors import ConfigError, KgragError
from .llm import DEFAULT_SPEC
from .methods.base import MethodSpec, RunContext
from .methods.prompt_digest import prompt_digests
from .methods.registry import check_dataset, check_profile_methods, get_method
from .paths import cache_dir, data_root
from .redact import redact
from .rundir import ABSENT_KEY, PROMPTS_KEY
from .runner import run_method

RUN_FIELDS = {f.name for f in dataclasses.fields(RunConfig)}


def resolve_model(profile: dict[str, Any], family: str | None, explicit: str | None = None) -> str:
    """The LLM of a run: an explicit choice, else the profile's `models[family]` as its `run.engine` runs
    it (`llm.engine`: a hub preset served by vLLM), else its `run.model`, else the embedded default."""
    from .llm.engine import profile_spec

    if explicit:
        return explicit
    models = profile_section(profile, "models")
    named = models.get(family) if family else None
    return profile_spec(profile, named) if named else profile_section(profile, "run").get("model") or DEFAULT_SPEC


def resolve_embedder(profile: dict[str, Any], family: str | None, explicit: str | None = None) -> str:
    """The embedder of a run: an explicit choice, else the profile's `embedders[family]` (each
    paper's own retriever in gpu-paper), else its `run.embedder`, else the shipped MiniLM."""
    embedders = profile_section(profile, "embedders")
    return explicit or (embedders.get(family) if family else None) \
        or profile_section(profile, "run").get("embedder") or RunConfig.embedder


@dataclass
class ResolvedRun:
    """Everything that decides what a run computes, merged from the profile and the overrides."""

    spec: MethodSpec
    run: RunConfig          # with `model` resolved
    method_cfg: dict[str, Any]   # the settings as given (profile section + overrides)
    profile: dict[str, Any]
    method_config: Any = None    # the same, typed and checked once: what the factory builds the method from


def resolve_run(method: str, dataset: str, out: str | Path, profile: str | Path | dict = "cpu-smoke",
                **overrides: Any) -> ResolvedRun:
    """Settings of one run. `overrides` are RunConfig fields or fields of the method's config;
    None values mean "not given". An unknown name, a wrong type or a dataset the method does
    not support is refused here, before anything is loaded."""
    # `kgrag run` has checked every section already (`load_profile`): a CheckedProfile is not checked twice
    prof = read_profile(profile, check_profile_methods)
    spec = get_method(method)
    check_dataset(spec, dataset)
    run_over = {k: v for k, v in overrides.items() if k in RUN_FIELDS and v is not None}
    method_over = {k: v for k, v in overrides.items() if k not in RUN_FIELDS and v is not None}
    run_cfg = make_config(RunConfig, profile_section(prof, "run"),
                          {"method": method, "dataset": dataset, "out": str(out), "profile": prof["name"]},
                          run_over, where=f"profile {prof['name']!r} / run overrides")
    if run_cfg.qa_file:   # ./qa.txt and its absolute path are one file: one run identity
        run_cfg.qa_file = str(Path(run_cfg.qa_file).expanduser().resolve())
    engined = {**prof, "run": {**profile_section(prof, "run"), "engine": run_cfg.engine}}   # --engine too
    run_cfg.model = resolve_model(engined, spec.family, run_over.get("model"))
    run_cfg.embedder = resolve_embedder(prof, spec.family, run_over.get("embedder"))
    where = f"method {method} (profile {prof['name']!r} + overrides)"
    # `{n}` is this run's n (after --n), like `{dataset}` and `{seed}`: the KG is built from the sample answered
    method_cfg = fill_n({**profile_section(prof, "methods", method), **method_over}, run_cfg.n, where)
    prof = fill_run_n(prof, run_cfg.n, f"profile {prof['name']!r}")
    if hasattr(spec.config, "generator"):
        method_cfg = served_generator(engined, spec, method_cfg, method_over)
    typed = spec.check_config(method_cfg, where=where)
    return ResolvedRun(spec, run_cfg, method_cfg, prof, typed)


def served_generator(profile: dict[str, Any], spec: MethodSpec, method_cfg: dict[str, Any],
                     given: dict[str, Any]) -> dict[str, Any]:
    """A method's own model (Self-RAG's `generator`, default or the profile's) as the profile's engine
    runs it; one given for this run (an override) is used as written."""
    from .llm.engine import profile_spec

    if "generator" in given:
        return method_cfg
    named = method_cfg.get("generator", getattr(spec.config, "generator", None))
    engined = profile_spec(profile, named)
    return method_cfg if engined == named else {**method_cfg, "generator": engined}


def make_context(run: RunConfig, profile: dict[str, Any] | None = None) -> RunContext:
    """The shared parts (LLM, embedder, KGs, caches) a run with these settings needs; the
    profile's `server` section says how a server kgrag starts for the run is started."""
    server = make_config(ServerConfig, profile_section(profile or {}, "server"),
                         where=f"profile {(profile or {}).get('name', 'custom')!r}, server")
    return RunContext(model=run.model, embedder_spec=run.embedder, data_root=run.data_root,
                      cache_dir=run.cache_dir, server=server,
                      server_options={"timeout": run.request_timeout, "max_retries": run.request_retries,
                                      # one name per setting: questions in flight (concurrency) also set how many
                                      # requests a step fans out to, unless max_in_flight says otherwise
                                      "max_in_flight": run.max_in_flight or run.concurrency})


def check_context(ctx: RunContext, run: RunConfig) -> None:
    """A context shared between runs must hold what this run resolved, never silently replace it."""
    wanted = {"model": (ctx.model, run.model), "embedder": (ctx.embedder_spec, run.embedder),
              "data_root": (str(ctx.data_root), str(data_root(run.data_root))),
              "cache_dir": (str(ctx.cache_dir), str(cache_dir(run.cache_dir)))}
    diff = {k: v for k, v in wanted.items() if v[0] != v[1]}
    if diff:
        what = redact("; ".join(f"{k}: context {a!r}, run {b!r}" for k, (a, b) in diff.items()))
        raise ConfigError(f"the shared context was made for other settings than this run ({what}); "
                          f"make the context from the same profile and parameters, or leave ctx out")


def run_config(r: ResolvedRun, method_config: Any, embedder: str, llm_identity: str | None,
               qids: list[str], answer_aliases: str | None = None) -> dict[str, Any]:
    """What a run's manifest records as its config; `rundir.run_identity` of it decides whether a
    folder can be resumed. `prompts` is the digest of the wording of the method's prompt modules
    (`methods.prompt_digest`): a reworded prompt is another run even when no setting changed."""
    is_config = dataclasses.is_dataclass(method_config)
    config = {
        "run": dataclasses.asdict(r.run),
        "method_config": dataclasses.asdict(method_config) if is_config else r.method_cfg,
        "embedder": embedder,
        "llm_identity": llm_identity,
        "profile": r.profile,
        "qids": qids,
        # the alias file whose answers the golds include (2Wiki's id_aliases.json), or None: scores with
        # aliases are another run, and the report says which 2Wiki scores are the lower bound without
        "answer_aliases": answer_aliases,
        PROMPTS_KEY: prompt_digests(r.spec),
    }
    absent = {**(absent_values(method_config, "method_config") if is_config else {}), "answer_aliases": None}
    if absent:
        config[ABSENT_KEY] = absent
    return config


_SAID: set[str] = set()


def _say_once(key: str, line: str) -> None:
    """A caveat every table of the run inherits, printed once per process (a notebook's output shows it)."""
    import sys

    if key not in _SAID:
        _SAID.add(key)
        print(line, file=sys.stderr)


def run_experiment(method: str, dataset: str, out: str | Path, *, profile: str | Path | dict = "cpu-smoke",
                   ctx: RunContext | None = None, progress: bool = True, overwrite: bool = False,
                   **overrides: Any) -> dict[str, Any]:
    """Run `method` on `dataset` into `out`; `overrides` are RunConfig or method config fields.

    Pass the same `ctx` to several calls (as the notebooks do) to share the loaded LLM,
    embedder, KGs and indexes between them. The run seed draws the question sample and seeds
    the method's LLM calls, whichever way the run is started. A folder holding a run with other
    settings is refused unless `overwrite` (see `runner.run_method`).
    """
    r = resolve_run(method, dataset, out, profile, **overrides)
    if ctx is None:
        ctx = make_context(r.run, r.profile)
    else:
        check_context(ctx, r.run)
    questions = load_questions(dataset, split=r.run.split, path=r.run.qa_file, root=ctx.data_root,
                               n=r.run.n, seed=r.run.seed)
    runner_method = r.spec.factory(ctx, r.method_config, r.run.seed)
    method_config = runner_method.config
    llm = ctx.llm
    aliases = next((q.meta["id_aliases"] for q in questions if (q.meta or {}).get("id_aliases")), None)
    if dataset == "2wiki" and aliases is None:
        _say_once("2wiki-aliases", "kgrag: 2Wiki is scored without its id aliases (the ID-enhanced release's "
                  "id_aliases.json: $KGRAG_2WIKI_ALIASES or <data>/2wiki/id_aliases.json), so its EM / F1 / Acc are "
                  "lower bounds of the official scorer's")
    config = run_config(r, method_config, ctx.embedder_spec, getattr(llm, "identity", None),
                        [q.qid for q in questions], answer_aliases=aliases)
    return run_method(runner_method, questions, out, config, llm=llm, progress=progress, overwrite=overwrite,
                      concurrency=r.run.concurrency)


# ---- `kgrag run --dry-run`: the first requests of a run, through the scripted LLM ---------------------------

DRY_RUN_ANSWER = "(scripted answer: a dry run loads no model)"
DRY_RUN_MAX_REQUESTS = 30   # a text KG's extraction sends one request per chunk: the first ones show its prompt


class DryRunStop(BaseException):
    """Raised by the dry run's scripted LLM once it has the requests it shows. A BaseException, so a
    method's `except Exception` (a failed extraction recorded and skipped) does not swallow it."""


@dataclass
class DryRun:
    """What `dry_run` saw: the run's resolved settings, the questions shown and each request sent
    (with the index of the question it was sent for), and why it ended early, if it did."""

    resolved: ResolvedRun
    questions: list[Any]
    # (question index, None for a whole-sample round; the LLM spec it went to; the ScriptedRequest)
    requests: list[tuple[int | None, str, Any]]
    stopped: list[str] = dataclasses.field(default_factory=list)


@contextmanager
def _no_model(scripted: Any) -> Iterator[None]:
    """Within it, `llm.load_llm` (which a method calls for a model of its own, as Self-RAG's generator)
    returns a scripted stand-in: a dry run loads no model, whichever part asks for one."""
    from . import llm as llm_module

    real = llm_module.load_llm
    llm_module.load_llm = scripted
    try:
        yield
    finally:
        llm_module.load_llm = real


def dry_run(method: str, dataset: str, *, profile: str | Path | dict = "cpu-smoke", questions: int = 1,
            max_requests: int = DRY_RUN_MAX_REQUESTS, **overrides: Any) -> DryRun:
    """The requests a run of `method` on `dataset` sends first, without a model (lm-evaluation-harness's
    `write_out`, for a pipeline): the settings, the question sample and the method are made exactly
    as `run_experiment` makes them, but the LLM is a `ScriptedLLM` that answers every request with
    `DRY_RUN_ANSWER`, so only the first request of each step is what a model would be sent; what
    follows a scripted answer is the method's reaction to that text. The first `questions` questions of
    the sample are answered, up to `max_requests` requests. Nothing is written: no run folder, no LLM
    call cache, and what the method builds (indexes, KGs) goes to a temporary cache folder deleted after."""
    import tempfile

    from .llm.base import Generation, TokenLogprob
    from .llm.fake import ScriptedLLM, ScriptedRequest
    from .paths import cache_dir_scope
    from .runner import resolve_concurrency

    if questions < 1 or max_requests < 1:
        raise ConfigError(f"a dry run shows at least one question and one request (questions={questions}, "
                          f"max_requests={max_requests})")
    r = resolve_run(method, dataset, "(dry run: no output folder)", profile, **overrides)
    sent: list[tuple[int | None, str, Any]] = []
    current: list[int | None] = [None]

    def scripted(spec: str, *_: Any, **__: Any) -> Any:
        """A scripted stand-in for the LLM `spec`: the run's, or one a method loads itself (Self-RAG's generator)."""
        def respond(messages: Any, params: Any) -> Any:
            if len(sent) >= max_requests:
                raise DryRunStop
            sent.append((current[0], spec, ScriptedRequest([dict(m) for m in messages], params)))
            if params.logprobs:   # Self-RAG reads its reflection tokens' log-probabilities: each word certain
                words = DRY_RUN_ANSWER.split()
                return Generation(DRY_RUN_ANSWER, tuple(TokenLogprob(w, 0.0, ((w, 0.0),)) for w in words))
            return DRY_RUN_ANSWER

        return ScriptedLLM(respond, name=f"dry-run:{spec}", identity=f"dry-run:{spec}", cache=None)

    llm = scripted(r.run.model)
    stopped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kgrag-dry-run-") as tmp, cache_dir_scope(tmp), _no_model(scripted):
        ctx = make_context(dataclasses.replace(r.run, cache_dir=tmp), r.profile)
        ctx.llm = llm
        sample = load_questions(dataset, split=r.run.split, path=r.run.qa_file, root=ctx.data_root,
                                n=r.run.n, seed=r.run.seed)
        shown = sample[:questions]
        m = r.spec.factory(ctx, r.method_config, r.run.seed)
        m.resume([])
        try:
            if m.answers_sample:   # its rounds run over the whole sample, as in a run; stop once the shown are closed
                closed = 0
                for _q, _pred, _meter in m.answer_sample(sample, set(), resolve_concurrency(1, llm, m)):
                    closed += 1
                    if closed >= len(shown):
                        break
            else:
                for i, q in enumerate(shown):
                    current[0] = i
                    try:
                        m.answer(q)
                    except Exception as exc:   # a scripted answer the method cannot take ends that question only
                        if isinstance(exc, KgragError) and not sent:   # a setting or a file a real run refuses too
                            raise
                        stopped.append(f"question {i + 1} ended on a scripted answer: {type(exc).__name__}: {exc}")
        except DryRunStop:
            stopped.append(f"stopped after {max_requests} requests (the cap of a dry run)")
        except Exception as exc:
            if isinstance(exc, KgragError) and not sent:
                raise
            stopped.append(f"the method stopped on a scripted answer: {type(exc).__name__}: {exc}")
    return DryRun(r, shown, sent, stopped)
