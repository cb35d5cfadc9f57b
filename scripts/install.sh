#!/usr/bin/env bash
# Create (or reuse) .venv and install kgrag with the embedded CPU default, notebooks, JupyterLab
# (the `lab` extra: `.venv/bin/jupyter lab results/cpu-smoke/executed` opens the executed notebooks),
# tests and Ray (the `cluster` extra: `--executor ray` and its tests).
# llama-cpp-python builds from source (~5 min on 2 cores). GGML_NATIVE=OFF: some VMs advertise
# CPU features (AMX) they do not execute, and a -march=native build then dies with
# "Illegal instruction" at the first generation; we build for AVX2 explicitly instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}"
.venv/bin/pip install -e ".[cpu,notebooks,lab,test,cluster]"
