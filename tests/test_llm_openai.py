"""The OpenAI-compatible client's behaviour around the wire: retries, errors, concurrency, caching.

The HTTP imitation below is for fault injection (failures on demand, recorded bodies); the real
servers are exercised in test_llm_server.py and the per-flavour bodies in test_llm_flavors.py."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.llm import PromptTooLongError, load_llm
from kgrag_lib.llm.backends.openai_compat import OpenAICompatLLM, normalize_base_url

Q = [{"role": "user", "content": "Capital of France?"}]


class FakeServer:
    """Records request bodies; answers `reply(body)` with usage counts; can fail on demand."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.fail_next: list[tuple[int, str]] = []
        self.models = [{"id": "qwen-test", "object": "model", "owned_by": "vllm", "root": "/models/Qwen2.5-7B-Instruct"}]
        self.docs: dict[str, dict] = {"/version": {"version": "0.11.0"}}
        self.reply = lambda body: "Paris\nMore text"
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": outer.models})
                elif self.path in outer.docs:
                    self._send(200, outer.docs[self.path])
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                if outer.fail_next:
                    code, msg, *headers = outer.fail_next.pop(0)
                    return self._send(code, {"error": {"message": msg}}, *headers)
                text = outer.reply(body)
                if self.path == "/api/chat":  # Ollama's native chat
                    return self._send(200, {"message": {"role": "assistant", "content": text}, "done": True,
                                            "done_reason": "stop", "prompt_eval_count": 9, "eval_count": 2})
                self._send(200, {
                    "id": "x", "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": len(text.split()), "total_tokens": 0},
                })

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.httpd.shutdown()


def test_body_carries_every_sampling_knob_vllm_style(server):
    llm = load_llm(f"openai:{server.url}#qwen-test", cache=False)
    out = llm.generate(Q, max_tokens=12, temperature=0.3, top_p=0.9, top_k=20, min_p=0.05,
                       repeat_penalty=1.1, seed=7, stop=["\n"])
    assert out == "Paris"  # stop string stripped even though the server did not
    b = server.bodies[-1]
    assert b["model"] == "qwen-test" and b["messages"] == Q
    assert (b["max_tokens"], b["temperature"], b["top_p"], b["seed"], b["stop"]) == (12, 0.3, 0.9, 7, ["\n"])
    assert (b["top_k"], b["min_p"], b["repetition_penalty"]) == (20, 0.05, 1.1)
    assert llm.usage.prompt_tokens == 11 and llm.usage.calls == 1


def test_defaults_turn_filters_off(server):
    llm = load_llm(f"openai:{server.url}#qwen-test", cache=False)
    llm.generate(Q)
    b = server.bodies[-1]
    assert b["temperature"] == 0.0 and b["top_k"] == -1 and "stop" not in b and b["seed"] == 42


def test_llamacpp_server_spelling_and_ollama_options(server):
    with pytest.warns(UserWarning, match="looks like vLLM.*flavor='llama-server' was given"):
        llm = load_llm(f"openai:{server.url}#qwen-test?flavor=llamacpp", cache=False)
    assert llm.flavor == "llama-server" and llm.flavor_source == "given"
    llm.generate(Q, repeat_penalty=1.2)
    assert server.bodies[-1]["repeat_penalty"] == 1.2 and "repetition_penalty" not in server.bodies[-1]
    assert server.bodies[-1]["top_k"] == 0  # llama.cpp's "off"; -1 is rejected by llama-cpp-python
    oll = load_llm(f"openai:{server.url}#qwen-test", flavor="ollama", cache=False)
    assert oll.generate(Q, top_k=40) == "Paris\nMore text"
    assert server.bodies[-1]["options"]["top_k"] == 40 and server.bodies[-1]["options"]["repeat_penalty"] == 1.0
    assert oll.usage.prompt_tokens == 9 and oll.usage.completion_tokens == 2


def test_identity_is_the_weights_the_server_reports(server):
    llm = load_llm(f"openai:{server.url}#qwen-test", cache=False)
    assert llm.flavor == "vllm" and llm.flavor_source.startswith("detected: /v1/models owned_by='vllm'")
    assert llm.identity == "openai-compat:vllm|weights=root=/models/Qwen2.5-7B-Instruct"
    assert llm.identity_source == "/v1/models root" and llm.served["root"] == "/models/Qwen2.5-7B-Instruct"
    # another model under the same alias is another identity: no stale replay
    server.models[0]["root"] = "/models/Other-7B"
    assert load_llm(f"openai:{server.url}#qwen-test", cache=False).identity != llm.identity


def test_a_vllm_serving_a_hub_id_is_said_to_be_keyed_without_its_commit(server):
    """vLLM's root is the model as it was started: for a hub id no commit, so a hub update would replay
    old answers; the user is told once (a local folder or vllm-serve: is keyed exactly)."""
    import warnings

    server.models[0]["root"] = "Qwen/Qwen2.5-7B-Instruct"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        llm = load_llm(f"openai:{server.url}#qwen-test", cache=False)
    assert llm.identity == "openai-compat:vllm|weights=root=Qwen/Qwen2.5-7B-Instruct"
    assert any("does not say at which commit" in str(w.message) for w in seen)


def test_unreported_weights_say_so_once_and_keep_secrets_out(server):
    server.models[0] = {"id": "qwen-test", "object": "model", "owned_by": "someone"}
    url = server.url.replace("http://", "http://user:s3cret@")
    with pytest.warns(UserWarning, match="does not say which weights"):
        llm = load_llm(f"openai:{url}#qwen-test", cache=False, api_key="sk-secret-key")
    assert llm.flavor == "openai" and llm.identity.endswith("#qwen-test|weights=unreported")
    assert "s3cret" not in llm.identity and "user" not in llm.identity and "sk-secret" not in llm.identity
    assert llm.identity_source == "the server reports nothing about the weights"
    import warnings as w

    with w.catch_warnings():
        w.simplefilter("error")
        load_llm(f"openai:{url}#qwen-test", cache=False)  # warned once only


def test_model_not_served_is_reported(server):
    with pytest.raises(BackendUnavailableError, match="does not serve 'other'.*qwen-test"):
        load_llm(f"openai:{server.url}#other", cache=False)


def test_cache_avoids_second_request(server, tmp_path):
    llm = load_llm(f"openai:{server.url}#qwen-test", cache_path=tmp_path / "c.sqlite")
    assert llm.generate(Q) == "Paris\nMore text"
    assert llm.generate(Q) == "Paris\nMore text"
    assert len(server.bodies) == 1 and llm.usage.cache_hits == 1 and llm.usage.cached_prompt_tokens == 11


def test_batch_is_concurrent_and_ordered(server):
    server.reply = lambda body: "echo " + body["messages"][-1]["content"]
    llm = load_llm(f"openai:{server.url}#qwen-test", cache=False, max_in_flight=4)
    batch = [[{"role": "user", "content": f"q{i}"}] for i in range(9)]
    assert llm.generate_batch(batch) == [f"echo q{i}" for i in range(9)]
    assert llm.usage.calls == 9


def test_retries_server_errors_then_succeeds(server):
    server.fail_next = [(503, "warming up"), (500, "oops")]
    llm = OpenAICompatLLM(server.url, "qwen-test", max_retries=2, retry_delay=0.01)
    assert llm.generate(Q) == "Paris\nMore text"
    assert len(server.bodies) == 3


def test_gives_up_after_retries(server):
    server.fail_next = [(503, "down")] * 3
    llm = OpenAICompatLLM(server.url, "qwen-test", max_retries=1, retry_delay=0.01)
    with pytest.raises(BackendUnavailableError, match="HTTP 503"):
        llm.generate(Q)


def test_a_server_failing_forever_is_given_up_on_within_a_bounded_wait_saying_each_retry(server, monkeypatch, capsys):
    """Issue 40: HTTP 503 forever with many retries doubled its wait without a cap and printed
    nothing (20 retries would wait about 6 days). Each wait is capped, their sum bounded, each
    retry said on stderr."""
    from kgrag_lib.llm.backends import openai_compat

    monkeypatch.setattr(openai_compat, "RETRY_WAIT_CAP", 0.05)
    monkeypatch.setattr(openai_compat, "RETRY_TOTAL_CAP", 0.3)
    server.fail_next = [(503, "down")] * 100
    llm = OpenAICompatLLM(server.url, "qwen-test", max_retries=50, retry_delay=0.04)
    t = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=r"HTTP 503.*gave up after \d+ tries and 0 s of waiting"):
        llm.generate(Q)
    assert time.monotonic() - t < 5.0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "retry" in ln]
    assert len(lines) >= 5 and all("HTTP 503" in ln and " of 50 in 0." in ln for ln in lines)


def test_a_429_waits_what_its_retry_after_asks(server, capsys):
    server.fail_next = [(429, "slow down", {"Retry-After": "0.2"})]
    llm = OpenAICompatLLM(server.url, "qwen-test", max_retries=1, retry_delay=0.01)
    assert llm.generate(Q).startswith("Paris")
    assert "retry 1 of 1 in 0.2 s (its Retry-After)" in capsys.readouterr().err


def test_context_overflow_and_bad_request(server):
    llm = OpenAICompatLLM(server.url, "qwen-test", retry_delay=0.01)
    server.fail_next = [(400, "This model's maximum context length is 4096 tokens")]
    with pytest.raises(PromptTooLongError):
        llm.generate(Q)
    server.fail_next = [(400, "unknown field")]
    with pytest.raises(ConfigError, match="HTTP 400"):
        llm.generate([{"role": "user", "content": "other"}])


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_server_fails_loudly(monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("KGRAG_VLLM_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(BackendUnavailableError, match="cannot reach.*vllm serve"):
        load_llm("vllm:Qwen/Qwen2.5-7B-Instruct", cache=False)


def test_vllm_spec_uses_env_url(server, monkeypatch):
    monkeypatch.setenv("KGRAG_VLLM_URL", server.url.removesuffix("/v1"))
    llm = load_llm("vllm:qwen-test", cache=False)
    assert llm.base_url == server.url and llm.flavor == "vllm"


def test_normalize_base_url():
    assert normalize_base_url("http://h:8000") == "http://h:8000/v1"
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000/v1"
    with pytest.raises(ConfigError, match="base_url"):
        normalize_base_url("localhost:8000")


def test_no_probe_needs_a_flavor_and_identity_says_unreported():
    with pytest.raises(ConfigError, match="give the server flavour"):
        OpenAICompatLLM("http://127.0.0.1:9/v1", "m", probe=False)
    llm = OpenAICompatLLM("http://127.0.0.1:9/v1", "m", probe=False, flavor="vllm")
    assert llm.identity == "openai-compat:vllm|http://127.0.0.1:9/v1#m|weights=unreported"
    assert llm.identity_source == "not probed (probe=False)"


def test_spec_query_and_flavor_errors(server):
    with pytest.raises(ConfigError, match="unknown option.*flavor=<auto"):
        load_llm(f"openai:{server.url}#qwen-test?flavour=vllm", cache=False)
    with pytest.raises(ConfigError, match="flavor: expected 'auto' or one of"):
        load_llm(f"openai:{server.url}#qwen-test?flavor=tgi", cache=False)
    with pytest.raises(ConfigError, match="give it once"):
        load_llm(f"openai:{server.url}#qwen-test?flavor=vllm", flavor="sglang", cache=False)


def test_refused_before_anything_is_sent(server):
    llm = load_llm(f"openai:{server.url}#qwen-test?flavor=openai", cache=False)
    with pytest.raises(ConfigError, match="repeat_penalty=1.3: the 'openai' server flavour"):
        llm.generate(Q, repeat_penalty=1.3)
    with pytest.raises(ConfigError, match="min_p=0.1"):
        llm.check_params(llm.default_params.replace(min_p=0.1))
    from kgrag_lib.llm import SamplingParams

    with pytest.raises(ConfigError, match="top_k=5"):  # a default the server cannot honour: refused at construction
        load_llm(f"openai:{server.url}#qwen-test?flavor=openai", cache=False, default_params=SamplingParams(top_k=5))
    assert server.bodies == []


def test_stalled_server_fails_within_the_timeout():
    import time

    stall = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            stall.wait(10)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        llm = OpenAICompatLLM(f"http://127.0.0.1:{httpd.server_address[1]}/v1", "m", probe=False, flavor="vllm",
                              timeout=0.5, max_retries=3)
        t = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="no answer to POST /chat/completions within 0.5 s; the server is stalled"):
            llm.generate(Q)
        assert time.monotonic() - t < 2.0  # a time-out is not retried
    finally:
        stall.set()
        httpd.shutdown()


def test_html_answer_is_an_error_not_an_answer():
    class Html(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            data = b"<html><body>proxy login</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        llm = OpenAICompatLLM(f"http://127.0.0.1:{httpd.server_address[1]}/v1", "m", probe=False, flavor="vllm")
        with pytest.raises(BackendUnavailableError, match="not an OpenAI-compatible server|unreadable"):
            llm.generate(Q)
    finally:
        httpd.shutdown()


def test_json_schema_goes_as_response_format_to_every_flavor(server):
    schema = '{"type":"object","properties":{"answer":{"type":"string"}}}'
    server.reply = lambda body: '{"answer": "Paris"}'
    for flavor in ("vllm", "sglang", "llama-server", "openai"):
        llm = load_llm(f"openai:{server.url}#qwen-test", flavor=flavor, cache=False)
        assert llm.generate(Q, json_schema=schema) == '{"answer": "Paris"}'
        assert server.bodies[-1]["response_format"] == {
            "type": "json_schema", "json_schema": {"name": "output", "schema": json.loads(schema)}}
    llm.generate(Q)
    assert "response_format" not in server.bodies[-1]


def test_grammar_goes_where_each_server_reads_it_and_is_refused_elsewhere(server):
    gbnf = 'root ::= "Paris" | "Rome"'
    vllm = load_llm(f"openai:{server.url}#qwen-test", flavor="vllm", cache=False)
    vllm.generate(Q, grammar=gbnf)
    assert server.bodies[-1]["structured_outputs"] == {"grammar": gbnf} and "grammar" not in server.bodies[-1]
    lcpp = load_llm(f"openai:{server.url}#qwen-test", flavor="llamacpp", cache=False)
    lcpp.generate(Q, grammar=gbnf)
    assert server.bodies[-1]["grammar"] == gbnf and "structured_outputs" not in server.bodies[-1]
    lcpp.generate(Q)
    assert "grammar" not in server.bodies[-1]
    sent = len(server.bodies)
    for flavor in ("ollama", "openai"):
        llm = load_llm(f"openai:{server.url}#qwen-test", flavor=flavor, cache=False)
        with pytest.raises(ConfigError, match=f"'{flavor}' server flavour takes no GBNF grammar"):
            llm.generate(Q, grammar=gbnf)
    assert len(server.bodies) == sent  # refused before anything was sent


def test_managed_specs_say_what_is_missing(monkeypatch, tmp_path):
    import shutil

    from kgrag_lib.llm import managed_server

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv(managed_server.LLAMA_SERVER_ENV, raising=False)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 16)
    with pytest.raises(BackendUnavailableError, match="llama-server.*not on PATH.*llamacpp-server:<gguf>"):
        load_llm(f"llama-server:{gguf}", cache=False)
    import importlib.util

    from kgrag_lib.llm import vllm_env

    if importlib.util.find_spec("vllm") is None:   # no server environment anywhere: say how to build one
        monkeypatch.setattr(vllm_env, "CHECKOUT", tmp_path)
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv(vllm_env.VLLM_PYTHON_ENV, raising=False)
        with pytest.raises(BackendUnavailableError, match="vLLM is not installed here.*install_vllm.sh.*vllm:<model>"):
            load_llm("vllm-serve:Qwen/Qwen2.5-7B-Instruct", cache=False)
    with pytest.raises(ConfigError, match="preset 'qwen2.5-7b-instruct' is not a GGUF model"):
        load_llm("llamacpp-server:qwen2.5-7b-instruct", cache=False)


@contextlib.contextmanager
def _serving(handler):
    """A fault-injection handler served on loopback for one test; yields its /v1 URL."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_body_that_cannot_be_decoded_is_not_called_unreachable():
    """Issue 40: a gzip decoding error was reported as "cannot reach the server"."""

    class BadGzip(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(b"not gzip at!")

    with _serving(BadGzip) as url, pytest.raises(BackendUnavailableError, match="cannot be decoded") as exc:
        OpenAICompatLLM(url, "m", max_retries=0)
    assert "cannot reach" not in str(exc.value)


def test_the_models_probe_says_the_limit_it_waited():
    """Issue 40: "no answer to GET /models within 60 s" came after 15 s."""

    class Silent(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            time.sleep(2)

    with _serving(Silent) as url, pytest.raises(BackendUnavailableError, match=r"GET /models within 1 s"):
        OpenAICompatLLM(url, "m", timeout=1.0, max_retries=0)


def test_a_server_that_trickles_is_cut_at_the_request_timeout():
    """Issue 40: a server sending one byte every 2 s was never cut by --request-timeout 5 (httpx's
    timeouts are per read): the whole request now has the deadline."""

    stop = threading.Event()

    class Trickle(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            while not stop.is_set():
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.3)

    t = time.monotonic()
    try:
        with _serving(Trickle) as url, pytest.raises(BackendUnavailableError, match=r"did not finish GET /models within 1 s"):
            OpenAICompatLLM(url, "m", timeout=1.0, max_retries=0)
        assert time.monotonic() - t < 5
    finally:
        stop.set()
