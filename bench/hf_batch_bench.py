"""Questions in flight on an in-process transformers (`hf:`) model: joined into batches, or one at a time.

    .venv/bin/python bench/hf_batch_bench.py [--spec hf:<folder|gguf|hub id>] [--requests 8] [--max-tokens 64]

The same distinct greedy requests are sent twice, uncached: first one after another (the naive
baseline: what every in-process request did before `llm.coalesce`), then from `--requests`
threads at once, which the backend joins into batches of up to its `batch_size`. Prints
generated tokens per second of each, the batches formed, and how many answers are identical
(batched arithmetic may change a token; docs/GPU.md). Default model: the embedded
Qwen2.5-Coder-0.5B GGUF, dequantized by transformers. Run nothing else on the CPU meanwhile.
"""

from __future__ import annotations

import argparse
import threading
import time

from kgrag_lib.llm import SamplingParams, load_llm

TOPICS = ["the Eiffel Tower", "photosynthesis", "the Roman Empire", "jazz music", "volcanoes",
          "the Moon landing", "honey bees", "the printing press", "glaciers", "chess openings",
          "the Silk Road", "black holes", "coral reefs", "the steam engine", "penguins", "origami"]


def _messages(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You answer in plain sentences."},
            {"role": "user", "content": f"Write three facts about {TOPICS[i % len(TOPICS)]}, one per line."}]


def add_model_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--spec", default=None, help="an hf: spec (default: the embedded 0.5B GGUF through transformers)")
    ap.add_argument("--dtype", default="auto", help="auto (the checkpoint's), float32, bfloat16, float16")


def load_model(args: argparse.Namespace, **kw):
    """The `hf:` model `add_model_args` names, uncached; says what it loaded and how long it took."""
    spec = args.spec
    if spec is None:
        from kgrag_lib.llm.presets import embedded_path

        spec = f"hf:{embedded_path()}"
    t = time.perf_counter()
    llm = load_llm(spec, cache=False, dtype=args.dtype, **kw)
    print(f"model {llm.name} ({llm.identity[:48]}...), dtype {llm.model.dtype}, device {llm.model.device}, "
          f"loaded in {time.perf_counter() - t:.1f} s")
    return llm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(ap)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    llm = load_model(args, batch_size=args.batch_size)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    prompts = [_messages(i) for i in range(args.requests)]

    before = llm.usage.snapshot()
    t = time.perf_counter()
    serial = [llm.generate(m, params) for m in prompts]
    serial_s = time.perf_counter() - t
    serial_tok = llm.usage.since(before).completion_tokens

    out: dict[int, str] = {}
    sizes_before = dict(llm.coalescer.batch_sizes)
    before = llm.usage.snapshot()
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, llm.generate(prompts[i], params)))
               for i in range(args.requests)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    joined_s = time.perf_counter() - t
    joined_tok = llm.usage.since(before).completion_tokens

    batches = {k: v - sizes_before.get(k, 0) for k, v in sorted(llm.coalescer.batch_sizes.items())
               if v != sizes_before.get(k, 0)}
    same = sum(out[i] == serial[i] for i in range(args.requests))
    print(f"{args.requests} requests, greedy, at most {args.max_tokens} new tokens each")
    print(f"  one at a time (baseline): {serial_s:7.1f} s  {serial_tok:5d} tokens  {serial_tok / serial_s:6.2f} tok/s")
    print(f"  {args.requests} threads, joined:     {joined_s:7.1f} s  {joined_tok:5d} tokens  "
          f"{joined_tok / joined_s:6.2f} tok/s  batches {batches}")
    print(f"  speed-up {serial_s / joined_s:.2f}x in wall time; identical answers {same} of {args.requests}")


if __name__ == "__main__":
    main()
