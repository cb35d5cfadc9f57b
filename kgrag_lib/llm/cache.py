"""A persistent, process-safe cache of LLM calls in SQLite.

Reruns, sweeps that share stages and ablations must not pay for the same call twice, and a
run killed half-way must keep every answer it already paid for. So every call is one
auto-committed row in a WAL-mode database: a SIGKILL loses at most the call in flight, and
several processes (a papermill sweep) can share the file; writers wait on a busy timeout
and retry. A damaged file (a disk fault, a copy cut short) is found by a read-only
`PRAGMA quick_check` when the cache is opened, and a damage error from any later statement is
caught too: both raise CacheDamagedError naming the file and the recovery (`salvage_cache`,
i.e. `kgrag cache salvage`), and nothing is ever written into a file that failed the check.
The check reads the whole file once per process (0.06 s for 85 MB with a warm page cache).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from ..errors import CacheDamagedError, ConfigError, DataFormatError, MissingDataError, UnreadableFileError
from ..jsonl import read_jsonl, rewrite_jsonl
from ..paths import cache_dir
from .base import Messages, SamplingParams, TokenLogprob, cache_key, canonical_request

T = TypeVar("T")
_DAMAGE_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB")

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
    logprobs: tuple[TokenLogprob, ...] | None = None


def _envelope(text: str, logprobs: list[TokenLogprob]) -> str:
    """The stored response of a request that asked for log-probabilities: the text and the
    tokens as JSON in the same column, so the table (and its export files) keep one layout.
    Such requests have `logprobs` in their key, so a plain-text row is never read as one."""
    return json.dumps({"text": text, "logprobs": [t.to_json() for t in logprobs]},
                      ensure_ascii=False, separators=(",", ":"))


def _open_envelope(response: str) -> tuple[str, tuple[TokenLogprob, ...]] | None:
    try:
        value = json.loads(response)
        return str(value["text"]), tuple(TokenLogprob.from_json(t) for t in value["logprobs"])
    except (ValueError, KeyError, TypeError):
        return None


def default_cache_path() -> Path:
    """$KGRAG_LLM_CACHE, else `cache_dir()/llm_cache.sqlite`."""
    env = os.environ.get("KGRAG_LLM_CACHE")
    return Path(env).expanduser() if env else cache_dir() / "llm_cache.sqlite"


def _is_damage(exc: sqlite3.Error) -> bool:
    """True for the errors that mean a damaged file (not a lock, a full disk or a bad statement)."""
    return str(getattr(exc, "sqlite_errorname", "")).startswith(_DAMAGE_CODES)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _damaged(path: Path, detail: str) -> CacheDamagedError:
    """The one-line error for a damaged cache file, with both ways out."""
    return CacheDamagedError(
        f"LLM cache {path} is damaged ({_one_line(detail)}); keep its readable answers with "
        f"`kgrag cache salvage {path}`, or move it aside and rerun (its answers are then recomputed)")


def _read_only(path: Path, timeout_s: float = 60.0) -> sqlite3.Connection:
    """A connection that cannot write: it never checkpoints a write-ahead log into the file."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s)


def quick_check(path: Path, timeout_s: float = 60.0) -> str:
    """"ok", or the first problem `PRAGMA quick_check` reports, read through a read-only connection."""
    conn = _read_only(path, timeout_s)
    try:
        return str(conn.execute("PRAGMA quick_check(1)").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        if _is_damage(exc):
            return str(exc)
        raise
    finally:
        conn.close()


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
        if self.path.exists():
            problem = self._retry(lambda: quick_check(self.path, self.busy_timeout_s))
            if problem != "ok":
                raise _damaged(self.path, f"quick_check: {problem}")
        conn = sqlite3.connect(
            str(self.path), timeout=self.busy_timeout_s, isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone())
            # NORMAL is durable against a killed process in WAL mode (only an OS crash could
            # drop the last commits) and much cheaper than FULL.
            conn.execute("PRAGMA synchronous=NORMAL")
            self._retry(lambda: conn.execute(_SCHEMA))
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _retry(self, fn: Callable[[], T]) -> T:
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except sqlite3.DatabaseError as e:
                if _is_damage(e):
                    raise _damaged(self.path, str(e)) from None
                msg = str(e).lower()
                if (not isinstance(e, sqlite3.OperationalError) or attempt == self.retries
                        or ("locked" not in msg and "busy" not in msg)):
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    @staticmethod
    def make_key(backend: str, identity: str, messages: Messages, params: SamplingParams) -> str:
        """sha256 of the canonical request (`base.cache_key`)."""
        return cache_key(backend, identity, messages, params)

    def get(self, key: str, *, logprobs: bool = False) -> CachedCall | None:
        """The stored call, or None. `logprobs=True` (a request that asked for them) reads the
        JSON envelope `put` wrote; a row that does not parse as one counts as a miss."""
        with self._lock:
            conn = self._connect()
            row = self._retry(
                lambda: conn.execute(
                    "SELECT response, prompt_tokens, completion_tokens, seconds "
                    "FROM calls WHERE key = ?", (key,)
                ).fetchone()
            )
        if not row:
            return None
        if not logprobs:
            return CachedCall(*row)
        opened = _open_envelope(row[0])
        if opened is None:
            return None
        return CachedCall(opened[0], row[1], row[2], row[3], opened[1])

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
        logprobs: list[TokenLogprob] | None = None,
    ) -> None:
        """Store one call; committed before returning (autocommit). With `logprobs` (the
        request asked for them) the text and the tokens are stored together as JSON."""
        request = canonical_request(backend, identity, messages, params)
        if logprobs is not None:
            text = _envelope(text, logprobs)
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

    def find(self, prefix: str) -> list[dict[str, Any]]:
        """The stored calls whose key starts with `prefix` (a run's request ids are the first 16
        hex digits of the key): each as its key, the canonical request (decoded) and the completion
        text (out of its envelope when the request asked for log-probabilities)."""
        if not re.fullmatch(r"[0-9a-f]{1,64}", prefix):
            raise ValueError(f"request id {prefix!r}: expected hex digits (a prediction's `requests` entry)")
        with self._lock:
            conn = self._connect()
            rows = self._retry(lambda: conn.execute(
                "SELECT key, request, response, prompt_tokens, completion_tokens, seconds FROM calls "
                "WHERE key >= ? AND key < ? ORDER BY key", (prefix, prefix + "g")).fetchall())
        found = []
        for k, req, resp, pt, ct, sec in rows:
            request = json.loads(req)
            opened = _open_envelope(resp) if (request.get("params") or {}).get("logprobs") else None
            found.append({"key": k, "request": request, "text": opened[0] if opened else resp,
                          "prompt_tokens": pt, "completion_tokens": ct, "seconds": sec})
        return found

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


# ---- checking and salvaging a cache file ------------------------------------------------
_COLUMNS = "key, backend, identity, request, response, prompt_tokens, completion_tokens, seconds, created"
_WINDOW = 512  # row ids read per query; a window that fails is halved until the damaged rows are isolated
_MIN_ROW_BYTES = 100  # no stored call is smaller (the key alone is 64 bytes): bounds the row ids to try


@dataclass(frozen=True)
class SalvageReport:
    """What `salvage_cache` did. `moved_to` is None when the file was healthy and left alone."""

    path: Path
    kept: int
    unreadable: int | None  # row ids unreadable or failing the key check (an upper bound on rows lost); None: unknown
    moved_to: Path | None


def existing_cache_file(path: str | os.PathLike | None) -> Path:
    """`path` (default: the cache runs use) when it is an existing file, else an error naming it."""
    path = Path(path).expanduser() if path else default_cache_path()
    if not path.exists():
        raise MissingDataError(f"{path}: no such LLM cache file (the default is {default_cache_path()})")
    if not path.is_file():
        raise UnreadableFileError(f"{path}: is a directory, not a file; expected an LLM cache (SQLite) file")
    return path


def _query(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[tuple] | None:
    """The rows of `sql`, or None where the file's damage makes them unreadable."""
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.DatabaseError as exc:
        if _is_damage(exc) or "no such table" in str(exc):
            return None
        raise


def check_cache(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The full `PRAGMA integrity_check` (first 20 problems) and the row count of a cache file,
    through a read-only connection; "rows" is None when the damage hides it."""
    path = existing_cache_file(path)
    conn = _read_only(path)
    try:
        try:
            problems = [_one_line(r[0]) for r in conn.execute("PRAGMA integrity_check(20)")]
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise
            problems = [str(exc)]
        count = _query(conn, "SELECT COUNT(*) FROM calls")
    finally:
        conn.close()
    ok = problems == ["ok"]
    return {"path": str(path), "ok": ok, "problems": [] if ok else problems,
            "rows": count[0][0] if count else None}


def _valid_row(row: tuple) -> bool:
    """Types as stored by `put`, and the key is the hash of the stored request."""
    if len(row) != 9 or not all(isinstance(v, str) for v in row[:5]):
        return False
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 for v in row[5:7]):
        return False   # token counts as a run stores them (10**30 or -1 would overflow SQLite or fake a cost)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < 2**62
               for v in row[7:]):
        return False
    return hashlib.sha256(row[3].encode("utf-8")).hexdigest() == row[0]


def _scratch_copy(path: Path, folder: Path) -> Path:
    """The file and its write-ahead log copied into `folder`, zero-padded to the page count its
    header records: SQLite refuses a truncated file outright, though every page before the cut is
    intact, while zeroed pages only fail the reads that touch them."""
    copy = folder / "copy.sqlite"
    shutil.copyfile(path, copy)
    if Path(f"{path}-wal").exists():
        shutil.copyfile(f"{path}-wal", f"{copy}-wal")
    with open(copy, "rb+") as f:
        header = f.read(100)
        if len(header) == 100 and header[:16] == b"SQLite format 3\0":
            page = int.from_bytes(header[16:18], "big")
            page = 65536 if page == 1 else page
            pages = int.from_bytes(header[28:32], "big")
            size = f.seek(0, os.SEEK_END)
            want = max(pages * page, -(-size // page) * page)
            f.write(b"\0" * (want - size))
    return copy


def _readable_rows(path: Path) -> tuple[list[tuple], int | None]:
    """Every row of a scratch copy that can be read and passes `_valid_row`, and the count of
    row ids that cannot (None when the damage hides how many rows there were)."""
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.salvage-", dir=path.parent) as tmp:
        conn = sqlite3.connect(str(_scratch_copy(path, Path(tmp))))
        try:
            return _rows_of(conn, path.stat().st_size)
        finally:
            conn.close()


def _rows_of(conn: sqlite3.Connection, file_size: int) -> tuple[list[tuple], int | None]:
    rows: list[tuple] = []
    bad = 0
    if _query(conn, "SELECT sql FROM sqlite_master WHERE name = 'calls'") in (None, []):
        return [], None
    top = _query(conn, "SELECT max(rowid) FROM calls")
    if top is not None and top[0][0] is None:
        return [], 0  # an empty table
    hi = int(top[0][0]) if top else file_size // _MIN_ROW_BYTES  # unknown: try every id the file could hold
    pending = [(lo, min(lo + _WINDOW, hi + 1)) for lo in range(1, hi + 1, _WINDOW)][::-1]
    while pending:
        lo, end = pending.pop()
        got = _query(conn, f"SELECT {_COLUMNS} FROM calls WHERE rowid >= ? AND rowid < ?", (lo, end))
        if got is None and end - lo > 1:
            mid = (lo + end) // 2
            pending += [(mid, end), (lo, mid)]
        elif got is None:
            bad += 1
        else:
            good = [r for r in got if _valid_row(r)]
            bad += len(got) - len(good)
            rows += good
    return rows, bad if top else None


def salvage_cache(path: str | os.PathLike | None = None) -> SalvageReport:
    """Copy every readable row of a damaged cache into a fresh file at the same path.

    The damaged file (with its -wal/-shm) is moved aside to `<name>.damaged-<time>`, only after
    the fresh file is complete; a file that passes `integrity_check` is left alone. Stop the runs
    using the cache first (a damaged cache stops them anyway).
    """
    path = existing_cache_file(path)
    status = check_cache(path)
    if status["ok"]:
        return SalvageReport(path, int(status["rows"] or 0), 0, None)
    rows, bad = _readable_rows(path)
    fresh = path.with_name(path.name + ".salvage-tmp")
    fresh.unlink(missing_ok=True)
    conn = sqlite3.connect(str(fresh))
    try:
        conn.execute(_SCHEMA)
        with conn:
            conn.executemany(f"INSERT OR REPLACE INTO calls ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        kept = int(conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])
    finally:
        conn.close()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    os.replace(fresh, path)
    return SalvageReport(path, kept, bad, aside)


def export_cache(dest: str | os.PathLike, path: str | os.PathLike | None = None, *,
                 identities: Iterable[str] | None = None, since: float | None = None,
                 exclude_keys: set[str] | None = None) -> int:
    """Write the cache's rows (optionally only some model identities, or rows created after
    `since`, a unix time) as gzip JSON lines: a compact file that can be committed, so the answers a long
    run paid for survive a fresh checkout (`import_cache` loads it back). The cache itself is never
    the destination."""
    src = existing_cache_file(path)
    if Path(dest).resolve() == Path(src).resolve():
        raise ConfigError(f"cannot export the LLM cache {src} onto itself: name another file, e.g. "
                          f"{Path(src).with_suffix('.jsonl.gz')}")
    conn = _read_only(src)
    try:
        sql, args = f"SELECT {_COLUMNS} FROM calls", []
        where = []
        if identities is not None:
            ids = list(identities)
            where.append(f"identity IN ({', '.join('?' * len(ids))})")
            args += ids
        if since is not None:
            where.append("created >= ?")
            args.append(float(since))
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = conn.execute(sql + " ORDER BY created, key", args).fetchall()
    finally:
        conn.close()
    if exclude_keys:
        rows = [r for r in rows if r[0] not in exclude_keys]
    columns = _COLUMNS.split(", ")
    rewrite_jsonl(Path(dest), (dict(zip(columns, row)) for row in rows), gz=True)
    return len(rows)


PART_GLOB = "part-*.jsonl.gz"
EXPORT_FORM = "a gzip JSON-lines export of the LLM cache (kgrag cache export)"


def _read_export(path: Path) -> list[dict[str, Any]]:
    """The rows of an export file; a damaged one is a DataFormatError (naming the line where it can)."""
    try:
        return read_jsonl(path, expected=EXPORT_FORM, gz=True).rows
    except (OSError, EOFError) as exc:
        raise DataFormatError(path, None, EXPORT_FORM, f"{type(exc).__name__}: {exc}") from None


def export_cache_part(folder: str | os.PathLike, path: str | os.PathLike | None = None, *,
                      identities: Iterable[str] | None = None) -> tuple[Path | None, int]:
    """Append the rows that no earlier part in `folder` holds as the next `part-NNNN.jsonl.gz`
    (None, 0 when there is nothing new). Parts are never rewritten, so a long run can commit its
    answers every few minutes and the repository grows by the new answers only."""
    folder = Path(folder)
    with _parts_lock(folder):   # two exports into one folder at once would pick the same next number
        return _export_part_locked(folder, path, identities)


def _parts_lock(folder: Path) -> Any:
    """A lock per parts folder, kept in the temp folder (not in the folder, which is committed)."""
    from filelock import FileLock

    key = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:16]
    return FileLock(str(Path(tempfile.gettempdir()) / f"kgrag-cache-parts-{key}.lock"))


def _export_part_locked(folder: Path, path: str | os.PathLike | None, identities: Iterable[str] | None
                        ) -> tuple[Path | None, int]:
    parts = sorted(folder.glob(PART_GLOB))
    seen: set[str] = set()
    for part in parts:
        try:
            seen.update(row["key"] for row in _read_export(part))
        except KeyError as exc:
            raise DataFormatError(part, None, EXPORT_FORM, f"a row without {exc}; move the file aside and export "
                                  "again") from None
    number = 1 + max((int(p.name[5:9]) for p in parts if p.name[5:9].isdigit()), default=0)
    dest = folder / f"part-{number:04d}.jsonl.gz"
    n = export_cache(dest, path, identities=identities, exclude_keys=seen)
    if n == 0:
        dest.unlink()
        return None, 0
    return dest, n


def cache_exports(src: str | os.PathLike) -> list[Path]:
    """The export files named by `src`: the file itself, or a folder's parts in order."""
    src = Path(src)
    return sorted(src.glob(PART_GLOB)) if src.is_dir() else [src]


def import_cache(src: str | os.PathLike, path: str | os.PathLike | None = None) -> tuple[int, int]:
    """Load rows written by `export_cache` into the cache; (added, refused). A row whose key is
    not the hash of its request is refused, never stored; rows already present are kept."""
    src = Path(src)
    good, refused = [], 0
    for rec in _read_export(src):
        row = tuple(rec.get(c) for c in _COLUMNS.split(", "))
        if _valid_row(row):
            good.append(row)
        else:
            refused += 1
    cache = LLMCache(path)
    with cache._lock:
        conn = cache._connect()
        before = int(conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])
        cache._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
        try:
            conn.executemany(f"INSERT OR IGNORE INTO calls ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", good)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        after = int(conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])
    cache.close()
    return after - before, refused

