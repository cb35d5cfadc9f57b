"""The shared LLM layer: sampling parameters, usage counters, caching and batching logic."""

from __future__ import annotations

import json

import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.llm import LLMCache, SamplingParams, ScriptedLLM, Usage
from kgrag_lib.llm.base import fold_system, truncate_at_stop

Q = [{"role": "user", "content": "What is the capital of France?"}]


def test_sampling_defaults_match_contract():
    p = SamplingParams()
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.min_p, p.repeat_penalty, p.stop, p.seed) == (
        256, 0.0, 1.0, 0, 0.0, 1.0, (), 42)
    assert p.greedy
    d = p.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert set(d) == {"max_tokens", "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "stop", "seed"}


def test_sampling_replace_and_validation():
    p = SamplingParams().replace(temperature=0.7, stop=["\n", "###"])
    assert p.temperature == 0.7 and p.stop == ("\n", "###") and not p.greedy
    assert SamplingParams(stop="END").stop == ("END",)
    with pytest.raises(ConfigError, match="unknown sampling parameter.*temp"):
        SamplingParams().replace(temp=1.0)
    for bad in [dict(max_tokens=0), dict(temperature=-0.1), dict(top_p=0.0), dict(top_k=-1),
                dict(min_p=1.5), dict(repeat_penalty=0), dict(seed=1.5), dict(stop=("",))]:
        field = next(iter(bad))
        with pytest.raises(ConfigError, match=field):
            SamplingParams(**bad)


def test_usage_snapshot_since_and_sum():
    u = Usage(calls=2, cache_hits=1, prompt_tokens=100, completion_tokens=10, seconds=1.5,
              cached_prompt_tokens=40, cached_completion_tokens=4, cached_seconds=0.5)
    snap = u.snapshot()
    u.calls += 1
    u.prompt_tokens += 30
    d = u.since(snap)
    assert (d.calls, d.prompt_tokens, d.cache_hits) == (1, 30, 0)
    assert snap.calls == 2  # the snapshot is a copy
    total = u + snap
    assert total.calls == 5 and total.total_prompt_tokens == 130 + 40 + 100 + 40
    assert u.to_dict()["requests"] == 4


def test_truncate_at_stop_takes_earliest():
    assert truncate_at_stop("Paris.\nQuestion: next", ["Question:", "\n"]) == "Paris."
    assert truncate_at_stop("no stop here", ["###"]) == "no stop here"
    assert truncate_at_stop("abc", []) == "abc"


def test_scripted_in_order_records_requests_and_runs_out():
    llm = ScriptedLLM(["first", "second"])
    assert llm.generate(Q) == "first"
    assert llm.generate(Q, max_tokens=5, stop=["x"]) == "second"
    assert len(llm.requests) == 2
    assert llm.requests[1].params.max_tokens == 5 and llm.requests[1].params.stop == ("x",)
    assert "capital of France" in llm.requests[0].prompt
    with pytest.raises(RuntimeError, match="ran out of responses after 2"):
        llm.generate(Q)


def test_scripted_callable_and_stop_stripping():
    llm = ScriptedLLM(lambda msgs, p: f"echo:{msgs[-1]['content']}\nextra")
    assert llm.generate([{"role": "user", "content": "hi"}], stop=["\n"]) == "echo:hi"
    assert llm.generate([{"role": "user", "content": "hi"}]) == "echo:hi\nextra"


@pytest.mark.parametrize("bad", [
    "just a string",
    [],
    [{"role": "robot", "content": "x"}],
    [{"role": "user"}],
    [{"role": "user", "content": 3}],
    [{"role": "user", "content": "x", "name": "extra"}],
])
def test_bad_messages_are_config_errors(bad):
    with pytest.raises(ConfigError, match="messages"):
        ScriptedLLM(["x"]).generate(bad)


def test_params_object_and_overrides_combine():
    llm = ScriptedLLM(["a"])
    llm.generate(Q, SamplingParams(max_tokens=7), seed=3)
    p = llm.requests[0].params
    assert (p.max_tokens, p.seed) == (7, 3)
    with pytest.raises(ConfigError):
        llm.generate(Q, {"max_tokens": 3})


def test_fold_system_into_first_user_turn():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
    out = fold_system(msgs)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[0]["content"] == "Be brief.\n\nHi"
    assert msgs[1]["content"] == "Hi"  # input untouched
    llm = ScriptedLLM(["ok"])
    llm.fold_system_prompt = True
    llm.generate(msgs)
    assert llm.requests[0].messages[0]["content"].startswith("Be brief.")


def test_cache_hit_counts_and_replayed_tokens(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    llm = ScriptedLLM(["Paris is the answer"], cache=cache, identity="scripted:test")
    assert llm.generate(Q) == "Paris is the answer"
    fresh = llm.usage.snapshot()
    assert (fresh.calls, fresh.cache_hits) == (1, 0)
    assert fresh.prompt_tokens == 6 and fresh.completion_tokens == 4
    # a second model object over the same cache file: no backend call at all
    llm2 = ScriptedLLM([], cache=LLMCache(tmp_path / "c.sqlite"), identity="scripted:test")
    assert llm2.generate(Q) == "Paris is the answer"
    u = llm2.usage
    assert (u.calls, u.cache_hits, u.prompt_tokens) == (0, 1, 0)
    assert (u.cached_prompt_tokens, u.cached_completion_tokens) == (6, 4)
    assert u.total_prompt_tokens == 6 and llm2.requests == []


def test_cached_response_is_stored_after_stop_truncation(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    llm = ScriptedLLM(["yes\nbecause"], cache=cache, identity="s")
    assert llm.generate(Q, stop=["\n"]) == "yes"
    assert llm.generate(Q, stop=["\n"]) == "yes"
    assert llm.usage.cache_hits == 1


def test_batch_mixes_hits_misses_and_duplicates(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    llm = ScriptedLLM(lambda m, p: m[-1]["content"].upper(), cache=cache, identity="upper")
    llm.generate([{"role": "user", "content": "b"}])
    batch = [[{"role": "user", "content": c}] for c in ["a", "b", "a", "c"]]
    assert llm.generate_batch(batch) == ["A", "B", "A", "C"]
    # "b" came from the cache and the duplicate "a" was computed once
    assert [r.messages[0]["content"] for r in llm.requests] == ["b", "a", "c"]
    assert llm.usage.calls == 3 and llm.usage.cache_hits == 1


def test_batch_without_cache_dedupes_too():
    llm = ScriptedLLM(lambda m, p: "x" + m[-1]["content"])
    out = llm.generate_batch([[{"role": "user", "content": c}] for c in ["1", "2", "1"]])
    assert out == ["x1", "x2", "x1"] and len(llm.requests) == 2


def test_per_question_cost_with_snapshots(tmp_path):
    llm = ScriptedLLM(lambda m, p: "one two three", cache=LLMCache(tmp_path / "c.sqlite"), identity="c")
    snap = llm.usage.snapshot()
    llm.generate([{"role": "user", "content": "q1 words here"}])
    llm.generate([{"role": "user", "content": "q1 words here"}])
    cost = llm.usage.since(snap)
    assert cost.calls == 1 and cost.cache_hits == 1
    assert cost.total_prompt_tokens == 6 and cost.total_completion_tokens == 6


# ---- the json_schema knob -------------------------------------------------------------------
SCHEMA = '{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}'
SYS_Q = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]


def test_cache_keys_without_a_schema_are_unchanged():
    """The canonical requests (so the LLM cache keys) as the code before `json_schema` wrote them."""
    from kgrag_lib.llm.cache import canonical_request

    head_default = ('{"backend":"llamacpp","identity":"gguf-sha256:abc","messages":[{"content":"Be brief.","role":'
                    '"system"},{"content":"Capital of France?","role":"user"}],"params":{"max_tokens":256,"min_p":0.0,'
                    '"repeat_penalty":1.0,"seed":42,"stop":[],"temperature":0.0,"top_k":0,"top_p":1.0},"v":1}')
    assert canonical_request("llamacpp", "gguf-sha256:abc", SYS_Q, SamplingParams()) == head_default
    assert LLMCache.make_key("llamacpp", "gguf-sha256:abc", SYS_Q, SamplingParams()) == \
        "1005e1c4c056b912b45e175f81f9052cf2984257257608b3a0a7ae94acb8bda0"
    p = SamplingParams(max_tokens=32, stop=("\n",), temperature=0.7, seed=7)
    assert LLMCache.make_key("llamacpp", "gguf-sha256:abc", SYS_Q, p) == \
        "bde6eccd2da1329d603dce7de0e450322c033d25781be77f218fbbe6193393d2"
    constrained = SamplingParams(json_schema=SCHEMA)
    assert constrained.to_dict()["json_schema"] == SCHEMA
    assert LLMCache.make_key("llamacpp", "gguf-sha256:abc", SYS_Q, constrained) != \
        LLMCache.make_key("llamacpp", "gguf-sha256:abc", SYS_Q, SamplingParams())


@pytest.mark.parametrize("bad,match", [({"type": "object"}, "got dict"), ("{not json", "not JSON"),
                                       ("[1, 2]", "got a JSON list")])
def test_json_schema_must_be_a_json_object_string(bad, match):
    with pytest.raises(ConfigError, match=f"json_schema.*{match}"):
        SamplingParams(json_schema=bad)


def test_llamacpp_passes_the_schema_as_response_format_or_grammar(monkeypatch, tmp_path):
    """The argument plumbing of the llama.cpp backend, with a stand-in for `llama_cpp.Llama`."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from kgrag_lib.llm.backends.llamacpp import LlamaCppLLM

    calls: list[tuple[str, dict]] = []

    class FakeLlama:
        def __init__(self, **kw):
            pass

        def n_ctx(self) -> int:
            return 4096

        def reset(self) -> None:
            pass

        def create_chat_completion(self, **kw):
            calls.append(("chat", kw))
            return {"choices": [{"message": {"content": '{"answer": "Paris"}'}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 4}}

        def create_completion(self, **kw):
            calls.append(("raw", kw))
            return {"choices": [{"text": '{"answer": "Paris"}', "finish_reason": "stop"}], "usage": {}}

    monkeypatch.setattr(llama_cpp, "Llama", FakeLlama)
    chat = LlamaCppLLM(tmp_path / "m.gguf", sha256="0" * 64, n_threads=1)
    assert chat.generate(Q, json_schema=SCHEMA) == '{"answer": "Paris"}'
    chat.generate(Q)
    (_, constrained), (_, plain) = calls
    assert constrained["response_format"] == {"type": "json_object", "schema": json.loads(SCHEMA)}
    assert "response_format" not in plain and "grammar" not in plain and plain["max_tokens"] == 256
    raw = LlamaCppLLM(tmp_path / "m.gguf", sha256="0" * 64, n_threads=1, chat=False)
    raw.generate(Q, json_schema=SCHEMA)
    raw.generate([{"role": "user", "content": "again"}], json_schema=SCHEMA)
    (_, first), (_, second) = calls[2:]
    assert isinstance(first["grammar"], llama_cpp.LlamaGrammar) and second["grammar"] is first["grammar"]
    assert '"\\"answer\\""' in first["grammar"]._grammar and "response_format" not in first


def test_text_kg_schemas_compile_to_llama_cpp_grammars():
    """llama-cpp-python falls back to any-JSON when a schema does not convert: ours must convert."""
    pytest.importorskip("llama_cpp")
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from kgrag_lib.methods.sa_rag.prompts import ENTITY_SCHEMA, RELATION_SCHEMA

    assert '"\\"PERSON\\"" | "\\"ORGANIZATION\\"" | "\\"GPE\\"" | "\\"MISC\\""' in json_schema_to_gbnf(ENTITY_SCHEMA)
    assert "relations-item-description-kv" in json_schema_to_gbnf(RELATION_SCHEMA)
