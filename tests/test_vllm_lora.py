"""A LoRA adapter answered through a real vLLM (issue 58, item 2): `vllm-serve:<base>?lora=<name>=<folder>`.

The base is the embedded Qwen2.5-Coder-0.5B (its GGUF dequantized once to an HF folder, as
test_vllm_server.py serves it); the adapter is made here with peft on that folder, rank 8 on the
attention projections, with random non-zero weights (peft's init_lora_weights=False), so it moves the
answers. One server answers both: the base under the preset's name, the adapter under its own. The
adapter's answers differ from the base's for the same prompts, its fingerprint is in the cache key,
and a second client with the same identity replays every answer from the cache after the server has
stopped (so no request could have been made).

Run under the model lock: `flock /tmp/kgrag-model.lock .venv/bin/python -m pytest -m model tests/test_vllm_lora.py`.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from kgrag_lib.llm import load_llm

from test_vllm_server import PRESET, _embedded_or_skip, _engine_or_skip

pytestmark = [pytest.mark.model, pytest.mark.vllm]

PROMPTS = ["What is the capital of France? Answer in one word.",
           "Write a Python function that adds two numbers.",
           "Name three colours."]


def Q(text):
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def base_folder():
    from kgrag_lib.llm.hf_from_gguf import hf_folder_from_gguf

    _engine_or_skip()
    path, sha = _embedded_or_skip()
    return hf_folder_from_gguf(path, sha256=sha)


@pytest.fixture(scope="module")
def adapter(base_folder, tmp_path_factory):
    peft = pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(base_folder), torch_dtype=torch.float32)
    cfg = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                          task_type="CAUSAL_LM")
    out = tmp_path_factory.mktemp("adapter") / "tiny"
    peft.get_peft_model(model, cfg).save_pretrained(str(out))
    del model
    return out


def test_the_adapter_answers_through_vllm_differently_and_replays_from_the_cache(base_folder, adapter, tmp_path):
    from kgrag_lib.llm.lora import adapter_fingerprint

    recorded = json.loads((adapter / "adapter_config.json").read_text())
    assert recorded["r"] == 8 and recorded["base_model_name_or_path"] == str(base_folder)
    cache = tmp_path / "llm.sqlite"
    spec = f"vllm-serve:{PRESET}?max_model_len=2048&cpu_kvcache_gib=1&lora=tiny={adapter}"
    llm = load_llm(spec, cache_path=cache, log_dir=tmp_path / "log")
    try:
        server = llm.managed
        assert llm.model == "tiny" and server.alias == "tiny"
        cmd = server.cmd
        assert "--enable-lora" in cmd and cmd[cmd.index("--lora-modules") + 1] == f"tiny={adapter.resolve()}"
        assert cmd[cmd.index("--max-lora-rank") + 1] == "8" and cmd[cmd.index("--served-model-name") + 1] == PRESET
        weights = llm.identity.split("|weights=", 1)[1]
        assert weights.endswith(f";lora={adapter_fingerprint(adapter)[:32]}")
        listed = {m["id"]: m for m in json.loads(urllib.request.urlopen(server.base_url + "/models", timeout=10)
                                                  .read())["data"]}
        assert set(listed) == {PRESET, "tiny"}
        base = load_llm(f"openai:{server.base_url}#{PRESET}", cache=False, weights=weights.split(";lora=")[0],
                        timeout=llm.timeout)
        tuned = [llm.generate(Q(p), max_tokens=24) for p in PROMPTS]
        plain = [base.generate(Q(p), max_tokens=24) for p in PROMPTS]
        assert llm.usage.calls == len(PROMPTS) and base.usage.calls == len(PROMPTS)
        assert "Paris" in plain[0], plain
        assert all(t != p for t, p in zip(tuned, plain)), (tuned, plain)
        assert llm.identity != base.identity
    finally:
        llm.close()
    assert not server.running
    # a second run: the same identity, the server gone; every answer comes from the cache
    again = load_llm(f"openai:{server.base_url}#tiny?flavor=vllm", cache_path=cache, weights=weights, probe=False,
                     timeout=5, max_retries=0)
    assert again.identity == llm.identity
    assert [again.generate(Q(p), max_tokens=24) for p in PROMPTS] == tuned
    assert again.usage.calls == 0 and again.usage.cache_hits == len(PROMPTS)
