"""The shared JSON-lines files (`kgrag_lib.jsonl`): fsynced appends from several threads, torn-tail
recovery after a kill, bad lines named by file and line, clean and atomic rewrites."""

from __future__ import annotations

import json
import threading

import pytest

from kgrag_lib.errors import DataFormatError
from kgrag_lib.jsonl import JsonlAppender, atomic_json, drop_torn_tail, read_jsonl, rewrite_jsonl


def test_appended_lines_read_back_in_order(tmp_path):
    path = tmp_path / "sub" / "log.jsonl"
    with JsonlAppender(path) as log:
        log.append({"i": 1, "name": "Grégoire"})
        log.extend([{"i": 2}, {"i": 3}])
    assert "Grégoire" in path.read_text(encoding="utf-8")  # not escaped
    read = read_jsonl(path)
    assert [r["i"] for r in read.rows] == [1, 2, 3] and read.lines == [1, 2, 3] and not read.torn


def test_a_torn_last_line_is_dropped_and_cut_off_only_when_resuming(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"i": 1}\n\n{"i": 2}\n{"i": 3, "na', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"log\.jsonl:4: .*not JSON"):
        read_jsonl(path)
    read = read_jsonl(path, torn_tail=True)
    assert [r["i"] for r in read.rows] == [1, 2] and read.lines == [1, 3] and read.torn
    drop_torn_tail(read)
    assert path.read_text(encoding="utf-8") == '{"i": 1}\n\n{"i": 2}\n'
    with JsonlAppender(path) as log:
        log.append({"i": 3})
    assert [r["i"] for r in read_jsonl(path).rows] == [1, 2, 3]


def test_damage_before_the_last_line_is_refused_with_its_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"i": 1}\nnot json\n{"i": 3}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"log\.jsonl:2: .*not JSON"):
        read_jsonl(path, torn_tail=True)
    path.write_text('{"i": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"log\.jsonl:2: .*one JSON object per line"):
        read_jsonl(path, torn_tail=True)
    path.write_bytes(b'{"i": "Gr\xe9goire"}\n{"i": 2}\n')
    with pytest.raises(DataFormatError, match=r"log\.jsonl:1: .*not UTF-8"):
        read_jsonl(path)


def test_a_complete_last_line_without_its_newline_is_kept_and_not_joined(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"i": 1}\n{"i": 2}', encoding="utf-8")
    read = read_jsonl(path, torn_tail=True)
    assert [r["i"] for r in read.rows] == [1, 2] and not read.torn
    with JsonlAppender(path) as log:
        log.append({"i": 3})
    assert path.read_text(encoding="utf-8").splitlines() == ['{"i": 1}', '{"i": 2}', '{"i": 3}']


def test_threads_appending_to_one_file_never_interleave(tmp_path):
    path = tmp_path / "log.jsonl"
    log = JsonlAppender(path)
    text = "x" * 5000

    def work(t: int) -> None:
        for i in range(50):
            log.append({"t": t, "i": i, "text": text})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    rows = read_jsonl(path).rows
    assert len(rows) == 200 and all(r["text"] == text for r in rows)
    for t in range(4):
        assert [r["i"] for r in rows if r["t"] == t] == list(range(50))


def test_rewrites_replace_the_whole_file(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"old": true}\n', encoding="utf-8")
    rewrite_jsonl(path, [{"a": 1}, {"b": (1, 2)}], default=str)
    assert read_jsonl(path).rows == [{"a": 1}, {"b": [1, 2]}]
    gz = tmp_path / "rows.jsonl.gz"
    rewrite_jsonl(gz, [{"a": "é"}])
    assert gz.read_bytes()[:2] == b"\x1f\x8b" and read_jsonl(gz).rows == [{"a": "é"}]
    target = tmp_path / "m.json"
    atomic_json(target, {"path": tmp_path, "name": "é"})
    assert json.loads(target.read_text(encoding="utf-8")) == {"path": str(tmp_path), "name": "é"}
    assert "é" in target.read_text(encoding="utf-8") and sorted(p.name for p in tmp_path.iterdir()) == [
        "log.jsonl", "m.json", "rows.jsonl.gz"]  # no temporary file left


@pytest.mark.parametrize("code, says", [("ENOSPC", "No space left on device"), ("EROFS", "Read-only file system")])
def test_a_full_disk_ends_the_run_in_one_line_naming_the_file_and_the_run_resumes(tmp_path, offline_parts, metaqa_root,
                                                                                 monkeypatch, capsys, code, says):
    """Fault injection: the disk fills up or turns read-only at the fsync of the second answer (tests run
    as root, which no file mode stops). The run ends with exit 2 and one line naming predictions.jsonl,
    not a traceback; freed, the same command finishes."""
    import errno
    import os

    import kgrag_lib.jsonl as jsonl_mod
    from kgrag_lib.cli import main

    real_fsync, calls = os.fsync, []

    def full_disk(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("predictions.jsonl"):
            calls.append(fd)
            if len(calls) == 2:
                raise OSError(getattr(errno, code), says)
        real_fsync(fd)

    monkeypatch.setattr(jsonl_mod.os, "fsync", full_disk)
    argv = ["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "3", "--no-progress",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'run' / 'predictions.jsonl'}: {says}; free space or choose a writable folder" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.setattr(jsonl_mod.os, "fsync", real_fsync)
    assert main(argv) == 0
    rows = read_jsonl(tmp_path / "run" / "predictions.jsonl").rows
    assert len(rows) == 3 and len({r["qid"] for r in rows}) == 3
