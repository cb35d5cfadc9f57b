"""The SQLite call cache: key sensitivity, persistence, two writers, and surviving SIGKILL."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import time

import pytest

from kgrag_lib.llm import LLMCache, SamplingParams
from kgrag_lib.llm.cache import canonical_request

MSGS = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Who directed Jaws?"}]


def _put(cache: LLMCache, key: str, text: str = "x") -> None:
    cache.put(key, text, prompt_tokens=10, completion_tokens=2, seconds=0.1,
              backend="test", identity="id", messages=MSGS, params=SamplingParams())


def test_key_is_sensitive_to_everything_that_changes_output():
    base = LLMCache.make_key("llamacpp", "gguf-sha256:abc", MSGS, SamplingParams())
    variants = {
        "backend": LLMCache.make_key("hf", "gguf-sha256:abc", MSGS, SamplingParams()),
        "identity": LLMCache.make_key("llamacpp", "gguf-sha256:abd", MSGS, SamplingParams()),
        "one char": LLMCache.make_key("llamacpp", "gguf-sha256:abc", [
            MSGS[0], {"role": "user", "content": "Who directed Jaws!"}], SamplingParams()),
        "role": LLMCache.make_key("llamacpp", "gguf-sha256:abc", [
            {"role": "user", "content": MSGS[0]["content"]}, MSGS[1]], SamplingParams()),
        "order": LLMCache.make_key("llamacpp", "gguf-sha256:abc", MSGS[::-1], SamplingParams()),
    }
    changed = dict(max_tokens=255, temperature=0.1, top_p=0.9, top_k=40, min_p=0.05,
                   repeat_penalty=1.1, stop=("\n",), seed=43)
    assert set(changed) == set(SamplingParams().to_dict())  # every field is exercised
    for field, value in changed.items():
        variants[field] = LLMCache.make_key("llamacpp", "gguf-sha256:abc", MSGS,
                                            SamplingParams().replace(**{field: value}))
    variants["stop order"] = LLMCache.make_key("llamacpp", "gguf-sha256:abc", MSGS,
                                               SamplingParams(stop=("b", "a")))
    variants["stop order2"] = LLMCache.make_key("llamacpp", "gguf-sha256:abc", MSGS,
                                                SamplingParams(stop=("a", "b")))
    for what, key in variants.items():
        assert key != base, what
    assert len(set(variants.values())) == len(variants)


def test_key_is_stable_and_canonical():
    a = LLMCache.make_key("b", "i", MSGS, SamplingParams(stop=["x"]))
    reordered = [{"content": m["content"], "role": m["role"]} for m in MSGS]
    assert a == LLMCache.make_key("b", "i", reordered, SamplingParams(stop=("x",)))
    assert len(a) == 64 and int(a, 16) >= 0
    # non-ASCII text is hashed as UTF-8, not escaped differently by platform
    assert "Zoë" in canonical_request("b", "i", [{"role": "user", "content": "Zoë"}], SamplingParams())


def test_put_get_persist_across_reopen(tmp_path):
    path = tmp_path / "sub" / "llm.sqlite"
    c = LLMCache(path)
    assert c.get("k") is None
    _put(c, "k", "Steven Spielberg")
    c.close()
    c2 = LLMCache(path)
    hit = c2.get("k")
    assert hit is not None and hit.text == "Steven Spielberg"
    assert (hit.prompt_tokens, hit.completion_tokens, hit.seconds) == (10, 2, 0.1)
    assert len(c2) == 1
    stats = c2.stats()
    assert stats["models"][0]["calls"] == 1 and stats["models"][0]["prompt_tokens"] == 10
    row = sqlite3.connect(path).execute("SELECT request FROM calls").fetchone()[0]
    assert "Who directed Jaws?" in row  # the request is kept for inspection


def test_wal_mode_and_env_path(tmp_path, monkeypatch):
    c = LLMCache(tmp_path / "w.sqlite")
    mode = sqlite3.connect(tmp_path / "w.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    monkeypatch.setenv("KGRAG_LLM_CACHE", str(tmp_path / "env.sqlite"))
    assert LLMCache().path == tmp_path / "env.sqlite"
    c.close()


def _writer(path: str, tag: str, n: int, shared: int) -> None:
    cache = LLMCache(path)
    for i in range(n):
        _put(cache, f"{tag}-{i}", f"{tag}{i}")
        if i < shared:
            _put(cache, f"shared-{i}", f"{tag}{i}")


def test_two_processes_write_concurrently(tmp_path):
    path = str(tmp_path / "conc.sqlite")
    LLMCache(path).close()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, t, 400, 100)) for t in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    c = LLMCache(path)
    assert len(c) == 400 * 2 + 100
    assert c.get("a-399").text == "a399" and c.get("b-0").text == "b0"
    assert c.get("shared-3").text in ("a3", "b3")
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _endless_writer(path: str, conn) -> None:
    cache = LLMCache(path)
    i = 0
    while True:
        _put(cache, f"k{i}", "v" * 2000)
        conn.send(i)  # only after put() returned, i.e. committed
        i += 1


def test_sigkill_mid_writes_keeps_every_committed_row(tmp_path):
    path = str(tmp_path / "kill.sqlite")
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_endless_writer, args=(path, child))
    proc.start()
    committed = -1
    deadline = time.time() + 30
    while committed < 200 and time.time() < deadline:
        if parent.poll(1.0):
            committed = parent.recv()
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    while parent.poll(0):  # rows confirmed before the kill landed
        committed = parent.recv()
    assert proc.exitcode == -signal.SIGKILL
    assert committed >= 200
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    c = LLMCache(path)
    assert len(c) >= committed + 1
    assert all(c.get(f"k{i}") is not None for i in range(committed + 1))


def test_cache_is_picklable_and_reopens(tmp_path):
    import pickle

    c = LLMCache(tmp_path / "p.sqlite")
    _put(c, "k", "v")
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.get("k").text == "v"


def test_reopens_after_fork(tmp_path):
    c = LLMCache(tmp_path / "f.sqlite")
    _put(c, "parent", "p")
    ctx = mp.get_context("fork")

    def child():
        _put(c, "child", "c")  # same object, new process: must open its own connection

    p = ctx.Process(target=child)
    p.start()
    p.join(30)
    assert p.exitcode == 0
    assert c.get("child").text == "c"


@pytest.mark.parametrize("bad", ["", None])
def test_default_path_under_cache_dir(tmp_path, monkeypatch, bad):
    monkeypatch.delenv("KGRAG_LLM_CACHE", raising=False)
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path))
    c = LLMCache(bad)
    assert c.path == tmp_path / "llm_cache.sqlite"
