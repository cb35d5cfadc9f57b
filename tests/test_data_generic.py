"""kgrag's own JSONL question format (`data/generic.py`): a dataset in it is one registry row, read through
`load_questions`/`load_corpus` like any other; every bad record is refused naming the file and its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgrag_lib.data import registry
from kgrag_lib.data.generic import load_jsonl_questions
from kgrag_lib.errors import ConfigError, DataFormatError

GOOD = [
    {"id": "q1", "question": "Which city is the capital of France?", "answers": ["Paris", "City of Paris"],
     "context": [{"title": "France", "text": "Its capital is Paris."}, {"id": "p2", "text": "Paris lies on the Seine."}],
     "supporting": ["France"], "meta": {"hops": 1}},
    {"id": 2, "question": "On which river does Paris lie?", "answers": ["Seine"],
     "context": [{"title": "France", "text": "Its capital is Paris."}, {"text": "The Seine flows through Paris."}]},
]


def write_jsonl(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def toy_registered(tmp_path, monkeypatch):
    """`toyqa` as the one registry row the guide's recipe adds, over a data root holding GOOD."""
    write_jsonl(tmp_path / "toyqa" / "test.jsonl", GOOD)
    monkeypatch.setitem(registry.DATASETS, "toyqa", registry.jsonl_dataset("toyqa", {"test": "toyqa/test.jsonl"}))
    return tmp_path


def test_a_registry_row_reads_questions_and_pools_their_paragraphs(toy_registered):
    qs = registry.load_questions("toyqa", root=toy_registered)
    assert [q.qid for q in qs] == ["q1", "2"]
    assert qs[0].answers == ["Paris", "City of Paris"] and qs[0].dataset == "toyqa"
    assert [p.pid for p in qs[0].context] == ["France", "p2"] and qs[0].supporting == ["France"]
    assert qs[0].meta == {"hops": 1} and qs[1].meta == {}
    assert qs[1].context[1].pid == "2#1"   # neither id nor title: the question's id and the position
    corpus = registry.load_corpus("toyqa", root=toy_registered)
    assert [p.pid for p in corpus] == ["France", "p2", "2#1"]   # pooled: France once


@pytest.mark.parametrize("record, expected", [
    ({"id": "x", "question": "Q?"}, "a field 'answers'"),
    ({"id": "x", "question": "Q?", "answers": []}, "at least one string"),
    ({"id": "x", "question": "Q?", "answers": ["a", ""]}, "non-empty string"),
    ({"id": "x", "question": "Q?", "answer": "a", "answers": ["a"]}, "only the fields"),
    ({"id": "x", "question": "Q?", "answers": ["a"], "context": [{"title": "T"}]}, "non-empty 'text'"),
    ({"id": "x", "question": "Q?", "answers": ["a"], "context": [{"text": "t", "body": "b"}]}, "only the fields"),
    ({"id": "x", "question": "Q?", "answers": ["a"], "context": [{"title": "T", "text": "t"}],
      "supporting": ["U"]}, "name a passage of its 'context'"),
    ({"id": True, "question": "Q?", "answers": ["a"]}, "field 'id'"),
    ({"id": "x", "question": "Q?", "answers": ["a"], "meta": []}, "field 'meta'"),
    ({"id": "x", "question": "Q?", "answers": ["a"], "paragraphs": []}, "a field of musique records"),
])
def test_a_bad_record_is_refused_naming_file_line_and_form(tmp_path, record, expected):
    path = write_jsonl(tmp_path / "q.jsonl", [GOOD[0], record])
    with pytest.raises(DataFormatError) as exc:
        load_jsonl_questions(path, "toyqa")
    assert exc.value.path == str(path) and exc.value.line == 2
    assert expected in str(exc.value) and '"answers": [answer, alias, ...]' in str(exc.value)


def test_two_questions_under_one_id_are_refused_by_the_registry(toy_registered):
    write_jsonl(toy_registered / "toyqa" / "test.jsonl", [GOOD[0], GOOD[0]])
    with pytest.raises(DataFormatError, match="id 'q1' at questions 1 and 2"):
        registry.load_questions("toyqa", root=toy_registered)


def test_a_row_with_a_corpus_the_format_cannot_give_is_refused():
    with pytest.raises(ConfigError, match="'pooled'.*or 'none'"):
        registry.jsonl_dataset("toyqa", {"test": "toyqa/test.jsonl"}, corpus="facts")
    with pytest.raises(ConfigError, match="at least one split"):
        registry.jsonl_dataset("toyqa", {})


def test_a_row_without_a_manifest_entry_says_where_its_file_goes_and_that_nothing_downloads_it(tmp_path,
                                                                                                monkeypatch):
    from kgrag_lib.errors import MissingDataError

    monkeypatch.setitem(registry.DATASETS, "toyqa", registry.jsonl_dataset(
        "toyqa", {"test": "toyqa/test.jsonl"}, obtain="write it from the toy sheet"))
    with pytest.raises(MissingDataError) as exc:
        registry.load_questions("toyqa", root=tmp_path)
    said = str(exc.value)
    assert str(tmp_path.resolve() / "toyqa" / "test.jsonl") in said
    assert "registry row 'toyqa'" in said and "no download source" in said and "no entry 'toyqa'" in said
    assert "write it from the toy sheet" in said and '"answers": [answer, alias, ...]' in said


def test_a_pooled_row_whose_questions_carry_no_paragraphs_is_refused_as_a_corpus(toy_registered):
    write_jsonl(toy_registered / "toyqa" / "test.jsonl", [{"id": "1", "question": "Q?", "answers": ["a"]}])
    assert len(registry.load_questions("toyqa", root=toy_registered)) == 1     # the questions still read
    with pytest.raises(DataFormatError, match="context paragraphs to pool.*no question has any"):
        registry.load_corpus("toyqa", root=toy_registered)


def test_methods_accept_a_generic_row_by_what_it_provides(toy_registered, monkeypatch):
    from kgrag_lib.methods.registry import check_dataset, get_method, runs_on

    for method in ("naive-rag", "sa-rag", "tcr-qf", "kg-infused", "self-ask-kg-infused"):
        check_dataset(get_method(method), "toyqa")
        assert "toyqa" in runs_on(get_method(method))
    with pytest.raises(ConfigError, match="'llm-kg' does not run on dataset 'toyqa'; it supports metaqa-1hop"):
        check_dataset(get_method("llm-kg"), "toyqa")      # tied to MetaQA's KB: its list only
    assert "toyqa" not in runs_on(get_method("llm-kg"))
    with pytest.raises(ConfigError, match="'naive-rag' does not run on dataset 'hotpotqa'; it supports "
                                          "musique, 2wiki, and on a dataset in kgrag's question format"):
        check_dataset(get_method("naive-rag"), "hotpotqa")   # a layout of its own: named, never guessed
    monkeypatch.setitem(registry.DATASETS, "bare", registry.jsonl_dataset("bare", {"test": "b.jsonl"}, corpus="none"))
    with pytest.raises(ConfigError, match=r"'sa-rag' reads corpus \(passages.*which dataset 'bare' does not "
                                          r"provide \(corpus 'none'"):
        check_dataset(get_method("sa-rag"), "bare")
    check_dataset(get_method("kg-infused"), "bare")   # questions with answers are all it reads
    with pytest.raises(ConfigError, match="unknown dataset 'nosuch'"):
        check_dataset(get_method("sa-rag"), "nosuch")
