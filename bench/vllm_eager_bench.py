"""What vLLM's torch.compile buys on a CPU: start time and decode speed of a managed `vllm-serve:`
server compiled (vLLM's default) and eager (`server.args: [--enforce-eager]`), one after the other.

The server is the test suite's: the embedded Qwen2.5-Coder-0.5B GGUF dequantized (the CPU build
from .venv-vllm), 4096 tokens of context. For each mode: seconds until the model is listed, then
greedy decoding of 160 tokens for one request, then for 4 requests in flight (a counting prompt, so
no request stops early). The compiled mode is the baseline. Measured on 2 cores (2026-12-07):
start 85 s compiled vs 33 s eager; 10.4 vs 9.9 tokens/s for one request; 36.2 vs 35.8 tokens/s for 4
in flight. So the tests whose servers answer only a few short requests start them eager.

    .venv/bin/python bench/vllm_eager_bench.py                 # both modes
    .venv/bin/python bench/vllm_eager_bench.py --modes eager
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kgrag_lib.llm import load_llm  # noqa: E402

SPEC = "vllm-serve:qwen2.5-coder-0.5b-q4?max_model_len=4096&cpu_kvcache_gib=2"
MODES = {"compiled": "", "eager": "&args=[--enforce-eager]"}
PROMPT = "Count from {i} upwards, one number per line, without stopping, at least 300 numbers."


def Q(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def measure(mode: str, tokens: int, log_dir: Path) -> dict:
    t0 = time.perf_counter()
    llm = load_llm(SPEC + MODES[mode], cache=False, log_dir=log_dir / mode)
    try:
        started = time.perf_counter() - t0
        llm.generate(Q(PROMPT.format(i=0)), max_tokens=8)   # the first request's one-off costs, off the clock
        c0, t1 = llm.usage.completion_tokens, time.perf_counter()
        llm.generate(Q(PROMPT.format(i=1)), max_tokens=tokens)
        c1, t2 = llm.usage.completion_tokens, time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: llm.generate(Q(PROMPT.format(i=i)), max_tokens=tokens), range(2, 6)))
        c2, t3 = llm.usage.completion_tokens, time.perf_counter()
    finally:
        llm.close()
    return {"mode": mode, "start_s": started, "one_tok_s": (c1 - c0) / (t2 - t1), "four_tok_s": (c2 - c1) / (t3 - t2),
            "tokens": (c1 - c0, c2 - c1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--tokens", type=int, default=160, help="tokens each request decodes")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/kgrag-vllm-eager-bench"))
    a = ap.parse_args()
    rows = [measure(m, a.tokens, a.log_dir) for m in a.modes]
    print(f"{'mode':9s} {'start s':>8s} {'1 request tok/s':>16s} {'4 in flight tok/s':>18s}  tokens")
    for r in rows:
        print(f"{r['mode']:9s} {r['start_s']:8.1f} {r['one_tok_s']:16.1f} {r['four_tok_s']:18.1f}  {r['tokens']}")
    base = next((r for r in rows if r["mode"] == "compiled"), None)
    for r in rows:
        if base and r is not base:
            print(f"{r['mode']} vs compiled: start {base['start_s'] - r['start_s']:+.1f} s saved; decode "
                  f"{r['one_tok_s'] / base['one_tok_s']:.2f}x (1 request), {r['four_tok_s'] / base['four_tok_s']:.2f}x "
                  "(4 in flight)")


if __name__ == "__main__":
    main()
