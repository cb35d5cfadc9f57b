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

torch.set_num_threads(1)

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
def test_embedded_qwen_dpo_merge_and_generate(tmp_path):
    """Dequantize the embedded Qwen2.5-Coder-0.5B GGUF, 2 LoRA steps on 4 pairs, merge, and answer
    through `load_llm("hf:<merged>")`: its identity (cache key part) differs from the base's."""
    from kgrag_lib.llm import load_llm
    from kgrag_lib.llm.base import request_key
    from kgrag_lib.llm.base import SamplingParams

    cfg = dt.dpo_config("cpu-smoke", max_steps=2, batch_size=1, gradient_accumulation_steps=2,
                        max_length=128, max_pairs=4)
    pairs = [_pair("what is the capital of france", "Paris.", "I do not know, maybe Berlin or Rome."),
             _pair("who directed the film Jaws", "Steven Spielberg.", "It was a film about a shark."),
             _pair("what is the capital of spain", "Madrid.", "Spain is a country in Europe."),
             _pair("when was Craig Newmark born", "December 6, 1952.", "He founded craigslist.")]
    res = dt.train_dpo(cfg, pairs, tmp_path / "out", progress=False)
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
