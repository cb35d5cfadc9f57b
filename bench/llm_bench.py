"""Throughput of the embedded CPU generator and what the cache and prefix reuse save.

    python bench/llm_bench.py [--spec qwen2.5-coder-0.5b-q4] [--repeats 3]

Prints prompt-evaluation and generation tokens/s, the latency of a cache hit against the
uncached call it replaces (the naive baseline), and prompt evaluation with KV-prefix reuse
against evaluating every prompt from scratch (our default, for reproducibility).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kgrag_lib.llm import load_llm

FILLER = ("Knowledge graphs store facts as subject, relation and object triples. "
          "Retrieval-augmented generation adds retrieved text to the prompt of a language model. ")


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="qwen2.5-coder-0.5b-q4")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    llm, load_s = _timed(lambda: load_llm(args.spec, cache=False))
    print(f"model {llm.name} ({llm.identity[:40]}...) loaded in {load_s:.2f}s, "
          f"threads={getattr(llm, 'n_threads', '?')}")

    # Prompt evaluation: a long prompt, one generated token.
    long_prompt = [{"role": "user", "content": FILLER * 20 + "\nSummarize in one word."}]
    rates = []
    for i in range(args.repeats):
        msgs = [{"role": "user", "content": f"[{i}] " + long_prompt[0]["content"]}]
        before = llm.usage.snapshot()
        _, secs = _timed(lambda: llm.generate(msgs, max_tokens=1))
        rates.append(llm.usage.since(before).prompt_tokens / secs)
    pt = llm.usage.prompt_tokens // args.repeats
    prompt_rate = statistics.median(rates)
    print(f"prompt eval: {pt} tokens, median {prompt_rate:.0f} tokens/s over {args.repeats} runs")

    # Generation: a short prompt, a long forced answer.
    gen_rates = []
    for i in range(args.repeats):
        msgs = [{"role": "user", "content": f"Count from {i + 1} to 200, numbers separated by spaces."}]
        before = llm.usage.snapshot()
        _, secs = _timed(lambda: llm.generate(msgs, max_tokens=128))
        d = llm.usage.since(before)
        gen_secs = secs - d.prompt_tokens / prompt_rate
        gen_rates.append(d.completion_tokens / gen_secs)
    print(f"generation: median {statistics.median(gen_rates):.1f} tokens/s (128-token answers)")

    # Cache hit vs the uncached call it replaces.
    with tempfile.TemporaryDirectory() as d:
        cached = load_llm(args.spec, cache_path=Path(d) / "c.sqlite")
        q = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
        _, miss = _timed(lambda: cached.generate(q, max_tokens=8))
        hits = [_timed(lambda: cached.generate(q, max_tokens=8))[1] for _ in range(20)]
        print(f"uncached call {miss * 1000:.0f} ms vs cache hit {statistics.median(hits) * 1000:.2f} ms "
              f"({miss / statistics.median(hits):.0f}x)")
        cached.close()

    # Shared-prefix prompts: fresh evaluation (default) vs KV prefix reuse.
    prefix = FILLER * 12
    qs = [[{"role": "user", "content": prefix + f"\nQuestion {i}: name a colour."}] for i in range(4)]
    for reuse in (False, True):
        m = load_llm(args.spec, cache=False, reuse_prefix=reuse)
        m.generate(qs[0], max_tokens=1)  # warm: first prompt always pays in full
        _, secs = _timed(lambda: [m.generate(x, max_tokens=1) for x in qs[1:]])
        label = "prefix reuse " if reuse else "fresh (default)"
        print(f"{label}: {len(qs) - 1} shared-prefix prompts in {secs:.2f}s")
        m.close()
    llm.close()


if __name__ == "__main__":
    main()
