"""scripts/extraction_probe.py: the same passages extracted by each model with the real build code."""

from __future__ import annotations

import json

import pytest

from kgrag_lib.llm.cache import LLMCache
from kgrag_lib.llm.fake import ScriptedLLM
from test_cross_method import needs_2wiki, scripted
from _script_loader import load_script


def _probe():
    return load_script("extraction_probe")


@needs_2wiki
def test_probe_extracts_the_same_passages_per_model_and_reports_relations(tmp_path, monkeypatch, capsys):
    import kgrag_lib.llm as llm_mod

    loaded = []

    def fake_load(spec, **kw):
        loaded.append(spec)
        return ScriptedLLM(scripted, identity=f"scripted:{spec}", cache=LLMCache(tmp_path / "llm.sqlite"))

    monkeypatch.setattr(llm_mod, "load_llm", fake_load)
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "probe"
    assert _probe().main(["--selection", "2wiki:dev200:n=2:seed=0", "--passages", "3", "--models", "m-small",
                          "m-big", "--out", str(out)]) == 0
    assert loaded == ["m-small", "m-big"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passages"] == 3 and len(set(summary["passage_ids"])) == 3
    runs = {(r["kind"], r["model"]): r["stats"] for r in summary["runs"]}
    assert set(runs) == {(k, m) for k in ("sa-rag", "tcr-qf") for m in ("m-small", "m-big")}
    for (kind, _), s in runs.items():
        # the scripted model names one relation per chunk in both formats
        assert s["chunks"] == 3 and s["relations_per_chunk"] == 1.0 and s["chunks_without_relations"] == 0
        assert (out / f"{kind}-{_}" / "stats.json").exists() and (out / f"{kind}-{_}" / "journal.jsonl").exists()
    assert runs[("tcr-qf", "m-big")]["relations_kept"] >= 1          # the quote check's counts are reported
    table = capsys.readouterr().out
    assert table.count("\n| sa-rag |") + table.count("\n| tcr-qf |") == 4


def test_probe_refuses_a_non_positive_sample(tmp_path):
    with pytest.raises(SystemExit):
        _probe().main(["--passages", "0", "--models", "x", "--out", str(tmp_path)])
