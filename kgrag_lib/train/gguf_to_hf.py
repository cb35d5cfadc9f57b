"""Turn the base model of a DPO run into a Hugging Face folder trl can train.

KG-Infused RAG trains its generator with DPO (§3.7, App. E). On CPU our generator is the
embedded Qwen2.5-Coder-0.5B-Instruct Q4 GGUF, which trl cannot train directly: transformers
dequantizes it (`GgufConfig(dequantize=True)`) into a dense float model, and we save that as a
normal folder once, cached under `cache_dir()/hf_from_gguf/<sha256 of the GGUF>` so every later
run (and every sweep point) reuses it. The folder is written to a temporary sibling and renamed
into place, so an interrupted conversion never leaves a half-written folder that looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import BackendUnavailableError, ConfigError
from ..paths import cache_dir

SUBDIR = "hf_from_gguf"
SOURCE_FILE = "gguf_source.json"

# (gguf file) -> (model, tokenizer); injectable so the caching logic is testable without a GGUF.
Loader = Callable[[Path], tuple[Any, Any]]


@dataclass(frozen=True)
class BaseModel:
    """Where the DPO base model lives and what exactly it is.

    `path` is what `from_pretrained` gets (a local folder or a hub id); `identity` is the same
    string the repo's transformers backend would give it (`hf-dir:<fingerprint>` for a folder),
    so reports can say which weights the run started from.
    """

    spec: str
    path: str
    identity: str
    source: str          # "gguf" | "folder" | "hub"
    gguf: str | None = None
    gguf_sha256: str | None = None


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
    from ..llm.assets import file_sha256

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


def resolve_base_model(
    spec: str,
    *,
    cache_root: str | os.PathLike | None = None,
    loader: Loader | None = None,
    progress: bool = True,
) -> BaseModel:
    """Map a DPO `base_model` setting to something `from_pretrained` loads.

    Accepted: a preset name (a llama.cpp preset such as `qwen2.5-coder-0.5b-q4` is dequantized;
    an hf preset gives its hub id), a `.gguf` path (dequantized), `hf:<id-or-folder>`, a local
    model folder, or a hub id.
    """
    from ..llm.assets import file_sha256
    from ..llm.backends.hf import dir_fingerprint
    from ..llm.presets import PRESETS, resolve_gguf

    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"base_model: expected a preset name, .gguf path, hf:<id|folder> or folder, got {spec!r}")
    spec = spec.strip()
    if spec in PRESETS:
        preset = PRESETS[spec]
        if preset.backend == "llamacpp":
            path, sha = resolve_gguf(preset)
            folder = hf_folder_from_gguf(path, sha256=sha, cache_root=cache_root, loader=loader, progress=progress)
            return BaseModel(spec, str(folder), f"hf-dir:{dir_fingerprint(folder)}", "gguf", str(path), sha)
        return BaseModel(spec, preset.model, f"hf:{preset.model}", "hub")
    target = spec[3:] if spec.startswith("hf:") else spec
    p = Path(target).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise ConfigError(f"base_model: GGUF file {target!r} does not exist")
        sha = file_sha256(p)
        folder = hf_folder_from_gguf(p, sha256=sha, cache_root=cache_root, loader=loader, progress=progress)
        return BaseModel(spec, str(folder), f"hf-dir:{dir_fingerprint(folder)}", "gguf", str(p.resolve()), sha)
    if p.is_dir():
        return BaseModel(spec, str(p.resolve()), f"hf-dir:{dir_fingerprint(p)}", "folder")
    if target.startswith((".", "/", "~")):
        raise ConfigError(f"base_model: model folder {target!r} does not exist")
    return BaseModel(spec, target, f"hf:{target}", "hub")
