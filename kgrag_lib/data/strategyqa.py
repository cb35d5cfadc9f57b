"""StrategyQA: yes/no questions with annotated facts and decompositions (JSON list or JSONL).

The evidence paragraphs of StrategyQA are not available here, so the annotated `facts` serve
as a stand-in corpus. They are gold-derived (written by annotators to answer the question):
retrieval over them is easier than over Wikipedia, and every table built on them must say so.
Fact passages get pid `fact:<content digest>`, shared by every question with the same fact.
"""

from __future__ import annotations

from pathlib import Path

from ..records import Passage, Question
from .common import read_json_records, text_digest

FORM = ('{"qid", "question", "answer": true|false, "facts"?: [sentence, ...], '
        '"decomposition"?: [sub-question, ...], "term"?, "description"?, "evidence"?}')
_MAPPED = {"qid", "question", "answer", "decomposition"}
_YES = {"yes", "true"}
_NO = {"no", "false"}


def fact_pid(fact: str) -> str:
    return f"fact:{text_digest(fact.strip())}"


def fact_passages(question: Question) -> list[Passage]:
    """The question's annotated facts as passages (gold-derived stand-in for evidence paragraphs)."""
    return [Passage(pid=fact_pid(f), text=f.strip()) for f in question.meta.get("facts", []) if f.strip()]


def load_strategyqa(path: str | Path, dataset: str = "strategyqa") -> list[Question]:
    questions = []
    for rec in read_json_records(path, FORM, own="strategyqa"):
        answer = rec.need("answer", (bool, str))
        if isinstance(answer, str):
            if answer.strip().lower() not in _YES | _NO:
                raise rec.error("field 'answer' to be true/false (or 'yes'/'no')", got=answer)
            answer = answer.strip().lower() in _YES
        facts = rec.get("facts", list, [])
        decomposition = rec.get("decomposition", list, [])
        if not all(isinstance(x, str) for x in facts + decomposition):
            raise rec.error("'facts' and 'decomposition' to be lists of strings")
        meta = {k: v for k, v in rec.data.items() if k not in _MAPPED}
        meta["answer_bool"] = answer
        meta["facts"] = facts
        q = Question(
            qid=str(rec.need("qid")),
            question=rec.need("question"),
            answers=["yes" if answer else "no"],
            dataset=dataset,
            decomposition=[{"question": s} for s in decomposition],
            meta=meta,
        )
        q.supporting = list(dict.fromkeys(p.pid for p in fact_passages(q)))
        questions.append(q)
    return questions
