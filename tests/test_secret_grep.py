"""Issue 59, "done when": one secret grep over everything the entry points that take a secret write
and print. A run against a loopback OpenAI-compatible server (key from the environment, and in the
spec's URL), a run that starts a fake `llama-server` with `?args=[--api-key,X]`, a managed-server spec
that fails, `kgrag study` writing its profile, `data fetch` of a URL with user:password and a token,
and `--show-config`; then every file under the test's folder (results, caches, server logs, locks,
manifests, profile.yaml, downloads) and every captured line, warning and log record is searched for
the secrets, in plain text and in the forms they travel in (base64 Basic auth, URL-encoded).
Loopback servers and fake binaries only: no model is loaded."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes import OpenAIJsonHandler, serve_loopback
from kgrag_lib.cli import main
from kgrag_lib.data import fetch
from kgrag_lib.llm import managed_server as ms
from test_data_fetch import PSGS, Handler as FileHandler, Loopback, _manifest, _wikipedia
from test_server_args import _fake_llama_server

KEY = "sk-GREPKEY5150"            # the API key, in the environment and in a server's args
PASSWORD = "pw-GREPPASS8086"      # a URL's user:password
TOKEN = "tk-GREPTOKEN6502"        # a URL's ?token=
SHORT = "z9q"                     # a short key a 401 echoes back


def _forms(secret: str) -> list[bytes]:
    """A secret as it could leak: itself, URL-encoded, and inside a Basic auth header."""
    return [secret.encode(), urllib.parse.quote(secret).encode(),
            base64.b64encode(f"reader:{secret}".encode()), base64.b64encode(f"u:{secret}".encode())]


class _Chat(OpenAIJsonHandler):
    """An OpenAI-compatible server: lists model `m` (owned_by vllm) and answers "Louis Malle"; with
    `echo` set, it answers 401 echoing the bearer token, as some servers do."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.state.append((self.path, self.headers.get("Authorization")))   # type: ignore[attr-defined]
        if self.server.echo:   # type: ignore[attr-defined]
            key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            return self._send(401, {"error": {"message": f"Incorrect API key provided: {key}. Auth: "
                                                         f"{self.headers.get('Authorization')}"}})
        self._send(200, {"id": "x", "object": "chat.completion",
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "Louis Malle"}}],
                         "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})


def _serve(handler: type, state: Any = None) -> Any:
    return serve_loopback(handler, echo=False, state=state)


def test_no_secret_reaches_a_file_a_printed_line_a_warning_or_a_log(tmp_path, metaqa_root, capsys, monkeypatch,
                                                                    recwarn, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGRAG_FIGURES_DIR", str(tmp_path / "figures"))
    monkeypatch.setenv("KGRAG_OPENAI_API_KEY", KEY)
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    monkeypatch.setattr(fetch, "RETRY_BACKOFF_S", 0.0)
    printed: list[str] = []
    codes: dict[str, int] = {}

    def cli(name: str, argv: list[str]) -> None:
        codes[name] = main(argv)
        out, err = capsys.readouterr()
        printed.extend([out, err])
        assert "Traceback" not in out + err, name

    chat = _serve(_Chat, [])
    port = chat.server_address[1]
    run = ["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
           "--request-retries", "0", "--cache-dir", str(tmp_path / "cache")]
    try:
        # a run whose key comes from the environment, then one whose URL carries user:password and a token
        cli("env key", run + ["--model", f"openai:http://127.0.0.1:{port}/v1#m?flavor=vllm",
                              "--out", str(tmp_path / "run-env")])
        cli("url secrets", run + ["--model", f"openai:http://u:{PASSWORD}@127.0.0.1:{port}/v1?token={TOKEN}#m",
                                  "--out", str(tmp_path / "run-url")])
        # a server that echoes the (short) key back in its 401
        chat.echo = True   # type: ignore[attr-defined]
        monkeypatch.setenv("KGRAG_OPENAI_API_KEY", SHORT)
        cli("401 echo", run[:-1] + [str(tmp_path / "cache-401"),   # its own cache: no answer replayed
                                    "--model", f"openai:http://127.0.0.1:{port}/v1#m?flavor=vllm",
                                    "--out", str(tmp_path / "run-401")])
        monkeypatch.setenv("KGRAG_OPENAI_API_KEY", KEY)
    finally:
        chat.shutdown()
        chat.server_close()
    sent = {auth for _, auth in chat.state}   # type: ignore[attr-defined]
    assert {f"Bearer {KEY}", f"Bearer {SHORT}"} <= sent, sent   # the keys were used: the grep below is no vacuous pass

    # a server kgrag starts, given its key in the spec's args
    (tmp_path / "bin").mkdir()
    binary = _fake_llama_server(tmp_path / "bin")
    monkeypatch.setenv(ms.LLAMA_SERVER_ENV, str(binary))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    cli("llama-server args", run + ["--model", f"llama-server:{gguf}?args=[--api-key,{KEY}]",
                                    "--out", str(tmp_path / "run-llama")])
    argv_file = Path(str(binary) + ".argv.json")
    assert KEY in json.loads(argv_file.read_text())   # the server got its key...
    argv_file.unlink()                                 # ...and it is the server's own record, not kgrag's
    cli("failing vllm-serve", run + ["--model", f"vllm-serve:/nonexistent/model?args=[--api-key,{KEY}]",
                                     "--out", str(tmp_path / "run-vllm")])

    # kgrag study: its profile.yaml is written (key in the environment), or refused (key in the spec)
    study = ["study", "--profile", "cpu-smoke", "--only", "zz-no-such-notebook", "--out", str(tmp_path / "study")]
    cli("study env key", study + ["--model", "openai:http://127.0.0.1:9/v1#m"])
    assert (tmp_path / "study" / "profile.yaml").is_file()
    cli("study args key", study[:-1] + [str(tmp_path / "study2"),
                                        "--model", f"llama-server:{gguf}?args=[--api-key,{KEY}]"])
    cli("study url secret", study[:-1] + [str(tmp_path / "study3"),
                                          "--model", f"openai:http://u:{PASSWORD}@127.0.0.1:9/v1?token={TOKEN}#m"])

    # data fetch of a URL with user:password and a token
    files = _serve(FileHandler, Loopback())
    try:
        files.state.files["psgs_w100.tsv.gz"] = gzip.compress(PSGS)   # type: ignore[attr-defined]
        url = f"http://reader:{PASSWORD}@127.0.0.1:{files.server_address[1]}/psgs_w100.tsv.gz?token={TOKEN}"
        manifest = _manifest(tmp_path, {"wikipedia-2018": _wikipedia(url)})
        cli("data fetch --list", ["data", "fetch", "--list", "--root", str(tmp_path / "fetched"),
                                  "--manifest", str(manifest)])
        cli("data fetch", ["data", "fetch", "wikipedia-2018", "--root", str(tmp_path / "fetched"),
                           "--manifest", str(manifest)])
        missing = url.replace("psgs_w100", "absent")
        (tmp_path / "m404").mkdir()
        manifest404 = _manifest(tmp_path / "m404", {"wikipedia-2018": _wikipedia(missing)})
        cli("data fetch 404", ["data", "fetch", "wikipedia-2018", "--root", str(tmp_path / "fetched404"),
                               "--manifest", str(manifest404)])
    finally:
        files.shutdown()
        files.server_close()

    # --show-config of generator and KG specs carrying secrets
    cli("show-config", ["run", "--show-config", "--method", "self-rag", "--profile", "cpu-smoke",
                        "--set", f"generator=openai:http://u:{PASSWORD}@127.0.0.1:9/v1?api_key={TOKEN}#m",
                        "--set", "k_p=3"])

    assert codes == {"env key": 0, "url secrets": 0, "401 echo": 2, "llama-server args": 0, "failing vllm-serve": 2,
                     "study env key": 2,   # its profile.yaml written, then "no notebook matches"
                     "study args key": 2, "study url secret": 2, "data fetch --list": 0, "data fetch": 0,
                     "data fetch 404": 2, "show-config": 0}, codes
    assert (tmp_path / "fetched" / "wikipedia" / "psgs_w100.tsv").read_bytes() == PSGS

    given = {manifest, manifest404}   # the user's own manifests hold the URLs: they are input, not output
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p not in given]
    names = {p.name for p in written}
    assert {"manifest.json", ".run.lock.json", "profile.yaml", "psgs_w100.tsv"} <= names, sorted(names)
    assert any(p.suffix == ".log" for p in written) and any(p.suffix == ".sqlite" for p in written)
    said = printed + [str(w.message) for w in recwarn] + [r.getMessage() for r in caplog.records]
    for secret in (KEY, PASSWORD, TOKEN):
        for form in _forms(secret):
            assert [str(p) for p in written if form in p.read_bytes()] == [], (secret, form)
            assert [t for t in said if form.decode() in t] == [], (secret, form)
    short = [t for t in said if f" {SHORT}" in t or f"{SHORT}." in t or f"{SHORT}\"" in t]
    assert short == [], short


def test_the_http_clients_logs_are_masked(caplog):
    """httpx logs every request's URL at INFO ("HTTP Request: GET http://h/v1/models?token=X"): under a
    user's logging setup (a notebook's basicConfig) the token was printed. Found by the grep above."""
    from kgrag_lib.redact import guard_http_logs

    guard_http_logs()
    caplog.set_level(logging.INFO)
    logging.getLogger("httpx").info('HTTP Request: %s %s "%s"', "GET", f"http://h:1/v1/models?token={TOKEN}", "200")
    logging.getLogger("httpx").info("no secret: %d requests", 3)
    assert [r.getMessage() for r in caplog.records] == ['HTTP Request: GET http://h:1/v1/models?token=*** "200"',
                                                        "no secret: 3 requests"]


class _Models(OpenAIJsonHandler):
    """A server `kgrag doctor` probes: records what each GET carried, lists model `m`."""

    def do_GET(self) -> None:
        self.server.state.append((self.path, self.headers.get("Authorization")))   # type: ignore[attr-defined]
        super().do_GET()


def test_doctor_and_publish_write_and_print_no_secret(tmp_path, capsys, monkeypatch, recwarn, caplog):
    """The grep above, over `kgrag doctor` (secrets in the environment, in --server's and $VLLM_URL's
    URLs, in --model's server args and URL) and `report.publish` (secrets in the environment and in a
    run manifest's model URL, as an older kgrag or a hand edit left it): nothing it prints, logs or
    writes (the published folder is meant for git) holds them."""
    from kgrag_lib.llm.presets import VLLM_URL_ENV
    from kgrag_lib.report import publish as PUB
    from kgrag_lib.report import study as ST
    from test_study_report import _run

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("KGRAG_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    printed: list[str] = []
    codes: dict[str, int] = {}

    def call(name: str, fn: Any, argv: list[str]) -> None:
        codes[name] = fn(argv)
        out, err = capsys.readouterr()
        printed.extend([out, err])
        assert "Traceback" not in out + err, name

    srv = serve_loopback(_Models, state=[])
    host = f"127.0.0.1:{srv.server_address[1]}"
    try:
        monkeypatch.setenv(VLLM_URL_ENV, f"http://u:{PASSWORD}@{host}/v1?token={TOKEN}")
        call("doctor env url", main, ["doctor", "--profile", "cpu-smoke"])
        call("doctor server", main, ["doctor", "--server", f"http://reader:{PASSWORD}@{host}/v1?api_key={TOKEN}",
                                     "--model", f"llama-server:m.gguf?args=[--api-key,{KEY}]"])
        call("doctor model url", main, ["doctor", "--model", f"openai:http://u:{PASSWORD}@{host}/v1?token={TOKEN}#m"])
    finally:
        srv.shutdown()
        srv.server_close()
    assert len(srv.state) >= 2, srv.state   # type: ignore[attr-defined]   # the servers were asked: no vacuous pass

    results = tmp_path / "results" / "p"
    golds = ["Ann", "Bob", "Cy", "Di"]
    secret_model = f"openai:http://u:{PASSWORD}@127.0.0.1:9/v1?token={TOKEN}#m"
    for method, preds in (("llm", ["no", "Bob", "no", "no"]), ("kg-rag", ["Ann", "Bob", "Cy", "no"])):
        run = results / "12_x" / "runs" / "metaqa-1hop" / method
        _run(run, method, "metaqa-1hop", preds, golds)
        manifest = json.loads((run / "manifest.json").read_text())
        manifest["config"]["run"]["model"] = secret_model
        (run / "manifest.json").write_text(json.dumps(manifest))
    (results / "12_x" / "summary.json").write_text(json.dumps([{"dataset": "metaqa-1hop", "method": "kg-rag",
                                                                "hit1_mean": 75.0, "model": secret_model}]))
    from kgrag_lib.llm.cache import LLMCache

    LLMCache(tmp_path / "llm.sqlite").close()
    ST.write_report(ST.collect(results), results, "p")
    dest = PUB.publish(ST.collect(results), tmp_path / "published", llm_cache=tmp_path / "llm.sqlite", profile="p")
    call("publish main", PUB.main, [str(dest), "--profile", "p"])
    assert codes == {"doctor env url": 0, "doctor server": 0, "doctor model url": 0, "publish main": 0}, codes
    assert (dest / "REPORT.md").is_file()

    written = [p for p in (tmp_path / "published").rglob("*") if p.is_file()]
    said = printed + [str(w.message) for w in recwarn] + [r.getMessage() for r in caplog.records]
    for secret in (KEY, PASSWORD, TOKEN):
        for form in _forms(secret):
            assert [str(p) for p in written if form in p.read_bytes()] == [], (secret, form)
            assert [t for t in said if form.decode() in t] == [], (secret, form)


def test_a_fetch_through_the_source_mirror_writes_and_prints_no_secret(tmp_path, capsys, monkeypatch, caplog):
    """`data fetch --profile`-style: MetaQA from the loopback stand-in of the real sources
    (`source_mirror`: the shipped manifest's URLs, the derive step included), the mirror URL
    carrying user:password and each manifest URL a ?token=; then a mirror that answers 404. Every file
    under the data root and every printed line and log record is grepped."""
    import source_mirror

    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(fetch, "RETRY_BACKOFF_S", 0.0)
    monkeypatch.delenv("KGRAG_DATA_ROOT", raising=False)
    monkeypatch.delenv(fetch.MIRROR_ENV, raising=False)
    printed: list[str] = []
    with source_mirror.Mirror() as m:
        manifest, served = source_mirror.mirror_manifest(tmp_path / "manifest", ["metaqa"])
        doc = yaml.safe_load(manifest.read_text(encoding="utf-8"))
        for spec in doc["datasets"]["metaqa"]["files"]:
            if spec.get("url"):
                spec["url"] += ("&" if "?" in spec["url"] else "?") + f"token={TOKEN}"
        manifest.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        m.serve(served)
        host = m.url.removeprefix("http://")
        codes = {}
        for name, mirror in (("fetch", f"http://reader:{PASSWORD}@{host}"),
                             ("fetch 404", f"http://reader:{PASSWORD}@{host}/nothing-here")):
            codes[name] = main(["data", "fetch", "metaqa", "--root", str(tmp_path / name.replace(" ", "")),
                                "--manifest", str(manifest), "--mirror", mirror])
            out, err = capsys.readouterr()
            printed.extend([out, err])
            assert "Traceback" not in out + err
        asked = [path for path, _ in m.state.requests]
    assert codes == {"fetch": 0, "fetch 404": 2}, (codes, printed[-1][-500:])
    assert asked and (tmp_path / "fetch" / "metaqa" / "kb.txt").is_file()   # fetched and derived: no vacuous pass
    written = [p for p in (tmp_path / "fetch").rglob("*") if p.is_file()] + \
        [p for p in (tmp_path / "fetch404").rglob("*") if p.is_file()]
    said = printed + [r.getMessage() for r in caplog.records]
    for secret in (PASSWORD, TOKEN):
        for form in _forms(secret):
            assert [str(p) for p in written if form in p.read_bytes()] == [], (secret, form)
            assert [t for t in said if form.decode() in t] == [], (secret, form)


@pytest.mark.model   # the notebook's kernel loads the profile's real embedder (run under flock)
def test_a_study_that_runs_a_notebook_writes_and_prints_no_secret(tmp_path, metaqa_root, capsys, monkeypatch,
                                                                   caplog):
    """`kgrag study --profile cpu-smoke --only 00` with user:password and a token in the --model URL is
    refused before anything is written (the study's profile.yaml would hold them), naming neither; then
    run for real (the notebook executed in its kernel) against the loopback chat server with the key in
    the environment: the executed notebook, its run's files, the study's profile, manifest and logs and
    every printed line hold none of the three."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGRAG_FIGURES_DIR", str(tmp_path / "figures"))
    monkeypatch.setenv("KGRAG_OPENAI_API_KEY", KEY)
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    chat = _serve(_Chat, [])
    study = ["study", "--profile", "cpu-smoke", "--only", "00", "--out", str(tmp_path / "study"), "--model"]
    url = f"http://127.0.0.1:{chat.server_address[1]}/v1"
    try:
        refused = main(study + [f"openai:http://u:{PASSWORD}@{url.removeprefix('http://')}?token={TOKEN}#m"])
        said_refused = capsys.readouterr()
        assert refused == 2 and "carries a token" in said_refused.err, said_refused
        assert not (tmp_path / "study").exists()
        rc = main(study + [f"openai:{url}#m"])
        out, err = capsys.readouterr()
    finally:
        chat.shutdown()
        chat.server_close()
    out, err = said_refused.out + out, said_refused.err + err
    assert rc == 0, (out + err)[-3000:]
    assert f"Bearer {KEY}" in {auth for _, auth in chat.state}   # type: ignore[attr-defined]
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "data" not in p.relative_to(tmp_path).parts[:1]]
    names = {p.name for p in written}
    assert {"profile.yaml", "predictions.jsonl", "summary.json"} <= names and any(n.endswith(".ipynb") for n in names), \
        sorted(names)
    said = [out, err] + [r.getMessage() for r in caplog.records]
    for secret in (KEY, PASSWORD, TOKEN):
        for form in _forms(secret):
            assert [str(p) for p in written if form in p.read_bytes()] == [], (secret, form)
            assert [t for t in said if form.decode() in t] == [], (secret, form)
