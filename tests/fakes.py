"""The one fake sentence embedder of the tests (fixture `fake_embedder` in conftest.py)."""

from __future__ import annotations

import hashlib
import re

import numpy as np


class BagOfWordsEmbedder:
    """Hashed bag-of-words unit vectors: texts sharing words get similar vectors, deterministically
    and without a model. Counts `encode` calls and texts for the embedding-cache tests."""

    def __init__(self, identity: str = "test:bag-of-words-256", dim: int = 256):
        self.identity, self.dim, self.normalize = identity, dim, True
        self.calls = 0
        self.texts_seen = 0

    def encode(self, texts, batch_size=64, normalize=None, show_progress=False) -> np.ndarray:
        self.calls += 1
        self.texts_seen += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                h = int.from_bytes(hashlib.md5(w.encode()).digest()[:4], "little")
                out[i, h % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-9)
