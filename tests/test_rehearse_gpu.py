"""The CI part of issue 39's rehearsal: `scripts/rehearse_gpu.py` runs gpu-smoke's first MetaQA
notebooks (00, 10) through both engines a GPU user picks, offline, from the HF cache it builds (the
whole study, every notebook, takes hours on 2 cores: docs/GPU.md). The data root is MetaQA's real
files with the KB cut to its first triples, so the cold triple embedding takes seconds, not the
4 minutes of the full KB (the path under test is the same; the answers are not findings).

It checks what a GPU user's first hour depends on: the hub ids of the profile resolve without a
network to the rehearsal's stand-ins (their revision says so), the transformers backend and a
managed `vllm-serve:` both answer, and every selected notebook ends with its summary written.

Run under the model lock: `flock /tmp/kgrag-model.lock .venv/bin/python -m pytest tests/test_rehearse_gpu.py`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_vllm_server import _embedded_or_skip, _engine_or_skip

pytestmark = [pytest.mark.model, pytest.mark.vllm]

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "rehearse_gpu.py"
NOTEBOOKS = ("00_quickstart", "10_metaqa_kb")
KB_TRIPLES = 3000


def _small_metaqa_root(tmp_path: Path) -> Path:
    """MetaQA in its real layout and files, the KB cut to the triples around the topic entities of the
    questions the notebooks sample (n = 2, seed 0, each hop count) and its first KB_TRIPLES lines."""
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.paths import data_root

    real = data_root() / "metaqa"
    root = tmp_path / "data"
    (root / "metaqa").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "kb.txt":
            (root / "metaqa" / entry.name).symlink_to(entry)
    topics = {e for k in (1, 2, 3) for q in load_questions(f"metaqa-{k}hop", n=2, seed=0) for e in q.topic_entities}
    with open(real / "kb.txt", encoding="utf-8") as src:
        kept = [line for i, line in enumerate(src)
                if i < KB_TRIPLES or line.split("|")[0] in topics or line.rstrip("\n").split("|")[-1] in topics]
    (root / "metaqa" / "kb.txt").write_text("".join(kept), encoding="utf-8")
    return root


def _script():
    spec = importlib.util.spec_from_file_location("rehearse_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rehearsal_subset_runs_through_both_engines_offline(tmp_path):
    from kgrag_lib.llm.vllm_env import args_identity

    _embedded_or_skip()
    _engine_or_skip()
    mod = _script()
    env = {**os.environ, "KGRAG_DATA_ROOT": str(_small_metaqa_root(tmp_path))}
    answers = tmp_path / "answers"   # never the repository's results/rehearsal/llm-cache
    # --eager: vLLM's start without torch.compile's minute, as every vLLM server of the suite (test_vllm_server.EAGER)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--engines", "hf", "vllm", "--eager", "--work", str(tmp_path / "work"),
                           "--answers", str(answers), "--only", *(nb[:2] for nb in NOTEBOOKS)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert "hf    ok" in proc.stdout and "vllm  ok" in proc.stdout, tail
    assert [p.name for p in answers.glob("part-*.jsonl.gz")] == ["part-0001.jsonl.gz"], tail   # kept for a fresh machine
    # the stand-in weights are found under the hub id at the rehearsal's own revision, never the hub's
    work = tmp_path / "work"
    hub = work / "hf" / "hub" / f"models--{mod.QWEN_ID.replace('/', '--')}"
    revision = (hub / "refs" / "main").read_text().strip()
    snapshot = hub / "snapshots" / revision
    assert json.loads((snapshot / "REHEARSAL.json").read_text())["stands_for"] == mod.QWEN_ID
    for engine in ("hf", "vllm"):
        study = work / f"study-{engine}"
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
            assert identity.endswith(args_identity(["--enforce-eager"])), identity   # --eager reached the server
        assert (study / "results.md").is_file()
        kb = json.loads((study / "10_metaqa_kb" / "summary.json").read_text())
        assert KB_TRIPLES < next(r["ours"] for r in kb if r["statistic"] == "triples") < 20000   # the cut KB was read
