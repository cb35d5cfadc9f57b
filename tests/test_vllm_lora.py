"""A DPO-trained LoRA adapter answered through a real vLLM (issue 58, item 2): `vllm-serve:<base>?lora=<name>=<folder>`.

The base is the embedded Qwen2.5-Coder-0.5B (its GGUF dequantized once to an HF folder, as
test_vllm_server.py serves it); the adapter is trained here by notebook 27's CPU path (`train_dpo`,
cpu-smoke: 2 LoRA steps on 4 pairs; conftest's `dpo_trained`, shared with test_dpo_train) and the spec is the one notebook 27 builds (`dpo_answer`). One
server answers both: the base under the preset's name, the adapter under its own. The adapter's
answers differ from the base's for the same prompts, its fingerprint is in the cache key, and a
second client with the same identity replays every answer from the cache after the server has
stopped (so no request could have been made).

Run under the model lock: `flock /tmp/kgrag-model.lock .venv/bin/python -m pytest -m model tests/test_vllm_lora.py`.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from kgrag_lib.llm import load_llm

from test_vllm_server import EAGER, PRESET, _embedded_or_skip, _engine_or_skip

pytestmark = [pytest.mark.model, pytest.mark.vllm]

PROMPTS = ["What is the capital of France? Answer in one word.",
           "Write a Python function that adds two numbers.",
           "Name three colours."]


def Q(text):
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def trained(request):
    """The session's DPO adapter (conftest `dpo_trained`), trained only where vLLM can serve it."""
    _engine_or_skip()
    _embedded_or_skip()
    return request.getfixturevalue("dpo_trained")


def test_the_dpo_adapter_answers_through_vllm_differently_and_replays_from_the_cache(trained, tmp_path):
    from kgrag_lib.llm.lora import adapter_fingerprint
    from kgrag_lib.train.dpo_answer import answer_specs
    from kgrag_lib.train.gguf_to_hf import BaseModel

    adapter = Path(trained.files["adapter"])
    recorded = json.loads((adapter / "adapter_config.json").read_text())
    assert recorded["base_model_name_or_path"] == trained.base_model["path"]
    generator = f"vllm-serve:{PRESET}?max_model_len=2048&cpu_kvcache_gib=1&{EAGER}"   # eager: test_vllm_server
    base_spec, spec = answer_specs(generator, BaseModel(**trained.base_model), trained)   # notebook 27's route
    assert base_spec == generator and spec == f"{generator}&lora=dpo={adapter}"
    cache = tmp_path / "llm.sqlite"
    llm = load_llm(spec, cache_path=cache, log_dir=tmp_path / "log")
    try:
        server = llm.managed
        assert llm.model == "dpo" and server.alias == "dpo"
        cmd = server.cmd
        assert "--enable-lora" in cmd and cmd[cmd.index("--lora-modules") + 1] == f"dpo={adapter.resolve()}"
        assert cmd[cmd.index("--max-lora-rank") + 1] == str(recorded["r"])
        assert cmd[cmd.index("--served-model-name") + 1] == PRESET
        weights = llm.identity.split("|weights=", 1)[1]
        assert weights.endswith(f";lora={adapter_fingerprint(adapter)[:32]}")
        listed = {m["id"]: m for m in json.loads(urllib.request.urlopen(server.base_url + "/models", timeout=10)
                                                  .read())["data"]}
        assert set(listed) == {PRESET, "dpo"}
        base = load_llm(f"openai:{server.base_url}#{PRESET}", cache=False, weights=weights.split(";lora=")[0],
                        timeout=llm.timeout)
        tuned = [llm.generate(Q(p), max_tokens=24) for p in PROMPTS]
        plain = [base.generate(Q(p), max_tokens=24) for p in PROMPTS]
        assert llm.usage.calls == len(PROMPTS) and base.usage.calls == len(PROMPTS)
        assert "Paris" in plain[0], plain
        print("adapter:", tuned, "\nbase:   ", plain)
        assert sum(t != p for t, p in zip(tuned, plain)) >= 2, (tuned, plain)   # 2 steps at a high rate move them
        assert llm.identity != base.identity
    finally:
        llm.close()
    assert not server.running
    # a second run: the same identity, the server gone; every answer comes from the cache
    again = load_llm(f"openai:{server.base_url}#dpo?flavor=vllm", cache_path=cache, weights=weights, probe=False,
                     timeout=5, max_retries=0)
    assert again.identity == llm.identity
    assert [again.generate(Q(p), max_tokens=24) for p in PROMPTS] == tuned
    assert again.usage.calls == 0 and again.usage.cache_hits == len(PROMPTS)
