"""Any OpenAI-compatible chat server: vLLM (the papers' GPU setting), Ollama, llama.cpp server.

Plain stdlib HTTP keeps this backend dependency-free. Sampling knobs that the OpenAI API
lacks (top_k, min_p, repetition penalty) go as extra body fields in the server's own
spelling; a server flavour that cannot honour a requested knob is an error, never a
silent approximation. A `json_schema` goes as the standard `response_format` of type
`json_schema`, which vLLM (0.6 on; its older `guided_json` field was removed in 0.12),
llama.cpp's server, Ollama and OpenAI all enforce. A GBNF `grammar` goes as vLLM's
`structured_outputs: {grammar}` (0.12 on; xgrammar reads GBNF) or llama.cpp server's `grammar`
field; Ollama and OpenAI have no grammar field, so a grammar sent to them is refused rather than
dropped (the extraction stages of SA-RAG and TCR-QF would otherwise run unconstrained unnoticed).

`chat=False` sends the turns as one plain prompt to `/completions` (base models such as
Self-RAG, whose prompt format is not a chat template). Token log-probabilities
(`SamplingParams.logprobs`) go as the standard fields (`logprobs`/`top_logprobs` on chat,
`logprobs: k` on completions); a server that answers without them is an error. On vLLM the
request also sets `skip_special_tokens: false`, so special tokens (Self-RAG's reflection
tokens) stay in the text, as the Self-RAG authors' own inference does.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlparse

from ...errors import BackendUnavailableError, ConfigError
from ..base import LLM, Completion, Messages, PromptTooLongError, SamplingParams, TokenLogprob, flatten_messages

# How each server spells the non-standard knobs (None: not supported).
FLAVORS: dict[str, dict[str, str | None]] = {
    "vllm": {"top_k": "top_k", "min_p": "min_p", "repeat_penalty": "repetition_penalty"},
    "llamacpp": {"top_k": "top_k", "min_p": "min_p", "repeat_penalty": "repeat_penalty"},
    "ollama": {"top_k": None, "min_p": None, "repeat_penalty": None},
    "openai": {"top_k": None, "min_p": None, "repeat_penalty": None},
}
_NEUTRAL = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
# Where each server takes a GBNF grammar: a (field, sub-field) path in the body, or None.
GRAMMAR_FIELD: dict[str, tuple[str, ...] | None] = {
    "vllm": ("structured_outputs", "grammar"),
    "llamacpp": ("grammar",),
    "ollama": None,
    "openai": None,
}


def normalize_base_url(url: str) -> str:
    """`http://host:8000` -> `http://host:8000/v1`; trailing slashes dropped."""
    url = url.strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"base_url: expected http(s)://host[:port][/v1], got {url!r}")
    if parsed.path in ("", "/"):
        url += "/v1"
    return url


class OpenAICompatLLM(LLM):
    """Chat completions over HTTP; `generate_batch` sends requests concurrently so the
    server (vLLM) can batch them on the GPU."""

    backend = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        name: str | None = None,
        cache=None,
        flavor: str = "vllm",
        api_key: str | None = None,
        timeout: float = 600.0,
        max_retries: int = 3,
        retry_delay: float = 1.0,
        concurrency: int = 8,
        probe: bool = True,
        extra_body: dict[str, Any] | None = None,
        fold_system_prompt: bool = False,
        chat: bool = True,
        default_params: SamplingParams | None = None,
    ) -> None:
        if flavor not in FLAVORS:
            raise ConfigError(f"flavor: expected one of {sorted(FLAVORS)}, got {flavor!r}")
        if not model:
            raise ConfigError("model: the served model name is required (e.g. 'openai:http://localhost:8000/v1#Qwen/Qwen2.5-7B-Instruct')")
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self.flavor = flavor
        self.api_key = api_key or os.environ.get("KGRAG_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_delay = retry_delay
        self.concurrency = max(1, concurrency)
        self.extra_body = dict(extra_body or {})
        self.chat = bool(chat)
        identity = f"openai:{self.base_url}#{model}"
        if not self.chat:
            identity += ";raw-prompt"
        self.served: dict[str, Any] = {}
        if probe:
            self.served = self._probe()
            root = self.served.get("root")
            if root and root != model:
                identity += f"@{root}"
        super().__init__(name or f"openai:{model}", identity, cache=cache,
                         default_params=default_params, fold_system_prompt=fold_system_prompt)

    # ---- HTTP -------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> dict:
        url = self.base_url + path
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        delay = self.retry_delay
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            req = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as e:
                detail = e.read().decode("utf-8", "replace")[:500]
                if e.code in (408, 429) or e.code >= 500:
                    last = BackendUnavailableError(f"{url} answered HTTP {e.code}: {detail}")
                elif "context length" in detail or "context window" in detail:
                    raise PromptTooLongError(f"{url}: {detail}") from None
                else:
                    raise ConfigError(f"{url} rejected the request (HTTP {e.code}): {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                reason = getattr(e, "reason", e)
                last = BackendUnavailableError(
                    f"cannot reach the OpenAI-compatible server at {self.base_url} ({reason}); "
                    f"start it first, e.g. `vllm serve {self.model}`"
                )
            if attempt < self.max_retries:
                time.sleep(delay * (1 + 0.25 * random.random()))
                delay *= 2
        assert last is not None
        raise last

    def _probe(self) -> dict[str, Any]:
        """The server's /models entry for our model (raises if the model is not served)."""
        saved, self.max_retries = self.max_retries, 0
        try:
            listing = self._request("GET", "/models", timeout=min(self.timeout, 15.0))
        finally:
            self.max_retries = saved
        entries = listing.get("data") or []
        for entry in entries:
            if entry.get("id") == self.model:
                return entry
        ids = [e.get("id") for e in entries]
        raise BackendUnavailableError(f"{self.base_url} does not serve {self.model!r}; it serves {ids}")

    # ---- generation -------------------------------------------------------------------
    def request_body(self, messages: Messages, params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if self.chat:
            body["messages"] = messages
        else:
            body["prompt"] = flatten_messages(messages)
        body.update({
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": params.seed,
            "n": 1,
            "stream": False,
        })
        if params.logprobs:
            if self.chat:
                body.update(logprobs=True, top_logprobs=params.logprobs)
            else:
                body["logprobs"] = params.logprobs
            if self.flavor == "vllm":
                body["skip_special_tokens"] = False
        if params.stop:
            body["stop"] = list(params.stop)
        if params.json_schema:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": json.loads(params.json_schema)}}
        if params.grammar:
            path = GRAMMAR_FIELD[self.flavor]
            if path is None:
                raise ConfigError(
                    f"grammar: the {self.flavor!r} server flavour takes no GBNF grammar, so this request "
                    f"would decode unconstrained; use flavor='vllm' or 'llamacpp', or the in-process "
                    f"llama.cpp backend")
            slot = body
            for key in path[:-1]:
                slot = slot.setdefault(key, {})
            slot[path[-1]] = params.grammar
        names = FLAVORS[self.flavor]
        for knob, neutral in _NEUTRAL.items():
            value = getattr(params, knob)
            field_name = names[knob]
            if field_name is None:
                if value != neutral:
                    raise ConfigError(
                        f"{knob}={value!r}: the {self.flavor!r} server flavour has no such "
                        f"parameter; leave it at {neutral!r} or use flavor='vllm'/'llamacpp'"
                    )
                continue
            if knob == "top_k" and value == 0 and self.flavor == "vllm":
                value = -1  # vLLM's "off" (accepted by every vLLM release)
            body[field_name] = value
        body.update(self.extra_body)
        return body

    def _complete(self, messages: Messages, params: SamplingParams) -> Completion:
        start = time.perf_counter()
        path = "/chat/completions" if self.chat else "/completions"
        out = self._request("POST", path, self.request_body(messages, params))
        try:
            choice = out["choices"][0]
            text = (choice["message"].get("content") if self.chat else choice.get("text")) or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise BackendUnavailableError(f"{self.base_url}: unexpected response {str(out)[:300]}") from None
        logprobs = None
        if params.logprobs:
            logprobs = self._parse_logprobs(choice.get("logprobs"))
        usage = out.get("usage") or {}
        return Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            seconds=time.perf_counter() - start,
            finish_reason=choice.get("finish_reason") or "",
            logprobs=logprobs,
        )

    def _parse_logprobs(self, value: Any) -> list[TokenLogprob]:
        """The chat form ({"content": [{token, logprob, top_logprobs: [{token, logprob}]}]}) or
        the completions form ({tokens, token_logprobs, top_logprobs: [{token: logprob}]})."""
        where = f"{self.base_url} ({self.model})"
        try:
            if self.chat:
                if not value or value.get("content") is None:
                    raise BackendUnavailableError(
                        f"{where} returned no token log-probabilities; the server does not support "
                        "`logprobs`/`top_logprobs` (vLLM and llama.cpp's server do)")
                return [TokenLogprob(str(e["token"]), float(e["logprob"]),
                                     tuple((str(a["token"]), float(a["logprob"])) for a in e.get("top_logprobs") or ()))
                        for e in value["content"]]
            if not value or value.get("tokens") is None:
                raise BackendUnavailableError(
                    f"{where} returned no token log-probabilities; the server does not support "
                    "`logprobs` on /completions (vLLM and llama.cpp's server do)")
            tops = value.get("top_logprobs") or [None] * len(value["tokens"])
            return [TokenLogprob(str(tok), float(lp) if lp is not None else 0.0,
                                 tuple(sorted(((str(a), float(b)) for a, b in (top or {}).items()),
                                              key=lambda p: -p[1])))
                    for tok, lp, top in zip(value["tokens"], value["token_logprobs"], tops)]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BackendUnavailableError(f"{where}: unreadable logprobs in the response {str(value)[:300]}") from None

    def _complete_batch(self, batch: list[Messages], params: SamplingParams) -> list[Completion]:
        if len(batch) == 1 or self.concurrency == 1:
            return [self._complete(m, params) for m in batch]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(batch))) as pool:
            return list(pool.map(lambda m: self._complete(m, params), batch))
