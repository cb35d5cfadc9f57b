"""A scripted stand-in LLM for unit tests of methods (never used by a real run)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, Union

from .base import LLM, Completion, Generation, Messages, SamplingParams, top_k_alternatives

Scripted = Union[str, Generation]
Responder = Callable[[Messages, SamplingParams], Scripted]


@dataclass
class ScriptedRequest:
    messages: Messages
    params: SamplingParams

    @property
    def prompt(self) -> str:
        """All message contents joined, for easy `in` checks in tests."""
        return "\n".join(m["content"] for m in self.messages)


class ScriptedLLM(LLM):
    """Returns canned responses in order, or whatever a function computes from the request.

    Every request that reaches the backend (cache misses) is recorded in `.requests`.
    Token counts are whitespace word counts, so usage accounting can be tested too.

    A response may be a `Generation` (text plus scripted per-token log-probabilities): a
    request with `logprobs=k` gets its tokens with each position's alternatives cut to the top
    k, as a real backend would; a plain string answers such a request with an error, like a
    backend without log-probabilities. `vocabulary` (optional) is what `missing_tokens` checks.
    """

    backend = "scripted"

    def __init__(
        self,
        responses: list[str] | Responder,
        *,
        name: str = "scripted",
        identity: str | None = None,
        cache=None,
        default_params: SamplingParams | None = None,
        vocabulary: Iterable[str] | None = None,
    ) -> None:
        if callable(responses):
            self._fn: Responder | None = responses
            self._queue: list[Scripted] = []
        else:
            self._fn = None
            self._queue = list(responses)
            if not all(isinstance(r, (str, Generation)) for r in self._queue):
                raise TypeError("ScriptedLLM responses must be strings or Generation objects")
        self.vocabulary = None if vocabulary is None else frozenset(vocabulary)
        if identity is None:
            basis = repr(self._queue) if self._fn is None else getattr(self._fn, "__qualname__", "fn")
            identity = "scripted:" + hashlib.sha256(basis.encode()).hexdigest()[:16]
        super().__init__(name, identity, cache=cache, default_params=default_params)
        self.requests: list[ScriptedRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def missing_tokens(self, tokens: Sequence[str]) -> list[str] | None:
        if self.vocabulary is None:
            return None
        return [t for t in tokens if t not in self.vocabulary]

    def _complete(self, messages: Messages, params: SamplingParams) -> Completion:
        self.requests.append(ScriptedRequest([dict(m) for m in messages], params))
        if self._fn is not None:
            out = self._fn(messages, params)
        elif self._queue:
            out = self._queue.pop(0)
        else:
            raise RuntimeError(
                f"ScriptedLLM ran out of responses after {len(self.requests) - 1} requests; "
                f"last prompt: {self.requests[-1].prompt[:200]!r}"
            )
        logprobs = None
        if isinstance(out, Generation):
            text = out.text
            if params.logprobs > 0:
                logprobs = [type(t)(t.token, t.logprob, top_k_alternatives(t.top, params.logprobs))
                            for t in out.tokens]
        else:
            text = out
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        n_tokens = len(out.tokens) if isinstance(out, Generation) and out.tokens else len(text.split())
        return Completion(text=text, prompt_tokens=prompt_tokens,
                          completion_tokens=n_tokens, seconds=1e-6, logprobs=logprobs)
