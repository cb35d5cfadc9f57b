"""`kgrag doctor`: a true report of this machine, and the GPU lines from a GPU machine's findings.

The probes return dataclasses, so a GPU machine (an H100 with a CUDA torch, a T4 without bf16)
is given as data and its report and verdict are checked here, on a CPU machine.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from kgrag_lib import cli
from kgrag_lib.doctor import probes, report
from kgrag_lib.doctor.probes import Data, Faiss, Findings, Gpu, LlamaCpp, Machine, Model, NvidiaSmi, Server, Torch, Vllm

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
    assert report.FAISS_GPU in text
    assert report.LLAMA_CUDA in text
    assert report.VLLM_ENV in text
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
    f = findings(packages={p: None for p in probes.PACKAGES}, torch=Torch(None), faiss=Faiss(None),
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
        self.send_response(200 if self.path == "/v1/models" else 404)
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
