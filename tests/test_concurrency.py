"""Many questions in flight: the same results as one at a time, exact per-question costs, and
identical requests computed once however many threads ask for them."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from kgrag_lib.concurrency import as_they_finish, check_workers, parallel_map
from kgrag_lib.errors import ConfigError
from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from kgrag_lib.methods.base import Method
from kgrag_lib.records import Prediction, Question
from kgrag_lib.runner import PRED_FILE, run_method


def _msg(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


class SlowEcho:
    """A deterministic, thread-safe responder that takes a while and counts what reaches it."""

    def __init__(self, delay: float = 0.05) -> None:
        self.delay, self.calls, self.lock, self.peak, self.active = delay, 0, threading.Lock(), 0, 0

    def __call__(self, messages, params) -> str:
        with self.lock:
            self.calls += 1
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
        return "echo " + messages[-1]["content"][:20]


def _server_like(fn, cache=None) -> ScriptedLLM:
    llm = ScriptedLLM(fn, identity="scripted:slow-echo", cache=cache)
    llm.concurrent_requests = True   # like a server backend: requests may overlap
    return llm


def test_parallel_map_keeps_input_order_and_runs_inline_at_one():
    assert parallel_map(lambda x: x * x, range(10), 4) == [x * x for x in range(10)]
    seen = []
    assert parallel_map(lambda x: seen.append(threading.current_thread().name) or x, [1, 2], 1) == [1, 2]
    assert seen == [threading.current_thread().name] * 2


def test_first_error_propagates_and_nothing_queued_starts():
    started = []

    def fn(x):
        started.append(x)
        if x == 0:
            raise ValueError("boom")
        time.sleep(0.05)
        return x

    with pytest.raises(ValueError, match="boom"):
        list(as_they_finish(fn, list(range(50)), 2))
    assert len(started) < 50


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_workers_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match="integer >= 1"):
        check_workers(bad)


def test_identical_requests_in_flight_are_sent_once(tmp_path):
    echo = SlowEcho(delay=0.2)
    llm = _server_like(echo, cache=LLMCache(tmp_path / "c.sqlite"))
    meters = []

    def ask(_):
        with llm.meter() as m:
            llm.generate(_msg("the same question"))
        meters.append(m)

    parallel_map(ask, range(8), 8)
    assert echo.calls == 1
    assert llm.usage.calls == 1 and llm.usage.cache_hits == 7
    assert sorted(m.usage.calls for m in meters) == [0] * 7 + [1]
    assert all(len(m.keys) == 1 and m.keys == meters[0].keys for m in meters)
    # every caller is charged the tokens the request stands for, fresh or joined
    assert {m.usage.total_completion_tokens for m in meters} == {meters[0].usage.total_completion_tokens}


def test_identical_requests_in_flight_are_sent_once_without_a_cache():
    echo = SlowEcho(delay=1.0)   # long enough that all six callers join it on a loaded machine (0.2 s was not)
    llm = _server_like(echo)
    out = parallel_map(lambda _: llm.generate(_msg("q")), range(6), 6)
    assert echo.calls == 1 and len(set(out)) == 1


def test_a_failed_request_fails_every_caller_waiting_for_it_and_is_not_remembered():
    gate = threading.Event()
    n = {"calls": 0}

    def flaky(messages, params):
        n["calls"] += 1
        gate.wait(1)
        if n["calls"] == 1:
            raise RuntimeError("server fell over")
        return "fine"

    llm = _server_like(flaky)
    errors = []

    def ask(_):
        try:
            llm.generate(_msg("q"))
        except RuntimeError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join()
    assert errors == ["server fell over"] * 3
    assert llm.generate(_msg("q")) == "fine"   # the failure was not cached or left in flight


def test_in_process_backends_compute_one_request_at_a_time():
    echo = SlowEcho(delay=0.05)
    llm = ScriptedLLM(echo, identity="scripted:in-process")
    assert llm.concurrent_requests is False
    parallel_map(lambda i: llm.generate(_msg(f"q{i}")), range(6), 6)
    assert echo.peak == 1 and echo.calls == 6


def test_work_fanned_out_inside_a_question_is_counted_in_its_meter():
    llm = _server_like(SlowEcho(delay=0.01))
    with llm.meter() as outer:
        parallel_map(lambda i: llm.generate(_msg(f"part {i}")), range(5), 5)
    assert outer.usage.calls == 5 and len(outer.keys) == 5


class CallsPerQuestion(Method):
    """A method that asks question i for i+1 distinct completions, plus one shared request."""

    name = "calls-per-q"

    def __init__(self, llm) -> None:
        self.llm = llm

    def answer(self, q: Question) -> Prediction:
        k = int(q.qid[1:]) + 1
        texts = [self.llm.generate(_msg(f"{q.qid} step {j}")) for j in range(k)]
        self.llm.generate(_msg("shared instruction"))
        return Prediction(q.qid, q.question, texts[-1], list(q.answers), self.name)


def _questions(n: int) -> list[Question]:
    return [Question(f"q{i}", f"question {i}", [f"echo q{i} step {i}"], dataset="toy") for i in range(n)]


def test_per_question_costs_stay_exact_under_concurrency(tmp_path):
    llm = _server_like(SlowEcho(delay=0.02), cache=LLMCache(tmp_path / "c.sqlite"))
    questions = _questions(12)
    metrics = run_method(CallsPerQuestion(llm), questions, tmp_path / "run", {"x": 1}, llm=llm, progress=False,
                         concurrency=8)
    rows = {r["qid"]: r for r in map(json.loads, (tmp_path / "run" / PRED_FILE).read_text().splitlines())}
    assert len(rows) == 12
    for i in range(12):
        cost = rows[f"q{i}"]["cost"]
        assert cost["llm_requests"] == i + 2            # its own k calls + the shared one
        assert len(rows[f"q{i}"]["requests"]) == i + 2
    assert sum(r["cost"]["llm_calls"] for r in rows.values()) == llm.usage.calls == sum(range(1, 13)) + 1
    assert metrics["this_run"]["concurrency"] == 8 and metrics["this_run"]["llm_calls_sent"] == llm.usage.calls


def test_a_method_whose_state_grows_runs_one_question_at_a_time(tmp_path, capsys):
    echo = SlowEcho(delay=0.02)
    method = CallsPerQuestion(_server_like(echo))
    method.parallel_safe = False
    run_method(method, _questions(4), tmp_path / "run", {}, llm=method.llm, progress=False, concurrency=4)
    assert echo.peak == 1
    assert "1 question in flight" in capsys.readouterr().err


def _prompt_hash_llm(spec, cache_path=None, **kw):
    """A deterministic stand-in for a server: the answer is a word of the prompt chosen by its hash."""

    def respond(messages, params):
        text = " ".join(m["content"] for m in messages)
        words = [w for w in text.split() if w.isalpha()] or ["none"]
        return words[int(hashlib.sha256(text.encode()).hexdigest(), 16) % len(words)]

    llm = ScriptedLLM(respond, identity=f"scripted-hash:{spec}", cache=LLMCache(cache_path))
    llm.concurrent_requests = True
    llm.max_in_flight = kw.get("max_in_flight") or 1   # as a server's client: a step's calls fan out this wide
    return llm


@pytest.fixture
def hash_llm(tmp_path, monkeypatch):
    import kgrag_lib.llm as llm_mod
    import kgrag_lib.retrieval as retrieval_mod
    from fakes import BagOfWordsEmbedder

    monkeypatch.setattr(llm_mod, "load_llm", _prompt_hash_llm)
    monkeypatch.setattr(retrieval_mod, "load_embedder", lambda spec, **kw: BagOfWordsEmbedder())
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))


def _comparable(out):
    rows = sorted(map(json.loads, (out / PRED_FILE).read_text().splitlines()), key=lambda r: r["qid"])
    for r in rows:
        r["cost"] = {k: v for k, v in r["cost"].items() if "seconds" not in k}
    metrics = json.loads((out / "metrics.json").read_text())
    metrics.pop("this_run")
    metrics = json.loads(json.dumps(metrics).replace("seconds", "s"))
    for key in list(metrics.get("cost_per_question", {})):
        if key.endswith("s") and "second" in key:
            metrics["cost_per_question"].pop(key)
    return rows, {k: v for k, v in metrics.items() if k != "cost_per_question"}


# dataset family -> a cache folder of an earlier run of this test: the real MetaQA KB's KG and embeddings (about
# 15 s on 2 cores) are built once per session, not twice per case; the LLM cache is never carried over
_WARM_CACHES: dict[str, Path] = {}


@pytest.mark.parametrize("method,dataset,n", [
    ("llm-kg", "metaqa-1hop", 6), ("kg-rag", "metaqa-2hop", 6), ("vanilla-rag", "2wiki", 6),
    ("kg-infused", "2wiki", 6), ("self-ask", "2wiki", 4),
    ("kg-aug-only", "2wiki", 6),   # its note goes out beside the KG branch (issue 58 item 3)
])
def test_concurrency_1_and_8_give_the_same_predictions_and_scores(tmp_path, hash_llm, monkeypatch, method, dataset,
                                                                  n):
    from kgrag_lib.experiment import run_experiment

    import shutil

    outs = {}
    family = dataset.split("-")[0]   # metaqa-1hop and metaqa-2hop read one KB
    for c in (1, 8):
        outs[c] = tmp_path / f"c{c}"
        cache = tmp_path / f"cache{c}"
        if family in _WARM_CACHES:   # the KB, KG and embedding caches another run built; never its LLM cache
            shutil.copytree(_WARM_CACHES[family], cache, ignore=shutil.ignore_patterns("llm_cache.sqlite*"))
        monkeypatch.setenv("KGRAG_CACHE_DIR", str(cache))   # each from a cold LLM cache
        run_experiment(method, dataset, outs[c], progress=False, n=n, seed=3, concurrency=c)
        _WARM_CACHES.setdefault(family, cache)
    rows1, m1 = _comparable(outs[1])
    rows8, m8 = _comparable(outs[8])
    assert rows1 == rows8
    assert m1 == m8
    assert len(rows1) == n


def test_chunks_extracted_in_parallel_match_one_at_a_time_and_resume_after_a_failure(tmp_path):
    from kgrag_lib.kg.extraction import Chunk, extract_journaled

    chunks = [Chunk(f"p{i}", 0, f"T{i}", f"text {i}") for i in range(12)]
    active, peak, lock = [0], [0], threading.Lock()

    def extract(chunk):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        if chunk.pid == "p7" and not (tmp_path / "p7-ok").exists():
            raise RuntimeError("server fell over at p7")
        return {"chunk": chunk.cid, "n": len(chunk.text)}

    (tmp_path / "p7-ok").touch()
    serial, n1 = extract_journaled(chunks, tmp_path / "serial.jsonl", extract, show_progress=False, workers=1)
    (tmp_path / "p7-ok").unlink()
    with pytest.raises(RuntimeError, match="p7"):
        extract_journaled(chunks, tmp_path / "par.jsonl", extract, show_progress=False, workers=4)
    journaled = (tmp_path / "par.jsonl").read_text().splitlines()
    assert 0 < len(journaled) < 12 and peak[0] > 1
    (tmp_path / "p7-ok").touch()
    parallel, n2 = extract_journaled(chunks, tmp_path / "par.jsonl", extract, show_progress=False, workers=4)
    assert parallel == serial and n1 == 12 and n2 == 12 - len(journaled)


def test_study_overrides_make_one_checked_profile_for_every_notebook(tmp_path):
    from kgrag_lib.studies import load_profile
    from kgrag_lib.notebooks import effective_profile

    spec = "openai:http://localhost:8000/v1#Qwen/Qwen2.5-7B-Instruct"
    path = effective_profile("cpu-smoke", {"concurrency": 16, "model": spec}, tmp_path / "profile.yaml")
    prof = load_profile(path)
    assert prof["name"] == "cpu-smoke" and prof["run"]["concurrency"] == 16 and prof["run"]["model"] == spec
    assert "models" not in prof   # the one model is not overridden per family
    from kgrag_lib.experiment import resolve_run

    r = resolve_run("kg-rag", "metaqa-2hop", tmp_path / "r", prof)
    assert r.run.model == spec and r.run.concurrency == 16
    with pytest.raises(ConfigError, match="concurrency"):
        effective_profile("cpu-smoke", {"concurrency": "many"}, tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match="carries a token.*KGRAG_OPENAI_API_KEY"):   # it would be written there
        effective_profile("cpu-smoke", {"model": "openai:http://h:8000/v1?api_key=SECRET#m"}, tmp_path / "tok.yaml")
    assert not (tmp_path / "tok.yaml").exists()


def test_study_refuses_a_bad_concurrency_before_running(capsys):
    from kgrag_lib.cli import main

    assert main(["study", "--profile", "cpu-smoke", "--only", "00", "--concurrency", "0"]) == 2
    assert "--concurrency" in capsys.readouterr().err


def _run_in_child(out: str, cache: str, n: int) -> None:
    llm = _server_like(SlowEcho(delay=0.1), cache=LLMCache(cache))
    run_method(CallsPerQuestion(llm), _questions(n), out, {"drill": 1}, llm=llm, progress=False, concurrency=4)


def test_kill_drill_with_questions_in_flight(tmp_path):
    """SIGKILL a run with 4 questions in flight, resume it: every question once, complete lines,
    and no request computed twice (each call of the resume adds a new cache row)."""
    import multiprocessing as mp
    import os
    import signal
    import sqlite3

    out, cache, n = tmp_path / "run", tmp_path / "llm.sqlite", 16
    proc = mp.get_context("fork").Process(target=_run_in_child, args=(str(out), str(cache), n))
    proc.start()
    pred = out / PRED_FILE
    deadline = time.time() + 60
    while time.time() < deadline and (not pred.exists() or len(pred.read_text().splitlines()) < 4):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    finished = [json.loads(line)["qid"] for line in pred.read_text().splitlines() if line.endswith("}")]
    assert 4 <= len(finished) < n

    def rows() -> int:
        with sqlite3.connect(cache) as conn:
            return conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    before = rows()
    llm = _server_like(SlowEcho(delay=0.0), cache=LLMCache(cache))
    metrics = run_method(CallsPerQuestion(llm), _questions(n), out, {"drill": 1}, llm=llm, progress=False,
                         concurrency=4)
    lines = [json.loads(line) for line in pred.read_text().splitlines()]
    assert sorted(r["qid"] for r in lines) == sorted(q.qid for q in _questions(n))
    assert metrics["this_run"]["reused"] == len(finished)
    assert llm.usage.calls == rows() - before            # nothing already paid for was sent again
    assert rows() == sum(range(1, n + 1)) + 1             # every distinct request exactly once



def test_the_manifest_says_what_served_the_run(tmp_path):
    llm = _server_like(SlowEcho(delay=0.0))
    llm.flavor, llm.identity_source = "vllm", "vLLM /v1/models root"
    run_method(CallsPerQuestion(llm), _questions(2), tmp_path / "run", {"x": 1}, llm=llm, progress=False)
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["llm"] == {"backend": "scripted", "identity": "scripted:slow-echo", "flavor": "vllm",
                          "identity_source": "vLLM /v1/models root"}
    assert "llm" not in man["config"]   # not part of the run's identity



def test_run_concurrency_sets_how_many_extraction_requests_are_in_flight(tmp_path, monkeypatch, capsys):
    """Issue 42: one name per setting. `kgrag run --concurrency 16 --model openai:...` builds SA-RAG's text KG
    with 16 chunk requests in flight (before, the backend's own pool of 8 capped it whatever the run said);
    `--max-in-flight` still says otherwise when given."""
    import re

    import kgrag_lib.retrieval as retrieval_mod
    from test_llm_openai import FakeServer

    from kgrag_lib.cli import main as kgrag
    from fakes import BagOfWordsEmbedder

    lock = threading.Condition()
    state = {"active": 0, "peak": 0, "extraction": 0, "want": 0}

    def reply(body):
        schema = json.dumps(body.get("response_format") or {})
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
            state["extraction"] += '"entities"' in schema or '"relations"' in schema
            lock.notify_all()
            # hold each request until a full wave is in flight (or 1.5 s: a wave's tail), so the peak reads the
            # client's limit however busy the machine is; a fixed sleep lost the race under load
            lock.wait_for(lambda: state["active"] >= state["want"], timeout=1.5)
        time.sleep(0.05)
        with lock:
            state["active"] -= 1
        if '"entities"' in schema:
            text = body["messages"][-1]["content"]
            names = list(dict.fromkeys(re.findall(r"\b[A-Z][a-z]{3,}\b", text)))[:3]
            return json.dumps({"entities": [{"name": n, "type": "PERSON", "aliases": [], "description": "d"}
                                            for n in names]})
        if '"relations"' in schema:
            return json.dumps({"relations": []})
        return "Paris"

    monkeypatch.setattr(retrieval_mod, "load_embedder", lambda spec, **kw: BagOfWordsEmbedder())
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    server = FakeServer()
    server.reply = reply
    try:
        for flags, cache, want in ((["--concurrency", "16"], "a", 16), (["--concurrency", "16", "--max-in-flight", "3"], "b", 3)):
            state.update(peak=0, extraction=0, want=want)
            rc = kgrag(["run", "--method", "sa-rag", "--dataset", "2wiki", "--split", "dev200", "--n", "2",
                        "--set", "kg=text:2wiki:dev200:n=3:seed={seed}", "--no-progress", *flags,
                        "--model", f"openai:{server.url}#qwen-test", "--cache-dir", str(tmp_path / cache),
                        "--out", str(tmp_path / f"run-{cache}")])
            err = capsys.readouterr().err
            assert rc == 0, err[-2000:]
            assert state["extraction"] >= 2 * want and state["peak"] == want, (flags, state)
    finally:
        server.httpd.shutdown()


def test_a_method_config_is_typed_once_and_reaches_the_factory_typed(tmp_path, offline_parts, metaqa_root, monkeypatch):
    """Issue 42: `resolve_run` checks the method settings into their dataclass; the factory gets that
    object (before, it got the dict back and typed it again, and the check's result was thrown away)."""
    import dataclasses

    from kgrag_lib import config as config_mod
    from kgrag_lib.experiment import resolve_run, run_experiment

    r = resolve_run("kg-rag", "metaqa-1hop", tmp_path / "r", top_k=7)
    assert type(r.method_config) is r.spec.config and r.method_config.top_k == 7
    built = []
    real = config_mod.make_config

    def counting(cls, *layers, **kw):
        out = real(cls, *layers, **kw)
        if cls is r.spec.config and not (len(layers) == 1 and isinstance(layers[0], cls)):
            import inspect

            callers = {f.function for f in inspect.stack()}
            if "check_profile_methods" not in callers:   # (that is the profile file's own check of its sections)
                built.append(cls.__name__)
        return out

    monkeypatch.setattr(config_mod, "make_config", counting)
    for module in ("kgrag_lib.experiment", "kgrag_lib.methods.base", "kgrag_lib.methods.metaqa.pipeline"):
        import importlib

        mod = importlib.import_module(module)
        if hasattr(mod, "make_config"):
            monkeypatch.setattr(mod, "make_config", counting)
    run_experiment("kg-rag", "metaqa-1hop", tmp_path / "run", progress=False, n=1, top_k=7)
    assert built == ["KGRAGConfig"], built   # once, in resolve_run's check; the factory builds none
    assert dataclasses.replace(r.method_config) == r.method_config
