"""The OpenAI-compatible client against real servers: llama-cpp-python's server on the embedded
0.5B model (`lcp_server`, started once per test session in conftest.py: these tests only send it
requests), and the managed `llamacpp-server:` spec (started by the tests that check its start and stop).

Run under the model lock: `flock /tmp/kgrag-model.lock .venv/bin/python -m pytest -m model tests/test_llm_server.py`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from kgrag_lib.errors import BackendUnavailableError
from kgrag_lib.llm import load_llm

pytestmark = [pytest.mark.model, pytest.mark.filterwarnings("ignore:.*does not say which weights:UserWarning")]


def Q(text):
    return [{"role": "user", "content": text}]


def _server_modules_or_skip():
    pytest.importorskip("llama_cpp")
    for mod in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"):
        pytest.importorskip(mod)


def _embedded_or_skip():
    from kgrag_lib.llm.presets import PRESETS, resolve_gguf

    try:
        return resolve_gguf(PRESETS["qwen2.5-coder-0.5b-q4"])
    except Exception as e:  # the model packages are an optional extra
        pytest.skip(f"embedded model not available: {e}")


def _wait_listed(url, alias, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "llama_cpp.server exited while starting"
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as r:
                if alias in [m["id"] for m in json.loads(r.read())["data"]]:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise TimeoutError("llama_cpp.server did not come up")


@pytest.fixture(scope="module")
def llm(lcp_server):
    with load_llm(f"openai:{lcp_server}#qwen", cache=False) as m:
        yield m


def test_flavour_detected_and_identity_says_weights_unreported(llm, lcp_server):
    assert llm.flavor == "llama-cpp-python"
    assert "owned_by='me'" in llm.flavor_source and "llama.cpp Python API" in llm.flavor_source
    # this server lists only the alias: the identity must say so, with the URL and alias
    assert llm.identity == f"openai-compat:llama-cpp-python|{lcp_server}#qwen|weights=unreported"
    assert "alias" in llm.identity_source and llm.max_in_flight == 1


def test_greedy_is_deterministic_and_right(llm):
    a = llm.generate(Q("What is the capital of France? Answer in one word."), max_tokens=8)
    assert "Paris" in a
    assert llm.generate(Q("What is the capital of France? Answer in one word."), max_tokens=8) == a
    assert llm.usage.calls == 2 and llm.usage.prompt_tokens > 0 and llm.usage.completion_tokens > 0


def test_sampling_follows_the_seed(llm):
    q = Q("Name a fruit.")
    outs = [llm.generate(q, max_tokens=8, temperature=1.0, seed=s) for s in (1, 1, 2, 3, 4)]
    assert outs[0] == outs[1]            # same seed, same draw
    assert len(set(outs[1:])) >= 2       # other seeds, other draws: sampling really happens


def test_repeat_penalty_reaches_the_sampler(llm):
    q = Q("Write the word 'dog' twelve times, separated by spaces.")
    plain = llm.generate(q, max_tokens=40)
    penalised = llm.generate(q, max_tokens=40, repeat_penalty=1.5)
    assert plain.count("dog") > penalised.count("dog") >= 1, (plain, penalised)
    # the neutral value is sent explicitly (the server's own default is 1.1)
    assert llm.request_body(q, llm.default_params)["repeat_penalty"] == 1.0


def test_grammar_constrained_extraction_follows_the_grammar(llm):
    gbnf = ('root ::= triple ("\\n" triple)?\n'
            'triple ::= "(" part "; " part "; " part ")"\n'
            'part ::= [A-Za-z]+ (" " [A-Za-z]+)?')
    out = llm.generate(Q("Extract (subject; relation; object) triples from: Paris is the capital of France. "
                         "Berlin is the capital of Germany."), max_tokens=60, grammar=gbnf)
    part = r"[A-Za-z]+( [A-Za-z]+)?"
    triple = rf"\({part}; {part}; {part}\)"
    assert re.fullmatch(rf"{triple}(\n{triple})?", out), out
    free = llm.generate(Q("Extract (subject; relation; object) triples from: Paris is the capital of France. "
                          "Berlin is the capital of Germany."), max_tokens=60)
    assert free != out  # the grammar changed the decoding


def test_json_schema_is_enforced(llm):
    schema = '{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}'
    out = llm.generate(Q("Capital of France? Reply in JSON."), max_tokens=30, json_schema=schema)
    assert isinstance(json.loads(out)["answer"], str)


def test_logprobs_and_raw_completions(llm, lcp_server):
    g = llm.generate_logprobs(Q("Capital of France?"), max_tokens=4, logprobs=2)
    assert g.tokens and all(len(t.top) == 2 and t.logprob <= 0 for t in g.tokens)
    assert "".join(t.token for t in g.tokens) == g.text
    raw = load_llm(f"openai:{lcp_server}#qwen", cache=False, chat=False)
    assert "Paris" in raw.generate(Q("The capital of France is"), max_tokens=5)
    assert raw.identity.endswith(";raw-prompt")


def test_cache_key_follows_the_weights_for_a_managed_server(tmp_path):
    """`llamacpp-server:<preset>` starts the server, its identity is the GGUF's hash and size, the
    log goes where asked, and close() stops the process."""
    _server_modules_or_skip()
    path, sha = _embedded_or_skip()
    llm = load_llm("llamacpp-server:qwen2.5-coder-0.5b-q4", cache_path=tmp_path / "c.sqlite", log_dir=tmp_path)
    server = llm.managed
    try:
        assert llm.flavor == "llama-cpp-python" and llm.identity_source == "given by the caller"
        assert llm.identity == f"openai-compat:llama-cpp-python|weights=gguf-sha256={sha};size={path.stat().st_size}"
        assert server.running and server.base_url.startswith("http://127.0.0.1:")
        assert "Paris" in llm.generate(Q("What is the capital of France? Answer in one word."), max_tokens=8)
        assert server.log_path.parent == tmp_path and server.log_path.stat().st_size > 0
    finally:
        llm.close()
    assert not server.running
    with pytest.raises(OSError):
        urllib.request.urlopen(server.base_url + "/models", timeout=2)


def test_managed_server_dies_with_a_terminated_parent(tmp_path):
    """SIGTERM to the process that started the server stops the server too."""
    _server_modules_or_skip()
    _embedded_or_skip()
    script = ("import sys, time\nfrom kgrag_lib.llm import load_llm\n"
              f"llm = load_llm('llamacpp-server:qwen2.5-coder-0.5b-q4', cache=False, log_dir={str(tmp_path)!r})\n"
              "print(llm.managed.proc.pid, flush=True)\ntime.sleep(120)\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    parent = subprocess.Popen([sys.executable, "-W", "ignore", "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the managed server outlived its parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_managed_server_that_cannot_start_says_why(tmp_path):
    _server_modules_or_skip()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)  # right magic, no model inside
    with pytest.raises(BackendUnavailableError, match=r"exited with code 1 while starting: ValueError: Failed to load model.*; its log"):
        load_llm(f"llamacpp-server:{bad}", cache=False, log_dir=tmp_path)


def test_a_run_with_questions_in_flight_on_the_server_matches_the_in_process_run(lcp_server, tmp_path):
    """The same MetaQA run (LLM only, greedy) in-process on llama.cpp and through the real server
    with 4 questions in flight: the same predictions and scores."""
    from kgrag_lib.experiment import make_context, resolve_run, run_experiment

    def run(spec, out, concurrency):
        r = resolve_run("llm", "metaqa-1hop", out, "cpu-smoke", model=spec, n=4, seed=0)
        ctx = make_context(r.run)
        ctx.llm = load_llm(spec, cache_path=tmp_path / f"{out.name}.sqlite")
        metrics = run_experiment("llm", "metaqa-1hop", out, ctx=ctx, progress=False, model=spec, n=4, seed=0,
                                 concurrency=concurrency)
        rows = sorted((json.loads(l) for l in (out / "predictions.jsonl").read_text().splitlines()),
                      key=lambda r: r["qid"])
        return metrics, rows

    local, local_rows = run("qwen2.5-coder-0.5b-q4", tmp_path / "in-process", 1)
    served, served_rows = run(f"openai:{lcp_server}#qwen", tmp_path / "served", 4)
    assert served["this_run"]["concurrency"] == 4 and served["this_run"]["llm_calls_sent"] == 4
    assert [r["prediction"] for r in served_rows] == [r["prediction"] for r in local_rows]
    assert {k: served[k] for k in ("em", "f1", "hit1")} == {k: local[k] for k in ("em", "f1", "hit1")}
