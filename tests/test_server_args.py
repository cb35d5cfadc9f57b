"""Issue 59 ("a run never lies, part four"): what a server spec's options and `server.args` may do.

A secret in `?args=[--api-key,X]` reaches the server but no file, log or printed line; a server kgrag
starts listens on loopback only and keeps the flags kgrag sets, in every spelling its parser takes;
spec options are read as the user wrote them. Fake `llama-server` binaries and loopback servers
only: no model is loaded."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kgrag_lib.cli import main
from kgrag_lib.config import ServerConfig
from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.llm import load_llm
from kgrag_lib.llm import managed_server as ms
from kgrag_lib.redact import MASK, hold_secret, redact

SECRET = "sk-ARGSECRET42"


# ---- redact() on server arguments ----------------------------------------------------------------------------
@pytest.mark.parametrize("text, shown", [
    ("vllm-serve:/m?args=[--api-key,sk-X1]", "vllm-serve:/m?args=[--api-key,***]"),
    ("llama-server:m.gguf?args=[--api-key=sk-X1,--jinja]", "llama-server:m.gguf?args=[--api-key=***,--jinja]"),
    ("vllm-serve:m?args=%5B--hf-token%2Chf_X1%5D", "vllm-serve:m?args=%5B--hf-token%2C***%5D"),
    ("serve m --host 127.0.0.1 --api-key sk-X1 --max-num-batched-tokens 2048 --tokenizer t",
     "serve m --host 127.0.0.1 --api-key *** --max-num-batched-tokens 2048 --tokenizer t"),
    ("['--ssl-key-password', 'pw1', '--db_secret', 's3']", "['--ssl-key-password', '***', '--db_secret', '***']"),
    ('["--api_key", "sk-X1"]', '["--api_key", "***"]'),
    ("args:\n- --api-key\n- sk-X1\n- --enforce-eager\n", "args:\n- --api-key\n- ***\n- --enforce-eager\n"),
    ("args=[--kv-cache-dtype,fp8,--enforce-eager]", "args=[--kv-cache-dtype,fp8,--enforce-eager]"),
    ("a multi-token answer; the --api-key (a flag)", "a multi-token answer; the --api-key (a flag)"),   # prose
])
def test_redact_masks_the_value_after_a_secret_bearing_flag(text, shown):
    assert redact(text) == shown


def test_redact_masks_a_secret_flag_value_in_a_list_of_words_and_nested_configs():
    words = ["--api-key", "sk-X1", "--tokenizer", "tok", "--hf-token=hf_X2", "--served-model-name", "m"]
    assert redact(words) == ["--api-key", MASK, "--tokenizer", "tok", f"--hf-token={MASK}", "--served-model-name", "m"]
    assert redact({"server": {"args": ("--api-key", "k")}}) == {"server": {"args": ("--api-key", MASK)}}
    assert redact(["--api-key", "--enforce-eager"]) == ["--api-key", "--enforce-eager"]   # a flag is no value


def test_a_short_key_the_process_holds_is_masked_where_it_stands_alone(monkeypatch):
    monkeypatch.setenv("KGRAG_OPENAI_API_KEY", "k3y")
    assert redact("Incorrect API key provided: k3y.") == f"Incorrect API key provided: {MASK}."
    assert redact("the k3yboard and ok3y stay") == "the k3yboard and ok3y stay"
    hold_secret("ab1")
    assert redact('{"error": "bad key ab1"}') == f'{{"error": "bad key {MASK}"}}'


def test_redact_stays_linear_on_long_runs_of_scheme_characters():
    """A 100 kB line of `a-a-a-...` (a long flag list, a hash chain) took minutes: each position tried
    a URL scheme up to the end of the line. A scheme is at most 32 characters now."""
    import time

    started = time.perf_counter()
    assert redact("--" + "a-" * 50_000) == "--" + "a-" * 50_000
    assert redact("x " + "a-" * 50_000 + " http://u:pw@h/v1?token=t") == "x " + "a-" * 50_000 + " http://***@h/v1?token=***"
    assert time.perf_counter() - started < 5


# ---- a full run through a fake llama-server ---------------------------------------------------------------------
def _fake_llama_server(tmp_path: Path) -> Path:
    """A stand-in `llama-server`: listens where --host/--port say, lists --alias (owned_by llamacpp),
    answers every chat request "Louis Malle", and records its argv (as the real one's log would)."""
    script = tmp_path / "llama-server"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""\
        import http.server, json, sys
        argv = sys.argv[1:]
        opt = lambda f: argv[len(argv) - 1 - argv[::-1].index(f) + 1]   # the last value, as llama.cpp takes it
        open(sys.argv[0] + ".argv.json", "w").write(json.dumps(argv))
        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass
            def _send(self, code, payload):
                body = json.dumps(payload).encode()
                self.send_response(code); self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
            def do_GET(self):
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": opt("--alias"), "owned_by": "llamacpp"}]})
                self._send(404, {"error": "not found"})
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(200, {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "Louis Malle"}}],
                                 "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})
        http.server.HTTPServer((opt("--host"), int(opt("--port"))), H).serve_forever()
        """))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_an_api_key_in_server_args_reaches_the_server_but_no_file_and_no_output(tmp_path, metaqa_root, capsys,
                                                                                monkeypatch, recwarn):
    """Issue 59: `llama-server:x.gguf?args=[--api-key,sk-X]` wrote the key to manifest.json,
    .run.lock.json and the server's log (its command line)."""
    binary = _fake_llama_server(tmp_path)
    monkeypatch.setenv(ms.LLAMA_SERVER_ENV, str(binary))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    spec = f"llama-server:{gguf}?args=[--api-key,{SECRET}]"
    rc = main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress", "--model", spec,
               "--request-retries", "0", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    argv = json.loads(Path(str(binary) + ".argv.json").read_text())
    assert argv[argv.index("--api-key") + 1] == SECRET                    # the server got its key
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "llama-server.argv.json"]
    names = {p.name for p in files}
    assert {"manifest.json", ".run.lock.json"} <= names and any(p.suffix == ".log" for p in files)
    assert [p for p in files if SECRET.encode() in p.read_bytes()] == []
    assert not any(SECRET in t for t in [out, err] + [str(w.message) for w in recwarn])
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["run"]["model"] == f"llama-server:{gguf}?args=[--api-key,{MASK}]"
    log = next(p for p in files if p.suffix == ".log").read_text()
    assert f"--api-key {MASK}" in log and "--host 127.0.0.1" in log


def test_a_failing_spec_with_a_key_in_its_args_prints_no_key(tmp_path, capsys):
    """Issue 59: `vllm-serve:/nonexistent?args=[--api-key,sk-X]` printed the key in its error."""
    rc = main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
               "--model", f"vllm-serve:/nonexistent/model?args=[--api-key,{SECRET}]",
               "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 2 and "kgrag: error:" in err and SECRET not in err
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_a_study_refuses_a_key_in_server_args_instead_of_writing_it_into_its_profile(tmp_path):
    """Issue 59: `kgrag study --model "llama-server:...?args=[--api-key,sk-X]"` wrote the key into the
    study's profile.yaml (read by every notebook). The key belongs in the server's environment."""
    from kgrag_lib.notebooks import effective_profile

    path = tmp_path / "study" / "profile.yaml"
    with pytest.raises(ConfigError, match=r"kgrag study: .*args=\[--api-key,\*\*\*\].*carries a token.*LLAMA_API_KEY") as e:
        effective_profile("cpu-smoke", {"model": f"llama-server:m.gguf?args=[--api-key,{SECRET}]"}, path)
    assert SECRET not in str(e.value) and not path.exists()


def test_a_short_key_echoed_by_a_401_is_not_printed(tmp_path, metaqa_root, capsys, monkeypatch, recwarn):
    """Issue 59: a key shorter than 6 characters, echoed back by a server's 401, was printed."""
    from fakes import OpenAIJsonHandler, serve_loopback

    class Echo(OpenAIJsonHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            self._send(401, {"error": {"message": f"Incorrect API key provided: {key}. Check it."}})

    srv = serve_loopback(Echo)
    monkeypatch.setenv("KGRAG_OPENAI_API_KEY", "q7z")
    try:
        rc = main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
                   "--model", f"openai:http://127.0.0.1:{srv.server_address[1]}/v1#m?flavor=vllm",
                   "--request-retries", "0", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")])
    finally:
        srv.shutdown()
        srv.server_close()
    out, err = capsys.readouterr()
    assert rc == 2 and "HTTP 401" in err and f"provided: {MASK}" in err
    assert not any("q7z" in t for t in [out, err] + [str(w.message) for w in recwarn])
    assert [p for p in tmp_path.rglob("*") if p.is_file() and b"q7z" in p.read_bytes()] == []


# ---- loopback only, and the flags kgrag sets ----------------------------------------------------------------------
@pytest.fixture
def never_started(monkeypatch):
    """A server start that would run is a failure: every case here must be refused first."""
    monkeypatch.setattr(ms.ManagedServer, "start", lambda self: pytest.fail(f"started {self.cmd}"))
    monkeypatch.setattr(ms, "_missing_modules", lambda names: [])
    monkeypatch.setenv(ms.LLAMA_SERVER_ENV, "/bin/true")


@pytest.mark.parametrize("prefix", ["llama-server", "llamacpp-server"])
@pytest.mark.parametrize("args, flag", [
    ("[--host,0.0.0.0]", "--host"),
    ("[--host=0.0.0.0]", "--host"),
    ("[--port,1]", "--port"),
    ("[--port=1]", "--port"),
])
def test_a_llama_server_may_not_be_moved_off_loopback_or_its_port(never_started, tmp_path, prefix, args, flag):
    """Issue 59: `llama-server:...?args=[--host,0.0.0.0]` was accepted; the command line ended
    `--host 127.0.0.1 ... --host 0.0.0.0` and the model was served on every interface, without a key."""
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ConfigError, match=rf"server\.args: {flag} is set by kgrag \((loopback only|a free port)\); "
                                          "remove it from args"):
        load_llm(f"{prefix}:{gguf}?args={args}", cache=False)


@pytest.mark.parametrize("start, words, given, says", [
    (ms.start_llama_server, ["-a", "x"], "-a", "kgrag's alias; remove it from args"),
    (ms.start_llama_server, ["--ctx-size", "99"], "--ctx-size", "server.max_model_len; remove it from args and set"),
    (ms.start_llamacpp_python, ["--model_alias", "x"], "--model_alias", "kgrag's alias; remove it"),
    (ms.start_llamacpp_python, ["--ho", "0.0.0.0"], "--ho",                       # an argparse prefix
     "kgrag (loopback only) (llama-cpp-python's server's parser takes it as short for --host)"),
    (ms.start_llamacpp_python, ["--config_file", "c.json"], "--config_file", "a config file would replace"),
])
def test_every_flag_a_llama_server_gets_from_kgrag_is_refused_in_args(never_started, tmp_path, start, words, given,
                                                                     says):
    with pytest.raises(ConfigError) as e:
        start(tmp_path / "m.gguf", config=ServerConfig(args=words))
    assert str(e.value).startswith(f"server.args: {given} is set by ") and says in str(e.value)


@pytest.mark.parametrize("word, how", [
    ("--served_model_name", " (vLLM reads it as --served-model-name)"),   # vLLM's parser reads '_' as '-'
    ("--served-model-name=x", ""),
    ("--port=1", ""),
    ("--host=0.0.0.0", ""),
    ("--serv", " (vLLM's parser takes it as short for --served-model-name)"),   # an argparse prefix
])
def test_vllm_refuses_its_owned_flags_in_every_spelling(word, how):
    """Issue 59: `--served_model_name` passed the check and kgrag then waited for up to 900 s for an
    alias the server never listed; `--port=1` moved the server."""
    from kgrag_lib.llm.vllm_env import VllmEngine, server_args

    gpu = VllmEngine("/venv/bin/python", "vllm", "0.33.0", "/venv")
    with pytest.raises(ConfigError) as e:
        server_args(gpu, ServerConfig(args=[word, "v"]), dtype="auto")
    given = word.split("=")[0]
    assert str(e.value).startswith(f"server.args: {given} is set by ") and f"{how}; remove it from args" in str(e.value)


def test_flags_kgrag_does_not_set_still_pass():
    from kgrag_lib.llm.vllm_env import VllmEngine, server_args

    gpu = VllmEngine("/venv/bin/python", "vllm", "0.33.0", "/venv")
    words = ["--enforce-eager", "--kv-cache-dtype", "fp8", "--api-key", "k", "--hosts-file", "h"]
    assert server_args(gpu, ServerConfig(args=words), dtype="auto")[0][-len(words):] == words
    assert ms.refuse_owned(["--jinja", "-fa"], ms.LLAMA_SERVER_OWNED, "llama-server", abbrev=False) == ["--jinja", "-fa"]


# ---- spec options as the user wrote them ------------------------------------------------------------------------
@pytest.fixture
def started(monkeypatch):
    """What load_llm would give vllm-serve (its ServerConfig), without starting anything."""
    from kgrag_lib import hub
    from kgrag_lib.llm import vllm_env
    from kgrag_lib.llm.backends import hf

    seen = {}

    def fake_start(model, *, config=None, **kw):
        seen["config"] = config
        raise BackendUnavailableError("not started in this test")

    monkeypatch.setattr(ms, "start_vllm", fake_start)
    monkeypatch.setattr(vllm_env, "find_vllm", lambda python=None: vllm_env.VllmEngine("/p", "vllm", "0.33.0", "/v"))
    monkeypatch.setattr(hub, "hub_revision", lambda repo_id, **kw: "ab" * 20)
    monkeypatch.setattr(hf, "fetch_weights", lambda *a, **k: None)
    return seen


def test_spec_option_numbers_are_read_as_written(started):
    """Issue 59: `?max_num_seqs=010` reached vLLM as 8 (YAML 1.1 octal); `?gpu_memory_utilization=1e-9` was
    refused as "must be float" (YAML 1.1 reads it as a string). 010 is refused (the user meant 10 or
    something else: say it in plain decimal); 1e-9 is the float it reads as."""
    with pytest.raises(ConfigError, match=r"max_num_seqs= '010': an ambiguous number .* plain decimal"):
        load_llm("vllm-serve:org/m?max_num_seqs=010", cache=False)
    assert not started
    with pytest.raises(BackendUnavailableError, match="not started"):
        load_llm("vllm-serve:org/m?gpu_memory_utilization=1e-9&max_num_seqs=10", cache=False)
    assert started["config"].gpu_memory_utilization == 1e-9 and started["config"].max_num_seqs == 10
    with pytest.raises(ConfigError, match=r"'gpu_memory_utilization' must be a number in \(0, 1\] or null, got 2\.0"):
        load_llm("vllm-serve:org/m?gpu_memory_utilization=2e0", cache=False)


@pytest.mark.parametrize("spec", ["vllm-serve:org/m?max_num_seqs=4&max_num_seqs=8",
                                  "llama-server:m.gguf?max_model_len=4096&max_model_len=8192",
                                  "openai:http://127.0.0.1:9/v1#m?flavor=vllm&flavor=sglang"])
def test_an_option_given_twice_is_refused(started, spec):
    """Issue 59: a key given twice kept the last value silently."""
    with pytest.raises(ConfigError, match=r"given twice after '\?'; give it once"):
        load_llm(spec, cache=False)


def test_a_key_in_vllm_args_is_no_part_of_the_cache_identity(monkeypatch):
    """The args join the weights' identity (hashed, written to the manifest); a key in them changes no
    answer, and a short key could be found from its hash: it is hashed masked."""
    from kgrag_lib.llm.vllm_env import args_identity

    assert args_identity(["--api-key", "k1"]) == args_identity(["--api-key", "other-key"]) == args_identity(
        ["--api-key", MASK])
    assert args_identity(["--api-key", "k1", "--enforce-eager"]) != args_identity(["--api-key", "k1"])
    assert args_identity(["--kv-cache-dtype", "fp8"]) != args_identity(["--kv-cache-dtype", "auto"])
