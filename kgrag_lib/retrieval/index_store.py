"""Build a faiss index once, keep it on disk, memory-map it in every later process.

k-means and adding 21M passage vectors take long; before this each process repeated them.
`cached_index` builds the index for (vectors key, factory, metric, training seed and size,
faiss version) under a file lock, writes it atomically to `<cache>/indexes/<label>-<hash>.faiss`
with `<label>-<hash>.meta.json` beside it (build time, sizes, parameters, recall@k against exact
search measured at build time, and a crc32 of every MiB of the file), and later loads it
memory-mapped, logging one line "loaded saved index <path> (...) in <s> s". Each load checks
every block of the file first (faiss reads the map where it likes, so no read can be checked
on its own; bench/blocksums_bench.py measures the cost). A saved file that does not match its
meta (another key, a truncated file, a block changed, a meta written before block checksums)
is rebuilt with a warning naming the problem, never used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from kgrag_lib.blocksums import FULL_BLOCK_BYTES, CheckedFile, record_file
from kgrag_lib.errors import ConfigError, DataFormatError
from kgrag_lib.jsonl import atomic_text
from kgrag_lib.paths import cache_dir as default_cache_dir
from kgrag_lib.retrieval.gpu_placement import Placement, resolve_placement
from kgrag_lib.retrieval.index import (ADD_BLOCK, KINDS, METRICS, DenseIndex, check_search_params,
                                       default_train_size, expand_factory, factory_nlist, new_factory_index,
                                       require_gpu_if_asked)
from kgrag_lib.retrieval.index_recall import exact_search, recall_at_k
from kgrag_lib.retrieval.rescored import RescoredIndex, split_rescore

_log = logging.getLogger(__name__)

FORMAT = 1               # bump when the file layout or the key's meaning changes
RECALL_QUERIES = 1000
RECALL_K = 10


def index_key(vectors_key: str, factory: str, metric: str, n: int, d: int, seed: int, train_size: int) -> dict[str, Any]:
    """What a saved index was built from; a different value anywhere means another file."""
    import faiss

    return {"format": FORMAT, "vectors_key": vectors_key, "factory": factory, "metric": metric, "n": int(n),
            "d": int(d), "seed": int(seed), "train_size": int(train_size), "faiss": faiss.__version__}


def index_paths(cache_dir: str | os.PathLike | None, label: str, key: Mapping[str, Any]) -> tuple[Path, Path]:
    """(index file, meta file) under `<cache>/indexes/`."""
    digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()[:24]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:60] or "index"
    folder = Path(default_cache_dir(cache_dir)) / "indexes"
    return folder / f"{safe}-{digest}.faiss", folder / f"{safe}-{digest}.meta.json"


def _saved_problem(path: Path, meta_path: Path, key: Mapping[str, Any]) -> tuple[dict | None, str]:
    """(meta, "") when the saved index matches `key`, its recorded size and every block's crc32."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "its meta file is missing (an interrupted build?)"
    except (OSError, ValueError) as exc:
        return None, f"its meta file is unreadable ({exc})"
    if not isinstance(meta, dict) or meta.get("key") != dict(key):
        got = meta.get("key") if isinstance(meta, dict) else meta
        return None, f"it was built for another key ({got!r}, expected {dict(key)!r})"
    size = path.stat().st_size
    if size != meta.get("bytes"):
        return None, f"{size} bytes on disk, {meta.get('bytes')} when written (truncated or overwritten)"
    if "blocks" not in meta:
        return None, "its meta was written before block checksums, so damage inside it cannot be seen"
    try:
        CheckedFile(path, meta["blocks"], "overwritten or damaged since written", meta_path).check_all()
    except DataFormatError as exc:
        return None, str(exc)
    return meta, ""


def _queries(vectors: Any, recall_queries: Any, seed: int) -> tuple[np.ndarray | None, str]:
    """The recall query sample: given rows, or `recall_queries` rows drawn from the vectors."""
    if recall_queries is None or (isinstance(recall_queries, (int, np.integer)) and not isinstance(recall_queries, bool)):
        m = RECALL_QUERIES if recall_queries is None else int(recall_queries)
        if m <= 0:
            return None, "none"
        n = int(vectors.shape[0])
        rows = np.sort(np.random.default_rng(seed + 1).choice(n, min(m, n), replace=False))
        return np.ascontiguousarray(vectors[rows], dtype=np.float32), "rows of the indexed vectors (self-matches included)"
    q = np.ascontiguousarray(np.asarray(recall_queries, dtype=np.float32))
    if q.ndim != 2 or q.shape[1] != vectors.shape[1]:
        raise ConfigError(f"recall_queries must be a number of sampled rows or a (nq, {vectors.shape[1]}) "
                          f"query matrix; got shape {q.shape}")
    return q, "given queries"


def cached_index(
    vectors: Any,
    key: str,
    factory: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    metric: str = "ip",
    label: str | None = None,
    seed: int = 0,
    train_size: int | None = None,
    search_params: Mapping[str, int] | None = None,
    placement: "str | Placement | Mapping[str, Any] | None" = None,
    mmap: bool = True,
    recall_queries: "int | np.ndarray | None" = RECALL_QUERIES,
    recall_k: int = RECALL_K,
    add_block: int = ADD_BLOCK,
    train_on_gpu: bool | None = None,
    log: logging.Logger | None = None,
) -> DenseIndex:
    """The index `factory` over `vectors` (n, d; an np.memmap is read in blocks), built at most once.

    `key` fingerprints the vectors (e.g. the embedding cache file's name, which hashes model and
    texts): the caller vouches that the same key means the same rows. `factory` is a faiss
    index_factory string ("IVF65536,PQ64"; "{nlist}" becomes ~4*sqrt(n)) or "flat"/"ivf"/"hnsw".
    `search_params` and `placement` apply at every load and are not part of the key; `seed`
    and `train_size` are. At build time recall@`recall_k` against exact search is measured on
    `recall_queries` (a number of rows sampled from `vectors`, or a query matrix; 0 skips it) and
    stored in the meta file. `label` names the file (default: the factory).
    """
    log = log or _log
    if metric not in METRICS:
        raise ConfigError(f"index metric must be one of {METRICS}; got {metric!r}")
    if not isinstance(key, str) or not key:
        raise ConfigError(f"key must be a non-empty string fingerprinting the vectors; got {key!r}")
    if not hasattr(vectors, "shape"):
        vectors = np.asarray(vectors, dtype=np.float32)
    if len(vectors.shape) != 2 or vectors.shape[0] == 0:
        raise ValueError(f"vectors must be a non-empty (n, d) array; got shape {vectors.shape}")
    n, d = int(vectors.shape[0]), int(vectors.shape[1])
    expanded = expand_factory(factory, n)
    nlist = factory_nlist(expanded)
    if train_size is not None and (isinstance(train_size, bool) or not isinstance(train_size, (int, np.integer))
                                   or train_size < 1):
        raise ConfigError(f"train_size must be a number of rows >= 1 (default max(64*nlist, 100000)); got {train_size!r}")
    eff_train = default_train_size(n, nlist) if train_size is None else min(int(train_size), n)
    if expanded not in KINDS:  # a bad factory string or search parameter fails now, not after the lock
        check_search_params(new_factory_index(d, expanded, metric), search_params)
    require_gpu_if_asked(resolve_placement(placement), expanded, d, metric)
    ikey = index_key(key, expanded, metric, n, d, seed, eff_train)
    path, meta_path = index_paths(cache_dir, label or expanded, ikey)

    loaded = _load_checked(path, meta_path, ikey, mmap, search_params, log)
    if loaded is not None:
        return loaded.place(placement)
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        loaded = _load_checked(path, meta_path, ikey, mmap, search_params, log, quiet=True)
        if loaded is not None:  # another process built it meanwhile
            return loaded.place(placement)
        for stale in path.parent.glob(f".{path.name}.tmp*"):
            stale.unlink(missing_ok=True)
        meta_path.unlink(missing_ok=True)  # no meta beside a file being replaced
        _build_and_save(vectors, expanded, metric, ikey, path, meta_path, seed=seed, train_size=train_size,
                        search_params=search_params, add_block=add_block, train_on_gpu=train_on_gpu,
                        recall_queries=recall_queries, recall_k=recall_k, log=log)
    t = time.perf_counter()
    index = DenseIndex.load(path, mmap=mmap, placement="cpu")
    index.kind = expanded
    log.info("loaded the new index %s memory-mapped in %.2f s", path, time.perf_counter() - t)
    return index.place(placement)


def _load_checked(path: Path, meta_path: Path, key: Mapping[str, Any], mmap: bool,
                  search_params: Mapping[str, int] | None, log: logging.Logger, quiet: bool = False) -> DenseIndex | None:
    if not path.exists():
        return None
    t = time.perf_counter()
    meta, problem = _saved_problem(path, meta_path, key)
    index = None
    if meta is not None:
        try:
            index = DenseIndex.load(path, mmap=mmap, placement="cpu", search_params=search_params)
        except RuntimeError as exc:  # faiss could not parse it
            problem = f"faiss cannot read it ({str(exc).strip().splitlines()[-1][:200]})"
        if index is not None and (len(index), index.dim) != (key["n"], key["d"]):
            problem, index = f"it holds {len(index)} x {index.dim} vectors, expected {key['n']} x {key['d']}", None
    if index is None:
        if not quiet:
            log.warning("saved index %s is stale or damaged: %s; rebuilding it", path, problem)
        return None
    index.kind = key["factory"]
    log.info("loaded saved index %s (%d vectors, %s) in %.2f s", path, len(index), key["factory"],
             time.perf_counter() - t)
    return index


def _build_and_save(vectors: Any, factory: str, metric: str, key: Mapping[str, Any], path: Path, meta_path: Path,
                    *, seed: int, train_size: int | None, search_params: Mapping[str, int] | None, add_block: int,
                    train_on_gpu: bool | None, recall_queries: Any, recall_k: int, log: logging.Logger) -> None:
    import faiss

    log.info("building index %s over %d x %d vectors (%s); once, then memory-mapped from %s",
             factory, key["n"], key["d"], metric, path)
    t = time.perf_counter()
    built = DenseIndex.build(vectors, kind=factory, metric=metric, seed=seed, train_size=train_size,
                             search_params=search_params, add_block=add_block, placement="cpu",
                             train_on_gpu=train_on_gpu)
    build_s = time.perf_counter() - t
    recall = None
    queries, source = _queries(vectors, recall_queries, seed)
    if queries is not None:
        t = time.perf_counter()
        exact = exact_search(vectors, queries, recall_k, metric)[1]
        value = recall_at_k(built, exact, queries, recall_k)
        recall = {"k": int(min(recall_k, key["n"])), "queries": int(len(queries)), "source": source}
        if "nprobe" in built.params and not (search_params and "nprobe" in search_params):
            value, recall["nprobe_tried"] = _tune_nprobe(built, exact, queries, recall_k, value, log)
        recall.update(value=round(value, 4), seconds=round(time.perf_counter() - t, 2))
    built.save(path)   # after tuning: faiss stores nprobe in the file
    meta = {"key": dict(key), "build_seconds": round(build_s, 2), "n": key["n"], "d": key["d"], "factory": factory,
            "metric": metric, "params": {"search": dict(built.params), "train_size": key["train_size"],
                                         "seed": seed, "add_block": add_block},
            "faiss": faiss.__version__, "vectors_key": key["vectors_key"], "bytes": path.stat().st_size,
            "blocks": record_file(path, FULL_BLOCK_BYTES), "recall": recall,
            "written": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    atomic_text(meta_path, json.dumps(meta, indent=1))
    log.info("built index %s in %.1f s: %.1f MB on disk%s", path, build_s, meta["bytes"] / 1e6,
             f", recall@{recall['k']} = {recall['value']:.3f} on {recall['queries']} {recall['source']}"
             if recall else "")


TARGET_RECALL = 0.95   # the smallest nprobe reaching this recall on the build's sample is kept
MIN_GAIN = 0.005       # a doubling of nprobe that gains less stops the search


def _tune_nprobe(built: DenseIndex, exact: np.ndarray, queries: np.ndarray, k: int, value: float,
                 log: logging.Logger) -> tuple[float, dict[str, float]]:
    """Double nprobe from its default until recall@k on the sample reaches `TARGET_RECALL` (or every
    list is probed): the default (1/64 of the lists) gave 0.99 on the bench's synthetic clusters but
    0.69 on real MiniLM embeddings of MetaQA's 132k triples, where 1/6 of the lists gave 0.93."""
    nprobe = int(built.params["nprobe"])
    nlist = int(_ivf_nlist(built))
    tried = {str(nprobe): round(value, 4)}
    while value < TARGET_RECALL and nprobe < nlist:
        wider = min(nlist, nprobe * 2)
        built.set_search_params({"nprobe": wider})
        got = recall_at_k(built, exact, queries, k)
        tried[str(wider)] = round(got, 4)
        if got - value < MIN_GAIN:   # the codes limit recall (PQ), not the lists probed: keep the cheaper one
            built.set_search_params({"nprobe": nprobe})
            break
        nprobe, value = wider, got
    if nprobe != int(list(tried)[0]):
        log.info("nprobe raised to %d of %d lists for recall@%d %.3f on the build's sample (tried %s)",
                 nprobe, nlist, k, value, tried)
    return value, tried


def _ivf_nlist(index: DenseIndex) -> int:
    import faiss

    return int(faiss.extract_index_ivf(index.index).nlist)


def saved_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The meta record written beside a saved index (`<label>-<hash>.faiss` -> `.meta.json`)."""
    p = Path(path)
    return json.loads(p.with_name(p.name[:-len(".faiss")] + ".meta.json").read_text(encoding="utf-8"))


AUTO = "auto"
AUTO_FLAT_MAX = 2_000_000      # up to here an exact flat index; above it IVF-SQ8 (docs/PERFORMANCE.md)
AUTO_LARGE = "IVF{nlist},SQ8"


def auto_factory(setting: str, n: int) -> str:
    """The factory an `index` setting names for n vectors: `auto` is exact `flat` up to
    `AUTO_FLAT_MAX` and `IVF{nlist},SQ8` above (recall@6 0.99 of exact in the scale bench at a
    quarter of fp32's bytes: 16 GB for 21M x 768, where PQ64's 1.6 GB lost half the neighbours)."""
    if setting == AUTO:
        return "flat" if n <= AUTO_FLAT_MAX else AUTO_LARGE
    return setting


def source_index(vectors: Any, *, key: str | None, label: str, cache_dir: str | os.PathLike | None,
                 setting: str = AUTO, placement: str = AUTO, log: logging.Logger | None = None) -> Any:
    """The search index of one retrieval source (a corpus, a KG's seed descriptions).

    A source whose vectors have a key (a saved passage store or KG store: Wikipedia-2018,
    Wikidata5M) gets an index built once and memory-mapped afterwards (`cached_index`); a source
    without one (the small per-dataset corpora, held as lists) gets its index built in memory,
    exact flat by default, as cheap as loading one. A setting ending in `+rescore<N>` re-ranks the
    index's top k x N by exact inner products with `vectors` (`rescored.RescoredIndex`)."""
    setting, depth = split_rescore(setting)
    factory = auto_factory(setting, len(vectors))
    if key is None:
        found = DenseIndex.build(np.asarray(vectors), kind=factory, placement=placement)
    else:
        found = cached_index(vectors, key, factory, cache_dir=cache_dir, label=label, placement=placement, log=log)
    return RescoredIndex(found, vectors, depth) if depth else found
