"""Loaders on tiny files written in the exact real formats, including malformed rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgrag_lib.data import (
    iter_passages,
    load_2wiki,
    load_2wiki_corpus,
    load_bamboogle,
    load_hotpotqa,
    load_metaqa_kb,
    load_metaqa_qa,
    load_musique,
    load_strategyqa,
    read_triples,
)
from kgrag_lib.data.strategyqa import fact_passages
from kgrag_lib.errors import ConfigError, DataFormatError
from kgrag_lib.records import Passage, Triple


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def assert_where(exc: pytest.ExceptionInfo, path: Path, line: int, expected_part: str) -> None:
    err = exc.value
    assert err.path == str(path) and err.line == line
    assert f"{path}:{line}" in str(err)
    assert expected_part in str(err)


# ---------- triples ----------

def test_read_triples_metaqa_and_blank_lines(tmp_path):
    p = write(tmp_path / "kb.txt", "Kismet|directed_by|William Dieterle\n\nKismet|release_year|1944\n")
    assert list(read_triples(p)) == [Triple("Kismet", "directed_by", "William Dieterle"),
                                     Triple("Kismet", "release_year", "1944")]
    assert load_metaqa_kb(p)[1].o == "1944"


@pytest.mark.parametrize("bad", ["Kismet|directed_by", "Kismet|directed_by|A|B", "Kismet||William Dieterle"])
def test_read_triples_metaqa_malformed(tmp_path, bad):
    p = write(tmp_path / "kb.txt", f"Kismet|directed_by|William Dieterle\n{bad}\n")
    with pytest.raises(DataFormatError) as exc:
        list(read_triples(p, "metaqa"))
    assert_where(exc, p, 2, "subject|relation|object")


def test_read_triples_wikidata5m_and_tsv(tmp_path):
    p = write(tmp_path / "t.txt", "Q7965079\tP27\tQ16\r\nQ6719921\tP31\tQ11446\n")
    assert list(read_triples(p, "wikidata5m")) == [Triple("Q7965079", "P27", "Q16"), Triple("Q6719921", "P31", "Q11446")]
    bad = write(tmp_path / "bad.txt", "Q1\tP2\tQ3\nQ1 P2 Q3\n")
    with pytest.raises(DataFormatError) as exc:
        list(read_triples(bad, "wikidata5m"))
    assert_where(exc, bad, 2, "Qhead<TAB>Prel<TAB>Qtail")
    names = write(tmp_path / "names.tsv", "Kismet\tdirected by\tWilliam Dieterle\n")
    assert list(read_triples(names, "tsv")) == [Triple("Kismet", "directed by", "William Dieterle")]
    with pytest.raises(DataFormatError):  # names are not Wikidata ids
        list(read_triples(names, "wikidata5m"))
    with pytest.raises(ConfigError):
        list(read_triples(names, "csv"))
    bad_tsv = write(tmp_path / "bad.tsv", "Kismet\tdirected by\tWilliam Dieterle\nKismet\tdirected by\n")
    with pytest.raises(DataFormatError) as exc:
        list(read_triples(bad_tsv, "tsv"))
    assert_where(exc, bad_tsv, 2, "subject<TAB>relation<TAB>object")


# ---------- MetaQA QA ----------

def test_metaqa_qa_fields_and_qtype(tmp_path):
    qa = write(tmp_path / "qa_test.txt",
               "what does [Grégoire Colin] appear in\tBefore the Rain\n"
               "[Joe Thomas] appears in which movies\tThe Inbetweeners Movie|The Inbetweeners 2\n")
    qt = write(tmp_path / "qt.txt", "actor_to_movie\nactor_to_movie\n")
    qs = load_metaqa_qa(qa, qt, dataset="metaqa-1hop")
    assert [q.question for q in qs] == ["what does Grégoire Colin appear in", "Joe Thomas appears in which movies"]
    assert qs[1].answers == ["The Inbetweeners Movie", "The Inbetweeners 2"]
    assert qs[1].topic_entities == ["Joe Thomas"]
    assert qs[1].meta == {"raw": "[Joe Thomas] appears in which movies\tThe Inbetweeners Movie|The Inbetweeners 2",
                          "line": 2, "qtype": "actor_to_movie"}
    assert qs[0].qid == "metaqa-1hop:qa_test:1" and qs[0].dataset == "metaqa-1hop"


@pytest.mark.parametrize("bad", [
    "what does Grégoire Colin appear in\tBefore the Rain",      # no topic brackets
    "what does [Grégoire Colin] appear in",                      # no answer column
    "[A] and [B]\tX",                                            # two topics
    "what does [Grégoire Colin] appear in\tBefore the Rain||X",  # empty answer
])
def test_metaqa_qa_malformed(tmp_path, bad):
    p = write(tmp_path / "qa.txt", f"[Joe Thomas] appears in which movies\tX\n{bad}\n")
    with pytest.raises(DataFormatError) as exc:
        load_metaqa_qa(p)
    assert_where(exc, p, 2, "[topic entity]<TAB>answer1|answer2")


def test_metaqa_qtype_misaligned(tmp_path):
    qa = write(tmp_path / "qa.txt", "[A] movies\tX\n[B] movies\tY\n")
    qt = write(tmp_path / "qt.txt", "actor_to_movie\n")
    with pytest.raises(DataFormatError, match="aligned with"):
        load_metaqa_qa(qa, qt)


# ---------- HotpotQA ----------

HOTPOT_REC = {
    "_id": "5a7166395542994082a3e814", "answer": "Kansas Song", "question": "What is the fight song?",
    "supporting_facts": [["Kansas Song", 0], ["University of Kansas", 1], ["University of Kansas", 2]],
    "context": [["University of Kansas", ["The University of Kansas is a university.", " Its main campus is in Lawrence."]],
                ["Kansas Song", ["Kansas Song is a fight song."]]],
    "type": "bridge", "level": "hard",
}


def test_hotpotqa_jsonl_and_json_list(tmp_path):
    jl = write(tmp_path / "h.jsonl", json.dumps(HOTPOT_REC) + "\n")
    js = write(tmp_path / "h.json", json.dumps([HOTPOT_REC], indent=1))
    a, b = load_hotpotqa(jl), load_hotpotqa(js)
    assert a == b
    q = a[0]
    assert q.qid == "5a7166395542994082a3e814" and q.answers == ["Kansas Song"]
    assert q.context[0] == Passage("University of Kansas",
                                   "The University of Kansas is a university. Its main campus is in Lawrence.",
                                   "University of Kansas")
    assert q.supporting == ["Kansas Song", "University of Kansas"]
    assert q.meta["type"] == "bridge" and q.meta["gold_in_context"] is True


def test_hotpotqa_missing_field_and_bad_json(tmp_path):
    rec = dict(HOTPOT_REC)
    del rec["answer"]
    jl = write(tmp_path / "h.jsonl", json.dumps(HOTPOT_REC) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(DataFormatError) as exc:
        load_hotpotqa(jl)
    assert_where(exc, jl, 2, "a field 'answer'")
    js = write(tmp_path / "h.json", json.dumps([HOTPOT_REC, rec]))
    with pytest.raises(DataFormatError, match=r"record #2 of the JSON list") as exc:
        load_hotpotqa(js)
    assert exc.value.line == 2
    broken = write(tmp_path / "b.jsonl", json.dumps(HOTPOT_REC) + "\n{\"_id\": \n")
    with pytest.raises(DataFormatError) as exc:
        load_hotpotqa(broken)
    assert_where(exc, broken, 2, "one JSON object per line")
    badctx = dict(HOTPOT_REC, context=[["title only"]])
    p = write(tmp_path / "c.jsonl", json.dumps(badctx) + "\n")
    with pytest.raises(DataFormatError) as exc:
        load_hotpotqa(p)
    assert_where(exc, p, 1, "[title, [sentence, ...]]")


# ---------- 2WikiMultiHopQA ----------

TWOWIKI_REC = {
    "_id": "13c1565a087311ebbd66ac1f6bf848b6", "type": "bridge_comparison",
    "question": "Do both directors share the same nationality?",
    "entity_ids": "Q6164693_Q3952382",
    "supporting_facts": [["Jatt & Juliet", 0], ["Sciopèn", 0]],
    "evidences": [["Jatt & Juliet", "director", "Anurag Singh"], ["Sciopèn", "director", "Luciano Odorisio"]],
    "answer": "no", "evidences_id": [], "answer_id": None,
    "qa_pairs": [{"question": "Who is the director of Jatt & Juliet?", "answer": "Anurag Singh"}],
}


def test_2wiki_with_and_without_context(tmp_path):
    with_ctx = dict(TWOWIKI_REC, _id="x2", context=[["Sciopèn", ["Sciopèn is a film.", "It was directed by Luciano Odorisio."]]],
                    answer_aliases=["No"], answer="no")
    p = write(tmp_path / "w.jsonl", json.dumps(TWOWIKI_REC) + "\n" + json.dumps(with_ctx) + "\n")
    a, b = load_2wiki(p)
    assert a.evidence == [Triple("Jatt & Juliet", "director", "Anurag Singh"), Triple("Sciopèn", "director", "Luciano Odorisio")]
    assert a.supporting == ["Jatt & Juliet", "Sciopèn"] and a.context == []
    assert a.decomposition == [{"question": "Who is the director of Jatt & Juliet?", "answer": "Anurag Singh"}]
    assert a.meta["type"] == "bridge_comparison" and a.meta["entity_ids"] == "Q6164693_Q3952382"
    assert a.meta["has_context"] is False
    assert b.context[0].text == "Sciopèn is a film. It was directed by Luciano Odorisio."
    assert b.answers == ["no"]  # alias equal up to case is dropped
    assert b.meta["gold_in_context"] is False
    lst = write(tmp_path / "w.json", json.dumps([TWOWIKI_REC]))
    assert load_2wiki(lst)[0].evidence == a.evidence


def test_2wiki_malformed(tmp_path):
    bad = dict(TWOWIKI_REC, evidences=[["Jatt & Juliet", "director"]])
    p = write(tmp_path / "w.jsonl", json.dumps(TWOWIKI_REC) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataFormatError) as exc:
        load_2wiki(p)
    assert_where(exc, p, 2, "[subject, relation, object]")
    noq = {k: v for k, v in TWOWIKI_REC.items() if k != "question"}
    p = write(tmp_path / "q.json", json.dumps([noq]))
    with pytest.raises(DataFormatError, match="a field 'question'"):
        load_2wiki(p)


def test_2wiki_corpus(tmp_path):
    p = write(tmp_path / "c.json", json.dumps([{"title": "Teutberga", "text": "Teutberga was a queen."},
                                                {"title": "Theodred II", "text": "Theodred II was a bishop."}]))
    assert load_2wiki_corpus(p) == [Passage("Teutberga", "Teutberga was a queen.", "Teutberga"),
                                    Passage("Theodred II", "Theodred II was a bishop.", "Theodred II")]
    p = write(tmp_path / "d.json", json.dumps([{"title": "A", "text": "x"}, {"title": "A", "text": "y"}]))
    with pytest.raises(DataFormatError, match="unique titles"):
        load_2wiki_corpus(p)
    p = write(tmp_path / "e.json", json.dumps([{"title": "A"}]))
    with pytest.raises(DataFormatError, match="a field 'text'"):
        load_2wiki_corpus(p)


# ---------- MuSiQue ----------

MUSIQUE_REC = {
    "id": "2hop__574419_270105",
    "paragraphs": [
        {"idx": 0, "title": "Port Blair", "paragraph_text": "Port Blair is a capital.", "is_supporting": False},
        {"idx": 1, "title": "Mountrail County", "paragraph_text": "Stanley is the seat.", "is_supporting": True},
        {"idx": 2, "title": "Mountrail County", "paragraph_text": "Mountrail County is in North Dakota.", "is_supporting": False},
    ],
    "question": "What is the seat of the county where Van Hook Township is located?",
    "question_decomposition": [
        {"id": 574419, "question": "Van Hook Township >> located in", "answer": "Mountrail County", "paragraph_support_idx": 2},
        {"id": 270105, "question": "#1 >> capital", "answer": "Stanley", "paragraph_support_idx": 1}],
    "answer": "Stanley", "answer_aliases": ["Stanley, North Dakota"], "answerable": True,
}


def test_musique_paragraphs_and_no_paragraphs(tmp_path):
    nopara = {k: v for k, v in MUSIQUE_REC.items() if k != "paragraphs"}
    p = write(tmp_path / "m.jsonl", json.dumps(MUSIQUE_REC) + "\n")
    q = load_musique(p)[0]
    assert q.answers == ["Stanley", "Stanley, North Dakota"]
    assert [c.title for c in q.context] == ["Port Blair", "Mountrail County", "Mountrail County"]
    assert len({c.pid for c in q.context}) == 3  # same title, different text -> different pids
    assert q.supporting == [q.context[1].pid]
    assert q.decomposition[1]["answer"] == "Stanley"
    assert q.meta["hops"] == 2 and q.meta["answerable"] is True
    lst = write(tmp_path / "m.json", json.dumps([nopara]))
    q2 = load_musique(lst)[0]
    assert q2.context == [] and q2.supporting == [] and q2.meta["has_paragraphs"] is False


def test_musique_malformed(tmp_path):
    bad = dict(MUSIQUE_REC, paragraphs=[{"idx": 0, "title": "Port Blair"}])
    p = write(tmp_path / "m.jsonl", "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataFormatError) as exc:
        load_musique(p)
    assert_where(exc, p, 2, "paragraph_text")
    noid = {k: v for k, v in MUSIQUE_REC.items() if k != "id"}
    p = write(tmp_path / "n.jsonl", json.dumps(noid) + "\n")
    with pytest.raises(DataFormatError) as exc:
        load_musique(p)
    assert_where(exc, p, 1, "a field 'id'")


# ---------- Bamboogle ----------

def test_bamboogle_json_and_csv_agree(tmp_path):
    recs = [{"Question": "Who was president when Citibank was founded?", "Answer": "james madison",
             "Q1": "What year was Citibank founded?", "A1": ["1812"],
             "Q2": "Who was president of the United States in 1812?", "A2": ["james madison"]},
            {"Question": "What rocket launched Voyager 2?", "Answer": "Titan IIIE", "Q1": "q1", "A1": ["voyager 2"],
             "Q2": "q2", "A2": ["titan iiie-centaur", "titan iiie"]}]
    js = write(tmp_path / "bamboogle.json", json.dumps(recs))
    csv = write(tmp_path / "bamboogle.csv",
                "Who was president when Citibank was founded?,,,,james madison,,\n"
                'What rocket launched Voyager 2?,,,,"Titan IIIE",,\n')
    a, b = load_bamboogle(js), load_bamboogle(csv)
    assert [q.qid for q in a] == [q.qid for q in b] == ["bamboogle-0", "bamboogle-1"]
    assert [q.question for q in a] == [q.question for q in b]
    assert a[1].answers == ["Titan IIIE", "titan iiie-centaur"] and b[1].answers == ["Titan IIIE"]
    assert a[0].decomposition == [{"question": "What year was Citibank founded?", "answer": ["1812"]},
                                  {"question": "Who was president of the United States in 1812?", "answer": ["james madison"]}]
    flash = write(tmp_path / "f.json", json.dumps([{"question": "Q?", "answer": ["A", "B"]}]))
    assert load_bamboogle(flash)[0].answers == ["A", "B"]


def test_bamboogle_malformed(tmp_path):
    csv = write(tmp_path / "bamboogle.csv", "Q one?,,,,A,,\nQ two?,,\n")
    with pytest.raises(DataFormatError) as exc:
        load_bamboogle(csv)
    assert_where(exc, csv, 2, "question in column 1, answer in column 5")
    js = write(tmp_path / "b.json", json.dumps([{"Question": "Q?"}]))
    with pytest.raises(DataFormatError, match="a field 'answer'"):
        load_bamboogle(js)


# ---------- StrategyQA ----------

STRATEGY_REC = {"qid": "b8677742616fef051f00", "term": "Genghis Khan", "description": "founder of the Mongol Empire",
                "facts": ["Julius Caesar had three children.", "Genghis Khan had sixteen children."],
                "answer": True, "question": "Are more people related to Genghis Khan than Julius Caesar?",
                "decomposition": ["How many kids did Julius Caesar have?", "Is #2 greater than #1?"]}


def test_strategyqa(tmp_path):
    other = dict(STRATEGY_REC, qid="x", answer=False, facts=["Genghis Khan had sixteen children."])
    p = write(tmp_path / "s.json", json.dumps([STRATEGY_REC, other]))
    a, b = load_strategyqa(p)
    assert a.answers == ["yes"] and b.answers == ["no"]
    assert a.meta["answer_bool"] is True and a.meta["term"] == "Genghis Khan"
    assert a.decomposition[0] == {"question": "How many kids did Julius Caesar have?"}
    facts = fact_passages(a)
    assert [f.text for f in facts] == STRATEGY_REC["facts"] and all(f.pid.startswith("fact:") for f in facts)
    assert a.supporting == [f.pid for f in facts]
    assert b.supporting == [facts[1].pid]  # a shared fact keeps one id
    assert a.context == []  # facts are gold: never shipped as question context


def test_strategyqa_malformed(tmp_path):
    p = write(tmp_path / "s.jsonl", json.dumps(dict(STRATEGY_REC, answer="maybe")) + "\n")
    with pytest.raises(DataFormatError) as exc:
        load_strategyqa(p)
    assert_where(exc, p, 1, "true/false")
    noans = {k: v for k, v in STRATEGY_REC.items() if k != "answer"}
    p = write(tmp_path / "n.json", json.dumps([noans]))
    with pytest.raises(DataFormatError, match="a field 'answer'"):
        load_strategyqa(p)


# ---------- Wikipedia psgs_w100 ----------

PSGS = ('id\ttext\ttitle\n'
        '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest, and the brother of Moses."\tAaron\n'
        '2\t"God at Sinai granted Aaron the priesthood for himself and his male descendants."\tAaron\n'
        '3\t"The title ""Anarchism"" was used."\t"Anarchism, ""quoted"" title"\n')


def test_wikipedia_psgs_w100(tmp_path):
    p = write(tmp_path / "psgs_w100.tsv", PSGS)
    ps = list(iter_passages(p))
    assert ps[0] == Passage("1", 'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses.', "Aaron")
    assert ps[2].title == 'Anarchism, "quoted" title'
    assert [x.pid for x in iter_passages(p, limit=2)] == ["1", "2"]
    assert list(iter_passages(p, limit=0)) == []


def test_wikipedia_malformed(tmp_path):
    p = write(tmp_path / "bad.tsv", PSGS + "4\tno title column\n")
    with pytest.raises(DataFormatError) as exc:
        list(iter_passages(p))
    assert_where(exc, p, 5, "id<TAB>")
    p = write(tmp_path / "nohead.tsv", PSGS.split("\n", 1)[1])
    with pytest.raises(DataFormatError) as exc:
        list(iter_passages(p))
    assert_where(exc, p, 1, "header line")


def test_two_questions_under_one_id_or_a_question_without_text_are_refused(tmp_path):
    from kgrag_lib.data.registry import load_questions

    other = dict(HOTPOT_REC, question="Who sings it?")
    dup = write(tmp_path / "dup.jsonl", "\n".join(json.dumps(r) for r in (HOTPOT_REC, dict(HOTPOT_REC, _id="b"), other)))
    with pytest.raises(DataFormatError, match=r"id '5a7166395542994082a3e814' at questions 1 and 3"):
        load_questions("hotpotqa", path=dup)
    for text in (None, "", "   "):
        blank = write(tmp_path / "blank.jsonl", json.dumps(dict(HOTPOT_REC, question=text)))
        with pytest.raises(DataFormatError, match="has no text|question"):
            load_questions("hotpotqa", path=blank)


def test_a_bom_is_dropped_and_a_nul_past_the_head_is_refused_naming_its_line(tmp_path):
    """Issue 40: a UTF-8 BOM stayed in question 1; a NUL byte after the first 8 KiB was accepted."""
    from kgrag_lib.data.metaqa import load_metaqa_qa
    from kgrag_lib.errors import DataFormatError

    qa = tmp_path / "qa_test.txt"
    qa.write_bytes("\ufeffwho directed [The Lovers]\tLouis Malle\n".encode("utf-8"))
    [q] = load_metaqa_qa(qa)
    assert q.question.startswith("who directed")
    lines = "".join(f"who directed [Film {i}]\tSomeone\n" for i in range(400))   # > 8 KiB
    qa.write_bytes((lines + "who directed [Bad\0Film]\tX\n").encode("utf-8"))
    with pytest.raises(DataFormatError, match=r"qa_test\.txt:401: .*NUL byte"):
        load_metaqa_qa(qa)


def test_what_a_dataset_is_known_by_is_written_on_its_registry_entry(tmp_path):
    """Issue 60: the record marks every loader refuses, the corpus reader of a file corpus and the extra
    files a loader reads (2Wiki's aliases) are fields of `DatasetSpec`, not tables keyed by name."""
    from kgrag_lib.data.common import DATASET_MARKS
    from kgrag_lib.data.registry import DATASETS, DatasetSpec
    from kgrag_lib.data.twowiki import load_2wiki_corpus

    assert DATASET_MARKS == {name: spec.marks for name, spec in DATASETS.items() if spec.marks}
    assert set(DATASET_MARKS) == {"hotpotqa", "2wiki", "musique", "strategyqa", "bamboogle"}
    assert DATASETS["2wiki"].corpus_loader is load_2wiki_corpus and DATASETS["2wiki"].loader_files is not None
    assert [n for n, s in DATASETS.items() if s.many_answers] == ["metaqa-1hop", "metaqa-2hop", "metaqa-3hop"]
    with pytest.raises(ConfigError, match="corpus 'toy/corpus.json' is a file, so the DatasetSpec needs its "
                                          "corpus_loader"):
        DatasetSpec("toy", "toy", load_hotpotqa, {"dev": "toy/dev.jsonl"}, "dev", "toy/corpus.json", "{...}")
    # a HotpotQA file read as MuSiQue is refused through the marks the registry gave the loaders
    p = tmp_path / "h.jsonl"
    p.write_text(json.dumps({"_id": "a", "question": "Q?", "answer": "x", "level": "easy",
                             "paragraphs": [{"title": "T", "paragraph_text": "t", "idx": 0}]}) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="'level', a field of hotpotqa records"):
        load_musique(p)
