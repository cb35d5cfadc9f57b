"""A persistent, process-safe cache of LLM calls in SQLite.

Reruns, sweeps that share stages and ablations must not pay for the same call twice, and a
run killed half-way must keep every answer it already paid for. So every call is one
auto-committed row in a WAL-mode database: a SIGKILL loses at most the call in flight, and
several processes (a papermill sweep) can share the file; writers wait on a busy timeout
and retry.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..paths import cache_dir
from .base import Messages, SamplingParams

KEY_VERSION = 1  # bump when the key recipe changes, so old rows cannot be mistaken for new
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    identity TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL
)
"""


@dataclass(frozen=True)
class CachedCall:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float


def default_cache_path() -> Path:
    """$KGRAG_LLM_CACHE, else `cache_dir()/llm_cache.sqlite`."""
    env = os.environ.get("KGRAG_LLM_CACHE")
    return Path(env).expanduser() if env else cache_dir() / "llm_cache.sqlite"


def canonical_request(
    backend: str, identity: str, messages: Messages, params: SamplingParams
) -> str:
    """The canonical JSON the key hashes: everything that can change the completion."""
    payload = {
        "v": KEY_VERSION,
        "backend": backend,
        "identity": identity,
        "messages": messages,
        "params": params.to_dict(),
    }
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class LLMCache:
    """SQLite call cache; one connection per process and thread-safe within it."""

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        *,
        busy_timeout_s: float = 60.0,
        retries: int = 8,
    ) -> None:
        self.path = Path(path).expanduser() if path else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout_s = busy_timeout_s
        self.retries = retries
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._connect()

    # A connection must not cross a fork: reopen lazily in a child process.
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        conn = sqlite3.connect(
            str(self.path), timeout=self.busy_timeout_s, isolation_level=None,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
        self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone())
        # NORMAL is durable against a killed process in WAL mode (only an OS crash could
        # drop the last commits) and much cheaper than FULL.
        conn.execute("PRAGMA synchronous=NORMAL")
        self._retry(lambda: conn.execute(_SCHEMA))
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _retry(self, fn: Callable[[], T]) -> T:
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                msg = str(e).lower()
                if attempt == self.retries or ("locked" not in msg and "busy" not in msg):
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    @staticmethod
    def make_key(backend: str, identity: str, messages: Messages, params: SamplingParams) -> str:
        """sha256 of the canonical request."""
        raw = canonical_request(backend, identity, messages, params)
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def get(self, key: str) -> CachedCall | None:
        with self._lock:
            conn = self._connect()
            row = self._retry(
                lambda: conn.execute(
                    "SELECT response, prompt_tokens, completion_tokens, seconds "
                    "FROM calls WHERE key = ?", (key,)
                ).fetchone()
            )
        return CachedCall(*row) if row else None

    def put(
        self,
        key: str,
        text: str,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        seconds: float,
        backend: str,
        identity: str,
        messages: Messages,
        params: SamplingParams,
    ) -> None:
        """Store one call; committed before returning (autocommit)."""
        request = canonical_request(backend, identity, messages, params)
        row = (key, backend, identity, request, text, int(prompt_tokens),
               int(completion_tokens), float(seconds), time.time())
        with self._lock:
            conn = self._connect()
            self._retry(
                lambda: conn.execute(
                    "INSERT OR REPLACE INTO calls (key, backend, identity, request, response, "
                    "prompt_tokens, completion_tokens, seconds, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row
                )
            )

    def __len__(self) -> int:
        with self._lock:
            conn = self._connect()
            return int(self._retry(lambda: conn.execute("SELECT COUNT(*) FROM calls").fetchone())[0])

    def stats(self) -> dict[str, Any]:
        """Row count and stored token totals, per model identity."""
        with self._lock:
            conn = self._connect()
            rows = self._retry(
                lambda: conn.execute(
                    "SELECT backend, identity, COUNT(*), SUM(prompt_tokens), "
                    "SUM(completion_tokens), SUM(seconds) FROM calls GROUP BY backend, identity"
                ).fetchall()
            )
        return {
            "path": str(self.path),
            "models": [
                {"backend": b, "identity": i, "calls": n, "prompt_tokens": pt,
                 "completion_tokens": ct, "seconds": s}
                for b, i, n, pt, ct, s in rows
            ],
        }

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "LLMCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Picklable for multiprocessing: the connection is reopened on the other side.
        return {"path": self.path, "busy_timeout_s": self.busy_timeout_s, "retries": self.retries}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], busy_timeout_s=state["busy_timeout_s"], retries=state["retries"])
