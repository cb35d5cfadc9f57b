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
from typing import Sequence

from ..errors import BackendUnavailableError, ConfigError
from ..paths import cache_dir

LLAMA_SERVER_ENV = "KGRAG_LLAMA_SERVER"   # path of the llama-server binary when not on PATH
_LIVE: set["ManagedServer"] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def free_port() -> int:
    """A TCP port nobody listens on at 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM when the parent dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort; atexit and close() still stop it
        pass


class ManagedServer:
    """One child server process: `base_url`, `alias` and `flavor` say how to talk to it."""

    def __init__(self, cmd: Sequence[str], *, flavor: str, alias: str, port: int, log_path: Path,
                 startup_timeout: float) -> None:
        self.cmd = [str(c) for c in cmd]
        self.flavor = flavor
        self.alias = alias
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None

    def __repr__(self) -> str:
        return f"ManagedServer({self.flavor}, {self.base_url}, pid={self.proc.pid if self.proc else None})"

    def start(self) -> "ManagedServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        log.write(f"# kgrag started: {' '.join(self.cmd)}\n".encode())
        log.flush()
        _install_handlers()
        try:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        except OSError as e:
            raise BackendUnavailableError(f"cannot start {self.cmd[0]!r}: {e}") from None
        finally:
            log.close()
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        """Poll /v1/models until the server lists our alias, the process dies, or time runs out."""
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise BackendUnavailableError(
                    f"the {self.flavor} server exited with code {self.proc.returncode} while starting; "
                    f"its log ({self.log_path}) ends with:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=5) as resp:
                    ids = [m.get("id") for m in json.loads(resp.read()).get("data") or []]
                if self.alias in ids:
                    return
            except (urllib.error.URLError, OSError, ValueError, AttributeError):
                pass
            if time.monotonic() > deadline:
                raise BackendUnavailableError(
                    f"the {self.flavor} server did not list {self.alias!r} at {self.base_url}/models within "
                    f"{self.startup_timeout:g} s (raise startup_timeout= for a large model); log "
                    f"{self.log_path} ends with:\n{self.log_tail()}")
            time.sleep(0.25)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after `grace` seconds; idempotent."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


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


def _missing_modules(names: Sequence[str]) -> list[str]:
    return [n for n in names if importlib.util.find_spec(n) is None]


def start_llamacpp_python(path: str | os.PathLike, *, alias: str = "local", n_ctx: int = 4096,
                          server_args: Sequence[str] = (), log_dir: str | os.PathLike | None = None,
                          startup_timeout: float = 180.0) -> ManagedServer:
    """llama-cpp-python's server (`python -m llama_cpp.server`) on our own llama.cpp build."""
    missing = _missing_modules(["llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context",
                                "pydantic_settings"])
    if missing:
        raise BackendUnavailableError(f"llamacpp-server: needs llama-cpp-python's server extra; missing {missing}: "
                                      "pip install -e '.[cpu]' (or pip install 'llama-cpp-python[server]')")
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", alias,
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(int(n_ctx)), *server_args]
    return ManagedServer(cmd, flavor="llama-cpp-python", alias=alias, port=port,
                         log_path=_log_path("llamacpp-server", port, log_dir), startup_timeout=startup_timeout).start()


def start_llama_server(path: str | os.PathLike, *, alias: str = "local", n_ctx: int = 4096,
                       server_args: Sequence[str] = (), log_dir: str | os.PathLike | None = None,
                       startup_timeout: float = 180.0) -> ManagedServer:
    """llama.cpp's `llama-server` binary ($KGRAG_LLAMA_SERVER, else from PATH)."""
    binary = os.environ.get(LLAMA_SERVER_ENV) or shutil.which("llama-server")
    if not binary:
        raise BackendUnavailableError(
            f"llama-server: the llama.cpp `llama-server` binary is not on PATH (nor in ${LLAMA_SERVER_ENV}); get it "
            "from a llama.cpp release (github.com/ggml-org/llama.cpp/releases), a package manager (brew install "
            "llama.cpp), or build it (cmake -B build && cmake --build build --target llama-server); or use "
            "llamacpp-server:<gguf>, which runs llama-cpp-python's server from this environment")
    port = free_port()
    cmd = [binary, "-m", str(path), "--alias", alias, "--host", "127.0.0.1", "--port", str(port),
           "-c", str(int(n_ctx)), *server_args]
    return ManagedServer(cmd, flavor="llama-server", alias=alias, port=port,
                         log_path=_log_path("llama-server", port, log_dir), startup_timeout=startup_timeout).start()


def start_vllm(model: str, *, alias: str | None = None, n_ctx: int | None = None, server_args: Sequence[str] = (),
               log_dir: str | os.PathLike | None = None, startup_timeout: float = 900.0) -> ManagedServer:
    """`vllm serve <model>` (a Hugging Face id or a local folder); needs vLLM and a GPU."""
    if not model:
        raise ConfigError("vllm-serve: expected vllm-serve:<hf id or model folder>")
    alias = alias or model
    binary = shutil.which("vllm")
    if binary:
        head = [binary, "serve", model]
    elif importlib.util.find_spec("vllm") is not None:
        head = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    else:
        raise BackendUnavailableError("vllm-serve: vLLM is not installed here; on a GPU machine run "
                                      "pip install -e '.[vllm]', or point vllm:<model> at a running server "
                                      "($KGRAG_VLLM_URL)")
    port = free_port()
    cmd = [*head, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", alias]
    if n_ctx:
        cmd += ["--max-model-len", str(int(n_ctx))]
    return ManagedServer([*cmd, *server_args], flavor="vllm", alias=alias, port=port,
                         log_path=_log_path("vllm", port, log_dir), startup_timeout=startup_timeout).start()
