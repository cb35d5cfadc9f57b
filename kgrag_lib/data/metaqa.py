"""MetaQA (vanilla): the WikiMovies KB (`s|r|o`) and k-hop QA files (`question with [topic]<TAB>a1|a2`).

The bracketed span is the dataset's gold topic entity; methods receive it as
`Question.topic_entities` and the question text without brackets, as the KG-RAG paper does.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import DataFormatError
from ..records import Question, Triple
from .common import open_text
from .triples import read_triples

QA_FORM = "'question text with one [topic entity]<TAB>answer1|answer2|...'"
QTYPE_FORM = "one question type per line (e.g. movie_to_director)"
_TOPIC = re.compile(r"\[([^\[\]]+)\]")


def load_metaqa_kb(path: str | Path) -> list[Triple]:
    """All KB triples in file order (MetaQA kb.txt: `subject|relation|object`)."""
    return list(read_triples(path, format="metaqa"))


def _read_qtypes(qtype_path: Path, expected: int, qa_path: Path) -> list[str]:
    with open_text(qtype_path, QTYPE_FORM) as f:
        lines = [ln.rstrip("\r\n") for ln in f]
    qtypes = [ln.strip() for ln in lines if ln.strip()]
    if len(qtypes) != expected:
        raise DataFormatError(
            qtype_path, None,
            f"one question type per line, aligned with {qa_path} ({expected} questions)",
            f"{len(qtypes)} question types",
        )
    return qtypes


def load_metaqa_qa(path: str | Path, qtype_path: str | Path | None = None, dataset: str = "metaqa") -> list[Question]:
    """Questions of one QA file; `qtype_path` (the aligned `*_qtype.txt`) adds `meta["qtype"]`."""
    path = Path(path)
    questions: list[Question] = []
    with open_text(path, f"one question per line: {QA_FORM}") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                raise DataFormatError(path, lineno, QA_FORM, line)
            text, answer_field = parts
            topics = _TOPIC.findall(text)
            answers = [a.strip() for a in answer_field.split("|")]
            if len(topics) != 1 or not all(answers):
                raise DataFormatError(path, lineno, QA_FORM, line)
            questions.append(Question(
                qid=f"{dataset}:{path.stem}:{lineno}",
                question=" ".join(_TOPIC.sub(r"\1", text).split()),
                answers=answers,
                dataset=dataset,
                topic_entities=[topics[0].strip()],
                meta={"raw": line, "line": lineno},
            ))
    if qtype_path is not None:
        for q, qtype in zip(questions, _read_qtypes(Path(qtype_path), len(questions), path)):
            q.meta["qtype"] = qtype
    return questions
