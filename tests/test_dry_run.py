"""`kgrag run --dry-run` (issue 60): the first requests of a method on a dataset, printed through the
scripted LLM on the real data root, with no model loaded and nothing written."""

from __future__ import annotations

import pytest

from kgrag_lib.cli import main
from kgrag_lib.experiment import DRY_RUN_ANSWER
from kgrag_lib.methods import available_methods
from kgrag_lib.methods.prompt_digest import prompt_digests
from kgrag_lib.paths import data_root

ROOT = data_root()
real_data = pytest.mark.skipif(not (ROOT / "metaqa" / "kb.txt").is_file(), reason=f"real data root not found at {ROOT}")


@pytest.fixture
def no_model(tmp_path, monkeypatch):
    """A tmp working directory and cache folder; loading an LLM fails the test, the embedder is bag-of-words."""
    import kgrag_lib.llm as llm_mod
    import kgrag_lib.retrieval as retrieval_mod
    from fakes import BagOfWordsEmbedder

    def no_llm(*a, **kw):
        raise AssertionError("a dry run loaded an LLM")

    monkeypatch.setattr(llm_mod, "load_llm", no_llm)
    monkeypatch.setattr(retrieval_mod, "load_embedder", lambda spec, **kw: BagOfWordsEmbedder())
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


# one method per paper whose first request needs no corpus-wide index (each on its paper's dataset)
CASES = [("kg-rag", "metaqa-2hop"), ("nor", "hotpotqa"), ("sa-rag", "musique"), ("tcr-llm", "2wiki")]


@real_data
@pytest.mark.parametrize("method,dataset", CASES)
def test_dry_run_prints_the_first_request_of_the_real_pipeline(method, dataset, no_model, capsys):
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.experiment import resolve_run

    r = resolve_run(method, dataset, "x", "cpu-smoke")
    first = load_questions(dataset, split=r.run.split, n=r.run.n, seed=r.run.seed)[0]
    assert main(["run", "--method", method, "--dataset", dataset, "--dry-run", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "=== request 1 " in out and "NOT loaded" in out and DRY_RUN_ANSWER in out
    for module, digest in prompt_digests(available_methods()[method]).items():
        assert f"{module} {digest}" in out   # the identity a run records for its prompts
    if method != "sa-rag":   # SA-RAG's first requests extract the text KG from the sample's paragraphs
        first_request = out.split("=== request 1 ", 1)[1].split("=== request 2 ", 1)[0]
        assert first.question in first_request
    else:
        assert f"[{first.qid}]: {first.question}" in out
        assert "stopped after" in out   # the extraction of every chunk is cut at the dry run's cap
    assert _files(no_model) == []   # no run folder, no cache


def test_dry_run_refuses_a_method_on_a_dataset_it_does_not_support(no_model, capsys):
    assert main(["run", "--method", "kg-rag", "--dataset", "hotpotqa", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "kg-rag" in err and "hotpotqa" in err
    assert _files(no_model) == []


def test_dry_run_with_n_shows_that_many_questions(no_model, metaqa_root, capsys):
    assert main(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--dry-run", "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert "question 2 [" in out and "=== request 2 (question 2)" in out and "question 3 [" not in out
    assert [p for p in _files(no_model) if not p.startswith("data")] == []
