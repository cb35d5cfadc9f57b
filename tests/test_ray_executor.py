"""`--executor ray` on a real Ray instance on loopback (2 CPUs, one session for the module).

The notebooks here are small but real: papermill runs them in a kernel of their own, they load
their LLM through `RunContext` (as every study notebook does) and talk to an OpenAI-compatible
imitation on 127.0.0.1 that counts the requests reaching it, so "no LLM call lost or repeated"
is counted at the wire. A worker killed mid-task (the notebook SIGKILLs the Ray worker that runs
it, once) and a notebook that keeps failing are drilled too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # Ray's switch: listen on 127.0.0.1 only
ray = pytest.importorskip("ray")

from kgrag_lib.executors import make_executor  # noqa: E402
from kgrag_lib.executors.ray_executor import RayExecutor  # noqa: E402
from kgrag_lib.notebooks import run_study  # noqa: E402


class CountingServer:
    """An OpenAI-compatible chat endpoint on loopback: answers from the prompt, counts requests."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, payload):
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "vllm"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][-1]["content"]
                outer.prompts.append(prompt)
                text = f"answer to {prompt}"
                self._send({"id": "x", "object": "chat.completion",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                         "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.spec = f"openai:http://127.0.0.1:{self.httpd.server_address[1]}/v1#fake?flavor=vllm"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray instance for every test here (starting one takes seconds)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def server():
    s = CountingServer()
    yield s
    s.httpd.shutdown()


@pytest.fixture
def env(tmp_path, monkeypatch, server):
    """A fresh driver cache folder and figures root; the server's request log emptied."""
    monkeypatch.delenv("KGRAG_LLM_CACHE", raising=False)
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGRAG_FIGURES_DIR", str(tmp_path / "figures"))
    server.prompts.clear()
    return tmp_path


def _notebook(path: Path, params: str, body: str) -> Path:
    nb = new_notebook()
    cell = new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


_ASK = ("from pathlib import Path\nimport json, os, signal, time\n"
        "from kgrag_lib.methods.base import RunContext\nfrom kgrag_lib.notebooks import write_summary\n"
        "from kgrag_lib.report.figures import figures_dir\n"
        "ctx = RunContext(model=model)\n"
        "ask = lambda q: ctx.llm.generate([{'role': 'user', 'content': q}], max_tokens=8)\n")

_STUDY_PARAMS = 'profile = "cpu-smoke"\nout_dir = "out"\nmodel = None\nkill_marker = None\nfail_log = None\n'


def _study_notebooks(folder: Path) -> Path:
    """20_prep asks three questions and writes them to its folder (and a figure); 21_main reads
    20's folder (so it must come after it) and asks two, one of them 20's again; 30_other is
    independent. `kill_marker`: 20 kills its Ray worker once, after paying for its answers;
    `fail_log`: 20 fails every time, logging each attempt."""
    folder.mkdir()
    _notebook(folder / "20_prep.ipynb", _STUDY_PARAMS, _ASK + (
        "answers = {q: ask(q) for q in ('q1', 'q2', 'q3')}\n"
        "Path(out_dir).mkdir(parents=True, exist_ok=True)\n"
        "(Path(out_dir) / 'answers.json').write_text(json.dumps(answers))\n"
        "(figures_dir(profile) / '20_prep.txt').write_text('figure')\n"
        "if kill_marker and not Path(kill_marker).exists():\n"
        "    Path(kill_marker).write_text(str(os.getppid()))\n"
        "    os.kill(os.getppid(), signal.SIGKILL)   # the Ray worker that runs this notebook\n"
        "    time.sleep(2)\n    os._exit(1)\n"
        "if fail_log:\n"
        "    with open(fail_log, 'a') as f: f.write('attempt\\n')\n"
        "    raise ValueError('prep data is broken')\n"
        "write_summary(out_dir, [{'step': 'prep', 'n': len(answers)}])\n"))
    _notebook(folder / "21_main.ipynb", _STUDY_PARAMS, _ASK + (
        "prep = json.loads((Path(out_dir).parent / '20_prep' / 'answers.json').read_text())\n"
        "write_summary(out_dir, [{'step': 'main', 'q1': ask('q1'), 'q4': ask('q4'), 'prep': prep['q2']}])\n"))
    _notebook(folder / "30_other.ipynb", _STUDY_PARAMS, _ASK + (
        "write_summary(out_dir, [{'step': 'other', 'q5': ask('q5')}])\n"))
    return folder


def _cache_rows(tmp_path: Path) -> int:
    conn = sqlite3.connect(tmp_path / "cache" / "llm_cache.sqlite")
    try:
        return conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    finally:
        conn.close()


def test_two_notebook_study_on_ray_equals_local_and_a_rerun_here_sends_nothing(ray_session, env, server):
    nbs = _study_notebooks(env / "nbs")
    ray_out, local_out = env / "ray-results", env / "local-results"
    report = run_study("cpu-smoke", ray_out, only=["20", "21"], progress=False, extra={"model": server.spec},
                       executor=RayExecutor(), notebook_dir=nbs)
    assert report["failed"] == []
    assert [nb["notebook"] for nb in report["notebooks"]] == ["20_prep.ipynb", "21_main.ipynb"]
    # 21 ran after 20 (it read 20's folder) and got 20's answer to q1 from the cache 20 shipped
    assert sorted(server.prompts) == ["q1", "q2", "q3", "q4"]
    assert report["notebooks"][1]["rows"] == [{"step": "main", "q1": "answer to q1", "q4": "answer to q4",
                                               "prep": "answer to q2"}]
    # every file came back to the driver's folders, every answer into its cache
    for f in ("executed/20_prep.ipynb", "executed/21_main.ipynb", "20_prep/answers.json", "21_main/summary.json"):
        assert (ray_out / f).is_file(), f
    assert (env / "figures" / "cpu-smoke" / "20_prep.txt").read_text() == "figure"
    assert _cache_rows(env) == 4
    # the same study here, one notebook after another: the same summaries, and no request sent
    server.prompts.clear()
    (env / "figures" / "cpu-smoke" / "20_prep.txt").unlink()
    local = run_study("cpu-smoke", local_out, only=["20", "21"], progress=False, extra={"model": server.spec},
                      executor=make_executor("local", progress=False), notebook_dir=nbs)
    assert server.prompts == []
    assert [nb["rows"] for nb in local["notebooks"]] == [nb["rows"] for nb in report["notebooks"]]
    for f in ("20_prep/summary.json", "20_prep/answers.json", "21_main/summary.json"):
        assert (ray_out / f).read_bytes() == (local_out / f).read_bytes(), f


def test_a_worker_killed_mid_task_is_rerun_and_nothing_is_lost_or_asked_twice(ray_session, env, server):
    nbs = _study_notebooks(env / "nbs")
    marker = env / "killed-once"
    report = run_study("cpu-smoke", env / "out", only=["20", "21"], progress=False,
                       extra={"model": server.spec, "kill_marker": str(marker)}, executor=RayExecutor(),
                       notebook_dir=nbs)
    assert marker.exists(), "the first attempt was to kill its worker"
    assert report["failed"] == []
    assert [r["step"] for nb in report["notebooks"] for r in nb["rows"]] == ["prep", "main"]
    # the dead attempt's three answers were kept on the node and reused by Ray's rerun
    assert sorted(server.prompts) == ["q1", "q2", "q3", "q4"]
    assert _cache_rows(env) == 4
    assert (env / "out" / "executed" / "20_prep.ipynb").is_file()


def test_a_failing_notebook_is_retried_once_then_reported_and_the_rest_go_on(ray_session, env, server, capsys):
    nbs = _study_notebooks(env / "nbs")
    log = env / "attempts.log"
    report = run_study("cpu-smoke", env / "out", progress=False, extra={"model": server.spec, "fail_log": str(log)},
                       executor=RayExecutor(), notebook_dir=nbs)
    assert log.read_text().count("attempt") == 2                       # one retry, no more
    failed = {f["notebook"]: f for f in report["failed"]}
    assert set(failed) == {"20_prep.ipynb", "21_main.ipynb"}
    assert "ValueError: prep data is broken" in failed["20_prep.ipynb"]["error"]
    executed = env / "out" / "executed" / "20_prep.ipynb"
    assert str(executed) in failed["20_prep.ipynb"]["error"] and executed.is_file()   # the trace came back
    assert failed["21_main.ipynb"]["blocked_by"] == "20_prep"          # never ran
    assert [nb["notebook"] for nb in report["notebooks"]] == ["30_other.ipynb"]   # independent: went on
    # the answers the failed notebook paid for (twice the same three: asked once) reached the driver
    assert sorted(server.prompts) == ["q1", "q2", "q3", "q5"]
    assert _cache_rows(env) == 4


def _sweep_args(nb: Path, out: Path, executor: str) -> argparse.Namespace:
    return argparse.Namespace(notebook=str(nb), param=[["x", "1", "2", "3", "4"]], profile="cpu-smoke",
                              out=str(out), force=False, executor=executor, address=None, num_cpus=None)


def test_a_four_cell_sweep_on_ray_writes_the_same_sweep_csv_and_a_rerun_here_sends_nothing(ray_session, env,
                                                                                             server):
    from kgrag_lib.commands import sweep

    nb = _notebook(env / "cell.ipynb", f'profile = "cpu-smoke"\nx = 1\nmodel = "{server.spec}"\nout_dir = "out"\n',
                   _ASK + "write_summary(out_dir, [{'x2': x * 2, 'a': ask(f'x={x}'), 'common': ask('common')}])\n"
                          "(figures_dir(profile) / 'cell.txt').write_text(str(x))\n")
    out = env / "sweep"
    t0 = time.perf_counter()
    assert sweep.handle(_sweep_args(nb, out, "ray")) == 0
    ray_s = time.perf_counter() - t0
    on_ray = (out / "sweep.csv").read_bytes()
    assert {p for p in server.prompts if p != "common"} == {"x=1", "x=2", "x=3", "x=4"}
    assert _cache_rows(env) == 5
    assert sorted(p.read_text() for p in out.glob("*/figures/cpu-smoke/cell.txt")) == ["1", "2", "3", "4"]
    assert len(list(out.glob("*/executed.ipynb"))) == 4 and not list(out.glob("*/executed.partial.ipynb"))
    # the same sweep here from scratch with the cache the cluster filled: same table, no request
    shutil.rmtree(out)
    server.prompts.clear()
    t0 = time.perf_counter()
    assert sweep.handle(_sweep_args(nb, out, "local")) == 0
    local_s = time.perf_counter() - t0
    assert server.prompts == []
    assert (out / "sweep.csv").read_bytes() == on_ray
    print(f"4-cell sweep wall time: ray {ray_s:.1f} s, local {local_s:.1f} s")


def test_ray_refuses_a_profile_cache_dir_and_a_model_no_node_can_hold(ray_session, env):
    from kgrag_lib.errors import ConfigError
    from kgrag_lib.executors.base import NotebookTask, Resources

    with pytest.raises(ConfigError, match="run.cache_dir"):
        RayExecutor.check_profile({"run": {"cache_dir": "/x"}}, "profile p")
    task = NotebookTask("t", env / "t.ipynb", env, env, env / "t.out.ipynb", {}, env, resources=Resources(1, 1))
    with pytest.raises(ConfigError, match="needs 1 GPU"):
        RayExecutor().run([task])


@pytest.mark.model
def test_a_real_model_cell_on_ray_equals_the_local_cell(ray_session, env):
    """The embedded CPU model (llama.cpp, two CPUs per task) in one sweep cell on Ray, then the
    same cell here: the same answer, and the rerun sends nothing to the model."""
    from kgrag_lib.commands import sweep
    from kgrag_lib.llm import DEFAULT_SPEC

    nb = _notebook(env / "cell.ipynb", f'profile = "cpu-smoke"\nx = 1\nmodel = "{DEFAULT_SPEC}"\nout_dir = "out"\n',
                   _ASK + "write_summary(out_dir, [{'x': x, 'a': ask(f'What is {x} + {x}? Answer with a number.'),"
                          " 'sent': ctx.llm.usage.calls}])\n")
    args = _sweep_args(nb, env / "sweep", "ray")
    args.param = [["x", "1"]]
    assert sweep.handle(args) == 0
    import pandas as pd

    first = pd.read_csv(env / "sweep" / "sweep.csv")
    assert first["sent"].tolist() == [1]
    shutil.rmtree(env / "sweep")
    args.executor = "local"
    assert sweep.handle(args) == 0
    second = pd.read_csv(env / "sweep" / "sweep.csv")
    assert second["a"].tolist() == first["a"].tolist() and second["sent"].tolist() == [0]
