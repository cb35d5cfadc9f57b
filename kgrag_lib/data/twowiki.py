"""2WikiMultiHopQA: question files (JSONL or JSON list, context optional) and a `{title, text}` corpus.

Gold `evidences` `[[s, r, o], ...]` become `Question.evidence` Triples (the Wikidata facts the
question was generated from). Fields the loader does not map (type, entity_ids, evidences_id,
answer_id, explanation, ...) are kept unchanged in `Question.meta`.
"""

from __future__ import annotations

from pathlib import Path

from ..records import Passage, Question, Triple
from .common import merge_answers, read_json_records
from .hotpotqa import parse_context, parse_supporting_facts

FORM = ('{"_id", "question", "answer", "supporting_facts"?: [[title, sent_id], ...], '
        '"evidences"?: [[subject, relation, object], ...], "context"?: [[title, [sentence, ...]], ...], '
        '"answer_aliases"?: [...], "qa_pairs"?: [{question, answer}, ...]}')
CORPUS_FORM = '{"title", "text"}'
_MAPPED = {"_id", "question", "answer", "answer_aliases", "aliases", "context", "supporting_facts", "evidences",
           "qa_pairs"}


def load_2wiki(path: str | Path, dataset: str = "2wiki") -> list[Question]:
    questions = []
    for rec in read_json_records(path, FORM, own="2wiki"):
        context = parse_context(rec)
        titles, facts = parse_supporting_facts(rec)
        evidence = []
        for item in rec.get("evidences", list, []):
            if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)):
                raise rec.error("each 'evidences' item to be [subject, relation, object]", got=repr(item)[:120])
            evidence.append(Triple(*item))
        aliases = rec.get("answer_aliases", list, None) or rec.get("aliases", list, [])
        decomposition = []
        for pair in rec.get("qa_pairs", list, []):
            if not (isinstance(pair, dict) and "question" in pair):
                raise rec.error("each 'qa_pairs' item to be {question, answer}", got=repr(pair)[:120])
            decomposition.append({"question": pair["question"], "answer": pair.get("answer")})
        meta = {k: v for k, v in rec.data.items() if k not in _MAPPED}
        meta["supporting_facts"] = facts
        meta["has_context"] = "context" in rec.data
        if context:
            ctx = {p.pid for p in context}
            meta["gold_in_context"] = all(t in ctx for t in titles)
        questions.append(Question(
            qid=str(rec.need("_id")),
            question=rec.need("question"),
            answers=merge_answers(rec.need("answer"), aliases),
            dataset=dataset,
            supporting=titles,
            context=context,
            evidence=evidence,
            decomposition=decomposition,
            meta=meta,
        ))
    return questions


def load_2wiki_corpus(path: str | Path) -> list[Passage]:
    """HippoRAG's 2Wiki passage corpus (`[{title, text}, ...]`); pid = title."""
    out = []
    seen: set[str] = set()
    for rec in read_json_records(path, CORPUS_FORM):
        title, text = rec.need("title"), rec.need("text")
        if title in seen:
            raise rec.error("unique titles (the title is the passage id)", got=title)
        seen.add(title)
        out.append(Passage(pid=title, text=text, title=title))
    return out
