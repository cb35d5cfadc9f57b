"""The blocks every LLM-built KG shares (SA-RAG's text KG, TCR-QF's EID-record KG): passages cut
into chunks, the name key entities are merged by, and the journaled extraction loop.

`extract_journaled` runs one paper's per-chunk extraction over the chunks the journal lacks,
appending each chunk's record (one fsynced JSON line, `"chunk"` its id) before the next starts:
a kill loses at most the chunk in flight, and a rerun extracts only what is missing (with the
LLM call cache a complete re-extraction sends no backend call). Records come back in chunk
order whatever order they were extracted in.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..concurrency import as_they_finish
from ..errors import ConfigError, DataFormatError
from ..jsonl import JsonlAppender, drop_torn_tail, read_jsonl
from ..progress import progress
from ..records import Passage
from ..retrieval.embedder import _minilm_dir


# ---- chunks -------------------------------------------------------------------------------------
def _check_window(size: Any, overlap: Any) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"chunk size: expected an int >= 1, got {size!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < size:
        raise ConfigError(f"chunk overlap: expected an int in [0, size={size}), got {overlap!r}")


def chunk_words(text: str, size: int = 500, overlap: int = 200) -> list[str]:
    """Windows of `size` whitespace-separated words, each starting `size - overlap` words after the
    previous one; the last window ends at the last word. No words: no chunks."""
    _check_window(size, overlap)
    words = text.split()
    out, step = [], size - overlap
    for start in range(0, len(words), step):
        out.append(" ".join(words[start:start + size]))
        if start + size >= len(words):
            break
    return out


@dataclass(frozen=True)
class Chunk:
    """A window of a passage; `cid` is `doc:<pid>/chunk:<i>`."""

    pid: str
    index: int
    title: str
    text: str

    @property
    def cid(self) -> str:
        return f"doc:{self.pid}/chunk:{self.index}"

    def as_text(self) -> str:
        """What the LLM reads: the passage title on its own line, then the words."""
        return f"{self.title}\n{self.text}" if self.title else self.text


def chunk_passages(passages: Iterable[Passage], size: int = 500, overlap: int = 200) -> list[Chunk]:
    """Every passage's word chunks, in corpus order, each keeping the passage title."""
    return [Chunk(p.pid, i, p.title, words)
            for p in passages for i, words in enumerate(chunk_words(p.text, size, overlap))]



# ---- names ----------------------------------------------------------------------------------------
def normalize(name: str) -> str:
    """The key entity resolution compares: NFKC, case-folded, punctuation removed, spaces collapsed."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return " ".join("".join(" " if unicodedata.category(c).startswith("P") else c for c in folded).split())



# ---- the journal ----------------------------------------------------------------------------------
class ExtractionJournal:
    """One JSON line per extracted chunk (`"chunk"` is its id), each on disk before the next chunk
    starts; thread-safe appends."""

    EXPECTED = "one JSON object per extracted chunk"

    def __init__(self, path: Path):
        self.path = Path(path)
        self._log = JsonlAppender(self.path)

    def read(self) -> dict[str, dict[str, Any]]:
        """The records by chunk id; a torn last line (a kill mid-write) is cut off the file."""
        read = read_jsonl(self.path, expected=self.EXPECTED, torn_tail=True)
        for n, rec in zip(read.lines, read.rows):
            if "chunk" not in rec:
                raise DataFormatError(self.path, n, self.EXPECTED, str(rec)[:120])
        drop_torn_tail(read)
        return {rec["chunk"]: rec for rec in read.rows}

    def append(self, record: dict[str, Any]) -> None:
        self._log.append(record)

    def close(self) -> None:
        self._log.close()


def metered(llm: Any, extract: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`extract()`'s journal record with the LLM usage it cost (`record["usage"]`: requests,
    backend calls, tokens; cache hits count the tokens they once took; `keys`: its request ids, as
    runs record theirs), from its own meter, so chunks extracted side by side are each charged only
    their own requests."""
    with llm.meter() as meter:
        record = extract()
    used = meter.usage
    record["usage"] = {"requests": used.requests, "calls": used.calls, "prompt_tokens": used.total_prompt_tokens,
                       "completion_tokens": used.total_completion_tokens, "keys": list(meter.keys)}
    return record


def request_ids(records: Sequence[dict[str, Any]]) -> list[str] | None:
    """The request ids of every journal record (`metered`'s `usage.keys`), in record order, so a
    report can price a KG's extraction from the LLM cache as it prices a run; None when a record
    was journaled before the ids were kept (its KG's model time is then unknown, not 0)."""
    if any("keys" not in (r.get("usage") or {}) for r in records):
        return None
    return [k for r in records for k in r["usage"]["keys"]]


def extract_journaled(chunks: Sequence[Chunk], journal: Path, extract: Callable[[Chunk], dict[str, Any]], *,
                      desc: str = "extracting chunks", show_progress: bool = True, workers: int = 1
                      ) -> tuple[list[dict[str, Any]], int]:
    """Every chunk's record, in chunk order, and how many were extracted now: for each chunk not yet
    in `journal`, `record = extract(chunk)` (its `"chunk"` must be the chunk id) is appended.

    Chunks are independent, so up to `workers` are extracted at once (a server batches them);
    each record is journaled as it finishes, so the journal's order may differ from the chunks'
    while the result does not.
    """
    log = ExtractionJournal(journal)
    done = log.read()
    todo = [c for c in chunks if c.cid not in done]
    bar = progress(total=len(chunks), initial=len(chunks) - len(todo), unit="chunk", desc=desc,
                   disable=not show_progress)
    try:
        for i, record in as_they_finish(extract, todo, workers):
            log.append(record)
            done[todo[i].cid] = record
            bar.update(1)
    finally:
        bar.close()
        log.close()
    return [done[c.cid] for c in chunks], len(todo)


# ---- token windows (TCR-QF §3.1) ------------------------------------------------------------------
class WhitespaceTokenizer:
    """Tokens are whitespace-separated words (offsets into the text); for tests and tokenizer-free runs."""

    name = "whitespace"

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


class HFTokenizer:
    """A Hugging Face fast tokenizer's token offsets (no special tokens)."""

    def __init__(self, name: str, tok: Any):
        self.name, self._tok = name, tok

    def offsets(self, text: str) -> list[tuple[int, int]]:
        enc = self._tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [tuple(o) for o in enc["offset_mapping"] if o[1] > o[0]]


def load_tokenizer(name: str = "minilm") -> WhitespaceTokenizer | HFTokenizer:
    """`minilm` (the WordPiece of the shipped all-MiniLM-L6-v2), `whitespace`, or a local
    Hugging Face tokenizer folder / id (offline)."""
    if name == "whitespace":
        return WhitespaceTokenizer()
    from transformers import AutoTokenizer

    if name == "minilm":
        return HFTokenizer("minilm (all-MiniLM-L6-v2 WordPiece)", AutoTokenizer.from_pretrained(str(_minilm_dir())))
    try:
        return HFTokenizer(name, AutoTokenizer.from_pretrained(name, local_files_only=True))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"parameter 'tokenizer': cannot load {name!r} offline ({exc}); use minilm, whitespace "
                          "or a local tokenizer folder") from None


def token_chunks(passages: Iterable[Passage], tokenizer: Any, size: int = 512,
                 overlap: int = 64) -> list[Chunk]:
    """§3.1: windows of `size` tokens, each starting `size - overlap` tokens after the previous,
    the last ending at the passage's last token; each a verbatim slice of the passage text."""
    _check_window(size, overlap)
    out = []
    for p in passages:
        offs = tokenizer.offsets(p.text)
        for i, start in enumerate(range(0, len(offs), size - overlap)):
            window = offs[start:start + size]
            out.append(Chunk(p.pid, i, p.title, p.text[window[0][0]:window[-1][1]]))
            if start + size >= len(offs):
                break
    return out
