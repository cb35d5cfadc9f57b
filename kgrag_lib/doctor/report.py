"""`kgrag doctor`'s report: one line per finding, the command that fixes each gap, and a verdict.

Pure functions of `probes.Findings`, so a GPU machine's report is testable on a laptop. The
verdict names the profiles this machine can run and, for the others, what they still need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..llm.engine import INSTALL as INSTALL_VLLM
from .plan import (PROCESS_MARGIN_GIB, in_process_need_gib, kgrag_share_gib, planned_utilization,
                   vllm_utilization_fit)
from . import torch_cuda
from .probes import Findings

# What the GPU path needs, as the fix lines print it. A fix line must never break the environment it is
# printed in (`Env`): in a GPU, vLLM or conda environment the `cpu` extra is never suggested (it pins
# torch==2.13.0 over the CUDA torch and adds faiss-cpu into the same `faiss` package as faiss-gpu).
CONDA_ENV = "conda env create -f environment.yml && conda activate kgrag"
PIP_GPU = 'pip install -e ".[gpu,notebooks]"'
PIP_CPU = 'pip install -e ".[cpu]"'
VLLM_ENV = ("bash scripts/install_vllm.sh (vLLM in its own .venv-vllm, started by --model vllm-serve:<model>)  or  "
            "conda env create -f environment-vllm.yml")
LLAMA_CUDA_CONDA = 'conda install -c conda-forge llama-cpp-python "llama.cpp[build=cuda*]"'
LLAMA_CUDA_PIP = 'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36'
LLAMA_CUDA = f"{LLAMA_CUDA_CONDA}  or  {LLAMA_CUDA_PIP}"
FAISS_GPU_CONDA = 'conda install -c conda-forge "faiss-gpu>=1.10"'
FAISS_GPU_PIP = 'pip uninstall -y faiss-cpu && pip install "faiss-gpu-cu12>=1.13"'  # the numpy-2 builds (pyproject's floor)
FAISS_GPU = f"{FAISS_GPU_CONDA}  or  {FAISS_GPU_PIP}"
TORCH_INDEX = "https://download.pytorch.org/whl/"
HF_LOGIN = "accept the licence on the model's hub page, then `hf auth login` (or export HF_TOKEN=...)"


def _for_env(f: Findings, conda: str, pip: str) -> str:
    return conda if f.env.conda else pip


def _major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def torch_fix(torch_version: str, driver_cuda: str) -> str:
    """The pip line that puts a torch this driver runs in place (PyTorch's own table, `torch_cuda`), or
    the newest release that has one when `torch_version` has none (2.15 has no CUDA 12 build)."""
    base = torch_version.split("+")[0]
    found = torch_cuda.index_for(base, driver_cuda)
    if found:
        return f"pip install --force-reinstall torch=={base} --index-url {TORCH_INDEX}{found}"
    newest = torch_cuda.newest_release_for(driver_cuda)
    if newest is None:
        return "upgrade the NVIDIA driver"
    return (f"torch {base} has no build for a CUDA {driver_cuda} driver ({torch_cuda.SOURCE}); the newest that has "
            f"is {newest[0]}: pip install --force-reinstall \"torch=={newest[0]}.*\" --index-url {TORCH_INDEX}{newest[1]}")


# A 7-8B model in bf16 is about 15-16 GiB of weights; with the KV cache of batched generation the
# gpu-paper profile wants a 24 GiB card at least (its DPO step is planned for one 80 GB GPU).
PAPER_MIN_GIB = 24.0
GPU_SMOKE_NEEDS = ("transformers", "llguidance", "accelerate", "peft", "trl", "datasets", "sentence-transformers", "papermill")


@dataclass(frozen=True)
class Line:
    status: str        # "ok" | "MISSING" | "info"
    what: str
    detail: str
    fix: str = ""


def _pkg(f: Findings, name: str, fix: str, *, needed: bool = True) -> Line:
    v = f.packages.get(name)
    if v:
        return Line("ok", name, v)
    return Line("MISSING" if needed else "info", name, "not installed", fix)


def lines(f: Findings) -> list[Line]:
    m = f.machine
    out = [Line("info", "python", f"{m.python} ({m.executable})"),
           Line("info", "machine", f"{m.system}, {m.cpu_cores} CPU cores, {m.ram_gib:.1f} GiB RAM")]
    t = f.torch
    if t.version is None:
        fix = _for_env(f, "conda install -c conda-forge pytorch-gpu", PIP_GPU) if f.env.gpu else f"{CONDA_ENV}  or  {PIP_CPU}"
        out.append(Line("MISSING", "torch", t.error or "not installed", fix))
    else:
        out.append(Line("ok", "torch", f"{t.version} (CUDA build: {t.cuda_build or 'none, CPU-only'})"))
    if t.gpus:
        for i, g in enumerate(t.gpus):
            free = f", {g.free_gib:.1f} GiB free" if g.free_gib is not None else ""
            out.append(Line("ok", f"GPU {i}", f"{g.name}, {g.memory_gib:.1f} GiB{free}, compute capability "
                                             f"{g.capability[0]}.{g.capability[1]}, bf16: {'yes' if g.bf16 else 'no'}"))
    else:
        why = t.error or ("torch sees no CUDA GPU" if t.version else "torch not installed")
        fix = ""
        if f.smi.present and t.version and not t.cuda_build:
            fix = f"this torch is a CPU build on a machine with an NVIDIA driver: {CONDA_ENV}"
        elif f.smi.gpus and t.cuda_build:
            fix = (f"this torch is built for CUDA {t.cuda_build} and the driver runs CUDA {f.smi.cuda or '?'} "
                   f"(PyPI's torch 2.14+ wheels are CUDA 13 builds, which need driver >= 580): "
                   + _for_env(f, "conda install -c conda-forge pytorch-gpu cuda-version=12",
                              torch_fix(t.version or "", f.smi.cuda) if f.smi.cuda else "upgrade the NVIDIA driver")
                   + "  or upgrade the driver")
        out.append(Line("MISSING" if fix else "info", "GPU", why, fix))
    if f.smi.present and f.smi.error:   # it is there but cannot talk to the driver: no GPU this run can use
        out.append(Line("MISSING", "nvidia-smi", f"present but failing ({f.smi.error})",
                        "nvidia-smi must list the GPU before kgrag can use it: check the driver (after a driver "
                        "update, reboot; in a container, run it with --gpus all)"))
    elif f.smi.present:
        out.append(Line("ok" if f.smi.gpus else "info", "nvidia-smi",
                        f"driver {f.smi.driver or '?'}, CUDA {f.smi.cuda or '?'}; "
                        + ("; ".join(f.smi.gpus) or f.smi.error or "no GPU listed")))
    else:
        out.append(Line("info", "nvidia-smi", "not found (no NVIDIA driver on this machine)"))
    fa = f.faiss
    faiss_gpu = _for_env(f, FAISS_GPU_CONDA, FAISS_GPU_PIP)
    if fa.version is None:
        out.append(Line("MISSING", "faiss", fa.error or "not installed", faiss_gpu if f.env.gpu else PIP_CPU))
    else:
        gpu = (f"GPU build, sees {fa.num_gpus} GPU(s)" if fa.gpu_build else "CPU build")
        out.append(Line("ok", "faiss", f"{fa.version}, {gpu}", "" if fa.gpu_build or not t.gpus else faiss_gpu))
    lc = f.llamacpp
    llama_cuda = _for_env(f, LLAMA_CUDA_CONDA, LLAMA_CUDA_PIP)
    if lc.version is None:
        # the GPU profiles need it only for the MetaQA paper's own 4-bit GGUF
        out.append(Line("info" if f.env.gpu else "MISSING", "llama-cpp-python", lc.error or "not installed",
                        llama_cuda if f.env.gpu else PIP_CPU))
    else:
        off = {True: "GPU offload: yes", False: "GPU offload: no (CPU build)", None: "GPU offload: unknown"}[lc.gpu_offload]
        out.append(Line("ok", "llama-cpp-python", f"{lc.version}, {off}", llama_cuda if t.gpus and not lc.gpu_offload else ""))
    v = f.vllm
    driver = _major(f.smi.cuda)
    if v.server_env and v.server_cuda and driver and driver < v.server_cuda:
        out.append(Line("MISSING", "vLLM", f"vllm-serve: starts {v.server_env}, built for CUDA {v.server_cuda}; the driver "
                        f"runs CUDA {f.smi.cuda}, so it cannot start a model",
                        "bash scripts/install_vllm.sh (on a CUDA 12 driver it installs vLLM's CUDA 12.9 build)  or "
                        "upgrade the NVIDIA driver to >= 580"))
    elif v.server_env:
        out.append(Line("ok", "vLLM", f"vllm-serve: starts {v.server_env}"))
    elif v.version or v.binary:
        out.append(Line("ok", "vLLM", ", ".join(x for x in (f"importable {v.version}" if v.version else "",
                                                          f"binary {v.binary}" if v.binary else "") if x)))
    else:
        out.append(Line("info", "vLLM", "not installed (optional: a faster server for the GPU profiles)", VLLM_ENV))
    for name, fix in (("transformers", PIP_GPU), ("llguidance", PIP_GPU), ("accelerate", PIP_GPU), ("peft", PIP_GPU), ("trl", PIP_GPU),
                      ("datasets", PIP_GPU), ("sentence-transformers", PIP_GPU), ("numba", PIP_GPU),
                      ("papermill", 'pip install -e ".[notebooks]"'), ("ipywidgets", PIP_GPU),
                      ("jupyterlab", 'pip install -e ".[lab]"')):
        out.append(_pkg(f, name, fix))
    out.append(_pkg(f, "bitsandbytes", "pip install bitsandbytes (only for 4-bit QLoRA / 4-bit HF loading)", needed=False))
    out.append(_pkg(f, "ray", 'pip install -e ".[cluster]" (for --executor ray: notebooks and sweep cells as Ray '
                              'tasks, docs/CLUSTER.md)', needed=False))
    for mo in f.models:
        fix = mo.gpu_fix if (f.env.gpu or f.env.conda) and mo.gpu_fix else mo.fix
        out.append(Line("ok" if mo.present else "info", f"model {mo.name}", mo.detail, fix))
    s = f.server
    if s.url is None:
        out.append(Line("info", "server", "none named (--server URL or $KGRAG_VLLM_URL)"))
    elif s.reachable and s.wanted and s.wanted not in s.models:
        out.append(Line("MISSING", "server", f"{s.url} serves {', '.join(s.models) or 'no model'}, not {s.wanted}",
                        f"start it with {s.wanted}, or name one it serves in --model"))
    elif s.reachable:
        memory = ""
        if s.engine == "vllm" and s.gpu_memory_utilization is not None:
            gpu = f.torch.gpus[0] if f.torch.gpus else None
            held = f" = {s.gpu_memory_utilization * gpu.memory_gib:.1f} GiB of GPU 0" if gpu and s.local else ""
            memory = f"; vLLM holds gpu_memory_utilization {s.gpu_memory_utilization}{held}"
            if s.kv_cache_usage is not None:
                memory += f", its KV cache {100 * s.kv_cache_usage:.0f} % in use"
        elif s.metrics_error:
            memory = f"; its GPU memory is not reported ({s.metrics_error})"
        out.append(Line("ok", "server", f"{s.url} serves {', '.join(s.models) or 'no model listed'}{memory}"))
    else:
        out.append(Line("MISSING", "server", f"{s.url} not reachable ({s.error})",
                        "start it, e.g. vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000 --gpu-memory-utilization 0.6"))
    if f.plan is not None:
        out += plan_lines(f)
    d = f.data
    if d.error:
        out.append(Line("MISSING", "data", f"{d.root}: {d.error}", "kgrag data check"))
    else:
        detail = f"{d.root}: {d.present} files present"
        if d.missing_required:
            detail += f"; required missing: {', '.join(d.missing_required)}"
        if d.mismatched:
            detail += f"; size differs from the manifest: {', '.join(d.mismatched)}"
        if d.missing_optional:
            detail += f"; optional missing: {', '.join(d.missing_optional)}"
        bad = d.missing_required or d.mismatched
        out.append(Line("MISSING" if bad else "ok", "data", detail,
                        "kgrag data check (names how to obtain each file)" if bad else ""))
    return out


def _plan_checks(f: Findings) -> list[tuple[Line, str]]:
    """The plan's lines, each with what a verdict lists when it is MISSING."""
    p = f.plan
    out: list[tuple[Line, str]] = []
    engine = engine_line(p)
    if engine is not None:
        out.append((engine, ""))
    for w in p.weights:
        if not w.hub_id:
            continue
        size = f"{w.gib:.1f} GiB" if w.gib is not None else "size unknown"
        used = f"{w.role} of {', '.join(w.families)}, {'served by vLLM' if w.where == 'vllm-serve' else 'in kgrag'}"
        if w.gated and not w.cached and not p.token:
            out.append((Line("MISSING", f"weights {w.hub_id}", f"{size}, gated on the hub, and no hub token here ({used})",
                             HF_LOGIN), f"a hub token for {w.hub_id}"))
        else:
            state = "in the Hugging Face cache" if w.cached else "downloaded on first use"
            out.append((Line("ok" if w.cached else "info", f"weights {w.hub_id}", f"{size}, {state} ({used})"), ""))
    if p.disk_free_gib is not None:
        dl = p.download_gib
        detail = f"{p.disk_free_gib:.1f} GiB free at {p.hf_cache or 'the HF cache'}; the profile downloads {dl:.1f} GiB"
        if dl > p.disk_free_gib:
            out.append((Line("MISSING", "disk", detail, "free space there, or point HF_HOME at a larger disk"),
                        f"{dl:.0f} GiB of disk for the weights"))
        else:
            out.append((Line("ok", "disk", detail), ""))
    for d in p.data:
        detail = (f"{d.setting}: about {d.disk_gib:.0f} GiB of disk (files, store, embeddings, saved index), "
                  f"{d.build_ram_gib:.0f} GiB RAM while building once, {d.run_ram_gib:.0f} GiB per answering process, "
                  f"~{d.first_run_hours:.1f} h on one H100 the first time with KGRAG_EMBEDDER_DTYPE=fp16 (the default "
                  "fp32 encodes about half as fast; docs/PERFORMANCE.md)")
        if d.present:
            out.append((Line("ok", f"data {d.name}", detail), ""))
        else:
            out.append((Line("MISSING", f"data {d.name}", "not under the data root; " + detail,
                             f"kgrag data fetch {d.name}"), f"the {d.name} files (kgrag data fetch {d.name})"))
    if p.data and p.data_disk_free_gib is not None:
        need = p.data_disk_gib + (p.download_gib if p.data_disk_shared else 0.0)
        detail = (f"{p.data_disk_free_gib:.1f} GiB free at {p.data_root}; the papers' resources not fetched yet take "
                  f"{p.data_disk_gib:.1f} GiB (files, store, embeddings, saved index)"
                  + (f", and the model downloads {p.download_gib:.1f} GiB on the same disk" if p.data_disk_shared
                     and p.download_gib else ""))
        if need > p.data_disk_free_gib:
            out.append((Line("MISSING", "data disk", detail,
                             "free space there, or point the data root at a larger disk (--data-root or "
                             "$KGRAG_DATA_ROOT)"), f"{need:.1f} GiB of disk at {p.data_root} for the papers' data"))
        else:
            out.append((Line("ok", "data disk", detail), ""))
    gpu = f.torch.gpus[0] if f.torch.gpus else None
    served = any(w.where == "vllm-serve" for w in p.weights)
    if served and not f.vllm.server_env:
        out.append((Line("MISSING", "vLLM server env", f.vllm.server_error or "not found", VLLM_ENV), "vLLM (vllm-serve:)"))
    if gpu is None:
        return out
    if not served and f.server.reachable and f.server.local:
        out.append(_beside_running_server(f, gpu))
        return out
    free = gpu.free_gib if gpu.free_gib is not None else gpu.memory_gib
    if served and sum(p.vllm_servers) > 1:
        out.append(_servers_plan(p, gpu, free))
        return out
    if served:
        share = kgrag_share_gib(p.weights, p.dpo_gib) or 0.0
        util = p.vllm_utilization or 0.9
        need = util * gpu.memory_gib + share
        what = ("notebook 27's DPO training" if p.dpo_gib is not None and share >= p.dpo_gib
                else "its largest notebook's in-process models and index")
        detail = (f"vLLM takes gpu_memory_utilization {util} x {gpu.memory_gib:.1f} = {util * gpu.memory_gib:.1f} GiB for "
                  f"the whole study and kgrag's process, {what}, about {share:.1f} GiB beside it: {need:.1f} GiB; "
                  f"GPU 0 has {free:.1f} GiB free")
        fit = vllm_utilization_fit(gpu.memory_gib, free, share)
        if need > free:
            out.append((Line("MISSING", "GPU memory", detail,
                             f"server.gpu_memory_utilization: {fit} in the profile (or ?gpu_memory_utilization={fit} on "
                             "the vllm-serve: spec); vLLM refuses to start when less than its share is free"
                             + ("; or run notebooks 27 and 28 (in-process models) in a study of their own, without "
                                "vllm-serve: (--only 27 28)" if p.dpo_gib is not None or share > 2 * PROCESS_MARGIN_GIB
                                else "")),
                        f"gpu_memory_utilization <= {fit}"))
        else:
            out.append((Line("ok", "GPU memory", detail), ""))
        return out
    need = in_process_need_gib(p.weights, p.dpo_gib)
    if need is None:
        out.append((Line("info", "GPU memory", "a model's size is unknown, so the plan cannot be checked"), ""))
    else:
        what = ("notebook 27's DPO training (dpo_memory's plan, plus the margin)"
                if p.dpo_gib is not None and need == p.dpo_gib + PROCESS_MARGIN_GIB
                else "the profile's largest notebook (LLM weights x 1.25 for the KV cache, embedder, index)")
        detail = (f"{what} holds about {need:.1f} GiB in kgrag's process; GPU 0 has {free:.1f} GiB free of "
                  f"{gpu.memory_gib:.1f}")
        if need > free:
            fix = "free the GPU, or serve the LLM with vLLM (--model vllm-serve:<id>; docs/GPU.md)"
            if what.startswith("notebook 27"):
                fix = ("a GPU with more free memory; or train notebook 27 as QLoRA (notebooks: 27_dpo_training: "
                       "training_overrides: {load_in_4bit: true} in a profile that extends this one, and "
                       "pip install -e \".[qlora]\"); or leave notebook 27 out (--only the others)")
            out.append((Line("MISSING", "GPU memory", detail, fix), f"{need:.0f} GiB of free GPU memory"))
        else:
            out.append((Line("ok", "GPU memory", detail), ""))
    return out


def _servers_plan(p: Any, gpu: Any, free: float) -> tuple[Line, str]:
    """Several vLLM servers on one GPU (gpu-paper's engine: one per model): each takes the same share,
    the study's servers stay up throughout, and one notebook's own server (27's adapter, 28's Self-RAG
    generator) or notebook 27's DPO training joins them at a time."""
    shared, beside = p.vllm_servers
    inproc = kgrag_share_gib(p.weights) or PROCESS_MARGIN_GIB
    fit = planned_utilization(gpu.memory_gib, free, p.vllm_servers, inproc, p.dpo_gib)
    util = fit if p.utilization_planned else (p.vllm_utilization or 0.9)
    each = util * gpu.memory_gib
    peaks = [(shared + beside) * each + inproc]
    if p.dpo_gib is not None and shared:
        peaks.append(shared * each + p.dpo_gib + PROCESS_MARGIN_GIB)
    largest = max((w.gib or 0.0) for w in p.weights if w.where == "vllm-serve")
    how = "planned by kgrag study (no share set)" if p.utilization_planned else "as set"
    detail = (f"{shared} vLLM server(s) for the whole study + {beside} a notebook starts beside them, each "
              f"gpu_memory_utilization {util} ({how}) = {each:.1f} GiB; beside them kgrag's process holds about "
              f"{inproc:.1f} GiB" + (f", or {p.dpo_gib + PROCESS_MARGIN_GIB:.1f} GiB while notebook 27 trains (with "
                                     f"{shared} server(s) up)" if p.dpo_gib is not None else "")
              + f": peak {max(peaks):.1f} GiB; GPU 0 has {free:.1f} GiB free")
    if max(peaks) > free or each < largest * 1.1:
        why = (f"; {each:.1f} GiB per server cannot hold a {largest:.1f} GiB model and its KV cache"
               if each < largest * 1.1 else "")
        return (Line("MISSING", "GPU memory", detail + why,
                     f"server.gpu_memory_utilization: {fit} in the profile" if fit * gpu.memory_gib >= largest * 1.1
                     else "a GPU with more memory, or --engine hf (kgrag study/run: the models in kgrag's process, one "
                     "notebook at a time)"),
                f"gpu_memory_utilization <= {fit} for {shared + beside} vLLM servers")
    return Line("ok", "GPU memory", detail), ""


def engine_line(p: Any) -> Line | None:
    """What runs the profile's hub models here (run.engine), and where vLLM is the engine, how notebooks
    27 and 28 decode through it; None when the profile leaves the engine to its models (hf)."""
    if p.engine == "vllm-serve":
        served = sorted({w.spec for w in p.weights if w.where == "vllm-serve"})
        return Line("ok", "LLM engine", f"vllm-serve ({p.engine_why}): {', '.join(served)}, each started once per "
                    "study; notebook 27 answers its +DPO rows through vLLM with the trained LoRA adapter "
                    "(lora=dpo=<adapter>), notebook 28's Self-RAG generator reads its reflection tokens from the "
                    "served logprobs; DPO training stays in kgrag's process")
    if p.engine_asked == "auto":
        return Line("info", "LLM engine", f"hf, the fallback of run.engine auto: {p.engine_why.split(': hub')[0]}; "
                    "hub models run in kgrag's process (transformers)", INSTALL_VLLM)
    return None


def _beside_running_server(f: Findings, gpu) -> tuple[Line, str]:
    """kgrag's in-process models (embedders, Self-RAG's generator, notebook 27's DPO) against what a running
    server on this machine leaves free: the GPU's free memory now already excludes what the server holds."""
    p, s = f.plan, f.server
    share = kgrag_share_gib(p.weights, p.dpo_gib)
    if share is None:
        return Line("info", "GPU memory", "a model's size is unknown, so the plan cannot be checked"), ""
    held = s.gpu_memory_utilization * gpu.memory_gib if s.gpu_memory_utilization is not None else None
    free = gpu.free_gib if gpu.free_gib is not None else (gpu.memory_gib - held if held is not None else None)
    what = ("notebook 27's DPO training" if p.dpo_gib is not None and share >= p.dpo_gib
            else "its largest notebook's in-process models and index")
    held_text = (f"the server at {s.url} holds {held:.1f} GiB (vLLM, gpu_memory_utilization {s.gpu_memory_utilization})"
                 if held is not None else f"the server at {s.url} holds an unreported share")
    if free is None:
        return Line("info", "GPU memory", f"{held_text}; GPU 0's free memory is not known, so kgrag's "
                                         f"{share:.1f} GiB ({what}) cannot be checked beside it"), ""
    detail = f"{held_text}; kgrag's process, {what}, needs about {share:.1f} GiB beside it; GPU 0 has {free:.1f} GiB free"
    if share <= free:
        return Line("ok", "GPU memory", detail), ""
    fix = ("restart the server with less of the GPU (vLLM: --gpu-memory-utilization "
           + (f"{vllm_utilization_fit(gpu.memory_gib, free + held, share)})" if held is not None else "lower)")
           + "; or run notebooks 27 and 28 (in-process models) in a study of their own while no server holds the "
             "GPU (--only 27 28); kgrag study refuses them beside this server")
    return Line("MISSING", "GPU memory", detail, fix), f"{share:.0f} GiB of GPU memory beside the server"


def plan_lines(f: Findings) -> list[Line]:
    return [Line("info", "profile", f"{f.plan.profile}: what it loads on this machine")] + [l for l, _ in _plan_checks(f)]


def verdict(f: Findings) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(profiles this machine can run, [(profile, what it still needs)])."""
    have = {k for k, v in f.packages.items() if v}
    models = {m.name: m.present for m in f.models}
    data_ok = not f.data.error and not f.data.missing_required and not f.data.mismatched
    common = [] if data_ok else ["the data (kgrag data check)"]

    cpu = list(common)
    if not f.torch.version:
        cpu.append("torch")
    if not f.faiss.version:
        cpu.append("faiss")
    if not f.llamacpp.version:
        cpu.append("llama-cpp-python")
    if "sentence-transformers" not in have:
        cpu.append("sentence-transformers")
    if not models.get("qwen2.5-coder-0.5b-q4"):
        cpu.append("the embedded Qwen model packages")
    if not models.get("minilm (embedder)"):
        cpu.append("the MiniLM embedder package")

    gpu = list(common)
    gpus = f.torch.gpus
    if not gpus:
        gpu.append("an NVIDIA GPU visible to a CUDA build of torch")
    elif not any(g.bf16 for g in gpus):
        gpu.append("a bf16-capable GPU (compute capability >= 8.0)")
    gpu += [p for p in GPU_SMOKE_NEEDS if p not in have]

    paper = list(gpu)
    if gpus and max(g.memory_gib for g in gpus) < PAPER_MIN_GIB:
        paper.append(f"a GPU with >= {PAPER_MIN_GIB:.0f} GiB for 7-8B models in bf16")
    if not gpus:
        paper[paper.index("an NVIDIA GPU visible to a CUDA build of torch")] = \
            f"an NVIDIA GPU (>= {PAPER_MIN_GIB:.0f} GiB, bf16) visible to a CUDA build of torch"
    if f.plan is not None and f.plan.profile in ("gpu-smoke", "gpu-paper", "gpu-paper-data"):
        extra = [need for line, need in _plan_checks(f) if line.status == "MISSING" and need]
        (gpu if f.plan.profile == "gpu-smoke" else paper).extend(extra)
    can, cannot = [], []
    paper_name = "gpu-paper-data" if f.plan is not None and f.plan.profile == "gpu-paper-data" else "gpu-paper"
    for name, needs in (("cpu-smoke", cpu), ("gpu-smoke", gpu), (paper_name, paper)):
        (cannot.append((name, needs)) if needs else can.append(name))
    return can, cannot


def render(f: Findings) -> str:
    rows = lines(f)
    width = max(len(r.what) for r in rows)
    text = []
    for r in rows:
        text.append(f"{r.status:7s} {r.what:<{width}}  {r.detail}")
        if r.fix:
            text.append(f"{'':7s} {'':<{width}}  -> {r.fix}")
    can, cannot = verdict(f)
    gpu_note = []
    if f.torch.gpus and f.llamacpp.version and not f.llamacpp.gpu_offload:
        gpu_note.append("MetaQA's GGUF model would run on CPU (llama-cpp-python without GPU offload)")
    if f.torch.gpus and not (f.vllm.version or f.vllm.binary or f.server.reachable):
        gpu_note.append("no vLLM: the GPU profiles use the transformers backend")
    text.append("")
    text.append("this machine can run: " + (", ".join(can) or "none of the profiles")
                + ("; cannot run: " + "; ".join(f"{n} (needs {', '.join(w)})" for n, w in cannot) if cannot else ""))
    text += [f"note: {n}" for n in gpu_note]
    if not f.torch.gpus:
        text.append(f"for the GPU profiles, on a machine with an NVIDIA driver: {CONDA_ENV}  (or {PIP_GPU}), "
                    "then kgrag doctor; docs/INSTALL-GPU.md")
    return "\n".join(text)
