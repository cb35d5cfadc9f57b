"""`kgrag doctor`'s report: one line per finding, the command that fixes each gap, and a verdict.

Pure functions of `probes.Findings`, so a GPU machine's report is testable on a laptop. The
verdict names the profiles this machine can run and, for the others, what they still need.
"""

from __future__ import annotations

from dataclasses import dataclass

from .probes import Findings

# What the GPU path needs, as the fix lines print it.
CONDA_ENV = "conda env create -f environment.yml && conda activate kgrag"
PIP_GPU = 'pip install -e ".[gpu,notebooks]"'
VLLM_ENV = "conda env create -f environment-vllm.yml (vLLM runs in its own env; kgrag reaches it over HTTP)"
LLAMA_CUDA = ('conda install -c conda-forge llama-cpp-python "llama.cpp[build=cuda*]"  or  '
              'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36')
FAISS_GPU = 'conda install -c conda-forge "faiss-gpu>=1.9"  or  pip install faiss-gpu-cu12 (and pip uninstall faiss-cpu)'
# A 7-8B model in bf16 is about 15-16 GiB of weights; with the KV cache of batched generation the
# gpu-paper profile wants a 24 GiB card at least (its DPO step is planned for one 80 GB GPU).
PAPER_MIN_GIB = 24.0
GPU_SMOKE_NEEDS = ("transformers", "accelerate", "peft", "trl", "datasets", "sentence-transformers", "papermill")


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
        out.append(Line("MISSING", "torch", t.error or "not installed", f'{CONDA_ENV}  or  pip install -e ".[cpu]"'))
    else:
        out.append(Line("ok", "torch", f"{t.version} (CUDA build: {t.cuda_build or 'none, CPU-only'})"))
    if t.gpus:
        for i, g in enumerate(t.gpus):
            out.append(Line("ok", f"GPU {i}", f"{g.name}, {g.memory_gib:.1f} GiB, compute capability "
                                             f"{g.capability[0]}.{g.capability[1]}, bf16: {'yes' if g.bf16 else 'no'}"))
    else:
        why = t.error or ("torch sees no CUDA GPU" if t.version else "torch not installed")
        fix = ""
        if f.smi.present and t.version and not t.cuda_build:
            fix = f"this torch is a CPU build on a machine with an NVIDIA driver: {CONDA_ENV}"
        out.append(Line("info", "GPU", why, fix))
    if f.smi.present:
        out.append(Line("ok" if f.smi.gpus else "info", "nvidia-smi",
                        f"driver {f.smi.driver or '?'}, CUDA {f.smi.cuda or '?'}; "
                        + ("; ".join(f.smi.gpus) or f.smi.error or "no GPU listed")))
    else:
        out.append(Line("info", "nvidia-smi", "not found (no NVIDIA driver on this machine)"))
    fa = f.faiss
    if fa.version is None:
        out.append(Line("MISSING", "faiss", fa.error or "not installed", f'pip install -e ".[cpu]"  or  {FAISS_GPU}'))
    else:
        gpu = (f"GPU build, sees {fa.num_gpus} GPU(s)" if fa.gpu_build else "CPU build")
        out.append(Line("ok", "faiss", f"{fa.version}, {gpu}", "" if fa.gpu_build or not t.gpus else FAISS_GPU))
    lc = f.llamacpp
    if lc.version is None:
        out.append(Line("MISSING", "llama-cpp-python", lc.error or "not installed", 'pip install -e ".[cpu]"'))
    else:
        off = {True: "GPU offload: yes", False: "GPU offload: no (CPU build)", None: "GPU offload: unknown"}[lc.gpu_offload]
        out.append(Line("ok", "llama-cpp-python", f"{lc.version}, {off}", LLAMA_CUDA if t.gpus and not lc.gpu_offload else ""))
    v = f.vllm
    if v.version or v.binary:
        out.append(Line("ok", "vLLM", ", ".join(x for x in (f"importable {v.version}" if v.version else "",
                                                          f"binary {v.binary}" if v.binary else "") if x)))
    else:
        out.append(Line("info", "vLLM", "not installed (optional: a faster server for the GPU profiles)", VLLM_ENV))
    for name, fix in (("transformers", PIP_GPU), ("accelerate", PIP_GPU), ("peft", PIP_GPU), ("trl", PIP_GPU),
                      ("datasets", PIP_GPU), ("sentence-transformers", PIP_GPU), ("numba", PIP_GPU),
                      ("papermill", 'pip install -e ".[notebooks]"'), ("ipywidgets", PIP_GPU),
                      ("jupyterlab", 'pip install -e ".[lab]"')):
        out.append(_pkg(f, name, fix))
    out.append(_pkg(f, "bitsandbytes", "pip install bitsandbytes (only for 4-bit QLoRA / 4-bit HF loading)", needed=False))
    out.append(_pkg(f, "ray", "not used by kgrag", needed=False))
    for mo in f.models:
        out.append(Line("ok" if mo.present else "info", f"model {mo.name}", mo.detail, mo.fix))
    s = f.server
    if s.url is None:
        out.append(Line("info", "server", "none named (--server URL or $KGRAG_VLLM_URL)"))
    elif s.reachable:
        out.append(Line("ok", "server", f"{s.url} serves {', '.join(s.models) or 'no model listed'}"))
    else:
        out.append(Line("MISSING", "server", f"{s.url} not reachable ({s.error})",
                        "start it, e.g. vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000"))
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
    can, cannot = [], []
    for name, needs in (("cpu-smoke", cpu), ("gpu-smoke", gpu), ("gpu-paper", paper)):
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
