"""Requests from several threads computed as one batch by an in-process model.

A transformers model in this process computes one call at a time, but one call may hold many
prompts, and on a GPU decoding is memory-bound: a batch of 8 prompts costs little more than one
(on a CPU without bf16 instructions only float32 gains, `bench/hf_batch_bench.py`). When questions or a text KG's chunks are in flight on several threads, the
thread that finds the model idle takes the waiting requests that share its sampling parameters
(oldest first, up to `size` prompts) and computes them together; the others wait for their share.
Nothing waits on a timer: a single thread gets exactly the plain serialized call.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass(eq=False)
class _Ticket:
    prompts: list[Any]
    params: Any
    result: list[Any] | None = None
    error: BaseException | None = None
    done: bool = False


class Coalescer:
    """`compute(prompts, params) -> completions` called for joined batches of concurrent requests."""

    def __init__(self, compute: Callable[[list[Any], Any], Sequence[Any]], size: int) -> None:
        if size < 1:
            raise ValueError(f"batch size: expected an integer >= 1, got {size!r}")
        self._compute = compute
        self.size = size
        self._cond = threading.Condition()
        self._queue: list[_Ticket] = []
        self._busy = False
        self.batch_sizes: Counter[int] = Counter()   # backend calls by prompts per call (benches, tests)

    def __call__(self, prompts: Sequence[Any], params: Any) -> list[Any]:
        me = _Ticket(list(prompts), params)
        with self._cond:
            self._queue.append(me)
        while True:
            with self._cond:
                while self._busy and not me.done:
                    self._cond.wait()
                if me.done:
                    break
                group = self._take()
                self._busy = True
            try:
                self._run(group)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
        if me.error is not None:
            raise me.error
        assert me.result is not None
        return me.result

    def _take(self) -> list[_Ticket]:
        """The oldest request and the later ones with equal parameters that fit beside it."""
        first = self._queue[0]
        group, count = [first], len(first.prompts)
        for t in self._queue[1:]:
            if t.params == first.params and count + len(t.prompts) <= self.size:
                group.append(t)
                count += len(t.prompts)
        for t in group:
            self._queue.remove(t)
        return group

    def _run(self, group: list[_Ticket]) -> None:
        prompts = [p for t in group for p in t.prompts]
        try:
            out = list(self._compute(prompts, group[0].params))
            if len(out) != len(prompts):
                raise RuntimeError(f"a batch of {len(prompts)} prompts came back with {len(out)} completions")
        except BaseException as exc:   # every request of the batch fails with it, and says so
            for t in group:
                t.error, t.done = exc, True
            return
        self.batch_sizes[len(prompts)] += 1
        at = 0
        for t in group:
            t.result, t.done = out[at: at + len(t.prompts)], True
            at += len(t.prompts)
