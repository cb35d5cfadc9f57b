"""`kgrag study`'s check, before any question: notebooks 27 (DPO training) and 28 (Self-RAG's own
generator) load models into kgrag's process while the study's LLM server holds its share of the same
GPU. When the doctor's plan says they cannot fit beside it, the study is refused up front, not hours in
with an out-of-memory error.

The server is the one the notebooks' model spec names: `vllm-serve:` (started by kgrag, taking
`gpu_memory_utilization` of the GPU once up) or a running `openai:`/`vllm:` server on this machine (the
GPU's free memory already excludes it; its /metrics says its share). `$KGRAG_SKIP_GPU_PLAN=1` starts
anyway.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import KgragError

IN_PROCESS_NOTEBOOKS = ("27_dpo_training", "28_plugins")
SKIP_ENV = "KGRAG_SKIP_GPU_PLAN"


def refuse_beside_server(profile: str | dict[str, Any], stems: list[str], *, gpu: Any = None,
                         server: Any = None) -> None:
    """Raise KgragError when the notebooks of `stems` that load in-process models cannot fit on GPU 0
    beside the server the study uses. `gpu` (a probes.Gpu) and `server` (a probes.Server) are looked up
    on this machine unless given; no GPU, no server or an unknown size: nothing to refuse."""
    from ..experiment import resolve_model
    from ..studies import NOTEBOOKS, load_profile
    from . import plan as P
    from .probes import probe_server, probe_torch, server_of_model

    beside = [s for s in stems if s in IN_PROCESS_NOTEBOOKS]
    if not beside or os.environ.get(SKIP_ENV, "").strip() not in ("", "0"):
        return
    prof = load_profile(profile)
    spec = next((m for m in (resolve_model(prof, NOTEBOOKS[s].family) for s in beside) if m), None)
    if not spec:
        return
    if gpu is None:
        gpus = probe_torch().gpus
        if not gpus:
            return
        gpu = gpus[0]
    free = gpu.free_gib if gpu.free_gib is not None else gpu.memory_gib
    if spec.startswith("vllm-serve:"):
        # every served model of the notebooks run is up at once (run.engine: one server per model)
        served = list(dict.fromkeys(m for m in (resolve_model(prof, NOTEBOOKS[s].family) for s in stems
                                                if s in NOTEBOOKS and NOTEBOOKS[s].family)
                                    if m.startswith("vllm-serve:"))) or [spec]
        util = P._served_utilization(prof, served) or 0.9
        where = f"{' and '.join(s.split('?')[0] for s in served)} (started by the study)"
        held = util * gpu.memory_gib * len(served)
        free -= held
    else:
        url, wanted = server_of_model(spec)
        if url is None:
            return
        server = server if server is not None else probe_server(url, wanted)
        if not (server.reachable and server.local):
            return
        util = server.gpu_memory_utilization
        where, held = f"the server at {server.url}", (util * gpu.memory_gib if util is not None else None)
        if gpu.free_gib is None:
            if held is None:
                return
            free -= held
    weights = P.weights_of(prof, cached=lambda _: False, size=P.KNOWN_GIB.get)
    dpo = P.dpo_training_gib(prof) if "27_dpo_training" in beside else None
    if "28_plugins" in beside:
        need = P.kgrag_share_gib([w for w in weights if w.where == "in-process"], dpo)
    else:
        need = dpo + P.PROCESS_MARGIN_GIB if dpo is not None else None
    if need is None or need <= free:
        return
    fit = (f"gpu_memory_utilization <= {P.vllm_utilization_fit(gpu.memory_gib, free + held, need)}"
           if held is not None else "a smaller share of the GPU")
    raise KgragError(
        f"{' and '.join(beside)} load models into kgrag's process (DPO training; Self-RAG's generator) and need "
        f"about {need:.1f} GiB of GPU 0 ({gpu.name}, {gpu.memory_gib:.1f} GiB), but beside {where}"
        + (f", which holds {held:.1f} GiB," if held is not None else "") + f" {max(free, 0.0):.1f} GiB would be free: "
        f"they would run out of memory mid-study. Give the server {fit}, or run them in a study of their own "
        f"without it (--only {' '.join(s[:2] for s in beside)}); `kgrag doctor --profile <profile> --model {spec}` "
        f"shows the plan. ${SKIP_ENV}=1 starts anyway")


def planned_server(profile: dict[str, Any], *, gpu: Any = None) -> dict[str, Any]:
    """The server settings `kgrag study` gives the vLLM servers of a profile whose `run.engine` serves its
    models: gpu_memory_utilization as the doctor plans it on GPU 0 (`plan.study_utilization`), or
    nothing (no GPU, a share the profile sets itself). Raises KgragError when no share fits."""
    from . import plan as P
    from .probes import probe_torch

    if gpu is None:
        gpus = probe_torch().gpus
        gpu = gpus[0] if gpus else None
    util = P.study_utilization(profile, gpu)
    if util is None:
        return {}
    print(f"each vLLM server of the study: gpu_memory_utilization {util} (planned from GPU 0's free memory; "
          "server.gpu_memory_utilization sets it)", flush=True)
    return {"gpu_memory_utilization": util}
