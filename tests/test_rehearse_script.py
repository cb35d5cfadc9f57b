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
