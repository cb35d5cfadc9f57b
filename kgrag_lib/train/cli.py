"""`kgrag train dpo`: DPO training of the generator (KG-Infused RAG §3.7, App. E, Table 20) from
the command line, on one process or under `accelerate launch` on several.

One GPU (the default set when CUDA is visible: `gpu-paper`, a bf16 LoRA adapter):

    kgrag train dpo --pairs results/gpu-paper/26_dpo_data/pairs.jsonl --out runs/dpo/paper

Table 20's full fine-tune on 4 GPUs (FSDP config shipped in kgrag_lib/train/accelerate/):

    accelerate launch --config_file kgrag_lib/train/accelerate/fsdp.yaml --num_processes 4 \\
      -m kgrag_lib.train --training gpu-paper-full --pairs PAIRS.jsonl --out runs/dpo/paper-full

(`python -m kgrag_lib.train ...` takes the same flags as `kgrag train dpo ...`: both are this module,
which the CLI layer only registers, so training never imports the CLI.) The
memory plan is printed before the model is loaded, and a plan that does not fit the visible GPU
is refused (--no-memory-check to try anyway); `--plan-only` prints it for any GPU count and size
without loading anything. A finished run in --out with the same settings and pairs is reused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import parse_set_items
from ..errors import ConfigError, KgragError

ACCELERATE_DIR = Path(__file__).resolve().parent / "accelerate"


def accelerate_config(name: str = "fsdp") -> Path:
    """The path of a shipped accelerate config (`fsdp`)."""
    path = ACCELERATE_DIR / f"{name}.yaml"
    if not path.is_file():
        shipped = sorted(p.stem for p in ACCELERATE_DIR.glob("*.yaml"))
        raise ConfigError(f"accelerate config {name!r}: expected one of {shipped}")
    return path


def add_dpo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pairs", default=None, help="preference pairs (pairs.jsonl of notebook 26 / kgrag_lib.train.dpo_data)")
    p.add_argument("--out", default=None, help="run folder (default: <output_root>/dpo-<model>-<mode>-...-<hash>)")
    p.add_argument("--training", default=None, choices=["cpu-smoke", "gpu-paper", "gpu-paper-full"],
                   help="default set: cpu-smoke (LoRA fp32, CPU minutes), gpu-paper (bf16 LoRA on one GPU), "
                        "gpu-paper-full (Table 20 full fine-tune, for several GPUs under accelerate launch); "
                        "default: gpu-paper with CUDA, else cpu-smoke")
    p.add_argument("--base-model", default=None, help="model to train (preset, .gguf, hf:<id|folder>, folder)")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="any other DPOTrainConfig field, YAML-parsed (repeatable), e.g. --set load_in_4bit=true")
    p.add_argument("--no-memory-check", action="store_true",
                   help="train even when the memory plan says it does not fit the visible GPU")
    p.add_argument("--plan-only", action="store_true",
                   help="print the memory plan (JSON) and exit; reads only the model's config.json")
    p.add_argument("--gpus", type=int, default=None, help="with --plan-only: GPUs to plan for (default: this launch's)")
    p.add_argument("--gpu-gib", type=float, default=None, help="with --plan-only: memory per GPU in GiB "
                                                               "(default: the visible GPU's)")
    p.add_argument("--sharded", action="store_true", help="with --plan-only: shard over --gpus (FSDP / ZeRO-3)")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def handle_dpo(args: argparse.Namespace) -> int:
    import torch

    from . import dpo_memory, dpo_train

    cuda = torch.cuda.is_available()
    training = args.training or ("gpu-paper" if cuda else "cpu-smoke")
    overrides = parse_set_items(args.set)
    if args.base_model:
        overrides["base_model"] = args.base_model
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
    if args.no_memory_check:
        overrides["memory_check"] = False
    cfg = dpo_train.dpo_config(training, **overrides)
    if args.plan_only:
        from .gguf_to_hf import base_model_config

        if args.gpus is not None and args.gpus < 1:
            raise ConfigError(f"--gpus {args.gpus}: expected the number of GPUs to plan for, at least 1")
        if args.gpu_gib is not None and not (0 < args.gpu_gib < float("inf")):
            raise ConfigError(f"--gpu-gib {args.gpu_gib}: expected a GPU's memory in GiB, a number > 0")
        plan = dpo_memory.plan_for(cfg, base_model_config(cfg.base_model, cache_root=cfg.cache_dir),
                                   n_gpus=args.gpus, sharded=args.sharded or None, gpu_gib=args.gpu_gib, cuda=cuda)
        print(plan.describe(), file=sys.stderr)
        print(json.dumps(plan.to_dict()))
        return 0 if plan.fits is not False else 1
    if not args.pairs:
        raise ConfigError("kgrag train dpo: --pairs PATH is required (a pairs.jsonl of notebook 26)")
    res = dpo_train.train_dpo(cfg, args.pairs, args.out, progress=not args.quiet)
    from accelerate import PartialState

    if PartialState().is_main_process:
        print(json.dumps({"out_dir": res.out_dir, "model_spec": res.model_spec, "n_steps": res.n_steps,
                          "train_loss": res.train_loss, "effective_batch_size": res.effective_batch_size,
                          "resumed": res.resumed, "warnings": res.warnings}))
    return 0


def dpo_main(argv: list[str] | None = None) -> int:
    """`python -m kgrag_lib.train ...`: the `kgrag train dpo` flags, errors as one line."""
    parser = argparse.ArgumentParser(prog="python -m kgrag_lib.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dpo_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return handle_dpo(args)
    except KgragError as exc:
        print(f"kgrag train dpo: error: {exc}", file=sys.stderr)
        return 2
