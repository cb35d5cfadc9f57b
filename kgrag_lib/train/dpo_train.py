"""DPO training of the generator on knowledge-augmentation preference pairs (KG-Infused RAG
§3.7, Eq. 13; App. E, Table 20), with trl's `DPOTrainer`.

Three default sets. `gpu-paper-full` is Table 20 exactly (full fine-tune, β 0.1, lr 5e-7, one
epoch, 4 pairs per step, max length 8000, bf16, TR-DPO reference sync with mix-up α 0.6 every 512
steps): ~20 bytes per parameter (fp32 master weights, gradients, AdamW moments, a reference copy),
so for a 7-8B model it is meant for several GPUs under `accelerate launch` with the shipped FSDP
config (`kgrag_lib/train/accelerate/fsdp.yaml`; the paper used 4xA800). `gpu-paper` is the
one-GPU default: the same data, β, schedule and length, with a LoRA adapter on a bf16 base
(~24 GiB for Qwen2.5-7B at 8000 tokens, ~15 GiB as QLoRA; `paper_figures`), optionally QLoRA (`load_in_4bit`).
`cpu-smoke` trains a LoRA adapter on the embedded 0.5B model in fp32 on a few dozen pairs so it
finishes in minutes. Every departure from Table 20 is listed by `deviations_from_table20`, and
`train_dpo` prints the memory plan and refuses one that does not fit the visible GPU. After training
the adapter is merged into the base and saved as a plain transformers folder, which the repo's
`hf:` backend loads; its identity is the folder's fingerprint, so answers of the trained model
never reuse the base model's cached answers.

    cfg = dpo_config("cpu-smoke", max_steps=4)
    res = train_dpo(cfg, "runs/dpo_data/pairs.jsonl", "runs/dpo/smoke")
    llm = load_llm(res.model_spec)        # "hf:<out>/model"
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable

from ..config import make_config, opt, to_dict
from ..errors import ConfigError, DataFormatError
from ..jsonl import read_jsonl
from ..provenance import manifest
from . import dpo_memory
from .dpo_memory import launch_layout
from .gguf_to_hf import BaseModel, resolve_base_model

LN2 = math.log(2.0)
KEYS = ("prompt", "chosen", "rejected")
RESULT_FILE = "result.json"
RUN_FILE = "run.json"
# Fields that say where things go or how to guard the run, not what is trained: left out of the config hash.
_LOCATION_FIELDS = ("output_root", "cache_dir", "memory_check")

# KG-Infused RAG, App. E, Table 20 (LLaMA3.1-8B and Qwen2.5-7B alike), in our field names.
TABLE20: dict[str, Any] = {
    "lora": False,                      # "full parameter fine-tuning on 4xA800 GPUs"
    "max_length": 8000,
    "effective_batch_size": 4,          # pairs per optimizer step: batch_size x accumulation x processes
    "learning_rate": 5e-7,
    "num_epochs": 1.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.0,
    "warmup_ratio": 0.0,
    "beta": 0.1,
    "sync_ref_model": True,             # "Ref model mixup α" / "sync steps" are TR-DPO settings
    "ref_model_mixup_alpha": 0.6,
    "ref_model_sync_steps": 512,
    "bf16": True,                       # not printed; A800 full fine-tunes run in bf16
}

_DEVIATION_WHY = {
    "lora": "a full fine-tune needs ~20 bytes per parameter (~153 GiB for Qwen2.5-7B at 8000 tokens: several GPUs, "
            "the gpu-paper-full set under accelerate launch); on CPU even the 0.5B model takes 13 GB and 26 s/step, a "
            "LoRA adapter 5 GB and 16 s/step (DESIGN facts). The adapter is merged afterwards",
    "sync_ref_model": "trl refuses TR-DPO reference syncing with a PEFT model: with LoRA the reference is "
                      "the adapter-disabled base, so there is no separate reference model to mix",
    "ref_model_mixup_alpha": "unused: sync_ref_model is off",
    "ref_model_sync_steps": "unused: sync_ref_model is off (and a smoke run has far fewer than 512 steps)",
    "bf16": "no CUDA GPU: CPU training runs in fp32",
    "load_in_4bit": "QLoRA: the frozen base in 4-bit NF4 (bitsandbytes) to fit a smaller GPU",
    "max_length": "CPU time grows with sequence length; over-long pairs are dropped, not cut",
    "learning_rate": "a zero-initialised LoRA adapter moves nothing measurable at 5e-7 (LoRA is usually "
                     "trained at ~10x a full fine-tune's rate)",
    "effective_batch_size": "pairs per optimizer step = batch_size x gradient_accumulation_steps x processes",
    "num_epochs": "smoke run",
}


@dataclass
class DPOTrainConfig:
    """Settings of one DPO run (KG-Infused RAG §3.7, App. E). Defaults: the `cpu-smoke` set except
    that every optional cap is None (so a profile that leaves it out means "no cap");
    `dpo_config("gpu-paper")` gives Table 20."""

    base_model: str = opt("qwen2.5-coder-0.5b-q4",
                          "model to train: a preset name (a GGUF preset is dequantized to a cached HF folder), "
                          "a .gguf path, hf:<hub-id|folder>, a model folder or a hub id")
    beta: float = opt(0.1, "DPO β of Eq. 13 (Table 20: 0.1)")
    learning_rate: float = opt(5e-5, "AdamW learning rate (Table 20: 5e-7 for the full fine-tune)")
    num_epochs: float = opt(1.0, "passes over the pairs (Table 20: 1)")
    batch_size: int = opt(2, "pairs per device per forward pass (Table 20: 4; the paper does not say whether "
                             "per GPU or in total, we read it as the total)")
    gradient_accumulation_steps: int = opt(2, "forward passes per optimizer step; effective batch = batch_size x "
                                              "this x number of processes")
    max_length: int = opt(384, "tokens of prompt + completion kept per sequence (Table 20: 8000); trl cuts longer "
                               "ones at the end (there is no max_prompt_length in trl 1.x)")
    overlong: str = opt("drop", "pairs longer than max_length: 'drop' them before training, or 'keep' them cut at "
                                "max_length; pairs whose prompt alone fills max_length are always dropped")
    max_pairs: int | None = opt(None, "use at most this many pairs, sampled with `seed` (None: all; cpu-smoke: 24)")
    lora: bool = opt(True, "train a LoRA adapter (merged into the base afterwards) instead of every weight "
                           "(Table 20: full fine-tune)")
    lora_r: int = opt(16, "LoRA rank")
    lora_alpha: int = opt(32, "LoRA scaling α")
    lora_dropout: float = opt(0.05, "LoRA dropout")
    lora_target_modules: list[str] = opt(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                          "down_proj"], "module names that get an adapter (Qwen2/Llama naming)")
    bf16: bool = opt(False, "bf16 (needs a CUDA GPU; Table 20 runs: yes). With LoRA the frozen base is stored in "
                            "bf16; a full fine-tune keeps fp32 master weights and computes in bf16 autocast (bf16 "
                            "weights would not register 5e-7 updates)")
    load_in_4bit: bool = opt(False, "QLoRA: load the frozen base in 4-bit NF4 with bitsandbytes (needs lora=True, "
                                    "bf16=True, a CUDA GPU and the bitsandbytes package); the adapter is merged "
                                    "into a bf16 copy of the base afterwards")
    memory_check: bool = opt(True, "print the memory plan before loading the model and refuse a plan that does "
                                   "not fit the visible GPU (False: print it and try anyway)")
    seed: int = opt(42, "seed of the pair sample, adapter init and data order (the paper's code: 42)")
    max_steps: int | None = opt(None, "stop after this many optimizer steps (None: num_epochs decides)")
    logging_steps: int = opt(1, "optimizer steps per logged loss/reward point")
    sync_ref_model: bool = opt(False, "TR-DPO: mix the policy into the reference model every "
                                      "ref_model_sync_steps (Table 20: on); refused with LoRA")
    ref_model_mixup_alpha: float = opt(0.6, "TR-DPO mix-up α (Table 20: 0.6)")
    ref_model_sync_steps: int = opt(512, "TR-DPO sync period in steps (Table 20: 512)")
    adam_beta1: float = opt(0.9, "AdamW β1 (Table 20: 0.9)")
    adam_beta2: float = opt(0.999, "AdamW β2 (Table 20: 0.999)")
    adam_epsilon: float = opt(1e-8, "AdamW ε (Table 20: 1e-8)")
    weight_decay: float = opt(0.0, "AdamW weight decay (Table 20: 0.0)")
    warmup_ratio: float = opt(0.0, "fraction of steps of linear warm-up (Table 20: 0.0)")
    lr_scheduler_type: str = opt("linear", "learning-rate schedule after warm-up (not in Table 20; trl's default)")
    gradient_checkpointing: bool = opt(False, "recompute activations to save memory (slower; useful on a GPU "
                                              "with long sequences)")
    output_root: str = opt("runs/dpo", "parent folder of runs when train_dpo gets no out_dir; the run folder is "
                                       "named from the model, method, β, lr and the config/data hash")
    cache_dir: str | None = opt(None, "cache folder for the dequantized GGUF (default: $KGRAG_CACHE_DIR, then .cache/)")

    def validate(self, cuda: bool | None = None) -> "DPOTrainConfig":
        """Refuse values trl would reject late (or silently misuse), naming the setting and why.

        `cuda` says whether a CUDA GPU is visible (None: ask torch)."""
        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(f"DPO setting {name}={getattr(self, name)!r}: expected {expected}")

        if not isinstance(self.base_model, str) or not self.base_model.strip():
            raise bad("base_model", "a preset name, .gguf path, hf:<id|folder> or model folder")
        for name in ("beta", "learning_rate", "num_epochs"):
            if not getattr(self, name) > 0:
                raise bad(name, "a number > 0")
        for name in ("batch_size", "gradient_accumulation_steps", "logging_steps", "lora_r", "ref_model_sync_steps"):
            if not getattr(self, name) >= 1:
                raise bad(name, "an integer >= 1")
        if self.max_length < 16:
            raise bad("max_length", "an integer >= 16 tokens")
        for name in ("max_steps", "max_pairs"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise bad(name, "None or an integer >= 1")
        if self.overlong not in ("drop", "keep"):
            raise bad("overlong", "'drop' or 'keep'")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise bad("lora_dropout", "a number in [0, 1)")
        if self.lora_alpha <= 0:
            raise bad("lora_alpha", "a number > 0")
        if not self.lora_target_modules or not all(isinstance(m, str) and m for m in self.lora_target_modules):
            raise bad("lora_target_modules", "a non-empty list of module names such as ['q_proj', 'v_proj']")
        if "lm_head" in self.lora_target_modules:
            raise bad("lora_target_modules", "no 'lm_head' (trl scores tokens with lm_head.weight directly, so an "
                                             "adapter there is never trained)")
        if not 0.0 <= self.ref_model_mixup_alpha <= 1.0:
            raise bad("ref_model_mixup_alpha", "a number in [0, 1]")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise bad("warmup_ratio", "a number in [0, 1)")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise bad(name, "a number in [0, 1)")
        if self.weight_decay < 0 or self.adam_epsilon <= 0:
            raise bad("weight_decay" if self.weight_decay < 0 else "adam_epsilon", "a non-negative / positive number")
        if self.sync_ref_model and self.lora:
            raise ConfigError(
                "DPO settings sync_ref_model=True and lora=True cannot be combined: trl's DPOTrainer keeps no "
                "separate reference model for a PEFT adapter (it disables the adapter to get the reference "
                "log-probs), so there is nothing to sync (TR-DPO mix-up α / sync steps of Table 20). Set "
                "sync_ref_model=False (as the cpu-smoke profile does) or lora=False for a full fine-tune."
            )
        if self.bf16 or self.load_in_4bit:
            if cuda is None:
                import torch

                cuda = torch.cuda.is_available()
        if self.load_in_4bit:
            if not (self.lora and self.bf16):
                raise ConfigError(
                    f"DPO setting load_in_4bit=True (QLoRA) needs lora=True and bf16=True (got lora={self.lora}, "
                    f"bf16={self.bf16}): 4-bit weights cannot be trained directly, only an adapter on top of them.")
            if not cuda:
                raise ConfigError(
                    "DPO setting load_in_4bit=True (QLoRA) needs a CUDA GPU, but none is visible "
                    "(torch.cuda.is_available() is False): bitsandbytes' 4-bit kernels run on CUDA only. Set "
                    "load_in_4bit=False (bf16 LoRA on a GPU, or the cpu-smoke set on CPU).")
            import importlib.util

            if importlib.util.find_spec("bitsandbytes") is None:
                raise ConfigError(
                    "DPO setting load_in_4bit=True (QLoRA) needs the bitsandbytes package, which is not installed "
                    "in this environment: pip install 'bitsandbytes>=0.45' (pip install -e '.[qlora]'), or set "
                    "load_in_4bit=False to train a bf16 LoRA adapter.")
        if self.bf16:
            if not cuda:
                raise ConfigError(
                    "DPO setting bf16=True needs a CUDA GPU, but none is visible (torch.cuda.is_available() is "
                    "False); bf16 mixed precision on CPU is slow and imprecise here. Set bf16=False to train in "
                    "fp32 on CPU (the cpu-smoke profile does)."
                )
        return self


# The two default sets, as data the YAML profiles can hold (methods/notebooks sections).
_TABLE20_FIELDS = {k: v for k, v in TABLE20.items() if k != "effective_batch_size"}
DPO_PROFILES: dict[str, dict[str, Any]] = {
    # Table 20 as printed: meant for several GPUs (accelerate launch --config_file .../fsdp.yaml
    # --num_processes 4 gives the paper's 4 pairs per step: 1 per GPU).
    "gpu-paper-full": {
        "base_model": "qwen2.5-7b-instruct", **_TABLE20_FIELDS, "batch_size": 1, "gradient_accumulation_steps": 1,
        "overlong": "keep", "max_pairs": None, "max_steps": None, "logging_steps": 10,
        "gradient_checkpointing": True, "seed": 42,
    },
    # One GPU: bf16 LoRA, 1 pair per pass x 4 accumulation steps = Table 20's 4 pairs per step.
    "gpu-paper": {
        "base_model": "qwen2.5-7b-instruct", **_TABLE20_FIELDS, "lora": True, "sync_ref_model": False,
        "learning_rate": 5e-6, "batch_size": 1, "gradient_accumulation_steps": 4, "overlong": "keep",
        "max_pairs": None, "max_steps": None, "logging_steps": 10, "gradient_checkpointing": True, "seed": 42,
    },
    "cpu-smoke": {
        "base_model": "qwen2.5-coder-0.5b-q4", "lora": True, "bf16": False, "sync_ref_model": False,
        "learning_rate": 5e-5, "num_epochs": 1.0, "batch_size": 2, "gradient_accumulation_steps": 2,
        "max_length": 384, "overlong": "drop", "max_pairs": 24, "max_steps": None, "logging_steps": 1,
        "gradient_checkpointing": False, "beta": 0.1, "seed": 42,
    },
}


def dpo_config(profile: str | dict[str, Any] = "cpu-smoke", **overrides: Any) -> DPOTrainConfig:
    """A `DPOTrainConfig` from a default set (`gpu-paper`, `cpu-smoke`) or a dict, plus overrides
    (unknown keys and ill-typed values are refused by `make_config`). Not yet validated against
    the machine: `train_dpo` calls `validate()`."""
    if isinstance(profile, str):
        if profile not in DPO_PROFILES:
            raise ConfigError(f"DPO profile {profile!r}: expected one of {sorted(DPO_PROFILES)} or a mapping")
        base = DPO_PROFILES[profile]
    elif isinstance(profile, dict):
        base = profile
    else:
        raise ConfigError(f"DPO profile: expected a name or a mapping, got {type(profile).__name__}")
    cfg = make_config(DPOTrainConfig, base, overrides, where="DPO config")
    # make_config skips None values (a layer's "unset"); here None is a real setting ("no cap").
    nones = {k.replace("-", "_") for k, v in {**base, **overrides}.items() if v is None}
    return dataclasses.replace(cfg, **{k: None for k in nones}) if nones else cfg


def deviations_from_table20(cfg: DPOTrainConfig, world_size: int | None = None) -> list[str]:
    """Every setting of `cfg` that differs from KG-Infused RAG's Table 20, with the reason where
    it is a known departure. The batch is compared as pairs per optimizer step (batch_size x
    gradient_accumulation_steps x `world_size` processes; default: this launch's)."""
    world = world_size if world_size is not None else launch_layout()[0]
    out = []
    for name, paper in TABLE20.items():
        ours = (cfg.batch_size * cfg.gradient_accumulation_steps * world if name == "effective_batch_size"
                else getattr(cfg, name))
        if ours != paper:
            why = _DEVIATION_WHY.get(name)
            out.append(f"{name}: {ours!r} instead of {paper!r}" + (f" ({why})" if why else ""))
    if cfg.load_in_4bit:
        out.append(f"load_in_4bit: True ({_DEVIATION_WHY['load_in_4bit']})")
    if cfg.max_pairs is not None:
        out.append(f"max_pairs: {cfg.max_pairs} (the paper trains on all 2,461 / 2,909 pairs, Table 19)")
    if cfg.max_steps is not None:
        out.append(f"max_steps: {cfg.max_steps} (the paper runs one full epoch)")
    return out


# ---- data ---------------------------------------------------------------------------------

def _check_turns(value: Any, key: str) -> str | None:
    """None when `value` is a valid prompt/completion, else what is wrong."""
    if isinstance(value, str):
        return None if value.strip() or key == "prompt" else "an empty string"
    if not isinstance(value, list) or not value:
        return f"{type(value).__name__} (expected a string or a non-empty list of chat messages)"
    for m in value:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            return f"a message {m!r} (expected {{'role': str, 'content': str}})"
    if key != "prompt" and any(m["role"] != "assistant" for m in value):
        return "messages that are not all role 'assistant'"
    return None


def _check_row(row: Any, where: str, line: int | None) -> dict[str, Any]:
    expected = ("a JSON object with 'prompt' (chat messages or text) and 'chosen'/'rejected' "
                "(assistant messages or text)")
    if not isinstance(row, dict):
        raise DataFormatError(where, line, expected, repr(row))
    missing = [k for k in KEYS if k not in row]
    if missing:
        raise DataFormatError(where, line, f"{expected}; missing {', '.join(missing)}", json.dumps(row)[:200])
    for k in KEYS:
        problem = _check_turns(row[k], k)
        if problem:
            raise DataFormatError(where, line, f"{expected}; field {k!r} is {problem}", json.dumps(row[k])[:200])
    kinds = {k: isinstance(row[k], str) for k in KEYS}
    if len(set(kinds.values())) != 1:
        raise DataFormatError(where, line, f"{expected}; prompt, chosen and rejected all text or all messages",
                              json.dumps({k: type(row[k]).__name__ for k in KEYS}))
    return {k: row[k] for k in KEYS}


def load_pairs(data: Any) -> tuple[list[dict[str, Any]], str]:
    """Preference pairs from a JSONL path, a `datasets.Dataset` or a list of dicts, keeping only
    prompt/chosen/rejected (the metadata of `dpo_data` rows is not trained on). Returns the rows
    and a label of the source. Empty input and bad rows are refused with file and line."""
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if not path.is_file():
            raise DataFormatError(path, None, "a JSONL file of preference pairs (it does not exist or is a folder)")
        read = read_jsonl(path)
        rows = [_check_row(obj, str(path), i) for i, obj in zip(read.lines, read.rows)]
        if not rows:
            raise DataFormatError(path, None, "at least one preference pair (the file is empty)")
        return rows, str(path.resolve())
    label = f"<{type(data).__name__}>"
    try:
        items: Iterable[Any] = iter(data)
    except TypeError:
        raise ConfigError(f"DPO data: expected a JSONL path, a datasets.Dataset or a list of rows, got "
                          f"{type(data).__name__}") from None
    if hasattr(data, "column_names"):
        missing = [k for k in KEYS if k not in data.column_names]
        if missing:
            raise DataFormatError(label, None, f"columns prompt, chosen, rejected; missing {', '.join(missing)}",
                                  str(data.column_names))
    rows = [_check_row(r, f"{label} row", i) for i, r in enumerate(items, 1)]
    if not rows:
        raise DataFormatError(label, None, "at least one preference pair (the dataset is empty)")
    return rows, label


def data_hash(rows: list[dict[str, Any]]) -> str:
    """sha256 of the pairs in order (what a finished run is matched against on resume)."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps([r[k] for k in KEYS], sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


# Fields added after runs were made, left out of the hash at the value that stands for the old behaviour.
_ADDED_FIELDS = {"load_in_4bit": False}


def config_hash(cfg: DPOTrainConfig) -> str:
    d = {k: v for k, v in to_dict(cfg).items()
         if k not in _LOCATION_FIELDS and not (k in _ADDED_FIELDS and v == _ADDED_FIELDS[k])}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def default_out_dir(cfg: DPOTrainConfig, dhash: str) -> Path:
    """`<output_root>/dpo-<model>-<lora|full>-b<β>-lr<lr>-<hash>` (hash of config and data)."""
    slug = "".join(c if c.isalnum() or c in ".-" else "-" for c in Path(cfg.base_model.removeprefix("hf:")).name)
    tag = hashlib.sha256((config_hash(cfg) + dhash).encode()).hexdigest()[:8]
    kind = "lora" if cfg.lora else "full"
    return Path(cfg.output_root) / f"dpo-{slug}-{kind}-b{cfg.beta:g}-lr{cfg.learning_rate:g}-{tag}"


# ---- result -------------------------------------------------------------------------------

@dataclass
class DPOResult:
    """What a DPO run made and measured (also written to `<out_dir>/result.json`)."""

    out_dir: str
    model_dir: str
    model_spec: str                 # load with kgrag_lib.llm.load_llm(model_spec); no allow_cpu needed
    identity: str                   # the hf backend's identity of model_dir (its LLM cache key part)
    base_model: dict[str, Any]
    log_history: list[dict[str, Any]]
    train_loss: float | None
    wall_seconds: float
    n_pairs_input: int
    n_pairs_used: int
    n_dropped_overlong: int
    n_truncated: int
    n_steps: int
    effective_batch_size: int
    config: dict[str, Any]
    config_hash: str
    data_hash: str
    data_source: str
    deviations_from_table20: list[str]
    warnings: list[str]
    files: dict[str, str]
    manifest: dict[str, Any]
    resumed: bool = False
    launch: dict[str, Any] = dataclasses.field(default_factory=dict)   # processes, distributed type, backend
    memory_plan: dict[str, Any] = dataclasses.field(default_factory=dict)   # dpo_memory's estimate

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dir(cls, out_dir: str | os.PathLike, *, resumed: bool = True) -> "DPOResult":
        data = json.loads((Path(out_dir) / RESULT_FILE).read_text(encoding="utf-8"))
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
        data["resumed"] = resumed
        return cls(**data)


def stuck_warning(history: list[dict[str, Any]], n_steps: int) -> str | None:
    """A warning when every logged loss is ln 2 = 0.6931 with zero rewards: the policy never left
    the reference, which usually means the pairs are identical, fully truncated, or β/lr are
    too small (DESIGN: trl DPO on CPU)."""
    steps = [h for h in history if "loss" in h]
    if not steps:
        return None
    flat = all(abs(h["loss"] - LN2) < 1e-4 and abs(h.get("rewards/margins", 0.0)) < 1e-6
               and abs(h.get("rewards/chosen", 0.0)) < 1e-6 for h in steps)
    if not flat:
        return None
    hint = (" With a single optimizer step this is expected: the first step is scored before any update."
            if n_steps <= 1 else "")
    return ("DPO loss stuck at 0.6931 (= ln 2) with zero rewards at every logged step: the trained model never "
            "moved away from the reference. Check that chosen and rejected differ, that pairs were not cut to "
            "nothing by max_length, and that beta/learning_rate are not too small." + hint)


def plot_curves(history: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Loss and reward margin / accuracy per logged step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [h for h in history if "loss" in h]
    x = [h["step"] for h in steps]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    a1.plot(x, [h["loss"] for h in steps], marker="o", label="DPO loss")
    a1.axhline(LN2, color="grey", ls=":", lw=1, label="ln 2 (policy = reference)")
    a1.set_xlabel("optimizer step")
    a1.set_ylabel("loss")
    a1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    a2.plot(x, [h.get("rewards/margins", float("nan")) for h in steps], marker="o", color="tab:green",
            label="reward margin")
    a2.set_xlabel("optimizer step")
    a2.set_ylabel("reward margin (chosen - rejected)")
    a3 = a2.twinx()
    a3.plot(x, [h.get("rewards/accuracies", float("nan")) for h in steps], marker="s", color="tab:orange",
            label="reward accuracy")
    a3.set_ylabel("reward accuracy")
    a3.set_ylim(-0.05, 1.05)
    h1, l1 = a2.get_legend_handles_labels()
    h2, l2 = a3.get_legend_handles_labels()
    # below the panel: inside it, a legend covers markers of the two series that span the whole height
    a2.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    for ax in (a1, a2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # optimizer steps are whole numbers
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


# ---- training -----------------------------------------------------------------------------

def _token_lengths(tok: Any, row: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, prompt + longer completion tokens), rendered the way trl renders them."""
    def n(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    if isinstance(row["prompt"], str):
        p = n(row["prompt"])
        return p, max(n(row["prompt"] + row[k]) for k in ("chosen", "rejected"))
    p = n(tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True))
    full = max(n(tok.apply_chat_template(row["prompt"] + row[k], tokenize=False)) for k in ("chosen", "rejected"))
    return p, full


def _checkpointing_kwarg(trl: Any) -> str:
    """transformers >= 5.x renamed `gradient_checkpointing` to `activation_checkpointing`."""
    import inspect

    return ("activation_checkpointing" if "activation_checkpointing" in inspect.signature(trl.DPOConfig).parameters
            else "gradient_checkpointing")


def _check_out_dir(out: Path, cfg: DPOTrainConfig, chash: str, dhash: str) -> DPOResult | None:
    """The finished result to reuse, None to train (fresh or our own unfinished run), or a refusal."""
    if (out / RESULT_FILE).is_file():
        done = json.loads((out / RESULT_FILE).read_text(encoding="utf-8"))
        if done.get("config_hash") == chash and done.get("data_hash") == dhash:
            return DPOResult.from_dir(out, resumed=True)
        raise ConfigError(_mismatch(out, done, cfg, dhash, "holds a finished DPO run"))
    if (out / RUN_FILE).is_file():
        started = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
        if started.get("config_hash") == chash and started.get("data_hash") == dhash:
            return None  # an interrupted run of the same settings: train again into it
        raise ConfigError(_mismatch(out, started, cfg, dhash, "holds an unfinished DPO run"))
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"DPO out_dir {out} is not empty and holds no DPO run; choose an empty or new folder")
    return None


def _mismatch(out: Path, old: dict[str, Any], cfg: DPOTrainConfig, dhash: str, what: str) -> str:
    now = to_dict(cfg)
    diff = [f"{k}: {old.get('config', {}).get(k)!r} there, {v!r} now"
            for k, v in now.items() if k not in _LOCATION_FIELDS and old.get("config", {}).get(k) != v]
    if old.get("data_hash") != dhash:
        diff.append(f"pairs: data hash {str(old.get('data_hash'))[:12]} there, {dhash[:12]} now")
    return (f"DPO out_dir {out} {what} made with other settings ({'; '.join(diff) or 'config hash differs'}); "
            "it is not overwritten: pass another out_dir, or delete the folder to retrain")


def train_dpo(
    cfg: DPOTrainConfig,
    data: Any,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> DPOResult:
    """Train with DPO (Eq. 13) on preference pairs and save the merged model as an HF folder.

    `data` is a JSONL path, a `datasets.Dataset` or a list of rows in trl's conversational form.
    Writes to `out_dir` (default: `default_out_dir`): `model/` (merged safetensors folder),
    `adapter/` (LoRA only), `log_history.json`, `metrics.json`, `training_curves.png`,
    `manifest.json` and `result.json` (written last: a folder with it is a finished run). A
    finished run with the same config and pairs is returned without training; other settings
    are refused.
    """
    import torch
    from accelerate import PartialState

    cuda = torch.cuda.is_available()
    cfg.validate(cuda=cuda)
    rows, source = load_pairs(data)
    dhash = data_hash(rows)
    chash = config_hash(cfg)
    out = Path(out_dir) if out_dir is not None else default_out_dir(cfg, dhash)
    # Under `accelerate launch` every process runs this function: the main one checks the folder,
    # converts a GGUF base and claims the folder first; the others then find its run.json.
    state = PartialState()
    gate = _MainFirst(state)
    try:
        done = _check_out_dir(out, cfg, chash, dhash)
        if done is not None:
            if progress and state.is_main_process:
                print(f"DPO run in {out} already finished with these settings and pairs: reusing it", flush=True)
            return done
        return _train(cfg, rows, source, dhash, chash, out, progress, cuda, state, gate, dpo_memory)
    finally:
        gate.release()


class _MainFirst:
    """The main process goes first; the others wait at a barrier until it calls `release()`
    (idempotent; a no-op barrier in a single process)."""

    def __init__(self, state: Any) -> None:
        self._cm = state.main_process_first()
        self._cm.__enter__()
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._cm.__exit__(None, None, None)


def _load_model(cfg: DPOTrainConfig, path: str, cuda: bool, state: Any) -> Any:
    """The policy in the precision of its mode: LoRA on a GPU, a bf16 base; QLoRA, an NF4 base
    (bitsandbytes) on this process's GPU; a full fine-tune (and anything on CPU), fp32 master
    weights, autocast to bf16 by the trainer when bf16=True (see `dpo_memory`)."""
    import torch
    import transformers

    if cfg.load_in_4bit:
        quant = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                bnb_4bit_use_double_quant=True,
                                                bnb_4bit_compute_dtype=torch.bfloat16)
        return transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.bfloat16, quantization_config=quant, device_map={"": state.local_process_index})
    dtype = torch.bfloat16 if (cfg.lora and cfg.bf16 and cuda) else torch.float32
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)


def _merge_into_bf16_base(base_path: str, adapter_dir: Path) -> Any:
    """QLoRA's adapter merged into a bf16 copy of the base (merging into the 4-bit weights would
    save a quantized, lossy model the hf backend does not load as a plain folder)."""
    import peft
    import torch
    import transformers

    base = transformers.AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.bfloat16)
    return peft.PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()


def _train(cfg: DPOTrainConfig, rows: list[dict[str, Any]], source: str, dhash: str, chash: str, out: Path,
           progress: bool, cuda: bool, state: Any, gate: "_MainFirst", dpo_memory: Any) -> DPOResult:
    import datasets
    import torch
    import transformers
    import trl

    start = time.perf_counter()
    warnings: list[str] = []
    progress_main = progress and state.is_main_process

    base: BaseModel = resolve_base_model(cfg.base_model, cache_root=cfg.cache_dir, progress=progress_main)
    plan = dpo_memory.plan_for(cfg, base.path, cuda=cuda)
    if progress_main:
        print(plan.describe(), flush=True)
    if cuda and plan.fits is False:
        if cfg.memory_check:
            raise ConfigError(dpo_memory.refusal(plan, base.path, cfg))
        warnings.append(f"memory_check=False: training a plan estimated not to fit ({plan.describe()})")
    tok = transformers.AutoTokenizer.from_pretrained(base.path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if isinstance(rows[0]["prompt"], list) and not getattr(tok, "chat_template", None):
        raise ConfigError(f"base_model {cfg.base_model!r}: its tokenizer has no chat template, but the pairs are "
                          "chat messages; use an instruct model or text pairs")

    # Length screening: trl keeps the prompt and cuts the completion at max_length.
    kept, n_over, n_trunc = [], 0, 0
    for r in rows:
        p_len, full_len = _token_lengths(tok, r)
        if p_len >= cfg.max_length or (full_len > cfg.max_length and cfg.overlong == "drop"):
            n_over += 1
            continue
        n_trunc += full_len > cfg.max_length
        kept.append(r)
    if n_over:
        warnings.append(f"{n_over} of {len(rows)} pairs longer than max_length={cfg.max_length} tokens were dropped"
                        + ("" if cfg.overlong == "drop" else " (their prompt alone fills max_length)"))
    if n_trunc:
        warnings.append(f"{n_trunc} pairs were cut at max_length={cfg.max_length} (overlong='keep')")
    if not kept:
        raise ConfigError(f"DPO: none of the {len(rows)} pairs from {source} fits max_length={cfg.max_length} "
                          "tokens; raise max_length")
    n_identical = sum(r["chosen"] == r["rejected"] for r in kept)
    if n_identical:
        warnings.append(f"{n_identical} pairs have identical chosen and rejected answers (no DPO signal)")
    ds = datasets.Dataset.from_list(kept)
    if cfg.max_pairs is not None and len(ds) > cfg.max_pairs:
        ds = ds.shuffle(seed=cfg.seed).select(range(cfg.max_pairs))

    # Claim the folder only now, so a refusal above leaves nothing that blocks a retry.
    man = manifest(to_dict(cfg))
    if state.is_main_process:
        for stale in ("model", "adapter", "trainer", "model.tmp"):
            shutil.rmtree(out / stale, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_FILE).write_text(json.dumps({"config": to_dict(cfg), "config_hash": chash, "data_hash": dhash,
                                                "data_source": source, "manifest": man, "memory_plan": plan.to_dict()},
                                               indent=2), encoding="utf-8")
    gate.release()   # the other processes go on now; every process loads the model

    model = _load_model(cfg, base.path, cuda, state)
    peft_config = None
    if cfg.lora:
        import peft

        peft_config = peft.LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                      target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")
    args = trl.DPOConfig(
        output_dir=str(out / "trainer"),
        beta=cfg.beta,
        learning_rate=cfg.learning_rate,
        num_train_epochs=cfg.num_epochs,
        max_steps=cfg.max_steps if cfg.max_steps is not None else -1,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_length=cfg.max_length,
        truncation_mode="keep_start",
        optim="adamw_torch",
        adam_beta1=cfg.adam_beta1,
        adam_beta2=cfg.adam_beta2,
        adam_epsilon=cfg.adam_epsilon,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_ratio,   # a float < 1 is a ratio of the total steps
        lr_scheduler_type=cfg.lr_scheduler_type,
        bf16=cfg.bf16,
        fp16=False,
        use_cpu=not cuda,
        seed=cfg.seed,
        data_seed=cfg.seed,
        logging_steps=cfg.logging_steps,
        save_strategy="no",
        report_to="none",
        disable_tqdm=not progress,
        **{_checkpointing_kwarg(trl): cfg.gradient_checkpointing},
        **{_checkpointing_kwarg(trl) + "_kwargs": {"use_reentrant": False} if cfg.gradient_checkpointing else None},
        sync_ref_model=cfg.sync_ref_model,
        ref_model_mixup_alpha=cfg.ref_model_mixup_alpha,
        ref_model_sync_steps=cfg.ref_model_sync_steps,
    )
    was_enabled = datasets.is_progress_bar_enabled()
    if not progress:
        datasets.disable_progress_bars()
    try:
        trainer = trl.DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                                 peft_config=peft_config)
        if not progress:
            trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
        n_used = len(trainer.train_dataset)
        train_out = trainer.train()
    finally:
        if was_enabled and not progress:
            datasets.enable_progress_bars()
    history = [dict(h) for h in trainer.state.log_history]
    n_steps = int(trainer.state.global_step)

    # Merge the adapter (LoRA) and save a plain safetensors folder the hf backend loads.
    # Written to model.tmp and renamed, so a `model/` folder is always complete. Under a
    # multi-process launch `save_model` gathers sharded weights on every process; only the
    # main process writes the rest, the others wait and read its result.
    tmp = out / "model.tmp"
    main = trainer.accelerator.is_main_process
    if cfg.lora:
        if main:
            trainer.model.save_pretrained(str(out / "adapter"))
            merged = (_merge_into_bf16_base(base.path, out / "adapter") if cfg.load_in_4bit
                      else trainer.model.merge_and_unload())
            merged.config.use_cache = True
            merged.save_pretrained(str(tmp))
            tok.save_pretrained(str(tmp))
    else:
        trainer.model.config.use_cache = True
        trainer.save_model(str(tmp))
    if not main:
        trainer.accelerator.wait_for_everyone()
        return DPOResult.from_dir(out, resumed=False)
    os.replace(tmp, out / "model")
    shutil.rmtree(out / "trainer", ignore_errors=True)
    from ..llm.backends.hf import dir_fingerprint

    model_dir = (out / "model").resolve()
    identity = f"hf-dir:{dir_fingerprint(model_dir)}"
    if identity == base.identity:
        warnings.append("the trained model's files are identical to the base model's")
    stuck = stuck_warning(history, n_steps)
    if stuck:
        warnings.append(stuck)
    wall = time.perf_counter() - start

    steps = [h for h in history if "loss" in h]
    (out / "log_history.json").write_text(json.dumps(history, indent=2), encoding="utf-8")
    last = steps[-1] if steps else {}
    metrics = {
        "train_loss": train_out.training_loss if train_out is not None else None,
        "final_loss": last.get("loss"), "final_reward_margin": last.get("rewards/margins"),
        "final_reward_accuracy": last.get("rewards/accuracies"),
        "n_pairs_input": len(rows), "n_pairs_used": n_used, "n_steps": n_steps, "wall_seconds": round(wall, 2),
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    fig = plot_curves(history, out / "training_curves.png",
                      title=f"DPO {base.spec} ({'LoRA' if cfg.lora else 'full'}, β={cfg.beta:g}, "
                            f"lr={cfg.learning_rate:g}, {n_used} pairs)")
    (out / "manifest.json").write_text(json.dumps(man, indent=2), encoding="utf-8")
    files = {"model": str(model_dir), "log_history": str(out / "log_history.json"),
             "metrics": str(out / "metrics.json"), "figure": str(fig), "manifest": str(out / "manifest.json")}
    if cfg.lora:
        files["adapter"] = str((out / "adapter").resolve())
    result = DPOResult(
        out_dir=str(out.resolve()), model_dir=str(model_dir), model_spec=f"hf:{model_dir}", identity=identity,
        base_model=dataclasses.asdict(base), log_history=history, train_loss=metrics["train_loss"],
        wall_seconds=round(wall, 2), n_pairs_input=len(rows), n_pairs_used=n_used, n_dropped_overlong=n_over,
        n_truncated=n_trunc, n_steps=n_steps,
        effective_batch_size=cfg.batch_size * cfg.gradient_accumulation_steps * int(args.world_size),
        config=to_dict(cfg), config_hash=chash, data_hash=dhash, data_source=source,
        deviations_from_table20=deviations_from_table20(cfg, world_size=int(args.world_size)), warnings=warnings,
        files=files, manifest=man,
        launch={"world_size": int(args.world_size), "distributed_type": str(trainer.accelerator.distributed_type),
                "backend": state.backend, "device": str(trainer.accelerator.device)},
        memory_plan=plan.to_dict(),
    )
    tmp_res = out / (RESULT_FILE + ".tmp")
    tmp_res.write_text(json.dumps(result.to_dict(), indent=2, default=str), encoding="utf-8")
    os.replace(tmp_res, out / RESULT_FILE)
    if int(args.world_size) > 1:
        trainer.accelerator.wait_for_everyone()
    if progress:
        for w in warnings:
            print(f"warning: {w}", flush=True)
        print(f"DPO done in {wall:.0f} s: {n_used} pairs, {n_steps} steps; model {result.model_spec}", flush=True)
    return result


def paper_figures() -> dict[str, float]:
    """Peak GiB per GPU of the shipped GPU sets for Qwen2.5-7B at their own settings (8000 tokens):
    the figures docs/GPU.md and dpo_train's docstring print (a test ties them to this)."""
    from .dpo_memory import QWEN2_5_7B_CONFIG, plan_for

    lora, full = dpo_config("gpu-paper"), dpo_config("gpu-paper-full")
    qlora = dpo_config("gpu-paper", load_in_4bit=True)

    def gib(cfg: Any, k: int) -> float:
        return round(plan_for(cfg, QWEN2_5_7B_CONFIG, n_gpus=k, sharded=k > 1, cuda=False).total_gib)

    return {"lora": gib(lora, 1), "qlora": gib(qlora, 1), "full_1": gib(full, 1), "full_4": gib(full, 4),
            "full_8": gib(full, 8)}
