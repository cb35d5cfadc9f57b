"""Bad files and paths, fed to every loader and every command that reads a file: an empty, binary,
Latin-1, truncated or directory input ends in one line naming the file (and the line where there
is one) and the expected form, exit code 2 on the CLI, never a traceback; `kgrag run` fails
before any model is loaded. Also kept: a corrupt middle line of predictions.jsonl is an error,
a torn last line is repaired on resume. And a token in a server spec reaches the server but no file
and no message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

import kgrag_lib.llm
import kgrag_lib.retrieval
from kgrag_lib.cli import main
from kgrag_lib.data import iter_passages, load_2wiki_corpus, load_metaqa_kb, read_triples
from kgrag_lib.data.registry import load_corpus, load_questions
from kgrag_lib.data.wikidata5m import read_aliases, read_descriptions, read_triple_ids
from kgrag_lib.errors import ConfigError, DataFormatError, KgragError
from kgrag_lib.kg.sources import load_kg
from kgrag_lib.methods.base import Method
from kgrag_lib.records import Prediction, Question
from kgrag_lib.runner import read_predictions, run_method

KINDS = ("empty", "binary", "latin1", "truncated", "directory")
BINARY = b"\x00\x01\x02\xffgarbage\x00\xfe" * 40


class Sample:
    """A small valid file in one format; its last record holds an 'é', so its Latin-1 copy is not UTF-8."""

    def __init__(self, name: str, records: list[Any], *, json_list: bool = False, jsonl: bool = False, cut: int = 10):
        lines = [json.dumps(r, ensure_ascii=False) if (json_list or jsonl) else r for r in records]
        self.name, self.cut = name, cut
        self.text = ("[\n" + ",\n".join(lines) + "\n]\n") if json_list else "".join(f"{ln}\n" for ln in lines)
        self.last = self.text.rindex(lines[-1])  # where the last record starts

    def good(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.name
        path.write_text(self.text, encoding="utf-8")
        return path

    def bad(self, folder: Path, kind: str) -> tuple[Path, int | None]:
        """The bad file of `kind`, and the line its error must name (None: no line)."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.name
        if kind == "directory":
            path.mkdir()
            return path, None
        if kind == "truncated":  # cut inside the last record, where it cannot pass for a whole one
            text = self.text[: self.last + self.cut]
            path.write_text(text, encoding="utf-8")
            return path, text.count("\n") + 1
        path.write_bytes({"empty": b"", "binary": BINARY, "latin1": self.text.encode("latin-1")}[kind])
        return path, {"empty": None, "binary": 1, "latin1": self.text[: self.text.index("é")].count("\n") + 1}[kind]


QUESTIONS = {
    "metaqa-1hop": Sample("qa_test.txt", ["who directed [Kismet]\tWilliam Dieterle",
                                          "what films did [Grégoire Colin] act in\tBefore the Rain"]),
    "hotpotqa": Sample("h.jsonl", [
        {"_id": f"h{i}", "question": q, "answer": "Kansas Song", "supporting_facts": [["Kansas Song", 0]],
         "context": [["Kansas Song", ["Kansas Song is a fight song."]]]}
        for i, q in enumerate(["What is the fight song?", "What did Grégoire sing?"])], jsonl=True),
    "2wiki": Sample("w.json", [{"_id": f"w{i}", "question": q, "answer": "no", "type": "comparison"}
                               for i, q in enumerate(["Same nationality?", "Is Sciopèn by Grégoire?"])],
                    json_list=True),
    "musique": Sample("m.jsonl", [
        {"id": f"m{i}", "question": q, "answer": "Stanley", "paragraphs": [
            {"idx": 0, "title": "Mountrail County", "paragraph_text": "Stanley is the seat.", "is_supporting": True}]}
        for i, q in enumerate(["What is the seat?", "Where is Grégoire?"])], jsonl=True),
    "bamboogle": Sample("bamboogle.json", [{"Question": q, "Answer": "Titan IIIE"}
                                           for q in ("What launched Voyager 2?", "What launched Grégoire?")],
                        json_list=True),
    "bamboogle-csv": Sample("bamboogle.csv", ["What launched Voyager 2?,,,,Titan IIIE,,", "Who is Grégoire?,,,,Me,,"]),
    "strategyqa": Sample("s.json", [{"qid": f"s{i}", "question": q, "answer": True, "facts": ["A fact."]}
                                    for i, q in enumerate(["Is it old?", "Is Grégoire old?"])], json_list=True),
}
KB = Sample("kb.txt", ["Kismet|directed_by|William Dieterle", "Grégoire Colin|starred_actors|Before the Rain"])
PREDICTIONS = Sample("predictions.jsonl", [{"prediction": "Kismet", "answers": ["Kismet"]},
                                           {"prediction": "Grégoire", "answers": ["Grégoire Colin"]}], jsonl=True)


def assert_one_line(msg: str, path: Path, line: int | None, kind: str) -> None:
    """One line naming the file (and line), saying what is wrong; no download advice for a directory."""
    assert "\n" not in msg.strip() and "Traceback" not in msg
    where = f"{path}:{line}" if line is not None else str(path)
    assert where in msg, (where, msg)
    assert {"binary": "binary data", "latin1": "is not UTF-8", "directory": "is a directory, not a file",
            "empty": "no ", "truncated": "expected"}[kind] in msg
    if kind == "directory":
        assert "How to obtain" not in msg and "Download" not in msg


# ---- the library ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dataset", list(QUESTIONS))
def test_every_question_loader(tmp_path, dataset, kind):
    name = dataset.removesuffix("-csv")
    sample = QUESTIONS[dataset]
    assert len(load_questions(name, path=sample.good(tmp_path / "good"))) == 2
    path, line = sample.bad(tmp_path, kind)
    with pytest.raises(KgragError) as err:
        load_questions(name, path=path)
    assert_one_line(str(err.value), path, line, kind)


CORPUS = Sample("corpus.json", [{"title": "Kismet", "text": "A film."}, {"title": "Sciopèn", "text": "Grégoire."}],
                json_list=True)
WD_ALIASES = Sample("wikidata5m_entity.txt", ["Q1\tuniverse\tcosmos", "Q2\tGrégoire"], cut=2)
WD_TEXT = Sample("wikidata5m_text.txt", ["Q1\tThe universe.", "Q2\tGrégoire is a name."], cut=2)
WD_TRIPLES = Sample("wikidata5m_all_triplet.txt", ["Q1\tP31\tQ2", "Q2\tP31\tQé"], cut=2)
PSGS = Sample("psgs_w100.tsv", ["id\ttext\ttitle", '1\t"Kismet is a film."\tKismet', '2\t"Grégoire."\tGrégoire'])
TSV = Sample("t.tsv", ["Kismet\tdirected by\tWilliam Dieterle", "Grégoire\tstarred in\tBefore the Rain"])
READERS: dict[str, tuple[Sample, Callable[[Path], Any]]] = {
    "metaqa kb": (KB, load_metaqa_kb),
    "tsv triples": (TSV, lambda p: list(read_triples(p, "tsv"))),
    "2wiki corpus": (CORPUS, load_2wiki_corpus),
    "wikidata5m aliases": (WD_ALIASES, lambda p: list(read_aliases(p))),
    "wikidata5m descriptions": (WD_TEXT, lambda p: list(read_descriptions(p))),
    "wikidata5m triples": (WD_TRIPLES, lambda p: list(read_triple_ids(p))),
    "wikipedia passages": (PSGS, lambda p: list(iter_passages(p))),
    "predictions": (PREDICTIONS, read_predictions),
}


@pytest.mark.parametrize("kind", ["binary", "latin1", "truncated", "directory"])
@pytest.mark.parametrize("reader", list(READERS))
def test_every_file_reader(tmp_path, reader, kind):
    sample, read = READERS[reader]
    path, line = sample.bad(tmp_path, kind)
    with pytest.raises(KgragError) as err:
        read(path)
    msg = str(err.value)
    if reader == "wikidata5m triples" and kind == "latin1":  # read as bytes: the 'é' is a malformed id
        assert f"{path}:2" in msg and "Qhead<TAB>Prel<TAB>Qtail" in msg
    elif reader == "predictions" and kind != "truncated":  # runner.read_predictions' own messages, no line
        assert str(path) in msg and "\n" not in msg
    else:
        assert_one_line(msg, path, line, kind)


def test_empty_files_are_refused_where_they_cannot_be_meant(tmp_path):
    """The readers yield nothing from an empty file; questions, corpora and KGs built from one are refused."""
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert load_metaqa_kb(empty) == [] and read_predictions(empty) == []
    for call, what in [(lambda: load_questions("hotpotqa", path=empty), "no questions"),
                       (lambda: load_corpus("2wiki", path=empty), "no passages"),
                       (lambda: load_kg(f"metaqa:{empty}", cache_dir=tmp_path / "cache"), "has no triples")]:
        with pytest.raises(KgragError, match=what) as err:
            call()
        assert str(empty) in str(err.value) and "\n" not in str(err.value)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"at least one metaqa-1hop question, each one question per line"):
        load_questions("metaqa-1hop", path=blank)
    no_records = tmp_path / "none.json"
    no_records.write_text("[]", encoding="utf-8")
    with pytest.raises(DataFormatError, match="no questions"):
        load_questions("strategyqa", path=no_records)


def test_a_utf16_file_is_named_as_such(tmp_path):
    path = tmp_path / "qa.txt"
    path.write_text(QUESTIONS["metaqa-1hop"].text, encoding="utf-16")
    with pytest.raises(DataFormatError, match=r"qa\.txt:1: .*got 'UTF-16 text \(re-save the file as UTF-8\)'"):
        load_questions("metaqa-1hop", path=path)


def test_a_directory_as_the_data_roots_file_gives_no_download_advice(tmp_path):
    (tmp_path / "metaqa" / "kb.txt").mkdir(parents=True)
    with pytest.raises(KgragError) as err:
        load_kg("metaqa", data_root=tmp_path, cache_dir=tmp_path / "cache")
    assert "kb.txt: is a directory, not a file; expected the MetaQA KB file" in str(err.value)
    assert "How to obtain" not in str(err.value)


# ---- the CLI -------------------------------------------------------------------------------------------------------
@pytest.fixture
def no_models(monkeypatch, tmp_path):
    """Caches and data under tmp_path; loading an LLM or an embedder fails the test."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(kgrag_lib.llm, "load_llm", refuse)
    monkeypatch.setattr(kgrag_lib.retrieval, "load_embedder", refuse)
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGRAG_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.delenv("KGRAG_LLM_CACHE", raising=False)


def _run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _kgrag_run(tmp_path: Path, *args: str) -> list[str]:
    return ["run", "--method", "llm-kg", "--dataset", "metaqa-1hop", "--out", str(tmp_path / "out"),
            "--no-progress", *args]


COMMANDS: dict[str, tuple[Sample, Callable[[Path, Path], list[str]]]] = {
    "score": (PREDICTIONS, lambda tmp, p: ["score", str(p)]),
    "kg stats": (KB, lambda tmp, p: ["kg", "stats", "--triples", str(p)]),
    "kg neighbors": (KB, lambda tmp, p: ["kg", "neighbors", "--triples", str(p), "--entity", "Kismet"]),
    "run --qa-file": (QUESTIONS["metaqa-1hop"], lambda tmp, p: _kgrag_run(tmp, "--qa-file", str(p))),
    "run --kb": (KB, lambda tmp, p: _kgrag_run(tmp, "--qa-file", str(QUESTIONS["metaqa-1hop"].good(tmp / "good")),
                                               "--kb", str(p))),
    "data stats": (QUESTIONS["hotpotqa"], lambda tmp, p: ["data", "stats", "--dataset", "hotpotqa", "--path", str(p)]),
}


# `kgrag data stats` describes a file: an empty one truly has 0 questions, so that pair is not an error.
@pytest.mark.parametrize("command, kind", [(c, k) for c in COMMANDS for k in KINDS
                                           if (c, k) != ("data stats", "empty")])
def test_every_command_that_reads_a_file(tmp_path, capsys, no_models, command, kind):
    sample, argv = COMMANDS[command]
    path, line = sample.bad(tmp_path / "bad", kind)
    rc, out, err = _run_cli(argv(tmp_path, path), capsys)
    assert rc == 2 and out == ""
    assert err.startswith("kgrag: error: ") and err.count("\n") == 1, err
    if kind == "empty" and command in ("kg stats", "kg neighbors", "score"):
        assert str(path) in err and "no " in err
    else:
        assert_one_line(err, path, line, kind)


def test_score_bootstrap_needs_resamples(tmp_path, capsys):
    path = PREDICTIONS.good(tmp_path)
    for n_boot in ("0", "-5"):
        rc, out, err = _run_cli(["score", str(path), "--ci", "--n-boot", n_boot], capsys)
        assert rc == 2 and out == ""
        assert err == f"kgrag: error: --n-boot: expected an integer >= 1 (bootstrap resamples for --ci), got {n_boot}\n"


def test_no_traceback_reaches_the_terminal(tmp_path):
    """The installed `kgrag` script, in a real process: one line on stderr, exit code 2."""
    path, _ = PREDICTIONS.bad(tmp_path, "binary")
    kgrag = Path(sys.executable).with_name("kgrag")
    proc = subprocess.run([str(kgrag), "score", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"kgrag: error: {path}:1: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


# ---- predictions.jsonl of a run: a corrupt middle line stops, a torn last line is repaired --------------------------
class FixedMethod(Method):
    name = "fixed"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def answer(self, q: Question) -> Prediction:
        self.asked.append(q.qid)
        return Prediction(q.qid, q.question, q.answers[0], q.answers, self.name)


QS = [Question(f"q{i}", f"question {i}", [f"answer {i}"], dataset="metaqa-1hop") for i in range(1, 5)]


def test_a_corrupt_middle_line_is_an_error_and_is_left_as_it_is(tmp_path, capsys):
    run_method(FixedMethod(), QS, tmp_path, {}, progress=False)
    pred = tmp_path / "predictions.jsonl"
    lines = pred.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = lines[1][:25] + "\n"
    pred.write_text("".join(lines), encoding="utf-8")
    damaged = pred.read_bytes()
    rc, out, err = _run_cli(["score", str(pred)], capsys)
    assert rc == 2 and err.startswith(f"kgrag: error: {pred}:2: malformed input") and err.count("\n") == 1
    method = FixedMethod()
    with pytest.raises(DataFormatError, match=rf"{pred}:2: malformed input"):
        run_method(method, QS, tmp_path, {}, progress=False)
    assert method.asked == [] and pred.read_bytes() == damaged  # nothing re-asked, nothing dropped


def test_a_torn_last_line_is_repaired_on_resume(tmp_path, capsys):
    run_method(FixedMethod(), QS[:3], tmp_path, {}, progress=False)
    pred = tmp_path / "predictions.jsonl"
    with open(pred, "a", encoding="utf-8") as fh:
        fh.write('{"qid": "q4", "predic')  # the write a kill interrupted
    rc, out, err = _run_cli(["score", str(pred)], capsys)
    assert rc == 2 and err.startswith(f"kgrag: error: {pred}:4: ")  # not scorable until resumed
    method = FixedMethod()
    metrics = run_method(method, QS, tmp_path, {}, progress=False)
    assert method.asked == ["q4"] and metrics["n"] == 4
    rows = [json.loads(line) for line in pred.read_text(encoding="utf-8").splitlines()]
    assert [r["qid"] for r in rows] == ["q1", "q2", "q3", "q4"]


def test_a_negative_seed_is_refused_naming_the_parameter(tmp_path, capsys):
    from kgrag_lib.cli import main

    assert main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "2", "--seed", "-1",
                 "--out", str(tmp_path / "run")]) == 2
    assert "parameter 'seed' must be an integer in [0, 2147483647], got -1" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_an_output_folder_that_is_a_file_is_refused(tmp_path, offline_parts, metaqa_root, capsys):
    from kgrag_lib.cli import main

    (tmp_path / "taken").write_text("a file of mine")
    assert main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--out", str(tmp_path / "taken"),
                 "--no-progress"]) == 2
    assert "is a file" in capsys.readouterr().err and (tmp_path / "taken").read_text() == "a file of mine"


def test_a_stalled_server_fails_within_the_request_timeout_saying_so(tmp_path, metaqa_root, capsys):
    """Fault injection: a loopback server that accepts and never answers. `--request-timeout 1`
    ends the run in seconds, not the 10 minutes x 4 tries it once took."""
    import socket
    import threading
    import time

    from kgrag_lib.cli import main

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port, held, stop = srv.getsockname()[1], [], threading.Event()

    def accept_and_hold():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])   # never answered
            except OSError:
                continue

    t = threading.Thread(target=accept_and_hold, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        rc = main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
                   "--model", f"openai:http://127.0.0.1:{port}/v1#m?flavor=openai", "--request-timeout", "1",
                   "--request-retries", "0", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")])
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    assert rc == 2 and elapsed < 30
    assert "within 1 s" in capsys.readouterr().err


# ---- a broken OpenAI-compatible server: fault injection from a loopback http.server ---------------------------------
def _chat(content: str = '"Louis Malle"', usage: str | None = '{"prompt_tokens": 3, "completion_tokens": 2}') -> bytes:
    return ('{"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0, "message": '
            f'{{"role": "assistant", "content": {content}}}, "finish_reason": "stop"}}]'
            + (f', "usage": {usage}' if usage is not None else "") + "}").encode()


JSON, HTML = "application/json", "text/html"
PAGE = b"<html><body>Welcome to nginx</body></html>"
# case, the endpoint that answers badly, its body and type, the outcome, what the error (or the row) says
BAD_REPLIES = [
    ("invalid-json-models", "models", b'{"data": [', JSON, "exit 2", "GET /models is not valid JSON"),
    ("html-models", "models", PAGE, HTML, "exit 2", "not an OpenAI-compatible server: GET /models answered '<html>"),
    ("list-models", "models", b'[{"id": "m"}]', JSON, "exit 2", "not an OpenAI-compatible server: GET /models answered"),
    ("non-utf8-models", "models", b'{"data": [{"id": "m\xff"}]}', JSON, "exit 2", "GET /models is not UTF-8 text"),
    ("invalid-json-chat", "chat", b'{"choices": [', JSON, "exit 2", "/chat/completions is not valid JSON"),
    ("html-chat", "chat", PAGE, HTML, "exit 2", "not an OpenAI-compatible server: its answer to a completion"),
    ("non-utf8-chat", "chat", _chat('"Louis Malle\xff"').replace(b"\xc3\xbf", b"\xff"), JSON, "exit 2",
     "/chat/completions is not UTF-8 text"),
    ("usage-missing", "chat", _chat(usage=None), JSON, "answered, 0 tokens", "Louis Malle"),
    ("usage-strings", "chat", _chat(usage='{"prompt_tokens": "three", "completion_tokens": "2"}'), JSON,
     "answered, 0 tokens", "Louis Malle"),
    ("usage-negative", "chat", _chat(usage='{"prompt_tokens": -3, "completion_tokens": -2}'), JSON,
     "answered, 0 tokens", "Louis Malle"),
    ("content-int", "chat", _chat("42"), JSON, "question failed", "replied with int content '42', not text"),
    ("content-dict", "chat", _chat('{"text": "Louis Malle"}'), JSON, "question failed", "replied with dict content"),
]


# the stand-in server names no weights and runs as vLLM with llama.cpp's repeat penalty: both warnings are
# expected here, and 16 cases of them filled CI's log tail in place of its slowest tests
@pytest.mark.filterwarnings("ignore:.*does not say which weights:UserWarning",
                            "ignore:.*repeat_penalty=.*counts every prompt:UserWarning")
@pytest.mark.parametrize("case, where, body, ctype, outcome, says", BAD_REPLIES, ids=[r[0] for r in BAD_REPLIES])
def test_a_bad_server_reply(tmp_path, metaqa_root, capsys, case, where, body, ctype, outcome, says):
    """A broken server ends the run in one line naming its URL; a bad answer to one request fails
    that question (recorded) or, for a bad `usage`, counts its tokens as unreported (0): never a
    traceback, never a made-up answer or cost."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    models = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, data: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/v1/models":
                self.send_error(404)
            else:
                self._send(*((body, ctype) if where == "models" else (models, JSON)))

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(*((body, ctype) if where == "chat" else (_chat(), JSON)))

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    try:
        rc, out, err = _run_cli(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
                                 "--model", f"openai:{url}#m?flavor=vllm", "--request-timeout", "5",
                                 "--request-retries", "0", "--cache-dir", str(tmp_path / "cache"),
                                 "--out", str(tmp_path / "run")], capsys)
    finally:
        srv.shutdown()
        srv.server_close()
    if outcome == "exit 2":
        assert rc == 2 and err.startswith(f"kgrag: error: {url} ") and err.count("\n") == 1, err
        assert says in err
        return
    assert rc == 0, err
    [row] = read_predictions(tmp_path / "run" / "predictions.jsonl")
    if outcome == "question failed":
        assert row["failed"] and row["prediction"] == "" and says in row["error"]
    else:
        assert row["prediction"] == says and not row.get("failed")
        assert row["cost"]["llm_prompt_tokens"] == row["cost"]["llm_completion_tokens"] == 0


# ---- secrets in a server spec: used to connect, never written or printed -------------------------------------------
SECRETS = ("SECRET1", "SECRET2")


@pytest.fixture
def openai_server():
    """Fault injection: a loopback OpenAI-compatible server serving model `m` (every answer
    "Tom Hanks"); yields its port and the (path, Authorization header) of each request."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str | None]] = []
    completion = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Tom Hanks"},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: Any) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data = json.dumps(body).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            models = {"object": "list", "data": [{"id": "m", "object": "model"}]}
            self._answer(models if self.path.split("?")[0] == "/v1/models" else None)

        def do_POST(self) -> None:
            self._answer(completion if self.path.split("?")[0] == "/v1/chat/completions" else None)

        def log_message(self, *args: Any) -> None:   # the server's log is no output of the run
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1], seen
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()


def _secret_spec(host: str) -> str:
    return f"openai:http://user:SECRET1@{host}/v1?api_key=SECRET2#m?flavor=vllm"   # vllm: the cpu-smoke profile samples with top_k


SECRET_SPECS = [   # (spec template, the model the manifest records, the credentials the server must see)
    (_secret_spec("{host}"), "openai:http://***@{host}/v1?api_key=***#m?flavor=vllm",
     ("/v1/chat/completions?api_key=SECRET2", b"user:SECRET1")),
    ("openai:http://{host}/v1?code=SECRET2#m?flavor=vllm", "openai:http://{host}/v1?code=***#m?flavor=vllm",
     ("/v1/chat/completions?code=SECRET2", None)),                       # Azure Functions style
    ("openai:http://user:p@SECRET1@{host}/v1#m?flavor=vllm", "openai:http://***@{host}/v1#m?flavor=vllm",
     ("/v1/chat/completions", b"user:p@SECRET1")),                       # a password holding '@'
]


@pytest.mark.parametrize("template,recorded,sent", SECRET_SPECS, ids=["userinfo+api_key", "code=", "p@ssword"])
def test_a_token_in_the_server_url_reaches_the_server_but_no_file_and_no_output(tmp_path, metaqa_root, openai_server,
                                                                                capsys, recwarn, monkeypatch,
                                                                                template, recorded, sent):
    import base64

    port, seen = openai_server
    host = f"127.0.0.1:{port}"
    argv = ["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
            "--model", template.format(host=host), "--cache-dir", str(tmp_path / "cache"),
            "--out", str(tmp_path / "run")]
    monkeypatch.setattr(sys, "argv", ["kgrag", *argv])   # the run lock records the command line
    assert main(argv) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in rows] == ["Tom Hanks"]
    basic = "Basic " + base64.b64encode(sent[1]).decode() if sent[1] else "Bearer not-needed"
    assert (sent[0], basic) in seen   # the credentials went where the URL said
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite" for p in files) and any(p.name == ".run.lock.json" for p in files)
    printed = [out, err] + [str(w.message) for w in recwarn]
    for secret in SECRETS:
        assert [p for p in files if secret.encode() in p.read_bytes()] == []
        assert not any(secret in text for text in printed)
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["config"]["run"]["model"] == recorded.format(host=host)


def test_a_server_echoing_the_key_in_its_401_and_a_key_ending_in_cr_print_no_key(tmp_path, metaqa_root, capsys,
                                                                                 recwarn, monkeypatch):
    """Issue 40: a 401 body that echoes the Authorization header was printed as is, and a key file's
    CR put the key into "Illegal header value b'Bearer sk-...\\r'"."""
    import threading
    from http.server import ThreadingHTTPServer

    from fakes import OpenAIJsonHandler

    class Echo(OpenAIJsonHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(401, {"error": {"message": f"invalid credentials: {self.headers.get('Authorization')}"}})

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("KGRAG_OPENAI_API_KEY", "sk-SECRETKEY99\r")   # a CRLF key file
    try:
        rc = main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
                   "--model", f"openai:http://127.0.0.1:{srv.server_address[1]}/v1#m?flavor=vllm",
                   "--request-retries", "0", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")])
    finally:
        srv.shutdown()
        srv.server_close()
    out, err = capsys.readouterr()
    assert rc == 2 and "HTTP 401" in err and "Bearer ***" in err
    printed = [out, err] + [str(w.message) for w in recwarn]
    assert not any("SECRETKEY99" in t for t in printed)
    assert [p for p in tmp_path.rglob("*") if p.is_file() and b"SECRETKEY99" in p.read_bytes()] == []


@pytest.mark.parametrize("where", ["a closed port", "an unknown host"])
def test_an_unreachable_server_is_named_without_its_token(tmp_path, metaqa_root, capsys, recwarn, where):
    """Nothing listens there, or the name does not resolve: the error names the URL, never its secrets."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{s.getsockname()[1]}" if where == "a closed port" else "kgrag-test.invalid"
    assert main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
                 "--model", _secret_spec(host), "--request-retries", "0",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach the OpenAI-compatible server at http://{host}/v1 (" in err
    assert not any(secret in text for secret in SECRETS for text in [err] + [str(w.message) for w in recwarn])


def test_specs_differing_only_in_their_token_are_one_run_and_other_urls_are_not():
    from kgrag_lib.runner import identity_diff

    def cfg(url: str) -> dict[str, Any]:
        return {"run": {"model": f"openai:{url}#m?flavor=vllm"}}

    assert identity_diff(cfg("http://u:SECRET1@h:1/v1?api_key=SECRET2"), cfg("http://v:other@h:1/v1?api_key=x")) == []
    assert identity_diff(cfg("http://u:SECRET1@h:1/v1"), cfg("http://u:SECRET1@h:2/v1")) == [
        "run.model: 'openai:http://***@h:1/v1#m?flavor=vllm' -> 'openai:http://***@h:2/v1#m?flavor=vllm'"]


def test_a_ray_address_where_nothing_listens_is_refused_at_once():
    """Issue 40: `--executor ray --address 127.0.0.1:1` waited silently (ray.init keeps retrying)."""
    import time

    from kgrag_lib.executors.ray_executor import RayExecutor

    class NeverInit:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kw):
            raise AssertionError("ray.init must not be reached for a dead address")

    t = time.monotonic()
    with pytest.raises(ConfigError, match=r"--address 127\.0\.0\.1:1: nothing answers there.*ray start --head"):
        RayExecutor(address="127.0.0.1:1")._connect(NeverInit)
    assert time.monotonic() - t < 5
    with pytest.raises(ConfigError, match="expected host:port"):
        RayExecutor(address="10.0.0.5:notaport")._connect(NeverInit)


@pytest.mark.parametrize("argv,says", [
    (["--model", ""], "--model is empty"),
    (["--set", "top_k=010"], "ambiguous number"),
    (["--set", "top_k=0x10"], "ambiguous number"),
    (["--set", "top_k=1_000"], "ambiguous number"),
])
def test_silent_surprises_on_the_command_line_are_refused(tmp_path, metaqa_root, capsys, argv, says):
    """Issue 40: `--model ''` (an unset $MODEL) ran the default model; YAML 1.1 read --set 010 as 8
    and 0x10 as 16."""
    rc = main(["run", "--method", "kg-rag", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
               "--out", str(tmp_path / "run"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_profile_with_a_key_twice_is_refused_naming_the_line(tmp_path):
    from kgrag_lib.studies import load_profile

    p = tmp_path / "mine.yaml"
    p.write_text("extends: cpu-smoke\nmethods:\n  llm: {max_tokens: 8}\nrun: {n: 2}\nmethods:\n  llm: {max_tokens: 9}\n",
                 encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mine\.yaml:5: the key 'methods' appears twice"):
        load_profile(str(p))


def test_study_only_with_an_empty_prefix_is_refused(capsys):
    assert main(["study", "--only", ""]) == 2
    assert "--only needs notebook name prefixes" in capsys.readouterr().err


def test_relative_paths_in_the_environment_are_made_absolute_before_any_kernel_starts(tmp_path, monkeypatch, capsys):
    """Issue 40: a relative KGRAG_CACHE_DIR was resolved inside each sweep cell's folder (every
    cell got a cache of its own)."""
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGRAG_CACHE_DIR", "rel-cache")
    monkeypatch.setenv("KGRAG_DATA_ROOT", "/abs/data")
    main(["completion", "bash"])
    capsys.readouterr()
    assert os.environ["KGRAG_CACHE_DIR"] == str(tmp_path / "rel-cache")
    assert os.environ["KGRAG_DATA_ROOT"] == "/abs/data"


def test_an_infinite_timeout_is_refused_and_an_exponent_without_a_dot_is_a_number(tmp_path, metaqa_root, capsys):
    """Issue 40: --request-timeout inf gave a traceback; --set temperature=1e-3 was refused as "must be float"."""
    from kgrag_lib.commands.run import _parse_set

    assert _parse_set(["temperature=1e-3"]) == {"temperature": 0.001}
    rc = main(["run", "--method", "kg-rag", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
               "--request-timeout", "inf", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and "request_timeout" in err and "must be a number > 0" in err


def test_one_question_file_by_a_relative_and_an_absolute_path_is_one_run(tmp_path, monkeypatch):
    """Issue 40: `--qa-file ./qa.txt`, then the same file by its absolute path, was refused as a
    run with other settings."""
    from kgrag_lib.experiment import resolve_run

    (tmp_path / "qa.txt").write_text("who directed [The Lovers]\tLouis Malle\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    rel = resolve_run("llm", "metaqa-1hop", tmp_path / "run", "cpu-smoke", qa_file="./qa.txt")
    absolute = resolve_run("llm", "metaqa-1hop", tmp_path / "run", "cpu-smoke", qa_file=str(tmp_path / "qa.txt"))
    assert rel.run.qa_file == absolute.run.qa_file == str(tmp_path / "qa.txt")


def test_a_seed_llama_cpp_reads_as_random_is_refused(tmp_path, metaqa_root, capsys):
    """Issue 40: seed 4294967295 with temperature 1.5 gave two different answers on two fresh runs:
    llama.cpp takes 0xFFFFFFFF as "pick a random seed"."""
    rc = main(["run", "--method", "kg-rag", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
               "--seed", "4294967295", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and "'seed' must be an integer in [0, 2147483647]" in err


def test_show_config_honours_set_and_the_flags_and_masks_a_token(capsys):
    """Issue 59: `run --show-config --set temperature=1.5` showed the default (--set was ignored
    there), and a generator or KG spec's `user:password@` was printed in full."""
    assert main(["run", "--show-config", "--method", "kg-rag", "--profile", "cpu-smoke", "--set", "temperature=1.5",
                 "--top-k", "7", "--set", "seed=3"]) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()[1:]}
    assert "1.5" in lines["temperature"] and "[command line]" in lines["temperature"]
    assert "7" in lines["top_k"] and "[command line]" in lines["top_k"]
    assert "3" in lines["run.seed"] and "[command line]" in lines["run.seed"]
    assert main(["run", "--show-config", "--method", "kg-rag", "--profile", "cpu-smoke",
                 "--set", "top_k=0"]) == 2   # checked as a run checks it
    capsys.readouterr()
    assert main(["run", "--show-config", "--method", "self-rag", "--set",
                 "generator=openai:http://u:SECRET59@127.0.0.1:9/v1?api_key=SECRET60#m"]) == 0
    out = capsys.readouterr().out
    assert "SECRET59" not in out and "SECRET60" not in out and "openai:http://***@127.0.0.1:9/v1" in out


# ---- found by the long fuzz (seeds 101-108, 400 cases each; issue 59) -------------------------------------------
def test_what_the_long_fuzz_found_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """Three inputs CI's seeds never drew: a run folder whose name is not UTF-8 (it is written into
    manifest.json: an internal error), `data fetch --root` a dangling link (it created the link's
    target and fetched there, exit 0), and `sweep -p profile 1010` (YAML reads an int: an internal error)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KgragError, match="not UTF-8"):
        run_method(FixedMethod(), QS, tmp_path / "\udcff", {}, progress=False)
    assert not (tmp_path / "\udcff").exists()

    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    manifest = tmp_path / "m.yaml"
    manifest.write_text("datasets:\n  toy:\n    files:\n      - path: toy/f.txt\n        url: http://127.0.0.1:9/f.txt\n",
                        encoding="utf-8")
    assert main(["data", "fetch", "toy", "--manifest", str(manifest), "--root", str(tmp_path / "dangling")]) == 2
    assert "symbolic link" in capsys.readouterr().err and not (tmp_path / "nowhere").exists()

    assert main(["sweep", "00_quickstart", "-p", "profile", "1010101010"]) == 2
    err = capsys.readouterr().err
    assert "-p profile 1010101010 is read as a YAML int" in err and "Traceback" not in err
