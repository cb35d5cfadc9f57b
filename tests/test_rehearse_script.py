"""The pieces of `scripts/rehearse_gpu.py` that decide what the rehearsal loads, without a model:
the stand-in's dtype by the CPU's bf16 instructions, and which snapshot the hub id resolves to."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("rehearse_gpu_pieces", REPO / "scripts" / "rehearse_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bf16_only_where_the_cpu_has_the_instructions(tmp_path):
    mod = _script()
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu sse avx2 avx512f avx512bw\n")
    assert mod.cpu_has_bf16(info) is False                 # AVX-512 alone emulates bf16
    info.write_text("flags : fpu avx2 avx512f avx512_bf16\n")
    assert mod.cpu_has_bf16(info) is True
    info.write_text("flags : fpu avx2 amx_bf16 amx_tile\n")
    assert mod.cpu_has_bf16(info) is True
    assert mod.cpu_has_bf16(tmp_path / "absent") is True  # no /proc (macOS): assume it has


def test_the_hub_id_resolves_to_the_snapshot_this_machine_uses(tmp_path):
    """Two machines (bf16 and float32 stand-ins) may share a work folder: refs/main must name the
    snapshot placed last, even when that snapshot was already there."""
    mod = _script()
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    hub = tmp_path / "hub"
    bf16, fp32 = mod._revision("x;bfloat16"), mod._revision("x;float32")
    assert bf16 != fp32 and len(bf16) == 40
    refs = hub / "models--Org--M" / "refs" / "main"
    mod._place(hub, "Org/M", src, bf16)
    mod._place(hub, "Org/M", src, fp32)
    assert refs.read_text() == fp32
    mod._place(hub, "Org/M", tmp_path / "gone", bf16)        # already placed: not copied again
    assert refs.read_text() == bf16
    assert (hub / "models--Org--M" / "snapshots" / bf16 / "config.json").is_file()


def test_every_must_be_a_positive_finite_number_of_minutes(tmp_path):
    """Issue 59: `rehearse_gpu.py --every -1|0|nan` exported the cache about a million times in 3 s."""
    import argparse
    import subprocess
    import sys

    import pytest

    mod = _script()
    assert mod.minutes("10") == 10.0 and mod.minutes("0.5") == 0.5
    for bad in ("-1", "0", "nan", "inf", "abc", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a positive number of minutes"):
            mod.minutes(bad)
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "rehearse_gpu.py"), "--every", "nan",
                           "--work", str(tmp_path / "work")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "argument --every: 'nan': expected a positive number of minutes" in proc.stderr
    assert not (tmp_path / "work").exists()   # refused before anything was built


def test_reference_run_refuses_an_every_that_would_stop_or_spin_its_checkpoints(tmp_path):
    """Issue 59: `reference_run.sh --commit --every -1|abc` killed the checkpoint loop (exit 0, no checkpoint);
    `--every 0` exported the cache 1,016 times in 12 s. Refused before anything runs."""
    import subprocess

    for bad in ("-1", "abc", "0", "", "1.5", "010"):
        proc = subprocess.run(["bash", str(REPO / "scripts" / "reference_run.sh"), "--commit", "--every", bad, "99"],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert f"reference_run: --every '{bad}': expected a whole number of minutes > 0" in proc.stderr


def test_rehearse_refuses_a_work_path_that_is_a_file(tmp_path):
    """Issue 59: `rehearse_gpu.py --work /etc/passwd` ended in a traceback."""
    import subprocess
    import sys

    afile = tmp_path / "a-file"
    afile.write_text("x")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "rehearse_gpu.py"), "--work", str(afile)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"--work {afile}: not a folder" in proc.stderr and "Traceback" not in proc.stderr
    assert afile.read_text() == "x"


def test_reference_run_refuses_an_unknown_profile_in_one_line(tmp_path):
    """Issue 59: `reference_run.sh --profile bogus` ended in a Python traceback."""
    import subprocess

    import pytest

    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("reference_run.sh runs the checkout's .venv, which this checkout has not")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "reference_run.sh"), "--profile", "bogus", "99"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "reference_run: --profile 'bogus': profile 'bogus' not found" in proc.stderr
    assert "Traceback" not in proc.stderr
