"""`kgrag data mirror`: serve a data root's files to other machines in the layout `data fetch --mirror` reads.

An air-gapped cluster has the data on one machine and not on the others. `data fetch --mirror URL`
fetches `https://host/path` from `URL/host/path`, so this serves each manifest download found
byte for byte in a data root under `/sources/<host>/<path>` of its URL, on the stdlib's HTTP
server, with the Range answers a resumed fetch asks for. Only exact bytes are served: a file the
root holds is the download when the manifest's URL is the file itself; an archive (`unpack:`) is
served only if the download itself sits in the root where `data fetch` saves it, never rebuilt
from its members (a rebuilt gzip or zip has other bytes, and its sum would be recorded as the
source's). A file whose size differs from the manifest's is left out, named. Every download it
cannot serve is listed, with why, before it starts. Loopback by default: any other address is
refused unless the caller says so (`allow_remote`), since it serves to whoever reaches the port.
"""

from __future__ import annotations

import ipaddress
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import unquote, urlparse

from ..errors import ConfigError
from .fetch import _load, plan

PREFIX = "sources"        # the mirror's URL is http://HOST:PORT/sources
READ = 1 << 20            # bytes read from a served file per write


def served_at(url: str) -> str:
    """Where `data fetch --mirror` asks for `url` under the mirror: `<host>/<path>` (its query is not part of it)."""
    p = urlparse(url)
    return f"{p.hostname}{p.path}"


@dataclass
class MirrorPlan:
    """What a mirror over one data root serves (path under /sources -> file) and what it cannot, in words."""
    files: dict[str, Path] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)   # the manifest entries with at least one download served

    def total_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files.values())


def mirror_plan(root: Path, manifest_path: str | Path | None = None, names: list[str] | None = None) -> MirrorPlan:
    """The downloads of `names` (default: every manifest entry) that `root` holds byte for byte."""
    doc = _load(manifest_path)
    unknown = [n for n in names or [] if n not in doc["datasets"]]
    if unknown:
        raise ConfigError(f"no dataset {', '.join(map(repr, unknown))} in {manifest_path or 'the shipped manifest'}; "
                          f"entries: {', '.join(doc['datasets'])}")
    out = MirrorPlan()
    for name in names or list(doc["datasets"]):
        served_any = False
        for d in plan(name, doc["datasets"][name], root, str(manifest_path or "the manifest")):
            if not d.unpack:
                [t] = d.targets
                size = t.spec.get("size")
                if not d.saved.is_file():
                    out.missing.append(f"{name}: {t.spec['path']} not in {root}")
                    continue
                if size is not None and d.saved.stat().st_size != size:
                    out.missing.append(f"{name}: {t.spec['path']} is {d.saved.stat().st_size} bytes, the manifest says "
                                       f"{size}; not served (a fetch would refuse it)")
                    continue
            elif not d.saved.is_file():
                members = ", ".join(t.spec["path"] for t in d.targets)
                out.missing.append(f"{name}: the {d.unpack} download {d.saved.name} is not in {d.saved.parent} (only "
                                   f"its unpacked files, {members}, may be; the mirror serves downloads byte for byte: "
                                   f"put the archive there to serve it)")
                continue
            out.files[served_at(d.url)] = d.saved
            served_any = True
        if served_any:
            out.entries.append(name)
    return out


def is_loopback(host: str) -> bool:
    """Is `host` this machine only (localhost, 127.0.0.0/8, ::1)?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class MirrorHandler(BaseHTTPRequestHandler):
    """GET/HEAD of `/sources/<host>/<path>` from the server's `files` (a Path or bytes each); `Range: bytes=N-`
    answered 206 (416 past the end); any other Range form is ignored (a full 200, which fetch restarts on)."""

    server_version = "kgrag-mirror"

    def log_message(self, *args: Any) -> None:
        pass   # one line per request would drown the fetch's own; `requests` keeps them

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        srv: MirrorServer = self.server   # type: ignore[assignment]
        path = unquote(self.path.split("?")[0]).lstrip("/")
        rng = self.headers.get("Range")
        key = path[len(PREFIX) + 1:] if path.startswith(PREFIX + "/") else None
        srv.requests.append((key if key is not None else "/" + path, rng))
        source = srv.files.get(key) if key is not None else None
        if source is None:
            self.send_error(404, "not served by this mirror (kgrag data mirror lists what it serves when it starts)")
            return
        size = len(source) if isinstance(source, (bytes, bytearray)) else source.stat().st_size
        m = re.fullmatch(r"bytes=(\d+)-", rng.strip()) if rng else None
        start = int(m.group(1)) if m else 0
        if m and start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if m else 200)
        if m:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        if body:
            self.send_body(key, source, start)

    def send_body(self, key: str, source: bytes | Path, start: int) -> None:
        """Write the answer's bytes from `start` (a test's faulty mirror overrides this)."""
        if isinstance(source, (bytes, bytearray)):
            self.wfile.write(source[start:])
        else:
            with open(source, "rb") as f:
                f.seek(start)
                while chunk := f.read(READ):
                    self.wfile.write(chunk)
        self.wfile.flush()


class MirrorServer(ThreadingHTTPServer):
    """A mirror on `host:port` (0: a free port) serving `files` (path under /sources -> file or bytes).
    `url` is what `data fetch --mirror` takes; `requests` logs each (`<host>/<path>`, Range) asked for."""

    daemon_threads = True

    def __init__(self, files: Mapping[str, Path | bytes], host: str = "127.0.0.1", port: int = 0, *,
                 allow_remote: bool = False, handler: type[MirrorHandler] = MirrorHandler) -> None:
        if not is_loopback(host) and not allow_remote:
            raise ConfigError(f"--host {host}: not a loopback address; the mirror serves the data to anyone who "
                              f"reaches the port, so pass --allow-remote to serve on {host}, or leave --host out "
                              f"(127.0.0.1)")
        if not 0 <= port <= 65535:
            raise ConfigError(f"--port {port}: expected a TCP port, 1-65535 (or 0: any free port)")
        self.files: dict[str, Path | bytes] = dict(files)
        self.requests: list[tuple[str, str | None]] = []
        try:
            super().__init__((host, port), handler)
        except OSError as exc:
            raise ConfigError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc}); choose "
                              "another port (0: any free one)") from None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/{PREFIX}"

    def start(self) -> "MirrorServer":
        """Serve from a daemon thread (tests, scripts); `kgrag data mirror` calls serve_forever itself."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
        self.server_close()

    def __enter__(self) -> "MirrorServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
