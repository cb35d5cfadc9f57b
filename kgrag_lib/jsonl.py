"""The files every resumable writer keeps: JSON lines appended one fsynced line at a time, read
back after a kill, and JSON files replaced whole.

- `JsonlAppender`: each `append` writes one line, flushes and fsyncs before returning, under a
  lock (several threads may append to one file): a kill loses at most the line being written.
- `read_jsonl`: one JSON object per line, blank lines skipped. With `torn_tail` (a writer
  resuming its own file) an unparsable *last* line is the write a kill interrupted and is
  dropped (`JsonlRead.torn`; `drop_torn_tail` cuts it off the file); any other bad line is a
  DataFormatError naming the file and line. A `.gz` path is read through gzip (`gz=`).
- `rewrite_jsonl`: the whole file replaced by the given rows (temporary file, fsync, rename).
- `atomic_text` / `atomic_json`: a file replaced whole, never seen half-written.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import DataFormatError

OBJECT_PER_LINE = "one JSON object per line"


def _line(row: Any, default: Callable[[Any], Any] | None) -> str:
    return json.dumps(row, ensure_ascii=False, default=default) + "\n"


class JsonlAppender:
    """Appends JSON lines to `path`, each on disk (flushed and fsynced) when `append` returns.

    The file is opened on the first append (its folder created). A file whose last line lacks
    its newline (a complete line kept by `read_jsonl`) gets one first, so a new line never
    joins an old one. `default` is passed to `json.dumps` (e.g. `str` for paths and tuples).
    """

    def __init__(self, path: str | os.PathLike, *, default: Callable[[Any], Any] | None = None):
        self.path = Path(path)
        self.default = default
        self._fh: Any = None
        self._lock = threading.Lock()

    def append(self, row: Any) -> None:
        self.extend([row])

    def extend(self, rows: Iterable[Any]) -> None:
        """Several lines with one fsync (they reach the disk together or are cut as one tail)."""
        text = "".join(_line(r, self.default) for r in rows)
        with self._lock:
            try:
                if self._fh is None:
                    self._fh = self._open()
                self._fh.write(text)
                self._fh.flush()
                os.fsync(self._fh.fileno())
            except OSError as exc:  # a full disk names no file: say which one (a torn tail is repaired on resume)
                raise OSError(exc.errno, exc.strerror, str(self.path)) from exc

    def _open(self) -> Any:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+b")
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.close()
        return open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class JsonlRead:
    """What `read_jsonl` found: the rows, the 1-based line of each, whether a torn last line
    was dropped, and `end`, the byte length of the file up to the end of its last good line."""

    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    torn: bool = False
    end: int = 0


def _gzipped(path: Path, gz: bool | None) -> bool:
    return path.suffix == ".gz" if gz is None else gz


def read_jsonl(path: str | os.PathLike, *, expected: str = OBJECT_PER_LINE, torn_tail: bool = False,
               gz: bool | None = None) -> JsonlRead:
    """The JSON objects of `path`, one per line (a missing file reads as empty); see the module
    doc. `gz`: gzip-compressed (default: whether the name ends with .gz)."""
    path = Path(path)
    out = JsonlRead(path)
    if not path.exists():
        return out
    if _gzipped(path, gz):
        with gzip.open(path, "rb") as fh:
            data = fh.read()
    else:
        data = path.read_bytes()
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the file ends with a newline
    last = max((i for i, b in enumerate(raw_lines) if b.strip()), default=-1)
    pos = 0
    for i, raw in enumerate(raw_lines):
        size = len(raw) + (1 if pos + len(raw) < len(data) else 0)
        if not raw.strip():
            pos += size
            continue
        try:
            text = raw.decode("utf-8")
            row = json.loads(text)
        except (UnicodeDecodeError, ValueError) as exc:
            if torn_tail and i == last:
                out.torn = True
                break
            if isinstance(exc, UnicodeDecodeError):
                raise DataFormatError(path, i + 1, f"UTF-8 text, {expected}",
                                      f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8 "
                                      "(Latin-1? re-save the file as UTF-8)") from None
            why = f"not JSON ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else "not JSON"
            raise DataFormatError(path, i + 1, expected, f"{why}: {text.strip()[:200]}") from None
        if not isinstance(row, dict):
            raise DataFormatError(path, i + 1, expected, text.strip()[:200])
        out.rows.append(row)
        out.lines.append(i + 1)
        pos += size
        out.end = pos
    return out


def drop_torn_tail(read: JsonlRead) -> None:
    """Cut the torn last line `read_jsonl` dropped off the file itself."""
    if read.torn:
        os.truncate(read.path, read.end)


def rewrite_jsonl(path: str | os.PathLike, rows: Iterable[Any], *, default: Callable[[Any], Any] | None = None,
                  gz: bool | None = None) -> None:
    """Replace `path` by `rows`, one JSON line each; `gz` as in `read_jsonl`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    opener = gzip.open if _gzipped(path, gz) else open
    with opener(tmp, "wt", encoding="utf-8") as fh:
        for r in rows:
            fh.write(_line(r, default))
    _fsync(tmp)
    os.replace(tmp, path)


def atomic_text(path: str | os.PathLike, text: str) -> None:
    """Replace `path` by `text` (UTF-8) through a fsynced temporary file and a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")  # writers never share one
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:   # a full disk, a kill: the old file stays whole and no temporary is left
        tmp.unlink(missing_ok=True)
        raise


def atomic_json(path: str | os.PathLike, obj: Any, **dumps: Any) -> None:
    """Replace `path` by `obj` as JSON; `dumps` overrides the defaults (indent=2,
    ensure_ascii=False, default=str) where a file keeps another layout."""
    options: dict[str, Any] = {"indent": 2, "ensure_ascii": False, "default": str, **dumps}
    atomic_text(path, json.dumps(obj, **options))


def _fsync(path: Path) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())
