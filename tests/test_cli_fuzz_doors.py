"""Issue 59, item 8: the fuzz of `test_cli_fuzz.py` extended to the doors added since: `kgrag data
embed`, `kgrag data fetch`, `python -m kgrag_lib.report.publish`, `python -m kgrag_lib.report.plan`
and `scripts/reference_run.sh`. Each case is a valid command line with one to three hostile values
put in (an empty value, a file where a folder is expected, a shard or batch size out of range, an
unknown option, a missing value); every case must be refused in one line with exit 2: never a
traceback, never an internal error, never exit 0 on nonsense. The valid base of each door is run
once too (it succeeds), so a refusal is the hostile value's, not the base's.

Seeded and small (a few dozen cases a door); the embedder is the bag-of-words fake, downloads come
from a loopback file server, and the script runs in a sandbox whose `.venv/bin/kgrag` only records
that it was called."""

from __future__ import annotations

import hashlib
import os
import random
import re
import stat
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from fakes import BagOfWordsEmbedder
from kgrag_lib import cli
from kgrag_lib.data import fetch
from kgrag_lib.paths import REPO_ROOT
from test_cli_fuzz import _inputs
from test_data_fetch import Handler as FileHandler, Loopback

# a longer fuzz than CI runs: KGRAG_FUZZ_SEEDS=11,12,13 KGRAG_FUZZ_CASES=400 (seeds comma-separated)
SEEDS = tuple(int(s) for s in os.environ.get("KGRAG_FUZZ_SEEDS", "").split(",") if s.strip()) or (20261207, 3)
CASES = int(os.environ.get("KGRAG_FUZZ_CASES") or 30)
_PROGRESS = re.compile(r"(?:\d|\?)\s*\w*/s\]|\|\s*\d+/\d+|\[\d\d:\d\d")   # a tqdm bar's redraw, not a message


def _refused(rc: int, out: str, err: str, argv: list[str], ok_prefix: str = "") -> None:
    """Exit 2 with one error line: kgrag's own refusal is the only line on stderr; argparse's is its
    usage then one `...: error: ...` line."""
    assert "Traceback" not in out + err, (argv, err[-2000:])
    assert rc == 2, (" ".join(argv), rc, out[-500:], err[-500:])
    lines = [ln for ln in re.split(r"[\r\n]", err) if ln.strip() and not _PROGRESS.search(ln)]
    errors = [ln for ln in lines if re.match(r"(\S+( \S+)*: error: |error: |kgrag: error: |reference_run: )", ln)]
    assert len(errors) == 1, (argv, lines)
    if not lines[0].startswith("usage:"):
        assert lines == errors, (argv, lines)


def _run(argv: list[str], capsys, entry=cli.main) -> tuple[int, str, str]:
    try:
        rc = entry(argv)
    except SystemExit as exc:   # argparse: usage and one line
        rc = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return rc, out, err


def _mutate(rng: random.Random, base: list[str], bad: dict[str, list[str]]) -> list[str]:
    """`base` with one to three of its flags given again with a hostile value (argparse keeps the last)."""
    argv = list(base)
    for flag in rng.sample(sorted(bad), k=rng.randint(1, min(3, len(bad)))):
        argv += [flag, rng.choice(bad[flag])]
    return argv


@pytest.fixture(autouse=True)
def _fresh_log_handler(monkeypatch):
    """kgrag's INFO handler is bound to the stderr of the first `cli.main` of the process (an earlier
    test's closed capture): each test here gets its own, on its own stderr."""
    import logging

    monkeypatch.setattr(logging.getLogger("kgrag_lib"), "handlers", [])


@pytest.fixture
def hostile(tmp_path):
    """The shapes of `test_cli_fuzz` plus a file, a path below it, a dangling link and a blank."""
    inputs = _inputs(tmp_path / "in")
    afile = str(tmp_path / "in" / "preds.jsonl")
    return {"file": afile, "below": afile + "/below", "folder": str(tmp_path / "in" / "folder"),
            "dangling": str(tmp_path / "in" / "dangling"), "missing": str(tmp_path / "in" / "missing"),
            "inputs": inputs}


# ---- kgrag data embed ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_data_embed_refuses_every_hostile_value_in_one_line(tmp_path, metaqa_root, hostile, capsys, monkeypatch,
                                                            seed):
    from kgrag_lib.retrieval import embedder

    monkeypatch.setattr(embedder, "load_embedder", lambda spec, **kw: BagOfWordsEmbedder())
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    h = hostile
    base = ["data", "embed", "--kg", "metaqa", "--batch-size", "8", "--device", "cpu"]
    rc, out, err = _run(base, capsys)
    assert rc == 0 and "metaqa: " in out, err   # the base is valid: the refusals below are the hostile values'
    bad = {
        "--shard": ["²/3", "3/3", "-1/2", "0/0", "a/b", "1/2/3", "", "1/", " 0/2", "1e9/1e10"],
        "--batch-size": ["0", "-1", "x", "1e309", "", "nan", "1.5"],
        "--device": ["bogus", "", "CPU", "cuda:-1", "gpu", "cuda:99", " cpu"],
        "--dtype": ["fp64", "", "FP16"],
        "--root": [h["file"], h["below"], "", " ", h["missing"], h["dangling"]],
        "--cache-dir": [h["file"], h["below"], "", " "],
        "--embedder": ["", " "],
        "--corpus": ["bogus", "", "wikipedia:/nonexistent.tsv", f"wikipedia:{h['folder']}", "metaqa-1hop"],
        "--kg": ["bogus", "", " ", "metaqa:/nonexistent.txt", f"wikidata5m:{h['file']}", f"metaqa:{h['folder']}"],
    }
    rng = random.Random(seed)
    for _ in range(CASES):
        argv = _mutate(rng, base, bad)
        _refused(*_run(argv, capsys), argv)


# ---- kgrag data fetch ---------------------------------------------------------------------------------------------
@pytest.fixture
def file_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FileHandler)
    srv.state = Loopback()   # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _manifest(path: Path, files: list[dict]) -> str:
    path.write_text(yaml.safe_dump({"version": 1, "datasets": {"toy": {"files": files}}}), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("seed", SEEDS)
def test_data_fetch_refuses_every_hostile_value_in_one_line(tmp_path, hostile, file_server, capsys, monkeypatch,
                                                            seed):
    monkeypatch.setattr(fetch, "RETRY_BACKOFF_S", 0.0)
    monkeypatch.setattr(fetch, "TIMEOUT_S", 5.0)
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    monkeypatch.setenv("KGRAG_DATA_ROOT", str(tmp_path / "default-root"))
    monkeypatch.chdir(tmp_path)
    h = hostile
    file_server.state.files["f.txt"] = b"payload\n"   # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{file_server.server_address[1]}/f.txt"
    good = _manifest(tmp_path / "good.yaml", [{"path": "toy/f.txt", "url": url}])
    rc, out, err = _run(["data", "fetch", "toy", "--manifest", good, "--root", str(tmp_path / "root0")], capsys)
    assert rc == 0 and (tmp_path / "root0" / "toy" / "f.txt").read_bytes() == b"payload\n", err
    hostile_manifests = [
        _manifest(tmp_path / "up.yaml", [{"path": "../../escaped.txt", "url": url}]),
        _manifest(tmp_path / "abs.yaml", [{"path": str(tmp_path / "escaped.txt"), "url": url}]),
        _manifest(tmp_path / "scheme.yaml", [{"path": "toy/f.txt", "url": "file:///etc/passwd"}]),
        _manifest(tmp_path / "sum.yaml", [{"path": "toy/f.txt", "url": url, "sha256": "zz"}]),
        _manifest(tmp_path / "nofiles.yaml", []),
    ]
    bad = {
        "--root": [h["file"], h["below"], "", " ", "/dev/null", h["dangling"]],
        "--manifest": ["", " ", h["file"], h["folder"], h["missing"], *hostile_manifests,
                       *(p for p in h["inputs"] if p.endswith((".yaml", ".json", ".gz", ".ipynb")))],
    }
    names = ["bogus", "", " ", "../toy", "TOY", "toy/"]
    rng = random.Random(seed)
    for i in range(CASES):
        base = ["data", "fetch", "toy", "--manifest", good, "--root", str(tmp_path / f"root{i % 3}")]
        if rng.random() < 0.3:   # a bad name, alone or with bad flags
            base[2] = rng.choice(names)
            argv = base if rng.random() < 0.5 else _mutate(rng, base, bad)
        else:
            argv = _mutate(rng, base, bad)
        _refused(*_run(argv, capsys), argv)
    assert not list(tmp_path.rglob("escaped.txt")) and not (tmp_path / "default-root").exists()


# ---- python -m kgrag_lib.report.publish / plan ----------------------------------------------------------------
def _checkout_reports() -> dict[str, str]:
    paths = [REPO_ROOT / "README.md", *REPO_ROOT.glob("results/reference*/FINDINGS.md"),
             *REPO_ROOT.glob("results/reference*/REPORT.md")]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.mark.parametrize("seed", SEEDS)
def test_publish_refuses_every_hostile_value_in_one_line(tmp_path, hostile, capsys, monkeypatch, seed):
    from kgrag_lib.report import publish

    monkeypatch.chdir(tmp_path)
    before = _checkout_reports()
    h = hostile
    damaged = tmp_path / "damaged"
    (damaged / "00_quickstart").mkdir(parents=True)
    (damaged / "REPORT.md").write_text("# junk\n", encoding="utf-8")
    (damaged / "00_quickstart" / "summary.json").write_text("[1, 2]\n", encoding="utf-8")
    undecodable = tmp_path / "undecodable"
    (undecodable / "00_quickstart").mkdir(parents=True)
    (undecodable / "REPORT.md").write_bytes(b"# report \xff\xfe of profile\n")
    folders = [h["file"], h["below"], h["folder"], h["dangling"], h["missing"], "", " ", str(damaged),
               str(undecodable)]
    profiles = [None, "bogus", "", " ", "cpu-reference", "cpu-smoke", "../x", h["file"]]
    rng = random.Random(seed)
    for _ in range(CASES):
        argv = [rng.choice(folders)]
        profile = rng.choice(profiles)
        if profile is not None:
            argv += ["--profile", profile]
        if rng.random() < 0.2:
            argv.insert(rng.randrange(len(argv) + 1), rng.choice(["--bogus", "-x", "--profile"]))
        _refused(*_run(argv, capsys, publish.main), argv)
    assert _checkout_reports() == before   # nothing of the checkout's reports was rewritten


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_refuses_every_hostile_value_in_one_line(tmp_path, hostile, capsys, monkeypatch, seed):
    from kgrag_lib.report import plan

    monkeypatch.chdir(tmp_path)   # the default results folders (results/reference) are not here: never a slow plan
    h = hostile
    bad = {
        "--freeze": [h["file"], h["below"], "", " "],
        "--planned-model": ["", " "],
        "--results": [h["file"], h["folder"], h["missing"], "", h["dangling"]],
        "--probes": [h["file"], h["below"], h["missing"]],
    }
    kept = Path(h["file"]).read_bytes()
    rng = random.Random(seed)
    for _ in range(CASES):
        argv = _mutate(rng, [], bad)
        if rng.random() < 0.2:
            argv.insert(rng.randrange(len(argv) + 1), rng.choice(["--bogus", "--results"]))
        _refused(*_run(argv, capsys, plan.main), argv)
    assert Path(h["file"]).read_bytes() == kept   # --freeze never wrote over the file


def test_plan_refuses_a_freeze_folder_below_a_file_before_reading_any_result(tmp_path, capsys, monkeypatch):
    """`--freeze <file>/x` ended in a NotADirectoryError traceback, after the plan was made."""
    from kgrag_lib.report import plan

    afile = tmp_path / "a-file"
    afile.write_text("x")
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(plan, "make_plan", lambda config: pytest.fail("the plan was made before --freeze was checked"))
    for dest, says in ((afile / "x", f"--freeze {afile / 'x'}: {afile} is not a folder"),
                       (afile, f"--freeze {afile}: {afile} is not a folder")):
        rc, out, err = _run(["--freeze", str(dest)], capsys, plan.main)
        assert rc == 2 and says in err and "Traceback" not in err
    rc, out, err = _run(["--results", "results/reference", "./results/reference"], capsys, plan.main)
    assert rc == 2 and "a folder is named twice" in err
    assert afile.read_text() == "x"


# ---- scripts/reference_run.sh -------------------------------------------------------------------------------------
def _sandbox(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the checkout's shape the script runs in: the script, the notebooks, a `.venv/bin/python`
    that is this interpreter on this checkout, and a `.venv/bin/kgrag` that only records its calls."""
    box = tmp_path / "box"
    (box / "scripts").mkdir(parents=True)
    (box / "scripts" / "reference_run.sh").write_bytes((REPO_ROOT / "scripts" / "reference_run.sh").read_bytes())
    (box / "notebooks").symlink_to(REPO_ROOT / "notebooks")
    (box / ".venv" / "bin").mkdir(parents=True)
    calls = tmp_path / "kgrag-calls"
    for name, body in (("python", f'PYTHONPATH="{REPO_ROOT}" exec "{sys.executable}" "$@"'),
                       ("kgrag", f'echo "$@" >> "{calls}"')):
        exe = box / ".venv" / "bin" / name
        exe.write_text(f"#!/bin/sh\n{body}\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return box, calls


def _script(box: Path, argv: list[str]) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGRAG_")}
    proc = subprocess.run(["bash", str(box / "scripts" / "reference_run.sh"), *argv], capture_output=True, text=True,
                          timeout=120, cwd=box, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def test_reference_run_refuses_every_hostile_option_in_one_line_before_anything_runs(tmp_path, hostile):
    box, calls = _sandbox(tmp_path)
    rc, out, err = _script(box, ["--profile", "cpu-reference-1.5b", "11"])   # the valid base runs (the stand-in kgrag)
    assert rc == 0, err
    assert "study --profile cpu-reference-1.5b --only 11" in calls.read_text()
    calls.unlink()
    h = hostile
    injections = [
        ["--profile"], ["--profile", "bogus"], ["--profile", ""], ["--profile", " "], ["--profile", h["file"]],
        ["--profile", h["folder"]], ["--profile", str(Path(h["folder"]).parent / "deep.yaml")],
        ["--every", "-1"], ["--every", "abc"], ["--every", "0"], ["--every"],
        ["--bogus"], ["-c"], ["--profile=cpu-reference"], ["--every=5"],
    ]
    prefixes = ["zz", "", "*", "../11", "11/", "-x", "99", "--commit", "1?"]
    rng = random.Random(SEEDS[0])
    for _ in range(24):
        options = rng.choice([[], ["--commit"], ["--every", "15"], ["--profile", "cpu-reference"]])
        books = rng.sample(["00", "11", "20_"], k=rng.randrange(3))
        if rng.random() < 0.6:
            bad = rng.choice(injections)
            if len(bad) == 1 and bad[0] in ("--profile", "--every"):   # a flag without its value: last
                argv = options + books + bad
            else:   # after the valid options, so it is the value that counts
                argv = options + bad + books
        else:   # a bad prefix after at least one good one (first, '--commit' would be an option)
            argv = options + (books or ["11"]) + [rng.choice(prefixes)]
        _refused(*_script(box, argv), argv)
        assert not calls.exists(), (argv, calls.read_text())   # refused before anything ran
