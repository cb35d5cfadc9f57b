"""Throughput of kgrag runs against a server, by questions in flight.

(a0) The in-flight machinery alone: the modelled server below with prefill made free, and the
MetaQA LLM-only run (one short request per question, no retrieval), at 1 and 32 in flight. The bar
of the serving issue: at 32 in flight, questions/s >= 0.8 x 32 x the 1-in-flight figure.

(a) Against `batching_server.py`, a loopback model of a continuous-batching GPU engine (its
docstring gives the parameters and the GPU they stand for): the LLM-only control, MetaQA KG-RAG
and KG-Infused RAG at 1, 2, 4, ..., 64 questions in flight, each level with a cold LLM cache:
questions/s, generated tokens/s, the speed-up over 1 in flight, the share of the wall time the
engine spent in prefill (which stalls every sequence of the batch, so the engine saturates as
prompts pile up: KG-RAG and KG-Infused send ~1,000 prompt tokens per question), the client's CPU
per question, and a plain client (the `openai` SDK on as many threads) replaying the same
requests: what any client gets from that engine at that in-flight count.

(b) Against a real llama.cpp server on loopback (llama-cpp-python's `llama_cpp.server` with the
embedded 0.5B model; it computes one request at a time): kgrag at 1 and 4 questions in flight,
beside a plain client (the `openai` SDK on 4 threads) sending exactly the requests kgrag sent.
The bar: kgrag at 4 in flight >= 0.9 x the plain client.

    .venv/bin/python bench/serve_bench.py                 # (a0), (a) and (b)
    .venv/bin/python bench/serve_bench.py --skip-real     # no model job
    .venv/bin/python bench/serve_bench.py --only-a0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(cmd: list[str], port: int, log: Path, ready_path: str = "/v1/models", timeout: float = 180.0):
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{ready_path}", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() - t0 > timeout:
                    raise SystemExit(f"server did not start: {' '.join(cmd)}; log: {log}")
                time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_level(method: str, dataset: str, spec: str, n: int, c: int, work: Path, llm_cache: Path) -> dict:
    """One kgrag run at `c` in flight with its own cold LLM cache; its wall time and what it sent."""
    from kgrag_lib.experiment import make_context, resolve_run, run_experiment
    from kgrag_lib.llm import load_llm

    out = work / f"{method}-c{c}"
    r = resolve_run(method, dataset, out, "cpu-smoke", model=spec, n=n, seed=0)
    ctx = make_context(r.run)
    ctx.llm = load_llm(spec, cache_path=llm_cache)   # a cold cache of its own
    _ = ctx.embedder, ctx.llm   # loaded before the clock starts
    t0, cpu0 = time.perf_counter(), time.process_time()
    m = run_experiment(method, dataset, out, ctx=ctx, progress=False, model=spec, n=n, seed=0, concurrency=c)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    this = m["this_run"]
    return {"method": method, "in_flight": c, "n": m["n"], "wall_s": round(wall, 2),
            "q_per_s": round(m["n"] / wall, 2), "calls": this.get("llm_calls_sent"),
            "prompt_tok_per_q": round((this.get("llm_prompt_tokens_sent") or 0) / m["n"]),
            "gen_tok_per_s": round((this.get("llm_completion_tokens_sent") or 0) / wall, 1),
            "client_cpu_ms_per_q": round(1000 * cpu / m["n"], 1)}


def server_stats(port: int) -> dict:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5).read())


METHODS = (("llm", "metaqa-1hop"), ("kg-rag", "metaqa-2hop"), ("kg-infused", "2wiki"))


def part_a(levels: list[int], n_per_level: int, time_scale: float, work: Path, methods=METHODS,
           server_args: tuple[str, ...] = (), per_slot: int = 8) -> list[dict]:
    port = free_port()
    cmd = [sys.executable, str(HERE / "batching_server.py"), "--port", str(port), "--time-scale", str(time_scale),
           *server_args]
    rows = []
    with serve(cmd, port, work / "batching_server.log"):
        # `llm` (MetaQA LLM only: one short prompt per question) is the control: little prefill and
        # no retrieval, so it shows what the in-flight machinery itself scales to
        for method, dataset in methods:
            # warm the method's one-time work (embeddings, KG) outside the measurement
            run_level(method, dataset, f"openai:http://127.0.0.1:{port}/v1#modelled", 2, 1, work / "warm",
                      work / "warm.sqlite")
            base = None
            for c in levels:
                n = max(n_per_level, per_slot * c)
                before = server_stats(port)
                row = run_level(method, dataset, f"openai:http://127.0.0.1:{port}/v1#modelled", n, c, work,
                                work / f"llm-{method}-c{c}.sqlite")
                after = server_stats(port)
                # prefill stalls every sequence in the batch: its share of the wall time is how close
                # the modelled engine is to saturation (a plain client cannot beat it either)
                row["prefill_pct"] = round(100 * (after["prefill_s"] - before["prefill_s"]) / row["wall_s"], 1)
                plain = replay_plain(port, "modelled", work / f"llm-{method}-c{c}.sqlite", c)
                row["req_per_s"] = round(row["calls"] / row["wall_s"], 2)
                row["plain_req_per_s"] = plain["req_per_s"]
                row["kgrag_vs_plain"] = round(row["req_per_s"] / plain["req_per_s"], 3)
                base = base or row["q_per_s"]
                row["speedup"] = round(row["q_per_s"] / base, 2)
                row["ideal_0.8"] = round(0.8 * c, 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def replay_plain(port: int, alias: str, llm_cache: Path, workers: int) -> dict:
    """Send the requests stored in a kgrag LLM cache again with the plain `openai` SDK."""
    import sqlite3

    from openai import OpenAI

    rows = sqlite3.connect(llm_cache).execute("SELECT request FROM calls ORDER BY created").fetchall()
    reqs = [json.loads(r[0]) for r in rows]
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=600)

    def send(req: dict) -> int:
        p = req["params"]
        resp = client.chat.completions.create(
            model=alias, messages=req["messages"], max_tokens=p["max_tokens"], temperature=p["temperature"],
            top_p=p["top_p"], seed=p["seed"], stop=p["stop"] or None)
        return resp.usage.completion_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        toks = sum(ex.map(send, reqs))
    wall = time.perf_counter() - t0
    return {"client": f"plain openai SDK, {workers} threads", "requests": len(reqs), "wall_s": round(wall, 2),
            "req_per_s": round(len(reqs) / wall, 3), "gen_tok_per_s": round(toks / wall, 1)}


def part_b(n: int, work: Path) -> list[dict]:
    from kgrag_lib.llm.presets import PRESETS, resolve_gguf

    gguf, _ = resolve_gguf(PRESETS["qwen2.5-coder-0.5b-q4"])
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "qwen", "--n_ctx", "4096",
           "--n_threads", "2", "--host", "127.0.0.1", "--port", str(port)]
    rows = []
    with serve(cmd, port, work / "llama_cpp_server.log"):
        spec = f"openai:http://127.0.0.1:{port}/v1#qwen"
        for c in (1, 4):
            row = run_level("llm-kg", "metaqa-1hop", spec, n, c, work, work / f"real-c{c}.sqlite")
            row["req_per_s"] = round(row["calls"] / row["wall_s"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
        plain = replay_plain(port, "qwen", work / "real-c4.sqlite", 4)
        plain["ratio_kgrag_c4_to_plain"] = round(rows[-1]["req_per_s"] / plain["req_per_s"], 3)
        rows.append(plain)
        print(json.dumps(plain), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--n", type=int, default=16, help="questions per level at least (8 x in-flight when larger)")
    ap.add_argument("--time-scale", type=float, default=1.0, help="latency scale of the modelled server (1: the GPU it stands for)")
    ap.add_argument("--real-n", type=int, default=8, help="questions of the real-server part")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-model", action="store_true", help="skip parts (a0) and (a)")
    ap.add_argument("--only-a0", action="store_true", help="part (a0) only")
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        work = Path(tmp)
        if not a.skip_model:
            print("(a0) the in-flight machinery alone: the modelled server with free prefill, LLM-only control",
                  flush=True)
            # 32 questions per slot: the first question of a run goes alone (it loads the lazy parts)
            rows = part_a([1, 32], a.n, a.time_scale, work, methods=METHODS[:1],
                          server_args=("--prefill-tok-per-s", "1e12"), per_slot=32)
            print(_table(rows))
        if not a.skip_model and not a.only_a0:
            print("(a) modelled continuous-batching server", flush=True)
            rows = part_a(a.levels, a.n, a.time_scale, work)
            print(_table(rows))
        if not a.skip_real and not a.only_a0:
            print("(b) real llama.cpp server (llama_cpp.server, embedded 0.5B model)", flush=True)
            print(_table(part_b(a.real_n, work)))


def _table(rows: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_markdown(index=False)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
