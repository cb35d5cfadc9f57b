"""Which specs answer notebook 27's base and +DPO rows (`train.dpo_answer`): through vLLM with the
adapter when the generator is `vllm-serve:`, through transformers otherwise."""

from __future__ import annotations

from types import SimpleNamespace

from kgrag_lib.train.dpo_answer import answer_specs
from kgrag_lib.train.gguf_to_hf import BaseModel

GGUF = BaseModel("qwen2.5-coder-0.5b-q4", "/c/hf_from_gguf/1d96", "gguf-sha256=1d96", "gguf", "/m/q.gguf", "1d96")
HUB = BaseModel("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "root=Qwen/Qwen2.5-7B-Instruct@c0", "hub")


def result(adapter: bool) -> SimpleNamespace:
    files = {"model": "/r/dpo/model", **({"adapter": "/r/dpo/adapter"} if adapter else {})}
    return SimpleNamespace(model_spec="hf:/r/dpo/model", model_dir="/r/dpo/model", files=files)


def test_without_a_served_generator_both_rows_run_in_process():
    assert answer_specs("qwen2.5-coder-0.5b-q4", GGUF, result(True)) == ("hf:/c/hf_from_gguf/1d96", "hf:/r/dpo/model")
    assert answer_specs("hf:Qwen/Qwen2.5-7B-Instruct", HUB, result(True)) == ("Qwen/Qwen2.5-7B-Instruct",
                                                                             "hf:/r/dpo/model")


def test_a_served_generator_answers_with_the_adapter_on_its_own_server_options():
    gen = "vllm-serve:qwen2.5-coder-0.5b-q4?max_model_len=4096"
    base, tuned = answer_specs(gen, GGUF, result(True))
    assert base == gen   # the study's shared server answers the base rows
    assert tuned == "vllm-serve:qwen2.5-coder-0.5b-q4?max_model_len=4096&lora=dpo=/r/dpo/adapter"
    # a generator serving another model: the DPO base is served with the generator's options
    base, tuned = answer_specs("vllm-serve:Qwen/Qwen2.5-1.5B-Instruct?gpu_memory_utilization=0.5", HUB, result(True))
    assert base == "vllm-serve:Qwen/Qwen2.5-7B-Instruct?gpu_memory_utilization=0.5"
    assert tuned == "vllm-serve:Qwen/Qwen2.5-7B-Instruct?gpu_memory_utilization=0.5&lora=dpo=/r/dpo/adapter"


def test_a_full_fine_tune_serves_the_merged_folder():
    assert answer_specs("vllm-serve:Qwen/Qwen2.5-7B-Instruct", HUB, result(False)) == (
        "vllm-serve:Qwen/Qwen2.5-7B-Instruct", "vllm-serve:/r/dpo/model")
