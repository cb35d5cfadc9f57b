"""DPO training (KG-Infused RAG §3.7, App. E): the pipeline on a tiny random Qwen2 model built
here (seconds of CPU), config refusals, data checks, resume; one real-model test (marker `model`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

from kgrag_lib.errors import ConfigError, DataFormatError  # noqa: E402
from kgrag_lib.train import dpo_train as dt  # noqa: E402
from kgrag_lib.train.gguf_to_hf import hf_folder_from_gguf, resolve_base_model  # noqa: E402


@pytest.fixture(autouse=True)
def _one_torch_thread(request):
    """The tiny random model trains faster on one thread; set for this module's tests only and put back
    after each (at import it held for the whole session: every later embedding and transformers model in
    the run got one thread). The real-model test keeps the machine's threads."""
    if request.node.get_closest_marker("model"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


WORDS = ("the a is of in to and was who what where when which born film director capital city country "
         "paris france berlin germany rome italy madrid spain answer question notes triples passage entity "
         "year wrote song album river mountain lake 1952 1960 1974 yes no unknown").split()
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")


def _tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "<unk>": 3}
    for w in WORDS + ["user", "assistant", "system"]:
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<|im_end|>", unk_token="<unk>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _tiny_model(vocab_size: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=0, eos_token_id=2, bos_token_id=None)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg)


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer Qwen2 (hidden 32) with a word-level tokenizer: < 1 MB."""
    folder = tmp_path_factory.mktemp("tiny_base")
    tok = _tiny_tokenizer()
    _tiny_model(len(tok)).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def _pair(q: str, good: str, bad: str, extra: str = "") -> dict:
    return {"prompt": [{"role": "user", "content": f"question {q} {extra}".strip()}],
            "chosen": [{"role": "assistant", "content": good}],
            "rejected": [{"role": "assistant", "content": bad}],
            "id": q, "judge": "scripted"}          # metadata fields are ignored


PAIRS = [
    _pair("what is the capital of france", "paris", "berlin germany"),
    _pair("what is the capital of germany", "berlin", "rome italy"),
    _pair("what is the capital of italy", "rome", "madrid spain"),
    _pair("what is the capital of spain", "madrid", "paris france"),
    _pair("who wrote the song", "unknown", "the river"),
    _pair("when was the director born", "1952", "1974 1960"),
]
LONG = _pair("which film", "yes", "no", extra=" ".join(["passage entity triples notes"] * 40))


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cfg(base: Path, tmp: Path, **kw) -> dt.DPOTrainConfig:
    settings = dict(base_model=str(base), max_steps=3, batch_size=2, gradient_accumulation_steps=1,
                    learning_rate=5e-3, max_length=64, max_pairs=None, lora_r=4, lora_alpha=8,
                    lora_dropout=0.0, logging_steps=1, cache_dir=str(tmp / "cache"))
    settings.update(kw)
    return dt.dpo_config("cpu-smoke", **settings)


@pytest.fixture(scope="module")
def trained(tiny_base, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dpo_run")
    data = _write_jsonl(tmp / "pairs.jsonl", PAIRS + [LONG])
    cfg = _cfg(tiny_base, tmp)
    res = dt.train_dpo(cfg, data, tmp / "out", progress=False)
    return cfg, data, tmp, res


# ---- the pipeline ------------------------------------------------------------------------

def test_lora_run_logs_losses_rewards_and_writes_files(trained, tiny_base):
    _, _, tmp, res = trained
    steps = [h for h in res.log_history if "loss" in h]
    assert res.n_steps == 3 and len(steps) == 3
    for key in ("loss", "rewards/margins", "rewards/accuracies", "rewards/chosen", "rewards/rejected"):
        assert all(key in h for h in steps), key
    assert res.n_pairs_input == 7 and res.n_dropped_overlong == 1 and res.n_pairs_used == 6
    assert any("longer than max_length" in w for w in res.warnings)
    assert not any("0.6931" in w for w in res.warnings)   # lr 5e-3 moves the policy after step 1
    out = Path(res.out_dir)
    for name in ("result.json", "metrics.json", "log_history.json", "manifest.json", "run.json"):
        assert (out / name).is_file(), name
    png = Path(res.files["figure"])
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_pairs_used"] == 6 and metrics["final_loss"] == steps[-1]["loss"]
    assert res.manifest["versions"].get("trl") and "git" in res.manifest
    assert not (out / "trainer").exists() and not (out / "model.tmp").exists()
    assert res.effective_batch_size == 2 and res.data_source.endswith("pairs.jsonl")


def test_merged_folder_loads_and_has_its_own_identity(trained, tiny_base):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kgrag_lib.llm.backends.hf import dir_fingerprint

    _, _, _, res = trained
    model_dir = Path(res.model_dir)
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "config.json").is_file()
    assert not any(p.name.startswith("adapter_") for p in model_dir.iterdir())   # merged, not an adapter
    m = AutoModelForCausalLM.from_pretrained(str(model_dir))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    assert not hasattr(m, "peft_config")
    ids = tok("question what is the capital of france", return_tensors="pt")
    with torch.no_grad():
        assert torch.isfinite(m(**ids).logits).all()
    assert res.identity == f"hf-dir:{dir_fingerprint(model_dir)}"
    assert res.identity != f"hf-dir:{dir_fingerprint(tiny_base)}" == res.base_model["identity"]
    assert res.model_spec == f"hf:{model_dir}"
    assert Path(res.files["adapter"], "adapter_config.json").is_file()
    base = AutoModelForCausalLM.from_pretrained(str(tiny_base))
    changed = [n for n, p in m.state_dict().items() if not torch.equal(p, base.state_dict()[n])]
    assert changed, "merging the adapter changed no weight"


def test_merged_model_runs_through_the_hf_backend(trained, tmp_path):
    from kgrag_lib.llm import load_llm

    _, _, _, res = trained
    llm = load_llm(res.model_spec, cache_path=tmp_path / "llm.sqlite")   # no allow_cpu needed for hf:<folder>
    assert llm.identity == res.identity
    text = llm.generate([{"role": "user", "content": "question what is the capital of france"}], max_tokens=4)
    assert isinstance(text, str)


def test_resume_returns_the_finished_run_without_training(trained, monkeypatch):
    cfg, data, tmp, res = trained
    import trl

    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(trl, "DPOTrainer", no_training)
    again = dt.train_dpo(cfg, data, tmp / "out", progress=False)
    assert again.resumed and not res.resumed
    assert again.identity == res.identity and again.log_history == res.log_history


def test_resume_with_other_settings_is_refused(trained):
    cfg, data, tmp, _ = trained
    other = dt.dpo_config(dt.to_dict(cfg) | {"beta": 0.5})
    with pytest.raises(ConfigError, match=r"beta: 0\.1 there, 0\.5 now"):
        dt.train_dpo(other, data, tmp / "out", progress=False)
    more = _write_jsonl(tmp / "more.jsonl", PAIRS[:3])
    with pytest.raises(ConfigError, match="data hash"):
        dt.train_dpo(cfg, more, tmp / "out", progress=False)


def test_foreign_out_dir_is_refused(tiny_base, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        dt.train_dpo(_cfg(tiny_base, tmp_path), PAIRS, out, progress=False)


def test_full_finetune_with_tr_dpo_sync_on_cpu(tiny_base, tmp_path):
    """Table 20's method (full fine-tune, TR-DPO reference sync) in fp32 on the tiny model."""
    cfg = _cfg(tiny_base, tmp_path, lora=False, sync_ref_model=True, ref_model_sync_steps=1,
               ref_model_mixup_alpha=0.6, max_steps=2, learning_rate=1e-3)
    res = dt.train_dpo(cfg, PAIRS[:4], tmp_path / "full", progress=False)
    assert res.n_steps == 2 and "adapter" not in res.files and res.data_source == "<list>"
    assert Path(res.model_dir, "config.json").is_file()
    assert res.identity != res.base_model["identity"]
    assert not any(d.startswith("sync_ref_model") for d in res.deviations_from_table20)


def test_all_pairs_too_long_is_refused(tiny_base, tmp_path):
    with pytest.raises(ConfigError, match="none of the 1 pairs .* fits max_length=64"):
        dt.train_dpo(_cfg(tiny_base, tmp_path), [LONG], tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()      # nothing claimed: a retry with a larger max_length may go ahead


# ---- config -----------------------------------------------------------------------------

def test_bf16_on_cpu_is_refused(tiny_base, tmp_path):
    cfg = _cfg(tiny_base, tmp_path, bf16=True)
    with pytest.raises(ConfigError, match="bf16=True needs a CUDA GPU"):
        cfg.validate(cuda=False)
    cfg.validate(cuda=True)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="bf16"):
            dt.train_dpo(cfg, PAIRS, tmp_path / "o", progress=False)
        assert not (tmp_path / "o").exists()


def test_sync_ref_model_with_lora_is_refused():
    cfg = dt.dpo_config("cpu-smoke", sync_ref_model=True)
    with pytest.raises(ConfigError, match="sync_ref_model=True and lora=True"):
        cfg.validate(cuda=False)
    dt.dpo_config("cpu-smoke", sync_ref_model=True, lora=False).validate(cuda=False)


@pytest.mark.parametrize("field,value,needle", [
    ("beta", 0.0, "beta"), ("batch_size", 0, "batch_size"), ("overlong", "cut", "overlong"),
    ("lora_target_modules", ["lm_head"], "lm_head"), ("max_pairs", 0, "max_pairs"),
    ("ref_model_mixup_alpha", 1.5, "ref_model_mixup_alpha"), ("max_length", 8, "max_length"),
])
def test_bad_values_are_refused(field, value, needle):
    with pytest.raises(ConfigError, match=needle):
        dt.dpo_config("cpu-smoke", **{field: value}).validate(cuda=False)


def test_profiles_and_deviations():
    full = dt.dpo_config("gpu-paper-full")
    full.validate(cuda=True)
    assert (full.beta, full.learning_rate, full.num_epochs, full.batch_size, full.max_length) == \
        (0.1, 5e-7, 1.0, 1, 8000)
    assert not full.lora and full.bf16 and full.sync_ref_model and full.ref_model_mixup_alpha == 0.6
    assert dt.deviations_from_table20(full, world_size=4) == []     # the paper's 4 GPUs x 1 pair
    assert dt.deviations_from_table20(full, world_size=8) == ["effective_batch_size: 8 instead of 4 (pairs per "
                                                              "optimizer step = batch_size x "
                                                              "gradient_accumulation_steps x processes)"]
    one_gpu = dt.dpo_config("gpu-paper")                            # the one-GPU default: bf16 LoRA
    one_gpu.validate(cuda=True)
    assert one_gpu.lora and one_gpu.bf16 and not one_gpu.sync_ref_model and not one_gpu.load_in_4bit
    assert one_gpu.batch_size * one_gpu.gradient_accumulation_steps == 4 and one_gpu.max_length == 8000
    dev = dt.deviations_from_table20(one_gpu, world_size=1)
    assert sorted(d.split(":")[0] for d in dev) == ["learning_rate", "lora", "sync_ref_model"]
    smoke = dt.dpo_config("cpu-smoke")
    smoke.validate(cuda=False)
    dev = " | ".join(dt.deviations_from_table20(smoke, world_size=1))
    for name in ("lora", "sync_ref_model", "bf16", "max_length", "learning_rate", "max_pairs"):
        assert name + ":" in dev, name
    assert "PEFT" in dev
    with pytest.raises(ConfigError, match="unknown parameter 'betta'"):
        dt.dpo_config("cpu-smoke", betta=0.2)
    with pytest.raises(ConfigError, match="learning_rate"):
        dt.dpo_config("cpu-smoke", learning_rate="fast")
    with pytest.raises(ConfigError, match="gpu-paper"):
        dt.dpo_config("gpu-huge")


def test_default_out_dir_names_the_run():
    cfg = dt.dpo_config("cpu-smoke", output_root="runs/x")
    a = dt.default_out_dir(cfg, "0" * 64)
    assert a.parent == Path("runs/x") and a.name.startswith("dpo-qwen2.5-coder-0.5b-q4-lora-b0.1-lr5e-05-")
    assert dt.default_out_dir(dt.dpo_config("cpu-smoke", beta=0.2), "0" * 64).name != a.name
    assert dt.default_out_dir(cfg, "1" * 64) != a


def test_stuck_loss_is_reported():
    flat = [{"loss": 0.6931471805599453, "rewards/margins": 0.0, "rewards/chosen": 0.0, "step": s}
            for s in (1, 2, 3)]
    assert "0.6931" in dt.stuck_warning(flat, 3)
    moving = flat[:1] + [{"loss": 0.68, "rewards/margins": 0.02, "rewards/chosen": 0.01, "step": 2}]
    assert dt.stuck_warning(moving, 2) is None
    assert "single optimizer step" in dt.stuck_warning(flat[:1], 1)


# ---- data -------------------------------------------------------------------------------

def test_empty_jsonl_is_refused(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n")
    with pytest.raises(DataFormatError, match=r"empty\.jsonl.*at least one preference pair"):
        dt.load_pairs(p)
    with pytest.raises(DataFormatError, match="at least one preference pair"):
        dt.load_pairs([])


def test_bad_rows_name_file_and_line(tmp_path):
    bad = dict(PAIRS[1])
    del bad["rejected"]
    p = _write_jsonl(tmp_path / "bad.jsonl", [PAIRS[0], bad])
    with pytest.raises(DataFormatError, match=r"bad\.jsonl:2: .*missing rejected"):
        dt.load_pairs(p)
    p.write_text(json.dumps(PAIRS[0]) + "\n{not json\n")
    with pytest.raises(DataFormatError, match=r"bad\.jsonl:2: .*one JSON object per line"):
        dt.load_pairs(p)
    wrong_role = dict(PAIRS[0], chosen=[{"role": "user", "content": "paris"}])
    with pytest.raises(DataFormatError, match=r"row:1: .*'chosen' is messages that are not all role 'assistant'"):
        dt.load_pairs([wrong_role])
    mixed = dict(PAIRS[0], chosen="paris")
    with pytest.raises(DataFormatError, match="all text or all messages"):
        dt.load_pairs([mixed])


def test_dataset_input_keeps_only_the_three_columns():
    import datasets

    ds = datasets.Dataset.from_list(PAIRS)
    rows, label = dt.load_pairs(ds)
    assert label == "<Dataset>" and len(rows) == 6 and set(rows[0]) == {"prompt", "chosen", "rejected"}
    assert dt.data_hash(rows) == dt.data_hash(dt.load_pairs(PAIRS)[0])
    with pytest.raises(DataFormatError, match="missing rejected"):
        dt.load_pairs(ds.remove_columns("rejected"))


# ---- GGUF -> HF folder (caching logic; the loader is faked, no GGUF is read) -------------

def test_gguf_folder_is_made_once_and_keyed_by_sha(tiny_base, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF not a real model")
    calls = []

    def loader(path):
        calls.append(path)
        return AutoModelForCausalLM.from_pretrained(str(tiny_base)), AutoTokenizer.from_pretrained(str(tiny_base))

    sha = "ab" * 32
    a = hf_folder_from_gguf(fake, sha256=sha, cache_root=tmp_path / "c", loader=loader, progress=False)
    b = hf_folder_from_gguf(fake, sha256=sha, cache_root=tmp_path / "c", loader=loader, progress=False)
    assert a == b == tmp_path / "c" / "hf_from_gguf" / sha[:16] and len(calls) == 1
    assert json.loads((a / "gguf_source.json").read_text())["sha256"] == sha
    assert (a / "model.safetensors").is_file() and not list(a.parent.glob(".tmp-*"))

    def broken(path):
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        hf_folder_from_gguf(fake, sha256="cd" * 32, cache_root=tmp_path / "c", loader=broken, progress=False)
    assert not (a.parent / ("cd" * 8)).exists() and not list(a.parent.glob(".tmp-*"))
    base = resolve_base_model(str(fake), cache_root=tmp_path / "c2", loader=loader, progress=False)
    assert base.source == "gguf" and base.identity.startswith("hf-dir:") and Path(base.path).is_dir()


def test_resolve_base_model_forms(tiny_base):
    assert resolve_base_model(f"hf:{tiny_base}").source == "folder"
    assert resolve_base_model("qwen2.5-7b-instruct").path == "Qwen/Qwen2.5-7B-Instruct"
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_base_model("./no/such/folder")


# ---- the real embedded model (slow; not run by default) ----------------------------------

@pytest.mark.model
def test_embedded_qwen_dpo_merge_and_generate(dpo_trained, tmp_path):
    """Dequantize the embedded Qwen2.5-Coder-0.5B GGUF, 2 LoRA steps on 4 pairs (the session's `dpo_trained`),
    merge, and answer through `load_llm("hf:<merged>")`: its identity (cache key part) differs from the base's."""
    from kgrag_lib.llm import load_llm
    from kgrag_lib.llm.base import request_key
    from kgrag_lib.llm.base import SamplingParams

    res = dpo_trained
    assert res.n_steps == 2 and res.n_pairs_used == 4
    assert all("rewards/margins" in h for h in res.log_history if "loss" in h)
    base_dir = res.base_model["path"]
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    trained = load_llm(res.model_spec, cache_path=tmp_path / "llm.sqlite")
    answer = trained.generate(msgs, max_tokens=8)
    assert isinstance(answer, str) and answer.strip()
    base = load_llm(f"hf:{base_dir}", cache_path=tmp_path / "llm.sqlite")
    assert base.identity == res.base_model["identity"] != trained.identity
    p = SamplingParams(max_tokens=8)
    assert request_key(base.backend, base.identity, msgs, p) != request_key(trained.backend, trained.identity, msgs, p)


# ---- memory plan (dpo_memory): the real 7-8B configs, written as config.json, no weights ----

QWEN25_7B = dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                 num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
                 tie_word_embeddings=False)
LLAMA31_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
                  tie_word_embeddings=False)


@pytest.mark.parametrize("config,n_params", [(QWEN25_7B, 7_615_616_512), (LLAMA31_8B, 8_030_261_248)])
def test_memory_plans_of_the_paper_models(tmp_path, config, n_params):
    """From config.json alone: bf16 LoRA (the gpu-paper set) fits one 80 GB GPU, a full fine-tune
    (fp32 or bf16 autocast) does not, and the bf16 full fine-tune sharded over 8 GPUs does."""
    from kgrag_lib.train import dpo_memory as dm

    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = dm.model_shape(tmp_path)
    assert shape.n_params == n_params                       # the published 7.62B / 8.03B
    one = dt.dpo_config("gpu-paper")
    lora = dm.plan_for(one, str(tmp_path), n_gpus=1, sharded=False, gpu_gib=80.0, cuda=True)
    # trl 1.16's fused LM head holds one 4096 x 32768 tile, not 16,000 rows of logits: ~0.7 GiB, so a
    # 7-8B bf16 LoRA plan at 8,000 tokens is about 24-26 GiB (it fits an A100-40GB)
    assert lora.mode == "lora" and lora.fits and 20 < lora.total_gib < 30, lora.describe()
    assert dm.estimate_dpo_memory(shape, mode="lora", dtype="bf16", seq_len=8000, gpu_gib=40.0).fits
    assert lora.reference_gib == 0 and 35e6 < lora.trainable_params < 45e6   # rank-16 adapters on 7 maps
    kw = dict(seq_len=8000, batch=1, gpu_gib=80.0)
    full32 = dm.estimate_dpo_memory(shape, mode="full", dtype="fp32", **kw)
    assert not full32.fits and full32.total_gib > 150
    assert full32.weights_gib == pytest.approx(4 * n_params / 2**30)       # fp32 master weights
    assert full32.optimizer_gib == pytest.approx(2 * full32.weights_gib)   # AdamW's two moments
    assert not dm.estimate_dpo_memory(shape, mode="full", dtype="bf16", **kw).fits
    sharded8 = dm.estimate_dpo_memory(shape, mode="full", dtype="bf16", n_gpus=8, sharded=True, **kw)
    assert sharded8.fits and sharded8.weights_gib == pytest.approx(full32.weights_gib / 8)
    unsharded8 = dm.estimate_dpo_memory(shape, mode="full", dtype="bf16", n_gpus=8, sharded=False, **kw)
    assert not unsharded8.fits                              # DDP: every GPU holds everything
    qlora = dm.estimate_dpo_memory(shape, mode="qlora", dtype="bf16", **kw)
    assert qlora.weights_gib < lora.weights_gib / 2
    assert dm.min_sharded_gpus(shape, 80.0, mode="full", dtype="bf16", seq_len=8000, batch=1) in (2, 4)
    print(f"\n{lora.describe()}\n{full32.describe()}\n{sharded8.describe()}")


def test_memory_plan_of_a_tiny_config_and_refusal(tiny_base, tmp_path, monkeypatch):
    """The estimate reads the folder's config.json (tiny Qwen2 here); a plan over the visible GPU
    is refused before the model is loaded, naming the options, unless memory_check=False."""
    from kgrag_lib.train import dpo_memory as dm

    shape = dm.model_shape(tiny_base)
    real = sum(p.numel() for p in _tiny_model(len(_tiny_tokenizer())).parameters())
    assert shape.n_params == real and shape.n_layers == 2 and shape.hidden_size == 32
    cfg = _cfg(tiny_base, tmp_path, lora=False)
    plan = dm.plan_for(cfg, str(tiny_base), gpu_gib=0.001, cuda=True)
    assert plan.fits is False and plan.mode == "full" and plan.dtype == "fp32"
    msg = dm.refusal(plan, str(tiny_base), cfg)
    assert "does NOT fit" in msg and "gpu-paper" in msg and "memory_check=False" in msg
    with pytest.raises(ConfigError, match="mode"):
        dm.estimate_dpo_memory(shape, mode="half")
    # train_dpo refuses a plan that does not fit "the visible GPU" before claiming the folder
    monkeypatch.setattr(dm, "visible_gpu_gib", lambda: 0.001)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match="refused before loading the model"):
        dt.train_dpo(cfg, PAIRS[:2], tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()


def test_qlora_is_refused_without_cuda_or_bitsandbytes(monkeypatch):
    cfg = dt.dpo_config("gpu-paper", load_in_4bit=True)
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        cfg.validate(cuda=False)
    with pytest.raises(ConfigError, match="needs lora=True and bf16=True"):
        dt.dpo_config("gpu-paper-full", load_in_4bit=True).validate(cuda=True)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    with pytest.raises(ConfigError, match="pip install 'bitsandbytes"):
        cfg.validate(cuda=True)
    assert "load_in_4bit: True" in " ".join(dt.deviations_from_table20(cfg, world_size=1))
    assert dt.config_hash(dt.dpo_config("gpu-paper")) != dt.config_hash(cfg)


# ---- several processes: accelerate launch, 2 processes on CPU (gloo) vs 1 -----------------

def test_two_processes_match_one_process(tiny_base, tmp_path):
    """`accelerate launch` of `python -m kgrag_lib.train` with 2 processes on CPU (gloo,
    DDP) versus one process with 2 accumulation steps, on the same 2 pairs: a full fine-tune with
    TR-DPO sync after every step, 2 optimizer steps (the first is scored before any update, so the
    second loss and the trained weights are what the gradient all-reduce decides)."""
    import os
    import subprocess
    import sys
    import time

    from safetensors.torch import load_file

    pairs = _write_jsonl(tmp_path / "pairs.jsonl", PAIRS[:2])
    common = dict(lora=False, sync_ref_model=True, ref_model_sync_steps=1, batch_size=1, max_steps=2,
                  learning_rate=1e-3, max_length=64)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), OMP_NUM_THREADS="1",
               HF_HOME=str(tmp_path / "hf"), CUDA_VISIBLE_DEVICES="")
    # accelerate 1.x runs `--cpu --num_processes 2` as ONE process unless MPI is set up; `--multi_gpu`
    # on a machine without CUDA starts 2 torchrun workers, which accelerate runs on CPU with gloo.
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "-m", "kgrag_lib.train", "--training", "cpu-smoke", "--base-model", str(tiny_base),
           "--pairs", str(pairs), "--out", str(tmp_path / "two"), "--quiet",
           "--set", "max_pairs=null", "--set", f"cache_dir={tmp_path / 'cache'}", "--set", "gradient_accumulation_steps=1",
           *[a for k, v in common.items() for a in ("--set", f"{k}={json.dumps(v)}")]]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = dt.DPOResult.from_dir(tmp_path / "two")
    assert two.launch["world_size"] == 2 and two.launch["backend"] == "gloo" and two.launch["device"].startswith("cpu")
    assert two.effective_batch_size == 2 and two.n_steps == 2
    one = dt.train_dpo(_cfg(tiny_base, tmp_path, gradient_accumulation_steps=2, **common), pairs,
                       tmp_path / "one", progress=False)
    assert one.launch["world_size"] == 1 and one.effective_batch_size == 2
    l2 = [h["loss"] for h in two.log_history if "loss" in h]
    l1 = [h["loss"] for h in one.log_history if "loss" in h]
    print(f"\n2 processes: losses {l2}; 1 process: {l1}; launch wall {wall:.1f} s")
    assert len(l1) == len(l2) == 2 and l1[0] == pytest.approx(0.6931, abs=1e-4)
    assert l2 == pytest.approx(l1, abs=1e-5) and abs(l1[1] - l1[0]) > 1e-4    # the update moved the loss
    w1 = load_file(str(Path(one.model_dir) / "model.safetensors"))
    w2 = load_file(str(Path(two.model_dir) / "model.safetensors"))
    base = load_file(str(tiny_base / "model.safetensors"))
    diff = max((w1[k].float() - w2[k].float()).abs().max().item() for k in w1)
    moved = max((w1[k].float() - base[k].float()).abs().max().item() for k in w1)
    assert diff < 1e-5 < moved


def test_cli_plan_only_and_shipped_config(tiny_base, capsys):
    from kgrag_lib.cli import main

    assert main(["train", "dpo", "--training", "gpu-paper-full", "--base-model", str(tiny_base), "--plan-only",
                 "--gpus", "4", "--sharded", "--gpu-gib", "80", "--quiet"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plan["mode"] == "full" and plan["n_gpus"] == 4 and plan["sharded"] and plan["fits"]
    assert main(["train", "accelerate-config", "fsdp"]) == 0
    import yaml

    cfg = yaml.safe_load(Path(capsys.readouterr().out.strip()).read_text())
    assert cfg["distributed_type"] == "FSDP" and cfg["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert main(["train", "dpo", "--base-model", str(tiny_base)]) == 2      # no --pairs: one-line refusal
    assert "--pairs PATH is required" in capsys.readouterr().err


def test_plan_only_reads_a_ggufs_metadata_and_refuses_zero_gpus(monkeypatch, capsys):
    """Issue 40: `train dpo --plan-only` on a GGUF preset dequantized the model (2.4 GB for the
    1.5B) although a plan needs its config only; `--gpus 0` planned one GPU."""
    from kgrag_lib.cli import main
    from kgrag_lib.train import gguf_to_hf

    def no_dequantizing(*a, **kw):
        raise AssertionError("a memory plan must not dequantize the model")

    monkeypatch.setattr(gguf_to_hf, "hf_folder_from_gguf", no_dequantizing)
    assert main(["train", "dpo", "--training", "cpu-smoke", "--base-model", "qwen2.5-coder-0.5b-q4", "--plan-only",
                 "--gpus", "1", "--gpu-gib", "24", "--quiet"]) in (0, 1)
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plan["n_gpus"] == 1 and plan["mode"] == "lora"
    assert main(["train", "dpo", "--base-model", "qwen2.5-coder-0.5b-q4", "--plan-only", "--gpus", "0"]) == 2
    assert "--gpus 0: expected the number of GPUs" in capsys.readouterr().err
