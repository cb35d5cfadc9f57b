"""`kgrag data fetch` against a real loopback HTTP server (stdlib, in a thread) that honours Range
requests, can ignore them, and can cut a response after N bytes like a dropped connection. The
files served are small copies in the exact real formats: DPR's psgs_w100.tsv.gz and Wikidata5M's
gzipped triples, tar.gz of aliases and gzipped descriptions."""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import socket
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from kgrag_lib import cli
from kgrag_lib.data import fetch
from kgrag_lib.data.check import PRESENT, UNVERIFIED, check_data
from kgrag_lib.data.registry import wikipedia_path
from kgrag_lib.data.wikidata5m import read_aliases, read_descriptions, read_triple_ids
from kgrag_lib.data.wikipedia import iter_passages

PSGS = ('id\ttext\ttitle\n'
        '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest, and the brother of Moses."\tAaron\n'
        '2\t"God at Sinai granted Aaron the priesthood for himself and his male descendants."\tAaron\n'
        '3\t"The Tom Hanks film ""Big"" (1988) was directed by Penny Marshall."\t"Big (film)"\n').encode()
TRIPLES = b"Q22686\tP39\tQ11696\nQ11696\tP1001\tQ30\nQ30\tP36\tQ61\n"
ENTITY = "Q22686\tdonald trump\tdonnie trump\tDonald John Trump\nQ30\tunited states\tUSA\nQ61\twashington, d.c.\n"
RELATION = "P39\tposition held\tposition occupied\nP36\tcapital\nP1001\tapplies to jurisdiction\n"
TEXT = ("Q22686\tDonald John Trump (born June 14, 1946) is the 45th president of the United States.\n"
        "Q30\tThe United States of America is a country primarily located in North America.\n")


def _tar_gz(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Loopback:
    """What the handler serves and how it misbehaves; every request's path and Range header are logged."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.auths: list[str | None] = []   # the Authorization header of each request
        self.sent: list[int] = []          # body bytes sent per request
        self.ignore_range = False
        self.content_type = "application/octet-stream"
        self.cut_after: list[int] = []     # one entry per coming response: send that many bytes, then drop

    def url(self, server: ThreadingHTTPServer, name: str) -> str:
        return f"http://127.0.0.1:{server.server_address[1]}/{name}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:   # quiet test output
        pass

    def do_GET(self) -> None:
        state: Loopback = self.server.state   # type: ignore[attr-defined]
        path = self.path.split("?")[0].lstrip("/")
        rng = self.headers.get("Range")
        state.requests.append((path, rng))
        state.auths.append(self.headers.get("Authorization"))
        body = state.files.get(path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        if rng and not state.ignore_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", state.content_type)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        payload = body[start:]
        if state.cut_after:
            payload = payload[:state.cut_after.pop(0)]
        self.wfile.write(payload)
        self.wfile.flush()
        state.sent.append(len(payload))


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.state = Loopback()   # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    monkeypatch.setattr(fetch, "RETRY_BACKOFF_S", 0.0)
    monkeypatch.setattr(fetch, "TIMEOUT_S", 10.0)
    monkeypatch.setattr(fetch, "CHUNK", 64)   # several reads per small file, so a cut lands mid-stream
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)


def _manifest(tmp_path: Path, datasets: dict) -> Path:
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "datasets": datasets}, sort_keys=False))
    return path


def _wikipedia(url: str, **extra) -> dict:
    return {"obtain": "Download psgs_w100.tsv.gz from DPR and gunzip it to <root>/wikipedia/psgs_w100.tsv.",
            "required": False,
            "files": [{"path": "wikipedia/psgs_w100.tsv", "rows": 4, "url": url, "unpack": "gzip", **extra}]}


def _status(root: Path, manifest: Path) -> dict[str, str]:
    return {s.path: s.status for s in check_data(root, manifest)}


def _fetch(argv: list[str], capsys) -> tuple[int, str, str]:
    """Run the CLI; `err` keeps only kgrag's own lines (the progress bars' redraws dropped)."""
    rc = cli.main(["data", "fetch", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, "".join(ln + "\n" for ln in re.split(r"[\r\n]", err) if ln.startswith("kgrag"))


def test_fetch_installs_a_gzipped_corpus_and_check_finds_it(server, tmp_path, capsys):
    state = server.state
    state.files["psgs_w100.tsv.gz"] = gz = gzip.compress(PSGS)
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz") + "?dl=1")})
    root = tmp_path / "root"
    assert _status(root, manifest) == {"wikipedia/psgs_w100.tsv": "missing"}

    rc, out, _ = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 0
    final = root / "wikipedia" / "psgs_w100.tsv"
    assert final.read_bytes() == PSGS
    digest = hashlib.sha256(gz).hexdigest()
    assert f"sha256 {digest} (not verified" in out
    assert (root / "wikipedia" / "psgs_w100.tsv.gz.sha256").read_text() == f"{digest}  psgs_w100.tsv.gz\n"
    assert sorted(p.name for p in final.parent.iterdir()) == ["psgs_w100.tsv", "psgs_w100.tsv.gz.sha256"]
    assert _status(root, manifest) == {"wikipedia/psgs_w100.tsv": UNVERIFIED}
    passages = list(iter_passages(wikipedia_path(root)))
    assert [p.title for p in passages] == ["Aaron", "Aaron", "Big (film)"]
    assert 'Aaron ( or ; "Ahärôn")' in passages[0].text

    rc, out, _ = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 0 and "present" in out and "skipped" in out and len(state.requests) == 1   # nothing fetched again


def test_fetch_unpacks_wikidata5m_archives_and_verifies_known_sums(server, tmp_path, capsys):
    state = server.state
    state.files = {"wikidata5m_all_triplet.txt.gz": gzip.compress(TRIPLES),
                   "wikidata5m_alias.tar.gz": _tar_gz({"wikidata5m_entity.txt": ENTITY,
                                                       "wikidata5m_relation.txt": RELATION}),
                   "wikidata5m_text.txt.gz": gzip.compress(TEXT.encode())}
    alias = state.url(server, "wikidata5m_alias.tar.gz")
    files = [
        {"path": "wikidata5m/wikidata5m_all_triplet.txt", "unpack": "gzip",
         "url": state.url(server, "wikidata5m_all_triplet.txt.gz"), "sha256": hashlib.sha256(TRIPLES).hexdigest()},
        {"path": "wikidata5m/wikidata5m_entity.txt", "url": alias, "unpack": "tar.gz",
         "member": "wikidata5m_entity.txt",
         "download_sha256": hashlib.sha256(state.files["wikidata5m_alias.tar.gz"]).hexdigest()},
        {"path": "wikidata5m/wikidata5m_relation.txt", "url": alias, "unpack": "tar.gz",
         "member": "wikidata5m_relation.txt"},
        {"path": "wikidata5m/wikidata5m_text.txt", "unpack": "gzip",
         "url": state.url(server, "wikidata5m_text.txt.gz")},
    ]
    manifest = _manifest(tmp_path, {"wikidata5m": {"obtain": "From the KEPLER page.", "required": False,
                                                   "files": files}})
    root = tmp_path / "root"
    rc, out, _ = _fetch(["wikidata5m", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 0, out
    assert sorted(p for p, _ in state.requests) == sorted(state.files)   # the alias archive downloaded once
    status = _status(root, manifest)
    assert status["wikidata5m/wikidata5m_all_triplet.txt"] == PRESENT   # its sha256 was known
    assert set(status.values()) <= {PRESENT, UNVERIFIED}
    folder = root / "wikidata5m"
    assert not list(folder.glob("*.gz")) and not list(folder.glob("*.part"))   # downloads removed once unpacked
    heads, rels, tails = next(read_triple_ids(folder / "wikidata5m_all_triplet.txt"))[:3]
    assert list(heads) == [22686, 11696, 30] and list(rels) == [39, 1001, 36] and list(tails) == [11696, 30, 61]
    assert dict(read_aliases(folder / "wikidata5m_entity.txt"))[22686][:2] == ["donald trump", "donnie trump"]
    assert dict(read_aliases(folder / "wikidata5m_relation.txt", "relation"))[39][0] == "position held"
    assert dict(read_descriptions(folder / "wikidata5m_text.txt"))[30].startswith("The United States")


def test_a_cut_download_resumes_with_a_range_request(server, tmp_path, capsys):
    state = server.state
    state.files["psgs_w100.tsv.gz"] = gz = gzip.compress(PSGS)
    state.cut_after = [100]
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"))})
    root = tmp_path / "root"
    # no retry within the run: the first run ends refused, keeping the 100 bytes for the next
    with pytest.raises(fetch.FetchError, match=r"rerun the same command to resume") as exc:
        fetch.fetch_dataset("wikipedia-2018", root, manifest, retries=0, say=lambda _: None)
    assert "100 bytes so far" in str(exc.value)
    part = root / "wikipedia" / "psgs_w100.tsv.gz.part"
    assert part.read_bytes() == gz[:100] and not (root / "wikipedia" / "psgs_w100.tsv").exists()

    rc, out, _ = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 0
    assert state.requests == [("psgs_w100.tsv.gz", None), ("psgs_w100.tsv.gz", "bytes=100-")]
    assert state.sent == [100, len(gz) - 100]   # the bytes already there were not fetched again
    assert (root / "wikipedia" / "psgs_w100.tsv").read_bytes() == PSGS and not part.exists()
    assert hashlib.sha256(gz).hexdigest() in out   # the sum covers the resumed prefix too


def test_a_cut_download_resumes_within_one_run(server, tmp_path):
    state = server.state
    state.files["psgs_w100.tsv.gz"] = gz = gzip.compress(PSGS)
    state.cut_after = [70, 50]
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"))})
    root = tmp_path / "root"
    assert fetch.fetch_dataset("wikipedia-2018", root, manifest, say=lambda _: None) == 1
    assert [r for _, r in state.requests] == [None, "bytes=70-", "bytes=120-"]
    assert sum(state.sent) == len(gz)
    assert (root / "wikipedia" / "psgs_w100.tsv").read_bytes() == PSGS


def test_a_server_ignoring_range_restarts_cleanly(server, tmp_path):
    state = server.state
    state.files["psgs_w100.tsv.gz"] = gzip.compress(PSGS)
    state.cut_after = [90]
    state.ignore_range = True
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"))})
    root = tmp_path / "root"
    said: list[str] = []
    assert fetch.fetch_dataset("wikipedia-2018", root, manifest, say=said.append) == 1
    assert [r for _, r in state.requests] == ["bytes=90-" if i else None for i in range(2)]
    assert any("ignored the resume request" in s and "starting over" in s for s in said)
    assert (root / "wikipedia" / "psgs_w100.tsv").read_bytes() == PSGS   # not the first 90 bytes twice


def test_a_bad_checksum_is_refused_and_nothing_installed(server, tmp_path, capsys):
    state = server.state
    state.files["psgs_w100.tsv.gz"] = gz = gzip.compress(PSGS)
    wrong = "0" * 64
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"),
                                                                  download_sha256=wrong)})
    root = tmp_path / "root"
    rc, out, err = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "psgs_w100.tsv.gz" in err and wrong in err and hashlib.sha256(gz).hexdigest() in err
    assert "--force" in err
    folder = root / "wikipedia"
    assert not (folder / "psgs_w100.tsv").exists() and not (folder / "psgs_w100.tsv.gz").exists()
    assert (folder / "psgs_w100.tsv.gz.rejected").read_bytes() == gz   # kept for inspection, out of the way


def test_a_bad_sum_of_the_unpacked_file_keeps_the_users_old_copy(server, tmp_path, capsys):
    state = server.state
    state.files["psgs_w100.tsv.gz"] = gzip.compress(PSGS)
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"),
                                                                  sha256="f" * 64)})
    root = tmp_path / "root"
    old = root / "wikipedia" / "psgs_w100.tsv"
    old.parent.mkdir(parents=True)
    old.write_text("the user's own copy\n")
    rc, _, err = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 2 and "present but its sha256" in err   # not replaced without --force
    rc, _, err = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest), "--force"], capsys)
    assert rc == 2 and "f" * 64 in err and len(err.strip().splitlines()) == 1
    assert old.read_text() == "the user's own copy\n"
    assert (old.parent / "psgs_w100.tsv.rejected").read_bytes() == PSGS


def test_an_unreachable_host_is_one_line_naming_the_url_and_the_manual_way(tmp_path, capsys):
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/psgs_w100.tsv.gz"
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(url)})
    root = tmp_path / "root"
    rc, out, err = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 2
    [line] = err.strip().splitlines()
    assert line.startswith("kgrag: error: cannot download " + url)
    assert "refused" in line.lower() and "obtain it by hand: Download psgs_w100.tsv.gz from DPR" in line
    assert not (root / "wikipedia" / "psgs_w100.tsv").exists()


def test_http_errors_and_html_pages_are_refused(server, tmp_path, capsys):
    state = server.state
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "gone.tsv.gz"))})
    rc, _, err = _fetch(["wikipedia-2018", "--root", str(tmp_path / "r"), "--manifest", str(manifest)], capsys)
    assert rc == 2 and "HTTP 404" in err and "gone.tsv.gz" in err
    state.files["psgs_w100.tsv.gz"] = b"<html><body>Sign in to download</body></html>"
    state.content_type = "text/html; charset=utf-8"   # what a moved share link answers
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"))})
    rc, _, err = _fetch(["wikipedia-2018", "--root", str(tmp_path / "r"), "--manifest", str(manifest)], capsys)
    assert rc == 2 and "an HTML page, not the file" in err
    assert not list((tmp_path / "r" / "wikipedia").iterdir())


def test_a_complete_part_and_a_part_longer_than_the_file(server, tmp_path):
    """A run killed between the last byte and the rename resumes to a 416 and installs what it has;
    a `.part` longer than the file (the source changed) is started over."""
    state = server.state
    state.files["psgs_w100.tsv.gz"] = gz = gzip.compress(PSGS)
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"))})
    root = tmp_path / "root"
    part = root / "wikipedia" / "psgs_w100.tsv.gz.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(gz)
    assert fetch.fetch_dataset("wikipedia-2018", root, manifest, say=lambda _: None) == 1
    assert state.sent == [] and (root / "wikipedia" / "psgs_w100.tsv").read_bytes() == PSGS
    (root / "wikipedia" / "psgs_w100.tsv").unlink()
    part.write_bytes(gz + b"stale tail of an older file")
    assert fetch.fetch_dataset("wikipedia-2018", root, manifest, say=lambda _: None, retries=0) == 1
    assert state.sent == [len(gz)] and (root / "wikipedia" / "psgs_w100.tsv").read_bytes() == PSGS


def test_list_and_unknown_names(server, tmp_path, capsys):
    state = server.state
    manifest = _manifest(tmp_path, {
        "wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"), approx_download="13 KB"),
        "metaqa": {"obtain": "By hand.", "files": [{"path": "metaqa/kb.txt"}]}})
    rc, out, _ = _fetch(["--list", "--root", str(tmp_path), "--manifest", str(manifest)], capsys)
    assert rc == 0
    assert "wikipedia-2018: 1 download(s), 1 file(s), 0 present" in out
    assert "psgs_w100.tsv.gz  (13 KB; no sha256 known) -> wikipedia/psgs_w100.tsv" in out
    assert "not fetchable (obtain by hand, see `kgrag data check`): metaqa" in out
    rc, _, err = _fetch(["metaqa", "--root", str(tmp_path), "--manifest", str(manifest)], capsys)
    assert rc == 2 and "no download url" in err and "By hand." in err
    rc, _, err = _fetch(["nope", "--root", str(tmp_path), "--manifest", str(manifest)], capsys)
    assert rc == 2 and "fetchable: wikipedia-2018" in err
    rc, _, err = _fetch(["--root", str(tmp_path)], capsys)
    assert rc == 2 and "--list" in err


def test_the_shipped_manifest_names_downloads_for_the_unshipped_corpora():
    from kgrag_lib.data.manifest import load_manifest

    downloads = fetch.fetchable(load_manifest())
    assert set(downloads) >= {"wikipedia-2018", "wikidata5m"}
    [wiki] = downloads["wikipedia-2018"]
    assert wiki.url == "https://dl.fbaipublicfiles.com/dpr/wikipedia_split/psgs_w100.tsv.gz" and wiki.unpack == "gzip"
    by_name = {fetch._url_name(d.url): d for d in downloads["wikidata5m"]}
    assert set(by_name) == {"wikidata5m_all_triplet.txt.gz", "wikidata5m_alias.tar.gz", "wikidata5m_text.txt.gz"}
    assert [t.member for t in by_name["wikidata5m_alias.tar.gz"].targets] == ["wikidata5m_entity.txt",
                                                                             "wikidata5m_relation.txt"]


def test_a_missing_member_keeps_the_archive_for_the_next_run(server, tmp_path, capsys):
    state = server.state
    state.files["wikidata5m_alias.tar.gz"] = _tar_gz({"wikidata5m_entity.txt": ENTITY,
                                                      "wikidata5m_relation.txt": RELATION})
    url = state.url(server, "wikidata5m_alias.tar.gz")

    def manifest(member: str) -> Path:
        return _manifest(tmp_path, {"wikidata5m": {"obtain": "From the KEPLER page.", "files": [
            {"path": "wikidata5m/wikidata5m_entity.txt", "url": url, "unpack": "tar.gz", "member": member}]}})

    root = tmp_path / "root"
    rc, _, err = _fetch(["wikidata5m", "--root", str(root), "--manifest", str(manifest("entities.txt"))], capsys)
    assert rc == 2 and "no member entities.txt" in err and "wikidata5m_relation.txt" in err
    assert (root / "wikidata5m" / "wikidata5m_alias.tar.gz").is_file()
    rc, out, _ = _fetch(["wikidata5m", "--root", str(root), "--manifest", str(manifest("wikidata5m_entity.txt"))],
                        capsys)
    assert rc == 0 and "reusing it" in out and len(state.requests) == 1   # not downloaded twice
    assert (root / "wikidata5m" / "wikidata5m_entity.txt").read_text() == ENTITY
    assert not (root / "wikidata5m" / "wikidata5m_alias.tar.gz").exists()


def test_a_damaged_gzip_is_set_aside_and_named(server, tmp_path, capsys):
    state = server.state
    state.files["psgs_w100.tsv.gz"] = gzip.compress(PSGS)[:-20]   # served whole, but the gzip itself is cut
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(state.url(server, "psgs_w100.tsv.gz"))})
    root = tmp_path / "root"
    rc, _, err = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 2 and "not a complete gzip file" in err and "psgs_w100.tsv.gz.rejected" in err
    assert sorted(p.name for p in (root / "wikipedia").iterdir()) == ["psgs_w100.tsv.gz.rejected",
                                                                      "psgs_w100.tsv.gz.sha256"]


@pytest.mark.parametrize("spec, says", [
    ({"url": "ftp://host/f.gz"}, "expected an http(s):// URL"),
    ({"url": "http://host/f.7z", "unpack": "7z"}, "accepted: gzip, tar.gz, zip"),
    ({"url": "http://host/f.gz", "unpack": "gzip", "member": "f"}, "'member' needs unpack: tar.gz"),
])
def test_download_fields_of_a_bad_form_are_refused_naming_the_file(tmp_path, capsys, spec, says):
    manifest = _manifest(tmp_path, {"toy": {"files": [{"path": "toy/f.txt", **spec}]}})
    rc, _, err = _fetch(["toy", "--root", str(tmp_path), "--manifest", str(manifest)], capsys)
    assert rc == 2 and f"{manifest}: datasets.toy: toy/f.txt" in err and says in err


def test_a_url_with_user_password_and_a_token_is_fetched_but_neither_is_printed(server, tmp_path, capsys):
    """Issue 59: the URL's user:password and ?token= were printed in full, and urllib could not use the
    userinfo (it took `user:pw@host` for the host name), so the download failed after its retries."""
    import base64

    state = server.state
    state.files["psgs_w100.tsv.gz"] = gzip.compress(PSGS)
    url = f"http://reader:pa55w0rd@127.0.0.1:{server.server_address[1]}/psgs_w100.tsv.gz?token=T0KEN99"
    manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(url)})
    root = tmp_path / "root"
    rc, out, err = _fetch(["wikipedia-2018", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 0 and (root / "wikipedia" / "psgs_w100.tsv").read_bytes() == PSGS
    assert state.auths == ["Basic " + base64.b64encode(b"reader:pa55w0rd").decode()]   # sent as Basic auth
    assert "downloading http://***@127.0.0.1" in out and "token=***" in out
    listed = fetch.list_fetchable(manifest, root)
    for secret in ("pa55w0rd", "T0KEN99"):
        assert secret not in out + err + listed
        assert [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()] == []


@pytest.mark.parametrize("path, says", [
    ("../../escaped.txt", "leaves the data root"),
    ("toy/../../escaped.txt", "leaves the data root"),
    ("/tmp/kgrag-escaped.txt", "is absolute"),
    ("~/escaped.txt", "is absolute"),
    ("toy/", "names no file"),
])
def test_a_manifest_path_outside_the_data_root_is_refused_naming_the_entry(server, tmp_path, capsys, path, says):
    """Issue 59: `path: ../../x` or an absolute path was installed outside --root (exit 0, "installed
    under <root>"). Now refused before any request, naming the manifest entry."""
    state = server.state
    state.files["f.txt"] = b"payload\n"
    manifest = _manifest(tmp_path, {"toy": {"files": [{"path": path, "url": state.url(server, "f.txt")}]}})
    root = tmp_path / "a" / "root"
    rc, out, err = _fetch(["toy", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 2 and f"{manifest}: datasets.toy: path {path!r} {says}" in err
    assert state.requests == [] and "installed" not in out
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "a" / "escaped.txt").exists()
    assert not Path("/tmp/kgrag-escaped.txt").exists()


def test_an_installed_file_lies_under_the_root_it_names(server, tmp_path, capsys):
    """'installed under <root>' is true: the file is there, and nothing else was written outside it."""
    state = server.state
    state.files["f.txt"] = b"payload\n"
    manifest = _manifest(tmp_path, {"toy": {"files": [{"path": "toy/./f.txt", "url": state.url(server, "f.txt")}]}})
    root = tmp_path / "root"
    rc, out, _ = _fetch(["toy", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 0 and f"1 file(s) installed under {root}" in out
    assert (root / "toy" / "f.txt").read_bytes() == b"payload\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["datasets.yaml", "root"]
