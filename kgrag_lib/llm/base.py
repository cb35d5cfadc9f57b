"""The one interface every generator backend implements, with caching and cost counting.

Methods talk to an `LLM` only through `generate` / `generate_batch`, so a paper's pipeline
runs unchanged on the embedded CPU model, a GPU transformers model or a vLLM server. The
base class owns everything that must behave identically across backends: argument checks,
the persistent call cache, stop-string truncation and the usage counters.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace as dc_replace
from typing import Any, Iterator, Protocol, Sequence

from ..errors import BackendUnavailableError, ConfigError, KgragError
from .coalesce import Coalescer

Messages = list[dict[str, str]]
KEY_VERSION = 1  # bump when the key recipe changes, so old cache rows cannot be mistaken for new
_ROLES = ("system", "user", "assistant")


class PromptTooLongError(KgragError, ValueError):
    """The prompt does not fit the model's context window (shorten it or raise n_ctx)."""


@dataclass(frozen=True)
class SamplingParams:
    """Every knob that changes a completion; all of them are part of the cache key.

    `temperature=0` means greedy decoding; `top_k=0` and `min_p=0` switch those filters off.
    `json_schema` (a JSON Schema object as a JSON string; "" = none) asks backends that can
    constrain decoding to it (llama.cpp grammars, OpenAI-style `response_format`) to do so;
    others ignore it, so callers still validate the output. An empty schema is left out of
    `to_dict`, so the cache keys of requests without one are those from before the knob existed.
    `logprobs` (0 = off) asks for the top-`logprobs` alternatives with their log-probabilities
    at every generated token (read them with `LLM.generate_logprobs`); it changes what is
    stored, so it is part of the key, and like `grammar` it is left out of the key when 0.
    """

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int = 42
    json_schema: str = ""
    grammar: str = ""
    logprobs: int = 0

    def __post_init__(self) -> None:
        stop = self.stop
        if isinstance(stop, str):
            stop = (stop,)
        stop = tuple(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ConfigError(f"SamplingParams.stop: expected non-empty strings, got {stop!r}")
        object.__setattr__(self, "stop", stop)
        checks = [
            ("max_tokens", isinstance(self.max_tokens, int) and self.max_tokens > 0, "an int > 0"),
            ("temperature", _num(self.temperature) and self.temperature >= 0, "a number >= 0"),
            ("top_p", _num(self.top_p) and 0 < self.top_p <= 1, "a number in (0, 1]"),
            ("top_k", isinstance(self.top_k, int) and self.top_k >= 0, "an int >= 0 (0 = off)"),
            ("min_p", _num(self.min_p) and 0 <= self.min_p <= 1, "a number in [0, 1]"),
            ("repeat_penalty", _num(self.repeat_penalty) and self.repeat_penalty > 0, "a number > 0"),
            ("seed", isinstance(self.seed, int) and not isinstance(self.seed, bool), "an int"),
            ("logprobs", isinstance(self.logprobs, int) and not isinstance(self.logprobs, bool)
             and 0 <= self.logprobs <= MAX_LOGPROBS, f"an int in [0, {MAX_LOGPROBS}] (0 = off)"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ConfigError(
                    f"SamplingParams.{name}: expected {expected}, got {getattr(self, name)!r}"
                )
        _check_schema(self.json_schema)
        if not isinstance(self.grammar, str):
            raise ConfigError(f"SamplingParams.grammar: expected a GBNF grammar as a string, or \"\" for none, "
                              f"got {type(self.grammar).__name__}")
        if self.grammar and self.json_schema:
            raise ConfigError("SamplingParams: give json_schema or grammar, not both")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **kw: Any) -> "SamplingParams":
        """A copy with some fields changed; an unknown field name is a ConfigError."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(kw) - known)
        if unknown:
            raise ConfigError(
                f"unknown sampling parameter(s) {unknown}; accepted: {sorted(known)}"
            )
        return dc_replace(self, **kw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        for knob in ("json_schema", "grammar", "logprobs"):
            if not d[knob]:
                del d[knob]
        return d


MAX_LOGPROBS = 20  # the OpenAI API's top_logprobs limit (and vLLM's default max_logprobs)


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_schema(schema: Any) -> None:
    expected = 'a JSON Schema object as a JSON string (e.g. \'{"type": "object"}\'), or "" for none'
    if not isinstance(schema, str):
        raise ConfigError(f"SamplingParams.json_schema: expected {expected}, got {type(schema).__name__}")
    if not schema:
        return
    try:
        value = json.loads(schema)
    except ValueError as exc:
        raise ConfigError(f"SamplingParams.json_schema: expected {expected}; not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"SamplingParams.json_schema: expected {expected}, got a JSON {type(value).__name__}")


@dataclass
class Usage:
    """Cost counters. Fresh work and the work a cache hit replays are kept apart.

    `calls`, `prompt_tokens`, `completion_tokens`, `seconds` count real backend work in this
    process. `cached_*` add up what the cache hits stood for when they were first computed,
    so the cost of a method per question can be reported even from a warm cache.
    """

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    cached_seconds: float = 0.0

    @property
    def requests(self) -> int:
        """Every generate request served, fresh or from the cache."""
        return self.calls + self.cache_hits

    @property
    def total_prompt_tokens(self) -> int:
        return self.prompt_tokens + self.cached_prompt_tokens

    @property
    def total_completion_tokens(self) -> int:
        return self.completion_tokens + self.cached_completion_tokens

    def snapshot(self) -> "Usage":
        return Usage(**asdict(self))

    def since(self, snapshot: "Usage") -> "Usage":
        """The counts accumulated after `snapshot` was taken (per-question cost)."""
        return Usage(**{k: v - getattr(snapshot, k) for k, v in asdict(self).items()})

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def to_dict(self) -> dict[str, float]:
        d: dict[str, float] = asdict(self)
        d["requests"] = self.requests
        d["total_prompt_tokens"] = self.total_prompt_tokens
        d["total_completion_tokens"] = self.total_completion_tokens
        return d


@dataclass
class Meter:
    """What one unit of work (a question, a chunk) asked of one LLM: its request ids and its cost.

    Meters live in a context variable, so with many questions in flight on threads each
    question's counts stay its own (the global `LLM.usage` counts everything). Work a question
    fans out to further threads joins its meter when it runs through `concurrency.parallel_map`
    (which copies the context).
    """

    keys: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


# The active meters of this context: (id of the LLM, meter) pairs, innermost last.
_METERS: contextvars.ContextVar[tuple[tuple[int, Meter], ...]] = contextvars.ContextVar("kgrag_llm_meters",
                                                                                       default=())


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its text, its log-probability and the top alternatives at its
    position (token text, log-probability), best first, as the backend reported them.

    Log-probabilities are those of the model's own distribution (log-softmax of the logits)
    wherever the backend lets us read them. Token texts keep special tokens (Self-RAG's
    reflection tokens are special tokens of its tokenizer).
    """

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()

    def top_dict(self) -> dict[str, float]:
        """The alternatives as {token text: log-probability} (the best one when texts repeat)."""
        out: dict[str, float] = {}
        for tok, lp in self.top:
            if tok not in out or lp > out[tok]:
                out[tok] = lp
        return out

    def to_json(self) -> list[Any]:
        return [self.token, self.logprob, [[t, lp] for t, lp in self.top]]

    @classmethod
    def from_json(cls, value: Any) -> "TokenLogprob":
        token, logprob, top = value
        return cls(str(token), float(logprob), tuple((str(t), float(lp)) for t, lp in top))


def top_k_alternatives(pairs: Sequence[tuple[str, float]], k: int) -> tuple[tuple[str, float], ...]:
    """The `k` most probable (token, log-probability) pairs, best first (ties keep their order)."""
    return tuple(sorted(pairs, key=lambda p: -p[1])[:k])


@dataclass(frozen=True)
class Generation:
    """A completion with its per-token log-probabilities (`LLM.generate_logprobs`)."""

    text: str
    tokens: tuple[TokenLogprob, ...] = ()

    @property
    def logprob(self) -> float:
        """Sum of the generated tokens' log-probabilities (log p of the whole sequence)."""
        return float(sum(t.logprob for t in self.tokens))


@dataclass
class Completion:
    """What a backend returns for one request, before the base class post-processes it.

    `logprobs` is filled when the request asked for them (`SamplingParams.logprobs > 0`);
    a backend that cannot read them leaves it None and the base class refuses the request.
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float = 0.0
    finish_reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    logprobs: list[TokenLogprob] | None = None


def truncate_tokens(tokens: Sequence[TokenLogprob], text: str) -> tuple[TokenLogprob, ...]:
    """The tokens that begin inside `text` (a completion cut at a stop string): token texts are
    laid end to end and those starting at or after the cut are dropped."""
    kept: list[TokenLogprob] = []
    pos = 0
    for t in tokens:
        if pos >= len(text):
            break
        kept.append(t)
        pos += len(t.token)
    return tuple(kept)


def raw_prompt(text: str) -> Messages:
    """A plain prompt as messages: on a model loaded with `chat=False` (base models, Self-RAG)
    `flatten_messages` turns it back into exactly `text`, so no chat template is applied."""
    if not isinstance(text, str) or not text:
        raise ConfigError(f"raw_prompt: expected a non-empty string, got {text!r:.80}")
    return [{"role": "user", "content": text}]


def truncate_at_stop(text: str, stop: Sequence[str]) -> str:
    """Cut `text` at the earliest stop string (backends differ in whether they strip it)."""
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i != -1 and i < cut:
            cut = i
    return text[:cut]


def check_messages(messages: Any) -> Messages:
    """Validate chat messages early, with a message that says what was expected."""
    expected = "a non-empty list of {'role': 'system'|'user'|'assistant', 'content': str} dicts"
    if isinstance(messages, str) or not isinstance(messages, (list, tuple)) or not messages:
        raise ConfigError(f"messages: expected {expected}; got {type(messages).__name__}")
    out: Messages = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) - {"role", "content"} or "role" not in m or "content" not in m:
            raise ConfigError(f"messages[{i}]: expected {expected}; got {m!r:.120}")
        if m["role"] not in _ROLES or not isinstance(m["content"], str):
            raise ConfigError(f"messages[{i}]: expected {expected}; got {m!r:.120}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def fold_system(messages: Messages) -> Messages:
    """Merge system messages into the first user turn, for templates that reject a system role
    (Mistral-7B-Instruct-v0.2)."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    for m in rest:
        if m["role"] == "user":
            m["content"] = "\n\n".join(system + [m["content"]])
            return rest
    return [{"role": "user", "content": "\n\n".join(system)}] + rest


def flatten_messages(messages: Messages) -> str:
    """A plain-text prompt for base (non-chat) models: the turns' contents, blank-line separated."""
    return "\n\n".join(m["content"] for m in messages)


class Generator(Protocol):
    """What a method's stages need from a model: an `LLM`, or a test double with `generate`."""

    def generate(self, messages: Messages, params: SamplingParams | None = None, **kw: Any) -> str: ...


class CallCache(Protocol):
    """What an LLM needs of its call cache (`llm.cache.LLMCache` is the one implementation)."""

    def make_key(self, backend: str, identity: str, messages: Messages, params: SamplingParams) -> str: ...

    def get(self, key: str, *, logprobs: bool = False) -> Any: ...

    def put(self, key: str, text: str, **row: Any) -> None: ...


class LLM:
    """Base class for every backend.

    Subclasses set `backend`, call `super().__init__` with the model's exact identity and
    implement `_complete` (and optionally `_complete_batch`). Everything else is shared.
    `name` is the preset or spec the user asked for; `identity` pins the exact weights.

    Any number of threads may call `generate` at once (questions in flight). Identical requests
    in flight together are computed once: the later callers wait for the first one's answer,
    so a shared cache's de-duplication holds under concurrency. A backend that computes one
    request at a time in this process (llama.cpp, transformers) leaves `concurrent_requests`
    False and its calls are serialized; a server backend sets it True. One whose single call takes
    many prompts (transformers) sets `coalesce_size`: concurrent requests with equal sampling
    parameters are then joined into batches of up to that many prompts (`coalesce.Coalescer`).
    """

    backend: str = "base"
    concurrent_requests: bool = False   # may `_complete_batch` run on several threads at once?
    default_concurrency: int = 1        # questions in flight when the run does not say
    coalesce_size: int = 0              # > 1: concurrent requests are computed together, this many at most

    def __init__(
        self,
        name: str,
        identity: str,
        *,
        cache: CallCache | None = None,
        default_params: SamplingParams | None = None,
        fold_system_prompt: bool = False,
        n_ctx: int | None = None,
    ) -> None:
        self.name = name
        self.identity = identity
        self.cache = cache
        self.default_params = default_params or SamplingParams()
        self.fold_system_prompt = fold_system_prompt
        self.n_ctx = n_ctx
        self.usage = Usage()
        self._lock = threading.Lock()
        self._backend_lock = threading.Lock()
        self._inflight: dict[str, Future] = {}
        self._coalescer: Coalescer | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, identity={self.identity!r})"

    # ---- public API -------------------------------------------------------------------
    @contextmanager
    def meter(self, into: Meter | None = None) -> Iterator[Meter]:
        """Count what the work inside the block asks of this LLM (request ids and usage), in a
        new meter or added to `into` (work done for one question in several pieces).

        Meters are per context (thread), so each question in flight gets its own counts; the
        runner stores them per question, so how many requests a grid of runs shares (distinct /
        independent) is counted from the result files, even after a resume.
        """
        m = into if into is not None else Meter()
        token = _METERS.set(_METERS.get() + ((id(self), m),))
        try:
            yield m
        finally:
            _METERS.reset(token)

    @contextmanager
    def recording(self) -> Iterator[list[str]]:
        """The key of every request served inside the block, cached or not (see `meter`)."""
        with self.meter() as m:
            yield m.keys

    def _meters(self) -> list[Meter]:
        return [m for owner, m in _METERS.get() if owner == id(self)]

    def _count(self, meters: list[Meter], **inc: float) -> None:
        with self._lock:
            for u in [self.usage] + [m.usage for m in meters]:
                for k, v in inc.items():
                    setattr(u, k, getattr(u, k) + v)

    def generate(
        self, messages: Messages, params: SamplingParams | None = None, **overrides: Any
    ) -> str:
        """One chat completion (served from the cache when this exact request was seen)."""
        return self.generate_batch([messages], params, **overrides)[0]

    def generate_batch(
        self,
        list_of_messages: Sequence[Messages],
        params: SamplingParams | None = None,
        **overrides: Any,
    ) -> list[str]:
        """Several completions with the same sampling parameters; cache misses go to the
        backend together so batching backends (HF, vLLM) can use the GPU well."""
        p = self._resolve(params, overrides)
        return [g.text for g in self._serve(list_of_messages, p)]

    def generate_logprobs(
        self, messages: Messages, params: SamplingParams | None = None, **overrides: Any
    ) -> Generation:
        """One completion with the top-`logprobs` alternatives of every generated token.

        `logprobs` (in `params` or as a keyword, 1..20) must be set: it is part of the cache
        key, and a cache hit returns the stored log-probabilities. For a base model loaded with
        `chat=False`, pass `raw_prompt(text)` to send `text` exactly as written.
        """
        return self.generate_logprobs_batch([messages], params, **overrides)[0]

    def generate_logprobs_batch(
        self,
        list_of_messages: Sequence[Messages],
        params: SamplingParams | None = None,
        **overrides: Any,
    ) -> list[Generation]:
        """`generate_logprobs` for several requests (batched like `generate_batch`)."""
        p = self._resolve(params, overrides)
        if p.logprobs < 1:
            raise ConfigError(f"generate_logprobs: set logprobs to the number of alternatives wanted per "
                              f"token (1..{MAX_LOGPROBS}), got {p.logprobs}")
        return self._serve(list_of_messages, p)

    def key_identity(self, params: SamplingParams) -> str:
        """The identity in the cache key of a request with `params`: the model's, unless this backend's
        answers to such requests changed meaning (hf's grammars, once ignored, now enforced)."""
        return self.identity

    def missing_tokens(self, tokens: Sequence[str]) -> list[str] | None:
        """Which of `tokens` are not single entries of the model's vocabulary, or None when
        this backend cannot inspect its vocabulary (a remote server). Methods that read the
        probability of special tokens (Self-RAG's reflection tokens) check this first."""
        return None

    def _serve(self, list_of_messages: Sequence[Messages], p: SamplingParams) -> list[Generation]:
        want_lp = p.logprobs > 0
        meters = self._meters()
        prepared = [self._prepare(m) for m in list_of_messages]
        keys = [cache_key(self.backend, self.key_identity(p), msgs, p) for msgs in prepared]
        if meters:
            with self._lock:
                for m in meters:
                    m.keys.extend(k[:16] for k in keys)
        results: list[Generation | None] = [None] * len(prepared)
        todo: list[int] = []
        for i, key in enumerate(keys):
            hit = self.cache.get(key, logprobs=want_lp) if self.cache is not None else None
            if hit is None:
                todo.append(i)
                continue
            results[i] = Generation(hit.text, tuple(hit.logprobs or ()))
            self._count(meters, cache_hits=1, cached_prompt_tokens=hit.prompt_tokens,
                        cached_completion_tokens=hit.completion_tokens, cached_seconds=hit.seconds)
        if not todo:
            return [r if r is not None else Generation("") for r in results]
        # Each distinct missing request is computed by exactly one caller: the first to claim it
        # (here or on another thread); the others wait for its answer.
        mine: dict[str, tuple[int, Future]] = {}
        theirs: dict[str, Future] = {}
        with self._lock:
            for i in todo:
                k = keys[i]
                if k in mine or k in theirs:
                    continue
                if k in self._inflight:
                    theirs[k] = self._inflight[k]
                else:
                    fut: Future = Future()
                    self._inflight[k] = fut
                    mine[k] = (i, fut)
        done: dict[str, _Served] = {}
        if mine:
            try:
                done.update(self._compute([i for i, _ in mine.values()], prepared, keys, p, want_lp, meters))
            except BaseException as exc:
                with self._lock:
                    for k, (_, fut) in mine.items():
                        self._inflight.pop(k, None)
                        fut.set_exception(exc)
                raise
            with self._lock:
                for k, (_, fut) in mine.items():
                    self._inflight.pop(k, None)
                    fut.set_result(done[k])
        for k, fut in theirs.items():
            served = fut.result()
            done[k] = served
            self._count(meters, cache_hits=1, cached_prompt_tokens=served.prompt_tokens,
                        cached_completion_tokens=served.completion_tokens, cached_seconds=served.seconds)
        for i in todo:
            results[i] = done[keys[i]].generation
        return [r if r is not None else Generation("") for r in results]

    @property
    def coalescer(self) -> Coalescer:
        """The joiner of concurrent requests (`coalesce_size` > 1), made on first use."""
        with self._lock:
            if self._coalescer is None:
                self._coalescer = Coalescer(self._serialized_batch, self.coalesce_size)
            return self._coalescer

    def check_fits(self, messages: Messages, params: SamplingParams) -> None:
        """Raise `PromptTooLongError` for a prompt the model cannot take; a backend that batches
        requests together checks here, before they are joined (the others check as they compute)."""

    def _serialized_batch(self, batch: list[Messages], p: SamplingParams) -> list[Completion]:
        with self._backend_lock:
            return self._complete_batch(batch, p)

    def _compute(self, order: list[int], prepared: list[Messages], keys: list[str], p: SamplingParams,
                 want_lp: bool, meters: list[Meter]) -> dict[str, "_Served"]:
        """Send the requests at `order` to the backend, count and cache them."""
        start = time.perf_counter()
        batch = [prepared[i] for i in order]
        for m in batch:   # before any joining: a prompt that cannot fit fails its own request only
            self.check_fits(m, p)
        if self.concurrent_requests:
            completions = self._complete_batch(batch, p)
        elif self.coalesce_size > 1:
            completions = self.coalescer(batch, p)
        else:
            completions = self._serialized_batch(batch, p)
        elapsed = time.perf_counter() - start
        if len(completions) != len(order):
            raise RuntimeError(
                f"{type(self).__name__}._complete_batch returned {len(completions)} "
                f"completions for {len(order)} requests"
            )
        out: dict[str, _Served] = {}
        for i, c in zip(order, completions):
            text = truncate_at_stop(c.text, p.stop)
            tokens: tuple[TokenLogprob, ...] = ()
            if want_lp:
                if c.logprobs is None:
                    raise BackendUnavailableError(
                        f"{self.name} ({self.backend} backend) returned no token log-probabilities; "
                        f"this backend or server cannot provide them (logprobs={p.logprobs} was asked)")
                tokens = tuple(c.logprobs) if text == c.text else truncate_tokens(c.logprobs, text)
            secs = c.seconds if c.seconds > 0 else elapsed / len(order)
            self._count(meters, calls=1, prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
                        seconds=secs)
            if self.cache is not None:
                self.cache.put(
                    keys[i], text,
                    prompt_tokens=c.prompt_tokens,
                    completion_tokens=c.completion_tokens,
                    seconds=secs,
                    backend=self.backend,
                    identity=self.key_identity(p),
                    messages=prepared[i],
                    params=p,
                    logprobs=list(tokens) if want_lp else None,
                )
            out[keys[i]] = _Served(Generation(text, tokens), c.prompt_tokens, c.completion_tokens, secs)
        return out

    def describe(self) -> dict[str, Any]:
        """What a run manifest records about this model beyond its identity: the backend, and for
        a server its flavour, version, how both were found, and a managed server's log."""
        out: dict[str, Any] = {"backend": self.backend, "identity": self.identity}   # the spec may hold a token: not here
        for key in ("flavor", "flavor_source", "identity_source", "server_version"):
            value = getattr(self, key, None)
            if value is not None:
                out[key] = value
        managed = getattr(self, "managed", None)
        if managed is not None and getattr(managed, "log_path", None):
            out["server_log"] = str(managed.log_path)
        return out

    def count_tokens(self, text: str) -> int:
        """Tokens in `text` for this model. Backends with a tokenizer override this; the
        base class can only estimate (about 4 characters per token)."""
        return max(1, len(text) // 4)

    def close(self) -> None:
        """Release backend resources (model memory, connections)."""

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- backend hooks ----------------------------------------------------------------
    def _complete(self, messages: Messages, params: SamplingParams) -> Completion:
        raise NotImplementedError

    def _complete_batch(self, batch: list[Messages], params: SamplingParams) -> list[Completion]:
        """Default: one request after another (llama.cpp has no useful batching on CPU)."""
        out = []
        for msgs in batch:
            start = time.perf_counter()
            c = self._complete(msgs, params)
            if c.seconds <= 0:
                c.seconds = time.perf_counter() - start
            out.append(c)
        return out

    # ---- helpers ----------------------------------------------------------------------
    def _resolve(self, params: SamplingParams | None, overrides: dict[str, Any]) -> SamplingParams:
        if params is not None and not isinstance(params, SamplingParams):
            raise ConfigError(f"params: expected SamplingParams or None, got {type(params).__name__}")
        p = params or self.default_params
        return p.replace(**overrides) if overrides else p

    def _prepare(self, messages: Messages) -> Messages:
        msgs = check_messages(messages)
        return fold_system(msgs) if self.fold_system_prompt else msgs


def request_key(backend: str, identity: str, messages: Messages, params: SamplingParams) -> str:
    """A short stable id of one exact request (the first 16 hex digits of the cache key)."""
    return cache_key(backend, identity, messages, params)[:16]


def canonical_request(
    backend: str, identity: str, messages: Messages, params: SamplingParams
) -> str:
    """The canonical JSON the key hashes: everything that can change the completion."""
    payload = {
        "v": KEY_VERSION,
        "backend": backend,
        "identity": identity,
        "messages": messages,
        "params": params.to_dict(),
    }
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def cache_key(backend: str, identity: str, messages: Messages, params: SamplingParams) -> str:
    """The key of one exact request in the call cache: sha256 of `canonical_request`."""
    raw = canonical_request(backend, identity, messages, params)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class _Served:
    """One computed request, as handed to the callers that waited for it."""

    generation: Generation
    prompt_tokens: int
    completion_tokens: int
    seconds: float
