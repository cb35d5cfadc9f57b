"""The knowledge-graph store shared by every method (see `store.KGStore`)."""

from .store import DIRECTIONS, KGStore, UnknownEntityError

__all__ = ["DIRECTIONS", "KGStore", "UnknownEntityError"]
