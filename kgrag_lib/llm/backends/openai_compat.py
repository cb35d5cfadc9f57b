"""Any OpenAI-compatible server: vLLM (the papers' GPU setting), SGLang, llama.cpp's
`llama-server`, llama-cpp-python's server, Ollama, or OpenAI itself.

The `openai` SDK carries the requests (connection pooling, timeouts, typed errors, `extra_body`).
Which field every sampling knob and the grammar go in depends on the server; `server_flavors`
holds those rules and the detection, so this module only sends and reads. The flavour is given
(`flavor=`, or `?flavor=` on the spec) or detected from what the server says about itself.

`chat=False` sends the turns as one plain prompt to `/completions` (base models such as
Self-RAG, whose prompt format is not a chat template). Token log-probabilities go as the standard
fields; a server that answers without them is an error. On vLLM and SGLang the request also sets
`skip_special_tokens: false`, so Self-RAG's reflection tokens stay in the text.

The cache identity is the weights the server reports (vLLM's `root`, llama-server's model path
and size, Ollama's digest, ...), never the alias alone: another model served under the same
name must not replay old answers. Where the server reports nothing the identity says
`weights=unreported` (and names the URL and alias), `identity_source` says why, and a warning
is printed once.

A URL's `user:password@` and query (`?api_key=...`) go with every request (as HTTP Basic auth
and query parameters) but stay out of `base_url`, identities and messages (`kgrag_lib.redact`).
"""

from __future__ import annotations

import base64
import json
import os
import random
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse, urlunparse

from ...concurrency import check_workers
from ...errors import BackendUnavailableError, ConfigError
from ...redact import CREDENTIAL_KEY, guard_http_logs, hold_secret, redact
from ..base import LLM, Completion, Messages, PromptTooLongError, SamplingParams, TokenLogprob, flatten_messages
from ..parsing import LLMParseError
from .. import server_flavors as sf

guard_http_logs()   # httpx logs each request's URL, query token included
_WARNED: set[str] = set()
_WARNED_CAVEATS: set[tuple[str, str]] = set()


def normalize_base_url(url: str) -> str:
    """`http://host:8000` -> `http://host:8000/v1`; trailing slashes dropped."""
    url = url.strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"base_url: expected http(s)://host[:port][/v1], got {redact(url)!r}")
    if parsed.path in ("", "/"):
        url += "/v1"
    return url


def public_url(url: str) -> str:
    """The URL without user:password, query or fragment (what may be written into identities and logs)."""
    p = urlparse(url)
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{p.port}" if p.port else "")
    return urlunparse((p.scheme, netloc, p.path, "", "", ""))


def split_credentials(url: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """`http://u:p@host:8000?api_key=t` -> (`http://host:8000/v1`, {"Authorization": "Basic <u:p>"},
    {"api_key": "t"}): the URL that may be shown, and what every request carries besides (a URL's
    user:password as Basic auth, as httpx sends it; its query, which the SDK would glue onto paths)."""
    p = urlparse(url.strip())
    try:
        p.port
    except ValueError:
        raise ConfigError(f"base_url: expected http(s)://host[:port][/v1], got {redact(url)!r} (percent-encode "
                          "'@', '#', '/' and ':' inside a user name or password: %40, %23, %2F, %3A)") from None
    headers = {}
    if "@" in p.netloc:
        pair = f"{unquote(p.username or '')}:{unquote(p.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        hold_secret(unquote(p.password or ""))   # a server echoing it back is masked, however short
    query = dict(parse_qsl(p.query, keep_blank_values=True))
    for k, value in query.items():
        if CREDENTIAL_KEY.search(k):
            hold_secret(value)
    return normalize_base_url(public_url(url.strip())), headers, query


def api_key_from(given: str | None = None) -> str | None:
    """The API key: `given`, else $KGRAG_OPENAI_API_KEY, else $OPENAI_API_KEY, without the white
    space a key file's line end leaves (a CR would make an illegal header that prints the key)."""
    key = (given or os.environ.get("KGRAG_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY") or "").strip()
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise ConfigError("the API key ($KGRAG_OPENAI_API_KEY / $OPENAI_API_KEY) holds a control character inside "
                          "it; write the key alone on one line")
    hold_secret(key)   # a 401 echoing a key shorter than 6 characters is masked too
    return key or None


def _server_root(base_url: str) -> str:
    """`http://h:8000/v1` -> `http://h:8000`: where the servers' own endpoints live."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


class OpenAICompatLLM(LLM):
    """Completions over HTTP; `generate_batch` sends requests concurrently so a batching server
    (vLLM, SGLang, llama-server with several slots) can use its GPU well."""

    backend = "openai"
    concurrent_requests = True   # requests in flight go to the server together; it batches them

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        name: str | None = None,
        cache=None,
        flavor: str | None = "auto",
        api_key: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        max_retries: int = 2,
        retry_delay: float = 0.5,
        max_in_flight: int | None = None,
        probe: bool = True,
        extra_body: dict[str, Any] | None = None,
        fold_system_prompt: bool = False,
        chat: bool = True,
        default_params: SamplingParams | None = None,
        weights: str | None = None,
        managed: Any = None,
    ) -> None:
        """`timeout`: seconds one request may take before the server counts as stalled (a timed-out
        request is not retried, so a stalled server fails in about `timeout` seconds); `max_retries`
        with `retry_delay` (doubling) cover refused connections, HTTP 408/409/429 and 5xx.
        `weights`: what the caller knows about the served weights (a managed server's file hash);
        it takes the place of what the server reports. `managed`: a ManagedServer stopped by close()."""
        import openai

        given = sf.normalize_flavor(flavor)
        if not model:
            raise ConfigError("model: the served model name is required (e.g. 'openai:http://localhost:8000/v1#Qwen/Qwen2.5-7B-Instruct')")
        if given is None and not probe:
            raise ConfigError("flavor: give the server flavour (one of "
                              f"{list(sf.FLAVORS)}) when probe=False; it cannot be detected without asking the server")
        for knob, value, ok in (("timeout", timeout, timeout > 0), ("connect_timeout", connect_timeout, connect_timeout > 0),
                                ("max_retries", max_retries, isinstance(max_retries, int) and max_retries >= 0)):
            if not ok:
                raise ConfigError(f"{knob}: expected a positive number (max_retries: an int >= 0), got {value!r}")
        self.base_url, auth_headers, query = split_credentials(base_url)
        self.model = model
        self.api_key = api_key_from(api_key)
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.retry_delay = retry_delay
        self.extra_body = dict(extra_body or {})
        self.chat = bool(chat)
        self.managed = managed
        # Retries are ours (see `_call`): the SDK would also retry a timed-out request, multiplying
        # the wait on a stalled server.
        # a server kgrag started listens on loopback: never through the environment's http_proxy
        direct = {"http_client": openai.DefaultHttpxClient(trust_env=False)} if managed is not None else {}
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=self.api_key or "not-needed", max_retries=0,
            default_headers=auth_headers or None, default_query=query or None,
            timeout=openai.Timeout(self.timeout, connect=connect_timeout), **direct)
        self.served: dict[str, Any] = {}
        facts = None
        if probe:
            self.served = self._probe()
            facts = sf.detect(self.served, self._get_json)
        if given is not None:
            self.flavor = given
            self.flavor_source = "given"
            if facts is not None and facts.flavor != given and facts.flavor != "openai":
                warnings.warn(f"{self.base_url} looks like {sf.LABELS[facts.flavor]} ({facts.evidence}) "
                              f"but flavor={given!r} was given; sending {given!r} fields", stacklevel=2)
        else:
            assert facts is not None
            self.flavor = facts.flavor
            self.flavor_source = f"detected: {facts.evidence}"
        self.server_version = facts.version if facts is not None else None
        if weights:
            reported, self.identity_source = weights, "given by the caller"
        elif facts is not None and facts.weights:
            reported, self.identity_source = facts.weights, facts.weights_source
        else:
            reported = None
            self.identity_source = facts.weights_source if facts is not None else "not probed (probe=False)"
        if reported:
            identity = f"openai-compat:{self.flavor}|weights={reported}"
            root = reported.removeprefix("root=")
            if (not weights and self.flavor == "vllm" and reported.startswith("root=") and "@" not in root
                    and not root.startswith(("/", ".", "~")) and root.count("/") == 1 and identity not in _WARNED):
                _WARNED.add(identity)   # a hub id as the server was started: which commit it loaded, it does not say
                warnings.warn(f"{self.base_url} (vLLM) serves the hub id {root!r} and does not say at which commit; "
                              "cached answers are keyed by the id only, so a model updated on the hub replays old "
                              "answers. Serve a local folder, or let kgrag start vLLM (vllm-serve:, pinned to the "
                              "commit it resolves)", stacklevel=2)
        else:
            identity = f"openai-compat:{self.flavor}|{self.base_url}#{model}|weights=unreported"
            if identity not in _WARNED:
                _WARNED.add(identity)
                warnings.warn(f"{self.base_url} ({sf.LABELS[self.flavor]}) does not say which weights it "
                              f"serves as {model!r} ({self.identity_source}); cached answers are keyed by URL and "
                              f"name only, so clear the cache if another model is served there", stacklevel=2)
        if not self.chat:
            identity += ";raw-prompt"
        if max_in_flight is None:
            max_in_flight = 1 if self.flavor == "llama-cpp-python" else 8  # that server answers one at a time
        # requests this client sends at once: a batch, a text KG's chunks, DPO's decodings (`concurrency.fan_out`)
        self.max_in_flight = check_workers(max_in_flight, "max_in_flight")
        self.default_concurrency = self.max_in_flight   # questions in flight when the run does not say
        super().__init__(name or f"openai:{model}", identity, cache=cache,
                         default_params=default_params, fold_system_prompt=fold_system_prompt)
        self.check_params(self.default_params)

    # ---- HTTP -------------------------------------------------------------------------
    def _call(self, fn, what: str, timeout: float | None = None):
        """Run one SDK call, retrying transient failures and mapping errors to ours; `timeout` is
        the call's own limit when it is not the backend's (the message says the one that applied)."""
        import openai

        delay, waited = self.retry_delay, 0.0
        retry_after: float | None = None
        limit = timeout or self.timeout
        for attempt in range(self.max_retries + 1):
            try:
                return _within(fn, limit)
            except _PastDeadline:
                raise BackendUnavailableError(
                    f"{self.base_url} did not finish {what} within {limit:g} s (it kept the connection open, sending "
                    f"slowly); raise --request-timeout / run.request_timeout if the server is just slow") from None
            except openai.APITimeoutError:
                raise BackendUnavailableError(
                    f"{self.base_url} gave no answer to {what} within {timeout or self.timeout:g} s; the server is "
                    f"stalled or overloaded (raise --request-timeout / run.request_timeout for a slow server with many requests in flight)") from None
            except openai.APIConnectionError as e:
                if type(e.__cause__).__name__ == "DecodingError":   # (httpx's, whichever httpx the SDK uses) it
                    # answered, in an encoding that cannot be read
                    raise BackendUnavailableError(
                        f"{self.base_url} answered {what} with a body that cannot be decoded ({redact(str(e.__cause__))}); "
                        "a proxy between kgrag and the server may be corrupting compressed answers") from None
                if self.managed is not None and self.managed.exited(within=2.0):   # our own server died: say why
                    raise BackendUnavailableError(self.managed.stopped_message()) from None
                last: Exception = BackendUnavailableError(
                    f"cannot reach the OpenAI-compatible server at {self.base_url} ({redact(str(e.__cause__ or e))}); "
                    f"start it first, e.g. `vllm serve {self.model} --gpu-memory-utilization 0.6` (leave room for what kgrag "
                    f"loads itself: `kgrag doctor` plans it), or let kgrag start one "
                    f"(--model vllm-serve:<model> / llamacpp-server:<gguf>)")
            except openai.APIStatusError as e:
                detail = redact(_error_detail(e))   # a server may echo the request URL
                if e.status_code in (408, 409, 429) or e.status_code >= 500:
                    last = BackendUnavailableError(f"{self.base_url} answered HTTP {e.status_code} to {what}: {detail}")
                    retry_after = _retry_after(e)
                elif any(s in detail.lower() for s in ("context length", "context window", "exceed_context", "maximum context")):
                    raise PromptTooLongError(f"{self.base_url}: {detail}") from None
                else:
                    raise ConfigError(f"{self.base_url} rejected {what} (HTTP {e.status_code}): {detail}") from None
            except openai.APIResponseValidationError as e:
                raise BackendUnavailableError(f"{self.base_url}: unreadable answer to {what}: {redact(str(e))}") from None
            except (json.JSONDecodeError, UnicodeDecodeError) as e:  # the SDK reading a body that is no JSON text
                kind = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else "not valid JSON"
                raise BackendUnavailableError(f"{public_url(self.base_url)} is not an OpenAI-compatible server: its "
                                              f"answer to {what} is {kind} ({redact(str(e))})") from None
            if attempt < self.max_retries:
                # each wait capped, all of them bounded, every one said: a server that answers 503
                # forever must not hold the run silently for hours
                wait = retry_after if retry_after is not None else min(delay, RETRY_WAIT_CAP) * (1 + 0.25 * random.random())
                wait = min(wait, RETRY_TOTAL_CAP - waited)
                if wait <= 0:
                    raise BackendUnavailableError(f"{last} (gave up after {attempt + 1} tries and {waited:.0f} s of "
                                                  f"waiting, the most one request may wait)") from None
                print(f"kgrag: {_first_line(last)}; retry {attempt + 1} of "
                      f"{self.max_retries} in {wait:.1f} s{' (its Retry-After)' if retry_after is not None else ''}",
                      file=sys.stderr, flush=True)
                time.sleep(wait)
                waited += wait
                delay *= 2
                retry_after = None
        raise last

    def _get_json(self, path: str) -> Any:
        """A JSON document from the server root (`/props`, `/version`, ...); None on any failure."""
        import openai

        try:
            out = self._client.get(_server_root(self.base_url) + path, cast_to=object,
                                   options={"timeout": min(self.timeout, 10.0)})
        except (openai.OpenAIError, ValueError):
            return None
        return out if isinstance(out, dict) else None

    def _probe(self) -> dict[str, Any]:
        """The server's /models entry for our model (raises if the model is not served)."""
        limit = min(self.timeout, 15.0)
        listing = self._call(lambda: self._client.get("/models", cast_to=object, options={"timeout": limit}),
                             "GET /models", timeout=limit)
        entries = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(entries, list):  # an HTML page (a proxy, a web UI), a bare JSON list, ...
            raise BackendUnavailableError(f"{public_url(self.base_url)} is not an OpenAI-compatible server: GET /models "
                                          f"answered {str(listing)[:200]!r}, not {{\"data\": [...]}}")
        for entry in entries:
            if isinstance(entry, dict) and entry.get("id") == self.model:
                return entry
        ids = [e.get("id") for e in entries if isinstance(e, dict)]
        raise BackendUnavailableError(f"{self.base_url} does not serve {self.model!r}; it serves {ids}")

    def close(self) -> None:
        """Close the connection pool and stop a server this object started."""
        self._client.close()
        if self.managed is not None:
            self.managed.stop()

    # ---- requests ---------------------------------------------------------------------
    def check_params(self, params: SamplingParams) -> None:
        """Raise ConfigError if this server cannot honour `params` (call before a run starts)."""
        sf.build_body(self.flavor, params, chat=self.chat, version=self.server_version)

    def request_body(self, messages: Messages, params: SamplingParams) -> dict[str, Any]:
        """The exact JSON body sent for one request (a caveat of the server about it is warned once)."""
        for note in sf.caveats(self.flavor, params):
            if (self.base_url, note) not in _WARNED_CAVEATS:
                _WARNED_CAVEATS.add((self.base_url, note))
                warnings.warn(f"{public_url(self.base_url)}: {note}", stacklevel=3)
        body: dict[str, Any] = {"model": self.model}
        if self.chat:
            body["messages"] = messages
        else:
            body["prompt"] = flatten_messages(messages)
        body.update(sf.build_body(self.flavor, params, chat=self.chat, version=self.server_version))
        body.update(self.extra_body)
        return body

    def _complete(self, messages: Messages, params: SamplingParams) -> Completion:
        start = time.perf_counter()
        body = self.request_body(messages, params)
        if self.flavor == "ollama":
            return self._complete_ollama(body, start)
        fixed = {k: body.pop(k) for k in ("model", "messages" if self.chat else "prompt")}
        if self.chat:
            out = self._call(lambda: self._client.chat.completions.create(**fixed, extra_body=body), "POST /chat/completions")
        else:
            out = self._call(lambda: self._client.completions.create(**fixed, extra_body=body), "POST /completions")
        try:
            choice = out.choices[0]
            text = choice.message.content if self.chat else choice.text
        except (AttributeError, IndexError, TypeError):
            raise BackendUnavailableError(f"{public_url(self.base_url)} is not an OpenAI-compatible server: its answer "
                                          f"to a completion request is {redact(str(out)[:300])!r}") from None
        logprobs = None
        if params.logprobs:
            raw = choice.logprobs.model_dump() if choice.logprobs is not None else None
            logprobs = self._parse_logprobs(raw)
        usage = out.usage
        return Completion(
            text=self._text(text),
            prompt_tokens=_tokens(getattr(usage, "prompt_tokens", None)),
            completion_tokens=_tokens(getattr(usage, "completion_tokens", None)),
            seconds=time.perf_counter() - start,
            finish_reason=choice.finish_reason or "",
            logprobs=logprobs,
        )

    def _complete_ollama(self, body: dict[str, Any], start: float) -> Completion:
        """Ollama's native API, whose `options` carry every sampling knob."""
        path = "/api/chat" if self.chat else "/api/generate"
        url = _server_root(self.base_url) + path
        out = self._call(lambda: self._client.post(url, body=body, cast_to=object), f"POST {path}")
        try:
            text = out["message"]["content"] if self.chat else out["response"]
        except (KeyError, TypeError):
            raise BackendUnavailableError(f"{public_url(self.base_url)}: unexpected response {str(out)[:300]}") from None
        return Completion(text=self._text(text), prompt_tokens=_tokens(out.get("prompt_eval_count")),
                          completion_tokens=_tokens(out.get("eval_count")),
                          seconds=time.perf_counter() - start, finish_reason=str(out.get("done_reason") or ""))

    def _text(self, value: Any) -> str:
        """The reply's text; content that is no string (an int, a dict) fails this question, as
        unusable model output does, rather than passing as an answer ("42") or crashing the run."""
        if value is None:  # null content: the model wrote nothing
            return ""
        if not isinstance(value, str):
            raise LLMParseError(f"{public_url(self.base_url)} ({self.model}) replied with {type(value).__name__} "
                                f"content {str(value)[:200]!r}, not text")
        return value

    def _parse_logprobs(self, value: Any) -> list[TokenLogprob]:
        """The chat form ({"content": [{token, logprob, top_logprobs: [{token, logprob}]}]}) or
        the completions form ({tokens, token_logprobs, top_logprobs: [{token: logprob}]}).
        llama.cpp's `llama-server` answers /completions in the chat form, so /completions reads both."""
        where = f"{self.base_url} ({self.model})"
        try:
            if self.chat or (isinstance(value, dict) and value.get("tokens") is None
                             and isinstance(value.get("content"), list)):
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
        if len(batch) == 1 or self.max_in_flight == 1:
            return [self._complete(m, params) for m in batch]
        with ThreadPoolExecutor(max_workers=min(self.max_in_flight, len(batch))) as pool:
            return list(pool.map(lambda m: self._complete(m, params), batch))


def _tokens(value: Any) -> int:
    """A reported token count; a missing, non-integer, negative or absurd one counts as unreported (0, as
    when a server sends no `usage`), so a broken counter neither crashes a run nor fakes a cost."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT
    return value if ok else 0


MAX_TOKEN_COUNT = 2**31 - 1   # no request has more tokens; a larger count (10**30) would overflow SQLite


def _error_detail(e: Any) -> str:
    """The server's own words from an SDK status error (JSON `error.message`, or the raw text)."""
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:500]
        if body.get("detail"):
            return str(body["detail"])[:500]
    try:
        return e.response.text[:500]
    except Exception:  # noqa: BLE001 - best effort for a message
        return str(e)[:500]


RETRY_WAIT_CAP = 30.0     # seconds: the longest wait between two tries of one request (doubling stops there)
RETRY_TOTAL_CAP = 300.0   # seconds: all the waits of one request together, Retry-After included


def _retry_after(e: Any) -> float | None:
    """Seconds a 429/503's Retry-After header asks for (numeric form), else None."""
    try:
        value = e.response.headers.get("retry-after")
        secs = float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
    return secs if secs is not None and 0 <= secs < float("inf") else None


def _first_line(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."


class _PastDeadline(Exception):
    pass


def _within(fn: Any, seconds: float) -> Any:
    """`fn()` with a deadline on the whole call: httpx's timeouts are per read, so a server that
    trickles a byte every few seconds would never time out. The call runs in a daemon thread; past
    `seconds` (plus 1 s, so httpx's own time-outs speak first when they apply) it is abandoned."""
    import threading

    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:   # noqa: BLE001 - handed to the caller as it is
            box["error"] = exc

    t = threading.Thread(target=call, daemon=True, name="kgrag-request")
    t.start()
    t.join(seconds + 1.0)
    if t.is_alive():
        raise _PastDeadline()
    if "error" in box:
        raise box["error"]
    return box["value"]
