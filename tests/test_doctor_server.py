"""`kgrag doctor` asks a running OpenAI-compatible server for its model and, for vLLM, its share of the GPU
(GET /metrics), and counts it in the plan; `kgrag study` refuses notebooks 27/28 up front when their
in-process models cannot fit beside the study's server (issue 57).

The HTTP part runs against a real server on loopback (llama-cpp-python's, on the embedded model; marked
`model`, run it under `flock /tmp/kgrag-model.lock`). vLLM's /metrics comes from a hand-written imitation
that serves vLLM's own Prometheus text and, for fault injection, a failing, an empty and a malformed one.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from kgrag_lib import cli
from kgrag_lib.doctor import probes, report
from kgrag_lib.doctor.beside_server import refuse_beside_server
from kgrag_lib.doctor.probes import Gpu, Server, Torch
from kgrag_lib.errors import KgragError
from test_doctor import _plan_of, findings

QWEN = "Qwen/Qwen2.5-7B-Instruct"
H100_BUSY = Gpu("NVIDIA H100 80GB HBM3", 79.1, (9, 0), True, free_gib=7.2)    # vLLM at 0.9 is up
H100_IDLE = Gpu("NVIDIA H100 80GB HBM3", 79.1, (9, 0), True, free_gib=78.6)
# vLLM's /metrics as its Prometheus exporter writes it (vllm 0.33's names; the HELP text shortened)
VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.125
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="72413",num_gpu_blocks_override="None",sliding_window="None",swap_space_bytes="4294967296"} 1.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.1e+09
"""


def _imitation(metrics: tuple[int, str]):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path == "/v1/models":
                code, body, kind = 200, json.dumps({"data": [{"id": QWEN, "owned_by": "vllm"}]}), "application/json"
            elif self.path == "/metrics":
                code, body, kind = metrics[0], metrics[1], "text/plain; version=0.0.4"
            else:
                code, body, kind = 404, "{}", "application/json"
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def vllm_like(request):
    srv = HTTPServer(("127.0.0.1", 0), _imitation(getattr(request, "param", (200, VLLM_METRICS))))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_vllms_metrics_text_gives_its_share_of_the_gpu():
    m = probes.vllm_metrics(VLLM_METRICS)
    assert m["gpu_memory_utilization"] == 0.9 and m["kv_cache_usage"] == 0.125 and m["num_gpu_blocks"] == 72413
    old = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\nvllm:cache_config_info{gpu_memory_utilization="0.6"} 1.0\n'
    assert probes.vllm_metrics(old) == {"gpu_memory_utilization": 0.6, "kv_cache_usage": 0.5, "vllm": 1.0}
    assert probes.vllm_metrics("# HELP go_gc_duration_seconds x\ngo_gc_duration_seconds 0.1\n") == {}
    assert probes.vllm_metrics('vllm:cache_config_info{gpu_memory_utilization="None"} 1.0\n') == {"vllm": 1.0}
    assert probes.vllm_metrics("vllm:cache_config_info{gpu_memory_utilization=\"0.9\" garbage") == {"vllm": 1.0}


def test_the_doctor_reads_a_vllm_servers_model_and_share(vllm_like):
    s = probes.probe_server(vllm_like, QWEN)
    assert s.reachable and s.models == (QWEN,) and s.local and s.engine == "vllm"
    assert s.gpu_memory_utilization == 0.9 and s.kv_cache_usage == 0.125 and not s.metrics_error
    text = report.render(findings(torch=Torch("2.14.0", "13.0", (H100_BUSY,)), server=s))
    assert f"{vllm_like} serves {QWEN}; vLLM holds gpu_memory_utilization 0.9 = 71.2 GiB of GPU 0" in text
    missing = probes.probe_server(vllm_like, "meta-llama/Llama-3.1-8B-Instruct")
    row = next(r for r in report.lines(findings(server=missing)) if r.what == "server")
    assert row.status == "MISSING" and "not meta-llama/Llama-3.1-8B-Instruct" in row.detail


@pytest.mark.parametrize("vllm_like", [(500, "Internal Server Error"), (200, ""), (200, "vllm:cache_config_info{")],
                         indirect=True, ids=["metrics-500", "metrics-empty", "metrics-malformed"])
def test_a_server_whose_memory_cannot_be_read_says_so_and_refuses_nothing(vllm_like):
    s = probes.probe_server(vllm_like, QWEN)
    assert s.reachable and s.gpu_memory_utilization is None and s.metrics_error
    text = report.render(findings(torch=Torch("2.14.0", "13.0", (H100_BUSY,)), server=s))
    assert "its GPU memory is not reported" in text
    # with the GPU's free memory known, the plan still checks kgrag's share against it
    plan = dataclasses.replace(_plan_of("gpu-paper", model=f"openai:{vllm_like}#{QWEN}", token=True), dpo_gib=24.0)
    row = next(r for r in report.lines(findings(torch=Torch("2.14.0", "13.0", (H100_BUSY,)), server=s, plan=plan))
               if r.what == "GPU memory")
    assert row.status == "MISSING" and "an unreported share" in row.detail and "--gpu-memory-utilization lower" in row.fix


def test_the_plan_counts_a_running_server_and_names_the_share_that_fits(vllm_like):
    s = probes.probe_server(vllm_like, QWEN)
    plan = dataclasses.replace(_plan_of("gpu-paper", model=f"openai:{vllm_like}#{QWEN}", token=True), dpo_gib=24.0)
    f = findings(torch=Torch("2.14.0", "13.0", (H100_BUSY,)), server=s, plan=plan)
    row = next(r for r in report.lines(f) if r.what == "GPU memory")
    assert row.status == "MISSING" and "holds 71.2 GiB (vLLM, gpu_memory_utilization 0.9)" in row.detail
    assert "notebook 27's DPO training" in row.detail and "GPU 0 has 7.2 GiB free" in row.detail
    # what the server could hold: 7.2 free + 71.2 held, less kgrag's share of Self-RAG + embedders or DPO
    assert "--gpu-memory-utilization 0." in row.fix and "--only 27 28" in row.fix
    assert any("GiB of GPU memory beside the server" in n for n in dict(report.verdict(f)[1])["gpu-paper"])
    roomy = findings(torch=Torch("2.14.0", "13.0", (dataclasses.replace(H100_BUSY, free_gib=40.0),)), server=s, plan=plan)
    assert next(r for r in report.lines(roomy) if r.what == "GPU memory").status == "ok"


def test_the_doctor_asks_the_server_its_model_spec_names(vllm_like, monkeypatch, capsys):
    monkeypatch.delenv("KGRAG_VLLM_URL", raising=False)
    assert probes.server_of_model(f"openai:{vllm_like}#{QWEN}") == (vllm_like, QWEN)
    monkeypatch.setenv("KGRAG_VLLM_URL", vllm_like)
    assert probes.server_of_model(f"vllm:{QWEN}") == (vllm_like, QWEN)
    assert cli.main(["doctor", "--profile", "cpu-smoke", "--model", f"vllm:{QWEN}"]) == 0
    assert f"{vllm_like} serves {QWEN}; vLLM holds gpu_memory_utilization 0.9" in capsys.readouterr().out


# ---- kgrag study: refused before any question ---------------------------------------------------------
def test_study_refuses_27_beside_a_running_vllm_before_any_notebook(vllm_like, tmp_path, monkeypatch, capsys):
    from kgrag_lib.executors.local import LocalExecutor

    monkeypatch.setattr(probes, "probe_torch", lambda: Torch("2.14.0", "13.0", (H100_BUSY,)))
    monkeypatch.setattr(LocalExecutor, "run", lambda self, tasks: pytest.fail("a notebook ran"))
    monkeypatch.delenv("KGRAG_SKIP_GPU_PLAN", raising=False)
    argv = ["study", "--profile", "gpu-paper", "--only", "27", "--out", str(tmp_path / "out"),
            "--model", f"openai:{vllm_like}#{QWEN}"]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code != 0 and "27_dpo_training load models into kgrag's process" in err
    assert "which holds 71.2 GiB" in err and "7.2 GiB would be free" in err and "--only 27" in err
    monkeypatch.setenv("KGRAG_SKIP_GPU_PLAN", "1")   # told: the study goes on to its notebooks
    with pytest.raises(BaseException, match="a notebook ran"):
        cli.main(argv)


def test_study_refuses_27_and_28_beside_vllm_serve_at_its_default_share(tmp_path, monkeypatch):
    from kgrag_lib.notebooks import effective_profile

    monkeypatch.delenv("KGRAG_SKIP_GPU_PLAN", raising=False)
    served = effective_profile("gpu-paper", {"model": f"vllm-serve:{QWEN}"}, tmp_path / "a.yaml")
    with pytest.raises(KgragError, match=r"27_dpo_training and 28_plugins .* beside vllm-serve:Qwen/Qwen2.5-7B-Instruct "
                                         r"\(started by the study\), which holds 71.2 GiB"):
        refuse_beside_server(str(served), ["26_dpo_data", "27_dpo_training", "28_plugins"], gpu=H100_IDLE)
    smaller = effective_profile("gpu-paper", {"model": f"vllm-serve:{QWEN}?gpu_memory_utilization=0.55"},
                                tmp_path / "b.yaml")
    refuse_beside_server(str(smaller), ["27_dpo_training", "28_plugins"], gpu=H100_IDLE)   # 0.55: they fit
    refuse_beside_server(str(served), ["11_metaqa"], gpu=H100_IDLE)                       # nothing in-process
    remote = Server("http://gpu-box:8000/v1", True, (QWEN,), local=False, gpu_memory_utilization=0.9)
    plain = effective_profile("gpu-paper", {"model": f"openai:http://gpu-box:8000/v1#{QWEN}"}, tmp_path / "c.yaml")
    refuse_beside_server(str(plain), ["27_dpo_training"], gpu=H100_BUSY, server=remote)   # another machine's GPU


# ---- a real server on loopback --------------------------------------------------------------------------
# `lcp_server` (conftest.py): llama-cpp-python's server on the embedded model, shared with test_llm_server
@pytest.mark.model
def test_the_doctor_asks_a_real_server_for_its_model(lcp_server, capsys):
    """llama-cpp-python's server answers /v1/models (alias `qwen`) and has no vLLM /metrics: the doctor
    names the model, says the memory is unreported, and finds a model it does not serve missing."""
    s = probes.probe_server(lcp_server, "qwen")
    assert s.reachable and s.models == ("qwen",) and s.local and s.engine == "" and s.gpu_memory_utilization is None
    assert s.metrics_error
    assert cli.main(["doctor", "--profile", "cpu-smoke", "--model", f"openai:{lcp_server}#qwen"]) == 0
    out = capsys.readouterr().out
    assert f"{lcp_server} serves qwen; its GPU memory is not reported" in out
    assert cli.main(["doctor", "--profile", "cpu-smoke", "--model", f"openai:{lcp_server}#other"]) == 0
    out = capsys.readouterr().out
    assert f"{lcp_server} serves qwen, not other" in out and "MISSING" in out
