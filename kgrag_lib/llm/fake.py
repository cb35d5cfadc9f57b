"""A scripted stand-in LLM for unit tests of methods (never used by a real run)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

from .base import LLM, Completion, Messages, SamplingParams

Responder = Callable[[Messages, SamplingParams], str]


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
    ) -> None:
        if callable(responses):
            self._fn: Responder | None = responses
            self._queue: list[str] = []
        else:
            self._fn = None
            self._queue = list(responses)
            if not all(isinstance(r, str) for r in self._queue):
                raise TypeError("ScriptedLLM responses must be strings")
        if identity is None:
            basis = repr(self._queue) if self._fn is None else getattr(self._fn, "__qualname__", "fn")
            identity = "scripted:" + hashlib.sha256(basis.encode()).hexdigest()[:16]
        super().__init__(name, identity, cache=cache, default_params=default_params)
        self.requests: list[ScriptedRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def _complete(self, messages: Messages, params: SamplingParams) -> Completion:
        self.requests.append(ScriptedRequest([dict(m) for m in messages], params))
        if self._fn is not None:
            text = self._fn(messages, params)
        elif self._queue:
            text = self._queue.pop(0)
        else:
            raise RuntimeError(
                f"ScriptedLLM ran out of responses after {len(self.requests) - 1} requests; "
                f"last prompt: {self.requests[-1].prompt[:200]!r}"
            )
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        return Completion(text=text, prompt_tokens=prompt_tokens,
                          completion_tokens=len(text.split()), seconds=1e-6)
