"""The base model of a DPO run as something trl can train.

KG-Infused RAG trains its generator with DPO (§3.7, App. E). On CPU our generator is the
embedded Qwen2.5-Coder-0.5B-Instruct Q4 GGUF, which trl cannot train directly: it is dequantized
into a Hugging Face folder once (`llm.hf_from_gguf`, shared with the vLLM server).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..llm.assets import file_sha256
from ..llm.hf_from_gguf import Loader, hf_folder_from_gguf
from ..llm.presets import PRESETS, resolve_gguf

__all__ = ["BaseModel", "hf_folder_from_gguf", "resolve_base_model"]


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


def base_model_config(spec: str, *, cache_root: str | os.PathLike | None = None) -> Any:
    """What `dpo_memory.model_shape` reads for a `base_model` setting, without weights: a GGUF's
    own metadata (transformers reads the header only), so a memory plan never dequantizes a model
    (2.4 GB for the 1.5B preset); for any other setting, the folder or hub id (config.json only)."""
    name = spec.strip() if isinstance(spec, str) else spec
    gguf = None
    if name in PRESETS and PRESETS[name].backend == "llamacpp":
        gguf, _ = resolve_gguf(PRESETS[name])
    elif isinstance(name, str) and Path(name.removeprefix("hf:")).expanduser().suffix == ".gguf":
        gguf = Path(name.removeprefix("hf:")).expanduser()
        if not gguf.is_file():
            raise ConfigError(f"base_model: {gguf}: no such GGUF file")
    if gguf is not None:
        import transformers

        return transformers.AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return resolve_base_model(name, cache_root=cache_root, progress=False).path


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
    from ..llm.backends.hf import dir_fingerprint

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
