"""What a reader meets: an executed notebook (and its HTML copy) that reads top to bottom, and
the CLI's version, completion and choices.

The notebook test executes the real 00_quickstart through `kgrag study`'s runner in a real
kernel, against a 4-triple MetaQA root and an OpenAI-compatible imitation server (the kernel is
another process: monkeypatching cannot reach it, a server can), then reads the HTML export.
"""

from __future__ import annotations

import html as html_lib
import re
import sys
from pathlib import Path

import pytest

from kgrag_lib.cli import main
from kgrag_lib.paths import REPO_ROOT

# A line of a progress bar (tqdm's text form) or of the summary that replaces it.
PROGRESS_LINE = re.compile(r"\d+%\||it/s\]|s/it\]|\d+/\d+ \w+ in \d\d:\d\d")


def _visible_lines(html: str) -> list[str]:
    """The text a reader sees in the HTML export's outputs (tags, styles and scripts removed)."""
    html = re.sub(r"(?s)<(style|script)\b.*?</\1>", "", html)
    text = html_lib.unescape(re.sub(r"<[^>]+>", "\n", html))
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def _quickstart_on_a_fake_server(tmp_path, monkeypatch, **extra):
    """Notebook 00 run by `run_study` against a loopback server answering "Louis Malle"; returns
    the study report and the request bodies the server saw."""
    pytest.importorskip("papermill")
    pytest.importorskip("sentence_transformers")   # the profile's MiniLM embeds the 4 triples
    from test_llm_openai import FakeServer

    from kgrag_lib.notebooks import run_study

    server = FakeServer()
    server.reply = lambda body: "Louis Malle"
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGRAG_FIGURES_DIR", str(tmp_path / "figures"))
    try:
        report = run_study("cpu-smoke", tmp_path / "results", only=["00"], progress=False, extra=extra or None,
                           run_overrides={"model": f"openai:{server.url}#qwen-test", "concurrency": 1})
    finally:
        server.httpd.shutdown()
    return report, server.bodies


def test_executed_quickstart_reads_top_to_bottom(tmp_path, metaqa_root, monkeypatch):
    pytest.importorskip("nbconvert")
    report, bodies = _quickstart_on_a_fake_server(tmp_path, monkeypatch)
    executed = tmp_path / "results" / "executed" / "00_quickstart.ipynb"
    html_path = executed.with_suffix(".html")
    assert report["notebooks"][0]["html"] == str(html_path) and html_path.is_file()
    html = html_path.read_text(encoding="utf-8")
    lines = _visible_lines(html)

    progress = [ln for ln in lines if PROGRESS_LINE.search(ln)]
    assert 0 < len(progress) < 30, progress          # one summary line per loop, not a redrawn bar
    assert not any("IProgress" in ln or "TqdmWarning" in ln for ln in lines)
    machine = {str(tmp_path), str(metaqa_root), str(REPO_ROOT), sys.prefix, str(Path.home()), "/tmp/", "/work/"}
    leaks = [ln for ln in lines if any(m in ln for m in machine)]
    assert not leaks, leaks[:5]
    import nbformat

    injected = [c.source for c in nbformat.read(executed, as_version=4).cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert 'out_dir = "../00_quickstart"' in injected[0]          # relative to the copy: it reruns where it lies
    assert "&lt;data root&gt;/metaqa/kb.txt" in html                                 # the KB, named relatively
    assert "ci95 low" in html and "<table" in html                                   # metrics as a table
    assert bodies, "the notebook's run never reached the model"


def test_version_and_completion(capsys):
    from kgrag_lib import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"kgrag {__version__}"
    for shell in ("bash", "zsh"):
        assert main(["completion", shell]) == 0
        script = capsys.readouterr().out
        assert "kgrag" in script and "metaqa-1hop" in script and "kg-infused" in script and "cpu-smoke" in script


def test_choices_come_from_the_registries(capsys, tmp_path):
    from kgrag_lib.cli_choices import dataset_names, method_names, profile_choices
    from kgrag_lib.config import available_profiles
    from kgrag_lib.data.registry import DATASETS
    from kgrag_lib.methods import available_methods

    assert dataset_names() == list(DATASETS) and method_names() == sorted(available_methods())
    assert list(profile_choices()) == available_profiles()
    mine = tmp_path / "mine.yaml"
    assert "gpu-paper" in profile_choices() and str(mine) in profile_choices()   # a file of the user's passes
    assert "gpu-papr" not in profile_choices()
    for argv, bad in ((["run", "--dataset", "metaqa-4hop"], "--dataset"), (["run", "--method", "kaping"], "--method"),
                      (["study", "--profile", "gpu-papr"], "--profile")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"argument {bad}: invalid choice" in err


def test_model_help_names_every_spec_form(capsys):
    from kgrag_lib.llm import MANAGED_PREFIXES, PRESETS, SERVER_PREFIXES

    forms = {*SERVER_PREFIXES, *(p + ":" for p in MANAGED_PREFIXES), "hf:", ".gguf", *PRESETS}
    for command in ("run", "study"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = re.sub(r"\s+", " ", capsys.readouterr().out)
        text = text.replace("- ", "-")   # argparse wraps at hyphens
        missing = [f for f in forms if f not in text]
        assert not missing, (command, missing)


def test_a_closed_pipe_ends_quietly():
    """`kgrag completion bash | head -1`: the reader closing the pipe is not an error (no traceback)."""
    import subprocess

    proc = subprocess.run(f'"{sys.executable}" -m kgrag_lib completion bash | head -1; exit ${{PIPESTATUS[0]}}',
                          shell=True, executable="/bin/bash", capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0 and proc.stdout.startswith("#"), (proc.returncode, proc.stderr[-500:])
    assert "Traceback" not in proc.stderr


def test_quickstart_runs_every_method_its_parameters_cell_offers(tmp_path, metaqa_root, monkeypatch):
    """Issue 40: `-p method llm` failed in cell 6 ("unknown parameter 'hops'"): the notebook gave
    hops and top_k to a method that reads no triples."""
    report, _ = _quickstart_on_a_fake_server(tmp_path, monkeypatch, method="llm")
    assert report["failed"] == [] and report["notebooks"][0]["rows"][0]["method"] == "llm"


def test_a_study_a_sweep_and_the_cache_commands_write_and_print_no_api_key(tmp_path, metaqa_root, monkeypatch, capsys):
    """Issue 40's secret grep: with the API key in the environment, a study against a server, then
    `cache export` / `cache check` of its cache, then a sweep, leave the key in no file and print it
    nowhere."""
    from kgrag_lib.cli import main

    key = "sk-SECRETKEY77"
    monkeypatch.setenv("KGRAG_OPENAI_API_KEY", key)
    report, bodies = _quickstart_on_a_fake_server(tmp_path, monkeypatch)
    assert report["failed"] == [] and bodies
    cache = tmp_path / "cache" / "llm_cache.sqlite"
    assert main(["cache", "export", str(tmp_path / "export.jsonl.gz"), "--cache", str(cache)]) == 0
    assert main(["cache", "check", str(cache)]) == 0
    # and a sweep of the same notebook against the same kind of server, into its own folder
    from test_llm_openai import FakeServer

    server = FakeServer()
    server.reply = lambda body: "Louis Malle"
    try:
        assert main(["sweep", "00_quickstart", "-p", "n", "1", "-p", "model", f"openai:{server.url}#qwen-test",
                     "--out", str(tmp_path / "sweep")]) == 0
    finally:
        server.httpd.shutdown()
    assert (tmp_path / "sweep" / "sweep.csv").is_file()   # (its answers come from the study's cache: same weights)
    printed = capsys.readouterr()
    import gzip

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite" for p in files)
    leaks = [p for p in files if key.encode() in (gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes())]
    assert leaks == [] and key not in printed.out + printed.err
