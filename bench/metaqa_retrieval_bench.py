"""Speed of KG-RAG candidate retrieval + top-K selection on MetaQA (LLM excluded).

Per question: find the topic entity, collect every triple up to N hops (default 3,
bidirectional), embed the question, and select the top-K triples by dot product.

  fast   : KGStore.neighborhood (CSR BFS in numpy) + the whole-KB triple embedding matrix,
           computed once and memory-mapped from the cache; the candidates are scored with one
           vectorized float32 product (top_k_dot); the question is embedded on one thread.
  naive  : a Python dict adjacency BFS over names, verbalizing the candidates and
           re-embedding them with the same embedder for every question, then a dot product.

The naive re-embedding costs minutes per 3-hop question on a CPU, so it runs on the first
`--baseline-n` questions of the same sample (within `--baseline-budget-s`); the naive BFS
alone runs on every question. Figures are milliseconds per question.

    .venv/bin/python bench/metaqa_retrieval_bench.py --n 1000 --baseline-n 3
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import numpy as np

from kgrag_lib.data.metaqa import load_metaqa_kb
from kgrag_lib.data.registry import load_questions
from kgrag_lib.methods.metaqa.candidates import TripleSelector
from kgrag_lib.methods.metaqa.pipeline import RetrievalConfig
from kgrag_lib.methods.metaqa.kb import kb_file, load_kb, verbalize
from kgrag_lib.paths import cache_dir as default_cache_dir
from kgrag_lib.paths import data_root as default_data_root
from kgrag_lib.retrieval import load_embedder, top_k_dot


def stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms, dtype=np.float64)
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size), "median_ms": round(float(np.median(a)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3),
            "mean_ms": round(float(a.mean()), 3), "max_ms": round(float(a.max()), 3)}


class NaiveRetriever:
    """The straightforward version: name-keyed Python dicts, sets, per-question embedding."""

    def __init__(self, kb_path: Path):
        self.triples = [(t.s, t.r, t.o) for t in load_metaqa_kb(kb_path)]
        self.out_adj: dict[str, list[int]] = collections.defaultdict(list)
        self.in_adj: dict[str, list[int]] = collections.defaultdict(list)
        for i, (s, _, o) in enumerate(self.triples):
            self.out_adj[s].append(i)
            self.in_adj[o].append(i)

    def bfs(self, entity: str, hops: int, direction: str) -> list[int]:
        found: set[int] = set()
        visited, frontier = {entity}, {entity}
        for level in range(hops):
            nxt: set[str] = set()
            for e in frontier:
                if direction in ("out", "both"):
                    for i in self.out_adj.get(e, ()):
                        found.add(i)
                        nxt.add(self.triples[i][2])
                if direction in ("in", "both"):
                    for i in self.in_adj.get(e, ()):
                        found.add(i)
                        nxt.add(self.triples[i][0])
            frontier = nxt - visited
            visited |= frontier
        return sorted(found)

    def select(self, embedder, question: str, ids: list[int], k: int) -> list[str]:
        texts = [verbalize(*self.triples[i]) for i in ids]
        if not texts:
            return []
        mat = embedder.encode(texts, batch_size=64)
        qv = embedder.encode([question])[0]
        scores = mat @ qv
        order = np.argsort(-scores, kind="stable")[:k]
        return [texts[j] for j in order]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="metaqa-3hop")
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=1000, help="questions timed on the fast path and the naive BFS")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--direction", default="both")
    ap.add_argument("--top-k", type=int, default=30)
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--query-threads", type=int, default=RetrievalConfig.query_threads,
                    help="torch threads per question (0: torch default)")
    ap.add_argument("--baseline-n", type=int, default=3, help="questions for the naive re-embedding baseline")
    ap.add_argument("--baseline-budget-s", type=float, default=900.0, help="stop the naive baseline after this many seconds")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()

    root, cache = default_data_root(args.data_root), default_cache_dir(args.cache_dir)
    questions = load_questions(args.dataset, split=args.split, n=args.n, seed=args.seed, root=root)
    embedder = load_embedder(args.embedder)
    t = time.perf_counter()
    kb = load_kb(root, cache, embedder)
    setup_s = time.perf_counter() - t
    cfg = RetrievalConfig(hops=args.hops, top_k=args.top_k, direction=args.direction, query_threads=args.query_threads)
    sel = TripleSelector(kb, embedder, cfg)
    print(f"{len(questions)} {args.dataset}/{args.split} questions (seed {args.seed}); N={args.hops} "
          f"{args.direction}, K={args.top_k}; embedder {embedder.identity} (dim {embedder.dim}); "
          f"KB {kb.store.num_triples} triples; store + embedding matrix ready in {setup_s:.2f} s "
          f"(a first run computes and caches the embeddings); "
          f"{cfg.query_threads or 'default'} torch thread(s) per question")

    # warm up: page in the memory map and the model
    for q in questions[:5]:
        ids, _ = sel.resolve(q.topic_entities)
        sel.select(q.question, sel.candidates(ids))

    total, bfs_ms, enc_ms, top_ms, ncand = [], [], [], [], []
    fast_top: dict[str, list[str]] = {}
    for q in questions:
        t0 = time.perf_counter()
        ids, _ = sel.resolve(q.topic_entities)
        cand = sel.candidates(ids)
        t1 = time.perf_counter()
        qv = sel.encode(q.question)
        t2 = time.perf_counter()
        _, top_ids = top_k_dot(qv, kb.embeddings, cfg.top_k, cand)
        t3 = time.perf_counter()
        total.append((t3 - t0) * 1e3)
        bfs_ms.append((t1 - t0) * 1e3)
        enc_ms.append((t2 - t1) * 1e3)
        top_ms.append((t3 - t2) * 1e3)
        ncand.append(cand.size)
        fast_top[q.qid] = kb.texts(top_ids)

    naive = NaiveRetriever(kb_file(root))
    naive_bfs = []
    for q in questions:
        t0 = time.perf_counter()
        naive.bfs(q.topic_entities[0], args.hops, args.direction)
        naive_bfs.append((time.perf_counter() - t0) * 1e3)

    base_ms, base_fast_ms, overlaps = [], [], []
    started = time.perf_counter()
    for i, q in enumerate(questions[: args.baseline_n]):
        if time.perf_counter() - started > args.baseline_budget_s:
            print(f"naive baseline stopped after {i} questions (budget {args.baseline_budget_s:.0f} s)")
            break
        t0 = time.perf_counter()
        top = naive.select(embedder, q.question, naive.bfs(q.topic_entities[0], args.hops, args.direction), args.top_k)
        base_ms.append((time.perf_counter() - t0) * 1e3)
        base_fast_ms.append(total[i])
        overlaps.append(len(set(top) & set(fast_top[q.qid])) / max(1, min(args.top_k, len(top))))

    c = np.asarray(ncand)
    report = {
        "questions": len(questions), "dataset": args.dataset, "hops": args.hops, "direction": args.direction,
        "query_threads": cfg.query_threads,
        "top_k": args.top_k, "embedder": embedder.identity, "kb_triples": int(kb.store.num_triples),
        "candidates_per_question": {"median": int(np.median(c)), "p95": int(np.percentile(c, 95)), "max": int(c.max())},
        "fast_total": stats(total), "fast_without_question_embedding": stats([b + t for b, t in zip(bfs_ms, top_ms)]),
        "fast_bfs": stats(bfs_ms), "fast_encode_question": stats(enc_ms),
        "fast_top_k": stats(top_ms), "naive_bfs": stats(naive_bfs),
        "naive_bfs_over_fast_bfs_median": round(float(np.median(naive_bfs) / np.median(bfs_ms)), 1),
        "naive_full_subset": stats(base_ms), "fast_total_same_subset": stats(base_fast_ms),
        "naive_full_over_fast_same_subset_median": (round(float(np.median(base_ms) / np.median(base_fast_ms)), 1)
                                                    if base_ms else None),
        "naive_vs_fast_top_k_overlap": round(float(np.mean(overlaps)), 3) if overlaps else None,
        "goal_median_under_20ms": bool(np.median(total) < 20.0),
    }
    fmt = lambda s: f"median {s['median_ms']:.2f} ms, p95 {s['p95_ms']:.2f} ms (n={s['n']})"  # noqa: E731
    print(f"candidates per question: median {report['candidates_per_question']['median']}, "
          f"p95 {report['candidates_per_question']['p95']}, max {report['candidates_per_question']['max']}")
    print(f"fast, total per question      : {fmt(report['fast_total'])}   goal median < 20 ms: "
          f"{'met' if report['goal_median_under_20ms'] else 'NOT met'}")
    print(f"  without the question embedding: {fmt(report['fast_without_question_embedding'])}")
    print(f"  BFS (KGStore.neighborhood)  : {fmt(report['fast_bfs'])}")
    print(f"  question embedding          : {fmt(report['fast_encode_question'])}")
    print(f"  top-K over cached matrix    : {fmt(report['fast_top_k'])}")
    print(f"naive Python dict BFS only    : {fmt(report['naive_bfs'])}  -> {report['naive_bfs_over_fast_bfs_median']}x the fast BFS")
    if base_ms:
        print(f"naive BFS + re-embedding      : {fmt(report['naive_full_subset'])}  on the first {len(base_ms)} "
              f"questions only (re-embedding is slow)")
        print(f"fast path on those questions  : {fmt(report['fast_total_same_subset'])}  -> naive/fast = "
              f"{report['naive_full_over_fast_same_subset_median']}x; top-K overlap {report['naive_vs_fast_top_k_overlap']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
