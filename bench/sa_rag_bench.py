"""SA-RAG speed, each measured side by side in one run:

(a) Algorithm 1 (`methods.sa_rag.activation.spread_activation`) on a synthetic subgraph (default
    100k entities, 1M links, the issue's size) against a plain dict implementation of the paper's
    pseudo-code (adjacency dict of (target, weight) lists, a dict of activations, a set of
    visited nodes), both from the same seeds over the same weights; the activated sets
    (a > tau_a) must be identical. Link weights are rescaled cosines w' = max(0, (cos - c)/(1 - c))
    of cosines drawn around --cos-mean. Reports median / p95 ms per query and the speed-up
    (goals: >= 20x, median under 10 ms).
(b) indexing throughput as a fraction of the bare llama.cpp ceiling for the same prompts: a
    small text-KG build through `build_text_kg` (no LLM cache, a fresh journal), every request
    recorded at the backend; then the same requests replayed through llama-cpp-python's
    `create_chat_completion` alone (same sampling and JSON-schema constraint, no cache, parsing,
    journal or statistics). Goal: >= 0.9. Needs --model (a llama.cpp model); skipped otherwise.
(c) retrieval per query with a warm index: SA-RAG (MuSiQue k=3, n=4 and 2Wiki k=10, n=3) and the
    PPR baseline over a graph index already built, query embedding timed apart. By default on a
    synthetic text KG (topics of chunks sharing entities, a few hub entities, a synthetic
    embedder whose cosines spread around 0.4); with --kg a real KG (a saved KG folder, or a
    text: spec extracted by --model) embedded with --embedder.

    .venv/bin/python bench/sa_rag_bench.py                      # (a) at full size, (c) synthetic
    .venv/bin/python bench/sa_rag_bench.py --quick              # tiny sizes, no model: a smoke check
    .venv/bin/python bench/sa_rag_bench.py --model qwen2.5-coder-0.5b-q4 --index-dataset musique --index-n 2
    .venv/bin/python bench/sa_rag_bench.py --skip-a --kg text:musique:n=2:seed=0 --model qwen2.5-coder-0.5b-q4

Times are wall-clock (time.perf_counter) with garbage collection frozen while timing; run it on
an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kgrag_lib.kg.traverse import rescaled_cosine  # noqa: E402
from kgrag_lib.methods.sa_rag.activation import csr_from_edges, spread_activation  # noqa: E402


def ms_stats(seconds: Sequence[float]) -> dict[str, float]:
    xs = sorted(1000 * s for s in seconds)
    return {"median_ms": round(statistics.median(xs), 3), "p95_ms": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 3)}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    gc.disable()
    try:
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0
    finally:
        gc.enable()


# ---- (a) Algorithm 1 ------------------------------------------------------------------------------
def dict_activation(adj: dict[int, list[tuple[int, float]]], seeds: Sequence[int]) -> dict[int, float]:
    """Algorithm 1 of the paper, written as its pseudo-code reads (the baseline)."""
    a = {e: 0.0 for e in adj}
    for s in seeds:
        a[s] = 1.0
        visited: set[int] = set()
        queue = deque([s])
        while queue:
            node = queue.popleft()
            if node in visited:
                continue
            visited.add(node)
            for target, weight in adj[node]:
                a[target] = min(1.0, a[target] + weight * a[node])
                if target not in visited:
                    queue.append(target)
    return a


def bench_algorithm1(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    n, m = args.nodes, args.edges
    heads = rng.integers(0, n, m)
    tails = (heads + 1 + rng.integers(0, n - 1, m)) % n          # no self-loops
    cos = np.clip(rng.normal(args.cos_mean, args.cos_std, m), -1.0, 1.0)
    weight = rescaled_cosine(cos, args.c)
    indptr, nbr, arc = csr_from_edges(n, heads, tails)
    arc_w = weight[arc]
    adj: dict[int, list[tuple[int, float]]] = {i: [] for i in range(n)}
    for h, t, w in zip(heads.tolist(), tails.tolist(), weight.tolist()):   # the same arc order per node
        adj[h].append((t, w))
        adj[t].append((h, w))
    queries = [rng.choice(n, size=args.k, replace=False).tolist() for _ in range(args.queries)]
    ours, base, activated = [], [], []
    spread_activation(indptr, nbr, arc_w, queries[0])   # warm-up: numba loads its compiled kernel once
    for seeds in queries:
        values, t_ours = timed(lambda: spread_activation(indptr, nbr, arc_w, seeds))
        ref, t_base = timed(lambda: dict_activation(adj, seeds))
        got = set(np.flatnonzero(values > args.tau_a).tolist())
        want = {e for e, v in ref.items() if v > args.tau_a}
        if got != want:
            raise AssertionError(f"activated sets differ for seeds {seeds}: {len(got ^ want)} entities")
        ours.append(t_ours)
        base.append(t_base)
        activated.append(len(got))
    o, b = ms_stats(ours), ms_stats(base)
    speedup = b["median_ms"] / max(o["median_ms"], 1e-9)
    return {"nodes": n, "edges": m, "seeds_per_query": args.k, "queries": args.queries, "c": args.c,
            "positive_weights": round(float((weight > 0).mean()), 3), "mean_activated": statistics.mean(activated),
            "ours": o, "dict_baseline": b, "speedup_median": round(speedup, 2), "identical_activated_sets": True,
            "goal_speedup_20x": speedup >= 20, "goal_median_under_10ms": o["median_ms"] < 10}


# ---- (c) retrieval with a warm index -----------------------------------------------------------------
class SyntheticEmbedder:
    """Deterministic unit vectors per text: a shared direction of random strength plus noise, so
    cosines between texts spread around 0.4 (some links pass c = 0.4, some chunks tau_d)."""

    def __init__(self, dim: int = 384):
        self.identity, self.dim, self.normalize = f"bench:synthetic-{dim}", dim, True
        self._common = np.random.default_rng(12345).standard_normal(dim)
        self._common /= np.linalg.norm(self._common)

    def encode(self, texts: Sequence[str], batch_size: int = 64, normalize: bool | None = None,
               show_progress: bool = False) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            rng = np.random.default_rng(int.from_bytes(hashlib.sha1(t.encode()).digest()[:8], "little"))
            noise = rng.standard_normal(self.dim)
            v = rng.uniform(0.5, 1.2) * self._common + noise / np.linalg.norm(noise)
            out[i] = v / np.linalg.norm(v)
        return out


def synthetic_kg(chunks: int, rng: np.random.Generator) -> Any:
    """A text KG as extraction would give it: topics of 20 chunks drawing 8 entities each from the
    topic's 60 names (1 in 10 from 50 hub names), 6 relations among a chunk's entities."""
    from kgrag_lib.kg.sources import BuiltKG
    from kgrag_lib.kg.extraction import Chunk
    from kgrag_lib.kg.text_kg import assemble

    hubs = [f"Hub {i}" for i in range(50)]
    parts, records = [], []
    for c in range(chunks):
        topic = c // 20
        names = list(dict.fromkeys(hubs[rng.integers(50)] if rng.random() < 0.1
                                   else f"Entity {topic}-{rng.integers(60)}" for _ in range(8)))
        chunk = Chunk(f"p{c}", 0, f"Title {c}", " ".join(f"word{rng.integers(5000)}" for _ in range(120)))
        ents = [{"name": e, "type": "MISC", "aliases": [], "description": f"{e} as chunk {c} describes it."}
                for e in names]
        rels = []
        for _ in range(6):
            s, t = rng.choice(len(names), 2, replace=False) if len(names) > 1 else (0, 0)
            rels.append({"source": names[s], "relation": "related", "target": names[t],
                         "description": f"{names[s]} is related to {names[t]} (chunk {c})."})
        parts.append(chunk)
        records.append({"chunk": chunk.cid, "entities": ents, "relations": rels, "failures": []})
    store, tables, _ = assemble(parts, records)
    return BuiltKG("bench-synthetic", "bench-synthetic", store, {}, {"text": tables})


def real_kg(args: argparse.Namespace) -> tuple[Any, Any, list[str]]:
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.kg.sources import load_kg, needs_llm
    from kgrag_lib.data.selection import CorpusSelection
    from kgrag_lib.llm import load_llm
    from kgrag_lib.retrieval import load_embedder

    llm = load_llm(args.model) if needs_llm(args.kg) else None
    kg = load_kg(args.kg, llm=llm)
    queries: list[str] = []
    if args.kg.startswith("text:"):
        sel = CorpusSelection.parse(args.kg.partition(":")[2])
        queries = [q.question for q in load_questions(sel.dataset, sel.split, n=sel.n, seed=sel.seed)]
    return kg, load_embedder(args.embedder), queries


def bench_retrieval(args: argparse.Namespace) -> dict[str, Any]:
    from kgrag_lib.methods.sa_rag.graph_index import build_graph_index
    from kgrag_lib.methods.sa_rag.retrievers import PPRRetriever, SARetriever, SASettings

    rng = np.random.default_rng(args.seed)
    if args.kg:
        kg, embedder, queries = real_kg(args)
    else:
        kg, embedder, queries = synthetic_kg(args.chunks, rng), SyntheticEmbedder(), []
    queries = (queries or [f"Which entity links Entity {i}-{i % 60} to Hub {i % 50}?" for i in range(args.queries)])
    queries = queries[:args.queries]
    with tempfile.TemporaryDirectory() as tmp:
        index, t_build = timed(lambda: build_graph_index(kg, embedder, Path(tmp), show_progress=False))
    vecs, t_embed = {}, []
    for q in queries:
        vecs[q], t = timed(lambda: np.asarray(embedder.encode([q]), dtype=np.float32)[0])
        t_embed.append(t)
    embed = vecs.__getitem__
    systems = {"SA-RAG k=3 n=4 (MuSiQue)": SARetriever(index, embed, SASettings(k=3, hops=4)),
               "SA-RAG k=10 n=3 (2Wiki)": SARetriever(index, embed, SASettings(k=10, hops=3)),
               "PPR (HippoRAG 2-style) top-5": PPRRetriever(index, embed, top_k=5)}
    out: dict[str, Any] = {"kg": args.kg or f"synthetic ({args.chunks} chunks)", "entities": int(index.text.ids(
        "entity").size), "links": len(index.edge_text), "chunks": len(index.chunk_text), "queries": len(queries),
        "index_build_s": round(t_build, 2), "query_embedding": ms_stats(t_embed), "retrieval": {}}
    for name, r in systems.items():
        r.retrieve(queries[0])  # warm
        times, sizes, docs = [], [], []
        for q in queries:
            got, t = timed(lambda: r.retrieve(q))
            times.append(t)
            sizes.append((got.trace.get("subgraph") or {}).get("entities", 0))
            docs.append(len(got.documents))
        out["retrieval"][name] = {**ms_stats(times), "mean_documents": round(statistics.mean(docs), 2),
                                  "mean_subgraph_entities": round(statistics.mean(sizes), 1) if any(sizes) else None}
    return out


# ---- (b) indexing against the bare backend --------------------------------------------------------------
def bench_indexing(args: argparse.Namespace) -> dict[str, Any]:
    from kgrag_lib.data.selection import CorpusSelection
    from kgrag_lib.kg.extraction import chunk_passages
    from kgrag_lib.methods.sa_rag.extraction import build_text_kg
    from kgrag_lib.llm import load_llm
    from kgrag_lib.studies.sa_rag import PARAGRAPH_SPLITS

    llm = load_llm(args.model, cache=False)
    if llm.backend != "llamacpp":
        return {"skipped": f"the raw ceiling is measured for llama.cpp models only; {args.model} runs on {llm.backend}"}
    split = PARAGRAPH_SPLITS.get(args.index_dataset)   # the question file that ships paragraphs
    sel = CorpusSelection.parse(f"{args.index_dataset}{':' + split if split else ''}:n={args.index_n}:seed={args.seed}")
    passages, _ = sel.passages(Path(args.data_root) if args.data_root else _data_root())
    keep, chunks = [], 0
    for p in passages:                      # whole passages until --index-chunks chunks
        keep.append(p)
        chunks += len(chunk_passages([p]))
        if chunks >= args.index_chunks:
            break
    llm.generate([{"role": "user", "content": "Say OK."}], max_tokens=4)   # load and warm the model
    recorded: list[tuple[Any, Any, str]] = []
    complete = llm._complete

    def record(messages: Any, params: Any) -> Any:
        c = complete(messages, params)
        recorded.append((messages, params, c.text))
        return c

    llm._complete = record  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        (store, stats, _), t_ours = timed(lambda: build_text_kg(keep, llm, Path(tmp) / "journal.jsonl",
                                                                show_progress=False))
    llm._complete = complete  # type: ignore[method-assign]
    bare = llm._llm
    same = 0

    def replay() -> None:
        nonlocal same
        for messages, params, text in recorded:
            bare.reset()
            kwargs = dict(max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p,
                          top_k=params.top_k, min_p=params.min_p, repeat_penalty=params.repeat_penalty,
                          stop=list(params.stop) or None, seed=params.seed)
            if params.json_schema:
                kwargs["response_format"] = {"type": "json_object", "schema": json.loads(params.json_schema)}
            out = bare.create_chat_completion(messages=messages, **kwargs)
            same += (out["choices"][0]["message"].get("content") or "") == text

    _, t_raw = timed(replay)
    return {"model": args.model, "corpus": f"{args.index_dataset} n={args.index_n} seed={args.seed}: "
            f"{len(keep)} passages", "chunks": stats["chunks"], "requests": len(recorded),
            "prompt_tokens": stats["prompt_tokens"], "completion_tokens": stats["completion_tokens"],
            "build_text_kg_s": round(t_ours, 2), "bare_llamacpp_s": round(t_raw, 2),
            "chunks_per_s": round(stats["chunks"] / t_ours, 3),
            "fraction_of_ceiling": round(t_raw / t_ours, 3), "goal_0_9": t_raw / t_ours >= 0.9,
            "identical_outputs": f"{same}/{len(recorded)}"}


def _data_root() -> Path:
    from kgrag_lib.paths import data_root

    return data_root(None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke check): 2,000 nodes / 20,000 links, "
                                                         "100 chunks, 5 queries")
    ap.add_argument("--nodes", type=int, default=100_000, help="(a) subgraph entities")
    ap.add_argument("--edges", type=int, default=1_000_000, help="(a) subgraph links")
    ap.add_argument("--k", type=int, default=3, help="(a) seeds per query")
    ap.add_argument("--c", type=float, default=0.4, help="(a) rescaling factor c")
    ap.add_argument("--tau-a", type=float, default=0.5, help="(a) activation threshold")
    ap.add_argument("--cos-mean", type=float, default=0.3, help="(a) mean query-link cosine")
    ap.add_argument("--cos-std", type=float, default=0.15, help="(a) its standard deviation")
    ap.add_argument("--queries", type=int, default=20, help="queries timed in (a) and (c)")
    ap.add_argument("--skip-a", action="store_true", help="skip (a)")
    ap.add_argument("--chunks", type=int, default=2000, help="(c) chunks of the synthetic text KG")
    ap.add_argument("--kg", default=None, help="(c) a real KG: a saved KG folder or a text: spec (with --model)")
    ap.add_argument("--embedder", default="minilm", help="(c) embedder of a real KG")
    ap.add_argument("--model", default=None, help="(b) the llama.cpp model whose extraction is timed (none: skip b)")
    ap.add_argument("--index-dataset", default="musique", help="(b) dataset whose sampled paragraphs are indexed")
    ap.add_argument("--index-n", type=int, default=2, help="(b) questions sampled")
    ap.add_argument("--index-chunks", type=int, default=20, help="(b) chunks indexed at most (whole passages)")
    ap.add_argument("--data-root", default=None, help="(b) data root (default: the project's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.edges, args.chunks, args.queries = 2000, 20_000, 100, 5

    report: dict[str, Any] = {}
    if not args.skip_a:
        report["a_algorithm1"] = a = bench_algorithm1(args)
        print(f"(a) Algorithm 1, {a['nodes']:,} entities / {a['edges']:,} links, {a['seeds_per_query']} seeds, "
              f"{a['queries']} queries ({a['positive_weights']:.0%} of weights > 0 at c {a['c']}, "
              f"{a['mean_activated']:.0f} activated on average); identical activated sets")
        print(f"    ours  median {a['ours']['median_ms']} ms, p95 {a['ours']['p95_ms']} ms")
        print(f"    dict  median {a['dict_baseline']['median_ms']} ms, p95 {a['dict_baseline']['p95_ms']} ms")
        print(f"    speed-up x{a['speedup_median']} (goal >= 20x: {'met' if a['goal_speedup_20x'] else 'NOT met'}); "
              f"median under 10 ms: {'met' if a['goal_median_under_10ms'] else 'NOT met'}")
    if args.model:
        report["b_indexing"] = b = bench_indexing(args)
        if "skipped" in b:
            print(f"(b) skipped: {b['skipped']}")
        else:
            print(f"(b) indexing {b['chunks']} chunks ({b['requests']} requests) with {b['model']}: build_text_kg "
                  f"{b['build_text_kg_s']} s, bare llama.cpp {b['bare_llamacpp_s']} s -> "
                  f"{b['fraction_of_ceiling']:.2f} of the ceiling (goal >= 0.9: "
                  f"{'met' if b['goal_0_9'] else 'NOT met'}); outputs identical {b['identical_outputs']}")
    else:
        print("(b) skipped: no --model given (indexing throughput needs a real llama.cpp model)")
    report["c_retrieval"] = c = bench_retrieval(args)
    print(f"(c) retrieval with a warm index over {c['kg']}: {c['entities']:,} entities, {c['links']:,} links, "
          f"{c['chunks']:,} chunks (index built in {c['index_build_s']} s); query embedding median "
          f"{c['query_embedding']['median_ms']} ms")
    for name, r in c["retrieval"].items():
        sub = f"subgraph {r['mean_subgraph_entities']} entities, " if r["mean_subgraph_entities"] else ""
        print(f"    {name}: median {r['median_ms']} ms, p95 {r['p95_ms']} ms ({sub}{r['mean_documents']} documents)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
