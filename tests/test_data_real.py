"""Loaders and the registry on the real files of the data root (counts from each folder's README)."""

from __future__ import annotations

import pytest

from kgrag_lib.data import (
    DATASETS,
    default_path,
    load_corpus,
    load_metaqa_kb,
    load_questions,
    metaqa_kb_path,
)
from kgrag_lib.data.manifest import load_manifest
from kgrag_lib.data.registry import wikidata5m_paths, wikipedia_path
from kgrag_lib.errors import ConfigError, MissingDataError
from kgrag_lib.paths import data_root
from kgrag_lib.records import Triple

ROOT = data_root()
pytestmark = pytest.mark.skipif(not (ROOT / "metaqa" / "kb.txt").is_file(), reason=f"real data root not found at {ROOT}")


@pytest.mark.parametrize("name, split, count", [
    ("metaqa-1hop", "test", 9947), ("metaqa-1hop", "dev", 9992),
    ("metaqa-2hop", "test", 14872), ("metaqa-3hop", "test", 14274),
    ("hotpotqa", None, 500), ("hotpotqa", "dev100", 100),
    ("musique", None, 200), ("musique", "dev2417", 2417),
    ("2wiki", "dev200", 200), ("2wiki", "dev4000", 4000), ("2wiki", None, 354),
    ("bamboogle", None, 125), ("bamboogle", "csv", 125),
    ("strategyqa", None, 2290), ("strategyqa", "evidence229", 229),
])
def test_question_counts(name, split, count):
    qs = load_questions(name, split)
    assert len(qs) == count
    assert len({q.qid for q in qs}) == count
    assert all(q.question and q.answers and q.dataset == name for q in qs)


def test_metaqa_kb_and_spot_check():
    kb = load_metaqa_kb(metaqa_kb_path())
    assert len(kb) == 133582 and len(set(kb)) == 133582
    assert kb[0] == Triple("Kismet", "directed_by", "William Dieterle")
    assert len({t.r for t in kb}) == 9
    q = load_questions("metaqa-2hop")[4]
    assert q.question == "the films acted by Shaun White were in which genres"
    assert q.topic_entities == ["Shaun White"] and q.answers == ["Sport", "Documentary"]
    assert q.meta["qtype"] == "actor_to_movie_to_genre" and q.meta["line"] == 5
    # every 1-hop topic entity is a KB entity
    ents = {t.s for t in kb} | {t.o for t in kb}
    assert all(q.topic_entities[0] in ents for q in load_questions("metaqa-1hop"))


def test_hotpotqa_record():
    q = load_questions("hotpotqa")[0]
    assert q.qid == "5a7166395542994082a3e814" and q.answers == ["Kansas Song"]
    assert len(q.context) == 10 and q.context[6].pid == "University of Kansas"
    assert q.context[0].text.startswith("The history of the Kansas City metropolitan area begins in the 19th century")
    assert "  " not in q.context[0].text and "Native Americans. The Kansas City" in q.context[0].text
    assert q.supporting == ["Kansas Song", "University of Kansas"]
    assert q.meta["gold_in_context"] is False  # "Kansas Song" is not among this record's paragraphs
    qs = load_questions("hotpotqa")
    assert sum(q.meta["type"] == "bridge" for q in qs) == 371
    assert sum(len(q.context) == 10 for q in qs) == 495


def test_2wiki_records():
    qs = load_questions("2wiki", "dev200")
    assert sum(bool(q.context) for q in qs) == 164
    assert sum(q.meta["type"] == "comparison" for q in qs) == 73
    q = qs[0]
    assert q.qid == "b088d3ca08e211ebbda4ac1f6bf848b6" and q.answers == ["Free Guy"]
    assert q.evidence[0] == Triple("Forbidden Ground", "director", "Pál Gábor")
    assert q.context[3].pid == "Forbidden Ground"
    assert q.context[3].text == "Forbidden Ground is a Hungarian film directed by Pál Gábor. It was released in 1968."
    lag = load_questions("2wiki", "dev4000")
    assert all(q.evidence for q in lag) and not any(q.context for q in lag)
    assert lag[0].evidence[2] == Triple("Roy Del Ruth", "date of death", "April 27, 1961")


def test_2wiki_corpus_covers_corpus354_gold():
    corpus = load_corpus("2wiki")
    assert len(corpus) == 6119 and len({p.pid for p in corpus}) == 6119
    titles = {p.pid for p in corpus}
    assert all(set(q.supporting) <= titles for q in load_questions("2wiki"))


def test_musique_record_and_corpus():
    q = load_questions("musique")[0]
    assert q.qid == "2hop__574419_270105" and q.answers == ["Stanley"]
    assert len(q.context) == 20
    assert [c.title for c in q.context if c.pid in q.supporting] == [
        "Mountrail County Courthouse", "Van Hook Township, Mountrail County, North Dakota"]
    assert q.decomposition[1]["question"] == "#1 >> capital"
    assert {q.meta["hops"] for q in load_questions("musique")} == {2, 3, 4}
    corpus = load_corpus("musique")
    assert len(corpus) == 3141  # distinct (title, text) pairs among 4,000 paragraphs
    pids = {p.pid for p in corpus}
    assert all(set(q.supporting) <= pids for q in load_questions("musique"))


def test_bamboogle_and_strategyqa_records():
    b = load_questions("bamboogle")[1]
    assert b.answers == ["Titan IIIE", "titan iiie-centaur"]
    assert b.decomposition[0]["answer"] == ["voyager 2"]
    assert load_corpus("bamboogle") == []
    qs = load_questions("strategyqa")
    assert sum(q.answers == ["yes"] for q in qs) == 1071
    s = qs[0]
    assert s.qid == "b8677742616fef051f00" and s.answers == ["yes"]
    assert s.meta["facts"][1] == "Genghis Khan had sixteen children."
    corpus = load_corpus("strategyqa")
    assert corpus and all(p.pid.startswith("fact:") for p in corpus)
    assert len({p.pid for p in corpus}) == len(corpus)
    assert set(s.supporting) <= {p.pid for p in corpus}


def test_sampling_is_seeded_and_keeps_drawn_order():
    a = [q.qid for q in load_questions("hotpotqa", n=20, seed=3)]
    b = [q.qid for q in load_questions("hotpotqa", n=20, seed=3)]
    c = [q.qid for q in load_questions("hotpotqa", n=20, seed=4)]
    assert a == b and a != c and len(set(a)) == 20
    all_ids = [q.qid for q in load_questions("hotpotqa")]
    assert a != sorted(a, key=all_ids.index)  # drawn order, not file order
    import numpy as np
    idx = np.random.default_rng(3).choice(500, size=20, replace=False)
    assert a == [all_ids[i] for i in idx]
    assert len(load_questions("bamboogle", n=1000, seed=0)) == 125
    with pytest.raises(ConfigError, match="positive integer"):
        load_questions("bamboogle", n=0)


def test_registry_errors_and_paths(tmp_path):
    with pytest.raises(ConfigError, match="accepted: metaqa-1hop"):
        load_questions("nq")
    with pytest.raises(ConfigError, match="no split 'train'"):
        load_questions("hotpotqa", "train")
    with pytest.raises(MissingDataError) as exc:
        load_questions("musique", root=tmp_path)
    msg = str(exc.value)
    assert "MIGRES_200_musique_ans.jsonl" in msg and str(tmp_path) in msg and "StonyBrookNLP/musique" in msg
    with pytest.raises(MissingDataError, match="psgs_w100.tsv.gz"):
        wikipedia_path(tmp_path)
    with pytest.raises(MissingDataError, match="deepgraphlearning"):
        wikidata5m_paths(tmp_path)
    assert wikipedia_path(tmp_path, must_exist=False) == tmp_path.resolve() / "wikipedia" / "psgs_w100.tsv"


def test_every_registry_file_is_in_the_manifest():
    manifest = load_manifest()["datasets"]
    listed = {f["path"] for entry in manifest.values() for f in entry["files"]}
    for name, spec in DATASETS.items():
        assert spec.manifest_key in manifest
        for split, rel in spec.splits.items():
            assert rel in listed, (name, split)
            assert default_path(name, split) == ROOT / rel
        assert all(rel in listed for rel in spec.qtypes.values())
        if spec.corpus not in ("none", "pooled", "facts"):
            assert spec.corpus in listed
    for key in ("wikipedia-2018", "wikidata5m"):
        assert manifest[key]["required"] is False and manifest[key]["obtain"]


@pytest.mark.parametrize("dataset, split_of, other", [
    ("hotpotqa", ("2wiki", "dev200"), "2wiki"),           # HotpotQA and 2Wiki share every required field
    ("2wiki", ("hotpotqa", "dev100"), "hotpotqa"),
    ("bamboogle", ("hotpotqa", "dev100"), "hotpotqa"),    # Bamboogle takes any {question, answer}
    ("musique", ("strategyqa", "train"), "strategyqa"),
])
def test_a_file_of_another_dataset_is_refused_naming_it(dataset, split_of, other, tmp_path, monkeypatch, capsys):
    """Once these loaded and were scored and labelled as `dataset`; now the file's own dataset is named."""
    import kgrag_lib.llm
    from kgrag_lib.cli import main
    from kgrag_lib.data.registry import DATASETS, load_questions
    from kgrag_lib.errors import DataFormatError

    path = ROOT / DATASETS[split_of[0]].splits[split_of[1]]
    with pytest.raises(DataFormatError, match=rf"a field of {other} records: is this a {other} file"):
        load_questions(dataset, path=path)
    monkeypatch.setattr(kgrag_lib.llm, "load_llm", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    rc = main(["run", "--method", "nor", "--dataset", dataset, "--qa-file", str(path), "--n", "1",
               "--no-progress", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and f"--dataset {other}" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_every_shipped_question_file_loads_under_its_own_dataset():
    from kgrag_lib.data.registry import DATASETS, load_questions

    for name, spec in DATASETS.items():
        if name.startswith("metaqa"):
            continue
        for split in spec.splits:
            assert load_questions(name, split=split, n=3), (name, split)
