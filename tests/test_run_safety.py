"""A run never lies (issue 13): stale resumes are refused, issues are counted and said, a
busy output folder is refused, the cost line says what this invocation did, and a run killed
at random points ends with every question exactly once and nothing repaid."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kgrag_lib.cli import main as kgrag
from kgrag_lib.commands.run import cost_line
from kgrag_lib.errors import KgragError
from kgrag_lib.experiment import run_experiment
from kgrag_lib.runner import FolderBusyError, StaleRunError, folder_lock

REPO = Path(__file__).resolve().parent.parent


def run(out, *args):
    return kgrag(["run", "--dataset", "metaqa-1hop", "--out", str(out), "--no-progress", *args])


def rows(out):
    return [json.loads(line) for line in (Path(out) / "predictions.jsonl").read_text().splitlines()]


def manifest(out):
    return json.loads((Path(out) / "manifest.json").read_text())


# ------------------------------------------------------------------ 1. stale resumes
def test_resume_with_another_method_is_refused_and_changes_nothing(tmp_path, offline_parts, metaqa_root, capsys):
    out = tmp_path / "D"
    assert run(out, "--method", "llm-kg", "--hops", "3") == 0
    before = (out / "predictions.jsonl").read_text(), (out / "manifest.json").read_text()
    capsys.readouterr()
    assert run(out, "--method", "llm") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "holds 4 predictions made with other settings" in err and "run.method: 'llm-kg' -> 'llm'" in err
    assert "--overwrite" in err and "another output folder" in err
    assert ((out / "predictions.jsonl").read_text(), (out / "manifest.json").read_text()) == before


def test_resume_with_other_method_settings_is_refused_then_overwritten(tmp_path, offline_parts, metaqa_root, capsys):
    out = tmp_path / "D"
    assert run(out, "--method", "llm-kg", "--hops", "3") == 0
    assert run(out, "--method", "llm-kg", "--top-k", "5", "--hops", "1") == 2
    err = capsys.readouterr().err
    assert "method_config.hops: 3 -> 1" in err and "method_config.top_k: 30 -> 5" in err
    assert run(out, "--method", "llm-kg", "--top-k", "5", "--hops", "1", "--overwrite") == 0
    assert manifest(out)["config"]["method_config"]["hops"] == 1 and "resumed_from" not in manifest(out)
    assert all(r["trace"]["retrieval"]["hops"] == 1 for r in rows(out)) and len(rows(out)) == 4


@pytest.mark.parametrize("change, field", [
    (["--seed", "3"], "run.seed"), (["--n", "2"], "run.n"), (["--model", "other.gguf"], "run.model"),
    (["--set", "max_tokens=7"], "method_config.max_tokens"),
])
def test_every_part_of_the_identity_is_checked(tmp_path, offline_parts, metaqa_root, capsys, change, field,
                                               monkeypatch):
    out = tmp_path / "D"
    assert run(out, "--method", "llm") == 0
    assert run(out, "--method", "llm", *change) == 2
    assert field in capsys.readouterr().err


def test_same_settings_resume_and_the_cost_line_says_what_this_run_did(tmp_path, offline_parts, metaqa_root,
                                                                       capsys):
    out = tmp_path / "D"
    assert run(out, "--method", "llm") == 0
    first = json.loads((out / "metrics.json").read_text())
    assert first["this_run"]["answered"] == 4 and first["this_run"]["llm_calls_sent"] == 4
    assert run(out, "--method", "llm", "--data-root", str(metaqa_root)) == 0   # paths are not identity
    again = json.loads((out / "metrics.json").read_text())
    assert again["this_run"] == {**again["this_run"], "answered": 0, "reused": 4, "llm_calls_sent": 0,
                                 "llm_cache_hits": 0}
    assert again["cost_per_question"]["llm_requests"] == first["cost_per_question"]["llm_requests"] == 1
    line = cost_line(again)
    assert "answered 0 of 4 questions (4 reused" in line and "sent 0 LLM calls" in line
    assert "this run: answered 0 of 4" in capsys.readouterr().out
    assert manifest(out)["resumed_from"] == manifest(out)["started"]


def test_a_notebook_rerun_after_a_parameter_change_is_refused(tmp_path, offline_parts, metaqa_root):
    from kgrag_lib.studies import setup

    nb = setup("12_metaqa_baselines", profile="cpu-smoke", out_dir=tmp_path / "nb")
    nb.run("llm-kg", "metaqa-1hop", tmp_path / "nb" / "r", top_k=30)
    with pytest.raises(StaleRunError, match="method_config.top_k: 30 -> 10"):
        nb.run("llm-kg", "metaqa-1hop", tmp_path / "nb" / "r", top_k=10)
    nb.run("llm-kg", "metaqa-1hop", tmp_path / "nb" / "r", top_k=10, overwrite=True)


# ------------------------------------------------------------------ 4. unusable knowledge
def test_questions_with_issues_are_counted_and_said(tmp_path, offline_parts, metaqa_root, capsys):
    qa = tmp_path / "qa.txt"
    qa.write_text("who directed [The Lovers]\tLouis Malle\nwho directed [Nowhere Film]\tNobody\n", encoding="utf-8")
    assert run(tmp_path / "D", "--method", "llm-kg", "--qa-file", str(qa)) == 0
    m = json.loads((tmp_path / "D" / "metrics.json").read_text())
    assert m["questions_with_issues"] == 1 and m["issues"] == {"retrieval": 1}
    err = capsys.readouterr().err
    assert "warning: 1 of 2 questions recorded issues (retrieval 1)" in err


def test_an_empty_kb_is_refused(tmp_path, offline_parts, metaqa_root, capsys):
    (metaqa_root / "metaqa" / "kb.txt").write_text("", encoding="utf-8")
    assert run(tmp_path / "D", "--method", "llm-kg") == 2
    assert "no triples" in capsys.readouterr().err.lower()
    assert not (tmp_path / "D" / "predictions.jsonl").exists()


# ------------------------------------------------------------------ 5. one writer per folder
def test_a_second_run_into_a_busy_folder_is_refused_naming_the_holder(tmp_path, offline_parts, metaqa_root):
    out = tmp_path / "D"
    out.mkdir()
    with folder_lock(out):
        with pytest.raises(FolderBusyError, match=rf"being written by process {os.getpid()} on .*wait for it"):
            run_experiment("llm", "metaqa-1hop", out, profile="cpu-smoke", progress=False)
    run_experiment("llm", "metaqa-1hop", out, profile="cpu-smoke", progress=False)  # free again
    assert len(rows(out)) == 4


def test_an_empty_question_sample_is_refused(tmp_path):
    from kgrag_lib.runner import run_method

    with pytest.raises(KgragError, match="question sample is empty"):
        run_method(object(), [], tmp_path / "D")


# ------------------------------------------------------------------ kill drill
DRILL = r'''
import json, sys, time
from pathlib import Path
from kgrag_lib.experiment import run_experiment
from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from kgrag_lib.methods.base import RunContext

out, cache = Path(sys.argv[1]), Path(sys.argv[2])
def respond(messages, params):
    time.sleep(0.03)
    return "Answer: " + messages[-1]["content"][-20:]
llm = ScriptedLLM(respond, identity="scripted:drill", cache=LLMCache(cache / "llm_cache.sqlite"))
ctx = RunContext(model="drill", llm=llm, cache_dir=str(cache))
print("ready", flush=True)
m = run_experiment("llm", "metaqa-1hop", out, profile={"name": "drill", "run": {"cache_dir": str(cache)}},
                   ctx=ctx, progress=False, model="drill")
print(json.dumps(m["this_run"]), flush=True)
'''


def test_kill_drill_every_question_once_cache_intact_rerun_free(tmp_path, metaqa_root):
    qa = metaqa_root / "metaqa" / "1-hop" / "vanilla" / "qa_test.txt"
    qa.write_text("".join(f"who directed [Film {i}]\tPerson {i}\n" for i in range(40)), encoding="utf-8")
    script = tmp_path / "drill.py"
    script.write_text(DRILL, encoding="utf-8")
    out, cache = tmp_path / "D", tmp_path / "cache"
    env = {**os.environ, "KGRAG_DATA_ROOT": str(metaqa_root), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(script), str(out), str(cache)]
    rng = random.Random(7)
    kills = 0
    for _ in range(8):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert p.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            kills += 1
        p.wait()
    assert kills >= 5
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    qids = [r["qid"] for r in rows(out)]
    assert len(qids) == 40 and len(set(qids)) == 40
    conn = sqlite3.connect(cache / "llm_cache.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    rerun = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    this = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert this["llm_calls_sent"] == 0 and this["answered"] == 0 and this["reused"] == 40


# ------------------------------------------------------------------ 2, 3. refused before anything loads
@pytest.mark.parametrize("args, match", [
    (["--method", "llm-kg", "--dataset", "hotpotqa"], "'llm-kg' does not run on dataset 'hotpotqa'"),
    (["--method", "llm-kg", "--dataset", "metaqa-1hop", "--set", "top_k=true"], "'top_k' must be int, got True"),
    (["--method", "llm-kg", "--dataset", "metaqa-1hop", "--set", "top_k"], "--set expects KEY=VALUE"),
    (["--method", "llm-kg", "--dataset", "metaqa-1hop", "--set", "topk=3"], "unknown parameter 'topk'"),
])
def test_impossible_runs_are_refused_before_a_model_loads(tmp_path, monkeypatch, capsys, args, match):
    import kgrag_lib.llm as llm_mod

    def no_model(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(llm_mod, "load_llm", no_model)
    assert kgrag(["run", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err
