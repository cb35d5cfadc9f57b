"""Damaged caches on disk: the LLM cache is refused with one line naming the file and the recovery
(and never written to), `kgrag cache salvage` keeps every readable answer, and a damaged
embedding file is named and recomputed."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sqlite3
import time

import numpy as np
import pytest
from fakes import BagOfWordsEmbedder

from kgrag_lib.commands import cache as cache_cmd
from kgrag_lib.errors import CacheDamagedError, KgragError
from kgrag_lib.llm import LLMCache, SamplingParams
from kgrag_lib.llm.cache import check_cache, salvage_cache
from kgrag_lib.retrieval import embed_cached
from kgrag_lib.retrieval import emb_cache
from kgrag_lib.retrieval.emb_cache import cache_path

N_ROWS = 600
PAGE = 4096


def _messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question {i}: " + "padding " * 40}]


def _fill(path, n: int = N_ROWS) -> None:
    cache = LLMCache(path)
    for i in range(n):
        msgs = _messages(i)
        cache.put(LLMCache.make_key("test", "id", msgs, SamplingParams()), f"answer {i}", prompt_tokens=3,
                  completion_tokens=2, seconds=0.5, backend="test", identity="id", messages=msgs,
                  params=SamplingParams())
    cache.close()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> bytes:
    """The bytes of a closed, checkpointed cache holding N_ROWS answers (a few hundred KB)."""
    path = tmp_path_factory.mktemp("healthy") / "llm.sqlite"
    _fill(path)
    data = path.read_bytes()
    assert len(data) > 60 * PAGE and not os.path.exists(f"{path}-wal")
    return data


DAMAGE = {
    "truncated mid-page": lambda d: d[: len(d) // 2 + 1234],
    "garbage pages": lambda d: d[: 20 * PAGE] + np.random.default_rng(0).bytes(3 * PAGE) + d[23 * PAGE:],
    "zeroed pages": lambda d: d[: 30 * PAGE] + b"\0" * (4 * PAGE) + d[34 * PAGE:],
    "garbage header": lambda d: np.random.default_rng(1).bytes(100) + d[100:],
    "not a database": lambda d: b"this is a text file, not SQLite\n" * 200,
}


def _damaged_file(tmp_path, healthy: bytes, kind: str):
    path = tmp_path / "llm.sqlite"
    path.write_bytes(DAMAGE[kind](healthy))
    return path


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_cache_is_refused_in_one_line_and_never_written(tmp_path, healthy, kind):
    path = _damaged_file(tmp_path, healthy, kind)
    before = path.read_bytes()
    with pytest.raises(CacheDamagedError) as err:
        LLMCache(path)
    msg = str(err.value)
    assert isinstance(err.value, KgragError) and "\n" not in msg
    assert f"LLM cache {path} is damaged" in msg
    assert f"kgrag cache salvage {path}" in msg and "move it aside and rerun" in msg
    assert path.read_bytes() == before  # nothing written: no schema, no WAL switch, no checkpoint
    assert not os.path.exists(f"{path}-wal") or os.path.getsize(f"{path}-wal") == 0


def test_damage_found_after_opening_is_reported_too(tmp_path, healthy):
    path = tmp_path / "llm.sqlite"
    path.write_bytes(healthy)
    cache = LLMCache(path)  # passes the check; the table's pages are not read yet
    with open(path, "r+b") as f:
        f.seek(10 * PAGE)
        f.write(np.random.default_rng(2).bytes(40 * PAGE))
    with pytest.raises(CacheDamagedError, match=r"LLM cache .*llm\.sqlite is damaged \(database disk image is malformed\)"):
        len(cache)
    cache.close()


def test_a_healthy_cache_opens_and_salvage_leaves_it_alone(tmp_path, healthy):
    path = tmp_path / "llm.sqlite"
    path.write_bytes(healthy)
    assert check_cache(path) == {"path": str(path), "ok": True, "problems": [], "rows": N_ROWS}
    report = salvage_cache(path)
    assert (report.kept, report.unreadable, report.moved_to) == (N_ROWS, 0, None)
    assert path.read_bytes() == healthy and len(LLMCache(path)) == N_ROWS


@pytest.mark.parametrize("kind,least,most", [
    ("truncated mid-page", N_ROWS // 3, N_ROWS // 2 + 20),
    ("garbage pages", N_ROWS - 40, N_ROWS - 1),
    ("zeroed pages", N_ROWS - 50, N_ROWS - 1),
    ("garbage header", 0, 0),
    ("not a database", 0, 0),
])
def test_salvage_keeps_every_readable_row(tmp_path, healthy, kind, least, most):
    path = _damaged_file(tmp_path, healthy, kind)
    damaged_bytes = path.read_bytes()
    status = check_cache(path)
    assert not status["ok"] and status["problems"]
    report = salvage_cache(path)
    assert least <= report.kept <= most
    assert report.moved_to == tmp_path / report.moved_to.name and report.moved_to.name.startswith("llm.sqlite.damaged-")
    assert report.moved_to.read_bytes() == damaged_bytes  # kept as it was, beside the fresh file
    assert check_cache(path)["ok"]
    fresh = LLMCache(path)
    assert len(fresh) == report.kept
    kept = [i for i in range(N_ROWS)
            if fresh.get(LLMCache.make_key("test", "id", _messages(i), SamplingParams())) is not None]
    assert len(kept) == report.kept
    assert all(fresh.get(LLMCache.make_key("test", "id", _messages(i), SamplingParams())).text == f"answer {i}"
               for i in kept)
    if report.unreadable is not None:
        assert report.kept + report.unreadable >= N_ROWS


def test_salvage_drops_a_row_whose_key_does_not_match_its_request(tmp_path, healthy):
    path = tmp_path / "llm.sqlite"
    path.write_bytes(healthy)
    con = sqlite3.connect(path)
    con.execute("UPDATE calls SET request = 'tampered' WHERE rowid = 1")
    con.commit()
    con.close()
    data = bytearray(path.read_bytes())
    data[40 * PAGE:41 * PAGE] = b"\xff" * PAGE
    path.write_bytes(bytes(data))
    report = salvage_cache(path)
    assert report.kept < N_ROWS - 1 and report.unreadable >= 2
    assert LLMCache(path).get(LLMCache.make_key("test", "id", _messages(0), SamplingParams())) is None


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="kgrag")
    cache_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["cache", *argv])
    rc = args.func(args)
    return rc, capsys.readouterr().out


def test_cache_commands(tmp_path, healthy, capsys):
    path = _damaged_file(tmp_path, healthy, "garbage pages")
    rc, out = _cli(["check", str(path)], capsys)
    assert rc == 1 and '"ok": false' in out
    rc, out = _cli(["salvage", str(path)], capsys)
    assert rc == 0 and len(out.splitlines()) == 1
    assert out.startswith("kept ") and f"fresh {path}" in out and "llm.sqlite.damaged-" in out
    rc, out = _cli(["check", str(path)], capsys)
    assert rc == 0 and '"ok": true' in out
    rc, out = _cli(["salvage", str(path)], capsys)
    assert rc == 0 and "nothing to salvage" in out
    with pytest.raises(KgragError, match="no such LLM cache file"):
        _cli(["check", str(tmp_path / "absent.sqlite")], capsys)
    with pytest.raises(KgragError, match="is a directory"):
        _cli(["salvage", str(tmp_path)], capsys)


# ---- embedding cache ------------------------------------------------------------------------
TEXTS = [f"text number {i} about films" for i in range(200)]


def _stored(tmp_path, fake_embedder):
    arr = np.array(embed_cached(fake_embedder, TEXTS, cache_dir=tmp_path, show_progress=False))
    return arr, cache_path(fake_embedder, TEXTS, cache_dir=tmp_path)


def _nan_in_row(data: bytes, row: int = 1) -> bytes:
    """A NaN in `row` (row 1 is not among the 64 rows a check of 200 would sample)."""
    start = 10 + int.from_bytes(data[8:10], "little")  # .npy v1: magic, version, header length, header
    at = start + row * (len(data) - start) // len(TEXTS)
    return data[:at] + np.float32(np.nan).tobytes() + data[at + 4:]


EMB_DAMAGE = {
    "truncated": lambda d: d[: len(d) // 2],
    "a NaN in one row": _nan_in_row,
    "garbage header": lambda d: b"\x93NUMPY garbage" + d[14:],
    "garbage rows": lambda d: d[:128] + np.random.default_rng(3).bytes(len(d) - 128),
    "extra bytes": lambda d: d + b"\0" * 64,
}


@pytest.mark.parametrize("kind", list(EMB_DAMAGE))
def test_damaged_embedding_file_is_named_and_recomputed(tmp_path, fake_embedder, caplog, kind):
    good, path = _stored(tmp_path, fake_embedder)
    path.write_bytes(EMB_DAMAGE[kind](path.read_bytes()))
    calls = fake_embedder.calls
    with caplog.at_level(logging.WARNING, logger="kgrag_lib.retrieval.emb_cache"):
        again = embed_cached(fake_embedder, TEXTS, cache_dir=tmp_path, show_progress=False)
    assert fake_embedder.calls > calls
    np.testing.assert_array_equal(np.asarray(again), good)
    [record] = caplog.records
    assert f"embedding cache file {path} is damaged" in record.getMessage() and "recomputing" in record.getMessage()
    calls = fake_embedder.calls
    embed_cached(fake_embedder, TEXTS, cache_dir=tmp_path, show_progress=False)
    assert fake_embedder.calls == calls  # repaired: a plain hit again


def test_an_embedder_that_breaks_its_promise_gets_one_line(tmp_path, fake_embedder, monkeypatch):
    monkeypatch.setattr(fake_embedder, "encode", lambda texts, **kw: np.full((len(texts), fake_embedder.dim), 3.0,
                                                                             dtype=np.float32))
    with pytest.raises(CacheDamagedError, match=r"fails its check right after being written \(rows that should be "
                                                r"unit vectors are not\): does test:bag-of-words-256 return 256-dim"):
        embed_cached(fake_embedder, TEXTS, cache_dir=tmp_path, show_progress=False)


class _SlowBagOfWords(BagOfWordsEmbedder):
    """The fake embedder taking a while per call, so that a kill lands mid-embedding."""

    def encode(self, texts, **kw):
        time.sleep(0.05)
        return super().encode(texts, **kw)


def _embed_in_child(cache_dir: str, texts: list[str]) -> None:
    embed_cached(_SlowBagOfWords(), texts, cache_dir=cache_dir, show_progress=False)


def test_a_killed_embedding_resumes_at_its_last_finished_block(tmp_path, monkeypatch):
    """SIGKILL mid-embedding, rerun: finished blocks are kept, only the rest (the block cut short
    included) is encoded, the array equals a one-shot embedding and no partial file remains."""
    import multiprocessing as mp
    import signal

    monkeypatch.setattr(emb_cache, "BLOCK", 40)
    monkeypatch.setattr(emb_cache, "CHUNK", 20)   # two encode calls per block; the forked child inherits both
    texts = [f"triple {i} | starred_actors | actor {i % 17}" for i in range(400)]
    final = cache_path(BagOfWordsEmbedder(), texts, cache_dir=tmp_path)
    part, progress = final.with_suffix(".partial.npy"), final.with_suffix(".partial.json")
    proc = mp.get_context("fork").Process(target=_embed_in_child, args=(str(tmp_path), texts))
    proc.start()
    deadline = time.time() + 60
    while time.time() < deadline and (not progress.exists() or json.loads(progress.read_text())["rows"] < 80):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    done = json.loads(progress.read_text())["rows"]
    assert 80 <= done < len(texts) and done % 40 == 0 and part.exists() and not final.exists()

    counting = BagOfWordsEmbedder()
    resumed = np.array(embed_cached(counting, texts, cache_dir=tmp_path, show_progress=False))
    assert counting.texts_seen == len(texts) - done      # nothing finished is encoded again
    one_shot = np.array(embed_cached(BagOfWordsEmbedder(), texts, cache_dir=tmp_path / "fresh", show_progress=False))
    np.testing.assert_array_equal(resumed, one_shot)
    left = sorted(p.name for p in final.parent.iterdir())
    assert left == sorted([final.name, final.with_suffix(".json").name, final.name + ".lock"])


def test_a_full_disk_while_embedding_is_one_oserror_naming_the_file(tmp_path, fake_embedder, monkeypatch):
    """The space is reserved before any row is written into the memory map, so a full disk is
    ENOSPC naming the file (one line from the CLI), not a SIGBUS, and nothing is left behind."""
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    final = cache_path(fake_embedder, TEXTS, cache_dir=tmp_path)
    with pytest.raises(OSError) as caught:
        embed_cached(fake_embedder, TEXTS, cache_dir=tmp_path, show_progress=False)
    exc = caught.value
    assert exc.errno == errno.ENOSPC and exc.filename == str(final.with_suffix(".partial.npy"))
    assert fake_embedder.calls == 0
    assert "\n" not in str(exc) and str(final.with_suffix(".partial.npy")) in str(exc)
    assert [p.name for p in final.parent.iterdir()] == [final.name + ".lock"]
    monkeypatch.undo()   # space freed: the same call succeeds
    assert embed_cached(fake_embedder, TEXTS, cache_dir=tmp_path, show_progress=False).shape == (len(TEXTS), 256)


def test_export_and_import_carry_answers_between_caches(tmp_path, capsys):
    import gzip
    import json

    from kgrag_lib.cli import main as kgrag
    from kgrag_lib.llm.cache import LLMCache
    from kgrag_lib.llm.fake import ScriptedLLM

    a = LLMCache(tmp_path / "a.sqlite")
    llm = ScriptedLLM(lambda m, p: "answer to " + m[-1]["content"], identity="scripted:x", cache=a)
    for q in ("one", "two", "three"):
        llm.generate([{"role": "user", "content": q}])
    a.close()
    out = tmp_path / "export" / "rows.jsonl.gz"
    assert kgrag(["cache", "export", str(out), "--cache", str(tmp_path / "a.sqlite")]) == 0
    assert "wrote 3 cached answers" in capsys.readouterr().out
    # a forged row (answer changed, key kept) is refused on import
    rows = [json.loads(l) for l in gzip.open(out, "rt").read().splitlines()]
    rows.append({**rows[0], "request": rows[0]["request"].replace("one", "uno")})
    with gzip.open(out, "wt") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows))
    assert kgrag(["cache", "import", str(out), "--cache", str(tmp_path / "b.sqlite")]) == 0
    assert "added 3 answers; refused 1" in capsys.readouterr().out
    b = LLMCache(tmp_path / "b.sqlite")
    fresh = ScriptedLLM(lambda m, p: "recomputed", identity="scripted:x", cache=b)
    assert fresh.generate([{"role": "user", "content": "two"}]) == "answer to two" and fresh.usage.calls == 0
    b.close()
    assert kgrag(["cache", "import", str(out), "--cache", str(tmp_path / "b.sqlite")]) == 0
    assert "added 0 answers" in capsys.readouterr().out              # importing twice adds nothing
    (tmp_path / "junk.jsonl.gz").write_bytes(b"not gzip")
    assert kgrag(["cache", "import", str(tmp_path / "junk.jsonl.gz")]) == 2


def test_export_parts_append_only_new_answers_and_import_reads_the_folder(tmp_path, capsys):
    """A long run checkpoints its answers as append-only parts: each part holds only the answers
    no earlier part holds, nothing committed is rewritten, and importing the folder restores all."""
    from kgrag_lib.cli import main as kgrag
    from kgrag_lib.llm.cache import LLMCache
    from kgrag_lib.llm.fake import ScriptedLLM

    def ask(*questions):
        cache = LLMCache(tmp_path / "a.sqlite")
        llm = ScriptedLLM(lambda m, p: "answer to " + m[-1]["content"], identity="scripted:x", cache=cache)
        for q in questions:
            llm.generate([{"role": "user", "content": q}])
        cache.close()

    parts = tmp_path / "published" / "llm-cache"
    export = ["cache", "export", "--parts", str(parts), "--cache", str(tmp_path / "a.sqlite")]
    ask("one", "two")
    assert kgrag(export) == 0 and "wrote 2 new cached answers" in capsys.readouterr().out
    first = (parts / "part-0001.jsonl.gz").read_bytes()
    assert kgrag(export) == 0 and "no answers that" in capsys.readouterr().out
    assert sorted(p.name for p in parts.iterdir()) == ["part-0001.jsonl.gz"]     # nothing new, no empty part
    ask("two", "three", "four")                                                 # "two" is a cache hit
    assert kgrag(export) == 0 and "wrote 2 new cached answers" in capsys.readouterr().out
    assert (parts / "part-0001.jsonl.gz").read_bytes() == first                 # never rewritten
    assert kgrag(["cache", "import", str(parts), "--cache", str(tmp_path / "b.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "part-0001.jsonl.gz: added 2 answers" in out and "part-0002.jsonl.gz: added 2 answers" in out
    b = LLMCache(tmp_path / "b.sqlite")
    fresh = ScriptedLLM(lambda m, p: "recomputed", identity="scripted:x", cache=b)
    assert [fresh.generate([{"role": "user", "content": q}]) for q in ("one", "four")] == ["answer to one",
                                                                                           "answer to four"]
    assert fresh.usage.calls == 0
    b.close()
    (parts / "part-0003.jsonl.gz").write_bytes(b"not gzip")                     # a damaged part is named
    assert kgrag(export) == 2 and "part-0003.jsonl.gz" in capsys.readouterr().err


def test_export_never_replaces_the_cache_or_an_existing_file_without_overwrite(tmp_path, capsys):
    from kgrag_lib.cli import main as kgrag
    from kgrag_lib.llm.cache import LLMCache
    from kgrag_lib.llm.fake import ScriptedLLM

    live = tmp_path / "a.sqlite"
    cache = LLMCache(live)
    ScriptedLLM(lambda m, p: "x", identity="scripted:x", cache=cache).generate([{"role": "user", "content": "q"}])
    cache.close()
    before = live.read_bytes()
    assert kgrag(["cache", "export", str(live), "--cache", str(live), "--overwrite"]) == 2
    assert "onto itself" in capsys.readouterr().err and live.read_bytes() == before
    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    assert kgrag(["cache", "export", str(other), "--cache", str(live)]) == 2
    assert "exists; nothing was written" in capsys.readouterr().err and other.read_text() == "keep me"
    assert kgrag(["cache", "export", str(other), "--cache", str(live), "--overwrite"]) == 0
    assert kgrag(["cache", "export", str(tmp_path), "--cache", str(live)]) == 2


@pytest.mark.parametrize("line", ["[1, 2]", '"a string"', "42", "null"])
def test_importing_an_export_whose_line_is_no_object_is_one_line_naming_it(tmp_path, capsys, line):
    import gzip

    from kgrag_lib.cli import main as kgrag

    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress(f"{line}\n".encode()))
    assert kgrag(["cache", "import", str(bad), "--cache", str(tmp_path / "c.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kgrag: error: {bad}:1: ") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("problem", ["attempt to write a readonly database", "database or disk is full"])
def test_a_read_only_or_full_llm_cache_ends_the_run_in_one_line_naming_it(tmp_path, offline_parts, metaqa_root,
                                                                          monkeypatch, capsys, problem):
    """Fault injection at the cache's write (tests run as root, which no file mode stops)."""
    from kgrag_lib.cli import main as kgrag

    def refuse(*args, **kwargs):
        raise sqlite3.OperationalError(problem)

    monkeypatch.setattr(LLMCache, "put", refuse)
    rc = kgrag(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
                "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"the LLM cache ({tmp_path / 'cache' / 'llm_cache.sqlite'}): {problem}; free space" in err


def test_show_prints_the_calls_behind_a_predictions_request_ids(tmp_path, capsys):
    """`kgrag cache show` reads a run's `requests` ids back as model, parameters, messages and answer."""
    import json

    from kgrag_lib.cli import main as kgrag
    from kgrag_lib.llm import SamplingParams
    from kgrag_lib.llm.cache import LLMCache
    from kgrag_lib.llm.fake import ScriptedLLM

    path = tmp_path / "a.sqlite"
    cache = LLMCache(path)
    llm = ScriptedLLM(lambda m, p: "answer to " + m[-1]["content"], identity="scripted:x", cache=cache)
    with llm.recording() as ids:
        llm.generate([{"role": "system", "content": "be brief"}, {"role": "user", "content": "one"}])
        llm.generate([{"role": "user", "content": "two"}], SamplingParams(max_tokens=7, json_schema='{"type": "object"}'))
    assert len(ids) == 2 and all(len(i) == 16 for i in ids)
    found = cache.find(ids[1])
    assert len(found) == 1 and found[0]["key"].startswith(ids[1]) and found[0]["text"] == "answer to two"
    assert found[0]["request"]["messages"] == [{"role": "user", "content": "two"}]
    assert [c["key"] for c in cache.find(ids[0][:4])] == [c["key"] for c in cache.find(ids[0])]   # any prefix of a key
    cache.close()
    capsys.readouterr()
    assert kgrag(["cache", "show", *ids, "--cache", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("=== ") == 2 and "scripted:x" in out and "--- system\nbe brief\n--- user\none" in out
    assert "answer to one" in out and '"max_tokens": 7' in out and "(+ json_schema)" in out
    assert kgrag(["cache", "show", ids[0], "--cache", str(path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["text"] == "answer to one" and row["request"]["identity"] == "scripted:x"
    assert kgrag(["cache", "show", "0123456789abcdef", "--cache", str(path)]) == 2
    assert "no stored call for 0123456789abcdef" in capsys.readouterr().err
    assert kgrag(["cache", "show", "not-hex", "--cache", str(path)]) == 2
    assert "expected hex digits" in capsys.readouterr().err
    assert kgrag(["cache", "show", ids[0], "--cache", str(tmp_path / "none.sqlite")]) == 2
    assert "no such LLM cache file" in capsys.readouterr().err


def test_two_part_exports_into_one_folder_at_once_get_their_own_parts(tmp_path):
    """Issue 40: two `cache export --parts` into one folder at once picked the same part name;
    one died and a part was corrupt. They now take turns: each writes its own whole part."""
    import threading

    from kgrag_lib.llm.cache import LLMCache, cache_exports, export_cache_part
    from kgrag_lib.llm.fake import ScriptedLLM

    sources = []
    for name, qs in (("a", ("one", "two")), ("b", ("three", "four"))):
        cache = LLMCache(tmp_path / f"{name}.sqlite")
        llm = ScriptedLLM(lambda m, p: "answer to " + m[-1]["content"], identity="scripted:x", cache=cache)
        for q in qs:
            llm.generate([{"role": "user", "content": q}])
        cache.close()
        sources.append(tmp_path / f"{name}.sqlite")
    parts = tmp_path / "llm-cache"
    results, errors = [], []
    start = threading.Barrier(2)

    def export(src):
        try:
            start.wait()
            results.append(export_cache_part(parts, src))
        except Exception as exc:   # noqa: BLE001 - the test reports any failure of either export
            errors.append(exc)

    threads = [threading.Thread(target=export, args=(s,)) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(p.name for p in cache_exports(parts)) == ["part-0001.jsonl.gz", "part-0002.jsonl.gz"]
    assert sorted(n for _, n in results) == [2, 2]
    from kgrag_lib.llm.cache import import_cache

    added = [import_cache(p, tmp_path / "c.sqlite") for p in cache_exports(parts)]   # each part whole and readable
    assert sum(a for a, _ in added) == 4 and all(r == 0 for _, r in added)


def test_absurd_token_counts_neither_crash_a_run_nor_enter_the_cache(tmp_path):
    """Issue 40: usage tokens of 10**30 or -1 in a reply, or in an imported cache row, ended in
    SQLite's OverflowError (a traceback)."""
    import gzip
    import hashlib
    import json

    from kgrag_lib.llm.backends.openai_compat import _tokens
    from kgrag_lib.llm.cache import import_cache

    assert _tokens(10 ** 30) == 0 and _tokens(-1) == 0 and _tokens(True) == 0 and _tokens(42) == 42
    request = json.dumps({"messages": [{"role": "user", "content": "q"}]})
    row = {"key": hashlib.sha256(request.encode()).hexdigest(), "backend": "b", "identity": "i", "request": request,
           "response": "{}", "prompt_tokens": 10 ** 30, "completion_tokens": 1, "seconds": 0.1, "created": 1.0}
    part = tmp_path / "part.jsonl.gz"
    with gzip.open(part, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n" + json.dumps({**row, "prompt_tokens": 5}) + "\n")
    added, refused = import_cache(part, tmp_path / "c.sqlite")
    assert (added, refused) == (1, 1)


def test_cache_commands_on_a_read_only_cache_name_that_cache_never_the_default(tmp_path, monkeypatch, capsys):
    """Issue 40: `cache check/export/show` on a read-only cache named the default cache. Tests run as root,
    which no file mode stops, so the given file is opened read-only the way SQLite sees one (query_only);
    reading commands work on it, a writing one is refused naming it, and the default cache is never touched."""
    from kgrag_lib.cli import main as kgrag
    from kgrag_lib.llm import cache as cache_mod

    default_dir = tmp_path / "default"
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(default_dir))
    mine = tmp_path / "mine.sqlite"
    LLMCache(mine).close()
    connect = sqlite3.connect

    def read_only(db, *a, **kw):
        con = connect(db, *a, **kw)
        if str(db).endswith("mine.sqlite") or "mine.sqlite?" in str(db):
            con.execute("PRAGMA query_only=ON")
        return con

    monkeypatch.setattr(cache_mod.sqlite3, "connect", read_only)
    export = tmp_path / "out.jsonl.gz"
    for argv, code in ((["cache", "check", str(mine)], 0), (["cache", "export", str(export), "--cache", str(mine)], 0),
                       (["cache", "show", "abcd", "--cache", str(mine)], 2),
                       (["cache", "import", str(export), "--cache", str(mine)], 2)):
        rc = kgrag(argv)
        out, err = capsys.readouterr()
        assert rc == code, (argv, out, err)
        assert str(default_dir) not in out + err and "Traceback" not in err
        if rc:
            assert str(mine) in err and err.count("\n") == 1, (argv, err)
    assert not default_dir.exists()
