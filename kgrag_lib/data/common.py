"""Shared reading helpers: input files checked once, JSON/JSONL records that report where they
came from, answer merging.

Every input file is opened through `open_text` (or checked by `check_file` when read as bytes),
so a directory, a missing path, a binary file or text that is not UTF-8 ends in one error naming
the file, the line where there is one and the expected form, never in a decoding traceback.
Every dataset here ships either as a JSON list or as JSON Lines (and some as both); one reader
handles both so each loader only maps fields, and every error it raises names the file and the
line (JSONL) or record number (JSON list) together with the expected record form.
"""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, TextIO

from ..errors import DataFormatError, MissingDataError, UnreadableFileError
from ..records import Passage

log = logging.getLogger(__name__)

_TYPE_NAMES = {str: "a string", list: "a list", dict: "an object", bool: "a boolean", int: "an integer"}


@dataclass
class Record:
    """One JSON object plus its position, so field errors can point at it."""

    path: Path
    pos: int  # 1-based line number (JSONL) or record number (JSON list)
    data: dict[str, Any]
    in_list: bool
    form: str  # human description of the expected record, used in error messages

    def error(self, expected: str, got: str = "") -> DataFormatError:
        where = f" (record #{self.pos} of the JSON list)" if self.in_list else ""
        return DataFormatError(self.path, self.pos, f"{expected}{where}; record form: {self.form}", got)

    def need(self, key: str, kind: type | tuple[type, ...] = str) -> Any:
        """The value of a required field, checked for type."""
        if key not in self.data:
            raise self.error(f"a field {key!r}", got=f"fields {sorted(self.data)}")
        return self.get(key, kind)

    def get(self, key: str, kind: type | tuple[type, ...] = str, default: Any = None) -> Any:
        """The value of an optional field (None/absent -> default), checked for type."""
        value = self.data.get(key)
        if value is None:
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            raise self.error(f"field {key!r} to be {names}", got=repr(value)[:120])
        return value


_SNIFF_BYTES = 8192
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def check_file(path: str | Path, expected: str) -> Path:
    """`path` if it names a readable file that does not look binary; else a one-line KgragError.

    `expected` describes the file's form ("one 'subject|relation|object' per line") and ends
    every message. Only the first 8 KiB are sniffed (for NUL bytes), so this is cheap on any size.
    """
    path = Path(path)
    if not path.exists():
        raise MissingDataError(f"{path}: no such file; expected {expected}")
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise UnreadableFileError(f"{path}: is {kind}, not a file; expected {expected}")
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError as exc:
        raise UnreadableFileError(f"{path}: cannot be read ({exc.strerror}); expected {expected}") from None
    if head.startswith(_UTF16_BOMS):
        raise DataFormatError(path, 1, f"UTF-8 text, {expected}", "UTF-16 text (re-save the file as UTF-8)")
    nul = head.find(b"\0")
    if nul >= 0:
        raise DataFormatError(path, head.count(b"\n", 0, nul) + 1, f"a text file, {expected}",
                              f"binary data (a NUL byte at offset {nul}); is this the right file?")
    return path


def _not_utf8(path: Path, expected: str) -> DataFormatError:
    """Slow path, after a decode failed: the first line that is not UTF-8, for the message."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return DataFormatError(path, lineno, f"UTF-8 text, {expected}",
                                       f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8 "
                                       f"(Latin-1? re-save the file as UTF-8)")
    return DataFormatError(path, None, f"UTF-8 text, {expected}", "a byte sequence that is not UTF-8")


@contextmanager
def open_text(path: str | Path, expected: str, *, encoding: str = "utf-8-sig",
              newline: str | None = None) -> Iterator[TextIO]:
    """`open(path)` for reading text, after `check_file`: a leading UTF-8 BOM is dropped (it would
    stay glued to the first record), a decoding error inside the block becomes a DataFormatError
    naming the file and the first line that is not UTF-8, and a NUL byte anywhere (`check_file`
    sniffs only the head) one naming its line."""
    path = check_file(path, expected)
    with open(path, encoding=encoding, newline=newline) as f:
        try:
            yield _NulGuard(f, path, expected)   # type: ignore[misc]
        except UnicodeDecodeError:
            raise _not_utf8(path, expected) from None


class _NulGuard:
    """A text file whose reads refuse a NUL byte, naming the line (binary data past the head)."""

    def __init__(self, f: TextIO, path: Path, expected: str) -> None:
        self._f, self._path, self._expected, self._line = f, path, expected, 0

    def _check(self, text: str) -> str:
        at = text.find("\0")
        if at >= 0:
            raise DataFormatError(self._path, self._line + text.count("\n", 0, at) + 1, f"a text file, {self._expected}",
                                  "binary data (a NUL byte); is this the right file?")
        self._line += text.count("\n")
        return text

    def __iter__(self) -> Iterator[str]:
        for line in self._f:
            yield self._check(line)

    def read(self, size: int = -1) -> str:
        return self._check(self._f.read(size))

    def readline(self, size: int = -1) -> str:
        return self._check(self._f.readline(size))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _first_char(path: Path, expected: str) -> str:
    with open_text(path, expected) as f:
        while True:
            chunk = f.read(4096)
            if not chunk:
                return ""
            stripped = chunk.lstrip("\ufeff \t\r\n")
            if stripped:
                return stripped[0]


# Fields only one dataset's records carry: a file of another dataset read under this one's name
# would otherwise load (the layouts overlap: HotpotQA and 2Wiki share every required field, and
# Bamboogle accepts any {question, answer}) and be scored and labelled as the wrong dataset.
# dataset -> the record fields that mark its files; filled from `DatasetSpec.marks` by `registry` (which
# `kgrag_lib.data` imports before any loader runs), so a dataset's marks are written where it is registered
DATASET_MARKS: dict[str, tuple[str, ...]] = {}


def refuse_other_dataset(rec: Record, own: str) -> None:
    """A record carrying a field that marks another dataset is refused, naming that dataset."""
    for other, keys in DATASET_MARKS.items():
        hit = next((k for k in keys if k in rec.data), None) if other != own else None
        if hit is not None:
            raise rec.error(f"a {own} record; this one has {hit!r}, a field of {other} records: "
                            f"is this a {other} file? (use --dataset {other}, or the loader for {other})")


def read_json_records(path: str | Path, form: str, own: str | None = None) -> Iterator[Record]:
    """Yield the objects of a JSON list file or a JSON Lines file (detected from the first character);
    with `own` (a dataset family of DATASET_MARKS), a record of another dataset is refused."""
    for rec in _json_records(path, form):
        if own is not None:
            refuse_other_dataset(rec, own)
        yield rec


def _json_records(path: str | Path, form: str) -> Iterator[Record]:
    path = Path(path)
    expected = f"a JSON list or JSON Lines file of records {form}"
    if _first_char(path, expected) == "[":
        try:
            with open_text(path, expected, encoding="utf-8-sig") as f:
                items = json.load(f)
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, exc.lineno, f"a valid JSON list of records {form}", exc.msg) from None
        for i, item in enumerate(items, 1):
            if not isinstance(item, dict):
                raise DataFormatError(path, i, f"a JSON object {form} (record #{i} of the JSON list)", repr(item)[:120])
            yield Record(path, i, item, True, form)
        return
    with open_text(path, expected, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                raise DataFormatError(path, lineno, f"one JSON object per line (JSONL) {form}", line.strip()) from None
            if not isinstance(item, dict):
                raise DataFormatError(path, lineno, f"one JSON object per line (JSONL) {form}", line.strip())
            yield Record(path, lineno, item, False, form)


def merge_answers(gold: str, aliases: Iterable[Any] = ()) -> list[str]:
    """Gold answer first, then aliases; empties and case-insensitive repeats dropped."""
    out: list[str] = []
    seen: set[str] = set()
    for a in [gold, *aliases]:
        if a is None:
            continue
        a = str(a).strip()
        if a and a.lower() not in seen:
            seen.add(a.lower())
            out.append(a)
    return out


def text_digest(text: str, n: int = 10) -> str:
    """A short stable content hash, for passage ids where titles are not unique."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:n]


def join_sentences(sentences: Iterable[str]) -> str:
    """HotpotQA sentences carry their own leading spaces, 2Wiki's do not: normalise both."""
    return " ".join(s.strip() for s in sentences if s and s.strip())


def pool_passages(groups: Iterable[Iterable[Passage]]) -> list[Passage]:
    """First-seen order, one passage per pid (a conflicting text under a seen pid is dropped and logged)."""
    out: dict[str, Passage] = {}
    conflicts = 0
    for group in groups:
        for p in group:
            seen = out.get(p.pid)
            if seen is None:
                out[p.pid] = p
            elif seen.text != p.text:
                conflicts += 1
    if conflicts:
        log.warning("pooling passages: %d passages share a pid with a different text; kept the first", conflicts)
    return list(out.values())
