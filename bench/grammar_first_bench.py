"""Grammar-first greedy decoding (`llm/backends/grammar_first.py`) against llama-cpp-python's own
chain, on real cached requests: are the outputs byte-identical, and how much faster is it?

Reads greedy requests with a JSON schema or a grammar from an LLM cache file (a study's
`.cache/llm_cache.sqlite`), answers each with the fast path, compares it with the cached answer
(made by the library's chain), and answers the first --baseline-n again with the library's chain
in this same run for the timing.

    .venv/bin/python bench/grammar_first_bench.py --cache .cache/llm_cache.sqlite --n 20 --baseline-n 5
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True, help="an LLM cache file with constrained greedy requests")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-q4", help="the model that answered them")
    ap.add_argument("--n", type=int, default=20, help="requests replayed with the fast path")
    ap.add_argument("--baseline-n", type=int, default=5, help="of those, replayed with the library's chain too")
    ap.add_argument("--max-tokens", type=int, default=0, help="skip requests with a larger max_tokens (0: none)")
    args = ap.parse_args()

    from kgrag_lib.llm import load_llm
    from kgrag_lib.llm.backends import grammar_first
    from kgrag_lib.llm.base import SamplingParams

    llm = load_llm(args.model, cache_path=None)
    backend = llm
    inner = backend._llm
    fast_init = inner._init_sampler
    slow_init = getattr(inner, "_library_init_sampler", None)
    if slow_init is None:
        print("the backend did not install grammar-first decoding; nothing to compare", file=sys.stderr)
        return 2
    conn = sqlite3.connect(f"file:{Path(args.cache).resolve()}?mode=ro", uri=True)
    rows = conn.execute("SELECT identity, request, response FROM calls ORDER BY created, key").fetchall()
    picked = []
    for identity, request, response in rows:
        req = json.loads(request)
        p = req.get("params") or {}
        if identity != llm.identity or p.get("temperature", 0) != 0 or not (p.get("json_schema") or p.get("grammar")):
            continue
        if args.max_tokens and p.get("max_tokens", 0) > args.max_tokens:
            continue
        picked.append((req["messages"], SamplingParams(**{k: (tuple(v) if k == "stop" else v) for k, v in p.items()}),
                       response))
        if len(picked) >= args.n:
            break
    if not picked:
        print(f"no greedy constrained requests of {llm.identity} in {args.cache}", file=sys.stderr)
        return 2
    same_cached = same_slow = 0
    fast_s = slow_s = 0.0
    fast_tok = slow_tok = 0
    full_checks = tokens = 0
    for k, (messages, params, cached) in enumerate(picked):
        inner._init_sampler = fast_init
        t = time.perf_counter()
        out = backend._complete(messages, params)
        fast_s += time.perf_counter() - t
        fast_tok += out.completion_tokens
        pick = getattr(inner, "last_grammar_sampler", None)
        if pick is not None:
            full_checks, tokens = full_checks + pick.full_checks, tokens + pick.tokens
        same_cached += out.text == cached
        if k < args.baseline_n:
            inner._init_sampler = slow_init
            t = time.perf_counter()
            ref = backend._complete(messages, params)
            slow_s += time.perf_counter() - t
            slow_tok += ref.completion_tokens
            same_slow += ref.text == out.text
        print(f"[{k + 1}/{len(picked)}] {out.completion_tokens} tokens, identical to cached: {out.text == cached}",
              flush=True)
    inner._init_sampler = fast_init
    nb = min(args.baseline_n, len(picked))
    print("\n=== grammar-first greedy decoding ===")
    print(f"model {llm.name}; {len(picked)} cached greedy requests with a schema or grammar from {args.cache}")
    print(f"identical to the cached answer (library chain, earlier run): {same_cached}/{len(picked)}")
    if nb:
        print(f"identical to the library chain in this run: {same_slow}/{nb}")
        print(f"library chain: {slow_tok} tokens in {slow_s:.1f} s = {slow_tok / max(slow_s, 1e-9):.1f} tok/s "
              f"(first {nb} requests)")
    print(f"grammar-first: {fast_tok} tokens in {fast_s:.1f} s = {fast_tok / max(fast_s, 1e-9):.1f} tok/s "
          f"(all {len(picked)}); full-vocabulary checks on {full_checks} of {tokens} tokens")
    return 0 if same_cached == len(picked) and same_slow == nb else 1


if __name__ == "__main__":
    raise SystemExit(main())
