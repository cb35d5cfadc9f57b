"""The tests' shared fakes: the one fake sentence embedder (fixture `fake_embedder` in conftest.py)
and the common part of a loopback OpenAI-compatible server."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class OpenAIJsonHandler(BaseHTTPRequestHandler):
    """What every loopback OpenAI-compatible server of the tests shares: no request log, JSON
    replies (`_send`), and GET listing one model `m` served by vLLM. Subclasses answer POST."""

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]})


def serve_loopback(handler: type, **attrs: Any) -> ThreadingHTTPServer:
    """`handler` served on 127.0.0.1 (a free port) from a daemon thread; `attrs` set on the server
    (handlers read them as `self.server.<name>`). Stop it with `shutdown()` and `server_close()`."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    for name, value in attrs.items():
        setattr(srv, name, value)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv
