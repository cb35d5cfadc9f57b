"""A GGUF file as a Hugging Face model folder, made once per file and cached.

Two consumers need the embedded Qwen2.5-Coder GGUF as dense weights: DPO training (trl cannot
train a GGUF, KG-Infused RAG §3.7) and vLLM (`vllm-serve:<GGUF preset>`). transformers dequantizes
it (`GgufConfig(dequantize=True)`) and we save that as a normal folder once, under
`cache_dir()/hf_from_gguf/<sha256 of the GGUF>`, so every later run, sweep point and server reuses
it. The folder is written to a temporary sibling and renamed into place, so an interrupted
conversion never leaves a half-written folder that looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import BackendUnavailableError, ConfigError
from ..paths import cache_dir
from .assets import file_sha256

SUBDIR = "hf_from_gguf"
SOURCE_FILE = "gguf_source.json"

# (gguf file) -> (model, tokenizer); injectable so the caching logic is testable without a GGUF.
Loader = Callable[[Path], tuple[Any, Any]]


def _load_dequantized(gguf: Path) -> tuple[Any, Any]:
    """Load a GGUF through transformers as a dense fp32 model (weights unpacked at load time)."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise BackendUnavailableError(f"converting a GGUF needs torch and transformers ({e})") from None
    kw: dict[str, Any] = {"gguf_file": gguf.name}
    model_kw = dict(kw, dtype=torch.float32)
    if hasattr(transformers, "GgufConfig"):  # transformers >= 5.x keeps GGUF blocks packed unless told
        model_kw["quantization_config"] = transformers.GgufConfig(dequantize=True)
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), **model_kw)
    except (OSError, ValueError, ImportError, KeyError) as e:
        raise BackendUnavailableError(f"transformers could not dequantize {gguf}: {type(e).__name__}: {e}") from e
    return model, tok


def _strip_quantizer(model: Any) -> None:
    """A dequantized model must save as a plain float checkpoint: drop any quantizer leftovers."""
    q = getattr(model, "hf_quantizer", None)
    if q is not None and hasattr(q, "remove_quantization_config"):
        q.remove_quantization_config(model)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "is_quantized", False):
        model.is_quantized = False


def hf_folder_from_gguf(
    gguf: str | os.PathLike,
    *,
    sha256: str | None = None,
    cache_root: str | os.PathLike | None = None,
    loader: Loader | None = None,
    progress: bool = True,
) -> Path:
    """The dequantized HF folder of a GGUF file, made once and cached by the file's sha256.

    `sha256` skips hashing when the caller already knows it (the embedded model's pinned
    hash). The folder holds `config.json`, `model.safetensors`, the tokenizer with its chat
    template, and `gguf_source.json` recording where it came from.
    """
    src = Path(gguf).expanduser()
    if not src.is_file():
        raise ConfigError(f"base_model: GGUF file {str(src)!r} does not exist; expected a path to a .gguf file")
    digest = sha256 or file_sha256(src)
    root = Path(cache_dir(cache_root)) / SUBDIR
    final = root / digest[:16]
    if (final / SOURCE_FILE).is_file() and (final / "config.json").is_file():
        recorded = json.loads((final / SOURCE_FILE).read_text(encoding="utf-8")).get("sha256")
        if recorded == digest:
            return final
        raise ConfigError(f"{final} was made from a GGUF with sha256 {recorded}, not {digest}; "
                          "delete the folder to convert again")
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{digest[:16]}-{os.getpid()}-{time.time_ns()}"
    if progress:
        print(f"dequantizing {src.name} to a transformers folder (once; cached in {final})", flush=True)
    start = time.perf_counter()
    try:
        model, tok = (loader or _load_dequantized)(src)
        _strip_quantizer(model)
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        info = {
            "gguf": str(src.resolve()), "sha256": digest, "size": src.stat().st_size,
            "has_chat_template": bool(getattr(tok, "chat_template", None)),
            "seconds": round(time.perf_counter() - start, 2),
            "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (tmp / SOURCE_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / SOURCE_FILE).is_file():  # not a concurrent twin that won the race
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
