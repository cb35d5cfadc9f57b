"""Bamboogle (125 two-hop questions): the JSON file with gold decompositions, or the headerless CSV.

The JSON gives `{Question, Answer, Q1, A1[], Q2, A2[]}`; A2 lists the final answer's aliases.
The CSV (`Question,,,,Answer,,`) has no ids and no aliases. Both get the same qids
(`bamboogle-<row index>`), so a run on either file scores the same questions.
FlashRAG-style `{question, answer: [...]}` records are accepted too.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ..errors import DataFormatError
from ..records import Question
from .common import merge_answers, open_text, read_json_records

FORM = '{"Question", "Answer", "Q1"?, "A1"?: [...], "Q2"?, "A2"?: [aliases...]}'
CSV_FORM = "a CSV row 'question,,,,answer,,' (question in column 1, answer in column 5)"


def _qid(i: int) -> str:
    return f"bamboogle-{i}"


def _load_json(path: Path, dataset: str) -> list[Question]:
    out = []
    for i, rec in enumerate(read_json_records(path, FORM, own="bamboogle")):
        qkey = "Question" if "Question" in rec.data else "question"
        akey = "Answer" if "Answer" in rec.data else "answer"
        answer = rec.need(akey, (str, list))
        golds = answer if isinstance(answer, list) else [answer]
        if not golds or not all(isinstance(a, str) and a.strip() for a in golds):
            raise rec.error(f"field {akey!r} to be a non-empty answer")
        decomposition = [
            {"question": rec.data[q], "answer": rec.data.get(a)}
            for q, a in (("Q1", "A1"), ("Q2", "A2")) if rec.data.get(q)
        ]
        out.append(Question(
            qid=_qid(i),
            question=rec.need(qkey),
            answers=merge_answers(golds[0], [*golds[1:], *(rec.get("A2", list, []))]),
            dataset=dataset,
            decomposition=decomposition,
        ))
    return out


def _load_csv(path: Path, dataset: str) -> list[Question]:
    out = []
    with open_text(path, CSV_FORM, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        start = 1
        for row in reader:
            lineno, start = start, reader.line_num + 1
            if not any(c.strip() for c in row):
                continue
            if len(row) < 5 or not row[0].strip() or not row[4].strip():
                raise DataFormatError(path, lineno, CSV_FORM, ",".join(row))
            if not out and row[0].strip().lower() == "question" and row[4].strip().lower() == "answer":
                continue  # tolerate a header row
            out.append(Question(qid=_qid(len(out)), question=row[0].strip(),
                                answers=merge_answers(row[4]), dataset=dataset))
    return out


def load_bamboogle(path: str | Path, dataset: str = "bamboogle") -> list[Question]:
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return _load_csv(path, dataset)
    return _load_json(path, dataset)
