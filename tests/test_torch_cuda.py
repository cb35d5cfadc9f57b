"""PyTorch's wheel index per torch release (`doctor.torch_cuda`): what each driver is sent to, checked against
the table's source rows, and the same answer from the script install_vllm.sh runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kgrag_lib.doctor import torch_cuda

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("torch_version, driver, expected", [
    ("2.8.0", "12.9", "cu129"),     # the one release cu129 carried
    ("2.9.1", "12.9", "cu128"),     # 2.9 onwards: cu126/cu128/cu130, no cu129
    ("2.11.0", "12.4", "cu126"),    # minor-version compatibility: the oldest build of the driver's major
    ("2.11.0", "12.8", "cu128"),
    ("2.12.0", "12.8", "cu126"),    # 2.12 dropped cu128
    ("2.14.0+cu130", "12.2", "cu126"),
    ("2.14.0", "13.0", "cu130"),
    ("2.14.0", "13.1", "cu130"),    # not above the driver when a build fits
    ("2.14.0", "13.2", "cu132"),
    ("2.15.0", "12.8", None),       # CUDA 12.6 removed in 2.15: no CUDA 12 build
    ("2.14.0", "11.8", None),
    ("3.0.0", "12.4", None),        # not in the table: no guess
    ("junk", "12.4", None),
])
def test_each_driver_is_sent_to_an_index_that_carries_the_release(torch_version, driver, expected):
    assert torch_cuda.index_for(torch_version, driver) == expected


def test_no_cuda_12_driver_is_ever_sent_to_a_cuda_13_build():
    for (major, minor), cudas in torch_cuda.TORCH_CUDA_INDEXES.items():
        for driver in ("12.0", "12.2", "12.4", "12.6", "12.8", "12.9"):
            found = torch_cuda.index_for(f"{major}.{minor}.0", driver)
            assert found is None or (not found.startswith("cu13") and found in {torch_cuda.tag(c) for c in cudas})


def test_the_newest_release_a_cuda_12_driver_runs_is_2_14_on_cu126():
    assert torch_cuda.newest_release_for("12.4") == ("2.14", "cu126")
    assert torch_cuda.newest_release_for("13.0") == ("2.15", "cu130")


def test_the_script_form_install_vllm_uses_answers_the_same_without_kgrag_on_the_path(tmp_path):
    script = REPO / "kgrag_lib" / "doctor" / "torch_cuda.py"
    ok = subprocess.run([sys.executable, "-I", str(script), "--torch", "2.14.0", "--driver-cuda", "12.4"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert ok.returncode == 0 and ok.stdout.strip() == "cu126", ok.stderr
    no = subprocess.run([sys.executable, "-I", str(script), "--torch", "2.15.0", "--driver-cuda", "12.4"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert no.returncode == 1 and "newest release with one is 2.14 (https://download.pytorch.org/whl/cu126)" in no.stderr
