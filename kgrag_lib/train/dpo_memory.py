"""How much accelerator memory a DPO run needs, worked out before any weight is loaded.

KG-Infused RAG trains Qwen2.5-7B / LLaMA3.1-8B with a full fine-tune on 4xA800 (App. E,
Table 20). A full fine-tune keeps fp32 master weights, their gradients, AdamW's two moments and
a frozen reference copy for DPO's log-ratio (Eq. 13): about 20 bytes per parameter, ~142 GiB
for 7.6B parameters, far beyond one 80 GB GPU unless sharded (FSDP / DeepSpeed ZeRO-3) over
several. A LoRA adapter on a frozen bf16 base needs ~2 bytes per parameter, and the reference
is the same base with the adapter switched off. This module says which plan fits where, so a run
is refused before it spends minutes loading a model that cannot train.

The model's shape comes from its `config.json` alone: the architecture is built on the meta
device (`accelerate.init_empty_weights`), which allocates nothing, and its parameters are
counted. The figures are estimates (activations especially); `MemoryPlan.table()` shows each
part, so a user can judge the margin.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

GIB = 2 ** 30
MODES = ("full", "lora", "qlora")
DTYPES = ("fp32", "bf16")
# CUDA context, the caching allocator's slack, NCCL buffers: a fixed allowance per GPU.
OVERHEAD_GIB = 2.0
# trl 1.16's fused LM head (trl/kernels/chunked_logprob.py) never holds the (tokens x vocab) logits:
# it projects tiles of TOKEN_TILE positions x VOCAB_CHUNK vocabulary columns into one reused buffer
# (fp32 at most), keeps per-token running sums, and in backward accumulates the hidden states' gradient
# in fp32 (tokens x hidden) and, when the LM head trains (a full fine-tune), the head's in fp32 (vocab x hidden).
TOKEN_TILE = 4096
VOCAB_CHUNK = 32768
# bitsandbytes NF4 with double quantization: 4 bits per weight plus ~0.127 bits of block constants.
NF4_BYTES = 4.127 / 8


# The fields of Qwen/Qwen2.5-7B-Instruct's config.json that fix its shape (the hub repo's file): the
# model the GPU profiles train, so its plan (docs/GPU.md's figures, `kgrag doctor`'s) needs no download.
QWEN2_5_7B_CONFIG = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                     "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                     "tie_word_embeddings": False, "max_position_embeddings": 32768}
KNOWN_CONFIGS = {"Qwen/Qwen2.5-7B-Instruct": QWEN2_5_7B_CONFIG}


@dataclass(frozen=True)
class ModelShape:
    """What the memory estimate needs to know about a causal LM, read from its config."""

    n_params: int              # all parameters (tied embeddings counted once)
    n_linear_params: int       # weights of the decoder layers' linear maps (what QLoRA stores in 4 bit)
    n_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    lora_shapes: tuple[tuple[str, int, int], ...] = ()   # (module suffix, in_features, out_features) per linear

    def lora_params(self, rank: int, targets: list[str] | tuple[str, ...]) -> int:
        """Trainable parameters of rank-`rank` adapters on every linear map named in `targets`."""
        return sum(rank * (i + o) for name, i, o in self.lora_shapes if name in targets)


def _config_dict(source: Any) -> Any:
    import transformers

    if isinstance(source, dict):
        kind = source.get("model_type")
        if not kind:
            raise ConfigError("model config dict: expected a 'model_type' key (e.g. 'qwen2', 'llama')")
        return transformers.AutoConfig.for_model(**source)
    if isinstance(source, transformers.PretrainedConfig):
        return source
    path = str(source)
    if Path(path).is_dir() and not (Path(path) / "config.json").is_file():
        raise ConfigError(f"model folder {path} has no config.json; expected a transformers model folder")
    return transformers.AutoConfig.from_pretrained(path)


def model_shape(source: Any) -> ModelShape:
    """The shape of a causal LM from a model folder, a hub id (its config.json only), a config
    dict or a `PretrainedConfig`, without loading or allocating any weight."""
    import torch
    import transformers
    from accelerate import init_empty_weights

    config = _config_dict(source)
    with init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(config)
    n_params = sum(p.numel() for p in model.parameters())
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if (getattr(text, "tie_word_embeddings", False) or getattr(config, "tie_word_embeddings", False)) \
            and out_emb is not None and out_emb.weight is not in_emb.weight:
        n_params -= out_emb.weight.numel()     # tied on load; built on the meta device they are not yet
    linear, shapes = 0, []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module is not model.get_output_embeddings():
            linear += module.weight.numel()
            shapes.append((name.rsplit(".", 1)[-1], module.in_features, module.out_features))
    return ModelShape(
        n_params=int(n_params), n_linear_params=int(linear), n_layers=int(text.num_hidden_layers),
        hidden_size=int(text.hidden_size),
        intermediate_size=int(getattr(text, "intermediate_size", None) or 4 * text.hidden_size),
        vocab_size=int(text.vocab_size), lora_shapes=tuple(shapes),
    )


@dataclass(frozen=True)
class MemoryPlan:
    """Estimated peak memory per GPU of one DPO training plan, in GiB."""

    mode: str
    dtype: str
    n_params: int
    trainable_params: int
    n_gpus: int
    sharded: bool
    seq_len: int
    batch: int
    gradient_checkpointing: bool
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    reference_gib: float
    activations_gib: float
    overhead_gib: float
    gpu_gib: float | None

    @property
    def total_gib(self) -> float:
        return (self.weights_gib + self.grads_gib + self.optimizer_gib + self.reference_gib
                + self.activations_gib + self.overhead_gib)

    @property
    def fits(self) -> bool | None:
        """True/False against `gpu_gib`; None when no GPU size was given."""
        return None if self.gpu_gib is None else self.total_gib <= self.gpu_gib

    def describe(self) -> str:
        where = (f"{self.n_gpus} GPU{'s' if self.n_gpus > 1 else ''}"
                 + (" sharded (FSDP / ZeRO-3)" if self.sharded and self.n_gpus > 1 else
                    " each holding everything" if self.n_gpus > 1 else ""))
        verdict = ("" if self.gpu_gib is None else
                   f" -> {'fits' if self.fits else 'does NOT fit'} {self.gpu_gib:.0f} GiB per GPU")
        return (f"DPO memory plan: {self.mode} {self.dtype}, {self.n_params / 1e9:.2f}B parameters "
                f"({self.trainable_params / 1e6:.1f}M trained), {where}, {self.batch} pair(s) x 2 x "
                f"{self.seq_len} tokens per device{', gradient checkpointing' if self.gradient_checkpointing else ''}"
                f": ~{self.total_gib:.1f} GiB per GPU (weights {self.weights_gib:.1f}, grads {self.grads_gib:.1f}, "
                f"optimizer {self.optimizer_gib:.1f}, reference {self.reference_gib:.1f}, activations "
                f"{self.activations_gib:.1f}, overhead {self.overhead_gib:.1f}){verdict}")

    def table(self) -> list[dict[str, Any]]:
        """One row per part (for a notebook's DataFrame)."""
        parts = ("weights", "grads", "optimizer", "reference", "activations", "overhead")
        rows = [{"part": p, "GiB per GPU": round(getattr(self, f"{p}_gib"), 2)} for p in parts]
        return rows + [{"part": "total", "GiB per GPU": round(self.total_gib, 2)}]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_gib": round(self.total_gib, 3), "fits": self.fits}


def estimate_dpo_memory(
    shape: ModelShape | int,
    *,
    mode: str,
    dtype: str = "bf16",
    lora_rank: int = 16,
    lora_targets: tuple[str, ...] | list[str] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"),
    n_gpus: int = 1,
    sharded: bool = False,
    seq_len: int = 8000,
    batch: int = 1,
    gradient_checkpointing: bool = True,
    gpu_gib: float | None = None,
) -> MemoryPlan:
    """Peak memory per GPU of a DPO plan (an estimate; see the module docstring).

    mode: 'full' trains every weight; trl keeps a frozen reference copy in the policy's dtype.
        The master weights stay fp32 whatever `dtype` says: with Table 20's learning rate of
        5e-7, an AdamW step changes a weight of magnitude 1e-2 by ~5e-7, far below bf16's
        spacing there (~6e-5), so bf16 master weights would silently never move; `dtype` is
        then the autocast precision of the activations.
        'lora' trains rank-`lora_rank` adapters (fp32, as PEFT keeps them) on a frozen base
        stored in `dtype`; the reference is the base with the adapter off (no copy).
        'qlora' is 'lora' with the base's linear maps in 4-bit NF4 (bitsandbytes).
    sharded: the weights, gradients, optimizer state and reference are split over `n_gpus`
        (FSDP FULL_SHARD or ZeRO-3); without it every GPU holds all of them (DDP).
    batch: pairs per device per forward pass; DPO forwards chosen and rejected together, so
        2 x batch x seq_len tokens.
    `shape` may be a bare parameter count, for which the activations are taken as 0 (say so).
    """
    if mode not in MODES:
        raise ConfigError(f"memory estimate: mode {mode!r}; expected one of {MODES}")
    if dtype not in DTYPES:
        raise ConfigError(f"memory estimate: dtype {dtype!r}; expected one of {DTYPES}")
    if n_gpus < 1 or seq_len < 1 or batch < 1:
        raise ConfigError(f"memory estimate: n_gpus, seq_len and batch must be >= 1 (got {n_gpus}, {seq_len}, {batch})")
    if isinstance(shape, int):
        shape = ModelShape(n_params=shape, n_linear_params=shape, n_layers=0, hidden_size=0, intermediate_size=0,
                           vocab_size=0)
    n = shape.n_params
    act_bytes = 2 if dtype == "bf16" else 4
    split = n_gpus if (sharded and n_gpus > 1) else 1
    if mode == "full":
        trainable = n
        weights, grads, optim, ref = 4 * n, 4 * n, 8 * n, 4 * n
    else:
        trainable = shape.lora_params(lora_rank, tuple(lora_targets)) if shape.lora_shapes else 0
        if mode == "lora":
            base = act_bytes * n
        else:
            base = NF4_BYTES * shape.n_linear_params + 2 * (n - shape.n_linear_params)
        weights, grads, optim, ref = base + 4 * trainable, 4 * trainable, 8 * trainable, 0
    tokens = 2 * batch * seq_len
    h, inter, layers = shape.hidden_size, shape.intermediate_size, shape.n_layers
    per_layer = tokens * (12 * h + 4 * inter) * act_bytes        # one decoder layer's saved tensors
    if gradient_checkpointing:
        acts = layers * tokens * h * act_bytes + per_layer        # layer inputs kept, one layer recomputed
    else:
        acts = layers * per_layer
    acts += min(tokens, TOKEN_TILE) * min(VOCAB_CHUNK, shape.vocab_size) * 4   # the fused LM head's tile
    acts += tokens * h * 4                                                     # its fp32 hidden-state gradient
    if mode == "full":
        acts += shape.vocab_size * h * 4                                       # and the head's own, in fp32
    return MemoryPlan(
        mode=mode, dtype=dtype, n_params=n, trainable_params=int(trainable), n_gpus=n_gpus,
        sharded=bool(sharded and n_gpus > 1), seq_len=seq_len, batch=batch,
        gradient_checkpointing=gradient_checkpointing,
        weights_gib=weights / split / GIB, grads_gib=grads / split / GIB, optimizer_gib=optim / split / GIB,
        reference_gib=ref / split / GIB, activations_gib=acts / GIB, overhead_gib=OVERHEAD_GIB, gpu_gib=gpu_gib,
    )


def min_sharded_gpus(shape: ModelShape, gpu_gib: float, **kw: Any) -> int | None:
    """The fewest GPUs (1, 2, 4, 8, ..., 64) of `gpu_gib` each over which a sharded plan fits."""
    for k in (1, 2, 4, 8, 16, 32, 64):
        if estimate_dpo_memory(shape, n_gpus=k, sharded=True, gpu_gib=gpu_gib, **kw).fits:
            return k
    return None


# ---- the machine this process runs on ----------------------------------------------------

def launch_layout() -> tuple[int, bool]:
    """(processes, sharded) of the current launch: `accelerate launch` / torchrun set WORLD_SIZE,
    and accelerate sets ACCELERATE_USE_FSDP or ACCELERATE_USE_DEEPSPEED (ZeRO-3 shards like FSDP)."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")
    zero3 = (os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true")
             and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "") == "3")
    return world, (fsdp or zero3) and world > 1


def visible_gpu_gib() -> float | None:
    """Total memory of this process's CUDA device in GiB (None without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return None
    index = int(os.environ.get("LOCAL_RANK", "0") or 0) % torch.cuda.device_count()
    return torch.cuda.get_device_properties(index).total_memory / GIB


def plan_for(cfg: Any, model_path: Any, *, n_gpus: int | None = None, sharded: bool | None = None,
             gpu_gib: float | None = None, cuda: bool | None = None) -> MemoryPlan:
    """The memory plan of a `DPOTrainConfig` for the model at `model_path` (a folder or hub id
    whose config.json is read, or a config: `gguf_to_hf.base_model_config`), on this launch's
    processes and GPU unless given."""
    import torch

    world, shard = launch_layout()
    cuda = torch.cuda.is_available() if cuda is None else cuda
    mode = "qlora" if getattr(cfg, "load_in_4bit", False) else ("lora" if cfg.lora else "full")
    return estimate_dpo_memory(
        model_shape(model_path), mode=mode, dtype="bf16" if cfg.bf16 else "fp32", lora_rank=cfg.lora_r,
        lora_targets=tuple(cfg.lora_target_modules), n_gpus=n_gpus or world,
        sharded=shard if sharded is None else sharded, seq_len=cfg.max_length, batch=cfg.batch_size,
        gradient_checkpointing=cfg.gradient_checkpointing,
        gpu_gib=gpu_gib if gpu_gib is not None else (visible_gpu_gib() if cuda else None),
    )


def refusal(plan: MemoryPlan, shape_source: str, cfg: Any) -> str:
    """The message of a run refused because its plan does not fit (what to do instead)."""
    hints = []
    if plan.mode == "full":
        shape = model_shape(shape_source)
        k = min_sharded_gpus(shape, plan.gpu_gib or 80.0, mode="full", dtype=plan.dtype, seq_len=plan.seq_len,
                             batch=plan.batch, gradient_checkpointing=plan.gradient_checkpointing)
        hints.append("train a LoRA adapter on one GPU (the gpu-paper default set: lora=True, bf16=True)")
        if k:
            hints.append(f"or run the full fine-tune sharded over >= {k} such GPUs: accelerate launch "
                         f"--config_file kgrag_lib/train/accelerate/fsdp.yaml --num_processes {k} "
                         "-m kgrag_lib.train --training gpu-paper-full ...")
    elif plan.mode == "lora":
        hints.append("load the base in 4 bit (load_in_4bit=True, QLoRA; needs bitsandbytes)")
    if not plan.gradient_checkpointing:
        hints.append("turn on gradient_checkpointing")
    hints.append(f"lower max_length ({cfg.max_length}) or batch_size ({cfg.batch_size}; raise "
                 "gradient_accumulation_steps to keep the effective batch)")
    hints.append("or pass memory_check=False (--no-memory-check) to try anyway")
    return (f"DPO refused before loading the model: {plan.describe()}. "
            f"Options: {'; '.join(hints)}.")


