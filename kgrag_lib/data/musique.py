"""MuSiQue-Ans: records with 20 paragraphs (JSONL) or without paragraphs (JSON list).

MuSiQue reuses titles for different paragraphs (the same page split in several paragraphs,
sometimes inside one question), so a paragraph's pid is `title::<content digest>`: stable
across questions and files, unique per distinct text, and the same id in every question
that shares the paragraph (so pooled corpora and Recall@k agree).
"""

from __future__ import annotations

from pathlib import Path

from ..records import Passage, Question
from .common import merge_answers, read_json_records, text_digest

FORM = ('{"id", "question", "answer", "answer_aliases"?: [...], "answerable"?, '
        '"paragraphs"?: [{"idx", "title", "paragraph_text", "is_supporting"}, ...], '
        '"question_decomposition"?: [{"id", "question", "answer", "paragraph_support_idx"}, ...]}')
_MAPPED = {"id", "question", "answer", "answer_aliases", "paragraphs", "question_decomposition"}


def paragraph_pid(title: str, text: str) -> str:
    return f"{title}::{text_digest(text)}"


def load_musique(path: str | Path, dataset: str = "musique") -> list[Question]:
    questions = []
    for rec in read_json_records(path, FORM, own="musique"):
        context: list[Passage] = []
        supporting: list[str] = []
        for para in rec.get("paragraphs", list, []):
            if not (isinstance(para, dict) and isinstance(para.get("title"), str)
                    and isinstance(para.get("paragraph_text"), str)):
                raise rec.error("each 'paragraphs' item to be {idx, title, paragraph_text, is_supporting}",
                                got=repr(para)[:120])
            p = Passage(pid=paragraph_pid(para["title"], para["paragraph_text"]),
                        text=para["paragraph_text"], title=para["title"])
            context.append(p)
            if para.get("is_supporting") and p.pid not in supporting:
                supporting.append(p.pid)
        decomposition = rec.get("question_decomposition", list, [])
        if not all(isinstance(step, dict) and "question" in step for step in decomposition):
            raise rec.error("each 'question_decomposition' item to be {id, question, answer, ...}")
        qid = str(rec.need("id"))
        meta = {k: v for k, v in rec.data.items() if k not in _MAPPED}
        meta["hops"] = int(qid[0]) if qid[:1].isdigit() and "hop" in qid[:5] else len(decomposition)
        meta["has_paragraphs"] = "paragraphs" in rec.data
        questions.append(Question(
            qid=qid,
            question=rec.need("question"),
            answers=merge_answers(rec.need("answer"), rec.get("answer_aliases", list, [])),
            dataset=dataset,
            supporting=supporting,
            context=context,
            decomposition=[dict(step) for step in decomposition],
            meta=meta,
        ))
    return questions
