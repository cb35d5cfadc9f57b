"""The knowledge-graph store shared by every method (see `store.KGStore`), the blocks every
LLM-built KG shares (`extraction`: chunks, name keys, the journaled extraction loop), and the
tables of the KG SA-RAG extracts from text (see `text_kg.TextKG`)."""

from .extraction import Chunk, chunk_passages, chunk_words
from .store import DIRECTIONS, KGStore, UnknownEntityError
from .text_kg import TextKG

__all__ = ["DIRECTIONS", "KGStore", "UnknownEntityError", "Chunk", "TextKG", "chunk_passages", "chunk_words"]
