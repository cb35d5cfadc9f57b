"""Speed of the retrieval layer against naive versions, in one run on this machine.

  top_k_dot : top-K among a question's candidate rows of a memory-mapped embedding matrix,
              vs. a full argsort of all candidate scores and vs. a Python sort.
  cache     : embed_cached cold (encode + write) vs. warm (memory-map the stored .npy).
  index     : DenseIndex flat / ivf / hnsw query time and recall@10 vs. numpy brute force.

    .venv/bin/python bench/retrieval_bench.py --texts 2000 --corpus 100000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from kgrag_lib.paths import data_root
from kgrag_lib.retrieval import DenseIndex, embed_cached, load_embedder, top_k_dot


def timed(fn, repeat=1):
    t = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    return (time.perf_counter() - t) / repeat, out


def bench_top_k(rng, n_rows, dim, n_cand, k, n_q, tmp):
    m = rng.standard_normal((n_rows, dim)).astype(np.float32)
    np.save(tmp / "m.npy", m)
    mm = np.load(tmp / "m.npy", mmap_mode="r")
    qs = rng.standard_normal((n_q, dim)).astype(np.float32)
    cands = [np.sort(rng.choice(n_rows, n_cand, replace=False)) for _ in range(n_q)]

    def fast():
        return [top_k_dot(q, mm, k, c)[1] for q, c in zip(qs, cands)]

    def argsort_all():
        out = []
        for q, c in zip(qs, cands):
            s = np.asarray(mm[c]) @ q
            out.append(c[np.argsort(-s, kind="stable")[:k]])
        return out

    def python_sort():
        out = []
        for q, c in zip(qs, cands):
            s = np.asarray(mm[c]) @ q
            out.append([i for _, i in sorted(zip(s.tolist(), c.tolist()), key=lambda t: (-t[0], t[1]))[:k]])
        return out

    def gather_only():
        return [np.asarray(mm[c]) @ q for q, c in zip(qs, cands)]

    tg, _ = timed(gather_only)
    tf, a = timed(fast)
    ta, b = timed(argsort_all)
    tp, c = timed(python_sort)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and all(list(x) == y for x, y in zip(a, c))
    per = 1000 / n_q
    return {"rows": n_rows, "candidates": n_cand, "k": k, "gather_and_dot_ms": round(tg * per, 3),
            "top_k_dot_ms": round(tf * per, 3),
            "argsort_ms": round(ta * per, 3), "python_sort_ms": round(tp * per, 3)}


def bench_cache(n_texts, tmp):
    kb = data_root() / "metaqa" / "kb.txt"
    if kb.is_file():
        lines = kb.read_text(encoding="utf-8").splitlines()[:n_texts]
        texts = [l.replace("|", " | ") for l in lines]
    else:
        texts = [f"synthetic text number {i}" for i in range(n_texts)]
    emb = load_embedder("minilm")
    cold, arr = timed(lambda: embed_cached(emb, texts, cache_dir=tmp, show_progress=False))
    warm, arr2 = timed(lambda: embed_cached(emb, texts, cache_dir=tmp, show_progress=False), repeat=5)
    assert np.array_equal(np.asarray(arr), np.asarray(arr2))
    return {"texts": len(texts), "cold_s": round(cold, 2), "texts_per_s": round(len(texts) / cold, 1),
            "warm_ms": round(warm * 1000, 2), "speedup": round(cold / warm)}


def bench_index(rng, n, dim, n_q, k):
    centers = rng.standard_normal((200, dim)).astype(np.float32)
    x = centers[rng.integers(0, 200, n)] + 0.35 * rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(n, n_q, replace=False)] + 0.05 * rng.standard_normal((n_q, dim)).astype(np.float32)
    tb, truth = timed(lambda: np.argsort(-(q @ x.T), axis=1)[:, :k])
    out = {"vectors": n, "dim": dim, "queries": n_q, "numpy_brute_ms_per_q": round(tb * 1000 / n_q, 3)}
    for kind in ("flat", "ivf", "hnsw"):
        tbuild, idx = timed(lambda: DenseIndex.build(x, kind=kind))
        ts, (_, ids) = timed(lambda: idx.search(q, k))
        rec = np.mean([len(set(a) & set(b)) / k for a, b in zip(ids, truth)])
        out[kind] = {"build_s": round(tbuild, 2), "ms_per_q": round(ts * 1000 / n_q, 3), "recall@10": round(float(rec), 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=2000, help="texts embedded for the cache benchmark")
    ap.add_argument("--corpus", type=int, default=100_000, help="vectors in the index benchmark")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        report = {
            "top_k_dot": bench_top_k(rng, 133_582, 384, 3000, 30, 300, tmp),
            "index": bench_index(rng, args.corpus, 384, 200, 10),
            "cache": bench_cache(args.texts, tmp),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
