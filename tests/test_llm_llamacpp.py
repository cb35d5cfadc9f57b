"""The embedded CPU model through llama.cpp, for real (marked `model`: seconds per call)."""

from __future__ import annotations

import importlib.util

import pytest

from kgrag_lib.llm import LLMCache, PromptTooLongError, load_llm

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed"),
]

FRANCE = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]


@pytest.fixture(scope="module")
def cache_file(tmp_path_factory):
    return tmp_path_factory.mktemp("llmcache") / "llm_cache.sqlite"


@pytest.fixture(scope="module")
def raw():
    model = load_llm("qwen2.5-coder-0.5b-q4", cache=False)
    yield model
    model.close()


@pytest.fixture(scope="module")
def llm(cache_file):
    model = load_llm("qwen2.5-coder-0.5b-q4", cache_path=cache_file)
    yield model
    model.close()


def test_answers_paris_then_serves_from_cache(llm, cache_file):
    from kgrag_lib.llm.presets import QWEN_CODER_05B_SHA256

    assert llm.identity == f"gguf-sha256:{QWEN_CODER_05B_SHA256}"
    assert llm.n_ctx == 4096 and llm.n_threads >= 1
    out = llm.generate(FRANCE, max_tokens=16)
    assert "paris" in out.lower()
    u = llm.usage.snapshot()
    assert (u.calls, u.cache_hits) == (1, 0)
    assert u.prompt_tokens > 10 and 0 < u.completion_tokens <= 16 and u.seconds > 0

    again = llm.generate(FRANCE, max_tokens=16)
    d = llm.usage.since(u)
    assert again == out
    assert (d.calls, d.cache_hits, d.prompt_tokens, d.completion_tokens) == (0, 1, 0, 0)
    assert (d.cached_prompt_tokens, d.cached_completion_tokens) == (u.prompt_tokens, u.completion_tokens)

    # a fresh model object over the same cache file also makes no backend call
    other = load_llm("qwen2.5-coder-0.5b-q4", cache=LLMCache(cache_file))
    assert other.generate(FRANCE, max_tokens=16) == out and other.usage.calls == 0
    other.close()


def test_greedy_is_reproducible_and_stop_is_honoured(raw):
    msgs = [{"role": "user", "content": "List three colours, separated by commas."}]
    p = dict(max_tokens=16, seed=1)
    a = raw.generate(msgs, **p)
    before = raw.usage.snapshot()
    assert raw.generate(msgs, **p) == a and "," in a  # deterministic without any cache
    full = raw.usage.since(before).completion_tokens
    before = raw.usage.snapshot()
    first = raw.generate(msgs, stop=[","], **p)
    assert first and "," not in first and a.startswith(first)
    assert raw.usage.since(before).completion_tokens < full  # generation really stopped


def test_seeded_sampling(raw):
    msgs = [{"role": "user", "content": "Write a random four-word phrase."}]
    p = dict(max_tokens=8, temperature=1.2, top_k=50, top_p=0.95)
    a = raw.generate(msgs, seed=11, **p)
    assert raw.generate(msgs, seed=11, **p) == a
    assert {raw.generate(msgs, seed=s, **p) for s in (12, 13)} != {a}


def test_batch_and_token_counting(raw):
    qs = [[{"role": "user", "content": f"What is {i} plus {i}? Answer with a number only."}] for i in (2, 3)]
    outs = raw.generate_batch(qs, max_tokens=6)
    assert "4" in outs[0] and "6" in outs[1]
    assert raw.count_tokens("The capital of France is Paris.") in range(5, 10)


def test_prompt_too_long_is_a_clear_error():
    small = load_llm("qwen2.5-coder-0.5b-q4", cache=False, n_ctx=200)
    assert small.n_ctx == 256  # llama.cpp's padding, made explicit
    with pytest.raises(PromptTooLongError, match="n_ctx"):
        small.generate([{"role": "user", "content": "word " * 300}], max_tokens=4)
    small.close()


def test_grammar_first_greedy_equals_the_library_chain(raw):
    """Greedy decoding under a grammar (GBNF and a JSON schema) through the grammar-first sampler
    gives the library chain's output token for token, and checks the whole vocabulary only at
    the tokens where the model's favourite breaks the grammar."""
    from kgrag_lib.methods.tcr_qf.prompts import GRAMMAR
    from kgrag_lib.llm.base import SamplingParams

    text = "Marie Curie was born in Warsaw. She won the Nobel Prize in Physics in 1903 with Pierre Curie."
    msgs = [{"role": "user", "content": "List the entities and relations of this text as records:\n" + text}]
    schema = '{"type":"object","properties":{"city":{"type":"string","maxLength":20}},"required":["city"]}'
    inner = raw._llm
    for params in (SamplingParams(max_tokens=96, grammar=GRAMMAR), SamplingParams(max_tokens=32, json_schema=schema)):
        fast = raw._complete(msgs if params.grammar else FRANCE, params)
        pick = inner.last_grammar_sampler
        assert pick.tokens >= fast.completion_tokens and pick.full_checks < pick.tokens
        inner._init_sampler, fast_init = inner._library_init_sampler, inner._init_sampler
        try:
            slow = raw._complete(msgs if params.grammar else FRANCE, params)
        finally:
            inner._init_sampler = fast_init
        assert fast.text == slow.text and fast.completion_tokens == slow.completion_tokens
    assert fast.text.startswith("{") and "city" in fast.text
