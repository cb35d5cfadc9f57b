"""Notebook 50: every method on the same questions, model, embedder and corpus.

The sample corpus of KG-Infused RAG equals the paragraphs SA-RAG and TCR-QF index; every default
method accepts the overrides that point it at the sample; the core function, run with a scripted
LLM on 2 real 2Wiki dev200 questions, gives one row per method with its scores, cost and
mechanism health (every one of the 24 default methods, in about 10 s); REPORT puts the table first.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fakes import BagOfWordsEmbedder
from kgrag_lib.data.registry import load_questions
from kgrag_lib.errors import ConfigError
from kgrag_lib.experiment import resolve_run
from kgrag_lib.methods.kg_infused.corpus import check_corpus_setting, load_passages, resolve_corpus_name
from kgrag_lib.methods.registry import available_methods
from kgrag_lib.paths import data_root
from kgrag_lib.report import cross_method as CR
from kgrag_lib.report import study as ST
from kgrag_lib.runner import StaleRunError
from kgrag_lib.studies import cross_method as CM
from kgrag_lib.studies import notebook_settings, setup

ROOT = data_root(None)
needs_2wiki = pytest.mark.skipif(not (ROOT / "2wiki" / "MIGRES_200_2wiki.jsonl").is_file(),
                                 reason="needs the 2Wiki dev200 question file under the data root")


# ---- settings ----------------------------------------------------------------------------------------------
def test_settings_resolve_from_every_shipped_profile():
    for profile, n in (("cpu-smoke", 1), ("cpu-reference", 30), ("gpu-paper", 100), ("gpu-smoke", 2)):
        s = notebook_settings(CM.NAME, profile)
        assert (s.n, s.seed, s.dataset, s.split, s.kg) == (n, 0, "2wiki", "dev200", "2wiki-evidence-heldout")
        assert s.methods == CM.METHODS
    s = notebook_settings(CM.NAME, "cpu-smoke", n=5, seed=3, methods=["nor", "sa-rag", "tog"], kg="2wiki-evidence-oracle")
    assert s.method_overrides("nor") == {"corpus": "sample:2wiki:dev200:n=5:seed={seed}", "kg": "2wiki-evidence-oracle"}
    assert s.method_overrides("sa-rag") == {"kg": "text:2wiki:dev200:n=5:seed={seed}"}
    assert s.method_overrides("tog") == {"kg": "tcr:2wiki:dev200:n=5:seed={seed}"}
    assert s.sample_kgs() == {"sa-rag": "text:2wiki:dev200:n=5:seed=3", "tcr-qf": "tcr:2wiki:dev200:n=5:seed=3"}
    assert [[r.method for r in runs] for _, runs in s.grids()] == [["nor"], ["sa-rag"], ["tog"]]
    # the dense baselines, LLM only and CoT read no LLM-built KG: nothing is extracted for them
    assert notebook_settings(CM.NAME, "cpu-smoke", methods=["naive-rag", "tcr-llm", "tcr-cot"]).sample_kgs() == {}


@pytest.mark.parametrize("given, match", [
    ({"methods": ["nor", "self-rag-x"]}, r"parameter 'methods': unknown \['self-rag-x'\]"),
    ({"methods": ["kg-rag"]}, r"parameter 'methods': method 'kg-rag' does not run on dataset '2wiki'"),
    ({"methods": ["nor", "nor"]}, "names a method twice"),
    ({"methods": []}, "non-empty list"),
    ({"dataset": "hotpotqa"}, r"'naive-rag' does not run on dataset 'hotpotqa'; it supports musique, 2wiki"),
])
def test_settings_refuse_what_cannot_run(given, match):
    with pytest.raises(ConfigError, match=match):
        notebook_settings(CM.NAME, "cpu-smoke", **given)


def test_a_sample_without_a_size_is_refused():
    s = notebook_settings(CM.NAME, {"name": "p", "run": {"n": None}})
    with pytest.raises(ConfigError, match="parameter 'n'.*needs a size"):
        s.method_overrides("nor")


def test_every_default_method_is_registered_and_accepts_the_overrides(tmp_path):
    known = available_methods()
    assert not {"self-rag", "self-rag-kg-infused"} & set(CM.METHODS)      # they need a Self-RAG model (GPU)
    s = notebook_settings(CM.NAME, "cpu-reference")
    for m in CM.METHODS:
        assert m in known and "2wiki" in known[m].datasets
        over = s.method_overrides(m)
        r = resolve_run(m, "2wiki", tmp_path, "cpu-reference", split="dev200", n=s.n, seed=s.seed, **over)
        cfg = known[m].check_config(r.method_cfg, where=m)
        assert {k: getattr(cfg, k) for k in over} == over                  # the sample wins over the profile
        if hasattr(cfg, "corpus"):
            check_corpus_setting(cfg.corpus)
            assert cfg.kg == "2wiki-evidence-heldout" and cfg.corpus.startswith("sample:2wiki:dev200:n=30:")
        else:
            assert cfg.kg.split(":", 1)[1] == "2wiki:dev200:n=30:seed={seed}"
    # each family kept the rest of its profile block (e.g. TCR-QF's cut ToG width)
    tog = resolve_run("tog", "2wiki", tmp_path, "cpu-reference", **s.method_overrides("tog"))
    assert tog.method_cfg["width"] == 2 and tog.method_cfg["schedule"] == "question"


# ---- the sample corpus ----------------------------------------------------------------------------------
@needs_2wiki
def test_sample_corpus_is_sa_rag_and_tcr_qfs_pooled_paragraphs():
    from kgrag_lib.data.common import pool_passages
    from kgrag_lib.methods.sa_rag.corpus import selection_of

    name = resolve_corpus_name("sample:{dataset}:dev200:n=4:seed={seed}", "2wiki", 7)
    assert name == "sample:2wiki:dev200:n=4:seed=7"
    mine = load_passages(name, ROOT)
    sa_rag, _ = selection_of("text:2wiki:dev200:n=4:seed=7").passages(ROOT)
    assert mine == sa_rag and len(mine) > 4
    questions = load_questions("2wiki", "dev200", root=ROOT, n=4, seed=7)
    assert mine == pool_passages(q.context for q in questions)        # exactly the sampled questions' paragraphs
    assert {p.pid for p in mine} >= {p.pid for p in questions[0].context}
    assert load_passages("sample:2wiki:dev200:n=4:seed=8", ROOT) != mine   # another seed, another sample


@pytest.mark.parametrize("setting, match", [
    ("sample:2wiki:dev200", "add n=<N>"),
    ("sample:2wiki:n=0", "positive integer"),
    ("sample:2wiki:dev9:n=2", "'dev9': expected a split of 2wiki"),
    ("sample:nowhere:n=2", "unknown dataset 'nowhere'"),
    ("sample:hotpotqa", "a sample corpus needs the sample's size"),
    ("sample:2wiki:n=2:seed={sed}", "parameter 'corpus'.*placeholder"),
])
def test_a_malformed_sample_corpus_is_refused_naming_the_setting(setting, match):
    with pytest.raises(ConfigError, match=match):
        check_corpus_setting(setting)


@needs_2wiki
def test_a_resume_with_another_corpus_is_refused(tmp_path, offline_parts):
    """The corpus is part of a run's identity: the folder of a sample-corpus run is not resumed by
    a run on the dataset's own corpus (nor the other way), and the answers differ because the
    passages do (the corpus names its passages in every trace)."""
    nb = setup(CM.NAME, profile="cpu-smoke", out_dir=tmp_path / "nb", n=2)
    out = tmp_path / "run"
    sample = "sample:2wiki:dev200:n=2:seed={seed}"
    nb.run("vanilla-rag", "2wiki", out, split="dev200", corpus=sample)
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert {r["trace"]["corpus"] for r in rows} == {"sample:2wiki:dev200:n=2:seed=0"}
    pids = {p.pid for p in load_passages("sample:2wiki:dev200:n=2:seed=0", ROOT)}
    assert all({p["pid"] for p in r["trace"]["passages"]} <= pids and r["trace"]["passages"] for r in rows)
    with pytest.raises(StaleRunError, match=r"method_config.corpus: 'sample:2wiki:dev200:n=2:seed=\{seed\}' -> 'auto'"):
        nb.run("vanilla-rag", "2wiki", out, split="dev200", corpus="auto")
    nb.run("vanilla-rag", "2wiki", out, split="dev200", corpus=sample)   # the same settings resume


# ---- the core function with a scripted LLM on real questions ---------------------------------------------------
def scripted(messages, params) -> str:
    """Just enough of each stage for every method to run: SA-RAG's two extraction stages and
    TCR-QF's records name the chunk's title and one other entity; every other stage gets a line
    with a final answer (so loops stop early: the call counts are lower bounds of a real model's)."""
    prompt = messages[-1]["content"]
    if "<<<\n" in prompt:
        title = prompt.rsplit("<<<\n", 1)[1].split("\n", 1)[0]
        if "Entities found in this text" in prompt:
            return json.dumps({"relations": [{"source": title, "relation": "described in", "target": "Wikipedia",
                                              "description": f"{title} is described in Wikipedia."}]})
        return json.dumps({"entities": [{"name": title, "type": "MISC", "aliases": [], "description": f"{title}."},
                                        {"name": "Wikipedia", "type": "ORGANIZATION", "aliases": [],
                                         "description": "An encyclopedia."}]})
    if prompt.rstrip().endswith("Records:") and 'Text:\n"' in prompt:
        title = prompt.split('Text:\n"', 1)[1].split("\n", 1)[0].replace('"', "").replace("|", " ")[:50]
        return (f'[entity | E1 | Thing | "{title}" | the subject of the text]\n'
                f'[entity | E2 | Work | "Wikipedia" | where it is described]\n'
                f'[relation | E1 | described in | E2 | "{title}"]\n')
    return "Final Answer: Paris"


@pytest.fixture
def scripted_parts(tmp_path, monkeypatch):
    """Runs and notebooks load the scripted LLM above and the bag-of-words embedder."""
    import kgrag_lib.llm as llm_mod
    import kgrag_lib.retrieval as retrieval_mod
    from kgrag_lib.llm.cache import LLMCache
    from kgrag_lib.llm.fake import ScriptedLLM

    monkeypatch.setattr(llm_mod, "load_llm", lambda spec, cache_path=None, **kw: ScriptedLLM(
        scripted, identity=f"scripted:{spec}", cache=LLMCache(cache_path)))
    monkeypatch.setattr(retrieval_mod, "load_embedder", lambda spec, **kw: BagOfWordsEmbedder())
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGRAG_FIGURES_DIR", str(tmp_path / "figures"))


@needs_2wiki
def test_every_method_answers_the_same_questions_with_one_model_and_corpus(tmp_path, scripted_parts):
    t0 = time.perf_counter()
    nb = setup(CM.NAME, profile="cpu-smoke", out_dir=tmp_path / "nb", n=2)
    result = CM.run_cross_method(nb, progress=False)
    assert time.perf_counter() - t0 < 60
    rows = result.rows
    assert [r["method"] for r in rows] == CM.METHODS                      # one row per method, in order
    qids = [q.qid for q in load_questions("2wiki", "dev200", root=ROOT, n=2, seed=0)]
    for r in rows:
        assert r["table"] == CR.TABLE and r["n"] == 2 and r["failed"] == 0 and r["dataset"] == "2wiki"
        assert r["model"] == "qwen2.5-coder-0.5b-q4" and r["embedder"] == "minilm" and r["split"] == "dev200"
        assert all(isinstance(r[k], (int, float)) for k in ("em", "f1", "acc", *CR.COST_COLUMNS))
        assert r["paper"] == {"kg-infused": "KG-Infused RAG", "sa-rag": "SA-RAG", "tcr-qf": "TCR-QF"}[r["family"]]
        man = json.loads((Path(nb.out_dir) / "runs/2wiki/n2_seed0" / r["method"] / "manifest.json").read_text())
        assert man["config"]["qids"] == qids and man["config"]["run"]["model"] == nb.model   # the same questions
        assert man["config"]["embedder"] == "minilm"
    by = {r["method"]: r for r in rows}
    assert by["nor"]["llm_requests_per_q"] == 1 and by["vanilla-rag"]["llm_requests_per_q"] == 2   # answer; note + answer
    assert by["kg-infused"]["corpus"] == "sample:2wiki:dev200:n=2:seed={seed}"
    assert by["sa-rag"]["kg"] == "text:2wiki:dev200:n=2:seed={seed}" and by["tog"]["kg"].startswith("tcr:2wiki:dev200:n=2")
    # mechanism health from the runs' traces: the scripted model selects no KG entity, so KG-Infused RAG's
    # subgraph stays empty and SA-RAG's activation does not spread (dead); ToG parses its final answers
    assert by["kg-infused"]["mechanism"].startswith("subgraph non-empty: 0 of 2") and by["kg-infused"]["mechanism_dead"]
    assert by["self-ask-kg-infused"]["mechanism_ran"] == "0 of 2"      # no follow-up: the KG never ran
    assert by["sa-rag"]["mechanism_ran"] == "0 of 2" and by["sa-rag"]["mechanism_dead"]
    assert by["tcr-qf"]["mechanism_ran"] == "2 of 2" and by["tcr-qf"]["mechanism_dead"] is False
    assert by["nor"]["mechanism"] == CR.NO_SIGNAL and by["nor"]["mechanism_dead"] is None
    # the KGs, once, before any answer: one row each with what its extraction cost
    kgs = {k["family"]: k for k in result.kg_rows}
    assert set(kgs) == {"sa-rag", "tcr-qf"} and kgs["sa-rag"]["kg"] == "text:2wiki:dev200:n=2:seed=0"
    assert kgs["sa-rag"]["llm_requests"] == 2 * kgs["sa-rag"]["chunks"] and kgs["tcr-qf"]["llm_requests"] == \
        kgs["tcr-qf"]["chunks"] and all(k["triples"] > 0 and k["questions"] == 2 for k in kgs.values())
    table = CR.table(rows)
    assert list(table.columns) == list(CR.SHOWN.values()) and len(table) == len(CM.METHODS)
    # a rerun resumes every folder and sends nothing
    again = CM.run_cross_method(nb, progress=False)
    assert again.report.sent == 0 and [r["f1"] for r in again.rows] == [r["f1"] for r in rows]


@needs_2wiki
def test_the_notebooks_cells_run_with_the_scripted_model(tmp_path, scripted_parts, monkeypatch):
    """The notebook's own code, cell by cell (no kernel: the scripted model lives in this process),
    writes its summary and its figure."""
    import IPython.display
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    cells = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / f"{CM.NAME}.ipynb").read_text())["cells"]
    ns: dict = {}
    for c in cells:
        if c["cell_type"] == "code":
            exec("".join(c["source"]), ns)
            if "parameters" in c["metadata"].get("tags", []):
                ns.update(out_dir=str(tmp_path / "out"), n=2, methods=["nor", "vanilla-rag", "naive-rag", "tcr-llm",
                                                                       "sa-rag"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["method"] for r in summary if r.get("table") == CR.TABLE] == ["nor", "vanilla-rag", "naive-rag",
                                                                            "tcr-llm", "sa-rag"]
    assert [r["kg"] for r in summary if r.get("table") == CR.KG_TABLE] == ["text:2wiki:dev200:n=2:seed=0"]
    assert (tmp_path / "figures" / "cpu-smoke" / "50_cross_method_f1.png").is_file()


# ---- REPORT: the table comes first ---------------------------------------------------------------------------
def _row(method, family, f1, dead=None, **kw):
    return {"table": CR.TABLE, "method": method, "family": family, "paper": CR.paper_of(family), "dataset": "2wiki",
            "split": "dev200", "n": 30, "seed": 0, "model": "qwen2.5-coder-0.5b-q4", "embedder": "minilm",
            "em": f1 / 2, "f1": f1, "acc": f1, "failed": 0, "llm_requests_per_q": 3.0,
            "llm_total_prompt_tokens_per_q": 900.0, "llm_total_completion_tokens_per_q": 40.0, "seconds_per_q": 12.5,
            "mechanism": "–" if dead is None else f"subgraph non-empty: {'2' if dead else '20'} of 30",
            "mechanism_dead": dead, "corpus": "sample:2wiki:dev200:n=30:seed={seed}" if family == "kg-infused" else None,
            "kg": "2wiki-evidence-heldout" if family == "kg-infused" else "tcr:2wiki:dev200:n=30:seed={seed}", **kw}


def test_report_puts_every_method_on_the_same_questions_first(tmp_path):
    rows = [_row("nor", "kg-infused", 20.0), _row("kg-infused", "kg-infused", 25.0, dead=True),
            _row("tcr-qf", "tcr-qf", 30.0, dead=False)]
    kg = {"table": CR.KG_TABLE, "paper": "TCR-QF", "family": "tcr-qf", "kg": "tcr:2wiki:dev200:n=30:seed=0",
          "questions": 30, "chunks": 150, "llm_requests": 150, "prompt_tokens": 90000, "completion_tokens": 30000,
          "build_seconds": 6000.0, "build_seconds_per_q": 200.0, "triples": 800}
    claim = {"claim": "c1.tcr_qf_over_baselines.2wiki.tog", "table": "Table 1", "dataset": "2wiki",
             "statement": "tcr-qf > tog", "metric": "em", "n_pairs": 10, "verdict": "not separable at this n"}
    res = ST.StudyResults(tmp_path, summaries={"41_tcr_qf_main": [claim], CM.NAME: [*rows, kg]})
    text = ST.report_markdown(res, "cpu-reference", extra="Extra.", findings="Findings.")
    first = "## Every method on the same questions (2Wiki dev200, n=30, one model)"
    order = [text.index(h) for h in ("Extra.", "Findings.", first, "## The papers' claims, tested",
                                     "## Every distinct run", "## Deviations from the papers")]
    assert order == sorted(order)
    assert text.index(first) < text.index("| ") and text.count(first) == 1   # the report's first table
    section = text[text.index(first):text.index("## The papers' claims")]
    assert "**Mechanism dead** (ran for fewer than half the questions) in kg-infused" in section
    assert "| kg-infused " in section and "| TCR-QF " in section and "subgraph non-empty: 2 of 30" in section
    assert "LLM calls / q" in section and "seconds / q" in section
    assert "tcr:2wiki:dev200:n=30:seed=0" in section and "6000" in section            # the KG build table
    assert "Every method on the same questions: the report's first table." in text  # not repeated under 50
    without = ST.report_markdown(ST.StudyResults(tmp_path, summaries={"41_tcr_qf_main": [claim]}), "p")
    assert "## Every method on the same questions" not in without and "## Every distinct run" in without


def test_title_and_figure_from_the_rows(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    rows = [_row("nor", "kg-infused", 20.0), _row("kg-infused", "kg-infused", 25.0, dead=True,
                                                   f1_ci95=[10.0, 40.0])]
    assert CR.title(rows) == "Every method on the same questions (2Wiki dev200, n=30, one model)"
    assert "2 models" in CR.title([rows[0], {**rows[1], "model": "other"}])
    fig = CR.plot_f1(rows)
    ticks = dict(zip([t.get_text() for t in fig.axes[0].get_yticklabels()], fig.axes[0].get_yticks()))
    assert ticks["nor"] > ticks["kg-infused"]          # the rows' order, top down
    assert any("mechanism dead" in t.get_text() for t in fig.axes[0].texts)
    assert any("Hatched" in t.get_text() for t in fig.texts)


# ---- the real small model (not run by default) ------------------------------------------------------------------
@pytest.mark.model
@needs_2wiki
def test_three_cheap_methods_with_the_real_small_model(tmp_path):
    """The embedded 0.5B model on 2 questions: NoR, Vanilla RAG over the sample corpus, and TCR-QF's
    LLM-only baseline (none of them builds an LLM KG), one row each with real scores and costs."""
    nb = setup(CM.NAME, profile="cpu-smoke", out_dir=tmp_path / "nb", n=2, methods=["nor", "vanilla-rag", "tcr-llm"])
    result = CM.run_cross_method(nb, progress=False)
    assert [r["method"] for r in result.rows] == ["nor", "vanilla-rag", "tcr-llm"] and result.kg_rows == []
    for r in result.rows:
        assert r["n"] == 2 and r["failed"] == 0 and 0 <= r["f1"] <= 100
        assert r["llm_requests_per_q"] >= 1 and r["llm_total_completion_tokens_per_q"] > 0
    assert result.rows[1]["llm_requests_per_q"] == 2      # Vanilla RAG: a passage note, then the answer
