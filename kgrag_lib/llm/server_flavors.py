"""What each OpenAI-compatible server reads, and how to tell which server is answering.

Servers agree on the OpenAI fields (max_tokens, temperature, top_p, seed, stop, logprobs) and
disagree on everything else. Each flavour below puts every sampling knob and the grammar in the
field that server actually reads; a knob it cannot honour at a non-neutral value is refused
(ConfigError naming the field and the flavour) before anything is sent, never dropped — servers
ignore unknown fields silently, so a dropped knob would run unconstrained and unnoticed.

Where each server reads what (from its own documentation / request schema):
- vLLM: `top_k` (-1 = off), `min_p`, `repetition_penalty`; a GBNF grammar as
  `structured_outputs.grammar` from 0.10.2 on (the older `guided_grammar` was removed in 0.12;
  docs.vllm.ai/en/latest/features/structured_outputs); `skip_special_tokens`.
- SGLang: `top_k` (-1 = off; 0 is rejected), `min_p`, `repetition_penalty`; a grammar as `ebnf`;
  on /completions a JSON schema as the `json_schema` string (docs.sglang.ai sampling params).
- llama.cpp `llama-server`: `top_k` (0 = off), `min_p`, `repeat_penalty`, `grammar`, and a
  `json_schema` field on /completions (tools/server/README.md). Its defaults are not neutral
  (top_k 40, min_p 0.05), so every knob is always sent.
- llama-cpp-python (`python -m llama_cpp.server`): the same spellings, `top_k` >= 0 (so -1 is a
  422/500); its `response_format` takes only `json_object` with a `schema`, and /completions has
  no schema field. Defaults are not neutral either (top_k 40, min_p 0.05, repeat_penalty 1.1).
- Ollama: its native `/api/chat` and `/api/generate` take every knob under `options` and a JSON
  schema as `format`; its OpenAI endpoint honours only the OpenAI fields (docs.ollama.com
  api/openai-compatibility) while the model's own defaults (repeat_penalty, top_k) apply, so we
  speak the native API. No GBNF grammar; log-probabilities are not read from it.
- OpenAI: the OpenAI fields only.

What `repeat_penalty` counts differs (the MetaQA paper's 1.1 is llama.cpp's): llama.cpp
(`llama-server`, llama-cpp-python, Ollama, our in-process backend) penalises the tokens among the
last 64 of prompt and output (`repeat_last_n`, sent as 64 to llama-server and Ollama, which read
it per request); vLLM and transformers every token of the prompt and the output (so each entity
name in the retrieved triples an answer should copy), with no window; SGLang the output only.
There is no server field that makes vLLM or SGLang count llama.cpp's window, so a non-neutral
value there is sent as asked and `caveats` says once what it means. SGLang reads `seed` only when
started with `--enable-deterministic-inference`; a sampled request (temperature > 0) there gets a
caveat naming the flag.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .base import SamplingParams

FLAVORS = ("vllm", "sglang", "llama-server", "llama-cpp-python", "ollama", "openai")
# Other spellings people use; "llamacpp" was this backend's name for llama-server before.
ALIASES = {
    "llamacpp": "llama-server", "llama.cpp": "llama-server", "llama_server": "llama-server",
    "llamacpp-python": "llama-cpp-python", "llama_cpp_python": "llama-cpp-python", "llama_cpp.server": "llama-cpp-python",
}
LABELS = {
    "vllm": "vLLM", "sglang": "SGLang", "llama-server": "llama.cpp llama-server",
    "llama-cpp-python": "llama-cpp-python server", "ollama": "Ollama", "openai": "plain OpenAI",
}
_NEUTRAL = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
REPEAT_LAST_N = 64   # llama.cpp's penalty window (its default), sent where a server reads it per request
# (top_k field, its "off" value, min_p field, repeat penalty field); None: the server has no such knob.
_KNOBS: dict[str, tuple[str | None, int, str | None, str | None]] = {
    "vllm": ("top_k", -1, "min_p", "repetition_penalty"),
    "sglang": ("top_k", -1, "min_p", "repetition_penalty"),
    "llama-server": ("top_k", 0, "min_p", "repeat_penalty"),
    "llama-cpp-python": ("top_k", 0, "min_p", "repeat_penalty"),
    "ollama": ("top_k", 0, "min_p", "repeat_penalty"),  # inside `options`
    "openai": (None, 0, None, None),
}
VLLM_STRUCTURED_OUTPUTS_SINCE = (0, 10, 2)
# vLLM's "top_k off": 0 in its own SamplingParams (0.32's source; -1 only "quietly accepted"), -1 before
VLLM_TOP_K_ZERO_SINCE = (0, 32, 0)


def normalize_flavor(name: str | None) -> str | None:
    """A flavour name in its canonical spelling; None for "auto" (detect from the server)."""
    if name is None or name == "auto":
        return None
    canon = ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    if canon not in FLAVORS:
        raise ConfigError(f"flavor: expected 'auto' or one of {list(FLAVORS)} (aliases: {sorted(ALIASES)}), "
                          f"got {name!r}")
    return canon


def parse_version(text: Any) -> tuple[int, ...] | None:
    """`"0.10.2rc1"` -> (0, 10, 2); None when there is no leading number."""
    parts: list[int] = []
    for piece in str(text or "").lstrip("v").split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts) or None


def _refuse(field: str, value: Any, flavor: str, why: str) -> ConfigError:
    return ConfigError(f"{field}={value!r}: the {flavor!r} server flavour ({LABELS[flavor]}) {why}; "
                       f"the request was not sent (a server ignores fields it does not read, so it would "
                       f"run without them)")


def build_body(flavor: str, params: SamplingParams, *, chat: bool, version: str | None = None) -> dict[str, Any]:
    """Every field of the request except `model` and `messages`/`prompt`, spelled for `flavor`.

    Raises ConfigError for a knob the flavour cannot honour at a non-neutral value."""
    if flavor == "ollama":
        return _ollama_body(params, chat=chat)
    body: dict[str, Any] = {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "seed": params.seed,
        "n": 1,
        "stream": False,
    }
    if params.stop:
        body["stop"] = list(params.stop)
    if params.logprobs:
        if chat:
            body.update(logprobs=True, top_logprobs=params.logprobs)
        else:
            body["logprobs"] = params.logprobs
        if flavor in ("vllm", "sglang"):
            body["skip_special_tokens"] = False  # keep Self-RAG's reflection tokens in the text
    if params.json_schema:
        body.update(_schema_fields(flavor, json.loads(params.json_schema), params.json_schema, chat=chat))
    if params.grammar:
        body.update(_grammar_fields(flavor, params.grammar, version))
    top_k_field, top_k_off, min_p_field, penalty_field = _KNOBS[flavor]
    for knob, field in (("top_k", top_k_field), ("min_p", min_p_field), ("repeat_penalty", penalty_field)):
        value = getattr(params, knob)
        if field is None:
            if value != _NEUTRAL[knob]:
                raise _refuse(knob, value, flavor, f"has no such parameter; leave it at {_NEUTRAL[knob]!r} "
                                                   f"or use a server that has it (vLLM, SGLang, llama.cpp)")
            continue
        if knob == "top_k" and value == 0:
            v = parse_version(version) if flavor == "vllm" else None
            value = 0 if v is not None and v >= VLLM_TOP_K_ZERO_SINCE else top_k_off
        body[field] = value
    if flavor == "llama-server":
        body["repeat_last_n"] = REPEAT_LAST_N
    return body


def caveats(flavor: str, params: SamplingParams) -> list[str]:
    """What a request means on this server where that differs from llama.cpp (see the module
    docstring); each is said once per server, never silently."""
    out = []
    if params.repeat_penalty != _NEUTRAL["repeat_penalty"] and flavor in ("vllm", "sglang"):
        counted = ("every prompt and output token (no window)" if flavor == "vllm" else "the output tokens only")
        out.append(f"repeat_penalty={params.repeat_penalty}: {LABELS[flavor]}'s repetition_penalty counts {counted}, "
                   f"llama.cpp's (the MetaQA paper's engine, and kgrag's CPU default) the last {REPEAT_LAST_N} tokens of "
                   "prompt and output; no field of this server gives llama.cpp's window, so answers differ from a "
                   "llama.cpp run with the same setting")
    if flavor == "sglang" and params.temperature > 0:
        out.append(f"seed={params.seed} with temperature {params.temperature}: SGLang ignores the seed unless the server "
                   "was started with --enable-deterministic-inference, so a sampled answer does not repeat (the LLM "
                   "cache keeps the first draw); start SGLang with that flag")
    return out


def _schema_fields(flavor: str, schema: dict, text: str, *, chat: bool) -> dict[str, Any]:
    standard = {"response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}}
    if flavor == "llama-cpp-python":
        if not chat:
            raise _refuse("json_schema", "<schema>", flavor, "reads no JSON schema on /completions (chat=False)")
        return {"response_format": {"type": "json_object", "schema": schema}}
    if flavor == "sglang" and not chat:
        return {"json_schema": text}
    if flavor == "llama-server" and not chat:
        return {"json_schema": schema}
    if flavor == "openai" and not chat:
        raise _refuse("json_schema", "<schema>", flavor, "reads no JSON schema on /completions (chat=False)")
    return standard


def _grammar_fields(flavor: str, grammar: str, version: str | None) -> dict[str, Any]:
    if flavor == "vllm":
        v = parse_version(version)
        if v is not None and v < VLLM_STRUCTURED_OUTPUTS_SINCE:
            return {"guided_grammar": grammar}
        return {"structured_outputs": {"grammar": grammar}}
    if flavor == "sglang":
        return {"ebnf": grammar}
    if flavor in ("llama-server", "llama-cpp-python"):
        return {"grammar": grammar}
    raise ConfigError(f"grammar: the {flavor!r} server flavour takes no GBNF grammar, so this request would "
                      f"decode unconstrained; use a vLLM, SGLang or llama.cpp server, or the in-process "
                      f"llama.cpp backend")


def _ollama_body(params: SamplingParams, *, chat: bool) -> dict[str, Any]:
    """Ollama's native /api/chat (/api/generate for chat=False) body, minus model and messages."""
    if params.grammar:
        _grammar_fields("ollama", params.grammar, None)
    if params.logprobs:
        raise _refuse("logprobs", params.logprobs, "ollama", "is not read for log-probabilities by this client")
    options: dict[str, Any] = {
        "num_predict": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,  # 0 = off in Ollama's samplers too
        "min_p": params.min_p,
        "repeat_penalty": params.repeat_penalty,
        "repeat_last_n": REPEAT_LAST_N,
        "seed": params.seed,
    }
    if params.stop:
        options["stop"] = list(params.stop)
    body: dict[str, Any] = {"stream": False, "options": options}
    if not chat:
        body["raw"] = True  # no template: the prompt goes to the model as written
    if params.json_schema:
        body["format"] = json.loads(params.json_schema)
    return body


# ---- detection ---------------------------------------------------------------------------------
@dataclass
class ServerFacts:
    """What the server said about itself: the flavour it looks like and what pins its weights."""

    flavor: str
    evidence: str               # why we think so, e.g. "/v1/models owned_by='vllm'"
    weights: str | None         # e.g. "root=/models/Qwen2.5-7B"; None: the server reports nothing
    weights_source: str         # where `weights` came from, or why there is none
    version: str | None = None


def detect(entry: dict[str, Any], get: Any) -> ServerFacts:
    """Name the server from its /v1/models `entry` for our model; `get(path)` fetches a JSON
    document from the server root (None on any failure). Rules, first match wins:
    owned_by 'vllm' / 'sglang' / 'llamacpp' name vLLM, SGLang and llama-server (each server writes
    its own name there); owned_by 'me' with a `permissions` list is llama-cpp-python (confirmed by
    the title of its /openapi.json); a JSON /api/version is Ollama; anything else is treated as
    plain OpenAI (standard fields only)."""
    owner = entry.get("owned_by")
    name = str(entry.get("id"))
    if owner == "vllm":
        version = (get("/version") or {}).get("version")
        root = entry.get("root")
        return ServerFacts("vllm", "/v1/models owned_by='vllm'", f"root={root}" if root else None,
                           "/v1/models root" if root else "vLLM listed no root", version)
    if owner == "sglang":
        info = get("/get_model_info") or {}
        path = info.get("model_path") or entry.get("root")
        weights = f"model_path={path}" if path else None
        if weights and info.get("weight_version") not in (None, "", "default"):
            weights += f";weight_version={info['weight_version']}"
        return ServerFacts("sglang", "/v1/models owned_by='sglang'", weights,
                           "/get_model_info model_path" if info.get("model_path") else "/v1/models root")
    if owner == "llamacpp":
        props = get("/props") or {}
        meta = entry.get("meta") or {}
        bits = []
        if props.get("model_path"):
            bits.append(f"path={props['model_path']}")
        for key in ("size", "n_params", "n_vocab"):
            if meta.get(key) is not None:
                bits.append(f"{key}={meta[key]}")
        version = props.get("build_info")
        return ServerFacts("llama-server", "/v1/models owned_by='llamacpp'", ";".join(bits) or None,
                           "/props model_path + /v1/models meta" if bits else "llama-server reported no path or meta",
                           str(version) if version else None)
    if owner == "me" and "permissions" in entry:
        title = str(((get("/openapi.json") or {}).get("info") or {}).get("title", ""))
        evidence = "/v1/models owned_by='me' with 'permissions'"
        if "llama.cpp Python" in title:
            evidence += f"; /openapi.json title {title!r}"
        return ServerFacts("llama-cpp-python", evidence, None,
                           "llama-cpp-python's server reports only the alias, not the weights")
    version_doc = get("/api/version")
    if isinstance(version_doc, dict) and "version" in version_doc:
        tags = get("/api/tags") or {}
        digest = size = None
        for m in tags.get("models") or ():
            if name in (m.get("name"), m.get("model")) or f"{name}:latest" in (m.get("name"), m.get("model")):
                digest, size = m.get("digest"), m.get("size")
                break
        weights = f"digest={digest};size={size}" if digest else None
        return ServerFacts("ollama", f"/api/version answered {version_doc['version']!r}", weights,
                           "/api/tags digest" if digest else f"/api/tags lists no digest for {name!r}",
                           str(version_doc["version"]))
    return ServerFacts("openai", f"no known server signature (/v1/models owned_by={owner!r})", None,
                       "the server reports nothing about the weights")
