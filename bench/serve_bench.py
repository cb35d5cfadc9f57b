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

(c) Against the real vLLM (`vllm-serve:`, the CPU build from .venv-vllm here, the embedded 0.5B
model dequantized): LLM-only (MetaQA 1-hop), KG-RAG (MetaQA 2-hop), KG-Infused RAG (2Wiki),
SA-RAG's chunk extraction and TCR-QF (sample schedule, 2Wiki) at 1, 2, 4, 8, 16 in flight, each
level with a cold LLM cache; beside each level a plain client (the `openai` SDK on as many threads)
sending exactly the request bodies kgrag sent; beside each workload in-process llama.cpp (the GGUF
itself, one at a time) on the same questions. The bar: kgrag >= 0.9 x the plain client at every
level. The server runs without prefix caching, so the plain client's replay of the same prompts
gets no head start. SA-RAG's and TCR-QF's 2Wiki questions keep only their gold paragraphs (a KG of 2-4
paragraphs per question), built once per engine outside the clock.

(b) Against a real llama.cpp server on loopback (llama-cpp-python's `llama_cpp.server` with the
embedded 0.5B model; it computes one request at a time): kgrag at 1 and 4 questions in flight,
beside a plain client (the `openai` SDK on 4 threads) sending exactly the requests kgrag sent.
The bar: kgrag at 4 in flight >= 0.9 x the plain client.

    .venv/bin/python bench/serve_bench.py                 # (a0), (a), (b) and (c)
    .venv/bin/python bench/serve_bench.py --only-vllm     # (c) only; --json FILE keeps its rows
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
sys.path.insert(0, str(HERE))
from serve_chains import slot_budget  # noqa: E402
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
    ctx = make_context(r.run, r.profile)
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
                # where kgrag's slots went idle (chains, client gaps, the run's tail): serve_chains.py
                budget = slot_budget(work / f"{method}-c{c}", work / f"llm-{method}-c{c}.sqlite", c)
                row.update({f"slots_{k}": budget[k] for k in ("chain_mean", "busy", "gaps", "tail", "between")})
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


# ---- (c) the real vLLM ------------------------------------------------------------------------------------
PRESET = "qwen2.5-coder-0.5b-q4"


def vllm_spec(preset: str) -> str:
    return f"vllm-serve:{preset}?max_model_len=4096&cpu_kvcache_gib=2"
# (workload, dataset, method overrides): SA-RAG's and TCR-QF's KGs over the gold paragraphs of the sample
VLLM_WORKLOADS = {
    "llm": ("metaqa-1hop", {}),
    "kg-rag": ("metaqa-2hop", {}),
    "kg-infused": ("2wiki", {}),
    "sa-rag-extraction": ("2wiki", {}),
    "tcr-qf": ("2wiki", {"split": "dev200", "kg": "tcr:2wiki:dev200:n={n}:seed=0"}),
}


def gold_only_root(work: Path, n: int) -> Path:
    """A data root whose 2Wiki dev200 file holds the first `n` questions with 2-4 gold paragraphs,
    each keeping only those (the real file's format)."""
    from kgrag_lib.paths import data_root

    rows = []
    for line in (data_root() / "2wiki" / "MIGRES_200_2wiki.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        gold = {t for t, _ in row["supporting_facts"]}
        context = [c for c in row["context"] if c[0] in gold]
        if 2 <= len(context) == len(gold) <= 4:
            rows.append({**row, "context": context})
        if len(rows) == n:
            break
    root = work / "gold-only-data"
    (root / "2wiki").mkdir(parents=True, exist_ok=True)
    (root / "2wiki" / "MIGRES_200_2wiki.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def _client(server, weights: str, cache: Path, c: int):
    from kgrag_lib.llm import load_llm

    return load_llm(f"openai:{server.base_url}#{server.alias}", cache_path=cache, weights=weights, timeout=1800,
                    max_in_flight=c)


def _run_questions(workload: str, llm, spec: str, n: int, c: int, out: Path, root: Path | None) -> dict:
    """One kgrag run of a workload at `c` questions in flight: its wall time and what it sent. KGs and
    embeddings live in the default cache folder (made once, off the clock: the MetaQA KB's take minutes)."""
    from kgrag_lib.experiment import make_context, resolve_run, run_experiment

    dataset, over = VLLM_WORKLOADS[workload]
    over = {k: v.format(n=n) if isinstance(v, str) else v for k, v in over.items()}
    where = {"data_root": str(root)} if root else {}
    r = resolve_run(workload, dataset, out, "cpu-smoke", model=spec, n=n, seed=0, **where, **over)
    ctx = make_context(r.run, r.profile)
    ctx.llm = llm
    _ = ctx.embedder
    t0 = time.perf_counter()
    m = run_experiment(workload, dataset, out, ctx=ctx, progress=False, model=spec, n=n, seed=0, concurrency=c,
                       **where, **over)
    wall = time.perf_counter() - t0
    this = m["this_run"]
    # answering only: the plain client has no scoring to do, and a run's bootstrap intervals take seconds
    return {"wall_s": round(this["answer_seconds"], 1), "run_wall_s": round(wall, 1), "items": m["n"],
            "calls": this.get("llm_calls_sent"), "gen_tokens": this.get("llm_completion_tokens_sent") or 0}


def _run_extraction(llm, passages, c: int, journal: Path) -> dict:
    """SA-RAG's text-to-KG indexing of `passages` with `c` chunk requests in flight."""
    from kgrag_lib.methods.sa_rag.extraction import build_text_kg

    llm.concurrency = llm.default_concurrency = c
    t0 = time.perf_counter()
    with llm.meter() as meter:
        _, stats, _ = build_text_kg(passages, llm, journal, show_progress=False)
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 1), "items": stats["chunks"], "calls": meter.usage.calls,
            "gen_tokens": meter.usage.completion_tokens}


def replay_bodies(base_url: str, alias: str, llm, cache: Path, workers: int) -> dict:
    """The request bodies kgrag sent (rebuilt from its LLM cache by its own body builder), sent again
    by the plain `openai` SDK on `workers` threads."""
    import sqlite3

    from openai import OpenAI

    from kgrag_lib.llm.base import SamplingParams

    rows = sqlite3.connect(cache).execute("SELECT request FROM calls ORDER BY created").fetchall()
    bodies = []
    for (raw,) in rows:
        req = json.loads(raw)
        params = SamplingParams(**{k: tuple(v) if k == "stop" else v for k, v in req["params"].items()})
        bodies.append(llm.request_body(req["messages"], params))
    client = OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=1800)

    def send(body: dict) -> int:
        body = dict(body)
        fixed = {k: body.pop(k) for k in ("model", "messages")}
        return client.chat.completions.create(**fixed, extra_body=body).usage.completion_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        toks = sum(ex.map(send, bodies))
    wall = time.perf_counter() - t0
    return {"requests": len(bodies), "wall_s": round(wall, 1), "gen_tokens": toks}


# Items (questions; chunks for the extraction) per level: on 2 CPU cores a KG-RAG or KG-Infused question
# takes about a minute alone, a TCR-QF one about three (19 requests, 1,500 generated tokens), so the
# heavier workloads get fewer items and the levels above their item count are not run.
VLLM_SIZES = {"llm": 16, "kg-rag": 8, "kg-infused": 8, "sa-rag-extraction": 8, "tcr-qf": 4}


def part_vllm(levels: list[int], sizes: dict[str, int], work: Path, workloads: list[str], in_process: bool = True,
              out_json: str | None = None, preset: str = PRESET, plain: bool = True) -> list[dict]:
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.llm import load_llm

    root = gold_only_root(work, max(sizes.values()))
    # no prefix caching: the plain client sends the prompts kgrag has just sent, and would find them cached
    spec = vllm_spec(preset)
    server_llm = load_llm(spec, cache=False, log_dir=work, server={"args": ["--no-enable-prefix-caching"]})
    server, weights = server_llm.managed, server_llm.identity.split("|weights=", 1)[1]
    print(f"vLLM {server.version} at {server.base_url} serving {server.alias} ({weights}); "
          f"start-up took {server.startup_seconds:.0f} s", flush=True)
    rows: list[dict] = []
    try:
        for w in workloads:
            if not server.running:
                raise SystemExit(f"the vLLM server stopped (exit {server.proc.returncode}); its log {server.log_path} "
                                 f"ends with:\n{server.log_tail(40)}")
            passages = None
            n_w = sizes[w]
            if w == "sa-rag-extraction":
                qs = load_questions("2wiki", "dev200", root=root, n=n_w, seed=0)
                passages = list({p.pid: p for q in qs for p in q.context}.values())[:n_w]
            elif w in ("kg-infused", "tcr-qf", "kg-rag", "llm"):
                _run_questions(w, _client(server, weights, work / f"warm-{w}.sqlite", 8), spec, n_w, 8,
                               work / f"warm-{w}", root if w == "tcr-qf" else None)
            base = None
            for c in [c for c in levels if c <= n_w]:
                cache = work / f"{w}-c{c}.sqlite"
                llm = _client(server, weights, cache, c)
                if passages is not None:
                    got = _run_extraction(llm, passages, c, work / f"{w}-c{c}.journal.jsonl")
                else:
                    got = _run_questions(w, llm, spec, n_w, c, work / f"{w}-c{c}", root if w == "tcr-qf" else None)
                row = {"model": preset, "workload": w, "in_flight": c, "items": got["items"], "wall_s": got["wall_s"],
                       "items_per_s": round(got["items"] / got["wall_s"], 3), "requests": got["calls"],
                       "req_per_s": round(got["calls"] / got["wall_s"], 3),
                       "gen_tok_per_s": round(got["gen_tokens"] / got["wall_s"], 1)}
                if plain:
                    sent = replay_bodies(server.base_url, server.alias, llm, cache, c)
                    row["plain_req_per_s"] = round(sent["requests"] / sent["wall_s"], 3)
                    row["kgrag_vs_plain"] = round(row["req_per_s"] / row["plain_req_per_s"], 3)
                base = base or row["items_per_s"]
                row["speedup_vs_1"] = round(row["items_per_s"] / base, 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if out_json:   # every finished row kept, should the run be cut short
                    Path(out_json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
            if in_process:
                llm = load_llm(preset, cache_path=work / f"{w}-inproc.sqlite")
                if passages is not None:
                    _run_extraction(llm, passages[:1], 1, work / f"{w}-inproc-warm.journal.jsonl")
                    got = _run_extraction(llm, passages, 1, work / f"{w}-inproc.journal.jsonl")
                else:
                    if w == "tcr-qf":   # its own KG, extracted by this engine, off the clock
                        _run_questions(w, load_llm(preset, cache_path=work / "warm-inproc.sqlite"), preset,
                                       n_w, 1, work / f"warm-{w}-inproc", root)
                    got = _run_questions(w, llm, preset, n_w, 1, work / f"{w}-inproc", root if w == "tcr-qf" else None)
                row = {"model": preset, "workload": w, "in_flight": "in-process llama.cpp, 1", "items": got["items"], "wall_s": got["wall_s"],
                       "items_per_s": round(got["items"] / got["wall_s"], 3), "requests": got["calls"],
                       "req_per_s": round(got["calls"] / got["wall_s"], 3),
                       "gen_tok_per_s": round(got["gen_tokens"] / got["wall_s"], 1)}
                best = max((r for r in rows if r["workload"] == w and isinstance(r["in_flight"], int)),
                           key=lambda r: r["items_per_s"])
                row["best_vllm_vs_in_process"] = round(best["items_per_s"] / row["items_per_s"], 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if out_json:   # every finished row kept, should the run be cut short
                    Path(out_json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    finally:
        server_llm.close()
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
    ap.add_argument("--only-vllm", action="store_true", help="part (c) only: the real vLLM")
    ap.add_argument("--skip-vllm", action="store_true")
    ap.add_argument("--vllm-levels", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--vllm-sizes", nargs="*", default=[], metavar="WORKLOAD=N",
                    help=f"items per level of part (c) (default {VLLM_SIZES})")
    ap.add_argument("--vllm-workloads", nargs="+", default=list(VLLM_WORKLOADS), choices=list(VLLM_WORKLOADS))
    ap.add_argument("--no-in-process", action="store_true", help="part (c) without the in-process llama.cpp rows")
    ap.add_argument("--vllm-preset", default=PRESET, help="the GGUF preset of part (c), served by vLLM and run in-process")
    ap.add_argument("--no-plain", action="store_true", help="part (c) without the plain client's replay")
    ap.add_argument("--json", help="write part (c)'s rows to this file")
    ap.add_argument("--work", help="work folder kept after the run (server logs, run folders); default a temporary one")
    ap.add_argument("--summarize", metavar="JSON", help="print REPORT's table of part (c) from a --json file and exit")
    a = ap.parse_args()
    if a.summarize:
        print(vllm_summary(json.loads(Path(a.summarize).read_text(encoding="utf-8"))))
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with (contextlib.nullcontext(a.work) if a.work else tempfile.TemporaryDirectory(prefix="serve-bench-")) as tmp:
        work = Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if a.only_vllm:
            a.skip_model = a.skip_real = True
        if not a.skip_vllm and not a.only_a0:
            print("(c) the real vLLM (vllm-serve:, the embedded 0.5B model)", flush=True)
            sizes = {**VLLM_SIZES, **{k: int(v) for k, v in (x.split("=", 1) for x in a.vllm_sizes)}}
            rows = part_vllm(a.vllm_levels, sizes, work, a.vllm_workloads, not a.no_in_process, a.json,
                             a.vllm_preset, not a.no_plain)
            print(_table(rows))
            print(vllm_summary(rows))
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


WORKLOAD_NAMES = {"llm": "LLM only (MetaQA 1-hop)", "kg-rag": "KG-RAG (MetaQA 2-hop)", "kg-infused": "KG-Infused RAG (2Wiki)",
                  "sa-rag-extraction": "SA-RAG text-to-KG, chunks", "tcr-qf": "TCR-QF (2Wiki, sample schedule)"}


def vllm_summary(rows: list[dict]) -> str:
    """Part (c)'s rows as REPORT's table: per workload, items/s at each in-flight level with kgrag / plain
    client in brackets, then in-process llama.cpp and the best level against it."""
    import pandas as pd

    levels = sorted({r["in_flight"] for r in rows if isinstance(r["in_flight"], int)})
    out = []
    for w in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == w]
        line = {"workload (items)": f"{WORKLOAD_NAMES.get(w, w)} ({mine[0]['items']})"}
        for c in levels:
            r = next((r for r in mine if r["in_flight"] == c), None)
            ratio = f" ({r['kgrag_vs_plain']:.2f})" if r and "kgrag_vs_plain" in r else ""
            line[f"{c} in flight"] = f"{r['items_per_s']:.3f}{ratio}" if r else "–"
        inproc = next((r for r in mine if not isinstance(r["in_flight"], int)), None)
        line["in-process llama.cpp"] = f"{inproc['items_per_s']:.3f}" if inproc else "–"
        line["best vLLM / in-process"] = f"{inproc['best_vllm_vs_in_process']:.2f}x" if inproc else "–"
        out.append(line)
    return pd.DataFrame(out).to_markdown(index=False, disable_numparse=True)


def _table(rows: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_markdown(index=False)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
