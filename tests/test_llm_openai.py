"""The OpenAI-compatible backend against a local HTTP server speaking the same protocol."""

from __future__ import annotations

import json
import socket
import threading
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
        self.models = [{"id": "qwen-test", "object": "model", "root": "/models/Qwen2.5-7B-Instruct"}]
        self.reply = lambda body: "Paris\nMore text"
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": outer.models})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                if outer.fail_next:
                    code, msg = outer.fail_next.pop(0)
                    return self._send(code, {"error": {"message": msg}})
                text = outer.reply(body)
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


def test_llamacpp_server_spelling_and_ollama_refusal(server):
    llm = load_llm(f"openai:{server.url}#qwen-test", flavor="llamacpp", cache=False)
    llm.generate(Q, repeat_penalty=1.2)
    assert server.bodies[-1]["repeat_penalty"] == 1.2 and "repetition_penalty" not in server.bodies[-1]
    oll = load_llm(f"openai:{server.url}#qwen-test", flavor="ollama", cache=False)
    oll.generate(Q)
    assert "top_k" not in server.bodies[-1]
    with pytest.raises(ConfigError, match="top_k=40.*no such parameter"):
        oll.generate(Q, top_k=40)


def test_identity_includes_what_the_server_reports(server):
    llm = load_llm(f"openai:{server.url}#qwen-test", cache=False)
    assert llm.identity == f"openai:{server.url}#qwen-test@/models/Qwen2.5-7B-Instruct"
    assert llm.served["root"] == "/models/Qwen2.5-7B-Instruct"


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
    llm = load_llm(f"openai:{server.url}#qwen-test", cache=False, concurrency=4)
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


def test_no_probe_identity_is_url_and_model():
    llm = OpenAICompatLLM("http://127.0.0.1:9/v1", "m", probe=False)
    assert llm.identity == "openai:http://127.0.0.1:9/v1#m"


def test_json_schema_goes_as_response_format_to_every_flavor(server):
    schema = '{"type":"object","properties":{"answer":{"type":"string"}}}'
    server.reply = lambda body: '{"answer": "Paris"}'
    for flavor in ("vllm", "llamacpp", "ollama", "openai"):
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
