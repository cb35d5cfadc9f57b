"""Vector search: a faiss index wrapper and a numpy top-k over a candidate subset.

`DenseIndex` serves whole-corpus retrieval (passages, entity names): exact flat search by
default, IVF or HNSW when the corpus is large, or any faiss `index_factory` string for the
compressed indexes Wikipedia's 21M passages need (fp32 flat would take 64.5 GB; the memory /
recall table is in docs/PERFORMANCE.md). A factory index trains on a seeded sample and is filled
in blocks, so a memory-mapped (n, d) matrix is never read into RAM whole; `load` memory-maps a
saved index, and `index_store.cached_index` builds each one once. Placement on CPU or GPU:
`gpu_placement`. `top_k_dot` serves the MetaQA method, which ranks only the triples around a
question's entity: one product over those rows (or over the whole matrix when they are many) and
an argpartition beat building an index per question.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kgrag_lib.errors import BackendUnavailableError, ConfigError, MissingDataError
from kgrag_lib.retrieval.gpu_placement import (Placement, decide_placement, estimate_gpu_bytes, gpu_capable,
                                               gpu_count, gpu_resources, resolve_placement, to_gpu)

log = logging.getLogger(__name__)

KINDS = ("flat", "ivf", "hnsw")
FACTORY_EXAMPLES = ("IVF65536,PQ64", "IVF16384,SQ8", "OPQ64,IVF65536,PQ64", "HNSW32,SQ8", "Flat")
SEARCH_PARAMS = ("nprobe", "efSearch", "quantizer_efSearch")
# Above this share of the matrix's rows, one contiguous product over the whole matrix plus a
# gather of scalars reads memory faster than gathering the candidate rows first.
FULL_SCAN_FRACTION = 0.12
GPU_MAX_K = 2048
METRICS = ("ip", "l2")
ADD_BLOCK = 1 << 18        # rows per add() of a factory index: 768 MiB of float32 at d=768
MIN_TRAIN = 100_000        # training sample of a factory index: at least this many rows ...
TRAIN_PER_LIST = 64        # ... and 64 per IVF list (capped at n)


def _faiss():
    import faiss

    return faiss


def gpu_available() -> bool:
    """True when this faiss build has GPU support and sees a GPU."""
    return gpu_count() > 0


def _as_matrix(x: Any, what: str, dim: int | None = None) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"{what} must be a 2-D (n, dim) array; got shape {a.shape}")
    if dim is not None and a.shape[1] != dim:
        raise ValueError(f"{what} have dimension {a.shape[1]}, the index has {dim}")
    return a


def _rows_view(vectors: Any) -> np.ndarray:
    """`vectors` as a 2-D array without copying an ndarray or np.memmap (blocks are read later)."""
    if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
        return vectors
    return _as_matrix(vectors, "vectors")


# ----------------------------------------------------------------------------- factory strings

def default_nlist(n: int) -> int:
    """IVF lists for n vectors: ~4*sqrt(n) (faiss's guideline), at least 39 training points each."""
    return max(1, min(int(round(4 * math.sqrt(n))), n // 39))


def expand_factory(factory: str, n: int) -> str:
    """`factory` with "{nlist}" replaced by `default_nlist(n)` (a setting that does not know n)."""
    return factory.replace("{nlist}", str(default_nlist(n)))


def factory_nlist(factory: str) -> int | None:
    m = re.search(r"IVF(\d+)", factory)
    return int(m.group(1)) if m else None


def default_train_size(n: int, nlist: int | None) -> int:
    """max(64 * nlist, 100k) rows, capped at n: k-means needs ~40+ points per list."""
    return min(n, max(TRAIN_PER_LIST * (nlist or 0), MIN_TRAIN))


def default_nprobe(nlist: int) -> int:
    """Lists probed by a factory IVF index: 1/64 of them, at least 16 (recall/speed middle ground;
    the bench reports the recall it gives, `search_params={'nprobe': ...}` changes it)."""
    return max(1, min(nlist, max(16, nlist // 64)))


def new_factory_index(d: int, factory: str, metric: str) -> Any:
    """faiss.index_factory(d, factory, metric), its errors turned into a ConfigError naming the setting."""
    faiss = _faiss()
    try:
        index = faiss.index_factory(int(d), factory, _faiss_metric(metric))
    except Exception as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"index kind/factory {factory!r}: faiss {faiss.__version__} cannot build it for d={d} ({reason}); "
            f"expected one of {KINDS} or a faiss index_factory string such as "
            f"{', '.join(repr(e) for e in FACTORY_EXAMPLES)} (PQ<m> needs m to divide d)") from None
    # index_factory turns on polysemous training for PQ codes; kgrag never searches with
    # polysemous_ht, and that training took ~80% of a small IVF-PQ build here.
    ivf = faiss.try_extract_index_ivf(index)
    for part in (faiss.downcast_index(ivf) if ivf is not None else None, _innermost(index)):
        if part is not None and hasattr(part, "do_polysemous_training"):
            part.do_polysemous_training = False
    return index


def _innermost(index: Any) -> Any:
    """The index behind any pre-transforms (OPQ, PCA), downcast to its faiss type."""
    faiss = _faiss()
    inner = faiss.downcast_index(index)
    while isinstance(inner, faiss.IndexPreTransform):
        inner = faiss.downcast_index(inner.index)
    return inner


def _faiss_metric(metric: str) -> int:
    faiss = _faiss()
    return faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2


# ----------------------------------------------------------------------------- search parameters

def _hnsw_of(index: Any) -> Any | None:
    inner = _innermost(index)
    return inner if isinstance(inner, _faiss().IndexHNSW) else None


def check_search_params(index: Any, params: Mapping[str, Any] | None) -> dict[str, int]:
    """Validated {name: positive int}; each name must apply to this index."""
    if not params:
        return {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"search_params must be a mapping such as {{'nprobe': 64}}; got {params!r}")
    faiss = _faiss()
    ivf = faiss.try_extract_index_ivf(index)
    out: dict[str, int] = {}
    for name, value in params.items():
        if name not in SEARCH_PARAMS:
            raise ConfigError(f"search_params: unknown parameter {name!r}; expected some of {SEARCH_PARAMS}, "
                              f"e.g. {{'nprobe': 64}} for IVF indexes or {{'efSearch': 128}} for HNSW")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"search_params[{name!r}] must be an integer >= 1; got {value!r}")
        if name == "nprobe" and ivf is None:
            raise ConfigError(f"search_params['nprobe'] applies to IVF indexes; this one is {_describe(index)}")
        if name == "efSearch" and _hnsw_of(index) is None:
            raise ConfigError(f"search_params['efSearch'] applies to HNSW indexes; this one is {_describe(index)}")
        if name == "quantizer_efSearch" and (ivf is None or _hnsw_of(ivf.quantizer) is None):
            raise ConfigError("search_params['quantizer_efSearch'] applies to IVF indexes with an HNSW "
                              f"coarse quantizer (e.g. 'IVF65536_HNSW32,PQ64'); this one is {_describe(index)}")
        out[name] = int(value)
    return out


def _current_search_params(index: Any) -> dict[str, int]:
    faiss = _faiss()
    out: dict[str, int] = {}
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        out["nprobe"] = int(ivf.nprobe)
        q = _hnsw_of(ivf.quantizer)
        if q is not None:
            out["quantizer_efSearch"] = int(q.hnsw.efSearch)
    h = _hnsw_of(index)
    if h is not None:
        out["efSearch"] = int(h.hnsw.efSearch)
    return out


def _apply_search_params(index: Any, params: Mapping[str, int], on_gpu: bool) -> None:
    faiss = _faiss()
    space = faiss.GpuParameterSpace() if on_gpu else faiss.ParameterSpace()
    for name, value in params.items():
        space.set_index_parameter(index, name, float(value))


def _describe(index: Any) -> str:
    return type(_faiss().downcast_index(index)).__name__


# ----------------------------------------------------------------------------- memory-mapped reads

def _mmap_flags() -> int:
    """faiss >= 1.11's in-file-container mmap maps flat codes, IVF array lists and HNSW storage;
    older builds map only IVF lists (IO_FLAG_MMAP)."""
    faiss = _faiss()
    base = faiss.IO_FLAG_MMAP_IFC if hasattr(faiss, "IO_FLAG_MMAP_IFC") else faiss.IO_FLAG_MMAP
    return base | faiss.IO_FLAG_READ_ONLY


def read_index(path: str | os.PathLike, mmap: bool = True) -> tuple[Any, bool]:
    """(faiss index, whether its codes are memory-mapped). With `mmap`, the codes stay in the
    file (the page cache, shared between processes and evictable) instead of process memory;
    where faiss cannot map this type it is read normally, with a log line saying so."""
    faiss = _faiss()
    path = str(path)
    if not mmap:
        return faiss.read_index(path), False
    flags = _mmap_flags()
    try:
        index = faiss.read_index(path, flags)
    except RuntimeError as exc:
        index = faiss.read_index(path)  # raises too when the file is damaged
        log.info("faiss %s cannot memory-map %s (%s); read it into memory instead", faiss.__version__, path,
                 str(exc).strip().splitlines()[-1][:200])
        return index, False
    mapped = True
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        lists = type(faiss.downcast_InvertedLists(ivf.invlists)).__name__
        mapped = lists == "OnDiskInvertedLists" or (lists == "ArrayInvertedLists" and hasattr(faiss, "IO_FLAG_MMAP_IFC"))
    elif not hasattr(faiss, "IO_FLAG_MMAP_IFC"):
        mapped = False
    if not mapped:
        log.info("faiss %s reads %s (%s) into memory: it memory-maps flat codes and IVF array lists only",
                 faiss.__version__, path, _describe(index))
    return index, mapped


def require_gpu_if_asked(placement: Placement, kind: str, d: int, metric: str = "ip") -> None:
    """Raise BackendUnavailableError before an hour of building when placement 'gpu' cannot be
    honoured (no GPU visible) for an index faiss could run there."""
    if placement.where != "gpu" or gpu_count() > 0:
        return
    capable = kind != "hnsw" and (kind in KINDS or gpu_capable(new_factory_index(d, expand_factory(kind, 1), metric)))
    decide_placement("gpu", gpu_bytes=0, n_gpus=0, gpu_capable=capable)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- the index

@dataclass
class DenseIndex:
    """A built faiss index (CPU or GPU) with the settings needed to search and save it.

    `kind` is "flat" | "ivf" | "hnsw" or the faiss factory string it was built from (a loaded
    index reports its family: "flat", "ivf" or "hnsw"). `params`: the search parameters set.
    """

    index: Any = field(repr=False)
    kind: str
    metric: str
    dim: int
    on_gpu: bool = False
    gpu_resources: Any = field(default=None, repr=False)  # must outlive a GPU index
    mmapped: bool = False
    params: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        vectors: Any,
        kind: str = "flat",
        metric: str = "ip",
        *,
        nlist: int | None = None,
        nprobe: int | None = None,
        hnsw_m: int = 32,
        ef_construction: int = 64,
        ef_search: int = 128,
        use_gpu: bool | None = None,
        seed: int = 0,
        search_params: Mapping[str, int] | None = None,
        train_size: int | None = None,
        add_block: int = ADD_BLOCK,
        placement: "str | Placement | Mapping[str, Any] | None" = None,
        train_on_gpu: bool | None = None,
    ) -> "DenseIndex":
        """Index `vectors` (n, dim). ip = inner product (cosine on unit vectors), l2 = distance.

        kind "flat" | "ivf" | "hnsw" (unchanged): ivf's `nlist` defaults to ~2*sqrt(n) (at least
        39 training points per list), k-means trains on at most 64 points per list, `nprobe`
        defaults to an eighth of the lists (at least 8); hnsw: M, efConstruction, efSearch as given.

        Any other kind is a faiss index_factory string ("IVF65536,PQ64", "HNSW32,SQ8", "Flat";
        "{nlist}" becomes ~4*sqrt(n)). It trains on `train_size` rows drawn with `seed` (default
        max(64 * nlist, 100k), capped at n), IVF k-means on the GPU when `train_on_gpu` (default:
        when one is visible), then adds `add_block` rows at a time, so an np.memmap is read block
        by block. nprobe defaults to `default_nprobe(nlist)`, efSearch to `ef_search`.
        `search_params` ({'nprobe': 64}, {'efSearch': 128}) overrides either. `placement`:
        "cpu" | "gpu" | "auto" (default, or from `use_gpu`) or a `Placement`.
        """
        if metric not in METRICS:
            raise ConfigError(f"index metric must be one of {METRICS}; got {metric!r}")
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"index kind must be one of {KINDS} or a faiss index_factory string such as "
                              f"{', '.join(repr(e) for e in FACTORY_EXAMPLES)}; got {kind!r}")
        where = resolve_placement(placement, use_gpu)
        if kind not in KINDS:
            require_gpu_if_asked(where, kind, int(np.shape(vectors)[-1]), metric)
            return cls._build_factory(vectors, kind, metric, nprobe=nprobe, ef_search=ef_search, seed=seed,
                                      search_params=search_params, train_size=train_size, add_block=add_block,
                                      placement=where, train_on_gpu=train_on_gpu)
        faiss = _faiss()
        x = _as_matrix(vectors, "vectors")
        n, d = x.shape
        if n == 0:
            raise ValueError("cannot build an index over zero vectors")
        fmetric = _faiss_metric(metric)
        if kind == "flat":
            index = faiss.IndexFlatIP(d) if metric == "ip" else faiss.IndexFlatL2(d)
        elif kind == "ivf":
            if nlist is None:
                nlist = max(1, min(int(2 * math.sqrt(n)), n // 39))
            nlist = max(1, min(int(nlist), n))
            quantizer = faiss.IndexFlatIP(d) if metric == "ip" else faiss.IndexFlatL2(d)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, fmetric)
            index.cp.seed = seed
            index.cp.max_points_per_centroid = 64  # bounds training time on large corpora
            index.train(x)
            index.nprobe = int(nprobe) if nprobe else min(nlist, max(8, nlist // 8))
        else:
            index = faiss.IndexHNSWFlat(d, int(hnsw_m), fmetric)
            index.hnsw.efConstruction = int(ef_construction)
            index.hnsw.efSearch = int(ef_search)
        params = check_search_params(index, search_params)
        index.add(x)
        _apply_search_params(index, params, on_gpu=False)
        return cls._placed(index, kind, metric, d, where)

    @classmethod
    def _build_factory(cls, vectors: Any, factory: str, metric: str, *, nprobe: int | None, ef_search: int,
                       seed: int, search_params: Mapping[str, int] | None, train_size: int | None,
                       add_block: int, placement: Placement, train_on_gpu: bool | None) -> "DenseIndex":
        x = _rows_view(vectors)
        n, d = int(x.shape[0]), int(x.shape[1])
        if n == 0:
            raise ValueError("cannot build an index over zero vectors")
        if isinstance(add_block, bool) or not isinstance(add_block, int) or add_block < 1:
            raise ConfigError(f"add_block must be a number of rows >= 1 (e.g. {ADD_BLOCK}); got {add_block!r}")
        factory = expand_factory(factory, n)
        index = new_factory_index(d, factory, metric)
        faiss = _faiss()
        ivf = faiss.try_extract_index_ivf(index)
        params = {} if ivf is None else {"nprobe": default_nprobe(int(ivf.nlist))}
        if _hnsw_of(index) is not None:
            params["efSearch"] = int(ef_search)
        given = check_search_params(index, search_params)
        if nprobe is not None:
            explicit = check_search_params(index, {"nprobe": nprobe})
            if "nprobe" in given and given["nprobe"] != explicit["nprobe"]:
                raise ConfigError(f"nprobe={nprobe} contradicts search_params['nprobe']={given['nprobe']}; give one")
            given = {**explicit, **given}
        params.update(given)
        if not index.is_trained:
            cls._train(index, x, n, d, factory, metric, seed, train_size, ivf, train_on_gpu)
        t = time.perf_counter()
        for start in range(0, n, add_block):
            index.add(np.ascontiguousarray(x[start:start + add_block], dtype=np.float32))
        log.info("added %d vectors to %s in %.1f s", n, factory, time.perf_counter() - t)
        _apply_search_params(index, params, on_gpu=False)
        return cls._placed(index, factory, metric, d, placement)

    @staticmethod
    def _train(index: Any, x: np.ndarray, n: int, d: int, factory: str, metric: str, seed: int,
               train_size: int | None, ivf: Any, train_on_gpu: bool | None) -> None:
        """Train on a seeded sample of rows (gathered in blocks from a memmap)."""
        faiss = _faiss()
        size = default_train_size(n, None if ivf is None else int(ivf.nlist)) if train_size is None else train_size
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ConfigError(f"train_size must be a number of rows >= 1 (default max(64*nlist, 100000)); "
                              f"got {train_size!r}")
        size = min(int(size), n)
        if size == n:
            sample = np.ascontiguousarray(x, dtype=np.float32)
        else:
            rows = np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
            sample = np.empty((size, d), np.float32)
            for s in range(0, size, ADD_BLOCK):
                sample[s:s + ADD_BLOCK] = x[rows[s:s + ADD_BLOCK]]
        clustering = None
        if ivf is not None:
            ivf.cp.seed = seed
            use = gpu_available() if train_on_gpu is None else bool(train_on_gpu)
            if use:
                if not gpu_available():
                    raise BackendUnavailableError("train_on_gpu=True but this faiss build sees no GPU: install "
                                                  "faiss-gpu or leave train_on_gpu unset")
                clustering = faiss.index_cpu_to_gpu(gpu_resources(0), 0, faiss.IndexFlat(d, _faiss_metric(metric)))
                ivf.clustering_index = clustering
        t = time.perf_counter()
        index.train(sample)
        if clustering is not None:
            ivf.clustering_index = None
        log.info("trained %s on %d of %d vectors in %.1f s%s", factory, size, n, time.perf_counter() - t,
                 " (k-means on GPU)" if clustering is not None else "")

    @classmethod
    def _placed(cls, index: Any, kind: str, metric: str, d: int, placement: "Placement | str | None",
                mmapped: bool = False) -> "DenseIndex":
        """Move the index to the GPU when `placement` says so (`gpu_placement.decide_placement`)."""
        p = resolve_placement(placement)
        params = _current_search_params(index)
        n_gpus = gpu_count() if p.where != "cpu" else 0
        where, why = decide_placement(p.where, gpu_bytes=estimate_gpu_bytes(index, p.fp16) if n_gpus else 0,
                                      n_gpus=n_gpus, gpu_capable=gpu_capable(index), budget_bytes=p.budget_bytes,
                                      shard=p.shard, what=f"index ({_describe(index)})")
        if where == "gpu":
            gindex, res = to_gpu(index, p)
            _apply_search_params(gindex, {k: v for k, v in params.items() if k == "nprobe"}, on_gpu=True)
            log.info("faiss index %s on GPU%s: %s", kind, " (sharded)" if p.shard and n_gpus > 1 else " 0", why)
            return cls(gindex, kind, metric, d, on_gpu=True, gpu_resources=res, params=params)
        if p.where != "cpu":   # debug: every small in-memory index of every run would say it
            log.debug("faiss index %s on CPU: %s", kind, why)
        return cls(index, kind, metric, d, on_gpu=False, mmapped=mmapped, params=params)

    def place(self, placement: "str | Placement | Mapping[str, Any] | None") -> "DenseIndex":
        """This index under `placement` (a GPU copy of a CPU index when chosen; a GPU one as is)."""
        if self.on_gpu:
            return self
        return self._placed(self.index, self.kind, self.metric, self.dim, resolve_placement(placement), self.mmapped)

    def set_search_params(self, params: Mapping[str, int]) -> None:
        """Change nprobe / efSearch of a built or loaded index (validated for its type)."""
        if self.on_gpu:
            checked = {k: int(v) for k, v in params.items()}
            if set(checked) - {"nprobe"}:
                raise ConfigError(f"search_params on a GPU index: only 'nprobe' applies; got {sorted(checked)}")
        else:
            checked = check_search_params(self.index, params)
        _apply_search_params(self.index, checked, on_gpu=self.on_gpu)
        self.params.update(checked)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k per query: (scores, ids), each (nq, k'), k' = min(k, len); best first.

        Pass many queries as one (nq, dim) matrix: faiss answers them in one call, spread over its
        threads (or the GPU), far faster than nq calls of one row. Scores are inner products for
        'ip' and squared L2 distances for 'l2'. Approximate indexes may return id -1 (score
        -inf/inf) when fewer than k' neighbours were found.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        q = _as_matrix(queries, "queries", self.dim)
        k = min(int(k), len(self))
        if q.shape[0] == 0:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        # faiss GPU search is limited to k <= 2048; a larger k is served by a CPU copy.
        index = _faiss().index_gpu_to_cpu(self.index) if self.on_gpu and k > GPU_MAX_K else self.index
        scores, ids = index.search(q, k)
        return scores, ids

    def save(self, path: str | os.PathLike) -> None:
        """Write with faiss.write_index (a GPU index is copied to CPU first); fsync, atomic rename."""
        faiss = _faiss()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        cpu = faiss.index_gpu_to_cpu(self.index) if self.on_gpu else self.index
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            faiss.write_index(cpu, str(tmp))
            _fsync(tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, *, use_gpu: bool | None = None, mmap: bool = True,
             placement: "str | Placement | Mapping[str, Any] | None" = None,
             search_params: Mapping[str, int] | None = None) -> "DenseIndex":
        """Read an index saved by `save`; kind and metric are recovered from the faiss type.

        `mmap` (default) maps the codes from the file instead of copying them into memory
        (`read_index`); a GPU placement copies them to the GPU either way.
        """
        faiss = _faiss()
        path = Path(path)
        if not path.is_file():
            raise MissingDataError(f"no faiss index at {path}")
        where = resolve_placement(placement, use_gpu)
        index, mapped = read_index(path, mmap)
        if _hnsw_of(index) is not None:
            kind = "hnsw"
        elif faiss.try_extract_index_ivf(index) is not None:
            kind = "ivf"
        else:
            kind = "flat"
        _apply_search_params(index, check_search_params(index, search_params), on_gpu=False)
        metric = "ip" if index.metric_type == faiss.METRIC_INNER_PRODUCT else "l2"
        return cls._placed(index, kind, metric, int(index.d), where, mapped)


def top_k_dot(
    query_vecs: Any,
    matrix: Any,
    k: int,
    candidate_ids: Sequence[int] | np.ndarray | None = None,
    *,
    full_scan_fraction: float = FULL_SCAN_FRACTION,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k rows of `matrix` by dot product with each query, optionally among candidates only.

    `matrix` may be a memory-mapped (N, dim) array. Up to `full_scan_fraction` * N candidates,
    only their rows are read; above it the whole matrix is multiplied and the candidates'
    scores picked out. Returns (scores, ids) with ids indexing `matrix`, best first, ties
    broken by the smaller id so results are deterministic. A 1-D query gives 1-D outputs;
    (nq, dim) gives (nq, k').
    """
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}")
    q = np.asarray(query_vecs, dtype=np.float32)
    if q.ndim not in (1, 2) or q.shape[-1] != matrix.shape[1]:
        raise ValueError(f"query_vecs must be (dim,) or (nq, dim) with dim = {matrix.shape[1]} (the matrix's); "
                         f"got shape {q.shape}")
    if candidate_ids is None:
        ids = np.arange(matrix.shape[0], dtype=np.int64)
    else:
        ids = np.asarray(candidate_ids, dtype=np.int64).ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= matrix.shape[0]):
            raise IndexError(f"candidate_ids must lie in [0, {matrix.shape[0]}); got range [{ids.min()}, {ids.max()}]")
    single = q.ndim == 1
    nq = 1 if single else q.shape[0]
    kk = min(int(k), ids.size)
    if kk == 0:
        empty = (np.zeros((nq, 0), np.float32), np.zeros((nq, 0), np.int64))
        return (empty[0][0], empty[1][0]) if single else empty
    scores = _dot_scores(q, matrix, ids, full_scan=ids.size > full_scan_fraction * matrix.shape[0])
    scores = scores[None, :] if single else scores
    out_s = np.empty((nq, kk), np.float32)
    out_i = np.empty((nq, kk), np.int64)
    for r in range(nq):
        row = scores[r]
        if kk < row.size:
            # Keep everything tied with the k-th best so the tie-break below is exact.
            thresh = np.partition(row, row.size - kk)[row.size - kk]
            pos = np.flatnonzero(row >= thresh)
        else:
            pos = np.arange(row.size)
        order = np.lexsort((ids[pos], -row[pos]))[:kk]
        out_i[r] = ids[pos[order]]
        out_s[r] = row[pos[order]]
    return (out_s[0], out_i[0]) if single else (out_s, out_i)


def _dot_scores(q: np.ndarray, matrix: Any, ids: np.ndarray, full_scan: bool) -> np.ndarray:
    """Scores of rows `ids`, (n,) for a 1-D query, else (nq, n). The two branches can differ
    in the last float bit (BLAS splits the products differently), which can reorder near-ties:
    keep each product as written, the MetaQA triple selection (and the LLM cache) depends on it."""
    if full_scan:
        whole = np.asarray(matrix, dtype=np.float32)
        return (whole @ q)[ids] if q.ndim == 1 else (q @ whole.T)[:, ids]
    sub = np.asarray(matrix[ids], dtype=np.float32)
    return sub @ q if q.ndim == 1 else q @ sub.T
