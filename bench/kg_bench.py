"""Benchmark KGStore at Wikidata5M scale against a plain Python dict-of-lists graph.

Builds a synthetic graph with Wikidata5M's size (21M triples, 4.7M entities, ~800 relations)
and power-law degrees (tails Zipf s=1.0 so one hub gets >1M in-edges, like Wikidata's "human";
heads Zipf s=0.6 so every entity has a few out-edges; relations Zipf s=1.1), then reports:
build time, resident memory and bytes per triple, save time, mmap load time, and 2-hop
neighbourhood retrieval (direction "both" and "out") for random start entities.

The baseline is a plain Python implementation: dicts mapping each entity to lists of its triple
ids and of its neighbours, BFS with Python sets, in two variants: "set.update" hands whole
lists to C-level set operations (as fast as plain Python gets), "per-edge loop" visits each edge
in Python (the obvious way to write it). Both return the same set of triple ids under the same
definition; they are not asked to sort it (ours returns sorted ids). Their memory at full scale
would be several GB, so they run on a graph of the same shape scaled by --baseline-scale, and
our store runs on that same scaled graph for a like-with-like comparison. Results are checked
equal on a subsample of queries and their sizes on all queries.

Times are CPU time of the querying thread (time.thread_time), so other processes on a busy
machine do not inflate them; wall-clock totals are printed beside. Garbage collection is
frozen during timing and each result is freed outside the timed region (both favour the
baseline, whose results are millions of Python ints).

    .venv/bin/python bench/kg_bench.py                       # full scale (a few minutes)
    .venv/bin/python bench/kg_bench.py --triples 200000 --entities 50000 --queries 500   # quick
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kgrag_lib.kg import KGStore  # noqa: E402
from kgrag_lib.kg.strings import StringTable  # noqa: E402


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def zipf_ids(rng: np.random.Generator, n_items: int, size: int, exponent: float) -> np.ndarray:
    """`size` draws of item ids with P(rank k) ~ k**-exponent; ranks shuffled over ids."""
    cdf = np.cumsum(np.arange(1, n_items + 1, dtype=np.float64) ** -exponent)
    cdf /= cdf[-1]
    rank_to_id = rng.permutation(n_items).astype(np.int32)
    out = np.empty(size, dtype=np.int32)
    step = 1 << 22
    for i in range(0, size, step):
        m = min(step, size - i)
        out[i:i + m] = rank_to_id[np.minimum(np.searchsorted(cdf, rng.random(m)), n_items - 1)]
    return out


def synthetic_graph(num_triples: int, num_entities: int, num_relations: int, seed: int):
    rng = np.random.default_rng(seed)
    heads = zipf_ids(rng, num_entities, num_triples, 0.6)
    tails = zipf_ids(rng, num_entities, num_triples, 1.0)
    rels = zipf_ids(rng, num_relations, num_triples, 1.1)
    return heads, rels, tails


def names_table(prefix: str, n: int) -> StringTable:
    return StringTable.from_strings(f"{prefix}{i}" for i in range(n))


class DictOfListsGraph:
    """The plain-Python baseline: entity -> list of triple ids / list of neighbours, both directions."""

    def __init__(self, heads: np.ndarray, tails: np.ndarray):
        self.out_ids: dict[int, list[int]] = {}
        self.out_nbr: dict[int, list[int]] = {}
        self.in_ids: dict[int, list[int]] = {}
        self.in_nbr: dict[int, list[int]] = {}
        for i, (h, t) in enumerate(zip(heads.tolist(), tails.tolist())):
            if h in self.out_ids:
                self.out_ids[h].append(i)
                self.out_nbr[h].append(t)
            else:
                self.out_ids[h] = [i]
                self.out_nbr[h] = [t]
            if t in self.in_ids:
                self.in_ids[t].append(i)
                self.in_nbr[t].append(h)
            else:
                self.in_ids[t] = [i]
                self.in_nbr[t] = [h]

    def neighborhood_loop(self, start: int, hops: int, direction: str) -> set[int]:
        """The same BFS visiting every edge in Python."""
        use_out, use_in = direction in ("out", "both"), direction in ("in", "both")
        seen = {start}
        frontier = [start]
        result: set[int] = set()
        empty: list[int] = []
        for _ in range(hops):
            nxt: list[int] = []
            for e in frontier:
                if use_out:
                    for i, t in zip(self.out_ids.get(e, empty), self.out_nbr.get(e, empty)):
                        result.add(i)
                        if t not in seen:
                            seen.add(t)
                            nxt.append(t)
                if use_in:
                    for i, h in zip(self.in_ids.get(e, empty), self.in_nbr.get(e, empty)):
                        result.add(i)
                        if h not in seen:
                            seen.add(h)
                            nxt.append(h)
            frontier = nxt
        return result

    def neighborhood(self, start: int, hops: int, direction: str) -> set[int]:
        use_out, use_in = direction in ("out", "both"), direction in ("in", "both")
        seen = {start}
        frontier = [start]
        result: set[int] = set()
        for level in range(hops):
            last = level == hops - 1
            nxt: set[int] = set()
            for e in frontier:
                if use_out and e in self.out_ids:
                    result.update(self.out_ids[e])
                    if not last:
                        nxt.update(self.out_nbr[e])
                if use_in and e in self.in_ids:
                    result.update(self.in_ids[e])
                    if not last:
                        nxt.update(self.in_nbr[e])
            if last:
                break
            nxt -= seen
            seen |= nxt
            frontier = list(nxt)
        return result


@dataclass
class QueryStats:
    total_s: float
    wall_s: float
    median_ms: float
    p95_ms: float
    triples: int

    def row(self, label: str) -> str:
        return (f"{label:<46} {self.total_s:9.2f} s {self.wall_s:9.2f} s {self.median_ms:9.3f} ms "
                f"{self.p95_ms:9.3f} ms {self.triples:>15,}")


def time_queries(fn, starts: np.ndarray) -> tuple[QueryStats, list[int]]:
    sizes, times = [], []
    clock = time.thread_time
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        wall = time.perf_counter()
        for e in starts.tolist():
            t0 = clock()
            res = fn(e)
            times.append(clock() - t0)
            sizes.append(len(res))
            del res
        wall = time.perf_counter() - wall
    finally:
        gc.enable()
        gc.unfreeze()
    ms = np.array(times) * 1e3
    return QueryStats(float(np.sum(times)), wall, float(np.median(ms)), float(np.percentile(ms, 95)),
                      int(sum(sizes))), sizes


def build_store(args, scale: float, label: str, report: list[str]):
    n_t, n_e = int(args.triples * scale), int(args.entities * scale)
    t0 = time.perf_counter()
    h, r, t = synthetic_graph(n_t, n_e, args.relations, args.seed)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ent_names, rel_names = names_table("Q", n_e), names_table("P", args.relations)
    names_s = time.perf_counter() - t0
    before = rss()
    t0 = time.perf_counter()
    kg = KGStore.from_id_arrays(h, r, t, ent_names, rel_names)
    build_s = time.perf_counter() - t0
    grown = rss() - before  # the input arrays are still alive: this is what the store added
    del h, r, t
    usage = kg.memory_usage()
    core = usage["triples"] + usage["index"]
    out_deg = np.diff(np.asarray(kg._out.indptr))
    in_deg = np.diff(np.asarray(kg._in.indptr))
    report += [
        f"[{label}] graph: {kg.num_triples:,} triples after de-duplication ({n_t:,} drawn), {kg.num_entities:,} "
        f"entities, {kg.num_relations} relations; max out-degree {out_deg.max():,}, max in-degree {in_deg.max():,}, "
        f"entities with no edge {int(((out_deg + in_deg) == 0).sum()):,}",
        f"[{label}] generate {gen_s:.1f} s; names table {names_s:.1f} s; build (dedupe, sort, CSR both ways) "
        f"{build_s:.2f} s",
        f"[{label}] memory: triple arrays {usage['triples'] / 2**20:,.0f} MiB + index {usage['index'] / 2**20:,.0f} MiB"
        f" = {core / kg.num_triples:.2f} bytes/triple (goal < 24); RSS delta of build {grown / 2**20:,.0f} MiB "
        f"= {grown / kg.num_triples:.2f} bytes/triple; names (excluded) {usage['names'] / 2**20:,.0f} MiB",
    ]
    return kg


def bench_full(args, report: list[str], rows: list[str], workdir: Path) -> None:
    kg = build_store(args, 1.0, "full", report)
    path = workdir / "kg_full"
    t0 = time.perf_counter()
    kg.save(path)
    save_s = time.perf_counter() - t0
    disk = sum(f.stat().st_size for f in path.iterdir())
    del kg
    gc.collect()
    before = rss()
    t0 = time.perf_counter()
    kg = KGStore.load(path, mmap=True)
    load_s = time.perf_counter() - t0
    load_rss = rss() - before
    t0 = time.perf_counter()
    e = kg.find_entity("Q12345")
    find_s = time.perf_counter() - t0
    report.append(f"[full] save {save_s:.2f} s ({disk / 2**20:,.0f} MiB on disk, incl. name index); "
                  f"load (mmap, warm page cache) {load_s * 1e3:.1f} ms (goal < 1 s), RSS after load "
                  f"+{load_rss / 2**20:.0f} MiB; first find_entity after load {find_s * 1e3:.1f} ms (id {e})")
    starts = np.random.default_rng(args.seed + 1).choice(kg.num_entities, size=args.queries, replace=True)
    for direction in ("both", "out"):
        stats, _ = time_queries(lambda s: kg.neighborhood(s, 2, direction), starts)
        rows.append(stats.row(f"full    KGStore (mmap) 2-hop {direction}"))
    t0 = time.perf_counter()
    new = kg.add_triples([("Q1", "P1", "Q999999999"), ("Q2", "P2", "Q3")])
    add_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    kg.neighborhood(kg.entity_id("Q999999999"), 2, "in")
    after_add_s = time.perf_counter() - t0
    report.append(f"[full] add_triples of 2 triples to the mmap-loaded store {add_s * 1e3:.0f} ms "
                  f"(first write copies the triple arrays into memory), next 2-hop query {after_add_s * 1e3:.1f} ms; "
                  f"{new.size} new triples")
    del kg
    shutil.rmtree(path, ignore_errors=True)


def bench_scaled(args, report: list[str], rows: list[str]) -> list[str]:
    label = f"x{args.baseline_scale:g}"
    kg = build_store(args, args.baseline_scale, label, report)
    before = rss()
    t0 = time.perf_counter()
    base = DictOfListsGraph(np.asarray(kg.heads), np.asarray(kg.tails))
    base_build_s = time.perf_counter() - t0
    base_mem = rss() - before
    report.append(f"[{label}] dict-of-lists baseline: build {base_build_s:.1f} s, RSS delta {base_mem / 2**20:,.0f} MiB"
                  f" = {base_mem / kg.num_triples:.0f} bytes/triple")
    starts = np.random.default_rng(args.seed + 1).choice(kg.num_entities, size=args.queries, replace=True)
    ratios = []
    baselines = (("set.update", base.neighborhood), ("per-edge loop", base.neighborhood_loop))
    for direction in ("both", "out"):
        ours, our_sizes = time_queries(lambda s: kg.neighborhood(s, 2, direction), starts)
        rows.append(ours.row(f"{label:<7} KGStore 2-hop {direction}"))
        for name, fn in baselines:
            theirs, their_sizes = time_queries(lambda s: fn(s, 2, direction), starts)
            for s in starts[: args.check].tolist():
                if set(kg.neighborhood(s, 2, direction).tolist()) != fn(s, 2, direction):
                    raise AssertionError(f"results differ for entity {s}, direction {direction} ({name})")
            if our_sizes != their_sizes:
                raise AssertionError(f"result sizes differ ({direction}, {name}): {ours.triples} vs {theirs.triples}")
            rows.append(theirs.row(f"{label:<7} dict-of-lists ({name}) 2-hop {direction}"))
            ratios.append(
                f"[{label}] 2-hop {direction}: KGStore vs dict-of-lists ({name}): total CPU "
                f"{theirs.total_s / ours.total_s:.1f}x, median query {theirs.median_ms / ours.median_ms:.2f}x, "
                f"p95 query {theirs.p95_ms / ours.p95_ms:.1f}x (>1 = KGStore faster; goal >= 20x); identical results "
                f"on {min(args.check, args.queries)} checked queries, identical sizes on all {args.queries:,}")
        big = np.array(our_sizes) >= 10_000
        if big.any():
            ratios.append(f"[{label}] 2-hop {direction}: {int(big.sum()):,} of {args.queries:,} queries return "
                          f">= 10,000 triples (they hold {np.array(our_sizes)[big].sum() / max(ours.triples, 1):.0%}"
                          f" of all triples returned)")
    return ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--triples", type=int, default=21_000_000, help="triples drawn at full scale")
    p.add_argument("--entities", type=int, default=4_700_000, help="entities at full scale")
    p.add_argument("--relations", type=int, default=800, help="relations (not scaled)")
    p.add_argument("--queries", type=int, default=10_000, help="random start entities per direction")
    p.add_argument("--baseline-scale", type=float, default=0.1,
                   help="scale of the graph on which the dict-of-lists baseline runs (its memory is ~1 KB/triple)")
    p.add_argument("--check", type=int, default=200, help="queries whose full results are compared")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None, help="where the saved store goes (default: a temp dir)")
    p.add_argument("--skip-full", action="store_true", help="only the scaled comparison")
    args = p.parse_args(argv)

    report: list[str] = []
    rows: list[str] = []
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kg_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    if not args.skip_full:
        bench_full(args, report, rows, workdir)
    ratios = bench_scaled(args, report, rows)

    print("\n".join(report))
    print()
    print(f"{'graph / implementation / query':<46} {'CPU total':>11} {'wall total':>11} {'median CPU':>12} "
          f"{'p95 CPU':>12} {'triples returned':>15}")
    print("\n".join(rows))
    print()
    print("\n".join(ratios))
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
