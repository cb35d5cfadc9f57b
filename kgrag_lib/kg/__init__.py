"""The knowledge-graph store shared by every method (see `store.KGStore`), and the tables of a
KG an LLM extracts from text (see `text_index.TextKG`)."""

from .store import DIRECTIONS, KGStore, UnknownEntityError
from .text_index import Chunk, TextKG, chunk_passages, chunk_words

__all__ = ["DIRECTIONS", "KGStore", "UnknownEntityError", "Chunk", "TextKG", "chunk_passages", "chunk_words"]
