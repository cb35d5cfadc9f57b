"""Triple context restoration (§3.3): each retrieved triple is given back the sentence of its
source chunks that states it best, found by embedding similarity to the triple's template."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ...kg.extraction import Chunk
from ...kg.tcr_kg import TcrKG
from ...retrieval import embed_cached

_SENTENCE = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[A-Z0-9\"'(\[])")


def split_sentences(text: str) -> list[str]:
    """Sentences of a chunk: a break after . ! ? (and closing quotes) before a capital, digit or quote."""
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]



@dataclass
class SentenceIndex:
    """Every sentence of the corpus chunks, embedded once (cached on disk); per chunk its rows."""

    texts: list[str]
    rows: dict[str, tuple[int, int]]  # chunk id -> [start, end) rows
    vecs: np.ndarray

    @classmethod
    def build(cls, chunks: Iterable[Chunk], embedder: Any, cache_dir: Path, name: str,
              show_progress: bool = False) -> "SentenceIndex":
        texts: list[str] = []
        rows: dict[str, tuple[int, int]] = {}
        for c in chunks:
            sents = split_sentences(c.text) or [c.text]
            rows[c.cid] = (len(texts), len(texts) + len(sents))
            texts.extend(sents)
        vecs = embed_cached(embedder, texts, cache_dir=cache_dir, name=name, show_progress=show_progress)
        return cls(texts, rows, np.asarray(vecs, dtype=np.float32))

    def candidates(self, chunk_ids: Iterable[str]) -> np.ndarray:
        spans = [self.rows[c] for c in dict.fromkeys(chunk_ids) if c in self.rows]
        if not spans:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([np.arange(a, b) for a, b in spans])


def restore_context(kg: TcrKG, sentences: SentenceIndex, triples: Sequence[tuple[str, str, str]],
                    template_vecs: np.ndarray) -> list[str]:
    """§3.3: per triple, the sentence of Sources(h) ∪ Sources(t) most similar to "h r t" ("" when
    neither end has a source chunk). `template_vecs[i]` is the unit embedding of triple i's
    template: a lookup and one dot product per candidate sentence, no sentence is re-embedded."""
    out = []
    for (h, _, t), v in zip(triples, template_vecs):
        rows = sentences.candidates([*kg.sources(h), *kg.sources(t)])
        if rows.size == 0:
            out.append("")
            continue
        scores = sentences.vecs[rows] @ v
        out.append(sentences.texts[int(rows[int(np.argmax(scores))])])
    return out


def template(triple: tuple[str, str, str]) -> str:
    """T(e_h, r, e_t) = "e_h r e_t" (§3.3)."""
    return " ".join(triple)
