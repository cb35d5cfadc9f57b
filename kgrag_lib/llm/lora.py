"""A LoRA adapter served by vLLM next to its base model: `vllm-serve:<base>?lora=<name>=<folder>`.

notebook 27 trains its DPO generator as a LoRA adapter (`train.dpo_train` saves it in `adapter/`
next to the merged model); vLLM can answer with base + adapter without a merged copy of the weights
(`--enable-lora --lora-modules <name>=<folder>`, requests with `model=<name>`). What is checked
before the server starts, each refused with the folder and the expected form: the folder is a PEFT
LoRA adapter (adapter_config.json with peft_type LORA, r, and a weights file); its rank fits vLLM
(the server gets the smallest `--max-lora-rank` vLLM accepts that holds it, or the one given in
`server.args`, which must hold it); its base model is the one served where that can be told (the
same folder or the same dequantized GGUF, the same hub id). The adapter's fingerprint joins the
cache identity, so its answers never replay the base model's, nor another adapter's.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..redact import redact
from .assets import file_sha256

# vLLM's accepted --max-lora-rank values (vllm/config/lora.py MaxLoRARanks in 0.32)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FORM = "lora=<name>=<adapter folder>"


@dataclass(frozen=True)
class LoraAdapter:
    """A PEFT LoRA adapter folder as vLLM will load it, with what was read from its config."""

    name: str           # the served model name requests use
    path: Path          # the adapter folder (resolved)
    rank: int           # adapter_config.json `r`
    base: str | None    # adapter_config.json `base_model_name_or_path`
    fingerprint: str    # sha256 over its config and weight files (see `adapter_fingerprint`)

    @property
    def identity(self) -> str:
        """The part of the served weights' identity that names this adapter (its name changes no answer)."""
        return f";lora={self.fingerprint[:32]}"


def split_lora(spec: str, rest: str) -> tuple[str, str | None]:
    """`<model>?max_model_len=4096&lora=dpo=/runs/adapter` -> (`<model>?max_model_len=4096`, "dpo=/runs/adapter").
    The value is taken as written (a folder containing '&' cannot be given here); given twice, refused."""
    target, sep, query = rest.partition("?")
    if not sep:
        return rest, None
    kept, found = [], []
    for part in query.split("&"):
        (found if part.startswith("lora=") else kept).append(part)
    if len(found) > 1:
        raise ConfigError(f"llm spec {redact(spec)!r}: option 'lora' is given twice after '?'; vllm-serve: serves "
                          f"one adapter ({FORM})")
    if not found:
        return rest, None
    return (f"{target}?{'&'.join(kept)}" if kept else target), found[0][len("lora="):]


def adapter_fingerprint(folder: Path) -> str:
    """sha256 over adapter_config.json and each weight file's sha256 (file hashes are remembered per
    path, size and mtime, so a rerun does not read the weights again)."""
    h = hashlib.sha256()
    h.update(b"config\0" + (folder / ADAPTER_CONFIG).read_bytes() + b"\0")
    for name in ADAPTER_WEIGHTS:
        if (folder / name).is_file():
            h.update(name.encode() + b"\0" + file_sha256(folder / name).encode() + b"\0")
    return h.hexdigest()


def read_adapter(spec: str, value: str | None) -> LoraAdapter:
    """The adapter named by a spec's `lora=` value, refused unless it is a LoRA adapter folder."""
    where = f"llm spec {redact(spec)!r}: lora="
    name, eq, raw = (value or "").partition("=")
    if not eq or not name or not raw:
        raise ConfigError(f"{where}{value!r}: expected {FORM}, e.g. lora=dpo=runs/dpo/smoke/adapter")
    if not _NAME.match(name):
        raise ConfigError(f"{where}{value!r}: the adapter name {name!r} must be 1-64 letters, digits, '.', '_' or '-' "
                          "(it is the model name requests use)")
    folder = Path(raw).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{where}{value!r}: adapter folder {raw!r} does not exist; expected a PEFT LoRA adapter "
                          f"folder ({ADAPTER_CONFIG} and {' or '.join(ADAPTER_WEIGHTS)}), e.g. the adapter/ folder "
                          "train_dpo writes")
    cfg_path = folder / ADAPTER_CONFIG
    if not cfg_path.is_file():
        raise ConfigError(f"{where}{value!r}: {folder} has no {ADAPTER_CONFIG}, so it is not a PEFT adapter folder "
                          f"(a merged model folder is served as vllm-serve:<folder> instead)")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{cfg_path}: not readable JSON ({e}); expected PEFT's adapter config") from None
    if not isinstance(cfg, dict) or str(cfg.get("peft_type", "")).upper() != "LORA":
        got = cfg.get("peft_type") if isinstance(cfg, dict) else cfg
        raise ConfigError(f"{cfg_path}: peft_type is {got!r}; vLLM serves LoRA adapters only (peft_type 'LORA')")
    rank = cfg.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ConfigError(f"{cfg_path}: 'r' is {rank!r}; expected the adapter's rank, a positive integer")
    if rank > VLLM_LORA_RANKS[-1]:
        raise ConfigError(f"{cfg_path}: rank r={rank} is above the largest vLLM serves ({VLLM_LORA_RANKS[-1]}); "
                          "train a smaller adapter, or merge it (train_dpo's model/ folder) and serve that folder")
    if not any((folder / w).is_file() for w in ADAPTER_WEIGHTS):
        raise ConfigError(f"{where}{value!r}: {folder} has no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})")
    base = cfg.get("base_model_name_or_path")
    return LoraAdapter(name, folder.resolve(), rank, str(base) if base else None, adapter_fingerprint(folder))


def lora_args(adapter: LoraAdapter, args: list[str]) -> list[str]:
    """The LoRA options vLLM starts with: `--enable-lora --lora-modules <name>=<folder> --max-loras 1`
    and `--max-lora-rank`, the smallest vLLM accepts that holds the adapter's rank unless `server.args`
    gives one, which must hold it (vLLM itself would refuse the adapter only at load time)."""
    given = None
    for i, word in enumerate(args):
        flag, eq, val = str(word).partition("=")
        if flag.replace("_", "-") == "--max-lora-rank":
            given = val if eq else (args[i + 1] if i + 1 < len(args) else "")
        elif flag.replace("_", "-") in ("--enable-lora", "--lora-modules", "--max-loras"):
            raise ConfigError(f"server.args: {flag} is set by the spec's lora= option ({FORM}); remove it from args")
    out = ["--enable-lora", "--lora-modules", f"{adapter.name}={adapter.path}", "--max-loras", "1"]
    if given is None:
        return out + ["--max-lora-rank", str(next(r for r in VLLM_LORA_RANKS if r >= adapter.rank))]
    try:
        limit = int(given)
    except ValueError:
        raise ConfigError(f"server.args: --max-lora-rank {given!r}: expected one of {list(VLLM_LORA_RANKS)}") from None
    if adapter.rank > limit:
        raise ConfigError(f"lora={adapter.name}: the adapter {adapter.path} has rank r={adapter.rank}, above the "
                          f"server's --max-lora-rank {limit} (server.args); raise it to at least {adapter.rank} "
                          f"(vLLM accepts {list(VLLM_LORA_RANKS)}) or drop it and kgrag picks one")
    return out


def check_base(spec: str, adapter: LoraAdapter, served: str) -> None:
    """Refuse an adapter trained on another base than `served` (a model folder, or a hub id), where
    its `base_model_name_or_path` tells: the same folder, the same GGUF dequantized (gguf_source.json),
    the same folder content, or the same hub id. A recorded folder that no longer exists, or a hub id
    against a folder, cannot be told and is let through."""
    base = adapter.base
    if not base:
        return
    recorded, here = Path(base).expanduser(), Path(served).expanduser()
    if recorded.is_dir() and here.is_dir():
        if recorded.resolve() == here.resolve():
            return
        same = _same_gguf(recorded, here)
        if same is None:
            from .backends.hf import dir_fingerprint

            same = dir_fingerprint(recorded) == dir_fingerprint(here)
        if not same:
            raise _mismatch(spec, adapter, served)
        return
    looks_like_path = base.startswith((".", "/", "~")) or recorded.exists()
    if not looks_like_path and not here.is_dir() and base.strip().lower() != served.strip().lower():
        raise _mismatch(spec, adapter, served)


def _same_gguf(a: Path, b: Path) -> bool | None:
    from .hf_from_gguf import SOURCE_FILE

    shas = []
    for folder in (a, b):
        try:
            shas.append(json.loads((folder / SOURCE_FILE).read_text(encoding="utf-8")).get("sha256"))
        except (OSError, ValueError):
            return None
    return shas[0] == shas[1] if all(shas) else None


def _mismatch(spec: str, adapter: LoraAdapter, served: str) -> ConfigError:
    return ConfigError(f"llm spec {redact(spec)!r}: the adapter {adapter.path} was trained on "
                       f"{adapter.base!r} ({ADAPTER_CONFIG} base_model_name_or_path), but the server would load "
                       f"{served!r}; serve the adapter's own base (vllm-serve:<its base>?{FORM})")
