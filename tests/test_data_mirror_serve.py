"""`kgrag data mirror`: a data root served to `data fetch --mirror` on another machine. A real
`kgrag data mirror` process serves a root holding cpu-smoke's files (the small stand-ins of
tests/source_mirror.py, in the manifest's layout, and 2Wiki's aliases zip where fetch saves it);
`data fetch --profile cpu-smoke --mirror URL` through it installs every file, checked. What it
cannot serve byte for byte is named before it starts; a non-loopback address needs a flag."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import source_mirror
from kgrag_lib import cli
from kgrag_lib.data import fetch
from kgrag_lib.data.check import PRESENT, check_data
from kgrag_lib.data.mirror import MirrorServer, mirror_plan
from kgrag_lib.studies.data_needs import profile_data

REPO = Path(__file__).resolve().parents[1]
CPU_SMOKE = profile_data("cpu-smoke")
ZIP = "2wiki/data_ids_april7.zip"   # where `data fetch` saves the aliases' download before unpacking it


@pytest.fixture
def source_root(tmp_path) -> tuple[Path, Path]:
    """(a data root holding cpu-smoke's files, the manifest whose sums are theirs)."""
    manifest, _ = source_mirror.mirror_manifest(tmp_path / "m", CPU_SMOKE)
    return tmp_path / "m" / "facts", manifest


def test_what_cannot_be_served_byte_for_byte_is_named(source_root):
    root, manifest = source_root
    (root / "hotpotqa" / "AMOR_dev100.jsonl").write_text("{}\n")   # not the size the manifest says
    served = mirror_plan(root, manifest, CPU_SMOKE)
    said = "\n".join(served.missing)
    assert "hotpotqa: hotpotqa/AMOR_dev100.jsonl is 3 bytes, the manifest says" in said
    assert "2wiki-aliases: the zip download data_ids_april7.zip is not in" in said   # only its member could be
    assert len(served.missing) == 2 and "2wiki-aliases" not in served.entries
    assert all(p.is_file() for p in served.files.values())
    assert not any(k.endswith("kb.txt") for k in served.files)   # a derived file has no URL: fetch makes it


def test_a_fetch_through_a_running_kgrag_data_mirror_installs_every_file(source_root, tmp_path, monkeypatch):
    root, manifest = source_root
    (root / ZIP).write_bytes(source_mirror.aliases_zip())
    for p in (root / "metaqa" / "kb.txt",):   # the fetching side derives it from the ID-form sources
        p.unlink()
    proc = subprocess.Popen([sys.executable, "-m", "kgrag_lib.cli", "data", "mirror", "--profile", "cpu-smoke",
                             "--root", str(root), "--manifest", str(manifest), "--port", "0"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        while not (lines and lines[-1].startswith("mirror: ")):
            line = proc.stdout.readline()
            assert line, "".join(lines)   # it ended before serving
            lines.append(line)
        url = lines[-1].split()[1]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/sources")
        assert not [ln for ln in lines if ln.startswith("not served")], lines
        monkeypatch.setattr(fetch, "RETRIES", 0)
        new = tmp_path / "elsewhere"
        rc = cli.main(["data", "fetch", "--profile", "cpu-smoke", "--root", str(new), "--manifest", str(manifest),
                       "--mirror", url])
        assert rc == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped after" in out, out
    statuses = check_data(new, manifest)
    assert len(statuses) == 28 and all(s.status.startswith(PRESENT) for s in statuses)   # the aliases: no sum
    for s in statuses:
        want = root / s.path if s.path != "metaqa/kb.txt" else None
        if want is not None and want.is_file():
            assert (new / s.path).read_bytes() == want.read_bytes(), s.path
    assert (new / "metaqa" / "kb.txt").read_text() == source_mirror.KB   # derived on the fetching side
    assert (new / "2wiki" / "id_aliases.json").read_text() == source_mirror.TWOWIKI_ALIASES


def test_range_answers_and_paths_outside_what_is_served(tmp_path):
    (tmp_path / "f.txt").write_bytes(b"0123456789")
    with MirrorServer({"example.org/f.txt": tmp_path / "f.txt", "example.org/b": b"abc"}) as srv:
        def get(path: str, rng: str | None = None):
            req = urllib.request.Request(srv.url.rsplit("/", 1)[0] + path, headers={"Range": rng} if rng else {})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                return exc.code, b""

        assert get("/sources/example.org/f.txt") == (200, b"0123456789")
        assert get("/sources/example.org/f.txt?dl=1", "bytes=4-") == (206, b"456789")
        assert get("/sources/example.org/b", "bytes=3-")[0] == 416
        assert get("/sources/example.org/f.txt", "bytes=0-3") == (200, b"0123456789")   # a form it does not serve
        assert get("/sources/example.org/../f.txt")[0] == 404
        assert get("/example.org/f.txt")[0] == 404
        assert get("/sources/example.org/g.txt")[0] == 404


@pytest.mark.parametrize("argv, says", [
    (["--host", "0.0.0.0"], "not a loopback address"),
    (["--port", "70000"], "--port 70000"),
    (["--host", ""], "--host ''"),
])
def test_a_remote_host_needs_the_flag_and_bad_arguments_are_refused(source_root, capsys, argv, says):
    root, manifest = source_root
    rc = cli.main(["data", "mirror", "--root", str(root), "--manifest", str(manifest), *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and says in err and "Traceback" not in out + err


def test_a_root_without_any_download_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc = cli.main(["data", "mirror", "metaqa", "--root", str(tmp_path / "empty")])
    out, err = capsys.readouterr()
    assert rc == 2 and "holds none of the downloads of metaqa" in err and "not served: metaqa:" in out
