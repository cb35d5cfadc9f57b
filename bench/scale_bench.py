"""Compressed faiss indexes at scale, built once and memory-mapped, against faiss's flat fp32 index.

KG-Infused RAG retrieves from Wikipedia-2018 (21,015,324 passages) and Wikidata5M's 4,665,331
entity descriptions, both as 768-d Contriever vectors. For each --sizes n, on synthetic vectors
of that shape, this measures with the project's own code (`cached_index`, `DenseIndex`):

  build     : `cached_index` in a fresh process: train + add (build_s, from the meta file), the
              recall@k it measures against exact search, peak RSS (ru_maxrss, which also counts
              the memory-mapped input vectors' pages) and peak anonymous RSS (sampled every 20 ms:
              what the process itself allocated), bytes on disk (and against the size formula);
  load      : `cached_index` again in a second process: it loads the saved file memory-mapped
              (load_s, its anonymous / file-backed RSS), then batched search latency: 64 queries
              per batch, top-6 (median and p90 over --batches batches, after one warm-up batch);
  flat fp32 : the baseline, `DenseIndex.build(kind="flat")` in its own process: build time,
              memory n*d*4 (and measured), the same batches' latency; exact, so recall 1.

Every step runs in its own subprocess, so one size's memory never shows in another's figures.
The vectors are a gaussian mixture: ~1000 points per centre, each point = centre + a component in
a shared 32-d subspace + small isotropic noise, normalized. Real embeddings have such low
intrinsic dimension; i.i.d. random unit vectors have none (all neighbours nearly equidistant),
so on them IVF/PQ recall would be far lower than on real text embeddings. Queries are held-out
draws of the same mixture. Then a projection to 21,015,324 and 4,665,331 vectors (see the notes
printed with it) and, with --json, every figure written to a file.

    .venv/bin/python bench/scale_bench.py --sizes 1e5 --json results/reference/index-scale/scale-1e5.json
    .venv/bin/python bench/scale_bench.py --sizes 1e5 1e6 1e7 --work-dir /big/disk/scale   # keeps data and indexes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGETS = {"Wikipedia-2018 passages": 21_015_324, "Wikidata5M entities": 4_665_331}
DEFAULT_FACTORIES = ["IVF{nlist},SQ8", "IVF{nlist},PQ{m}"]
K = 6
BATCH = 64
RECALL_QUERIES = 1000
SUBSPACE = 32
CHILD_MARK = "SCALE_BENCH_RESULT "


# ----------------------------------------------------------------------------- data

def dataset_paths(work: Path, n: int, d: int, seed: int) -> tuple[Path, Path]:
    return work / f"vectors-n{n}-d{d}-s{seed}.npy", work / f"queries-d{d}-s{seed}.npy"


def _mixture(n: int, d: int, seed: int, stream: int, centres: np.ndarray, basis: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng([seed, stream])
    z = rng.integers(0, centres.shape[0], n)
    x = centres[z] + (0.6 / math.sqrt(SUBSPACE)) * (rng.standard_normal((n, SUBSPACE)).astype(np.float32) @ basis)
    x += (0.25 / math.sqrt(d)) * rng.standard_normal((n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def generate(path: Path, qpath: Path, n: int, d: int, seed: int, n_queries: int, block: int = 65_536) -> None:
    """Write the (n, d) vectors block by block to an .npy (never all in RAM) and the queries."""
    rng = np.random.default_rng([seed, 0])
    n_centres = max(100, n // 1000)
    centres = rng.standard_normal((n_centres, d)).astype(np.float32) / math.sqrt(d)
    basis = rng.standard_normal((SUBSPACE, d)).astype(np.float32) / math.sqrt(d)
    part = path.with_name(path.name + ".partial.npy")
    out = np.lib.format.open_memmap(part, mode="w+", dtype=np.float32, shape=(n, d))
    for b, start in enumerate(range(0, n, block)):
        out[start:start + block] = _mixture(min(block, n - start), d, seed, 1 + b, centres, basis)
    out.flush()
    del out
    os.replace(part, path)
    # Queries: the same mixture for a size's centres count; a fixed stream so every size gets its own.
    np.save(qpath.with_name(f"{qpath.stem}-n{n}.npy"), _mixture(n_queries, d, seed, 10**6, centres, basis))


def queries_path(qpath: Path, n: int) -> Path:
    return qpath.with_name(f"{qpath.stem}-n{n}.npy")


# ----------------------------------------------------------------------------- child-side measuring

class PeakAnon:
    """Peak anonymous RSS (MiB), sampled from /proc/self/status every 20 ms (Linux; else None)."""

    def __init__(self) -> None:
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        if self.peak is not None:
            self._thread.start()

    @staticmethod
    def now(field: str = "RssAnon") -> float | None:
        try:
            for line in open("/proc/self/status"):
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            v = self.now()
            if v is not None and v > (self.peak or 0):
                self.peak = v

    def stop(self) -> float | None:
        self._stop.set()
        v = self.now()
        if v is not None and v > (self.peak or 0):
            self.peak = v
        return None if self.peak is None else round(self.peak, 1)


def ru_maxrss_mib() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(r / 1024 / (1024 if sys.platform == "darwin" else 1), 1)


def batch_latency(index, queries: np.ndarray, batches: int) -> dict:
    """ms per batch of BATCH queries, top-K: one warm-up batch, then `batches` timed ones."""
    def batch(i: int) -> np.ndarray:
        start = (i * BATCH) % max(1, len(queries) - BATCH + 1)
        return np.ascontiguousarray(queries[start:start + BATCH])

    index.search(batch(0), K)
    times = []
    for i in range(1, batches + 1):
        q = batch(i)
        t = time.perf_counter()
        index.search(q, K)
        times.append((time.perf_counter() - t) * 1000)
    med = float(np.median(times))
    return {"batch_ms_median": round(med, 3), "batch_ms_p90": round(float(np.percentile(times, 90)), 3),
            "query_ms": round(med / BATCH, 4), "batches": batches}


def child(spec: dict) -> dict:
    import faiss

    if spec.get("threads"):
        faiss.omp_set_num_threads(int(spec["threads"]))
    path, qpath = Path(spec["path"]), Path(spec["qpath"])
    if spec["step"] == "gen":
        t = time.perf_counter()
        generate(path, qpath, spec["n"], spec["d"], spec["seed"], spec["n_queries"])
        return {"gen_s": round(time.perf_counter() - t, 2)}
    import logging

    from kgrag_lib.retrieval import DenseIndex, cached_index
    from kgrag_lib.retrieval.index_store import saved_meta

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("kgrag_lib.retrieval").addHandler(Keep())
    logging.getLogger("kgrag_lib.retrieval").setLevel(logging.INFO)
    vectors = np.load(path, mmap_mode="r")
    queries = np.load(queries_path(qpath, spec["n"]))
    anon0 = PeakAnon.now()
    if spec["step"] == "flat":
        peak = PeakAnon()
        t = time.perf_counter()
        index = DenseIndex.build(vectors, kind="flat", placement="cpu")
        build_s = time.perf_counter() - t
        out = {"build_s": round(build_s, 2), "memory_bytes_formula": int(vectors.shape[0] * vectors.shape[1] * 4),
               "anon_growth_mib": round(PeakAnon.now() - anon0, 1), "peak_anon_mib": peak.stop(),
               "peak_rss_mib": ru_maxrss_mib()}
        out.update(batch_latency(index, queries, spec["batches"]))
        return out
    kwargs = dict(cache_dir=spec["work"], metric="ip", label="scale-bench", recall_queries=queries[:RECALL_QUERIES],
                  recall_k=K, placement="cpu", search_params=spec.get("search_params"))
    peak = PeakAnon()
    t = time.perf_counter()
    index = cached_index(vectors, spec["key"], spec["factory"], **kwargs)
    wall = time.perf_counter() - t
    path_line = next((l for l in lines if l.startswith(("built index", "loaded saved index"))), "")
    saved = next((Path(w) for w in path_line.split() if w.endswith(".faiss")), None)
    meta = saved_meta(saved) if saved else {}
    def secs(prefix: str) -> float | None:
        line = next((l for l in lines if l.startswith(prefix)), "")
        return float(line.rsplit(" in ", 1)[1].split()[0]) if " in " in line else None

    out = {"factory": index.kind, "wall_s": round(wall, 2), "train_s": secs("trained "), "add_s": secs("added "), "reused": path_line.startswith("loaded saved index"),
           "log": path_line, "anon_after_mib": round(PeakAnon.now() - anon0, 1),
           "file_after_mib": PeakAnon.now("RssFile"), "peak_anon_mib": peak.stop(), "peak_rss_mib": ru_maxrss_mib(),
           "bytes": meta.get("bytes"), "build_s": meta.get("build_seconds"), "recall": meta.get("recall"),
           "params": meta.get("params"), "mmapped": index.mmapped}
    if spec["step"] == "load":
        out["load_s"] = out.pop("wall_s")
        out.update(batch_latency(index, queries, spec["batches"]))
        out["anon_after_search_mib"] = round(PeakAnon.now() - anon0, 1)
        out["file_after_search_mib"] = PeakAnon.now("RssFile")
        out["rescored"] = rescored_rows(index, vectors, queries, spec.get("rescore") or [], spec["batches"])
    return out


def rescored_rows(index, vectors: np.ndarray, queries: np.ndarray, depths: list[int], batches: int) -> list[dict]:
    """The same saved index with its top k x depth re-ranked exactly from the memory-mapped vectors
    (`<factory>+rescore<depth>`): recall@k against exact search on the recall queries, and latency."""
    if not depths:
        return []
    from kgrag_lib.retrieval import exact_search
    from kgrag_lib.retrieval.index_recall import recall_at_k
    from kgrag_lib.retrieval.rescored import RescoredIndex

    sample = queries[:RECALL_QUERIES]
    _, truth = exact_search(vectors, sample, K)
    out = []
    for depth in depths:
        wrapped = RescoredIndex(index, vectors, depth)
        out.append({"depth": depth, "recall": round(recall_at_k(wrapped, truth, sample, K), 4),
                    **batch_latency(wrapped, queries, batches)})
    return out


def run_child(spec: dict) -> dict:
    """Run one step in a fresh interpreter; its last marked stdout line is the result."""
    p = subprocess.run([sys.executable, __file__, "--_child", json.dumps(spec)], capture_output=True, text=True)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(CHILD_MARK):
            return json.loads(line[len(CHILD_MARK):])
    sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
    raise SystemExit(f"step {spec['step']} (n={spec.get('n')}, {spec.get('factory', '')}) failed, exit {p.returncode}")


# ----------------------------------------------------------------------------- sizes, formula, projection

def expand(factory: str, n: int, d: int, pq_m: int) -> str:
    from kgrag_lib.retrieval.index import expand_factory

    return expand_factory(factory.replace("{m}", str(pq_m)), n)


def formula_bytes(factory: str, n: int, d: int) -> tuple[int, str]:
    """Bytes on disk predicted from the index's structure: codes + 8-byte ids per vector + coarse
    centroids (IVF); codes + HNSW links (2M level-0 neighbours, ~M/(M-1) above, 4 bytes each, plus
    an 8-byte offset and a 4-byte level per vector); codebooks (PQ: 256 x d floats; SQ8: 2 x d)."""
    import re

    import faiss

    from kgrag_lib.retrieval.index import new_factory_index

    index = new_factory_index(d, factory, "ip")
    ivf = faiss.try_extract_index_ivf(index)
    pq = re.search(r"PQ(\d+)(?:x(\d+))?", factory)
    books = (2 ** int(pq.group(2) or 8)) * d * 4 if pq else (2 * d * 4 if "SQ8" in factory else 0)
    if ivf is not None:
        return n * (int(ivf.code_size) + 8) + int(ivf.nlist) * d * 4 + books, "n*(code+8) + nlist*d*4 + codebooks"
    m = re.search(r"HNSW(\d+)", factory)
    if m:
        M = int(m.group(1))
        code = int(faiss.downcast_index(index).storage.sa_code_size()) if hasattr(index, "storage") else 4 * d
        per = code + 4 * (2 * M + M / (M - 1)) + 12
        return int(n * per) + books, "n*(code + 4*(2M + M/(M-1)) + 12) + codebooks"
    return n * int(index.sa_code_size()) + books, "n*code + codebooks"


def codes_scanned(row: dict, n: int) -> float:
    """Codes one query reads: nprobe lists of n/nlist codes (IVF), n (flat)."""
    from kgrag_lib.retrieval.index import factory_nlist

    nlist = factory_nlist(row.get("factory", "")) if row.get("factory") else None
    if nlist and row.get("params"):
        nprobe = row["params"]["search"].get("nprobe", 1)
        return min(nprobe, nlist) * n / nlist
    return float(n)


def project(rows: list[dict], flat: dict, d: int, pq_m: int, factories: list[str]) -> list[dict]:
    """Per factory template and target: bytes by the size formula checked on the measured sizes
    and linearly from the largest measured size; build time linear in n (a lower bound for IVF:
    k-means costs train_size * nlist and adding n * nlist distance computations, both growing
    faster than n with nlist ~ 4*sqrt(n)); query latency scaled by the codes a query scans
    (nprobe * n / nlist; n for flat), at the default nprobe for that n."""
    from kgrag_lib.retrieval.index import default_nprobe, factory_nlist

    out = []
    biggest = max(r["n"] for r in rows)
    for template in factories:
        measured = [r for r in rows if r["template"] == template and r["n"] == biggest][0]
        n0 = measured["n"]
        scan0 = codes_scanned(measured, n0)
        for name, n in TARGETS.items():
            fac = expand(template, n, d, pq_m)
            nlist = factory_nlist(fac)
            scan = min(default_nprobe(nlist), nlist) * n / nlist if nlist else float(n)
            fb, _ = formula_bytes(fac, n, d)
            out.append({"target": name, "n": n, "factory": fac, "bytes_formula": fb,
                        "bytes_linear": int(measured["bytes"] / n0 * n),
                        "build_s_linear": round(measured["build_s"] / n0 * n, 1),
                        "query_ms": round(measured["query_ms"] * scan / scan0, 3),
                        "nprobe": default_nprobe(nlist) if nlist else None})
    for name, n in TARGETS.items():
        out.append({"target": name, "n": n, "factory": "flat fp32 (baseline)", "bytes_formula": n * d * 4,
                    "bytes_linear": n * d * 4, "build_s_linear": round(flat["build_s"] / flat["n"] * n, 1),
                    "query_ms": round(flat["query_ms"] * n / flat["n"], 3), "nprobe": None})
    return out


# ----------------------------------------------------------------------------- printing

def _mb(b: float | None) -> str:
    return "–" if b is None else (f"{b / 1e9:.2f} GB" if b >= 1e9 else f"{b / 1e6:.1f} MB")


def table(rows: list[dict], flats: dict[int, dict]) -> str:
    head = ("| n | index | build s (train + add) | peak RSS / anon MiB | on disk | formula | 2nd-process load s (anon / file MiB) "
            "| 64-q batch ms (p90) | per query ms | recall@6 |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for n in sorted(flats):
        for r in (x for x in rows if x["n"] == n):
            lines.append(f"| {n:,} | {r['factory']} | {r['build_s']} ({r['train_s']} + {r['add_s']}) | {r['peak_rss_mib']:.0f} / {r['peak_anon_mib']:.0f} "
                         f"| {_mb(r['bytes'])} | {r['formula_ratio']:.3f}x | {r['load_s']} ({r['load_anon_mib']:.0f} / "
                         f"{r['load_file_mib']:.0f}) | {r['batch_ms_median']} ({r['batch_ms_p90']}) | {r['query_ms']} "
                         f"| {r['recall']['value']:.3f} |")
            for x in r.get("rescored", []):
                lines.append(f"| {n:,} | {r['factory']}+rescore{x['depth']} | (the same file) | | {_mb(r['bytes'])} "
                             f"+ the fp32 vectors read {x['depth'] * K} rows per query | | | {x['batch_ms_median']} "
                             f"({x['batch_ms_p90']}) | {x['query_ms']} | {x['recall']:.3f} |")
        f = flats[n]
        lines.append(f"| {n:,} | flat fp32 (faiss, baseline) | {f['build_s']} | {f['peak_rss_mib']:.0f} / "
                     f"{f['peak_anon_mib']:.0f} | {_mb(f['memory_bytes_formula'])} in RAM | n·d·4 | rebuilt per "
                     f"process | {f['batch_ms_median']} ({f['batch_ms_p90']}) | {f['query_ms']} | 1 (exact) |")
    return "\n".join(lines)


def projection_table(proj: list[dict]) -> str:
    lines = ["| target | n | index | bytes (formula) | bytes (linear from measured) | build s (linear) "
             "| per-query ms (scan model) |", "|---|---|---|---|---|---|---|"]
    for p in proj:
        probe = f" (nprobe {p['nprobe']})" if p["nprobe"] else ""
        lines.append(f"| {p['target']} | {p['n']:,} | {p['factory']}{probe} "
                     f"| {_mb(p['bytes_formula'])} | {_mb(p['bytes_linear'])} | {p['build_s_linear']:,} "
                     f"| {p['query_ms']} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e5], help="vector counts, e.g. 1e5 1e6 1e7")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--factory", action="append", default=None,
                    help="faiss index_factory string, repeatable; {nlist} = ~4*sqrt(n), {m} = --pq-m "
                         f"(default: {' and '.join(DEFAULT_FACTORIES)})")
    ap.add_argument("--pq-m", type=int, default=64, help="PQ sub-quantizers for {m} (must divide --dim)")
    ap.add_argument("--nprobe", type=int, default=None, help="override the default nprobe (1/64 of the lists, at least 16)")
    ap.add_argument("--batches", type=int, default=30, help=f"timed batches of {BATCH} queries")
    ap.add_argument("--threads", type=int, default=None, help="faiss OpenMP threads (default: faiss's)")
    ap.add_argument("--rescore", type=int, nargs="*", default=[],
                    help="also time each index with its top k x N re-ranked exactly (`+rescoreN`), for each N given")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", type=Path, default=None, help="keep data and indexes here (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        print(CHILD_MARK + json.dumps(child(json.loads(args._child))), flush=True)
        return
    factories = args.factory or DEFAULT_FACTORIES
    sizes = [int(s) for s in args.sizes]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kgrag-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    common = {"d": args.dim, "seed": args.seed, "threads": args.threads, "work": str(work), "batches": args.batches}
    rows, flats, gens = [], {}, {}
    try:
        for n in sizes:
            path, qpath = dataset_paths(work, n, args.dim, args.seed)
            spec = {**common, "n": n, "path": str(path), "qpath": str(qpath)}
            if not path.exists() or not queries_path(qpath, n).exists():
                gens[n] = run_child({**spec, "step": "gen", "n_queries": max(RECALL_QUERIES, BATCH * 4)})
            for template in factories:
                fac = expand(template, n, args.dim, args.pq_m)
                sp = {**spec, "factory": fac, "key": f"scale-bench-n{n}-d{args.dim}-seed{args.seed}",
                      "search_params": {"nprobe": args.nprobe} if args.nprobe else None, "rescore": args.rescore}
                b = run_child({**sp, "step": "build"})
                ld = run_child({**sp, "step": "load"})
                if not ld["reused"]:
                    raise SystemExit(f"the second process rebuilt {fac} instead of loading it: {ld['log']}")
                fb, how = formula_bytes(fac, n, args.dim)
                rows.append({"n": n, "template": template, "factory": fac, "build_s": b["build_s"],
                             "train_s": b["train_s"], "add_s": b["add_s"],
                             "first_call_wall_s": b["wall_s"], "peak_rss_mib": b["peak_rss_mib"],
                             "peak_anon_mib": b["peak_anon_mib"], "bytes": b["bytes"], "bytes_formula": fb,
                             "formula": how, "formula_ratio": b["bytes"] / fb, "recall": b["recall"],
                             "params": b["params"], "load_s": ld["load_s"], "load_log": ld["log"],
                             "load_anon_mib": ld["anon_after_mib"], "load_file_mib": ld["file_after_mib"],
                             "anon_after_search_mib": ld["anon_after_search_mib"],
                             "file_after_search_mib": ld["file_after_search_mib"], "mmapped": ld["mmapped"],
                             **{k: ld[k] for k in ("batch_ms_median", "batch_ms_p90", "query_ms", "batches")},
                             "rescored": ld["rescored"]})
                print(f"n={n:,} {fac}: build {b['build_s']} s, {_mb(b['bytes'])}, recall@{K} "
                      f"{b['recall']['value']:.3f}; second process loaded it in {ld['load_s']} s", flush=True)
                for r in ld["rescored"]:
                    print(f"n={n:,} {fac}+rescore{r['depth']}: recall@{K} {r['recall']:.3f}, "
                          f"{r['query_ms']} ms per query (batches of {BATCH})", flush=True)
            flats[n] = {"n": n, **run_child({**spec, "step": "flat"})}
            print(f"n={n:,} flat fp32: build {flats[n]['build_s']} s, {flats[n]['batch_ms_median']} ms / batch",
                  flush=True)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    import faiss

    proj = project(rows, flats[max(flats)], args.dim, args.pq_m, factories)
    print(f"\n## Measured (d={args.dim}, top-{K}, batches of {BATCH} queries, faiss {faiss.__version__}, "
          f"{os.cpu_count()} cores, threads={args.threads or 'faiss default'})\n")
    print(table(rows, flats))
    print(f"\n## Projection from n={max(flats):,}\n")
    print(projection_table(proj))
    print("\nBytes: the formula (checked above as on-disk / formula) at the target n, and linearly from the largest "
          "measured size (fixed parts, codebooks and centroids, make that overstate small n). Build: linear in n is a "
          "lower bound for IVF (k-means costs train_size*nlist, adding n*nlist distances; nlist ~ 4*sqrt(n)). "
          "Query latency: proportional to the codes one query scans (nprobe*n/nlist for IVF at the default nprobe "
          "for that n; n for flat), same threads, codes in RAM or page cache. The measured time also holds the "
          "coarse quantizer (nlist*d per query, growing only as sqrt(n)), a large share at small n, so the model "
          "overstates IVF at 21M; a cold page cache (lists read from disk) comes on top.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"dim": args.dim, "k": K, "batch": BATCH, "threads": args.threads,
                                         "cores": os.cpu_count(), "faiss": faiss.__version__, "sizes": sizes,
                                         "generate": gens, "indexes": rows, "flat": flats, "projection": proj},
                                        indent=1))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
