"""The executors' parts that need no Ray: the study's notebook graph, the resources a task asks
for, and the message when Ray is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.executors import make_executor
from kgrag_lib.executors.base import Resources, resources_for
from kgrag_lib.notebooks import study_notebooks
from kgrag_lib.studies.order import study_graph


def test_the_study_graph_keeps_each_block_after_its_first_notebook_and_the_report_last():
    stems = [p.stem for p in study_notebooks()]
    g = study_graph(stems)
    assert g["00_quickstart"] == () and g["10_metaqa_kb"] == () and g["20_kg_preprocessing"] == ()
    assert g["21_kg_infused_main"] == ("20_kg_preprocessing",)
    assert g["23_activation_rounds"] == ("20_kg_preprocessing", "21_kg_infused_main", "22_kg_infused_ablation")
    assert g["27_dpo_training"] == ("20_kg_preprocessing", "26_dpo_data")
    assert all(g[s] == ("40_tcr_qf_kg_construction",) for s in ("41_tcr_qf_main", "42_tcr_qf_ablation",
                                                                  "43_tcr_qf_kg_growth"))
    assert g["50_cross_method"] == ("20_kg_preprocessing", "30_sa_rag_indexing", "40_tcr_qf_kg_construction")
    assert set(g["90_report"]) == set(stems) - {"90_report"}
    for s, before in g.items():   # the numbered order satisfies every edge (the local executor's order)
        assert all(stems.index(b) < stems.index(s) for b in before)
    # a selection keeps only edges between selected notebooks
    assert study_graph(["21_kg_infused_main", "23_activation_rounds"]) == {
        "21_kg_infused_main": (), "23_activation_rounds": ("21_kg_infused_main",)}


@pytest.mark.parametrize("spec, wanted", [
    (None, Resources(1, 0)),
    ("openai:http://10.0.0.5:8000/v1#Qwen/Qwen2.5-7B-Instruct", Resources(1, 0)),
    ("vllm:Qwen/Qwen2.5-7B-Instruct", Resources(1, 0)),
    ("vllm-serve:Qwen/Qwen2.5-7B-Instruct", Resources(1, 1)),
    ("hf:Qwen/Qwen2.5-7B-Instruct", Resources(1, 1)),
    ("qwen2.5-7b-instruct", Resources(1, 1)),
    ("qwen2.5-coder-0.5b-q4", Resources(2, 0)),
    ("llamacpp-server:qwen2.5-coder-0.5b-q4", Resources(2, 0)),
    ("/models/x.gguf", Resources(2, 0)),
])
def test_a_task_asks_for_a_gpu_only_when_its_model_runs_in_process_on_one(spec, wanted):
    assert resources_for(spec) == wanted


def test_executor_ray_without_ray_installed_says_how_to_install_it(monkeypatch):
    from kgrag_lib.executors.base import NotebookTask

    monkeypatch.setitem(sys.modules, "ray", None)   # import ray now raises ImportError
    ex = make_executor("ray")
    with pytest.raises(BackendUnavailableError, match=r"pip install -e '\.\[cluster\]' in the kgrag checkout"):
        ex.run([NotebookTask("t", Path("t.ipynb"), Path("."), Path("."), Path("t.out.ipynb"), {}, Path("."))])
    with pytest.raises(ConfigError, match="--address names a Ray cluster"):
        make_executor("local", address="10.0.0.5:6379")
