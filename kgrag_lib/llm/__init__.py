"""Generators behind one interface, with a persistent call cache and cost counters.

    llm = load_llm()                                  # embedded CPU default
    llm = load_llm("qwen2.5-7b-instruct")             # transformers on a GPU
    llm = load_llm("vllm:Qwen/Qwen2.5-7B-Instruct")   # a running vLLM server
    text = llm.generate([{"role": "user", "content": "..."}], max_tokens=32)
    llm.usage.to_dict()
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError
from ..redact import redact
from .assets import check_gguf, file_sha256
from .base import LLM, Completion, Generator, PromptTooLongError, SamplingParams, Usage
from .cache import LLMCache, default_cache_path
from .fake import ScriptedLLM
from .parsing import LLMParseError, clean_answer, parse_json, parse_list, parse_triples, parse_yes_no
from .presets import DEFAULT_OLLAMA_URL, DEFAULT_VLLM_URL, PRESETS, VLLM_URL_ENV, Preset, resolve_gguf
from .server_flavors import FLAVORS

DEFAULT_SPEC = "qwen2.5-coder-0.5b-q4"

__all__ = [
    "LLM", "Completion", "Generator", "SamplingParams", "Usage", "LLMCache", "ScriptedLLM", "PRESETS", "Preset",
    "LLMParseError", "PromptTooLongError", "load_llm", "describe_specs", "parse_json", "parse_list",
    "parse_triples", "parse_yes_no", "clean_answer", "DEFAULT_SPEC", "default_cache_path", "spec_help",
]


def describe_specs() -> str:
    """Human-readable list of accepted specs (used in error messages and CLI help)."""
    lines = [f"  {name}: {p.description}" for name, p in PRESETS.items()]
    lines += ["  /path/to/model.gguf: any GGUF file through llama.cpp"]
    lines += [f"  {kind.description}" for kind in SPEC_KINDS.values()]
    return "\n".join(lines)


def spec_help() -> str:
    """Every spec form `load_llm` accepts, on one line (the `--model` help of `kgrag run/study/sweep`)."""
    running = [k.form for k in SPEC_KINDS.values() if not k.managed]
    started = [k.form for k in SPEC_KINDS.values() if k.managed]
    return (f"LLM: a preset ({', '.join(PRESETS)}), a .gguf path, {', '.join(running)}, or a server kgrag starts "
            f"for the run: {', '.join(started)} (server options after '?', e.g. "
            "vllm-serve:qwen2.5-coder-0.5b-q4?max_model_len=4096)")


def _make_cache(cache: bool | LLMCache | None, cache_path: str | os.PathLike | None) -> LLMCache | None:
    if isinstance(cache, LLMCache):
        return cache
    if cache:
        return LLMCache(cache_path)
    return None


def _construct(cls: type, label: str, *args: Any, **kw: Any) -> LLM:
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(kw) - accepted)
    if unknown:
        raise ConfigError(f"load_llm({label!r}): unknown option(s) {unknown}; accepted: {sorted(accepted)}")
    return cls(*args, **kw)


def load_llm(
    spec: str = DEFAULT_SPEC,
    *,
    cache: bool | LLMCache | None = True,
    cache_path: str | os.PathLike | None = None,
    **kw: Any,
) -> LLM:
    """Build an LLM from a preset name, a `.gguf` path, `hf:<id-or-dir>`,
    `openai:<base_url>#<model>[?flavor=...]`, `vllm:<model>`, `ollama:<model>`, or a server to start
    for this run: `vllm-serve:<model>`, `llamacpp-server:<gguf|preset>`, `llama-server:<gguf|preset>`.

    `cache=True` uses the shared SQLite cache (`cache_path`, else $KGRAG_LLM_CACHE, else
    `cache_dir()/llm_cache.sqlite`); extra keywords go to the backend constructor.
    Anything that cannot run here raises BackendUnavailableError saying what is missing.
    A token in a server URL is used to connect; the model's name and every message show the
    spec `redact`ed.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"llm spec: expected a non-empty string, got {redact(spec)!r}; accepted:\n{describe_specs()}")
    spec = spec.strip()
    shown = redact(spec)
    c = _make_cache(cache, cache_path)

    if spec in PRESETS:
        preset = PRESETS[spec]
        options = {**preset.options, **kw}
        if preset.backend == "llamacpp":
            from .backends.llamacpp import LlamaCppLLM

            path, sha = resolve_gguf(preset, options.pop("model_path", None))
            return _construct(LlamaCppLLM, spec, path, sha256=sha, name=preset.name, cache=c, **options)
        from .backends.hf import HFLLM

        model = options.pop("model", preset.model)
        options.setdefault("needs_gpu", preset.needs_gpu)
        return _construct(HFLLM, spec, model, name=preset.name, cache=c, **options)

    if spec.lower().endswith(".gguf") and not spec.startswith(("hf:",) + tuple(p + ":" for p in MANAGED_PREFIXES)):
        from .backends.llamacpp import LlamaCppLLM

        path = check_gguf(spec)
        return _construct(LlamaCppLLM, spec, path, sha256=file_sha256(path), cache=c, **kw)

    prefix, _, rest = spec.partition(":")
    kind = SPEC_KINDS.get(prefix)
    if kind is not None and rest:
        return kind.load(spec, prefix, rest, c, kw)
    raise ConfigError(f"unknown llm spec {shown!r}; accepted:\n{describe_specs()}")


def _load_hf(spec: str, prefix: str, rest: str, c: LLMCache | None, kw: dict[str, Any]) -> LLM:
    from .backends.hf import HFLLM

    return _construct(HFLLM, spec, rest, name=spec, cache=c, **{**prompt_options(rest), **kw})


def _load_openai(spec: str, prefix: str, rest: str, c: LLMCache | None, kw: dict[str, Any]) -> LLM:
    shown = redact(spec)
    base_url, sep, model = rest.rpartition("#")
    model, query = _split_query(shown, model)
    if not sep or not base_url or not model:
        raise ConfigError(f"llm spec {shown!r}: expected openai:<base_url>#<model>[?flavor=<flavor>], e.g. "
                          "openai:http://localhost:8000/v1#Qwen/Qwen2.5-7B-Instruct?flavor=vllm")
    from .backends.openai_compat import OpenAICompatLLM

    kw = {**prompt_options(model), **_flavor_from_query(shown, query, kw)}
    return _construct(OpenAICompatLLM, shown, base_url, model, name=shown, cache=c, **kw)


def _load_running(spec: str, prefix: str, rest: str, c: LLMCache | None, kw: dict[str, Any]) -> LLM:
    """`vllm:<model>` / `ollama:<model>`: a server already running at its usual address."""
    from .backends.openai_compat import OpenAICompatLLM

    shown = redact(spec)
    model, query = _split_query(shown, rest)
    default = os.environ.get(VLLM_URL_ENV, DEFAULT_VLLM_URL) if prefix == "vllm" else DEFAULT_OLLAMA_URL
    base_url = kw.pop("base_url", default)
    kw = {**prompt_options(model), **_flavor_from_query(shown, query, kw)}
    kw.setdefault("flavor", prefix)
    return _construct(OpenAICompatLLM, shown, base_url, model, name=shown, cache=c, **kw)


# The request timeout of a started vLLM CPU build unless the run sets one (run.request_timeout): the
# 0.5B model decodes about 8 tokens/s per request there, and a 768-token extraction with 8 in flight
# takes minutes.
CPU_SERVER_REQUEST_TIMEOUT = 900.0
GPU_SERVER_REQUEST_TIMEOUT = 600.0   # a started vLLM on a GPU (the client's own default is 60 s)
# load_llm keywords that configure a started server rather than the client: `server` is a
# `config.ServerConfig` (or a dict of its fields), `log_dir` where its log goes, `alias` its served name.
_SERVER_OPTIONS = ("server", "log_dir", "alias")


# Preset options that describe how the model is prompted, not where it runs: a hub id of a preset's
# model keeps them through any backend (Mistral-7B-Instruct-v0.2's template refuses a system turn).
_PROMPT_OPTIONS = ("fold_system_prompt", "chat")


def prompt_options(model_id: str) -> dict[str, Any]:
    """The prompting options of the preset whose hub model is `model_id` (case-insensitive), else {}."""
    for p in PRESETS.values():
        if p.model and p.model.lower() == model_id.strip().lower():
            return {k: v for k, v in p.options.items() if k in _PROMPT_OPTIONS}
    return {}


def is_managed_spec(spec: str) -> bool:
    """Does `spec` name a server kgrag starts for the run (one that reads `server=`)?"""
    return isinstance(spec, str) and spec.strip().startswith(tuple(p + ":" for p in MANAGED_PREFIXES))


def is_server_spec(spec: str) -> bool:
    """Does `spec` name a model behind an HTTP server (one kgrag talks to or starts)?"""
    return isinstance(spec, str) and spec.strip().startswith(SERVER_PREFIXES)


def _split_query(spec: str, text: str) -> tuple[str, dict[str, str]]:
    """`model?flavor=x` -> ("model", {"flavor": "x"}); only `flavor` is a known key."""
    from urllib.parse import parse_qsl

    head, sep, query = text.partition("?")
    if not sep:
        return text, {}
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
    keys = [k for k, _ in pairs]
    if len(set(keys)) < len(keys):
        raise ConfigError(f"llm spec {redact(spec)!r}: an option is given twice after '?'; give it once")
    unknown = sorted({k for k, _ in pairs} - {"flavor"})
    if unknown or not pairs:
        raise ConfigError(f"llm spec {redact(spec)!r}: unknown option(s) {unknown or [query]} after '?'; accepted: "
                          f"flavor=<{'|'.join(('auto',) + FLAVORS)}>")
    return head, dict(pairs)


def _flavor_from_query(spec: str, query: dict[str, str], kw: dict[str, Any]) -> dict[str, Any]:
    if "flavor" in query:
        if "flavor" in kw and kw["flavor"] != query["flavor"]:
            raise ConfigError(f"llm spec {redact(spec)!r} says flavor={query['flavor']!r} but flavor={kw['flavor']!r} "
                              "was also given; give it once")
        kw = {**kw, "flavor": query["flavor"]}
    return kw


def managed_server_options(spec: str, rest: str, server: Any) -> tuple[str, Any]:
    """`<model>?max_model_len=4096&dtype=bfloat16` -> (model, ServerConfig): the spec's options over
    `server` (the profile's `server` section); each value is read as YAML, as `--set` reads it
    (`config.cli_yaml_value`: 1e-9 is a float; 010, 0x10 and 1_000, which YAML 1.1 reads as 8, 16
    and 1000, are refused); a key given twice is refused. A `lora=` adapter is no server setting
    (`lora.split_lora`; `_load_managed` reads it) and is left out."""
    import dataclasses
    from urllib.parse import parse_qsl

    import yaml

    from ..config import ServerConfig, cli_yaml_value, make_config
    from .lora import split_lora

    target, sep, query = split_lora(spec, rest)[0].partition("?")
    options: dict[str, Any] = {}
    if sep:
        pairs = parse_qsl(query, keep_blank_values=True)
        if not pairs:
            raise ConfigError(f"llm spec {redact(spec)!r}: nothing after '?'; expected KEY=VALUE&... of "
                              f"{', '.join(f.name for f in dataclasses.fields(ServerConfig))}")
        for k, v in pairs:
            if k in options:   # parse_qsl keeps both; the last would win silently
                raise ConfigError(f"llm spec {redact(spec)!r}: option {k!r} is given twice after '?'; give it once")
            try:   # as `--set` reads a value: 1e-3 is a number, 010 / 0x10 / 1_000 are refused, not 8 / 16 / 1000
                options[k] = cli_yaml_value(v, f"llm spec {redact(spec)!r}: {k}=") if v else None
            except yaml.YAMLError:
                raise ConfigError(f"llm spec {redact(spec)!r}: {k}={redact(v)!r} is not a YAML value") from None
    if isinstance(server, ServerConfig):
        server = dataclasses.asdict(server)
    cfg = make_config(ServerConfig, server or {}, options, where=f"llm spec {redact(spec)!r}")
    if not target:
        raise ConfigError(f"llm spec {redact(spec)!r}: no model before '?'")
    return target, cfg


def _vllm_weights(spec: str, target: str, cfg: Any, kw: dict[str, Any],
                  engine: Any) -> tuple[str, str, str, dict[str, Any], str | None]:
    """(what vLLM loads, the cache identity of its weights, dtype, prompt options, hub commit) for a
    vllm-serve: target.

    A GGUF (a llama.cpp preset or a .gguf path) is dequantized once into an HF folder
    (`hf_from_gguf`); its identity is the GGUF's hash, so the cache does not depend on where the
    folder lies. A folder's identity is its fingerprint; a hub id's is the id at the commit it
    resolves to now (`hub.hub_revision`), and vLLM is pinned to that commit, so a model updated on
    the hub is a new identity, not old answers replayed. The dtype (`vllm_env.serve_dtype`) joins the identity
    unless it is vLLM's own choice, and so do `server.args` (hashed): they change the answers."""
    from pathlib import Path

    from .vllm_env import args_identity, serve_dtype

    gguf = sha = None
    prompt: dict[str, Any] = {}
    if target in PRESETS:
        preset = PRESETS[target]
        prompt = {k: v for k, v in preset.options.items() if k in _PROMPT_OPTIONS}
        if preset.backend == "llamacpp":
            gguf, sha = resolve_gguf(preset, kw.pop("model_path", None))
        else:
            target = preset.model
    elif target.lower().endswith(".gguf"):
        gguf = check_gguf(target, f"llm spec {redact(spec)}")
        sha = file_sha256(gguf)
    else:
        prompt = prompt_options(target)
    dtype = serve_dtype(engine, cfg.dtype, gguf=gguf is not None)
    suffix = ("" if dtype == "auto" else f";dtype={dtype}") + args_identity(cfg.args)
    if gguf is not None:
        from .hf_from_gguf import hf_folder_from_gguf

        folder = hf_folder_from_gguf(gguf, sha256=sha)
        return str(folder), f"gguf-sha256={sha};dequantized{suffix}", dtype, prompt, None
    folder = Path(target).expanduser()
    if folder.is_dir():
        from .backends.hf import dir_fingerprint

        return str(folder.resolve()), f"hf-dir:{dir_fingerprint(folder)}{suffix}", dtype, prompt, None
    if target.startswith((".", "/", "~")):
        raise ConfigError(f"llm spec {redact(spec)!r}: model folder {target!r} does not exist; expected "
                          "vllm-serve:<hf id | model folder | preset | .gguf>")
    from ..hub import hub_revision
    from .backends.hf import fetch_weights

    commit = hub_revision(target)
    # downloaded here, with progress, before vLLM starts: its start-up timeout then counts the engine's
    # start only, not 15 GB of weights on a slow link (vLLM finds them in the same HF cache)
    fetch_weights(target, commit)
    return target, f"root={target}@{commit}{suffix}", dtype, prompt, commit


def _load_managed(spec: str, prefix: str, rest: str, c: LLMCache | None, kw: dict[str, Any]) -> LLM:
    """Start a server for this run and talk to it; close() (or exit) stops it."""
    from . import managed_server as ms
    from .backends.openai_compat import OpenAICompatLLM
    from .shared_servers import lookup

    entry = lookup(spec)
    if entry is not None:   # a parent process (a study) started this spec for its notebooks: use that server
        for key in _SERVER_OPTIONS:
            kw.pop(key, None)
        for key in ("timeout", "chat", "fold_system_prompt", "flavor"):
            kw.setdefault(key, entry[key])
        return _construct(OpenAICompatLLM, spec, entry["base_url"], entry["alias"], name=redact(spec), cache=c,
                          weights=entry["weights"], **kw)
    from .lora import check_base, lora_args, read_adapter, split_lora

    rest, lora = split_lora(spec, rest)
    if lora is not None and prefix != "vllm-serve":
        raise ConfigError(f"llm spec {redact(spec)!r}: lora= is an option of vllm-serve: only (vLLM serves the adapter "
                          f"beside its base); for {prefix}: merge the adapter (train_dpo's model/ folder)")
    target, cfg = managed_server_options(spec, rest, kw.pop("server", None))
    adapter = read_adapter(spec, lora) if lora is not None else None
    if adapter is not None:
        lora_args(adapter, [str(a) for a in cfg.args])   # its rank against server.args, before anything starts
    log_dir, alias = kw.pop("log_dir", None), kw.pop("alias", None)
    if prefix == "vllm-serve":
        from .vllm_env import find_vllm

        engine = find_vllm(cfg.python)
        model, weights, dtype, prompt, commit = _vllm_weights(spec, target, cfg, kw, engine)
        if adapter is not None:
            check_base(spec, adapter, model)
            weights += adapter.identity
        for option, value in prompt.items():
            kw.setdefault(option, value)
        # a CPU decodes a few tokens/s per request: 60 s is too short with 8 in flight; so is a 24 GB
        # card's ~10-15 tokens/s per sequence for gpu-paper's 1,000-token answers under load
        kw.setdefault("timeout", CPU_SERVER_REQUEST_TIMEOUT if engine.is_cpu_build else GPU_SERVER_REQUEST_TIMEOUT)
        server = ms.start_vllm(model, alias=alias or target, config=cfg, dtype=dtype, engine=engine, log_dir=log_dir,
                               revision=commit, **({"lora": adapter} if adapter is not None else {}))
    else:
        layers = None
        if target in PRESETS:
            preset = PRESETS[target]
            if preset.backend != "llamacpp":
                raise ConfigError(f"llm spec {redact(spec)!r}: preset {target!r} is not a GGUF model; {prefix}: takes a "
                                  f"GGUF preset ({', '.join(n for n, p in PRESETS.items() if p.backend == 'llamacpp')}) "
                                  "or a .gguf path (vllm-serve: serves hub models)")
            path, sha = resolve_gguf(preset, kw.pop("model_path", None))
            for option, value in preset.options.items():
                if option in _PROMPT_OPTIONS:
                    kw.setdefault(option, value)
            layers = preset.options.get("n_gpu_layers")
        else:
            path = check_gguf(target, f"llm spec {redact(spec)}")
            sha = file_sha256(path)
        start = ms.start_llamacpp_python if prefix == "llamacpp-server" else ms.start_llama_server
        server = start(path, alias=alias or "local", config=cfg, n_gpu_layers=layers, log_dir=log_dir)
        weights = f"gguf-sha256={sha};size={path.stat().st_size}"
    kw.setdefault("flavor", server.flavor)
    try:
        return _construct(OpenAICompatLLM, spec, server.base_url, server.alias, name=redact(spec), cache=c,
                          weights=weights, managed=server, **kw)
    except BaseException:
        server.stop()
        raise


@dataclass(frozen=True)
class SpecKind:
    """One `<prefix>:<rest>` form of a model spec: how it loads, how it is written, what it is."""

    load: Callable[[str, str, str, "LLMCache | None", dict[str, Any]], LLM]
    form: str          # as `--model` help writes it
    description: str   # a line of `describe_specs`
    server: bool       # a model behind an HTTP server (is_server_spec)
    managed: bool = False   # a server kgrag starts for the run (is_managed_spec; reads `server=`)


# Every prefixed model spec, in one table: load_llm, describe_specs, spec_help, is_server_spec and
# is_managed_spec read it (a new backend is one entry here, docs/EXTENDING.md). Presets and .gguf
# paths are the two unprefixed forms.
SPEC_KINDS: dict[str, SpecKind] = {
    "hf": SpecKind(_load_hf, "hf:<id|dir>", "hf:<repo-id-or-folder>: transformers (a .gguf file also works)", False),
    "openai": SpecKind(_load_openai, f"openai:<url>#<model>[?flavor={'|'.join(FLAVORS)}]",
                       "openai:<base_url>#<model>[?flavor=<flavor>]: any OpenAI-compatible server; its flavour is "
                       f"detected from what it says about itself, or given ({', '.join(FLAVORS)})", True),
    "vllm": SpecKind(_load_running, f"vllm:<model> (${VLLM_URL_ENV})",
                     f"vllm:<model>: a running vLLM server at ${VLLM_URL_ENV} (default {DEFAULT_VLLM_URL})", True),
    "ollama": SpecKind(_load_running, "ollama:<model>",
                       f"ollama:<model>: a running Ollama server (default {DEFAULT_OLLAMA_URL})", True),
    "vllm-serve": SpecKind(_load_managed, "vllm-serve:<id|dir|preset>",
                           "vllm-serve:<hf id, dir, preset or .gguf>[?max_model_len=N&dtype=...]: start vLLM (from "
                           ".venv-vllm, scripts/install_vllm.sh) on a free local port for this run; options: "
                           "ServerConfig, or the profile's server:; lora=<name>=<adapter folder> answers with that "
                           "LoRA adapter on the base", True, True),
    "llamacpp-server": SpecKind(_load_managed, "llamacpp-server:<gguf|preset>",
                                "llamacpp-server:<gguf or preset>: start llama-cpp-python's server "
                                "(python -m llama_cpp.server)", True, True),
    "llama-server": SpecKind(_load_managed, "llama-server:<gguf|preset>",
                             "llama-server:<gguf or preset>: start llama.cpp's llama-server binary (must be on PATH)",
                             True, True),
}
MANAGED_PREFIXES = tuple(p for p, k in SPEC_KINDS.items() if k.managed)
SERVER_PREFIXES = tuple(f"{p}:" for p, k in SPEC_KINDS.items() if k.server)
