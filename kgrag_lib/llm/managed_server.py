"""Start an inference server as a child process for one run, and make sure it stops.

`--model vllm-serve:<model>`, `llamacpp-server:<gguf>` and `llama-server:<gguf>` use this: the
server listens on a free loopback port, its log goes to a file (the run folder when known, else
`cache_dir()/servers/`), the run waits until it lists the model, and the server is stopped by
`close()`, at interpreter exit, on SIGTERM, and (Linux) when the parent dies however it dies.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from ..config import ServerConfig
from ..errors import BackendUnavailableError, ConfigError
from ..paths import cache_dir
from ..redact import hold_flag_secrets, redact
from .vllm_env import refuse_owned

LLAMA_SERVER_ENV = "KGRAG_LLAMA_SERVER"   # path of the llama-server binary when not on PATH
_LIVE: set["ManagedServer"] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def free_port() -> int:
    """A TCP port nobody listens on at 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prctl() -> Any:
    """libc's prctl, looked up here in the parent: loading a library between fork and exec in a
    threaded parent can deadlock the child."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except Exception:  # noqa: BLE001 - best effort; atexit and close() still stop it
        return None


def _die_with_parent(prctl: Any) -> Any:
    """Linux: the child gets SIGTERM when the parent dies, even by SIGKILL (the function runs in the
    child between fork and exec, and only calls what the parent looked up)."""
    def set_pdeathsig() -> None:  # pragma: no cover - runs in the child
        try:
            prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001
            pass
    return set_pdeathsig if prctl is not None else None


# Loopback requests never go through a proxy (a cluster's http_proxy without 127.0.0.1 in no_proxy
# would keep a started server from ever looking ready).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ManagedServer:
    """One child server process: `base_url`, `alias` and `flavor` say how to talk to it."""

    def __init__(self, cmd: Sequence[str], *, flavor: str, alias: str, port: int, log_path: Path,
                 startup_timeout: float, env: dict[str, str] | None = None, version: str | None = None) -> None:
        self.cmd = [str(c) for c in cmd]
        hold_flag_secrets(self.cmd)     # a server echoing its --api-key (however short) is masked
        self.env = dict(env or {})      # set on top of ours for the child only
        self.version = version          # what the installed server says it is, when known
        self.flavor = flavor
        self.alias = alias
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self._stopped = False
        self.startup_seconds: float | None = None   # from the start to the model being listed

    def __repr__(self) -> str:
        return f"ManagedServer({self.flavor}, {self.base_url}, pid={self.proc.pid if self.proc else None})"

    def start(self) -> "ManagedServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        shown_env = "".join(f"{k}={v} " for k, v in sorted(self.env.items()))
        log.write(f"# kgrag started: {redact(shown_env + ' '.join(self.cmd))}\n".encode())
        log.flush()
        _install_handlers()
        try:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, env={**os.environ, **self.env} if self.env else None,
                                         preexec_fn=_die_with_parent(_prctl()) if sys.platform.startswith("linux")
                                         else None)
        except OSError as e:
            raise BackendUnavailableError(f"cannot start {self.cmd[0]!r}: {e}") from None
        finally:
            log.close()
        with _LIVE_LOCK:
            _LIVE.add(self)
        started = time.monotonic()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_ready(self) -> None:
        """Poll /v1/models until the server lists our alias, the process dies, or time runs out."""
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = self.log_tail()
                raise BackendUnavailableError(
                    f"the {self.flavor} server exited with code {self.proc.returncode} while starting: "
                    f"{log_reason(tail)}; its log ({self.log_path}) ends with:\n{tail}")
            try:
                with _DIRECT.open(self.base_url + "/models", timeout=5) as resp:
                    ids = [m.get("id") for m in json.loads(resp.read()).get("data") or []]
                if self.alias in ids:
                    return
            except (urllib.error.URLError, OSError, ValueError, AttributeError):
                pass
            if time.monotonic() > deadline:
                raise BackendUnavailableError(
                    f"the {self.flavor} server did not list {self.alias!r} at {self.base_url}/models within "
                    f"{self.startup_timeout:g} s (raise server.startup_timeout, or ?startup_timeout= on the spec, "
                    f"for a large model); log {self.log_path} ends with:\n{self.log_tail()}")
            time.sleep(0.25)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stopped_message(self) -> str:
        """One line on why a server that was serving has stopped, then the tail of its log."""
        code = self.proc.returncode if self.proc is not None else None
        tail = self.log_tail(30)
        return (f"the {self.flavor} server kgrag started for this run has stopped (exit code {code}): "
                f"{log_reason(tail)}; its log ({self.log_path}) ends with:\n{tail}")

    def exited(self, within: float = 0.0) -> bool:
        """Has the server process ended (waiting up to `within` seconds for it to)?"""
        if self.proc is None:
            return False
        try:
            self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            return False
        return True

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to the server's whole process group, SIGKILL after `grace` seconds to what is left;
        idempotent. The group, not the leader: vLLM's engine and worker processes hold the GPU and may
        outlive an API server that crashed or was killed."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        proc = self.proc
        if proc is None or self._stopped:   # once stopped, never signal that group id again (it may be reused)
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                proc.poll()   # reap the leader, so an exited one does not count as the group's member
                try:
                    os.killpg(proc.pid, 0)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.1)
            else:
                continue
            break
        proc.poll()
        self._stopped = True


# Lines that say why a server stopped, best first: a Python exception's headline (or pydantic's
# "Value error, ..." under it), then an `error:` line or an out-of-memory kill.
_REASONS = (re.compile(r"^\s*(Value error, |[\w.]*(Error|Exception)(: |$))"),
            re.compile(r"(\berror:|\bERROR\b|out of memory|\bKilled\b)", re.IGNORECASE))


def log_reason(tail: str) -> str:
    """The one line of a server log that says why it stopped (see `_REASONS`), else its last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip() and not ln.startswith("# kgrag started")]
    for pattern in _REASONS:
        for line in reversed(lines):
            if pattern.search(line):
                return line[:400]
    return lines[-1][:400] if lines else "its log is empty"


def stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for s in servers:
        s.stop()


def _install_handlers() -> None:
    """atexit always; SIGTERM only from the main thread (the handler stops our servers, then
    lets the previous handler, or the default, end the process)."""
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # pragma: no cover - exercised by a subprocess test
        stop_all()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)


def _log_path(kind: str, port: int, log_dir: str | os.PathLike | None) -> Path:
    folder = Path(log_dir) if log_dir else cache_dir() / "servers"
    return folder / f"{kind}-{port}.log"


# What kgrag sets on a llama.cpp server's command line (besides the listening address, the model and
# the alias kgrag waits for): given again in `server.args`, the last value would win silently (a
# --host 0.0.0.0 would serve the model on every interface, without a key).
LLAMA_SERVER_OWNED = {
    "--host": "kgrag (loopback only)", "--port": "kgrag (a free port)", "-m": "the spec", "--model": "the spec",
    "-mu": "the spec", "--model-url": "the spec", "-hf": "the spec", "-hfr": "the spec", "--hf-repo": "the spec",
    "-hff": "the spec", "--hf-file": "the spec", "-a": "kgrag's alias", "--alias": "kgrag's alias",
    "-c": "server.max_model_len", "--ctx-size": "server.max_model_len", "-ngl": "server.n_gpu_layers",
    "--gpu-layers": "server.n_gpu_layers", "--n-gpu-layers": "server.n_gpu_layers"}
# llama-cpp-python's server: argparse over its settings' field names (underscores), abbreviations allowed
LLAMACPP_PYTHON_OWNED = {
    "--host": "kgrag (loopback only)", "--port": "kgrag (a free port)", "--model": "the spec",
    "--model_alias": "kgrag's alias", "--n_ctx": "server.max_model_len", "--n_gpu_layers": "server.n_gpu_layers",
    "--config_file": "kgrag (a config file would replace every setting kgrag gives, the address included)"}


def _missing_modules(names: Sequence[str]) -> list[str]:
    return [n for n in names if importlib.util.find_spec(n) is None]


def gpu_visible() -> bool:
    """Whether this process would see an NVIDIA GPU: `nvidia-smi -L` lists one and CUDA_VISIBLE_DEVICES
    does not hide them all (no torch import: a llama.cpp server needs none)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        r = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and any(ln.startswith("GPU ") for ln in r.stdout.splitlines())


def _llama_options(config: Any, n_gpu_layers: int | None) -> tuple[Any, int, int | None]:
    """(config, n_ctx, GPU layers) of a llama.cpp server: the config's own n_gpu_layers wins over
    the preset's, and with neither every layer goes to a visible GPU (-1; llama-cpp-python's server
    would otherwise keep them all on the CPU of a GPU machine); vLLM-only settings left at their defaults."""
    cfg = config if config is not None else ServerConfig()
    for name, neutral in (("gpu_memory_utilization", None), ("cpu_kvcache_gib", None), ("max_num_seqs", None),
                          ("batch_invariant", False), ("dtype", "auto")):
        if getattr(cfg, name) != neutral:
            raise ConfigError(f"server.{name}={getattr(cfg, name)!r} is a vLLM setting; a llama.cpp server reads "
                              "max_model_len (its n_ctx), n_gpu_layers, startup_timeout and args")
    layers = cfg.n_gpu_layers if cfg.n_gpu_layers is not None else n_gpu_layers
    if layers is None and gpu_visible():
        layers = -1
    return cfg, int(cfg.max_model_len or 4096), layers


def start_llamacpp_python(path: str | os.PathLike, *, alias: str = "local", config: Any = None,
                          n_gpu_layers: int | None = None, log_dir: str | os.PathLike | None = None) -> ManagedServer:
    """llama-cpp-python's server (`python -m llama_cpp.server`) on our own llama.cpp build.
    `n_gpu_layers` is the preset's (its server's own default is 0: all on the CPU; `_llama_options` sends every
    layer to a visible GPU when neither the config nor the preset says)."""
    cfg, n_ctx, layers = _llama_options(config, n_gpu_layers)   # a bad setting is refused before anything else
    extra = refuse_owned(cfg.args, LLAMACPP_PYTHON_OWNED, "llama-cpp-python's server", abbrev=True)
    missing = _missing_modules(["llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context",
                                "pydantic_settings"])
    if missing:
        raise BackendUnavailableError(f"llamacpp-server: needs llama-cpp-python's server extra; missing {missing}: "
                                      "pip install 'llama-cpp-python[server]' (a CUDA build on a GPU: "
                                      "docs/INSTALL-GPU.md)")
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", alias,
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx)]
    if layers is not None:
        cmd += ["--n_gpu_layers", str(layers)]
    return ManagedServer([*cmd, *extra], flavor="llama-cpp-python", alias=alias, port=port,
                         log_path=_log_path("llamacpp-server", port, log_dir), startup_timeout=cfg.startup_timeout).start()


def start_llama_server(path: str | os.PathLike, *, alias: str = "local", config: Any = None,
                       n_gpu_layers: int | None = None, log_dir: str | os.PathLike | None = None) -> ManagedServer:
    """llama.cpp's `llama-server` binary ($KGRAG_LLAMA_SERVER, else from PATH)."""
    cfg, n_ctx, layers = _llama_options(config, n_gpu_layers)
    extra = refuse_owned(cfg.args, LLAMA_SERVER_OWNED, "llama-server", abbrev=False)
    binary = os.environ.get(LLAMA_SERVER_ENV) or shutil.which("llama-server")
    if not binary:
        raise BackendUnavailableError(
            f"llama-server: the llama.cpp `llama-server` binary is not on PATH (nor in ${LLAMA_SERVER_ENV}); get it "
            "from a llama.cpp release (github.com/ggml-org/llama.cpp/releases), a package manager (brew install "
            "llama.cpp), or build it (cmake -B build && cmake --build build --target llama-server); or use "
            "llamacpp-server:<gguf>, which runs llama-cpp-python's server from this environment")
    port = free_port()
    cmd = [binary, "-m", str(path), "--alias", alias, "--host", "127.0.0.1", "--port", str(port), "-c", str(n_ctx)]
    if layers is not None:
        cmd += ["-ngl", str(999 if layers < 0 else layers)]   # 999: every layer, in every llama.cpp release
    return ManagedServer([*cmd, *extra], flavor="llama-server", alias=alias, port=port,
                         log_path=_log_path("llama-server", port, log_dir), startup_timeout=cfg.startup_timeout).start()


def start_vllm(model: str, *, alias: str | None = None, config: Any = None, dtype: str | None = None,
               engine: Any = None, log_dir: str | os.PathLike | None = None,
               revision: str | None = None, lora: Any = None) -> ManagedServer:
    """vLLM serving `model` (a Hugging Face id or a local folder) from its own environment
    (`engine`, else `vllm_env.find_vllm`), with the options of `config` (a `ServerConfig`);
    `dtype` overrides `config.dtype` (`vllm_env.serve_dtype` chooses it for `load_llm`); `revision`
    pins a hub id to the commit kgrag keys its cache by. With `lora` (a `lora.LoraAdapter`) the base
    is served as `alias` and the adapter under its own name, which the server's `alias` becomes: the
    run waits for the adapter to be listed, and every request names it."""
    from .vllm_env import find_vllm, server_args

    if not model:
        raise ConfigError("vllm-serve: expected vllm-serve:<hf id, model folder or preset>")
    cfg = config if config is not None else ServerConfig()
    alias = alias or model
    engine = engine or find_vllm(cfg.python)
    args, env = server_args(engine, cfg, dtype=dtype or cfg.dtype)
    port = free_port()
    cmd = [*engine.serve_command(model), "--host", "127.0.0.1", "--port", str(port), "--served-model-name", alias, *args]
    if revision:
        cmd += ["--revision", revision]
    if lora is not None:
        from .lora import lora_args

        if lora.name == alias:
            raise ConfigError(f"lora=: the adapter's name {lora.name!r} is the base model's served name; give it "
                              "another (requests pick base or adapter by this name)")
        cmd += lora_args(lora, [str(a) for a in cfg.args])
        alias = lora.name
    return ManagedServer(cmd, flavor="vllm", alias=alias, port=port, env=env, version=engine.version,
                         log_path=_log_path("vllm", port, log_dir), startup_timeout=cfg.startup_timeout).start()
