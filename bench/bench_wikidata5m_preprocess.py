"""Wikidata5M preprocessing: vectorized streaming reader vs a naive per-line Python reading.

Full Wikidata5M is not on this machine, so the script writes synthetic files in the exact real
formats (Q/P ids, alias and description files) with Wikidata5M's proportions (about 4.5 triples
per entity, ~5% of entities without description) and times both implementations of the
KG-Infused RAG filter in separate processes, printing wall time and peak RSS of each.

    .venv/bin/python bench/bench_wikidata5m_preprocess.py --triples 2000000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

import numpy as np


def write_files(folder: Path, n_triples: int, seed: int = 0) -> dict[str, Path]:
    rng = np.random.default_rng(seed)
    n_ent = max(10, n_triples * 10 // 45)
    qnums = np.sort(rng.choice(np.arange(1, n_ent * 20), size=n_ent, replace=False))
    pnums = np.arange(1, 829)
    h = qnums[rng.integers(0, n_ent, n_triples)]
    t = qnums[np.minimum(rng.zipf(1.3, n_triples) - 1, n_ent - 1)]  # skewed tails, like Wikidata
    r = pnums[np.minimum(rng.zipf(1.5, n_triples) - 1, pnums.size - 1)]
    paths = {k: folder / f"{k}.txt" for k in ("triples", "entity", "relation", "text")}
    with open(paths["triples"], "w") as f:
        for i in range(0, n_triples, 500_000):
            sl = slice(i, i + 500_000)
            f.write("".join(f"Q{a}\tP{b}\tQ{c}\n" for a, b, c in zip(h[sl].tolist(), r[sl].tolist(), t[sl].tolist())))
    described = qnums[rng.random(n_ent) > 0.05]
    with open(paths["text"], "w") as f:
        f.write("".join(f"Q{q}\tEntity {q} is a thing described in a sentence of moderate length.\n"
                        for q in described.tolist()))
    with open(paths["entity"], "w") as f:
        f.write("".join(f"Q{q}\tname {q}\talias {q}\n" for q in qnums.tolist()))
    with open(paths["relation"], "w") as f:
        f.write("".join(f"P{p}\trelation {p}\n" for p in pnums.tolist()))
    return paths


def vectorized(paths: dict[str, Path]) -> tuple[int, int, int]:
    from kgrag_lib.data.wikidata5m import preprocess_wikidata5m

    kg, stats = preprocess_wikidata5m(paths["triples"], paths["entity"], paths["relation"], paths["text"])
    return stats["kept"]["entities"], stats["kept"]["relations"], stats["kept"]["triples"]


def naive(paths: dict[str, Path]) -> tuple[int, int, int]:
    """The obvious reading: Python tuples and sets per triple."""
    triples = [tuple(line.rstrip("\n").split("\t")) for line in open(paths["triples"])]
    described = {line.split("\t", 1)[0] for line in open(paths["text"]) if line.split("\t", 1)[1].strip()}
    heads = {h for h, _, _ in triples}
    kept = heads & described
    out = [(h, r, t) for h, r, t in triples if h in kept and t in kept]
    names = {}
    for line in open(paths["entity"]):
        parts = line.rstrip("\n").split("\t")
        if parts[0] in kept:
            names[parts[0]] = parts[1:]
    return len(kept), len({r for _, r, _ in out}), len(out)


def _child(fn_name: str, paths: dict[str, Path], q: mp.Queue) -> None:
    t0 = time.perf_counter()
    result = globals()[fn_name](paths)
    q.put((result, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def measure(fn_name: str, paths: dict[str, Path]) -> tuple[tuple, float, float]:
    q: mp.Queue = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_child, args=(fn_name, paths, q))
    p.start()
    out = q.get()
    p.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triples", type=int, default=2_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        paths = write_files(Path(d), args.triples)
        size_mb = sum(p.stat().st_size for p in paths.values()) / 2**20
        print(f"synthetic Wikidata5M-format files: {args.triples:,} triples, {size_mb:.0f} MiB "
              f"(written in {time.perf_counter() - t0:.1f} s)")
        results = {}
        for name in ("vectorized", "naive"):
            res, secs, rss = measure(name, paths)
            results[name] = res
            print(f"{name:>10}: {secs:7.2f} s   peak RSS {rss:7.0f} MiB   kept (entities, relations, triples) = {res}")
        assert results["vectorized"] == results["naive"], "implementations disagree"
        scale = 21_354_359 / args.triples
        print(f"linear extrapolation to 21.35M triples: x{scale:.1f} of the figures above")


if __name__ == "__main__":
    main()
