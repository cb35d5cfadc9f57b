"""The CI part of issue 39's rehearsal: `scripts/rehearse_gpu.py` runs gpu-smoke's first MetaQA
notebooks (00, 10, 13) through both engines a GPU user picks, offline, from the HF cache it builds
(the whole study, every notebook, takes hours on 2 cores: docs/GPU.md).

It checks what a GPU user's first hour depends on: the hub ids of the profile resolve without a
network to the rehearsal's stand-ins (their revision says so), the transformers backend and a
managed `vllm-serve:` both answer, and every selected notebook ends with its summary written.

Run under the model lock: `flock /tmp/kgrag-model.lock .venv/bin/python -m pytest tests/test_rehearse_gpu.py`.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_vllm_server import _embedded_or_skip, _engine_or_skip

pytestmark = [pytest.mark.model, pytest.mark.vllm]

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "rehearse_gpu.py"
NOTEBOOKS = ("00_quickstart", "10_metaqa_kb", "13_metaqa_qualitative")


def _script():
    spec = importlib.util.spec_from_file_location("rehearse_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rehearsal_subset_runs_through_both_engines_offline(tmp_path):
    _embedded_or_skip()
    _engine_or_skip()
    mod = _script()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--engines", "hf", "vllm", "--work", str(tmp_path),
                           "--only", *(nb[:2] for nb in NOTEBOOKS)],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert "hf    ok" in proc.stdout and "vllm  ok" in proc.stdout, tail
    # the stand-in weights are found under the hub id at the rehearsal's own revision, never the hub's
    hub = tmp_path / "hf" / "hub" / f"models--{mod.QWEN_ID.replace('/', '--')}"
    revision = (hub / "refs" / "main").read_text().strip()
    snapshot = hub / "snapshots" / revision
    assert json.loads((snapshot / "REHEARSAL.json").read_text())["stands_for"] == mod.QWEN_ID
    for engine in ("hf", "vllm"):
        study = tmp_path / f"study-{engine}"
        for nb in NOTEBOOKS:
            assert (study / "executed" / f"{nb}.ipynb").is_file(), (engine, nb)
            assert (study / nb / "summary.json").is_file(), (engine, nb)
        manifest = json.loads((study / "00_quickstart" / "run" / "manifest.json").read_text())
        assert manifest["config"]["qids"] and len(manifest["config"]["qids"]) == 2
        identity = manifest["llm"]["identity"]
        if engine == "hf":
            # the transformers backend names the hub id and the snapshot it loaded
            assert identity == f"hf:{mod.QWEN_ID}@{revision}", identity
        else:
            assert mod.QWEN_ID in identity and manifest["llm"]["backend"] != "hf", manifest["llm"]
        assert (study / "results.md").is_file()
