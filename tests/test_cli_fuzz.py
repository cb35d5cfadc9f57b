"""No user ever sees a Python traceback (issue 40): a seeded fuzz over the CLI's arguments and
input files. Every case must end in an answer (exit 0), a refusal in one line (exit 1 or 2), or,
for an unexpected exception, the generic guard's one line pointing at a log file (exit 3);
never in a traceback on the terminal.

Cases run in process with the scripted LLM and the bag-of-words embedder (`offline_parts`) on a
4-question MetaQA root (`metaqa_root`), so a `kgrag run` that the fuzz happens to make valid
costs milliseconds. The inputs are the shapes the hostile-user probes used: deep nesting, empty
files, BOMs, NUL bytes, lone surrogates, huge numbers, folders where files are expected,
dangling symlinks, paths below a regular file, over-long path components.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from kgrag_lib import cli

# a longer fuzz than CI runs: KGRAG_FUZZ_SEEDS=11,12,13 KGRAG_FUZZ_CASES=400 (seeds comma-separated)
SEEDS = tuple(int(s) for s in os.environ.get("KGRAG_FUZZ_SEEDS", "").split(",") if s.strip()) or (20261127, 1, 5, 7)
CASES = int(os.environ.get("KGRAG_FUZZ_CASES") or 160)
DEEP_YAML = 600


def _inputs(tmp: Path) -> list[str]:
    """Files and paths every argument may be given."""
    tmp.mkdir(parents=True, exist_ok=True)
    good = tmp / "preds.jsonl"
    good.write_text(json.dumps({"prediction": "Paris", "answers": ["Paris"]}) + "\n", encoding="utf-8")
    files = {
        "deep.json": "[" * 20000 + "]" * 20000,
        "deep.jsonl": '{"a":' * 5000 + "1" + "}" * 5000 + "\n",
        "empty.jsonl": "",
        "bom.jsonl": "\ufeff" + json.dumps({"prediction": "x", "answers": ["x"]}) + "\n",
        "noqid.jsonl": json.dumps({"prediction": "x"}) + "\n",
        "list.yaml": "- 1\n- 2\n",
        # deeper than the YAML composer recurses (2+ frames a level), yet shallow enough that the pure-Python
        # scanner's look-ahead, quadratic in the depth, stays cheap (3,000 cost ~1.5 s a read, 600 ~0.2 s)
        "deep.yaml": "a: " + "[" * DEEP_YAML + "]" * DEEP_YAML + "\n",
        "huge.jsonl": json.dumps({"prediction": "x", "answers": ["x"], "n": 10 ** 30}) + "\n",
        "notjson.ipynb": "this is not a notebook",
    }
    for name, text in files.items():
        (tmp / name).write_text(text, encoding="utf-8")
    (tmp / "nul.jsonl").write_bytes(b'{"prediction": "a\x00b", "answers": ["a"]}\n' + b"x" * 9000 + b"\x00\n")
    (tmp / "surrogate.jsonl").write_bytes(b'{"prediction": "\\ud800", "answers": ["\\ud800"]}\n')
    (tmp / "bad.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (tmp / "folder").mkdir(exist_ok=True)
    dangling = tmp / "dangling"
    if not dangling.is_symlink():
        dangling.symlink_to(tmp / "nowhere")
    return [str(good), *(str(tmp / n) for n in files), str(tmp / "nul.jsonl"), str(tmp / "surrogate.jsonl"),
            str(tmp / "bad.gz"), str(tmp / "folder"), str(dangling), str(good / "below-a-file"),
            str(tmp / ("x" * 300)), str(tmp / "missing.jsonl")]


VALUES = ["", "0", "-1", "-3", "1", "2", "inf", "nan", "1e309", "010", "0x10", "10" * 20, "\udcff", "x" * 300,
          "recall@0", "recall@6", "em,f1", "hit1", "llm", "kg-rag", "metaqa-1hop", "hotpotqa", "cpu-smoke",
          "auto", "openai:http://127.0.0.1:1/v1#m", "a=1", "temperature=1e-3", "out=", "seed=-1"]

COMMANDS = [
    ("run", ["--method", "--dataset", "--n", "--seed", "--out", "--concurrency", "--model", "--set", "--top-k",
             "--request-timeout", "--request-retries", "--overwrite", "--no-progress", "--questions", "--dry-run"]),
    ("score", ["", "--metrics", "--ci", "--seed", "--dataset", "--json"]),
    ("data check", ["--manifest", "--root"]),
    ("data stats", ["", "--root"]),
    ("data refresh-manifest", ["--root", "--manifest"]),
    ("cache check", [""]),
    ("cache show", ["--cache", "--limit"]),
    ("cache export", ["", "--cache", "--parts", "--overwrite"]),
    ("cache import", ["", "--cache"]),
    ("kg build", ["--kg", "--out", "--overwrite"]),
    ("kg stats", ["", "--kg"]),
]


def _case(rng: random.Random, inputs: list[str], out: Path) -> list[str]:
    command, flags = rng.choice(COMMANDS)
    argv = command.split()
    if command == "run":   # mostly a valid base, so the fuzz reaches past argument parsing
        argv += ["--method", "llm", "--dataset", "metaqa-1hop", "--n", "1", "--no-progress",
                 "--out", str(out / f"run{rng.randrange(3)}")]
    for _ in range(rng.randrange(1, 4)):
        flag = rng.choice(flags)
        value = rng.choice(inputs) if rng.random() < 0.5 else rng.choice(VALUES)
        if flag in ("--overwrite", "--no-progress", "--ci", "--json", "--parts", "--dry-run"):
            argv.append(flag)
        elif flag == "":
            argv.append(value)
        else:
            argv += [flag, value]
    return argv


@pytest.mark.parametrize("seed", SEEDS)
def test_no_argument_or_input_file_gives_a_traceback(tmp_path, offline_parts, metaqa_root, capsys, monkeypatch, seed):
    monkeypatch.setenv("KGRAG_OPENAI_API_KEY", "")
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)   # relative paths the fuzz writes (`--out 010`) land here, not in the checkout
    import shutil

    from kgrag_lib.data import manifest as data_manifest

    copy = tmp_path / "datasets.yaml"   # `data refresh-manifest` without --manifest rewrites the package's: a copy
    shutil.copy(data_manifest.MANIFEST_PATH, copy)
    monkeypatch.setattr(data_manifest, "MANIFEST_PATH", copy)
    inputs = _inputs(tmp_path / "in")
    rng = random.Random(seed)
    internal = []
    for i in range(CASES):
        argv = _case(rng, inputs, tmp_path / "out")
        try:
            rc = cli.main(argv)
        except SystemExit as exc:   # argparse's own refusal: usage and one line, exit 2
            rc = exc.code if isinstance(exc.code, int) else 2
        out, err = capsys.readouterr()
        assert "Traceback (most recent call last)" not in out + err, (i, argv, err[-2000:])
        assert rc in (0, 1, 2, 3), (i, argv, rc, err[-500:])
        if rc == cli.INTERNAL_ERROR:
            assert "kgrag: internal error:" in err and "the traceback is in" in err, (argv, err)
            internal.append((argv, err.strip().splitlines()[-1][:200]))
    # the guard held for every case; an internal error behind it is still a bug: none is left
    assert internal == [], "\n".join(f"{argv} -> {line}" for argv, line in internal)


def test_the_deep_inputs_nest_deeper_than_python_reads(tmp_path):
    """The nested inputs reach the RecursionError path they exist for (the CLI refuses it in one line)."""
    import yaml

    folder = tmp_path / "in"
    _inputs(folder)
    for name, read in (("deep.json", json.loads), ("deep.yaml", yaml.safe_load)):
        with pytest.raises(RecursionError):
            read((folder / name).read_text(encoding="utf-8"))


def test_the_guard_turns_an_unexpected_exception_into_one_line_and_a_log(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)

    def boom(args):
        raise RuntimeError("something nobody expected with http://user:SECRET9@host/v1")

    from kgrag_lib.commands import score

    monkeypatch.setattr(score, "handle", boom)
    rc = cli.main(["score", "x.jsonl"])
    err = capsys.readouterr().err
    assert rc == cli.INTERNAL_ERROR and len(err.strip().splitlines()) == 1
    assert "RuntimeError: something nobody expected" in err and "SECRET9" not in err
    [log] = (tmp_path / "crash-reports").glob("kgrag-*.log")
    text = log.read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text and "boom" in text and "SECRET9" not in text
    monkeypatch.setenv("KGRAG_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["score", "x.jsonl"])


SWEEP_NAMES = ["top_k", "seed", "n", "method", "hops", "profile", "out_dir", "no such", "x" * 60, "", "__class__"]


def _sweep_case(rng: random.Random, inputs: list[str], out: Path) -> list[str]:
    notebook = rng.choice(["notebooks/00_quickstart.ipynb", "00_quickstart", "11_metaqa_parameter_grid",
                           "99_nothing", *inputs])
    argv = ["sweep", notebook]
    for _ in range(rng.randrange(0, 4)):
        kind = rng.random()
        if kind < 0.55:
            argv += ["-p", rng.choice(SWEEP_NAMES), *(rng.choice(VALUES) for _ in range(rng.randrange(0, 3)))]
        elif kind < 0.7:
            argv += ["--profile", rng.choice(["cpu-smoke", "gpu-smoke", "nope", *inputs])]
        elif kind < 0.85:
            argv += ["--out", rng.choice([str(out / f"sweep{rng.randrange(2)}"), *inputs, *VALUES[:6]])]
        elif kind < 0.95:
            argv.append("--force")
        else:
            argv += ["--num-cpus", rng.choice(VALUES)]
    return argv


# hostile output names make papermill warn that they lack a notebook's extension: expected, and dozens of
# them filled CI's log tail in place of its slowest tests
@pytest.mark.filterwarnings("ignore:The specified file .* does not end in one of:UserWarning",
                            "ignore:the file is not specified with any extension:UserWarning")
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_no_sweep_argument_or_input_gives_a_traceback(tmp_path, capsys, monkeypatch, seed):
    """`kgrag sweep` over the same hostile inputs. A combination that passes every check would start a
    kernel, so papermill is replaced by a stand-in that writes the executed copy as papermill does (the
    notebook, parameters injected); argument, profile, folder and table handling are the real code."""
    import nbformat
    import papermill

    from kgrag_lib.paths import REPO_ROOT

    def stand_in(input_path, output_path, parameters=None, **kw):
        nb = nbformat.read(input_path, as_version=4)
        nb.cells.insert(0, nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in (parameters or {}).items())))
        nbformat.write(nb, output_path)
        return nb

    monkeypatch.setattr(papermill, "execute_notebook", stand_in)
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notebooks").symlink_to(REPO_ROOT / "notebooks")   # `notebooks/00_...` as a user types it
    inputs = _inputs(tmp_path / "in")
    rng = random.Random(seed)
    internal, codes = [], []
    for i in range(CASES // 2):
        argv = _sweep_case(rng, inputs, tmp_path / "out")
        try:
            rc = cli.main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
        codes.append(rc)
        out, err = capsys.readouterr()
        assert "Traceback (most recent call last)" not in out + err, (i, argv, err[-2000:])
        assert rc in (0, 1, 2, 3), (i, argv, rc, err[-500:])
        if rc == cli.INTERNAL_ERROR:
            internal.append((argv, err.strip().splitlines()[-1][:200]))
    assert internal == [], "\n".join(f"{argv} -> {line}" for argv, line in internal)
    assert codes.count(0) >= 3, codes   # the fuzz reaches the sweep itself, not only its refusals
