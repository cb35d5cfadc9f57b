"""Issue 56: `2wiki-evidence-full`, a 2Wiki KG that can test KG-Infused RAG without leaking (every real
2Wiki triple, real passages only as seed texts), how much of the evaluated questions' evidence each
2Wiki KG holds (`evidence_coverage`, `kgrag kg coverage`), and the placebo claim
`m1.kg_over_placebo.2wiki` (not run without runs, a verdict with them, testable by the stated rule)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from kgrag_lib.data.twowiki import load_2wiki
from kgrag_lib.errors import ConfigError, MissingDataError
from kgrag_lib.kg import KGStore
from kgrag_lib.kg import sources
from kgrag_lib.kg.sources import (FULL_KG, build_2wiki_full_store, evidence_coverage, evidence_table, load_kg,
                                  verbalized_description)
from fakes import BagOfWordsEmbedder
from kgrag_lib.methods.kg_infused.kg_sources import (PASSAGE_SEED_TEXT_FORM, build_kg_source, described_ids,
                                                     kg_seed_embedding_source, passages_only)
from kgrag_lib.records import Question, Triple
from test_kg_sources import CORPUS, LAG, REAL, write_2wiki

HAVE_FULL = all((REAL / f).is_file() for f in (*sources.TWOWIKI_EVIDENCE_FILES, sources.TWOWIKI_CORPUS,
                                               *sources.TWOWIKI_EVALUATED))
# A MIGRES-format question outside the 4,000: its own evidence, and a paragraph the corpus lacks.
MIGRES = {"_id": "m1", "type": "compositional", "question": "Who is the spouse of the director of film Sunrise?",
          "answer": "Mary", "supporting_facts": [["Sunrise", 0], ["F. W. Murnau", 0]],
          "evidences": [["Sunrise", "director", "F. W. Murnau"], ["F. W. Murnau", "spouse", "Mary"]],
          "context": [["Sunrise", ["Sunrise is a 1927 film ", "by F. W. Murnau."]],
                      ["Taxi!", ["A different Taxi! text that the corpus already has."]],
                      ["Lonely Page", ["A paragraph about nothing in any triple."]]]}


def write_full(root: Path) -> Path:
    """The small 2Wiki files plus MIGRES' file and the 354-question file (a1 evaluated, m1 too)."""
    write_2wiki(root)
    (root / sources.TWOWIKI_EVIDENCE_FILES[1]).write_text(json.dumps(MIGRES) + "\n", encoding="utf-8")
    (root / sources.TWOWIKI_EVALUATED[0]).write_text(json.dumps([LAG[0]]), encoding="utf-8")
    return root


def test_full_kg_holds_every_real_triple_with_real_passages_only(tmp_path):
    root = write_full(tmp_path / "data")
    store, stats = build_2wiki_full_store(root)
    rows = {tuple(t) for q in (*LAG, MIGRES) for t in q["evidences"]}
    assert {(t.s, t.r, t.o) for t in map(store.triple, range(store.num_triples))} == rows
    assert stats["triples"] == len(rows) == 7 and stats["questions"] == 3 and stats["kg"] == FULL_KG
    # texts: the corpus passage first, a MIGRES paragraph only for a title the corpus lacks, nothing verbalized
    assert store.description(store.entity_id("Taxi!")) == CORPUS[0]["text"]
    assert store.description(store.entity_id("Sunrise")) == "Sunrise is a 1927 film by F. W. Murnau."
    assert store.description(store.entity_id("Roy Del Ruth")) == ""           # a head without a passage
    lonely = store.entity_id("Lonely Page")                                   # a passage-only seed
    assert store.description(lonely).startswith("A paragraph") and len(store.out_triples(lonely)) == 0
    assert stats["descriptions_verbalized_from_triples"] == 0 and stats["seed_texts"] == sources.SEED_TEXTS_PASSAGES
    assert (stats["descriptions_from_corpus_passage"], stats["descriptions_from_question_paragraph"]) == (2, 2)
    assert stats["passage_only_seeds"] == 1 and stats["seed_candidates"] == 4
    assert stats["heads_without_passage"] == 3                                # Roy Del Ruth, What Price..., Murnau
    assert stats["evidence_held_mean_pct"] == 100.0 and stats["questions_with_all_evidence_pct"] == 100.0
    assert sorted(store.provenance_of_triple(store.out_triples(store.entity_id("Sunrise"))[0])) == ["2wiki-dev:m1"]
    kg = load_kg(FULL_KG, data_root=root, cache_dir=tmp_path / "cache")
    assert kg.stats == stats and kg.store.description(lonely).startswith("A paragraph")
    with pytest.raises(ConfigError, match="2wiki-evidence-full takes no"):
        load_kg(f"{FULL_KG}:x", data_root=root, cache_dir=tmp_path / "cache")
    (root / sources.TWOWIKI_EVIDENCE_FILES[1]).unlink()
    with pytest.raises(MissingDataError, match="MIGRES_200_2wiki.jsonl"):
        load_kg(FULL_KG, data_root=root, cache_dir=tmp_path / "cache2")


def test_seed_texts_of_the_full_kg_are_its_passages_and_nothing_verbalized(tmp_path):
    root = write_full(tmp_path / "data")
    kg = load_kg(FULL_KG, data_root=root, cache_dir=tmp_path / "cache")
    texts, kw = kg_seed_embedding_source(kg)
    assert passages_only(kg) and kw["key"].endswith(PASSAGE_SEED_TEXT_FORM)
    names = [kg.store.entity_name(int(e)) for e in texts.ids]
    assert sorted(names) == ["George Cukor", "Lonely Page", "Sunrise", "Taxi!"]
    got = [t for block in texts.iter_texts() for t in block]
    assert got == [f"{n}\n{kg.store.description(int(e))}" for n, e in zip(names, texts.ids)]
    assert not any(t.startswith("Roy Del Ruth") for t in got)                # a head without a passage
    src = build_kg_source(kg, BagOfWordsEmbedder(), tmp_path / "cache", show_progress=False)
    assert list(src.entity_ids) == list(texts.ids) and src.stats["seed_descriptions_verbalized"] == 0
    assert src.stats["seeds_without_out_triple"] == 1                         # Lonely Page
    assert [kg.store.entity_name(e) for e, _ in src.seed_entities(BagOfWordsEmbedder().encode(["Lonely Page"])[0], 1)] \
        == ["Lonely Page"]
    # the oracle KG keeps its former seeds: every head, its text verbalized from its triples without a passage
    oracle = load_kg("2wiki-evidence-oracle", data_root=root, cache_dir=tmp_path / "cache")
    o_texts, o_kw = kg_seed_embedding_source(oracle)
    assert not passages_only(oracle) and "verbalized" in o_kw["key"]
    assert "Roy Del Ruth\nRoy Del Ruth: date of death April 27, 1961; spouse Winnie Lightner." in \
        [t for block in o_texts.iter_texts() for t in block]


def test_evidence_coverage_counts_per_question_and_the_dilution():
    store = KGStore.from_triples([Triple("A", "r", "B"), Triple("B", "r", "C"), Triple("X", "r", "Y"),
                                  Triple("Y", "r", "Z")])
    qs = [Question("q1", "?", ["C"], evidence=[Triple("A", "r", "B"), Triple("B", "r", "C")]),
          Question("q2", "?", ["D"], evidence=[Triple("A", "r", "B"), Triple("C", "r", "D")]),
          Question("q3", "?", ["x"])]                                          # no evidence: left out
    cov = evidence_coverage(store, qs, kg="k")
    assert cov["evaluated_questions"] == 2 and cov["evidence_held_mean_pct"] == 75.0
    assert cov["questions_with_all_evidence_pct"] == 50.0 and cov["evaluated_evidence_triples"] == 3
    assert cov["kg_triples_that_are_evidence_pct"] == 50.0                    # 2 of the KG's 4 triples
    w5m = sources.wikidata5m_evidence_row(3)
    assert w5m["triples"] == 20_987_217 and w5m["kg_triples_that_are_evidence_pct"] == round(300 / 20_987_217, 4)
    with pytest.raises(ConfigError, match="no question carries evidence"):
        evidence_coverage(store, qs[2:])


@pytest.fixture(scope="module")
def real_table(tmp_path_factory):
    if not HAVE_FULL:
        pytest.skip(f"real 2Wiki files not under the data root {REAL}")
    cache = tmp_path_factory.mktemp("kgcache")
    return cache, {r["kg"]: r for r in evidence_table(REAL, cache)}


def test_real_full_kg_holds_every_evaluated_question_s_evidence(real_table):
    """The numbers issue 56 asks for, measured on the real files: ~9.5k triples, 100% of the evaluated
    questions' evidence held, ~14% of its triples that evidence against ~0.006% in Wikidata5M-KG."""
    cache, rows = real_table
    full, held, w5m = rows[FULL_KG], rows["2wiki-evidence-heldout"], rows["Wikidata5M-KG (paper, Table 5; computed)"]
    evaluated = {q.qid for f in sources.TWOWIKI_EVALUATED for q in load_2wiki(REAL / f) if q.evidence}
    assert full["evaluated_questions"] == held["evaluated_questions"] == len(evaluated) == 546
    assert full["evidence_held_mean_pct"] == 100.0 and full["questions_with_all_evidence_pct"] == 100.0
    assert held["evidence_held_mean_pct"] < 100.0 and held["questions_with_all_evidence_pct"] < full["questions_with_all_evidence_pct"]
    assert rows["2wiki-evidence-oracle"]["triples"] == 9168 < full["triples"] < 10_000
    assert 10.0 < full["kg_triples_that_are_evidence_pct"] < 20.0
    assert w5m["evaluated_evidence_triples"] == full["evaluated_evidence_triples"]
    assert 0.001 < w5m["kg_triples_that_are_evidence_pct"] < 0.01


def test_real_full_kg_seed_texts_are_real_passages_never_gold_triples(real_table):
    """No leak: every seed text is a real passage of its title (HippoRAG's corpus or a MIGRES paragraph),
    and for the evaluated questions' evidence heads (a sample) none is the sentence verbalized from
    the entity's own (gold) triples."""
    cache, _ = real_table
    kg = load_kg(FULL_KG, data_root=REAL, cache_dir=cache)
    store = kg.store
    corpus, context = sources.twowiki_passages(REAL)
    ids = described_ids(store)
    assert len(ids) == kg.stats["seed_candidates"] and kg.stats["descriptions_verbalized_from_triples"] == 0
    for e in ids.tolist():
        name = store.entity_name(e)
        assert store.description(e) == corpus.get(name, context.get(name)), name
    heads = sorted({t.s for f in sources.TWOWIKI_EVALUATED for q in load_2wiki(REAL / f) for t in q.evidence})[::7]
    for name in heads:
        e = store.entity_id(name)
        facts = [(t.r, t.o) for t in map(store.triple, store.out_triples(e).tolist())]
        assert store.description(e) != verbalized_description(name, facts)
        assert not store.description(e) or store.description(e) in (corpus.get(name), context.get(name))
    assert kg.stats["passage_only_seeds"] > 0 and kg.stats["heads_without_passage"] > 0


def test_kg_coverage_cli_prints_the_table(real_table, capsys, monkeypatch):
    from kgrag_lib.cli import main as kgrag

    cache, rows = real_table
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(cache))
    assert kgrag(["kg", "coverage", "--kg", FULL_KG, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out[0] == rows[FULL_KG] and out[1]["kg"].startswith("Wikidata5M-KG")
    assert kgrag(["kg", "coverage", "--kg", FULL_KG]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["kg", "triples", "entities"] and lines[1].startswith(FULL_KG)


def test_kg_coverage_refuses_a_kg_named_twice_before_building_any(capsys, monkeypatch, tmp_path):
    """Issue 59, probed: `kg coverage --kg K K` built K and printed its row twice, exit 0."""
    from kgrag_lib.cli import main as kgrag
    from kgrag_lib.kg import sources as src

    monkeypatch.setattr(src, "evidence_table", lambda **kw: pytest.fail("a KG was read before the check"))
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    assert kgrag(["kg", "coverage", "--kg", "2wiki-evidence-heldout", " 2wiki-evidence-heldout", FULL_KG]) == 2
    err = capsys.readouterr().err
    assert "2wiki-evidence-heldout named twice; name each KG once" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ the placebo claim
def _cell(method, scores, dataset="2wiki"):
    rows = [{"qid": f"q{i}", "dataset": dataset, "prediction": "x" if s else "y", "answers": ["x"]}
            for i, s in enumerate(scores)]
    return SimpleNamespace(dataset=dataset, run=SimpleNamespace(method=method, cfg={"rounds": 2}), rows=rows)


def test_the_placebo_claim_reads_not_run_without_runs_and_a_verdict_with_scripted_rows():
    from kgrag_lib.report.accounting import account
    from kgrag_lib.report.kg_infused import check_placebo_claims

    summary, reasons = account(pd.DataFrame(), profile="cpu-reference")
    kgi = summary[summary["paper"] == "KG-Infused RAG"].iloc[0]
    assert kgi["not run"] == kgi["claims"]                                    # nothing ran: no fake verdict
    assert any("m1.kg_over_placebo.2wiki" in e for e in reasons["examples"])
    base = SimpleNamespace(cells=[_cell("kg-infused", [1] * 16 + [0] * 4)])
    none = check_placebo_claims(base, None, FULL_KG, "2wiki-evidence-heldout")
    assert list(none["verdict"]) == ["not run"] and none["claim"][0] == "m1.kg_over_placebo.2wiki"
    placebo = SimpleNamespace(cells=[_cell("kg-infused", [0] * 16 + [1] * 4)])
    out = check_placebo_claims(base, placebo, FULL_KG, "2wiki-evidence-heldout")
    assert out["verdict"][0] == "confirmed" and out["ours_a"][0] == 80 and out["ours_b"][0] == 20
    assert f"on {FULL_KG} > " in out["statement"][0] and out["statement"][0].endswith("on 2wiki-evidence-heldout")
    same = check_placebo_claims(base, SimpleNamespace(cells=[_cell("kg-infused", [1] * 16 + [0] * 4)]), FULL_KG, "p")
    assert same["verdict"][0] == "not separable at this n"
    # in REPORT's accounting the claim now counts by its verdict, in KG-Infused RAG's family
    summary, _ = account(out.assign(metric="avg"), profile="cpu-reference")
    assert summary[summary["paper"] == "KG-Infused RAG"].iloc[0]["confirmed"] == 1


def _run(tmp_path, name, kg, mechs, method="kg-infused", notebook="21_p"):
    folder = tmp_path / notebook / name
    folder.mkdir(parents=True)
    with open(folder / "questions.jsonl", "w", encoding="utf-8") as fh:
        for i, m in enumerate(mechs):
            fh.write(json.dumps({"qid": f"q{i}", "dataset": "2wiki", "issues": [], "mechanism": m}) + "\n")
    return {"folder": str(folder), "notebook": notebook, "method": method, "dataset": "2wiki", "kg": kg, "model": "m"}


def test_the_kg_verdict_rule_full_testable_held_out_not_placebo_testable(tmp_path):
    """mechanism.KG_VERDICT_RULE: beside the full KG the held-out KG is the placebo arm, so the claims on
    the full KG and the placebo claim keep their statistical verdicts; alone, the held-out KG still
    makes its claims not testable."""
    from kgrag_lib.report.mechanism import KG_VERDICT_RULE, NOT_TESTABLE_DATA, apply_testability, health_table

    gold = [{"qe_changed": True, "subgraph_triples": 3, "gold_in_subgraph": True}] * 4
    none = [{"qe_changed": True, "subgraph_triples": 2, "gold_in_subgraph": False}] * 4
    runs = pd.DataFrame([_run(tmp_path, "full", FULL_KG, gold), _run(tmp_path, "placebo", "2wiki-evidence-heldout", none),
                         _run(tmp_path, "vr", FULL_KG, [{}] * 4, method="vanilla-rag"),
                         _run(tmp_path, "old", "2wiki-evidence-heldout", gold, notebook="21_old")])

    def claim(cid, nb):
        return {"claim": cid, "dataset": "2wiki", "notebook": nb, "verdict": "confirmed", "metric": "avg",
                "statement": "A > B"}

    claims = pd.DataFrame([claim("m1.kg_over_placebo.2wiki", "21_p"), claim("t1.kg_infused_over_vanilla_rag.2wiki", "21_p"),
                           claim("t1.kg_infused_over_vanilla_rag.2wiki", "21_old"),
                           {**claim("m1.kg_over_placebo.2wiki", "21_p"), "verdict": "not run"}])
    out = apply_testability(claims, runs, health_table(runs))
    assert list(out["verdict"]) == ["confirmed", "confirmed", NOT_TESTABLE_DATA, "not run"]
    assert "gold answer in subgraph 4 of 4" in out["mechanism"][0]            # read on the full KG's side
    assert "2wiki-evidence-heldout" in KG_VERDICT_RULE and FULL_KG in KG_VERDICT_RULE
