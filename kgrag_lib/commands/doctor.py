"""`kgrag doctor`: what this machine can run (CPU smoke, GPU smoke, paper scale) and what is missing.

Probes only: no model is assembled or loaded, no data file is hashed, a named server (--server, or
the one an openai:/vllm: --model names) gets GET /v1/models and GET /metrics (vLLM's share of the GPU)
with a short timeout. Exit 0 whatever is missing (the report says it); an
internal error is the only non-zero exit.
"""

from __future__ import annotations

import argparse
import os

from ..llm.presets import VLLM_URL_ENV


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..doctor.probes import probe_all
    from ..doctor.report import render

    from ..doctor.probes import server_of_model

    # a server the --model spec names (openai:<url>#id, vllm:<id>) is the one to ask; else --server, $KGRAG_VLLM_URL
    named = args.server or (None if server_of_model(args.model)[0] else os.environ.get(VLLM_URL_ENV))
    print(render(probe_all(named, args.root, args.profile, args.model)))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("doctor", help="report what this machine can run (GPU, CUDA, vLLM, faiss-gpu, "
                                             "models, server, data) and what to install for the rest")
    p.add_argument("--server", default=None, metavar="URL",
                   help=f"an OpenAI-compatible server to check, e.g. http://localhost:8000/v1 (GET URL/models); "
                        f"default ${VLLM_URL_ENV} if set")
    p.add_argument("--root", default=None, help="data root (default: $KGRAG_DATA_ROOT or ../shared/data)")
    p.add_argument("--profile", default=None, metavar="PROFILE",
                   help="check what this profile loads: its hub weights (size, cached, gated + token), the disk they "
                        "need and the GPU memory (default: gpu-paper when torch sees a GPU)")
    p.add_argument("--model", default=None, help="the LLM for every notebook, as kgrag study --model takes it (e.g. "
                                                 "vllm-serve:Qwen/Qwen2.5-7B-Instruct: checks vLLM's memory share)")
    p.set_defaults(func=cmd_doctor)
