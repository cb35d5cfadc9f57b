"""`kgrag data fetch NAME`: download a manifest entry's files into the data root.

The corpora kgrag does not ship (DPR's Wikipedia split, full Wikidata5M) are gigabytes behind
links that drop, so a download must resume where it stopped (`<file>.part` and an HTTP Range
request), never leave a cut or wrong file under the name the loaders read (it is renamed into
place only when complete and checked), and say how sure it is of what it installed: checked
against a sha256 the manifest knows, or only recorded (`<download>.sha256`) where it knows none.

Manifest fields read per file (all optional; a file without `url` or `derive` is obtained by hand):
`url` (where to download it), `unpack` (`gzip`: the download is the file gzipped; `tar.gz` or
`zip`: an archive holding it), `member` (its name in that archive; default: the file's own name),
`download_sha256` (sum of the download itself, checked before unpacking) and `approx_download`
(the size the source states, shown by `--list`). Files sharing one `url` come from one download.
`derive` + `from`: the file is made from other files of the entry (`derive.py`) once they are in.

A download whose sum the manifest does not know is recorded on its first fetch (`<download>.sha256`
beside it) and every later download of it must match: a source that changed its file is refused,
never silently installed. `mirror` (`--mirror`, `$KGRAG_DATA_MIRROR`) fetches `https://host/path`
from `<mirror>/host/path` instead: a local copy of the sources, or the tests' loopback server.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import re
import shutil
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable
from urllib.parse import urlparse

from filelock import FileLock, Timeout

from .. import __version__
from ..errors import ConfigError, MissingDataError
from ..paths import data_root
from ..progress import progress
from ..redact import redact
from .derive import run_step
from .manifest import MANIFEST_PATH, check_file_path, load_manifest, sha256_file

UNPACK = ("gzip", "tar.gz", "zip")
ARCHIVES = ("tar.gz", "zip")   # the unpack forms that hold named members
CHUNK = 1 << 20
TIMEOUT_S = 20.0          # a connection silent this long (connecting, or between two reads) counts as cut
TIMEOUT_ENV = "KGRAG_FETCH_TIMEOUT"
MIRROR_ENV = "KGRAG_DATA_MIRROR"
RETRIES = 3               # further tries after a cut connection or an unreachable host
RETRY_BACKOFF_S = 2.0     # wait before try k: k * this (tests set it to 0)
USER_AGENT = f"kgrag/{__version__} (data fetch)"

Say = Callable[[str], None]


class FetchError(MissingDataError):
    """A download that failed or was refused: the file is still missing; the message names the
    URL or file, what went wrong and what to do next."""


@dataclass
class Target:
    """One manifest file produced by a download."""
    spec: dict[str, Any]
    path: Path           # its final place under the data root
    member: str = ""     # its name inside a tar.gz or zip download


@dataclass
class Download:
    """One URL and the manifest files it yields."""
    url: str
    unpack: str                  # "" (the download is the file), "gzip", "tar.gz" or "zip"
    saved: Path                  # the completed download (for "", the file itself)
    sha256: str | None           # known sum of the download, if any
    approx: str = ""
    targets: list[Target] = field(default_factory=list)
    via: str = ""                # where it is fetched from when not `url` itself (a mirror)

    @property
    def part(self) -> Path:
        return self.saved.with_name(self.saved.name + ".part")


def _url_name(url: str) -> str:
    return PurePosixPath(urlparse(url).path).name


def mirrored(url: str, mirror: str | None) -> str:
    """`url` as fetched through `mirror` (`<mirror>/<host>/<path>?<query>`), or itself without one."""
    if not mirror:
        return url
    p = urlparse(url)
    return f"{mirror.rstrip('/')}/{p.hostname}{p.path}" + (f"?{p.query}" if p.query else "")


def check_mirror(mirror: str | None) -> str | None:
    """`--mirror` / $KGRAG_DATA_MIRROR: an http(s) URL (refused otherwise, naming where it came from)."""
    given = mirror if mirror is not None else os.environ.get(MIRROR_ENV) or None
    if given is not None and urlparse(given).scheme not in ("http", "https"):
        where = "--mirror" if mirror is not None else f"${MIRROR_ENV}"
        raise ConfigError(f"{where} {redact(given)!r}: expected an http(s):// URL, e.g. http://127.0.0.1:8000/sources")
    return given


def fetch_timeout(timeout: float | None = None) -> float:
    """Seconds of silence a download tolerates: the argument, $KGRAG_FETCH_TIMEOUT, else TIMEOUT_S."""
    raw: Any = timeout if timeout is not None else os.environ.get(TIMEOUT_ENV) or TIMEOUT_S
    where = "--timeout" if timeout is not None else f"${TIMEOUT_ENV}"
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise ConfigError(f"{where} {raw!r}: expected seconds of silence to wait for, a number in (0, 3600], "
                          f"e.g. 20")
    return value


def derived(entry: dict[str, Any], name: str, where: str) -> list[dict[str, Any]]:
    """The files of an entry made by a `derive` step, each checked to name inputs of the same entry."""
    paths = {spec["path"] for spec in entry.get("files", [])}
    out = []
    for spec in entry.get("files", []):
        if not spec.get("derive"):
            continue
        inputs = spec.get("from")
        here = f"{where}: datasets.{name}: {spec['path']}"
        if spec.get("url"):
            raise ConfigError(f"{here}: a file has either url or derive, not both")
        if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) and i in paths for i in inputs):
            raise ConfigError(f"{here}: from {inputs!r}; expected a list of paths of other files of datasets.{name}")
        out.append(spec)
    return out


def plan(name: str, entry: dict[str, Any], root: Path, where: str = "the manifest") -> list[Download]:
    """The downloads of one manifest entry, checked for a consistent form (refused naming the file)."""
    downloads: dict[str, Download] = {}
    for spec in entry.get("files", []):
        url = spec.get("url")
        if not url:
            continue
        here = f"{where}: datasets.{name}: {spec['path']}"
        unpack = spec.get("unpack") or ""
        if not isinstance(url, str) or urlparse(url).scheme not in ("http", "https"):
            raise ConfigError(f"{here}: url {redact(url)!r}; expected an http(s):// URL")
        if unpack and unpack not in UNPACK:
            raise ConfigError(f"{here}: unpack {unpack!r}; accepted: {', '.join(UNPACK)} (or none)")
        if spec.get("member") and unpack not in ARCHIVES:
            raise ConfigError(f"{here}: 'member' needs unpack: tar.gz or zip")
        final = root / check_file_path(spec["path"], f"{where}: datasets.{name}: path {spec['path']!r}")
        if not os.path.abspath(final).startswith(os.path.join(os.path.abspath(root), "")):
            raise ConfigError(f"{here}: path {spec['path']!r} leaves the data root {root}; expected a path inside it")
        known = spec.get("download_sha256") or (spec.get("sha256") if not unpack else None)
        if url not in downloads:
            named = _url_name(url) if _url_name(url) not in (".", "..") else ""   # never a name outside the folder
            saved = final if not unpack else final.with_name(named if named and named != final.name
                                                             else final.name + ".download")
            if any(other.saved == saved for other in downloads.values()):
                raise ConfigError(f"{here}: two urls would download to {saved.name} in one folder; give the files "
                                  "distinct folders")
            downloads[url] = Download(url, unpack, saved, known, str(spec.get("approx_download") or ""))
        d = downloads[url]
        if d.unpack != unpack or (known and d.sha256 and known != d.sha256):
            raise ConfigError(f"{here}: files sharing the url {redact(url)} must agree on unpack and download_sha256")
        d.sha256 = d.sha256 or known
        d.targets.append(Target(spec, final, str(spec.get("member") or final.name) if unpack in ARCHIVES else ""))
        if unpack not in ARCHIVES and len(d.targets) > 1:
            raise ConfigError(f"{here}: only a tar.gz or zip download may yield several files (url {redact(url)})")
    return list(downloads.values())


def fetchable(manifest: dict[str, Any], root: Path | None = None) -> dict[str, list[Download]]:
    """Entries with at least one URL, and their downloads."""
    base = root or Path(".")
    return {name: ds for name, entry in manifest["datasets"].items() if (ds := plan(name, entry, base))}


def _load(manifest_path: str | Path | None) -> dict[str, Any]:
    """The manifest; a path given that names no file is refused (not read as an empty manifest)."""
    if manifest_path is not None and not Path(manifest_path).exists():
        raise ConfigError(f"--manifest {manifest_path}: no such file; expected a YAML data manifest "
                          f"(the shipped one is {MANIFEST_PATH})")
    return load_manifest(manifest_path)


def list_fetchable(manifest_path: str | Path | None = None, root: str | Path | None = None) -> str:
    """The `--list` table: each fetchable entry, its downloads (size the source states) and the files they give."""
    doc = _load(manifest_path)
    try:
        base: Path | None = data_root(root)
    except ConfigError:
        base = None
    lines = []
    ready = fetchable(doc, base)
    for name, downloads in ready.items():
        present = sum(t.path.is_file() for d in downloads for t in d.targets) if base else 0
        n = sum(len(d.targets) for d in downloads)
        lines.append(f"{name}: {len(downloads)} download(s), {n} file(s)" + (f", {present} present" if base else ""))
        for d in downloads:
            size = d.approx or "size not recorded"
            sum_ = "sha256 known" if d.sha256 or all(t.spec.get("sha256") for t in d.targets) else "no sha256 known"
            lines.append(f"  {_url_name(d.url) or redact(d.url)}  ({size}; {sum_}) -> "
                         + ", ".join(t.spec["path"] for t in d.targets))
    others = [n for n in doc["datasets"] if n not in ready]
    if not lines:
        lines.append("no manifest entry has a download url")
    if others:
        lines.append(f"not fetchable (obtain by hand, see `kgrag data check`): {', '.join(others)}")
    return "\n".join(lines)


def _manual(entry: dict[str, Any]) -> str:
    text = " ".join(str(entry.get("obtain", "")).split())
    return f"or obtain it by hand: {text}" if text else "or obtain it by hand (see the manifest's source)"


def _present_ok(t: Target, say: Say) -> bool:
    """Is the file there and, as far as the manifest can tell, the right one?"""
    if not t.path.is_file():
        return False
    want_size, want_sum = t.spec.get("size"), t.spec.get("sha256")
    if want_size is not None and t.path.stat().st_size != want_size:
        raise FetchError(f"{t.path}: present but {t.path.stat().st_size} bytes, the manifest says {want_size}; "
                         "move it away or rerun with --force to download it again (it is replaced only once the new "
                         "copy is complete and checked)")
    if want_sum:
        got = sha256_file(t.path)
        if got != want_sum:
            raise FetchError(f"{t.path}: present but its sha256 is {got}, the manifest says {want_sum}; move it away "
                             "or rerun with --force to download it again")
        say(f"{t.spec['path']}: present, sha256 verified; skipped (--force to fetch again)")
    else:
        say(f"{t.spec['path']}: present (the manifest has no sha256 to verify it against); skipped "
            "(--force to fetch again)")
    return True


def _content_range(resp: Any) -> tuple[int | None, int | None]:
    """(first byte, total size) of a 206 answer's Content-Range `bytes A-B/N` (N may be `*`)."""
    m = re.match(r"bytes\s+(\d+)-\d+/(\d+|\*)", resp.headers.get("Content-Range", "") or "")
    if not m:
        return None, None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) != "*" else None)


def _hash_prefix(path: Path) -> "hashlib._Hash":
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h


def _check_space(folder: Path, need: int, url: str) -> None:
    free = shutil.disk_usage(folder).free
    if need > free:
        raise FetchError(f"{folder}: {need / 2**30:.2f} GiB left to download from {redact(url)} but only {free / 2**30:.2f} "
                         "GiB free; free space or choose another data root (--root), then rerun: the bytes so far "
                         "are kept")


def _write(f: BinaryIO, chunk: bytes, part: Path) -> None:
    """Write a chunk; a full or read-only disk is an OSError naming the file (the CLI's one line)."""
    try:
        f.write(chunk)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(part)) from None


class _Retry(Exception):
    """A try that failed in a way the next may not: a cut connection, an unreachable host, a 5xx."""


def download(d: Download, label: str, manual: str, say: Say, *, retries: int | None = None,
             timeout: float | None = None) -> str:
    """Bring `d.url` to `d.part` completely, resuming what is there; returns its sha256.

    A 206 answer continues the `.part`; a 200 (the server ignored Range) starts it over; a cut
    connection is retried from the bytes written (RETRIES times, then refused: rerunning resumes).
    """
    retries = RETRIES if retries is None else retries
    timeout = fetch_timeout(timeout)
    d.part.parent.mkdir(parents=True, exist_ok=True)
    failures, last, silent = 0, "", False
    while failures <= retries:
        try:
            digest = _try_once(d, label, manual, say, timeout)
        except _Retry as exc:
            failures, last, silent = failures + 1, str(exc), "silent" in str(exc)
            if failures <= retries:
                say(f"{label}: {last}; trying again in {RETRY_BACKOFF_S * failures:.0f} s ({failures}/{retries})")
                time.sleep(RETRY_BACKOFF_S * failures)
            continue
        if digest is not None:
            return digest
        # None: the `.part` was dropped (it did not match the file served); the next try starts at byte 0
    have = d.part.stat().st_size if d.part.exists() else 0
    if silent:
        manual = (f"a slow source may need a longer wait: --timeout SECONDS or ${TIMEOUT_ENV} (now {timeout:g} s); "
                  + manual)
    if have:
        raise FetchError(f"{redact(d.url)}: download failed ({last}); the {have} bytes so far are kept in {d.part}: rerun "
                         f"the same command to resume, {manual}")
    raise FetchError(f"cannot download {redact(d.url)} ({last}); check the network (or a proxy: $https_proxy), {manual}")


def _split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """`https://user:pw@host/f` -> (`https://host/f`, Basic auth header): urllib cannot send a URL's
    userinfo itself (it would try `user:pw@host` as the host name)."""
    import base64
    from urllib.parse import unquote, urlunparse

    p = urlparse(url)
    if "@" not in p.netloc:
        return url, {}
    userinfo, _, hostport = p.netloc.rpartition("@")
    user, _, pw = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(pw)}".encode()).decode()
    return urlunparse(p._replace(netloc=hostport)), {"Authorization": "Basic " + token}


def _try_once(d: Download, label: str, manual: str, say: Say, timeout: float) -> str | None:
    """One request from the bytes already in `d.part`: the sha256 when complete, None when the
    `.part` had to be dropped, `_Retry` when the connection failed."""
    part = d.part
    offset = part.stat().st_size if part.exists() else 0
    url, auth = _split_userinfo(d.via or d.url)
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **auth}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:   # nothing past our bytes: complete, or the file changed size
            m = re.search(r"/(\d+)", exc.headers.get("Content-Range", "") or "")
            if m and int(m.group(1)) == offset:
                return _hash_prefix(part).hexdigest()
            say(f"{label}: the server has no bytes past the {offset} already here; starting over")
            part.unlink()
            return None
        if exc.code >= 500 or exc.code == 429:
            raise _Retry(f"HTTP {exc.code} {exc.reason}") from None
        raise FetchError(f"{redact(d.url)}: HTTP {exc.code} {exc.reason} (the link may have moved); {manual}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, TimeoutError):
            raise _Retry(f"the server stayed silent for {timeout:g} s before answering") from None
        raise _Retry(str(reason) or type(reason).__name__) from None
    with resp:
        if "text/html" in (resp.headers.get("Content-Type") or "") and not d.url.lower().endswith((".html", ".htm")):
            raise FetchError(f"{redact(d.url)}: the server answered an HTML page, not the file (a link that moved or "
                             f"needs a login); {manual}")
        if offset and resp.status == 206:
            start, total = _content_range(resp)
            if start != offset:
                say(f"{label}: the server resumed at byte {start}, not {offset}; starting over")
                part.unlink()
                return None
            mode, hasher = "ab", _hash_prefix(part)
        else:
            if offset:
                say(f"{label}: the server ignored the resume request (HTTP {resp.status}); starting over")
            offset, mode, hasher = 0, "wb", hashlib.sha256()
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        if total is not None:
            _check_space(part.parent, total - offset, d.url)
        done, cut = _stream(resp, part, mode, hasher, label, offset, total)
    if isinstance(cut, TimeoutError):
        raise _Retry(f"the server stayed silent for {timeout:g} s after {done} of "
                     f"{total if total is not None else '?'} bytes")
    if cut is not None or (total is not None and done < total):
        why = f" ({type(cut).__name__})" if cut is not None else ""
        raise _Retry(f"cut after {done} of {total if total is not None else '?'} bytes{why}")
    return hasher.hexdigest()


def _stream(resp: Any, part: Path, mode: str, hasher: Any, label: str, offset: int,
            total: int | None) -> tuple[int, Exception | None]:
    """Append the answer's body to `part` (fsynced) with a bytes/rate/ETA bar; returns the bytes
    now in it and the connection error that cut it, if one did (our disk's errors are raised)."""
    done, cut = offset, None
    bar = progress(total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, desc=label, leave=False)
    try:
        with open(part, mode) as f:
            while True:
                try:
                    chunk = resp.read(CHUNK)
                except (OSError, http.client.HTTPException) as exc:   # the connection, not our disk
                    cut = exc
                    break
                if not chunk:
                    break
                _write(f, chunk, part)
                hasher.update(chunk)
                done += len(chunk)
                bar.update(len(chunk))
            f.flush()
            os.fsync(f.fileno())
    finally:
        bar.close()
    return done, cut


def _reject(path: Path, name_of: Path | None = None) -> Path:
    """Keep a file that failed its check for inspection as `<name>.rejected`, out of the loaders' way."""
    name_of = name_of or path
    bad = name_of.with_name(name_of.name + ".rejected")
    os.replace(path, bad)
    return bad


def _mismatch(what: Path, got: str, want: str, kept: Path, manual: str) -> FetchError:
    return FetchError(f"{what}: sha256 {got}, the manifest says {want}; not installed (kept as {kept}); the source "
                      f"may have changed or the download is damaged: rerun with --force to download it again, {manual}")


def _write_sidecar(path: Path, digest: str) -> Path:
    side = path.with_name(path.name + ".sha256")
    side.write_text(f"{digest}  {path.name}\n", encoding="utf-8")
    return side


def _copy_hashed(src: BinaryIO, dst: Path, label: str, total: int | None, pos: Callable[[], int]) -> str:
    """Stream `src` into `dst` (fsynced), with a bar over the compressed bytes read; returns the sha256 written."""
    h = hashlib.sha256()
    bar = progress(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, leave=False)
    seen = 0
    try:
        with open(dst, "wb") as out:
            while chunk := src.read(CHUNK):
                _write(out, chunk, dst)
                h.update(chunk)
                now = pos()
                bar.update(now - seen)
                seen = now
            out.flush()
            os.fsync(out.fileno())
    finally:
        bar.close()
    return h.hexdigest()


def _install(tmp: Path, t: Target, digest: str, manual: str, say: Say) -> None:
    """Rename a complete file into place once it matches the manifest's sha256 (where it has one)."""
    want = t.spec.get("sha256")
    if want and digest != want:
        raise _mismatch(t.path, digest, want, _reject(tmp, t.path), manual)
    os.replace(tmp, t.path)
    say(f"{t.spec['path']}: installed, " + ("sha256 verified" if want else
                                           f"sha256 {digest} (not verified: the manifest has none for it)"))


def _unpack(d: Download, todo: list[Target], label: str, manual: str, say: Say) -> None:
    """Unpack the completed download into each target's `<file>.unpacking`, then install it."""
    size = d.saved.stat().st_size
    try:
        if d.unpack == "gzip":
            [t] = todo
            tmp = t.path.with_name(t.path.name + ".unpacking")
            with open(d.saved, "rb") as raw, gzip.GzipFile(fileobj=raw) as gz:
                digest = _copy_hashed(gz, tmp, f"{label} (gunzip)", size, raw.tell)
            _install(tmp, t, digest, manual, say)
            return
        wanted = {t.member: t for t in todo}
        if d.unpack == "zip":
            _unzip(d, wanted, label, manual, say)
            return
        with open(d.saved, "rb") as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
            names = []
            for member in tar:
                names.append(member.name)
                t = wanted.get(member.name) or wanted.get(PurePosixPath(member.name).name)
                if t is None or not member.isfile():
                    continue
                tmp = t.path.with_name(t.path.name + ".unpacking")
                src = tar.extractfile(member)
                assert src is not None
                digest = _copy_hashed(src, tmp, f"{label} ({t.member})", size, raw.tell)
                _install(tmp, t, digest, manual, say)
                wanted = {k: v for k, v in wanted.items() if v is not t}
            if wanted:
                raise FetchError(f"{d.saved}: no member {', '.join(sorted(wanted))} in the archive from {redact(d.url)} "
                                 f"(it holds {', '.join(names[:10]) or 'nothing'}); fix `member:` in the manifest, "
                                 f"{manual}")
    except (EOFError, zlib.error, gzip.BadGzipFile, tarfile.TarError, zipfile.BadZipFile) as exc:
        for t in todo:
            t.path.with_name(t.path.name + ".unpacking").unlink(missing_ok=True)
        bad = _reject(d.saved)
        raise FetchError(f"{d.saved}: not a complete {d.unpack} file ({type(exc).__name__}: {exc}); kept as {bad}; "
                         f"rerun with --force to download it again, {manual}") from None


def _unzip(d: Download, wanted: dict[str, Target], label: str, manual: str, say: Say) -> None:
    """Install each wanted member of a zip (matched by its path or its file name, the first one that fits)."""
    with zipfile.ZipFile(d.saved) as zf:
        names = zf.namelist()
        for info in zf.infolist():
            t = wanted.get(info.filename) or wanted.get(PurePosixPath(info.filename).name)
            if t is None or info.is_dir():
                continue
            tmp = t.path.with_name(t.path.name + ".unpacking")
            with zf.open(info) as src:
                digest = _copy_hashed(src, tmp, f"{label} ({t.member})", info.file_size or None, src.tell)
            _install(tmp, t, digest, manual, say)
            wanted = {k: v for k, v in wanted.items() if v is not t}
    if wanted:
        raise FetchError(f"{d.saved}: no member {', '.join(sorted(wanted))} in the archive from {redact(d.url)} "
                         f"(it holds {', '.join(names[:10]) or 'nothing'}); fix `member:` in the manifest, {manual}")


def fetch_dataset(name: str, root: str | Path | None = None, manifest_path: str | Path | None = None, *,
                  force: bool = False, say: Say = print, retries: int | None = None, mirror: str | None = None,
                  timeout: float | None = None) -> int:
    """Download and install the files of manifest entry `name`, then derive the files made from them;
    returns how many were installed. A URL's user:password and query tokens are sent (Basic auth,
    the query as given) but every line said shows them masked (`redact`)."""
    shown, say = say, (lambda line: shown(redact(line)))
    mirror = check_mirror(mirror)
    timeout = fetch_timeout(timeout)
    doc = _load(manifest_path)
    entry = doc["datasets"].get(name)
    where = str(manifest_path or MANIFEST_PATH)
    if entry is None:
        names = ", ".join(fetchable(doc)) or "none"
        raise ConfigError(f"no dataset {name!r} in {where}; fetchable: {names} (`kgrag data fetch --list`)")
    base = data_root(root)
    downloads = plan(name, entry, base, where)
    steps = derived(entry, name, where)
    manual = _manual(entry)
    if not downloads and not steps:
        raise ConfigError(f"{name}: the manifest has no download url for it; {manual}")
    for d in downloads:
        d.via = mirrored(d.url, mirror) if mirror else ""
    if not force:   # the inputs of a derived file already present are not needed: leave them out
        spare = {base / p for spec in steps if (base / spec["path"]).is_file() for p in spec["from"]}
        for d in downloads:
            d.targets = [t for t in d.targets if t.path not in spare]
        downloads = [d for d in downloads if d.targets]
    seen: list[str] = []
    if not force and all(_present_ok(t, seen.append) for t in _targets(downloads, steps, base)):
        for line in seen:
            say(line)
        return 0   # nothing to do: nothing written, not even the lock (a shared read-only root stays untouched)
    base.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(base / f".kgrag-fetch-{name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise FetchError(f"{name}: another `kgrag data fetch {name}` is downloading into {base} now; wait for it "
                         "to end (or end it), then rerun") from None
    try:
        n = sum(_fetch_one(d, force, manual, say, retries, timeout) for d in downloads)
        return n + sum(_derive_one(spec, base, force, manual, say, where, name) for spec in steps)
    finally:
        lock.release()


def _targets(downloads: list[Download], steps: list[dict[str, Any]], base: Path) -> list[Target]:
    return [t for d in downloads for t in d.targets] + [Target(spec, base / spec["path"]) for spec in steps]


def _derive_one(spec: dict[str, Any], base: Path, force: bool, manual: str, say: Say, where: str, name: str) -> int:
    """Make one derived file from its inputs (all present by now), installed only when its sha256 is the manifest's."""
    t = Target(spec, base / spec["path"])
    if not force and _present_ok(t, say):
        return 0
    inputs = [base / p for p in spec["from"]]
    missing = [str(p) for p in inputs if not p.is_file()]
    if missing:
        raise FetchError(f"{spec['path']}: cannot derive it ({spec['derive']}): {', '.join(missing)} missing; "
                         f"rerun the fetch, {manual}")
    t.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = run_step(str(spec["derive"]), inputs, t.path, f"{where}: datasets.{name}: {spec['path']}")
    say(f"{spec['path']}: derived ({spec['derive']} from {', '.join(spec['from'])})")
    _install(tmp, t, sha256_file(tmp), manual, say)
    return 1


def _fetch_one(d: Download, force: bool, manual: str, say: Say, retries: int | None, timeout: float) -> int:
    """Download (or reuse) one URL, check it, install its missing files; returns how many were installed."""
    todo = [t for t in d.targets if force or not _present_ok(t, say)]
    if not todo:
        return 0
    label = _url_name(d.url) or d.saved.name
    for folder in {d.saved.parent, *(t.path.parent for t in todo)}:
        folder.mkdir(parents=True, exist_ok=True)
    if d.unpack and d.saved.is_file() and not force:   # completed by an earlier run whose unpacking failed
        say(f"{label}: already downloaded ({d.saved}); reusing it")
        digest = sha256_file(d.saved)
        if d.sha256 and digest != d.sha256:
            raise _mismatch(d.saved, digest, d.sha256, _reject(d.saved), manual)
    else:
        say(f"{label}: downloading {redact(d.url)}" + (f" ({d.approx})" if d.approx else "")
            + (f" from the mirror {redact(d.via)}" if d.via else ""))
        digest = download(d, label, manual, say, retries=retries, timeout=timeout)
        named = d.saved if d.unpack else todo[0].path
        if d.sha256 and digest != d.sha256:
            raise _mismatch(named, digest, d.sha256, _reject(d.part, named), manual)
        _check_recorded(d, named, digest, manual)
        os.replace(d.part, named)
        if not d.unpack:
            _say_sum(say, todo[0].spec["path"] + ": installed", digest, d.sha256, named, "sha256")
            return 1
    _say_sum(say, label, digest, d.sha256, d.saved, "download_sha256")
    _unpack(d, todo, label, manual, say)
    d.saved.unlink()   # unpacked: the download itself is no longer needed (its sum stays in the sidecar)
    return len(todo)


def _check_recorded(d: Download, named: Path, digest: str, manual: str) -> None:
    """A download the manifest has no sum for must match the sum its first fetch recorded (`<file>.sha256`)."""
    side = named.with_name(named.name + ".sha256")
    if d.sha256 or not side.is_file():
        return
    recorded = side.read_text(encoding="utf-8").split()[:1]
    if recorded and recorded[0] != digest:
        kept = _reject(d.part, named)
        raise FetchError(f"{named}: sha256 {digest}, but its first fetch recorded {recorded[0]} in {side}: the source "
                         f"changed the file since; not installed (kept as {kept}). If the change is expected, check "
                         f"it, delete {side.name} and rerun; {manual}")


def _say_sum(say: Say, what: str, digest: str, known: str | None, path: Path, field_name: str) -> None:
    """Say how sure we are of a download: verified, or its sum recorded in `<file>.sha256` for pinning."""
    if known:
        say(f"{what}, sha256 verified")
        return
    side = _write_sidecar(path, digest)
    say(f"{what}, sha256 {digest} (not verified: the manifest has no sum for this download; recorded in "
        f"{side.name}, add it as {field_name}: to pin it)")


def missing_files(names: list[str], root: str | Path | None = None,
                  manifest_path: str | Path | None = None) -> dict[str, list[str]]:
    """The files of required entries `names` absent under the root (entry -> paths). The inputs of a
    derived file that is present are not needed (a KB obtained by hand needs no ID-form sources)."""
    doc = _load(manifest_path)
    base = data_root(root)
    out: dict[str, list[str]] = {}
    for name in names:
        entry = doc["datasets"].get(name) or {}
        if not entry.get("required", True):
            continue
        files = entry.get("files", [])
        spare = {p for spec in files if spec.get("derive") and (base / spec["path"]).is_file()
                 for p in spec.get("from", [])}
        gone = [spec["path"] for spec in files if spec["path"] not in spare and not (base / spec["path"]).is_file()]
        if gone:
            out[name] = gone
    return out


def fetch_many(names: list[str], root: str | Path | None = None, manifest_path: str | Path | None = None, *,
               force: bool = False, say: Say = print, mirror: str | None = None, timeout: float | None = None,
               retries: int | None = None, optional_failures: bool = True) -> int:
    """Fetch every entry of `names` (a profile's data); an optional entry (`required: false`) that fails is
    said, not fatal (unless `optional_failures` is False: the user named it): the run that would read it
    says what it lacks. Returns the files installed."""
    doc = _load(manifest_path)
    unknown = [n for n in names if n not in doc["datasets"]]
    if unknown:
        raise ConfigError(f"no dataset {', '.join(map(repr, unknown))} in {manifest_path or MANIFEST_PATH}; "
                          f"fetchable: {', '.join(fetchable(doc)) or 'none'} (`kgrag data fetch --list`)")
    total = 0
    for name in names:
        try:
            total += fetch_dataset(name, root, manifest_path, force=force, say=say, mirror=mirror, timeout=timeout,
                                   retries=retries)
        except FetchError as exc:
            if doc["datasets"][name].get("required", True) or not optional_failures:
                raise
            say(f"{name} (optional): not fetched: {exc}")
    return total
