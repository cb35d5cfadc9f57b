"""Does llama.cpp's shared-prefix KV reuse leave answers byte-identical, and how much faster is it?

Replays cached requests of one model (in the order they were first made, as a run makes them)
through a fresh llama.cpp instance with `reuse_prefix=True` and no cache, and compares each
answer with the cached one, which was computed with every prompt evaluated from scratch (the
project's default). Prints how many answers are identical (greedy and sampled requests apart)
and the seconds per request against the cached seconds of the from-scratch run (the naive
baseline, measured when the cache was filled on this machine).

    .venv/bin/python bench/prefix_reuse_bench.py --limit 300
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from pathlib import Path


def main() -> None:
    from kgrag_lib.llm import load_llm
    from kgrag_lib.llm.base import SamplingParams
    from kgrag_lib.llm.cache import default_cache_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-q4", help="preset whose cached requests are replayed")
    ap.add_argument("--cache", default=None, help="LLM cache file (default: the one runs use)")
    ap.add_argument("--limit", type=int, default=300, help="requests to replay")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the project's)")
    args = ap.parse_args()

    llm = load_llm(args.model, cache=False, reuse_prefix=True, **({"n_threads": args.threads} if args.threads else {}))
    conn = sqlite3.connect(f"file:{Path(args.cache or default_cache_path())}?mode=ro", uri=True)
    rows = conn.execute("SELECT request, response, seconds FROM calls WHERE identity = ? ORDER BY created LIMIT ?",
                        (llm.identity, args.limit)).fetchall()
    if not rows:
        raise SystemExit(f"no cached requests of {llm.identity} in the cache; run something with {args.model} first")
    same = {"greedy": [0, 0], "sampled": [0, 0]}
    t_reuse = t_scratch = 0.0
    first_diff = None
    for request, response, seconds in rows:
        req = json.loads(request)
        params = SamplingParams(**{k: tuple(v) if k == "stop" else v for k, v in req["params"].items()})
        kind = "greedy" if params.temperature == 0 else "sampled"
        t0 = time.perf_counter()
        out = llm.generate(req["messages"], params)
        t_reuse += time.perf_counter() - t0
        t_scratch += float(seconds)
        same[kind][1] += 1
        if out == response:
            same[kind][0] += 1
        elif first_diff is None:
            first_diff = (response[:120], out[:120])
    n = len(rows)
    print(f"{n} cached requests of {args.model} replayed with shared-prefix KV reuse")
    for kind, (ok, tot) in same.items():
        if tot:
            print(f"  {kind:7s}: {ok}/{tot} answers byte-identical to the from-scratch answers")
    print(f"  seconds per request: reuse {t_reuse / n:.2f}, from scratch (cached timing) {t_scratch / n:.2f}; "
          f"speed-up x{t_scratch / max(t_reuse, 1e-9):.2f}")
    if first_diff:
        print(f"  first difference: cached {first_diff[0]!r}\n                    reuse  {first_diff[1]!r}")


if __name__ == "__main__":
    main()
