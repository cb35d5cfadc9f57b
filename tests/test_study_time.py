"""The study wall-time model (bench/study_time.py, bench/study_workload.py) and the device check
(scripts/gpu_day_check.py): the doc's table is the script's output on the committed inputs, the
workload enumeration reproduces the committed runs, and the device check's JSON feeds the model."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load(name: str, folder: str):
    if str(REPO / folder) not in sys.path:
        sys.path.insert(0, str(REPO / folder))
    spec = importlib.util.spec_from_file_location(name, REPO / folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


sw = _load("study_workload", "bench")
st = _load("study_time", "bench")


@pytest.fixture(scope="module")
def committed():
    return sw.read_committed()


def test_doc_table_is_the_scripts_output_on_the_committed_inputs(committed):
    wl = sw.study_workload("gpu-paper", committed=committed)
    setups = st.default_setups(st.PRESETS[st.DEFAULT_SERVED], st.PRESETS[st.DEFAULT_HF])
    _, times, inputs = st.model("gpu-paper", setups, wl=wl)
    assert st.render("gpu-paper", wl, times, inputs) == st.doc_block(REPO / "docs" / "GPU.md"), (
        "docs/GPU.md's study_time block is stale: run `.venv/bin/python bench/study_time.py --write-doc docs/GPU.md`")


def test_the_units_of_cpu_reference_are_the_committed_runs(committed):
    """Enumerated at the reference profile's sizes, every committed run is a unit with its question
    count, and the only units without a committed run are the ones priced otherwise."""
    wl = sw.study_workload("cpu-reference", committed=committed)
    units = {(nb, p.unit.config, p.unit.dataset): p.unit.question_runs for nb, ps in wl.notebooks.items() for p in ps}
    assert set(committed.lines) <= set(units)
    assert all(units[k] == n for k, n in committed.lines.items())
    uncommitted = {k[1].split("/")[0].split("_")[0] for k in set(units) - set(committed.lines)}
    assert uncommitted <= {"placebo", "dpo-data", "dpo-candidates+judge"}, uncommitted
    assert len(committed.lines) >= 130


def test_gpu_paper_sizes_and_replays(committed):
    wl = sw.study_workload("gpu-paper", committed=committed)
    # MetaQA: 11's 3 x 3 x 3 cells x 10 seeds x 100, 12's 4 systems x 3 sets x 8 seeds x 500
    assert wl.question_runs("11_metaqa_parameter_grid") == 27 * 10 * 100
    assert wl.question_runs("12_metaqa_baselines") == 4 * 3 * 8 * 500
    # a set smaller than n is used whole (Bamboogle 125, MuSiQue 200, 2Wiki 354)
    main = {p.unit.dataset: p.unit.question_runs for p in wl.notebooks["21_kg_infused_main"]}
    assert main == {"hotpotqa": 500, "2wiki": 354, "musique": 200, "bamboogle": 125, "strategyqa": 500}
    # 24 repeats 23's runs, 13's KG rows repeat 11's seed-0 cell: no request; 27's trained-model rows all new
    assert sum(p.requests for p in wl.notebooks["24_retrieval_recall"]) == 0
    assert [p.replayed for p in wl.notebooks["13_metaqa_qualitative"]].count(True) == 3
    dpo = [p for p in wl.notebooks["27_dpo_training"] if p.unit.config.startswith("dpo/")]
    assert dpo and not any(p.replayed for p in dpo) and all(p.unit.in_process for p in dpo)


def test_engine_speed_interpolates_and_holds_flat():
    e = st.EngineSpeed("e", "test", ((1, 100.0, 10.0), (8, 100.0, 80.0)), max_batch=8, continuous=True)
    assert e.at(1) == (100.0, 10.0)
    assert e.at(4.5) == (100.0, 45.0)
    assert e.at(64) == (100.0, 80.0)
    # 1,000 prompt tokens at 100/s + 800 completion tokens at 80/s
    assert st.engine_seconds(e, 1000, 800, 32, ()) == pytest.approx(20.0)


def test_padding_of_batches_decoded_to_their_longest():
    static = st.EngineSpeed("s", "test", ((1, 1.0, 1.0),), 8, continuous=False)
    served = st.EngineSpeed("v", "test", ((1, 1.0, 1.0),), 8, continuous=True)
    assert st.padding(static, 8, ((10, 10, 10),)) == pytest.approx(1.0)
    # lengths 1 and 3 equally likely: the longer of two is 3 with probability 3/4 -> E = 2.5 over a mean of 2
    assert st.padding(static, 2, ((1, 3),)) == pytest.approx(1.25)
    assert st.padding(served, 2, ((1, 3),)) == 1.0


def test_a_json_without_hf_levels_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="hf_throughput.levels"):
        st.speed_from_measured({"device": "x"}, 8)


def test_gpu_parts_refuse_without_cuda(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_day_check.py"), "--out", str(tmp_path),
                        "--only", "hf_throughput", "dpo"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert p.returncode == 1
    report = json.loads((tmp_path / "gpu_day_check.json").read_text())
    assert report["ok"] is False and set(report["errors"]) == {"hf_throughput", "dpo"}
    assert all("needs a CUDA device" in e for e in report["errors"].values())
    assert "hf_throughput" not in report and "dpo" not in report   # no number where nothing ran


def test_tiny_device_check_feeds_study_time(tmp_path, committed):
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_day_check.py"), "--tiny", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_day_check.json").read_text())
    assert report["ok"] and report["tiny"] and not report["errors"]
    levels = report["hf_throughput"]["levels"]
    assert [r["batch"] for r in levels] == [1, 8, 32] and all(r["decode_tok_s"] > 0 for r in levels)
    assert report["hf_throughput"]["agreement"]["prompts"] == 8
    assert report["dpo"]["finite"] and report["dpo"]["plan_gib"] > 0 and report["dpo"]["seconds_per_pair"] > 0
    assert report["faiss"]["search"][-1]["recall_at_6"] > 0.5
    assert [r["in_flight"] for r in report["client"]["levels"]] == [1, 4]

    wl = sw.study_workload("gpu-paper", committed=committed)
    hf = st.speed_from_measured(report, 8)
    assert hf.levels[0][2] == levels[0]["decode_tok_s"] and "--tiny" in hf.source
    setups = st.default_setups(st.PRESETS[st.DEFAULT_SERVED], hf, in_flight=4)
    _, times, inputs = st.model("gpu-paper", setups, measured=report, wl=wl)
    assert inputs["dpo"]["source"].startswith("measured")
    assert inputs["client_efficiency"] == {1: report["client"]["levels"][0]["kgrag_over_plain"],
                                           4: report["client"]["levels"][1]["kgrag_over_plain"]}
    text = st.render("gpu-paper", wl, times, inputs)
    assert "hf-measured" in text and "kgrag / plain client" in text
    # the all-hf set-up now runs at the tiny model's measured speed, not the stated one
    stated = st.model("gpu-paper", st.default_setups(st.PRESETS[st.DEFAULT_SERVED], st.PRESETS[st.DEFAULT_HF]),
                      wl=wl)[1]
    assert times[0].in_process_h != pytest.approx(stated[0].in_process_h)
