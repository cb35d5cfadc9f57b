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
from typing import Any

from ..errors import ConfigError
from ..redact import redact
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
    lines += [
        "  /path/to/model.gguf: any GGUF file through llama.cpp",
        "  hf:<repo-id-or-folder>: transformers (a .gguf file also works)",
        "  openai:<base_url>#<model>[?flavor=<flavor>]: any OpenAI-compatible server; its flavour is detected "
        f"from what it says about itself, or given ({', '.join(FLAVORS)})",
        f"  vllm:<model>: a running vLLM server at ${VLLM_URL_ENV} (default {DEFAULT_VLLM_URL})",
        f"  ollama:<model>: a running Ollama server (default {DEFAULT_OLLAMA_URL})",
        "  vllm-serve:<hf id or dir>: start `vllm serve` on a free local port for this run",
        "  llamacpp-server:<gguf or preset>: start llama-cpp-python's server (python -m llama_cpp.server)",
        "  llama-server:<gguf or preset>: start llama.cpp's llama-server binary (must be on PATH)",
    ]
    return "\n".join(lines)


def spec_help() -> str:
    """Every spec form `load_llm` accepts, on one line (the `--model` help of `kgrag run/study/sweep`)."""
    return (f"LLM: a preset ({', '.join(PRESETS)}), a .gguf path, hf:<id|dir>, a running server "
            f"openai:<url>#<model>[?flavor={'|'.join(FLAVORS)}], vllm:<model> (${VLLM_URL_ENV}), "
            "ollama:<model>, or a server kgrag starts for the run: vllm-serve:<id|dir>, "
            "llamacpp-server:<gguf|preset>, llama-server:<gguf|preset>")


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
        from .assets import check_gguf, file_sha256
        from .backends.llamacpp import LlamaCppLLM

        path = check_gguf(spec)
        return _construct(LlamaCppLLM, spec, path, sha256=file_sha256(path), cache=c, **kw)

    prefix, _, rest = spec.partition(":")
    if prefix == "hf" and rest:
        from .backends.hf import HFLLM

        return _construct(HFLLM, spec, rest, name=spec, cache=c, **{**prompt_options(rest), **kw})
    if prefix == "openai" and rest:
        base_url, sep, model = rest.rpartition("#")
        model, query = _split_query(shown, model)
        if not sep or not base_url or not model:
            raise ConfigError(f"llm spec {shown!r}: expected openai:<base_url>#<model>[?flavor=<flavor>], e.g. "
                              "openai:http://localhost:8000/v1#Qwen/Qwen2.5-7B-Instruct?flavor=vllm")
        from .backends.openai_compat import OpenAICompatLLM

        kw = {**prompt_options(model), **_flavor_from_query(shown, query, kw)}
        return _construct(OpenAICompatLLM, shown, base_url, model, name=shown, cache=c, **kw)
    if prefix in ("vllm", "ollama") and rest:
        from .backends.openai_compat import OpenAICompatLLM

        model, query = _split_query(shown, rest)
        default = os.environ.get(VLLM_URL_ENV, DEFAULT_VLLM_URL) if prefix == "vllm" else DEFAULT_OLLAMA_URL
        base_url = kw.pop("base_url", default)
        kw = {**prompt_options(model), **_flavor_from_query(shown, query, kw)}
        kw.setdefault("flavor", prefix)
        return _construct(OpenAICompatLLM, shown, base_url, model, name=shown, cache=c, **kw)
    if prefix in MANAGED_PREFIXES and rest:
        return _load_managed(spec, prefix, rest, c, kw)
    raise ConfigError(f"unknown llm spec {shown!r}; accepted:\n{describe_specs()}")


MANAGED_PREFIXES = ("vllm-serve", "llamacpp-server", "llama-server")
# load_llm keywords that configure a started server rather than the client.
_SERVER_OPTIONS = ("server_args", "log_dir", "startup_timeout", "n_ctx", "alias")


SERVER_PREFIXES = ("openai:", "vllm:", "ollama:", "vllm-serve:", "llamacpp-server:", "llama-server:")


# Preset options that describe how the model is prompted, not where it runs: a hub id of a preset's
# model keeps them through any backend (Mistral-7B-Instruct-v0.2's template refuses a system turn).
_PROMPT_OPTIONS = ("fold_system_prompt", "chat")


def prompt_options(model_id: str) -> dict[str, Any]:
    """The prompting options of the preset whose hub model is `model_id` (case-insensitive), else {}."""
    for p in PRESETS.values():
        if p.model and p.model.lower() == model_id.strip().lower():
            return {k: v for k, v in p.options.items() if k in _PROMPT_OPTIONS}
    return {}


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
    unknown = sorted({k for k, _ in pairs} - {"flavor"})
    if unknown or not pairs:
        raise ConfigError(f"llm spec {spec!r}: unknown option(s) {unknown or [query]} after '?'; accepted: "
                          f"flavor=<{'|'.join(('auto',) + FLAVORS)}>")
    return head, dict(pairs)


def _flavor_from_query(spec: str, query: dict[str, str], kw: dict[str, Any]) -> dict[str, Any]:
    if "flavor" in query:
        if "flavor" in kw and kw["flavor"] != query["flavor"]:
            raise ConfigError(f"llm spec {spec!r} says flavor={query['flavor']!r} but flavor={kw['flavor']!r} "
                              "was also given; give it once")
        kw = {**kw, "flavor": query["flavor"]}
    return kw


def _load_managed(spec: str, prefix: str, rest: str, c: LLMCache | None, kw: dict[str, Any]) -> LLM:
    """Start a server for this run and talk to it; close() (or exit) stops it."""
    from . import managed_server as ms
    from .backends.openai_compat import OpenAICompatLLM

    server_kw = {k: kw.pop(k) for k in _SERVER_OPTIONS if k in kw}
    if prefix == "vllm-serve":
        server, weights = ms.start_vllm(rest, **server_kw), None
        for option, value in prompt_options(rest).items():
            kw.setdefault(option, value)
    else:
        if rest in PRESETS:
            preset = PRESETS[rest]
            if preset.backend != "llamacpp":
                raise ConfigError(f"llm spec {spec!r}: preset {rest!r} is not a GGUF model; {prefix}: takes a "
                                  f"GGUF preset ({', '.join(n for n, p in PRESETS.items() if p.backend == 'llamacpp')}) "
                                  "or a .gguf path")
            path, sha = resolve_gguf(preset, kw.pop("model_path", None))
            for option, value in preset.options.items():
                if option in ("fold_system_prompt", "chat"):
                    kw.setdefault(option, value)
        else:
            from .assets import check_gguf, file_sha256

            path = check_gguf(rest, f"llm spec {spec}")
            sha = file_sha256(path)
        start = ms.start_llamacpp_python if prefix == "llamacpp-server" else ms.start_llama_server
        server = start(path, **server_kw)
        weights = f"gguf-sha256={sha};size={path.stat().st_size}"
    kw.setdefault("flavor", server.flavor)
    try:
        return _construct(OpenAICompatLLM, spec, server.base_url, server.alias, name=spec, cache=c,
                          weights=weights, managed=server, **kw)
    except BaseException:
        server.stop()
        raise
