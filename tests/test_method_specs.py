"""A method says what the other layers need of it where it is registered (issue 60): its factory takes its
typed config, its mechanism signal is read by the report, and whether it needs a GPU by the cross-method
notebook and the doctor, with no list of method names kept beside the registry."""

from __future__ import annotations

import json

import pytest

from kgrag_lib.methods import sa_rag
from kgrag_lib.methods.base import MethodSpec, RunContext, method_specs
from kgrag_lib.methods.registry import available_methods, methods_by_paper
from kgrag_lib.report import mechanism


@pytest.fixture
def toy_sa(monkeypatch):
    """`toy-sa`, one more SA-RAG row, registered the way the paper's table registers its own."""
    from kgrag_lib.methods.sa_rag import pipeline

    def build(name, ctx, cfg, seed):   # SA-RAG's own variant behind the new name (its VARIANTS stay as they are)
        return pipeline.make_method("sa-rag", ctx, cfg, seed)

    toy = method_specs(build, {"toy-sa": "a toy spreading-activation row"}, pipeline.SARAGConfig,
                       pipeline.DATASETS, pipeline.FAMILY, mechanism="activation")
    monkeypatch.setattr(sa_rag, "METHODS", (*sa_rag.METHODS, *toy))
    mechanism._by_signal.cache_clear()
    yield toy[0]
    mechanism._by_signal.cache_clear()


def test_the_report_reads_a_new_methods_mechanism_signal_from_its_spec(toy_sa, tmp_path):
    assert "toy-sa" in available_methods() and "toy-sa" in mechanism.methods_with("activation")
    (tmp_path / "questions.jsonl").write_text(
        "".join(json.dumps({"qid": q, "mechanism": {"activated_beyond_seeds": k}}) + "\n" for q, k in (("a", 2), ("b", 0))),
        encoding="utf-8")
    health = mechanism.run_health({"method": "toy-sa", "folder": tmp_path})
    assert health["signal"] == "activated beyond seeds" and health["ran"] == 1 and health["n"] == 2


def test_a_factory_takes_its_typed_config_and_refuses_a_dict(toy_sa, tmp_path):
    ctx = RunContext(cache_dir=str(tmp_path))
    cfg = toy_sa.check_config({"top_k": 3}, where="t")
    method = toy_sa.factory(ctx, cfg, 0)
    assert method.config is cfg   # built from the checked config, not a copy
    with pytest.raises(TypeError, match="SARAGConfig.*check_config"):
        toy_sa.factory(ctx, {"top_k": 3}, 0)


def test_an_unknown_mechanism_signal_is_refused_where_the_method_is_registered():
    with pytest.raises(ValueError, match="mechanism 'parsed'.*kg-subgraph"):
        MethodSpec("m", lambda ctx, cfg, seed: None, dict, ("2wiki",), "m", "sa-rag", mechanism="parsed")


def test_the_cross_method_rows_and_the_doctors_gpu_methods_come_from_the_registry():
    from kgrag_lib.studies.cross_method import METHODS

    gpu = {s.name for s in methods_by_paper() if s.needs_gpu}
    assert gpu == {"self-rag", "self-rag-kg-infused"}
    assert not gpu & set(METHODS) and "tcr-af" in METHODS and "sa-rag-qd" in METHODS
    assert all("2wiki" in available_methods()[m].datasets for m in METHODS)
    assert [m for m in (s.name for s in methods_by_paper()) if m in METHODS] == METHODS   # paper by paper, table order
