"""Which documents a question is answered from, and the dense chunk index of the baselines.

SA-RAG and its code index the pooled paragraphs of the sampled questions (§3.1: 100 per
benchmark), titles kept. Here the `kg` setting names that corpus as a KG spec template:
`{dataset}` becomes the question's dataset and `{seed}` the run seed, so the default
`text:{dataset}:n=100:seed={seed}` pools the paragraphs of the same seeded 100-question sample
a run with n=100 draws (`load_questions`). The KG must be built from the run's own sample: the
same dataset, split, n and seed (a sample of n=2 is not a part of the sample of n=5); a question
none of whose paragraphs is in the index is recorded as an issue (`methods.common`).

The graph methods read the KG the spec builds (`graph_index`); the dense baselines (Naive, CoT
and decomposition RAG, Appendix A) chunk the same passages into 500-word windows with 100 words
of overlap and embed them (`load_chunk_corpus`), without extracting a KG.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...data.selection import CorpusSelection
from ...kg.extraction import Chunk, chunk_passages
from ...retrieval import embed_cached
from .extraction import split_caps

@dataclass
class ChunkCorpus:
    """The dense baselines' corpus: word chunks of the passages and their embeddings (row i = chunk i)."""

    name: str
    chunks: list[Chunk]
    vecs: np.ndarray

    def pids(self) -> set[str]:
        return {c.pid for c in self.chunks}


def selection_of(spec: str) -> CorpusSelection:
    """The passages a `text:` spec indexes; other specs (a saved folder) carry no passage list."""
    prefix, _, arg = spec.partition(":")
    if prefix != "text":
        raise ConfigError(f"kg={spec!r}: the dense baselines chunk the passages of a "
                          "text:<dataset>[:<split>][:n=<N>][:seed=<S>] spec; a saved KG folder lists no passages")
    try:
        return CorpusSelection.parse(split_caps(arg)[0])   # the caps change the KG, not the passages
    except ConfigError as exc:
        raise ConfigError(f"kg={spec!r}: {exc}") from exc


def build_chunk_corpus(spec: str, embedder: Any, data_root: Path, cache_dir: Path, size: int, overlap: int,
                       show_progress: bool = True) -> ChunkCorpus:
    selection = selection_of(spec)
    passages, _ = selection.passages(data_root)
    chunks = chunk_passages(passages, size, overlap)
    vecs = embed_cached(embedder, [c.as_text() for c in chunks], cache_dir=cache_dir,
                        name=f"sa-rag-{selection.name}-chunks{size}-{overlap}", show_progress=show_progress)
    return ChunkCorpus(f"{selection.name}-chunks{size}-{overlap}", chunks, np.asarray(vecs, dtype=np.float32))


def load_chunk_corpus(ctx: Any, spec: str, size: int, overlap: int) -> ChunkCorpus:
    """The chunk corpus of `spec` for a run context, built once per context (`ctx.memo`)."""
    key = f"sa-rag:chunks:{spec}:{size}:{overlap}:{ctx.embedder.identity}"
    return ctx.memo(key, lambda: build_chunk_corpus(spec, ctx.embedder, Path(ctx.data_root), Path(ctx.cache_dir),
                                                    size, overlap))
