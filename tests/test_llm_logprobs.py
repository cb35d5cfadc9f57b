"""Token log-probabilities through the LLM layer: the cache key, the cache round trip, the
scripted fake, and each backend's extraction (llama.cpp with a fake `Llama`, an OpenAI-style
HTTP server, a tiny random transformers model)."""

from __future__ import annotations

import ctypes
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.llm import LLMCache, SamplingParams
from kgrag_lib.llm.base import Generation, TokenLogprob, raw_prompt, truncate_tokens
from kgrag_lib.llm.cache import canonical_request, export_cache, import_cache
from kgrag_lib.llm.fake import ScriptedLLM

Q = [{"role": "user", "content": "Capital of France?"}]
GEN = Generation("Paris.", (
    TokenLogprob("Paris", -0.1, (("Paris", -0.1), ("Lyon", -2.5), ("Nice", -3.0))),
    TokenLogprob(".", -0.2, (("!", -2.0), (".", -0.2))),
))


# ---- the knob and the cache key ----------------------------------------------------------------
def test_logprobs_is_left_out_of_the_key_when_off():
    p = SamplingParams()
    assert "logprobs" not in p.to_dict()
    # the request JSON of a plain call is exactly what it was before the knob existed
    assert canonical_request("b", "i", Q, p) == (
        '{"backend":"b","identity":"i","messages":[{"content":"Capital of France?","role":"user"}],'
        '"params":{"max_tokens":256,"min_p":0.0,"repeat_penalty":1.0,"seed":42,"stop":[],"temperature":0.0,'
        '"top_k":0,"top_p":1.0},"v":1}')
    keys = {LLMCache.make_key("b", "i", Q, p.replace(logprobs=k)) for k in (0, 1, 5)}
    assert len(keys) == 3
    assert p.replace(logprobs=5).to_dict()["logprobs"] == 5


@pytest.mark.parametrize("bad", [-1, 21, True, 2.0])
def test_logprobs_must_be_a_small_int(bad):
    with pytest.raises(ConfigError, match="logprobs"):
        SamplingParams(logprobs=bad)


def test_generate_logprobs_needs_the_knob():
    llm = ScriptedLLM([GEN])
    with pytest.raises(ConfigError, match="logprobs"):
        llm.generate_logprobs(Q)


# ---- scripted fake, usage and cache -------------------------------------------------------------
def test_scripted_logprobs_are_cut_to_top_k_and_counted():
    llm = ScriptedLLM([GEN])
    out = llm.generate_logprobs(Q, logprobs=2)
    assert out.text == "Paris."
    assert [t.token for t in out.tokens] == ["Paris", "."]
    assert out.tokens[0].top == (("Paris", -0.1), ("Lyon", -2.5))
    assert out.tokens[1].top == ((".", -0.2), ("!", -2.0))  # best first
    assert out.logprob == pytest.approx(-0.3)
    assert (llm.usage.calls, llm.usage.completion_tokens) == (1, 2)
    assert llm.requests[0].params.logprobs == 2


def test_a_backend_without_logprobs_is_a_clear_error():
    llm = ScriptedLLM(["Paris"])
    with pytest.raises(BackendUnavailableError, match="log-probabilities"):
        llm.generate_logprobs(Q, logprobs=3)


def test_cache_hit_returns_the_same_logprobs(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    first = ScriptedLLM([GEN], cache=cache, identity="scripted:same")
    a = first.generate_logprobs(Q, logprobs=3)
    again = ScriptedLLM([], cache=cache, identity="scripted:same")  # no responses: must hit
    b = again.generate_logprobs(Q, logprobs=3)
    assert b == a and b.tokens[0].top[1] == ("Lyon", -2.5)
    u = again.usage
    assert (u.calls, u.cache_hits, u.cached_completion_tokens) == (0, 1, 2)
    # the text-only request of the same prompt is another key (and keeps plain-text storage)
    with pytest.raises(RuntimeError, match="ran out"):
        again.generate(Q)
    # a logprobs request served by generate() returns the text of the same row
    assert again.generate(Q, logprobs=3) == "Paris."
    cache.close()


def test_unreadable_envelope_is_a_miss(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    p = SamplingParams(logprobs=2)
    key = cache.make_key("scripted", "scripted:x", Q, p)
    cache.put(key, "plain text", prompt_tokens=1, completion_tokens=1, seconds=0.1, backend="scripted",
              identity="scripted:x", messages=Q, params=p)
    assert cache.get(key, logprobs=True) is None
    assert cache.get(key).text == "plain text"
    cache.close()


def test_export_and_import_keep_logprobs(tmp_path):
    src = LLMCache(tmp_path / "a.sqlite")
    ScriptedLLM([GEN], cache=src, identity="scripted:e").generate_logprobs(Q, logprobs=3)
    src.close()
    n = export_cache(tmp_path / "x.jsonl.gz", tmp_path / "a.sqlite")
    assert n == 1
    assert import_cache(tmp_path / "x.jsonl.gz", tmp_path / "b.sqlite") == (1, 0)
    dst = LLMCache(tmp_path / "b.sqlite")
    got = ScriptedLLM([], cache=dst, identity="scripted:e").generate_logprobs(Q, logprobs=3)
    assert got.tokens == GEN.tokens[:1] + (TokenLogprob(".", -0.2, ((".", -0.2), ("!", -2.0))),)
    dst.close()


def test_stop_string_cuts_the_tokens_too():
    gen = Generation("Paris\nLyon", (TokenLogprob("Paris", -0.1), TokenLogprob("\n", -0.5),
                                      TokenLogprob("Lyon", -0.7)))
    out = ScriptedLLM([gen]).generate_logprobs(Q, logprobs=1, stop=["\n"])
    assert out.text == "Paris" and [t.token for t in out.tokens] == ["Paris"]
    assert truncate_tokens(gen.tokens, "") == ()


def test_raw_prompt_and_vocabulary():
    assert raw_prompt("### Instruction:\nq\n\n### Response:\n") == [
        {"role": "user", "content": "### Instruction:\nq\n\n### Response:\n"}]
    with pytest.raises(ConfigError):
        raw_prompt("")
    assert ScriptedLLM(["x"]).missing_tokens(["[Relevant]"]) is None
    assert ScriptedLLM(["x"], vocabulary=["[Relevant]"]).missing_tokens(["[Relevant]", "[Irrelevant]"]) == ["[Irrelevant]"]


# ---- llama.cpp: the extraction loop against a fake Llama ----------------------------------------
class FakeLlama:
    """Vocabulary of 6 pieces; `generate` yields a scripted token sequence and, before each
    token, exposes the logits it was drawn from through `_ctx.get_logits_ith(-1)`."""

    VOCAB = ["<s>", "</s>", "[Relevant]", " Paris", " Lyon", "."]

    def __init__(self, script):
        self.script = script  # [(token id, logits row)]
        self._model = type("M", (), {"vocab": object()})()
        self.calls = []
        self._row = None
        outer = self

        class Ctx:
            def get_logits_ith(self, i):
                assert i == -1
                return outer._row.ctypes.data_as(ctypes.POINTER(ctypes.c_float))

        self._ctx = Ctx()

    def n_vocab(self):
        return len(self.VOCAB)

    def tokenize(self, text, add_bos=True, special=False):
        text = text.decode()
        out = [0] if add_bos else []
        if text in self.VOCAB:
            return out + [self.VOCAB.index(text)]
        return out + [100 + ord(c) for c in text]  # any other text: one id per character

    def detokenize(self, tokens, prev_tokens=None, special=False):
        assert special, "special tokens must be rendered"
        return "".join(self.VOCAB[t] if t < 6 else "?" for t in tokens).encode()

    def reset(self):
        self.calls.append("reset")

    def set_seed(self, seed):
        self.calls.append(("seed", seed))

    def generate(self, tokens, **kw):
        self.calls.append(("generate", kw["temp"], kw["top_k"]))
        for tok, row in self.script:
            self._row = np.asarray(row, dtype=np.float32)
            yield tok


def _fake_llamacpp(monkeypatch, script, chat=False):
    import llama_cpp

    from kgrag_lib.llm.backends.llamacpp import LlamaCppLLM

    monkeypatch.setattr(llama_cpp, "llama_vocab_is_eog", lambda vocab, tok: tok == 1)
    llm = object.__new__(LlamaCppLLM)
    from kgrag_lib.llm.base import LLM

    LLM.__init__(llm, "fake-gguf", "gguf-sha256:fake", n_ctx=64)
    llm.chat, llm.reuse_prefix, llm._grammars = chat, False, {}
    llm._llm = FakeLlama(script)
    return llm


def _logsoftmax(row):
    row = np.asarray(row, dtype=np.float64)
    return row - row.max() - np.log(np.exp(row - row.max()).sum())


def test_llamacpp_reads_the_logits_of_each_sampled_token(monkeypatch):
    pytest.importorskip("llama_cpp")
    rows = [[0, 0, 3.0, 1.0, 0.5, 0], [0, 0, 0, 2.0, 1.0, 0], [0, 1.0, 0, 0, 0, 2.5], [0, 4.0, 0, 0, 0, 0]]
    llm = _fake_llamacpp(monkeypatch, [(2, rows[0]), (3, rows[1]), (5, rows[2]), (1, rows[3])])
    out = llm.generate_logprobs(raw_prompt("q"), logprobs=2, seed=7)
    assert out.text == "[Relevant] Paris."
    assert [t.token for t in out.tokens] == ["[Relevant]", " Paris", "."]  # the end token is not a token of the text
    for step, row in zip(out.tokens, rows):
        lp = _logsoftmax(row)
        assert step.logprob == pytest.approx(lp[FakeLlama.VOCAB.index(step.token)], abs=1e-6)
        best = np.argsort(-lp, kind="stable")[:2]
        assert [a for a, _ in step.top] == [FakeLlama.VOCAB[i] for i in best]
        assert [v for _, v in step.top] == pytest.approx([lp[i] for i in best], abs=1e-6)
    assert out.tokens[0].top[0][0] == "[Relevant]"
    assert ("seed", 7) in llm._llm.calls and ("generate", 0.0, 0) in llm._llm.calls
    assert (llm.usage.calls, llm.usage.completion_tokens, llm.usage.prompt_tokens) == (1, 3, 2)


def test_llamacpp_logprobs_honour_max_tokens_and_stop(monkeypatch):
    pytest.importorskip("llama_cpp")
    row = [0, 0, 0, 1.0, 2.0, 0]
    llm = _fake_llamacpp(monkeypatch, [(3, row), (5, row), (4, row), (4, row)])
    assert llm.generate_logprobs(raw_prompt("q"), logprobs=1, max_tokens=2).text == " Paris."
    out = llm.generate_logprobs(raw_prompt("q"), logprobs=1, stop=["."])
    assert out.text == " Paris" and [t.token for t in out.tokens] == [" Paris"]


def test_llamacpp_logprobs_refuse_chat_mode_and_check_vocabulary(monkeypatch):
    pytest.importorskip("llama_cpp")
    llm = _fake_llamacpp(monkeypatch, [], chat=True)
    with pytest.raises(ConfigError, match="chat=False"):
        llm.generate_logprobs(Q, logprobs=2)
    assert llm.missing_tokens(["[Relevant]", "[Irrelevant]"]) == ["[Irrelevant]"]


# ---- OpenAI-compatible servers ---------------------------------------------------------------------
class LogprobServer:
    """Answers /chat/completions and /completions, with or without log-probabilities."""

    def __init__(self, with_logprobs=True, completions_form="openai"):
        self.bodies, self.paths = [], []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                outer.paths.append(self.path)
                if self.path == "/v1/chat/completions":
                    lp = {"content": [
                        {"token": "Paris", "logprob": -0.1, "top_logprobs": [
                            {"token": "Paris", "logprob": -0.1}, {"token": "Lyon", "logprob": -2.4}]}]}
                    choice = {"index": 0, "message": {"role": "assistant", "content": "Paris"},
                              "finish_reason": "stop", "logprobs": lp if with_logprobs else None}
                elif completions_form == "llama-server":   # llama.cpp's server: the chat form on /completions too
                    lp = {"content": [
                        {"id": 7, "token": "[Relevant]", "bytes": [91], "logprob": -0.05, "top_logprobs": [
                            {"id": 7, "token": "[Relevant]", "bytes": [91], "logprob": -0.05},
                            {"id": 8, "token": "[Irrelevant]", "bytes": [91], "logprob": -3.1}]},
                        {"id": 9, "token": "Paris", "bytes": [80], "logprob": -0.3, "top_logprobs": [
                            {"id": 9, "token": "Paris", "bytes": [80], "logprob": -0.3},
                            {"id": 10, "token": "Rome", "bytes": [82], "logprob": -1.5}]}]}
                    choice = {"index": 0, "text": "[Relevant]Paris", "finish_reason": "stop",
                              "logprobs": lp if with_logprobs else None}
                else:
                    lp = {"tokens": ["[Relevant]", "Paris"], "token_logprobs": [-0.05, -0.3],
                          "top_logprobs": [{"[Relevant]": -0.05, "[Irrelevant]": -3.1}, {"Paris": -0.3, "Rome": -1.5}],
                          "text_offset": [0, 10]}
                    choice = {"index": 0, "text": "[Relevant]Paris", "finish_reason": "stop",
                              "logprobs": lp if with_logprobs else None}
                data = json.dumps({"choices": [choice], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()


@pytest.fixture
def lp_server():
    s = LogprobServer()
    yield s
    s.httpd.shutdown()


def _openai(url, **kw):
    from kgrag_lib.llm.backends.openai_compat import OpenAICompatLLM

    return OpenAICompatLLM(url, "selfrag", probe=False, max_retries=0, flavor="vllm", **kw)


def test_openai_chat_logprobs(lp_server):
    llm = _openai(lp_server.url)
    out = llm.generate_logprobs(Q, logprobs=2)
    assert out == Generation("Paris", (TokenLogprob("Paris", -0.1, (("Paris", -0.1), ("Lyon", -2.4))),))
    b = lp_server.bodies[-1]
    assert (b["logprobs"], b["top_logprobs"], b["skip_special_tokens"]) == (True, 2, False)
    llm.generate(Q)
    assert "logprobs" not in lp_server.bodies[-1] and "skip_special_tokens" not in lp_server.bodies[-1]


def test_openai_raw_prompt_completions_with_logprobs(lp_server):
    llm = _openai(lp_server.url, chat=False)
    assert llm.identity.endswith(";raw-prompt")
    out = llm.generate_logprobs(raw_prompt("### Instruction:\nq\n\n### Response:\n"), logprobs=2)
    assert lp_server.paths[-1] == "/v1/completions"
    b = lp_server.bodies[-1]
    assert b["prompt"] == "### Instruction:\nq\n\n### Response:\n" and "messages" not in b and b["logprobs"] == 2
    assert out.text == "[Relevant]Paris"
    assert out.tokens[0] == TokenLogprob("[Relevant]", -0.05, (("[Relevant]", -0.05), ("[Irrelevant]", -3.1)))
    assert llm.missing_tokens(["[Relevant]"]) is None  # a server's vocabulary cannot be inspected


def test_llama_server_completions_logprobs_in_the_chat_form():
    """llama.cpp's llama-server answers /v1/completions with `logprobs: {"content": [...]}` (its
    server's completion probabilities, as in /chat/completions); Self-RAG reads them all the same."""
    s = LogprobServer(completions_form="llama-server")
    try:
        from kgrag_lib.llm.backends.openai_compat import OpenAICompatLLM

        llm = OpenAICompatLLM(s.url, "selfrag", probe=False, max_retries=0, flavor="llama-server", chat=False)
        out = llm.generate_logprobs(raw_prompt("### Instruction:\nq\n\n### Response:\n"), logprobs=2)
        assert s.paths[-1] == "/v1/completions" and out.text == "[Relevant]Paris"
        assert out.tokens == (TokenLogprob("[Relevant]", -0.05, (("[Relevant]", -0.05), ("[Irrelevant]", -3.1))),
                              TokenLogprob("Paris", -0.3, (("Paris", -0.3), ("Rome", -1.5))))
    finally:
        s.httpd.shutdown()


def test_openai_server_without_logprobs_is_refused():
    s = LogprobServer(with_logprobs=False)
    try:
        for chat in (True, False):
            with pytest.raises(BackendUnavailableError, match="no token log-probabilities"):
                _openai(s.url, chat=chat).generate_logprobs(Q, logprobs=2)
    finally:
        s.httpd.shutdown()


# ---- transformers: a tiny random model ---------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = {chr(c) for c in range(0x21, 0x7F)} | {"\u0120", "\u010a"}
    alphabet = sorted(set(pre_tokenizers.ByteLevel.alphabet()) & printable)
    tk = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(["<|endoftext|>", "[Relevant]"])
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>",
                                               pad_token="<|endoftext|>")
    cfg = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   initializer_range=0.5, eos_token_id=tok.eos_token_id,
                                   pad_token_id=tok.pad_token_id, bos_token_id=None, tie_word_embeddings=True)
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("tiny-lp")
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    mp = pytest.MonkeyPatch()
    mp.setenv("KGRAG_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    from kgrag_lib.llm import load_llm

    llm = load_llm(f"hf:{d}", cache=False, chat=False)
    yield llm
    mp.undo()


def test_hf_logprobs_match_a_forward_pass(tiny_hf):
    import torch

    llm = tiny_hf
    out = llm.generate_logprobs(raw_prompt("who is"), logprobs=3, max_tokens=5)
    assert 1 <= len(out.tokens) <= 5
    ids = llm.tokenizer("who is", add_special_tokens=True)["input_ids"]
    gen_ids = [llm.tokenizer.convert_tokens_to_ids(llm.tokenizer.tokenize(t.token)) for t in out.tokens]
    with torch.no_grad():
        seq = torch.tensor([ids + [g for grp in gen_ids for g in grp]])
        logp = torch.log_softmax(llm.model(seq).logits[0].float(), dim=-1)
    for j, step in enumerate(out.tokens):
        row = logp[len(ids) + j - 1]
        assert step.logprob == pytest.approx(float(row.max()), abs=1e-4)  # greedy: the argmax
        assert step.top[0][1] == pytest.approx(step.logprob, abs=1e-6) and len(step.top) == 3
        assert [v for _, v in step.top] == sorted([v for _, v in step.top], reverse=True)
    assert llm.missing_tokens(["[Relevant]", "[Irrelevant]"]) == ["[Irrelevant]"]


@pytest.mark.model
def test_embedded_llamacpp_logprobs_on_the_real_model(tmp_path):
    """The llama.cpp log-prob loop on the real 0.5B model: greedy log-probs are each step's best
    alternative, the text equals plain greedy generation, a cache hit returns the same numbers,
    and the vocabulary check sees that Self-RAG's tokens are missing."""
    pytest.importorskip("llama_cpp")
    from kgrag_lib.llm import load_llm
    from kgrag_lib.llm.presets import embedded_path

    try:
        embedded_path()
    except Exception as e:  # the model packages are an optional extra
        pytest.skip(f"embedded model not available: {e}")
    llm = load_llm("qwen2.5-coder-0.5b-q4", cache_path=tmp_path / "c.sqlite", chat=False, verbose=False)
    msgs = raw_prompt("Question: What is the capital of France?\nAnswer:")
    p = SamplingParams(max_tokens=6, temperature=0.0, logprobs=3)
    out = llm.generate_logprobs(msgs, p)
    assert 1 <= len(out.tokens) <= 6 and "Paris" in out.text
    assert "".join(t.token for t in out.tokens) == out.text
    for t in out.tokens:
        assert len(t.top) == 3 and t.top[0][0] == t.token and t.logprob == pytest.approx(t.top[0][1])
        assert t.logprob <= 0 and [v for _, v in t.top] == sorted((v for _, v in t.top), reverse=True)
    assert llm.generate(msgs, p.replace(logprobs=0)) == out.text
    again = llm.generate_logprobs(msgs, p)
    assert llm.usage.cache_hits >= 1 and [t.logprob for t in again.tokens] == [t.logprob for t in out.tokens]
    assert llm.missing_tokens(["[Relevant]", "Paris"]) == ["[Relevant]"]
