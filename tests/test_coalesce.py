"""Joining concurrent requests into batches (`llm.coalesce`): who gets which answer, which
requests may share a batch, and what an error does."""

from __future__ import annotations

import random
import threading
import time

import pytest

from kgrag_lib.llm.coalesce import Coalescer


class Backend:
    """Answers each prompt with (prompt, params); records the batches it was given."""

    def __init__(self, delay: float = 0.01, fail_on: str | None = None) -> None:
        self.calls: list[tuple[list[str], str]] = []
        self.delay, self.fail_on = delay, fail_on
        self.inside = 0
        self.max_inside = 0
        self.lock = threading.Lock()

    def __call__(self, prompts, params):
        with self.lock:
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
        try:
            time.sleep(self.delay)
            self.calls.append((list(prompts), params))
            if self.fail_on in prompts:
                raise ValueError(f"cannot do {self.fail_on}")
            return [(p, params) for p in prompts]
        finally:
            with self.lock:
                self.inside -= 1


def _hammer(joiner, jobs, workers=16):
    out, errors = {}, {}
    def work(i):
        prompts, params = jobs[i]
        try:
            out[i] = joiner(prompts, params)
        except Exception as e:   # noqa: BLE001
            errors[i] = e
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out, errors


def test_every_thread_gets_its_own_answers_and_batches_respect_size_and_params():
    rng = random.Random(0)
    backend = Backend()
    joiner = Coalescer(backend, size=5)
    jobs = [([f"q{i}.{k}" for k in range(rng.randint(1, 3))], rng.choice(["greedy", "t=0.7"])) for i in range(60)]
    out, errors = _hammer(joiner, jobs)
    assert not errors
    for i, (prompts, params) in enumerate(jobs):
        assert out[i] == [(p, params) for p in prompts]
    assert backend.max_inside == 1                        # the model computes one batch at a time
    assert all(len(set(ps)) == len(ps) <= 5 for ps, _ in backend.calls)
    assert sum(len(ps) for ps, _ in backend.calls) == sum(len(p) for p, _ in jobs)
    assert max(len(ps) for ps, _ in backend.calls) > 3    # concurrency did join requests
    assert sum(joiner.batch_sizes.values()) == len(backend.calls)


def test_a_request_larger_than_the_size_goes_alone_and_a_single_thread_is_a_plain_call():
    backend = Backend(delay=0)
    joiner = Coalescer(backend, size=2)
    assert joiner(["a", "b", "c"], "p") == [("a", "p"), ("b", "p"), ("c", "p")]
    assert joiner(["d"], "p") == [("d", "p")]
    assert backend.calls == [(["a", "b", "c"], "p"), (["d"], "p")]


def test_an_error_fails_each_request_of_its_batch_and_the_next_batch_still_runs():
    backend = Backend(delay=0.05, fail_on="bad")
    joiner = Coalescer(backend, size=8)
    jobs = [(["bad"], "p")] + [([f"ok{i}"], "p") for i in range(7)]
    out, errors = _hammer(joiner, jobs, workers=8)
    failed_batches = [ps for ps, _ in backend.calls if "bad" in ps]
    assert len(failed_batches) == 1
    assert set(errors) == {jobs.index(([p], "p")) for p in failed_batches[0]}
    assert all("cannot do bad" in str(e) for e in errors.values())
    assert all(out[i] == [(jobs[i][0][0], "p")] for i in out)
    assert joiner(["after"], "p") == [("after", "p")]


def test_a_wrong_number_of_completions_is_an_error_not_a_shifted_answer():
    joiner = Coalescer(lambda prompts, params: ["only one"], size=4)
    with pytest.raises(RuntimeError, match="2 prompts came back with 1"):
        joiner(["a", "b"], "p")
    with pytest.raises(ValueError, match="batch size"):
        Coalescer(lambda p, q: p, size=0)
