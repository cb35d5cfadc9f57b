"""HotpotQA (distractor setting): JSON list (original) or JSONL records.

Each `context` entry `[title, [sentences]]` becomes a Passage with pid = title (titles are
Wikipedia page titles, unique per paragraph); `supporting_facts` `[title, sent_id]` gives
the supporting titles used for Recall@k. AMOR's variant, whose supporting facts carry extra
items after the title, is read the same way.
"""

from __future__ import annotations

from pathlib import Path

from ..records import Passage, Question
from .common import Record, join_sentences, merge_answers, read_json_records

FORM = ('{"_id", "question", "answer", "supporting_facts": [[title, sent_id], ...], '
        '"context": [[title, [sentence, ...]], ...], "type"?, "level"?}')


def parse_context(rec: Record, key: str = "context") -> list[Passage]:
    """`[[title, [sentences]], ...]` -> Passages (shared with 2WikiMultiHopQA, same layout)."""
    out = []
    for item in rec.get(key, list, []):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], list) and all(isinstance(s, str) for s in item[1])):
            raise rec.error(f"each {key!r} item to be [title, [sentence, ...]]", got=repr(item)[:120])
        out.append(Passage(pid=item[0], text=join_sentences(item[1]), title=item[0]))
    return out


def parse_supporting_facts(rec: Record) -> tuple[list[str], list[list]]:
    """Supporting titles (first-seen order) and the `[title, sentence ids]` pairs."""
    titles: list[str] = []
    facts: list[list] = []
    for item in rec.get("supporting_facts", list, []):
        if not (isinstance(item, list) and len(item) >= 2 and isinstance(item[0], str)):
            raise rec.error("each 'supporting_facts' item to be [title, sent_id]", got=repr(item)[:120])
        if item[0] not in titles:
            titles.append(item[0])
        facts.append([item[0], item[1]])
    return titles, facts


def load_hotpotqa(path: str | Path, dataset: str = "hotpotqa") -> list[Question]:
    questions = []
    for rec in read_json_records(path, FORM, own="hotpotqa"):
        context = parse_context(rec)
        titles, facts = parse_supporting_facts(rec)
        ctx_titles = {p.pid for p in context}
        questions.append(Question(
            qid=str(rec.need("_id")),
            question=rec.need("question"),
            answers=merge_answers(rec.need("answer")),
            dataset=dataset,
            supporting=titles,
            context=context,
            meta={
                "type": rec.get("type"),
                "level": rec.get("level"),
                "supporting_facts": facts,
                # AMOR's 500-question file ships retrieved contexts that often lack a gold page.
                "gold_in_context": all(t in ctx_titles for t in titles),
            },
        ))
    return questions
