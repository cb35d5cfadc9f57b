"""Where a faiss index lives: CPU memory (memory-mapped when loaded from disk) or GPU memory.

A 7B LLM shares the GPU with the index. The 21M-passage corpus as fp32 (64.5 GB) cannot sit
beside it on an 80 GB card, so the default placement, "auto", puts an index on the GPU only when
faiss can run it there and its estimated size fits `budget_bytes` (default 1 GiB: the margin
`kgrag doctor`'s GPU plan leaves for kgrag's own index); a larger index stays on the CPU. "gpu"
forces it (an error when no GPU is visible), "cpu" never moves it. All indexes of a process share
one `StandardGpuResources` per device, so their scratch memory (`temp_memory`) is paid once.

`decide_placement` is a pure function of the sizes, testable without a GPU.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from kgrag_lib.errors import BackendUnavailableError, ConfigError

log = logging.getLogger(__name__)

PLACEMENTS = ("cpu", "gpu", "auto")
DEFAULT_GPU_BUDGET_BYTES = 1 << 30
SETTINGS = ("placement", "gpu_fp16", "gpu_shard", "gpu_temp_memory", "gpu_budget_bytes")


def _faiss():
    import faiss

    return faiss


@dataclass(frozen=True)
class Placement:
    """Placement settings. `where`: "cpu" | "gpu" | "auto". `fp16`: GpuClonerOptions.useFloat16
    (halves a flat index's vectors on the GPU; float16 lookup tables for IVF-PQ, which faiss's
    GPU IVF-PQ needs when many sub-quantizers overflow its shared memory, e.g. PQ64 at d=768). `shard`: split the index across all
    visible GPUs instead of using GPU 0. `temp_memory`: bytes of scratch memory per device
    (None: faiss's default, up to 1.5 GiB). `budget_bytes`: the largest index "auto" puts on
    one GPU (times the GPU count when sharding)."""

    where: str = "auto"
    fp16: bool = False
    shard: bool = False
    temp_memory: int | None = None
    budget_bytes: int = DEFAULT_GPU_BUDGET_BYTES

    def __post_init__(self) -> None:
        if self.where not in PLACEMENTS:
            raise ConfigError(f"placement must be one of {PLACEMENTS}; got {self.where!r}")
        for name, value in (("gpu_fp16", self.fp16), ("gpu_shard", self.shard)):
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be true or false; got {value!r}")
        if self.temp_memory is not None and (isinstance(self.temp_memory, bool) or not isinstance(self.temp_memory, int)
                                             or self.temp_memory < 0):
            raise ConfigError(f"gpu_temp_memory must be a number of bytes >= 0 (e.g. 536870912 for 512 MiB) or "
                              f"null for faiss's default; got {self.temp_memory!r}")
        if isinstance(self.budget_bytes, bool) or not isinstance(self.budget_bytes, int) or self.budget_bytes < 0:
            raise ConfigError(f"gpu_budget_bytes must be a number of bytes >= 0 (e.g. 8589934592 for 8 GiB); "
                              f"got {self.budget_bytes!r}")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "Placement":
        """From a settings mapping with keys among `SETTINGS` (a profile's retrieval section)."""
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ConfigError(f"unknown index placement setting(s) {unknown}; expected some of {SETTINGS}")
        return cls(where=settings.get("placement", "auto"), fp16=settings.get("gpu_fp16", False),
                   shard=settings.get("gpu_shard", False), temp_memory=settings.get("gpu_temp_memory"),
                   budget_bytes=settings.get("gpu_budget_bytes", DEFAULT_GPU_BUDGET_BYTES))


def resolve_placement(placement: "str | Placement | Mapping[str, Any] | None", use_gpu: bool | None = None) -> Placement:
    """One `Placement` from the new setting or the older `use_gpu` flag (True = "gpu", False =
    "cpu", None = "auto"); both given and disagreeing is a ConfigError."""
    legacy = None if use_gpu is None else ("gpu" if use_gpu else "cpu")
    if placement is None:
        return Placement(where=legacy or "auto")
    if isinstance(placement, Placement):
        p = placement
    elif isinstance(placement, str):
        p = Placement(where=placement)
    elif isinstance(placement, Mapping):
        p = Placement.from_settings(placement)
    else:
        raise ConfigError(f"placement must be one of {PLACEMENTS}, a Placement or a mapping of {SETTINGS}; "
                          f"got {type(placement).__name__}")
    if legacy is not None and legacy != p.where:
        raise ConfigError(f"use_gpu={use_gpu} contradicts placement={p.where!r}; give only placement")
    return p


def gpu_count() -> int:
    """GPUs this faiss build sees (0 for faiss-cpu)."""
    faiss = _faiss()
    try:
        return int(faiss.get_num_gpus()) if hasattr(faiss, "StandardGpuResources") else 0
    except Exception:
        return 0


def gpu_capable(index: Any) -> bool:
    """Whether faiss has a GPU version of this index: flat, IVF-Flat, IVF-PQ and IVF-SQ, optionally
    behind a pre-transform (OPQ, PCA). HNSW, fast-scan and non-IVF PQ/SQ indexes are CPU-only."""
    faiss = _faiss()
    index = faiss.downcast_index(index)
    while isinstance(index, faiss.IndexPreTransform):
        index = faiss.downcast_index(index.index)
    if type(index).__name__.startswith("GpuIndex"):
        return True
    return type(index) in (faiss.IndexFlat, faiss.IndexFlatIP, faiss.IndexFlatL2, faiss.IndexIVFFlat,
                           faiss.IndexIVFPQ, faiss.IndexIVFScalarQuantizer)


def estimate_gpu_bytes(index: Any, fp16: bool = False) -> int:
    """What the index would take on a GPU: its codes, 8-byte ids per vector and the coarse
    centroids for IVF; a flat index's float32 vectors halved by `fp16` (faiss's GPU IVF-Flat keeps
    float32 lists). Scratch memory is separate (`Placement.temp_memory`)."""
    faiss = _faiss()
    n = int(index.ntotal)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        return n * (int(ivf.code_size) + 8) + int(ivf.nlist) * int(ivf.d) * 4
    inner = faiss.downcast_index(index)
    while isinstance(inner, faiss.IndexPreTransform):
        inner = faiss.downcast_index(inner.index)
    code = int(inner.sa_code_size()) if hasattr(inner, "sa_code_size") else 4 * int(index.d)
    if fp16 and isinstance(inner, faiss.IndexFlat):
        code //= 2
    return n * code


def decide_placement(where: str, *, gpu_bytes: int, n_gpus: int, gpu_capable: bool,
                     budget_bytes: int = DEFAULT_GPU_BUDGET_BYTES, shard: bool = False,
                     what: str = "index") -> tuple[str, str]:
    """("cpu" | "gpu", why). "gpu" with no GPU visible raises BackendUnavailableError; an index
    faiss cannot run on a GPU stays on the CPU under any setting (said in `why`)."""
    if where not in PLACEMENTS:
        raise ConfigError(f"placement must be one of {PLACEMENTS}; got {where!r}")
    if where == "cpu":
        return "cpu", "placement='cpu'"
    if not gpu_capable:
        return "cpu", f"faiss has no GPU version of this {what} (HNSW, fast-scan or non-IVF PQ/SQ); kept on the CPU"
    if n_gpus <= 0:
        if where == "gpu":
            raise BackendUnavailableError(
                "placement='gpu' (or use_gpu=True) but this faiss build sees no GPU: install faiss-gpu "
                "(`kgrag doctor` names the package for this environment) or set placement to 'cpu' or 'auto'")
        return "cpu", "no GPU visible to faiss"
    if where == "gpu":
        return "gpu", "placement='gpu'"
    budget = budget_bytes * (n_gpus if shard else 1)
    if gpu_bytes <= budget:
        return "gpu", f"{_gib(gpu_bytes)} fits the GPU budget of {_gib(budget)}"
    return "cpu", (f"{_gib(gpu_bytes)} exceeds the GPU budget of {_gib(budget)} (gpu_budget_bytes); "
                   f"kept on the CPU")


def _gib(b: int) -> str:
    return f"{b / 2**30:.2f} GiB"


_RESOURCES: dict[int, tuple[Any, int | None]] = {}
_RESOURCES_LOCK = threading.Lock()


def gpu_resources(device: int = 0, temp_memory: int | None = None) -> Any:
    """The process's one StandardGpuResources for `device`, created on first use. Its scratch
    size is fixed at creation: a later, different `temp_memory` is logged and ignored."""
    faiss = _faiss()
    with _RESOURCES_LOCK:
        have = _RESOURCES.get(device)
        if have is None:
            res = faiss.StandardGpuResources()
            if temp_memory is not None:
                res.setTempMemory(int(temp_memory))
            _RESOURCES[device] = (res, temp_memory)
            return res
        res, made_with = have
        if temp_memory is not None and temp_memory != made_with:
            log.warning("faiss GPU resources of device %d were created with temp memory %s; keeping it "
                        "(asked %d bytes)", device, made_with, temp_memory)
        return res


def to_gpu(index: Any, p: Placement) -> tuple[Any, Any]:
    """(the GPU index, the resources it uses). One device, or all visible ones with `p.shard`."""
    faiss = _faiss()
    n = gpu_count()
    if p.shard and n > 1:
        co = faiss.GpuMultipleClonerOptions()
        co.shard = True
        co.useFloat16 = p.fp16
        resources = [gpu_resources(i, p.temp_memory) for i in range(n)]
        return faiss.index_cpu_to_gpu_multiple_py(resources, index, co, list(range(n))), resources
    co = faiss.GpuClonerOptions()
    co.useFloat16 = p.fp16
    res = gpu_resources(0, p.temp_memory)
    return faiss.index_cpu_to_gpu(res, 0, index, co), res
