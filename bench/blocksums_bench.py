"""What the stores' block checksums cost: each store opened and read with them, and without them
(the naive baseline: the same code with the checks switched off), in the same run.

- KG store (`KGStore.load` checks every MiB of every file): load with and without `check_files`.
- Passage store (sizes on open; each 64 KiB block the first time a read touches it): open, random
  rows (first touch: every row pays its blocks' crc) and a full `iter_texts` pass, with the
  columns' checks and with them removed.
- Saved faiss index (every MiB checked at load): `DenseIndex.load` alone, and the check added.
- Embedding array (`emb_cache`: whole on open up to FULL_CHECK_BYTES, else a sample on open and
  each 64 KiB block at its first row read): the whole check on open, the sampled open, re-ranking
  style scattered row reads after a fresh open, and a block-by-block pass over every row (what an
  index build does), each against a plain `np.load(mmap_mode="r")` of the same file.

Each timing is the median of `--repeat` runs on files in the page cache (a cold disk adds the read
time to both sides alike for the index and the KG; for the passage store a cold first touch reads
the block either way). Sizes are synthetic; the report gives GB/s so that they scale.

    .venv/bin/python bench/blocksums_bench.py
    .venv/bin/python bench/blocksums_bench.py --triples 4000000 --passages 400000 --vectors 400000
    .venv/bin/python bench/blocksums_bench.py --only embeddings --emb-rows 1000000 --dim 768
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kgrag_lib.data import passage_store as ps  # noqa: E402
from kgrag_lib.kg import KGStore  # noqa: E402
from kgrag_lib.kg import store as store_mod  # noqa: E402


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def row(label: str, checked: float, naive: float, nbytes: int) -> str:
    extra = checked - naive
    rate = f"{nbytes / extra / 1e9:5.2f} GB/s checked" if extra > 0 else "   no measurable cost"
    return f"  {label:<34} checked {checked:8.3f} s   naive {naive:8.3f} s  {extra:+8.3f} s  ({rate})"


def bench_kg(work: Path, triples: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    entities = max(triples // 4, 1)
    names = [f"entity {i} {'x' * int(rng.integers(4, 30))}" for i in range(entities)]
    kg = KGStore.from_id_arrays(rng.integers(0, entities, triples), rng.integers(0, 200, triples),
                                rng.integers(0, entities, triples), names, [f"rel{i}" for i in range(200)])
    folder = kg.save(work / "kg")
    nbytes = folder_bytes(folder)
    real = store_mod.check_files
    checked = median_time(lambda: KGStore.load(folder), repeat)
    store_mod.check_files = lambda *a, **k: None
    try:
        naive = median_time(lambda: KGStore.load(folder), repeat)
    finally:
        store_mod.check_files = real
    print(f"KG store: {kg.num_triples:,} triples, {entities:,} entities, {nbytes / 1e6:.0f} MB in "
          f"{len(list(folder.iterdir())) - 1} files")
    print(row("load (mmap)", checked, naive, nbytes))


def bench_passages(work: Path, passages: int, reads: int, repeat: int) -> None:
    rng = np.random.default_rng(1)
    words = np.array(["alpha", "river", "film", "naïve", "béta", "station", "county", "born", "album"])
    tsv = work / "psgs_w100.tsv"
    with open(tsv, "w", encoding="utf-8") as f:
        f.write("id\ttext\ttitle\n")
        for i in range(1, passages + 1):
            f.write(f'{i}\t"{" ".join(rng.choice(words, 100))}"\tTitle {i % 9973}\n')
    folder = work / "store"
    ps.build_store(tsv, folder, show_progress=False)
    nbytes = folder_bytes(folder)
    rows = rng.integers(0, passages, reads)

    def opened(check: bool) -> ps.PassageStore:
        store = ps.PassageStore.open(folder)
        if not check:
            for col in (store._pids, store._titles, store._texts):
                col._checked = None
        return store

    def random_rows(check: bool) -> ps.PassageStore:
        store = opened(check)   # a fresh open: every block is a first touch
        for i in rows.tolist():
            store[i]
        return store

    def full_pass(check: bool) -> None:
        for _ in opened(check).iter_texts(block=4096):
            pass

    print(f"passage store: {passages:,} passages, {nbytes / 1e6:.0f} MB")
    print(row("open", median_time(lambda: opened(True), repeat), median_time(lambda: opened(False), repeat), 0))
    done = random_rows(True)
    touched = sum(f.verified_bytes for col in (done._pids, done._titles, done._texts)
                  for f in col._checked)   # the bytes those reads had checked
    print(row(f"{reads:,} random rows, fresh open", median_time(lambda: random_rows(True), repeat),
              median_time(lambda: random_rows(False), repeat), touched))
    print(f"  ({touched / 1e6:.0f} MB of blocks checked by those reads)")
    print(row("iter_texts over every row", median_time(lambda: full_pass(True), repeat),
              median_time(lambda: full_pass(False), repeat), nbytes))


def bench_index(work: Path, vectors: int, dim: int, repeat: int) -> None:
    import faiss

    from kgrag_lib.retrieval import DenseIndex, index_store

    faiss.omp_set_num_threads(1)
    x = np.random.default_rng(2).standard_normal((vectors, dim)).astype(np.float32)
    index_store.cached_index(x, "bench", "flat", cache_dir=work, recall_queries=0)
    [path] = sorted((work / "indexes").glob("*.faiss"))
    meta_path = path.with_name(path.name.replace(".faiss", ".meta.json"))
    key = index_store.saved_meta(path)["key"]
    naive = median_time(lambda: DenseIndex.load(path, mmap=True, placement="cpu"), repeat)
    check = median_time(lambda: index_store._saved_problem(path, meta_path, key), repeat)
    print(f"saved index: flat {vectors:,} x {dim}, {path.stat().st_size / 1e6:.0f} MB")
    print(row("load (mmap)", naive + check, naive, path.stat().st_size))


def bench_embeddings(work: Path, vectors: int, dim: int, queries: int, repeat: int) -> None:
    from kgrag_lib.retrieval import emb_cache

    rng = np.random.default_rng(3)
    path = work / "embeddings" / "bench.npy"
    path.parent.mkdir(parents=True, exist_ok=True)
    x = rng.standard_normal((vectors, dim)).astype(np.float32)
    np.save(path, x)
    del x
    emb_cache._write_meta(path, {"n": vectors, "dim": dim}, [])
    size = path.stat().st_size
    rows = rng.integers(0, vectors, (queries, 60))   # a re-ranking: k x depth = 6 x 10 rows a query

    def plain() -> np.ndarray:
        return np.load(path, mmap_mode="r", allow_pickle=False)

    def checked(verify: str = "sample") -> np.ndarray:
        arr, problem = emb_cache._open_checked(path, vectors, dim, False, verify)
        assert arr is not None, problem
        return arr

    def scattered(opener) -> np.ndarray:
        arr = opener()
        for q in rows:
            np.asarray(arr[q])
        return arr

    def full_pass(opener) -> None:
        arr = opener()
        for a in range(0, vectors, 65536):
            np.asarray(arr[a:a + 65536]).sum()

    print(f"embedding array: {vectors:,} x {dim} float32, {size / 1e6:.0f} MB "
          f"(checked whole on open up to {emb_cache.FULL_CHECK_BYTES >> 20} MiB)")
    print(row("open, every block checked", median_time(lambda: checked("full"), repeat),
              median_time(plain, repeat), size))
    big = emb_cache.FULL_CHECK_BYTES
    emb_cache.FULL_CHECK_BYTES = 0   # as a file above the threshold is opened: sample, then lazily
    try:
        print(row("open, sample of blocks", median_time(checked, repeat), median_time(plain, repeat), 0))
        done = scattered(checked)
        touched = done._file.verified_bytes
        print(row(f"{queries:,} queries x 60 scattered rows", median_time(lambda: scattered(checked), repeat),
                  median_time(lambda: scattered(plain), repeat), touched))
        print(f"  ({touched / 1e6:.0f} MB of blocks checked by those reads, fresh open each time)")
        print(row("block pass over every row", median_time(lambda: full_pass(checked), repeat),
                  median_time(lambda: full_pass(plain), repeat), size))
    finally:
        emb_cache.FULL_CHECK_BYTES = big


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triples", type=int, default=2_000_000, help="KG store size")
    ap.add_argument("--passages", type=int, default=200_000, help="passage store size")
    ap.add_argument("--reads", type=int, default=20_000, help="random passage rows read after a fresh open")
    ap.add_argument("--vectors", type=int, default=200_000, help="rows of the flat index (dim --dim)")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--emb-rows", type=int, default=400_000, help="rows of the embedding array (dim --dim)")
    ap.add_argument("--queries", type=int, default=200, help="re-ranking queries over the embedding array")
    ap.add_argument("--only", choices=("kg", "passages", "index", "embeddings"), help="run one part")
    ap.add_argument("--repeat", type=int, default=5, help="runs per timing (median)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        parts = {"kg": lambda: bench_kg(work, args.triples, args.repeat),
                 "passages": lambda: bench_passages(work, args.passages, args.reads, args.repeat),
                 "index": lambda: bench_index(work, args.vectors, args.dim, args.repeat),
                 "embeddings": lambda: bench_embeddings(work, args.emb_rows, args.dim, args.queries, args.repeat)}
        for name, part in parts.items():
            if args.only in (None, name):
                part()


if __name__ == "__main__":
    main()
