"""The transformers backend on a tiny random Qwen2 model built in a temp folder.

Weights are random, so outputs are nonsense, but everything the backend is responsible for
is checked against an independent oracle: the chat template rendering, greedy decoding
(a hand-written argmax loop), token counts, stop strings, batching with left padding, that
the model's shipped sampling defaults do not leak into greedy requests, and the identity.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from kgrag_lib.llm import SamplingParams, load_llm  # noqa: E402
from kgrag_lib.llm.base import truncate_at_stop  # noqa: E402

ORIGINAL_CACHE_DIR = os.environ.get("KGRAG_CACHE_DIR")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module", autouse=True)
def _private_cache_dir(tmp_path_factory):
    """Weight-file hashes of the throwaway models go to a temp cache, not the repo's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("KGRAG_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A byte-level BPE over printable ASCII (so any generated token decodes cleanly) and a
    2-layer Qwen2 with random weights, saved like a hub snapshot."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = {chr(c) for c in range(0x21, 0x7F)} | {"\u0120", "\u010a"}  # + space, newline
    alphabet = sorted(set(pre_tokenizers.ByteLevel.alphabet()) & printable)
    tk = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(SPECIALS)
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = TEMPLATE
    cfg = transformers.Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=0.5, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        bos_token_id=None, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg)
    d = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(d)
    tok.save_pretrained(d)
    # Shipped sampling defaults that must NOT leak into greedy requests.
    gc = json.loads((d / "generation_config.json").read_text())
    gc.update(do_sample=True, temperature=5.0, repetition_penalty=3.0, top_k=3)
    (d / "generation_config.json").write_text(json.dumps(gc))
    return d


@pytest.fixture(scope="module")
def llm(model_dir):
    return load_llm(f"hf:{model_dir}", cache=False, batch_size=4)


def _reference_greedy(llm, messages, max_new):
    """Plain argmax decoding with no generation config at all."""
    prompt = llm.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = llm.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    n_prompt = ids.shape[1]
    eos = llm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = []
    with torch.no_grad():
        for _ in range(max_new):
            nxt = int(llm.model(ids).logits[0, -1].argmax())
            if nxt == eos:
                break
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return llm.tokenizer.decode(out, skip_special_tokens=True), n_prompt, len(out)


M1 = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "What is the capital of France?"}]
M2 = [{"role": "user", "content": "who is the director"}]
M3 = [{"role": "user", "content": "red blue green house tree car road sky sea sun moon star river"}]


def test_identity_fingerprints_the_folder(llm, model_dir, tmp_path):
    assert llm.identity.startswith("hf-dir:") and llm.backend == "hf" and llm.chat
    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy)
    from kgrag_lib.llm.backends.hf import dir_fingerprint

    assert dir_fingerprint(copy) == llm.identity.split(":", 1)[1]  # content, not path
    cfg = json.loads((copy / "config.json").read_text())
    cfg["note"] = "changed"
    (copy / "config.json").write_text(json.dumps(cfg))
    assert dir_fingerprint(copy) != llm.identity.split(":", 1)[1]


def test_greedy_matches_argmax_oracle_and_counts_tokens(llm):
    ref_text, n_prompt, n_gen = _reference_greedy(llm, M1, 12)
    before = llm.usage.snapshot()
    assert llm.generate(M1, max_tokens=12) == ref_text
    u = llm.usage.since(before)
    assert (u.calls, u.prompt_tokens, u.completion_tokens) == (1, n_prompt, n_gen)
    assert llm.count_tokens("paris is the capital") == 20  # one token per byte


def test_greedy_ignores_seed(llm):
    a = llm.generate(M2, max_tokens=10, seed=1)
    b = llm.generate(M2, max_tokens=10, seed=999)
    assert a == b


def test_sampling_is_seeded(llm):
    p = SamplingParams(max_tokens=12, temperature=1.5, top_p=1.0)
    a = llm.generate(M2, p, seed=5)
    assert llm.generate(M2, p, seed=5) == a
    others = {llm.generate(M2, p, seed=s) for s in (6, 7, 8)}
    assert others != {a}


def test_batch_with_left_padding_equals_single_calls(llm):
    singles = [llm.generate(m, max_tokens=8) for m in (M1, M2, M3)]
    assert llm.generate_batch([M1, M2, M3], max_tokens=8) == singles


def test_stop_string_ends_generation(llm):
    # the first prompt whose greedy output is long enough to cut in the middle
    extra = ([{"role": "user", "content": "x" * k}] for k in range(1, 30))
    for msgs in itertools.chain((M1, M2, M3), extra):
        ref_text, _, n_gen = _reference_greedy(llm, msgs, 16)
        if len(ref_text) >= 8:
            break
    assert len(ref_text) >= 8, "no prompt gave a long enough oracle output"
    stop = ref_text[4:6]
    before = llm.usage.snapshot()
    out = llm.generate(msgs, max_tokens=16, stop=[stop])
    assert out == truncate_at_stop(ref_text, [stop])
    assert llm.usage.since(before).completion_tokens < n_gen  # it really stopped early


def test_raw_prompt_mode_for_base_models(model_dir):
    raw = load_llm(f"hf:{model_dir}", cache=False, chat=False)
    assert not raw.chat
    assert isinstance(raw.generate(M2, max_tokens=4), str)
    assert raw.usage.prompt_tokens == len("who is the director")  # no template tokens


@pytest.mark.model
def test_real_qwen_gguf_through_transformers(monkeypatch):
    """The embedded Qwen GGUF dequantized by transformers: the same weights, template and
    answer as the llama.cpp path (the way the GPU presets run, minus the GPU)."""
    for mod in ("gguf", "accelerate"):
        pytest.importorskip(mod)
    from kgrag_lib.llm.presets import QWEN_CODER_05B_SHA256, embedded_path

    # the real model lives in the shared cache (assembled once per machine)
    if ORIGINAL_CACHE_DIR is None:
        monkeypatch.delenv("KGRAG_CACHE_DIR")
    else:
        monkeypatch.setenv("KGRAG_CACHE_DIR", ORIGINAL_CACHE_DIR)

    try:
        path = embedded_path()
    except Exception as e:  # the model packages are an optional extra
        pytest.skip(f"embedded model not available: {e}")
    llm = load_llm(f"hf:{path}", cache=False)
    assert llm.identity == f"hf-gguf-sha256:{QWEN_CODER_05B_SHA256}" and llm.chat
    q = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
    outs = llm.generate_batch([q, [{"role": "user", "content": "What is 2 plus 2? Answer with a number only."}]],
                              max_tokens=8)
    assert "paris" in outs[0].lower() and "4" in outs[1]
    assert llm.usage.prompt_tokens > 20 and llm.usage.calls == 2


def _wait_until(cond, what: str, timeout: float = 30.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def test_requests_from_threads_are_computed_as_one_batch(llm):
    """Questions in flight on threads reach transformers as one left-padded batch (the GPU
    user's `--concurrency N` with an `hf:` model), and each thread gets its own answer."""
    import threading

    singles = [llm.generate(m, max_tokens=8) for m in (M1, M2, M3)]
    joiner = llm.coalescer
    before = dict(joiner.batch_sizes)
    out: dict[int, str] = {}
    llm._backend_lock.acquire()   # the first request holds the model while the other two queue behind it
    try:
        threads = [threading.Thread(target=lambda i=i, m=m: out.__setitem__(i, llm.generate(m, max_tokens=8)))
                   for i, m in enumerate((M1, M2, M3))]
        threads[0].start()
        _wait_until(lambda: joiner._busy, "the first request to take the model")
        for t in threads[1:]:
            t.start()
        _wait_until(lambda: len(joiner._queue) == 2, "two requests queued")
    finally:
        llm._backend_lock.release()
    for t in threads:
        t.join(60)
    assert [out[i] for i in range(3)] == singles
    grown = {k: v - before.get(k, 0) for k, v in joiner.batch_sizes.items() if v != before.get(k, 0)}
    assert grown == {1: 1, 2: 1}   # the first alone, then the two that waited, together


def test_run_in_flight_setting_reaches_an_hf_model(model_dir):
    """`--concurrency` / `--max-in-flight` set how many chunk or decoding requests a step sends
    an `hf:` model at once (`concurrency.fan_out`), so they arrive together and batch."""
    from kgrag_lib.concurrency import fan_out
    from kgrag_lib.methods.base import RunContext

    ctx = RunContext(model=f"hf:{model_dir}", server_options={"max_in_flight": 4, "timeout": 5})
    assert fan_out(ctx.llm) == 4 and ctx.llm.coalesce_size == 8
    assert fan_out(RunContext(model=f"hf:{model_dir}").llm) == 1


# ---- a GPU's failure modes, met on the CPU with the tiny model (issue 39 review) -----------------------------
def test_repeat_penalty_skips_the_padding_of_a_batch(llm):
    """transformers' penalty counts every input id; a batch's left pads (often an end token) must not
    count, or a padded row's end token is penalised and it answers unlike alone."""
    singles = [llm.generate(m, max_tokens=8, repeat_penalty=1.3) for m in (M1, M2, M3)]
    assert llm.generate_batch([M1, M2, M3], max_tokens=8, repeat_penalty=1.3) == singles
    texts = [llm._render(m) for m in (M1, M3)]
    enc = llm.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    alone = llm.tokenizer(texts[:1], return_tensors="pt", add_special_tokens=False)
    pads = int((enc["attention_mask"][0] == 0).sum())
    assert pads > 0 and int(enc["input_ids"][0, 0]) == llm.tokenizer.pad_token_id
    scores = torch.randn(2, len(llm.tokenizer))
    penalised = llm._processors(enc, SamplingParams(repeat_penalty=1.3))[0](enc["input_ids"], scores.clone())
    expect = transformers.RepetitionPenaltyLogitsProcessor(1.3)(alone["input_ids"], scores[:1].clone())
    assert torch.equal(penalised[0], expect[0])   # the pad token's score untouched in the padded row


def test_out_of_memory_splits_the_batch_and_fails_only_the_prompt_that_cannot_fit(llm, monkeypatch):
    from kgrag_lib.llm.base import PromptTooLongError

    params = SamplingParams(max_tokens=6)
    singles = llm._complete_batch([M1, M2, M3], params)
    real, sizes = llm._generate, []

    def small_gpu(texts, *a):
        sizes.append(len(texts))
        if len(texts) > 1:
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        return real(texts, *a)
    monkeypatch.setattr(llm, "_generate", small_gpu)
    assert [c.text for c in llm._complete_batch([M1, M2, M3], params)] == [c.text for c in singles]
    assert sizes == [3, 1, 2, 1, 1]
    monkeypatch.setattr(llm, "_generate", lambda *a: (_ for _ in ()).throw(torch.OutOfMemoryError("oom")))
    with pytest.raises(PromptTooLongError, match="GPU's free memory"):
        llm._complete_batch([M1], params)


def test_a_prompt_past_the_context_window_fails_alone_before_joining(llm):
    from kgrag_lib.llm.base import PromptTooLongError

    long = [{"role": "user", "content": "x" * (llm.n_ctx + 10)}]
    with pytest.raises(PromptTooLongError, match="context window 512"):
        llm.generate(long, max_tokens=4)
    near = [{"role": "user", "content": "y" * (llm.n_ctx - 40)}]   # room for fewer tokens than asked
    c = llm._complete_batch([near], SamplingParams(max_tokens=100))[0]
    assert c.prompt_tokens + c.completion_tokens <= llm.n_ctx


def test_the_rows_of_a_long_sampled_request_draw_their_own_numbers(llm):
    """One request of 8 prompts runs as chunks of batch_size 4; each chunk has its own seed, so the
    same prompt in rows 0 and 4 is two samples, not one repeated."""
    out = [c.text for c in llm._complete_batch([M2] * 8, SamplingParams(max_tokens=12, temperature=1.5, seed=3))]
    assert out[0] != out[4] and out[:4] == [c.text for c in llm._complete_batch(
        [M2] * 4, SamplingParams(max_tokens=12, temperature=1.5, seed=3))]


def test_a_chosen_precision_is_part_of_the_identity(llm, model_dir):
    """float32 and bfloat16 runs of the same weights answer differently: never one cache entry."""
    assert load_llm(f"hf:{model_dir}", cache=False, dtype="float32").identity == llm.identity + "#dtype=float32"


def test_a_repo_without_safetensors_fetches_its_pytorch_weights_only_then(tmp_path, monkeypatch):
    """selfrag/selfrag_llama2_7b ships pytorch_model-*.bin only; a repo with both fetches safetensors only."""
    from kgrag_lib.llm.backends import hf

    calls = []

    def fake_snapshot(repo, patterns, revision=None, local_only=None, what=""):
        calls.append((tuple(patterns), revision))
        d = tmp_path / repo.replace("/", "--") / "0123abcd"
        d.mkdir(parents=True, exist_ok=True)
        if repo.endswith("new"):
            (d / "model.safetensors").write_bytes(b"")
        return d
    monkeypatch.setattr(hf, "snapshot", fake_snapshot)
    assert hf.HFLLM._resolve_model("org/new", None, None)[2] == "hf:org/new@0123abcd"
    assert calls == [(tuple(hf._HUB_PATTERNS), None)]
    calls.clear()
    hf.HFLLM._resolve_model("selfrag/old", None, None)
    assert calls == [(tuple(hf._HUB_PATTERNS), None), (tuple(hf._HUB_PATTERNS + hf._HUB_BIN), "0123abcd")]


def test_a_transformers_without_a_per_row_penalty_prefix_runs_penalised_prompts_one_at_a_time(llm, monkeypatch):
    from kgrag_lib.llm.backends import hf

    assert hf._penalty_skips_padding()   # transformers 5.x: batches keep their size
    singles = [llm.generate(m, max_tokens=6, repeat_penalty=1.3) for m in (M1, M2, M3)]
    monkeypatch.setattr(hf, "_penalty_skips_padding", lambda: False)
    sizes = []
    real = llm._generate
    monkeypatch.setattr(llm, "_generate", lambda texts, *a: sizes.append(len(texts)) or real(texts, *a))
    out = llm._complete_batch([M1, M2, M3], SamplingParams(max_tokens=6, repeat_penalty=1.3))
    assert sizes == [1, 1, 1] and [c.text for c in out] == singles


# ---- grammars and JSON schemas (llguidance) ------------------------------------------------------
RECORD_GRAMMAR = r'''
root ::= item{1,3}
item ::= "[e | E" [1-9] " | " [a-z]{1,6} "]\n"
'''
ANSWER_SCHEMA = json.dumps({"type": "object", "properties": {"answer": {"type": "string", "maxLength": 8}},
                            "required": ["answer"], "additionalProperties": False})


def test_a_grammar_constrains_every_row_of_a_batch(llm):
    """Random weights write nonsense; under the grammar each row of a left-padded batch is records."""
    import re

    pytest.importorskip("llguidance")
    free = llm.generate(M1, max_tokens=40)
    assert not re.fullmatch(r"(\[e \| E[1-9] \| [a-z]{1,6}\]\n){1,3}", free)   # the constraint is what shows
    outs = llm.generate_batch([M1, M2, M3], max_tokens=60, grammar=RECORD_GRAMMAR)
    for out in outs:
        assert re.fullmatch(r"(\[e \| E[1-9] \| [a-z]{1,6}\]\n){1,3}", out), out
    assert [llm.generate(m, max_tokens=60, grammar=RECORD_GRAMMAR) for m in (M1, M2, M3)] == outs


def test_a_json_schema_holds_for_sampled_rows_too(llm):
    """Sampling: the mask runs before temperature and top-k/top-p (a filter first could leave only
    forbidden tokens), so every seed's answer is the schema's JSON."""
    pytest.importorskip("llguidance")
    p = SamplingParams(max_tokens=40, temperature=1.5, top_p=0.9, top_k=20, json_schema=ANSWER_SCHEMA)
    outs = {llm.generate(M2, p, seed=s) for s in range(4)}
    for out in outs:
        value = json.loads(out)
        assert set(value) == {"answer"} and len(value["answer"]) <= 8
    assert len(outs) > 1 and llm.generate(M2, p, seed=0) == llm.generate(M2, p, seed=0)


def test_constrained_requests_are_keyed_apart_from_the_unconstrained_answers_of_before(llm):
    """Until the hf backend enforced grammars it answered them unconstrained; those cached answers must
    never be replayed as constrained ones, while every other request keeps its key."""
    from kgrag_lib.llm.base import cache_key

    plain, gram = SamplingParams(max_tokens=8), SamplingParams(max_tokens=8, grammar=RECORD_GRAMMAR)
    assert llm.key_identity(plain) == llm.identity
    assert llm.key_identity(gram) == llm.identity + "#constrained=llguidance"
    assert llm.key_identity(SamplingParams(json_schema=ANSWER_SCHEMA)).endswith("#constrained=llguidance")
    assert cache_key("hf", llm.key_identity(gram), M1, gram) != cache_key("hf", llm.identity, M1, gram)


def test_a_grammar_llguidance_cannot_read_is_refused_naming_the_parameter(llm):
    pytest.importorskip("llguidance")
    from kgrag_lib.errors import ConfigError

    with pytest.raises(ConfigError, match="SamplingParams.grammar: llguidance"):
        llm.generate(M1, max_tokens=4, grammar='root ::= "a" undefined_rule')


def test_without_llguidance_a_constrained_request_says_what_to_install(llm, monkeypatch):
    import builtins

    from kgrag_lib.errors import BackendUnavailableError
    from kgrag_lib.llm.backends import hf_grammar

    real = builtins.__import__

    def no_llguidance(name, *a, **kw):
        if name.startswith("llguidance"):
            raise ImportError("No module named 'llguidance'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_llguidance)
    with pytest.raises(BackendUnavailableError, match=r"pip install \"llguidance>=1.0,<2\""):
        hf_grammar.Grammars(llm.tokenizer, 10, {0})


def test_every_grammar_and_schema_the_methods_send_compiles_in_llguidance(llm):
    """A constraint llguidance refused would stop a run on `hf:` mid-way (a ConfigError): each one
    the methods, the judge and DPO's judge send must compile."""
    pytest.importorskip("llguidance")
    from kgrag_lib.eval.judge import SCHEMA as JUDGE_SCHEMA
    from kgrag_lib.llm.backends import hf_grammar
    from kgrag_lib.methods.sa_rag import prompts as sa
    from kgrag_lib.methods.tcr_qf import prompts as tcr
    from kgrag_lib.train.judge_prompts import verdict_schema

    g = hf_grammar.Grammars(llm.tokenizer, len(llm.tokenizer), {llm.tokenizer.eos_token_id})
    schemas = {"sa-rag entities": sa.ENTITY_SCHEMA, "sa-rag relations": sa.RELATION_SCHEMA,
               "sa-rag reasoning": sa.REASONING_SCHEMA, "sa-rag decomposition": sa.DECOMPOSE_SCHEMA,
               "tcr enough": tcr.ENOUGH_SCHEMA, "tcr choice": tcr.choice_schema("relations", "relation",
                                                                                ["born in", "spouse"], 2),
               "judge": JUDGE_SCHEMA, "dpo judge": verdict_schema([1, 2, 3])}
    for what, schema in schemas.items():
        assert g.grammar("", schema), what
    assert g.grammar(tcr.GRAMMAR, "")
