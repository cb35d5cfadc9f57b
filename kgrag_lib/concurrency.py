"""Independent pieces of work in flight at once, for backends that serve many requests together.

A continuous-batching server (vLLM, SGLang, llama.cpp `llama-server --parallel N`) is only
fast when many requests reach it together, so wherever a loop's items do not depend on each
other (questions of a run, chunks of a text KG, decodings of a DPO pair) they run on a thread
pool. Each task runs in a copy of the caller's context, so the LLM meters of the caller (the
question being answered, see `LLM.meter`) count the requests its tasks make. Results come back
in input order; at `workers=1` everything runs inline, in order, exactly as a plain loop.
"""

from __future__ import annotations

import contextvars
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from .errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")


def check_workers(value: Any, name: str = "concurrency") -> int:
    """An int >= 1, or a ConfigError naming the setting."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: expected an integer >= 1 (requests or questions in flight), got {value!r}")
    return value


def fan_out(llm: Any) -> int:
    """Requests one step may send at once (a text KG's chunks, DPO's decodings): the backend's
    `max_in_flight` (the run's --max-in-flight, else its --concurrency, else the server default);
    1 for an in-process model, which computes one request at a time."""
    return int(getattr(llm, "max_in_flight", 1) or 1)


def in_context(fn: Callable[..., R]) -> Callable[..., R]:
    """`fn` bound to a copy of the current context (meters follow work onto other threads)."""
    ctx = contextvars.copy_context()
    return lambda *a, **kw: ctx.run(fn, *a, **kw)


def parallel_map(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    """`[fn(x) for x in items]` with up to `workers` calls in flight; the first error is raised
    after the calls already running have finished (nothing queued behind it starts)."""
    items = list(items)
    workers = check_workers(workers, "workers")
    if workers == 1 or len(items) <= 1:
        return [fn(x) for x in items]
    return [r for _, r in sorted(as_they_finish(fn, items, workers), key=lambda p: p[0])]


def as_they_finish(fn: Callable[[T], R], items: Sequence[T], workers: int) -> Iterator[tuple[int, R]]:
    """(index, fn(items[index])) pairs as each call finishes, with up to `workers` in flight.

    The caller consumes results as they come (the runner writes each question's line at once).
    On an error in a call, or when the consumer stops early, queued calls are cancelled, the
    running ones are waited for, and the error propagates.
    """
    workers = check_workers(workers, "workers")
    if workers == 1:
        for i, x in enumerate(items):
            yield i, fn(x)
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kgrag")
    futures: dict[Future, int] = {}
    try:
        for i, x in enumerate(items):
            futures[pool.submit(in_context(fn), x)] = i
        for f in as_completed(futures):
            yield futures[f], f.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
