"""kgrag's own CPU per question, per method, against a zero-latency server (issue 58, item 3).

Why: with a GPU engine the client's Python work (query embeddings, KB scoring, prompt building,
HTTP) is what remains between a question's dependent requests; on 2 shared cores it was one of two
causes the serve bench could not separate. Here the engine costs nothing (`bench/batching_server.py`
with a 0 ms step and unbounded prefill), so a run's wall time is the client's, and its process CPU
time is split by where it goes (cProfile's own time per function, grouped: the embedder, vector math,
the HTTP client, kgrag's Python, the rest). CPU per question is marginal: (CPU of a run of n
questions - CPU of a run of n_small) / (n - n_small), so a run's one-time work (loading questions,
building the method) is left out. One question at a time, then 4 in flight for the wall time the
same work takes when threads share the GIL.

    flock /tmp/kgrag-model.lock .venv/bin/python bench/client_cpu_bench.py --out /tmp/client-cpu.json

It loads the shipped MiniLM embedder (cpu-smoke's), hence the lock. KG and embedding caches are the
usual cache folder (`$KGRAG_CACHE_DIR`); the LLM cache is a fresh one per run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import serve_bench as sb  # noqa: E402

WORKLOADS = {"llm": "metaqa-1hop", "llm-kg": "metaqa-1hop", "kg-rag": "metaqa-2hop",
             "nor": "2wiki", "vanilla-rag": "2wiki", "kg-infused": "2wiki", "self-ask": "2wiki"}
GROUPS = (("embedder", ("torch", "sentence_transformers", "transformers", "tokenizers")),
          ("vector math", ("numpy", "faiss", "scipy")),
          ("http client", ("httpx", "httpcore", "openai", "h11", "socket", "ssl", "selectors", "http/")),
          ("kgrag python", ("kgrag_lib",)),
          ("json", ("json",)))


def group_of(filename: str) -> str:
    for name, marks in GROUPS:
        if any(f"/{m}" in filename or filename.startswith(m) for m in marks):
            return name
    return "other" if filename != "~" else "builtins"


def profiled_run(method: str, dataset: str, spec: str, n: int, work: Path) -> dict:
    """One run at 1 in flight under cProfile: CPU per question and where it goes."""
    prof = cProfile.Profile(time.process_time)   # CPU time: waiting on a lock or a socket costs none
    prof.enable()
    row = sb.run_level(method, dataset, spec, n, 1, work, work / f"llm-{method}-profiled.sqlite")
    prof.disable()
    stats = pstats.Stats(prof)
    by_group: dict[str, float] = {}
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
        g = group_of(filename)
        by_group[g] = by_group.get(g, 0.0) + tottime
    total = sum(by_group.values()) or 1.0
    row["profile_share"] = {k: round(v / total, 3) for k, v in sorted(by_group.items(), key=lambda kv: -kv[1])}
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:6]
    row["top_own_time"] = [f"{Path(f).name}:{line} {fn} {st[2]:.2f}s" for (f, line, fn), st in top]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24, help="questions of the measured runs")
    ap.add_argument("--n-small", type=int, default=4, help="questions of the run subtracted (one-time work)")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS),
                    help="methods (the MetaQA KG ones embed the whole KB once, minutes to hours on 2 cores)")
    ap.add_argument("--in-flight", type=int, default=4, help="the second, unprofiled run's questions in flight")
    ap.add_argument("--out", type=Path, required=True, help="JSON of the rows")
    a = ap.parse_args(argv)
    a.work = Path(tempfile.mkdtemp(prefix="kgrag-client-cpu-"))   # fresh: a run folder left over would be resumed
    port = sb.free_port()
    cmd = [sys.executable, str(HERE / "batching_server.py"), "--port", str(port), "--step-ms", "0",
           "--prefill-tok-per-s", "1e12"]
    spec = f"openai:http://127.0.0.1:{port}/v1#modelled"
    rows = []
    with sb.serve(cmd, port, a.work / "batching_server.log"):
        for method in a.workloads:
            dataset = WORKLOADS[method]
            sb.run_level(method, dataset, spec, 2, 1, a.work / "warm", a.work / "warm.sqlite")   # one-time work
            small = sb.run_level(method, dataset, spec, a.n_small, 1, a.work / "small", a.work / f"llm-{method}-s.sqlite")
            one = sb.run_level(method, dataset, spec, a.n, 1, a.work / "big", a.work / f"llm-{method}-b.sqlite")
            prof = profiled_run(method, dataset, spec, a.n, a.work)   # shares only: cProfile slows what it sees
            many = sb.run_level(method, dataset, spec, a.n, a.in_flight, a.work, a.work / f"llm-{method}-c.sqlite")
            marginal = (one["client_cpu_ms_per_q"] * one["n"] - small["client_cpu_ms_per_q"] * small["n"]) / (
                one["n"] - small["n"])
            row = {"method": method, "dataset": dataset, "n": one["n"],
                   "requests_per_q": round((one["calls"] or 0) / one["n"], 2),
                   "client_cpu_ms_per_q": round(marginal, 1),
                   "client_cpu_ms_per_q_whole_run": one["client_cpu_ms_per_q"],
                   "wall_ms_per_q_1": round(1000 * one["wall_s"] / one["n"], 1),
                   f"wall_ms_per_q_{a.in_flight}": round(1000 * many["wall_s"] / many["n"], 1),
                   f"cpu_ms_per_q_{a.in_flight}": many["client_cpu_ms_per_q"],
                   "profile_share": prof["profile_share"], "top_own_time": prof["top_own_time"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    a.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "rows": rows},
                                indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
