"""`load_kg`: every spec kind built from small files in the real formats (and the real 2Wiki
files when present), the one build cache, and the errors for bad specs, missing files and
empty KGs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kgrag_lib.data.metaqa import load_metaqa_kb
from kgrag_lib.errors import ConfigError, MissingDataError
from kgrag_lib.kg import KGStore
from kgrag_lib.kg import sources
from kgrag_lib.kg.sources import BuiltKG, EmptyKGError, build_2wiki_evidence_store, load_kg, shared_kg
from kgrag_lib.methods.base import RunContext
from kgrag_lib.paths import data_root
from kgrag_lib.records import Triple

REAL = data_root()
HAVE_2WIKI = (REAL / sources.TWOWIKI_QUESTIONS).exists() and (REAL / sources.TWOWIKI_CORPUS).exists()

KB = ["Kismet|directed_by|William Dieterle", "Kismet|starred_actors|Marlene Dietrich",
      "Blonde Venus|starred_actors|Marlene Dietrich", "Kismet|directed_by|William Dieterle",
      "Blonde Venus|release_year|1932"]
LAG = [
    {"_id": "a1", "type": "bridge_comparison", "question": "Which film has the director who died later, Taxi! or What Price Hollywood??",
     "entity_ids": "Q1_Q2", "supporting_facts": [["Taxi!", 0], ["What Price Hollywood?", 0]],
     "evidences": [["Taxi!", "director", "Roy Del Ruth"], ["What Price Hollywood?", "director", "George Cukor"],
                   ["Roy Del Ruth", "date of death", "April 27, 1961"], ["George Cukor", "date of death", "January 24, 1983"]],
     "answer": "What Price Hollywood?", "evidences_id": [], "answer_id": "Q2"},
    {"_id": "a2", "type": "compositional", "question": "Who is the spouse of the director of film Taxi!?",
     "entity_ids": "Q1", "supporting_facts": [["Taxi!", 0], ["Roy Del Ruth", 0]],
     "evidences": [["Taxi!", "director", "Roy Del Ruth"], ["Roy Del Ruth", "spouse", "Winnie Lightner"]],
     "answer": "Winnie Lightner", "evidences_id": [], "answer_id": "Q3"},
]
CORPUS = [{"title": "Taxi!", "text": "Taxi! is a 1932 American drama film directed by Roy Del Ruth."},
          {"title": "George Cukor", "text": "George Cukor was an American film director."}]
TRANSDUCTIVE = ("wikidata5m_transductive_train.txt", "wikidata5m_transductive_valid.txt",
                "wikidata5m_transductive_test.txt")


def write_2wiki(root: Path) -> Path:
    """The two 2wiki-evidence input files, two questions and two passages, under `root`."""
    (root / "2wiki").mkdir(parents=True)
    (root / sources.TWOWIKI_QUESTIONS).write_text(json.dumps(LAG), encoding="utf-8")
    (root / sources.TWOWIKI_CORPUS).write_text(json.dumps(CORPUS), encoding="utf-8")
    return root


def write_wikidata5m(folder: Path, split: bool = False) -> Path:
    """The official Wikidata5M files, tiny: Q3 lacks a description and Q9 heads no triple."""
    folder.mkdir(parents=True)
    rows = ["Q1\tP57\tQ2", "Q2\tP570\tQ3", "Q2\tP26\tQ4", "Q4\tP26\tQ2", "Q5\tP57\tQ2", "Q1\tP577\tQ9"]
    if split:  # the transductive split instead of all_triplet: 4 + 1 + 1 rows
        for name, part in zip(TRANSDUCTIVE, (rows[:4], rows[4:5], rows[5:])):
            (folder / name).write_text("\n".join(part) + "\n", encoding="utf-8")
    else:
        (folder / "wikidata5m_all_triplet.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (folder / "wikidata5m_entity.txt").write_text(
        "Q1\tTaxi!\tTaxi (1932 film)\nQ2\tRoy Del Ruth\nQ3\t1961\nQ4\tWinnie Lightner\nQ5\tBlondie Johnson\n", encoding="utf-8")
    (folder / "wikidata5m_relation.txt").write_text(
        "P57\tdirector\tdirected by\nP570\tdate of death\nP26\tspouse\nP577\tpublication date\n", encoding="utf-8")
    (folder / "wikidata5m_text.txt").write_text(
        "Q1\tTaxi! is a 1932 film.\nQ2\tRoy Del Ruth was a film director.\nQ4\tWinnie Lightner was an actress.\n"
        "Q5\tBlondie Johnson is a 1933 film.\nQ9\t1932 is a year.\n", encoding="utf-8")
    return folder


@pytest.fixture
def kb_file(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "metaqa" / "kb.txt"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(KB) + "\n", encoding="utf-8")
    return path


def same_triples(a: KGStore, b: KGStore) -> bool:
    return a.verbalize(range(a.num_triples)) == b.verbalize(range(b.num_triples)) and all(
        np.array_equal(getattr(a, k), getattr(b, k)) for k in ("heads", "rels", "tails"))


# ---- MetaQA -------------------------------------------------------------------------------
def test_metaqa_default_and_path_specs_keep_the_file_triple_ids(kb_file, tmp_path):
    cache = tmp_path / "cache"
    kg = load_kg("metaqa", data_root=tmp_path / "data", cache_dir=cache)
    assert isinstance(kg, BuiltKG) and kg.name == "metaqa" and kg.spec == "metaqa"
    assert kg.stats == {"kg": "metaqa", "source": str(kb_file.resolve()), "entities": 5, "relations": 3, "triples": 4}
    # ids exactly as KGStore.from_triples gives them for the file: whole-KB embeddings index by them
    assert same_triples(kg.store, KGStore.from_triples(load_metaqa_kb(kb_file)))
    other = load_kg(f"metaqa:{kb_file}", data_root=tmp_path / "elsewhere", cache_dir=cache)
    assert same_triples(other.store, kg.store)
    built = [p for p in (cache / "kg").iterdir() if p.is_dir()]
    assert [p.name.split("-")[0] for p in built] == ["metaqa"] and (built[0] / sources.STATS_FILE).is_file()


def test_second_load_reuses_the_build(kb_file, tmp_path, monkeypatch, caplog):
    import logging

    calls = []
    plan = sources.SOURCES["metaqa"].plan

    def counting(arg, root):
        p = plan(arg, root)
        return sources.SourcePlan(p.name, p.inputs, lambda: calls.append(1) or p.build())

    monkeypatch.setitem(sources.SOURCES, "metaqa", sources.Source(counting, sources.SOURCES["metaqa"].forms))
    with caplog.at_level(logging.INFO, logger=sources.__name__):
        first = load_kg(f"metaqa:{kb_file}", cache_dir=tmp_path / "cache")
        assert not any("opened saved KG store" in r.getMessage() for r in caplog.records)   # built, not reused
        again = load_kg(f"metaqa:{kb_file}", cache_dir=tmp_path / "cache")
    assert calls == [1] and again.stats == first.stats and same_triples(again.store, first.store)
    assert any(r.getMessage().startswith("opened saved KG store ") and f"{len(again.store.heads)} triples" in r.getMessage()
               for r in caplog.records)   # issue 43: a second run says it reused the store
    kb_file.write_text("\n".join(KB[:2]) + "\n", encoding="utf-8")  # changed input: a new build
    assert load_kg(f"metaqa:{kb_file}", cache_dir=tmp_path / "cache").stats["triples"] == 2 and calls == [1, 1]


def test_shared_kg_builds_once_per_context(kb_file, tmp_path):
    ctx = RunContext(data_root=str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"))
    assert shared_kg(ctx, "metaqa") is shared_kg(ctx, "metaqa")
    assert shared_kg(ctx, "metaqa").stats["triples"] == 4


# ---- 2wiki evidence -----------------------------------------------------------------------
def test_2wiki_evidence_from_small_real_format_files(tmp_path):
    root = write_2wiki(tmp_path / "data")
    store, stats = build_2wiki_evidence_store(root, held_out=False)
    assert stats["triples"] == store.num_triples == 5          # the shared director fact counted once
    assert stats["questions"] == 2 and stats["evidence_rows"] == 6
    taxi, roy = store.entity_id("Taxi!"), store.entity_id("Roy Del Ruth")
    assert store.description(taxi) == CORPUS[0]["text"]        # from the corpus passage
    assert store.description(roy) == "Roy Del Ruth: date of death April 27, 1961; spouse Winnie Lightner."
    assert store.description(store.entity_id("April 27, 1961")) == ""   # a literal: no description
    assert stats["descriptions_from_corpus_passage"] == 2 and stats["descriptions_verbalized_from_triples"] == 2
    t = next(i for i in range(store.num_triples) if store.triple(i).r == "director" and store.triple(i).s == "Taxi!")
    assert sorted(store.provenance_of_triple(t)) == ["2wiki-dev:a1", "2wiki-dev:a2"]
    kg = load_kg("2wiki-evidence-oracle", data_root=root, cache_dir=tmp_path / "cache")
    assert kg.name == "2wiki-evidence-oracle" and kg.stats == stats and same_triples(kg.store, store)
    assert kg.store.description(taxi) == CORPUS[0]["text"] and kg.store.provenance_of_triple(t) == store.provenance_of_triple(t)
    assert len(list((tmp_path / "cache" / "kg").glob("2wiki-evidence-oracle-*/" + sources.STATS_FILE))) == 1


def test_held_out_2wiki_evidence_leaves_out_the_evaluated_questions(tmp_path):
    """a1 is evaluated: its own evidence goes, except the director fact a2 shares with it."""
    root = write_2wiki(tmp_path / "data")
    corpus354, dev200 = (root / f for f in sources.TWOWIKI_EVALUATED)
    corpus354.write_text(json.dumps([LAG[0]]), encoding="utf-8")
    dev200.write_text(json.dumps({"_id": "elsewhere", "question": "?", "answer": "x"}) + "\n", encoding="utf-8")
    kg = load_kg("2wiki-evidence-heldout", data_root=root, cache_dir=tmp_path / "cache")
    assert kg.name == "2wiki-evidence-heldout"
    assert sorted(kg.store.verbalize(range(kg.store.num_triples))) == [
        "<Roy Del Ruth | spouse | Winnie Lightner>", "<Taxi! | director | Roy Del Ruth>"]
    st = kg.stats
    assert st["questions"] == 1 and st["dev4000_questions_left_out"] == 1 and st["evaluated_questions_left_out"] == 2
    assert st["evaluated_evidence_rows"] == 4 and st["evaluated_evidence_still_in_kg_pct"] == 25.0
    assert st["evaluated_questions_with_all_evidence_in_kg_pct"] == 0.0
    with pytest.raises(MissingDataError, match="MIGRES_200_2wiki.jsonl"):
        dev200.unlink()
        load_kg("2wiki-evidence-heldout", data_root=root, cache_dir=tmp_path / "cache2")


def test_verbalized_description_caps_the_facts():
    facts = [("r", f"o{i}") for i in range(sources.MAX_VERBALIZED_FACTS + 2)]
    text = sources.verbalized_description("E", facts)
    assert text.startswith("E: r o0; r o1;") and text.endswith("r o11; and 2 more facts.")
    assert sources.verbalized_description("E", []) == ""


@pytest.mark.skipif(not HAVE_2WIKI, reason=f"real 2Wiki files not under the data root {REAL}")
def test_real_2wiki_evidence_kg_counts(tmp_path):
    held = load_kg("2wiki-evidence-heldout", data_root=REAL, cache_dir=tmp_path).stats
    # 354 + 200 evaluated questions, 8 in both splits, 59 of dev200 in the 4,000
    assert held["dev4000_questions_left_out"] == 405 and held["questions"] == 3595
    assert held["evaluated_questions_left_out"] == 546 and held["triples"] < 9168
    assert 0 < held["evaluated_evidence_still_in_kg_pct"] < 100
    kg = load_kg("2wiki-evidence-oracle", data_root=REAL, cache_dir=tmp_path)
    stats, store = kg.stats, kg.store
    assert stats["questions"] == 4000
    assert stats["triples"] == 9168 and stats["relations"] == 33 and stats["entities"] == 12304
    assert stats["entities_heading_a_triple"] == 8585
    assert stats["descriptions_from_corpus_passage"] == 995
    assert stats["descriptions_from_corpus_passage"] + stats["descriptions_verbalized_from_triples"] >= 8585
    roy = store.entity_id("Roy Del Ruth")
    assert "<Roy Del Ruth | date of death | April 27, 1961>" in store.verbalize(store.out_triples(roy))


# ---- Wikidata5M ---------------------------------------------------------------------------
def test_wikidata5m_folder_spec(tmp_path):
    kg = load_kg(f"wikidata5m:{write_wikidata5m(tmp_path / 'w5m')}", data_root=tmp_path, cache_dir=tmp_path / "cache")
    assert kg.name == "wikidata5m" and kg.stats["kg"] == "wikidata5m"
    # Q3 has no description, Q9 heads no triple: both dropped with their triples (Appendix B).
    assert kg.stats["kept"] == {"entities": 4, "relations": 2, "triples": 4}
    assert kg.stats["original"]["triples"] == 6 and kg.stats["paper_table5"]["Wikidata5M-KG"]["triples"] == 20987217
    assert kg.store.description(kg.store.entity_id("Roy Del Ruth")) == "Roy Del Ruth was a film director."
    assert len(list((tmp_path / "cache" / "kg").glob("wikidata5m-*/" + sources.STATS_FILE))) == 1


def test_wikidata5m_default_folder_and_transductive_split(tmp_path):
    write_wikidata5m(tmp_path / "data" / "wikidata5m", split=True)
    kg = load_kg("wikidata5m", data_root=tmp_path / "data", cache_dir=tmp_path / "cache")
    assert kg.stats["source"] == str(tmp_path / "data" / "wikidata5m")
    assert kg.stats["original"]["triples"] == 6 and kg.stats["kept"]["triples"] == 4


# ---- a saved store ------------------------------------------------------------------------
def test_saved_store_folder(tmp_path):
    KGStore.from_triples([Triple("A", "r", "B"), Triple("B", "r", "C")]).save(tmp_path / "my_kg")
    kg = load_kg(str(tmp_path / "my_kg"), cache_dir=tmp_path / "cache")
    assert kg.name == "store:my_kg" and kg.stats == {"kg": str(tmp_path / "my_kg"), "entities": 3,
                                                     "relations": 1, "triples": 2}
    assert kg.store.verbalize([0, 1]) == ["<A | r | B>", "<B | r | C>"]
    assert not (tmp_path / "cache" / "kg").exists()   # loaded in place, nothing built


def test_a_damaged_build_in_the_cache_is_named_and_rebuilt_a_damaged_given_folder_refused(kb_file, tmp_path,
                                                                                          caplog):
    import logging

    from kgrag_lib.errors import DataFormatError

    cache = tmp_path / "cache"
    good = load_kg(f"metaqa:{kb_file}", cache_dir=cache).store
    good = good.verbalize(range(good.num_triples))   # the store maps the files damaged below
    folder, = (p for p in (cache / "kg").iterdir() if p.is_dir())
    tails = np.array(np.load(folder / "tails.npy"))
    np.save(folder / "tails.npy", tails[::-1].copy())   # in range, wrong triples
    with caplog.at_level(logging.WARNING, logger="kgrag_lib.kg.sources"):
        again = load_kg(f"metaqa:{kb_file}", cache_dir=cache).store
    assert again.verbalize(range(again.num_triples)) == good
    [record] = caplog.records
    assert f"built KG {folder} is damaged" in record.getMessage() and "rebuilding it" in record.getMessage()
    np.save(folder / "tails.npy", tails[::-1].copy())
    with pytest.raises(DataFormatError, match=r"in_perm\.npy: malformed input; expected triples in order"):
        load_kg(str(folder), cache_dir=tmp_path / "other")   # a folder the user names: refused, never rebuilt
    assert np.array_equal(np.load(folder / "tails.npy"), tails[::-1])


# ---- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,match", [
    ("no-such-kg", "unknown KG; accepted: 'metaqa', 'metaqa:<kb.txt-format file>', '2wiki-evidence-heldout'"),
    ("", "unknown KG"),
    ("2wiki-evidence-oracle:x", "2wiki-evidence-oracle takes no"),
])
def test_bad_specs_name_the_accepted_forms(spec, match, tmp_path):
    with pytest.raises(ConfigError, match=match):
        load_kg(spec, data_root=tmp_path, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("spec,match", [
    ("metaqa", r"kg='metaqa': MetaQA KB: file not found: .*kb\.txt.*accepted: 'metaqa', 'metaqa:"),
    ("metaqa:{tmp}/nope.txt", r"kg='metaqa:.*nope\.txt': MetaQA KB not found .*'subject\|relation\|object'"),
    ("2wiki-evidence-oracle", r"lag_2wiki_dev_4000_nocontext\.json.*accepted: '2wiki-evidence-oracle'"),
    ("wikidata5m:{tmp}", r"wikidata5m_all_triplet\.txt, wikidata5m_entity\.txt, .*wikidata5m_text\.txt.*deepgraphlearning"),
])
def test_missing_files_name_the_spec_and_the_files(spec, match, tmp_path):
    with pytest.raises(MissingDataError, match=match):
        load_kg(spec.format(tmp=tmp_path), data_root=tmp_path, cache_dir=tmp_path / "cache")


def test_empty_kb_is_refused_and_not_cached(tmp_path):
    empty = tmp_path / "kb.txt"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(EmptyKGError, match=r"kg='metaqa:.*kb\.txt': the KG from .* has no triples"):
        load_kg(f"metaqa:{empty}", cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache" / "kg").glob("metaqa-*/" + sources.STATS_FILE))
    KGStore.from_triples([]).save(tmp_path / "empty_store")
    with pytest.raises(EmptyKGError, match="has no triples"):
        load_kg(str(tmp_path / "empty_store"), cache_dir=tmp_path / "cache")


# ---- the build folder: keyed on the inputs' content -------------------------------------------
def test_the_build_folder_is_named_by_the_inputs_paths_contents_and_identity(kb_file, tmp_path):
    """The folder name recipe: builder version, each input's resolved path and content hash."""
    import hashlib

    kg = load_kg(f"metaqa:{kb_file}", cache_dir=tmp_path / "cache")
    h = hashlib.sha256(f"v{sources.BUILDER_VERSION}\0content\0".encode())
    h.update(f"{kb_file.resolve()}\0{hashlib.sha256(kb_file.read_bytes()).hexdigest()}\0".encode())
    assert (tmp_path / "cache" / "kg" / f"metaqa-{h.hexdigest()[:16]}" / sources.STATS_FILE).is_file()
    assert kg.extra == {} and not list((tmp_path / "cache" / "kg").glob("*.journal.jsonl"))
    plan = sources.SOURCES["metaqa"].plan(str(kb_file), tmp_path)
    other = sources.SourcePlan(plan.name, plan.inputs, plan.build, identity="model-x")
    assert sources.build_folder(other, tmp_path) != sources.build_folder(plan, tmp_path)
    assert not sources.needs_llm("metaqa") and sources.needs_llm("text:musique")


def test_an_edit_keeping_size_and_mtime_gets_a_new_build(kb_file, tmp_path):
    """Same size, same mtime to the nanosecond (an edit within the second, or a restored mtime):
    the old key (path, size, whole-second mtime) served the old graph."""
    import os

    cache = tmp_path / "cache"
    before = load_kg(f"metaqa:{kb_file}", cache_dir=cache).store
    st = kb_file.stat()
    kb_file.write_text(kb_file.read_text(encoding="utf-8").replace("Kismet", "Kizmet"), encoding="utf-8")
    os.utime(kb_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (kb_file.stat().st_size, kb_file.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    after = load_kg(f"metaqa:{kb_file}", cache_dir=cache).store
    text = lambda store: " ".join(store.verbalize(range(store.num_triples)))  # noqa: E731
    assert "Kismet" in text(before) and "Kizmet" not in text(before)
    assert "Kizmet" in text(after) and "Kismet" not in text(after)
    assert len([p for p in (cache / "kg").iterdir() if p.is_dir()]) == 2


def test_a_changed_side_file_is_a_damaged_build(kb_file, tmp_path, caplog):
    """stats.json and the side tables are recorded in side_files.json: an edit inside valid JSON
    (a count changed) is a damaged build, rebuilt in the cache; in a folder the user names it is
    refused naming the file and the way to rebuild. A build from before the record is rebuilt."""
    import logging

    from kgrag_lib.errors import DataFormatError

    cache = tmp_path / "cache"
    kg = load_kg(f"metaqa:{kb_file}", cache_dir=cache)
    folder, = (p for p in (cache / "kg").iterdir() if p.is_dir())
    stats_path = folder / sources.STATS_FILE
    assert json.loads((folder / sources.SIDE_SUMS_FILE).read_text())["files"].keys() == {sources.STATS_FILE}
    edited = stats_path.read_text().replace('"triples": 4', '"triples": 9')
    assert edited != stats_path.read_text() and len(edited) == len(stats_path.read_text())
    stats_path.write_text(edited)
    with caplog.at_level(logging.WARNING, logger="kgrag_lib.kg.sources"):
        again = load_kg(f"metaqa:{kb_file}", cache_dir=cache)
    assert again.stats == kg.stats and again.stats["triples"] == 4
    assert f"built KG {folder} is damaged" in caplog.text and "stats.json: malformed input; expected block 0" \
        in caplog.text
    caplog.clear()
    (folder / sources.SIDE_SUMS_FILE).unlink()      # a build from before side records: rebuilt
    with caplog.at_level(logging.WARNING, logger="kgrag_lib.kg.sources"):
        assert load_kg(f"metaqa:{kb_file}", cache_dir=cache).stats == kg.stats
    assert "side_files.json: malformed input; expected the checksum record of the side files stats.json" in caplog.text
    assert (folder / sources.SIDE_SUMS_FILE).is_file()

    stats_path.write_text(edited)                   # a folder the user names: refused, never rebuilt
    with pytest.raises(DataFormatError, match=r"stats\.json: malformed input; expected block 0 .*\(a side file of "
                                              r"the KG is damaged: rebuild it: delete .* and rerun"):
        load_kg(str(folder), cache_dir=tmp_path / "other")
    (folder / "text_kg.json").write_text("{}")     # a side table added by hand: no record
    with pytest.raises(DataFormatError, match=r"side_files\.json: malformed input; expected a record for every "
                                              r"side file .*no record for text_kg\.json"):
        load_kg(str(folder), cache_dir=tmp_path / "other")
