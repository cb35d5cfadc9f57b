"""2WikiMultiHopQA: question files (JSONL or JSON list, context optional) and a `{title, text}` corpus.

Gold `evidences` `[[s, r, o], ...]` become `Question.evidence` Triples (the Wikidata facts the
question was generated from). Fields the loader does not map (type, entity_ids, evidences_id,
answer_id, explanation, ...) are kept unchanged in `Question.meta`.

The official v1.1 scorer also accepts every alias of the answer's Wikidata id: the ID-enhanced
release ships `id_aliases.json` (one JSON object per line, `{"Q_id", "aliases", "demonyms"}`) and
each question an `answer_id`. Given that file (`aliases_path`), a question's golds are its answer,
its own alias fields, and the aliases and demonyms of its answer_id; without it 2Wiki EM/F1 are a
lower bound (the report says so).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataFormatError
from ..records import Passage, Question, Triple
from .common import merge_answers, read_json_records
from .hotpotqa import parse_context, parse_supporting_facts

FORM = ('{"_id", "question", "answer", "supporting_facts"?: [[title, sent_id], ...], '
        '"evidences"?: [[subject, relation, object], ...], "context"?: [[title, [sentence, ...]], ...], '
        '"answer_aliases"?: [...], "qa_pairs"?: [{question, answer}, ...]}')
CORPUS_FORM = '{"title", "text"}'
ALIASES_FORM = 'one JSON object per line: {"Q_id": "Q...", "aliases": [str, ...], "demonyms"?: [str, ...]}'
_MAPPED = {"_id", "question", "answer", "answer_aliases", "aliases", "context", "supporting_facts", "evidences",
           "qa_pairs"}


def load_id_aliases(path: str | Path) -> dict[str, list[str]]:
    """Wikidata id -> its aliases then demonyms, from the ID-enhanced release's id_aliases.json."""
    import json

    path = Path(path)
    out: dict[str, list[str]] = {}
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(path, i, ALIASES_FORM, f"{line.strip()[:80]} ({exc.msg})") from None
            names = [*(rec.get("aliases") or []), *(rec.get("demonyms") or [])] if isinstance(rec, dict) else None
            if not (isinstance(rec, dict) and isinstance(rec.get("Q_id"), str)
                    and isinstance(rec.get("aliases", []), list) and isinstance(rec.get("demonyms", []), list)
                    and all(isinstance(a, str) for a in names)):
                raise DataFormatError(path, i, ALIASES_FORM, line.strip()[:120])
            out.setdefault(rec["Q_id"], []).extend(names)
    if not out:
        raise DataFormatError(path, None, ALIASES_FORM, "no records")
    return out


def load_2wiki(path: str | Path, dataset: str = "2wiki", aliases_path: str | Path | None = None) -> list[Question]:
    id_aliases = load_id_aliases(aliases_path) if aliases_path else {}
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
        answer_id = rec.data.get("answer_id")
        if id_aliases and isinstance(answer_id, str):
            aliases = [*aliases, *id_aliases.get(answer_id, [])]
        decomposition = []
        for pair in rec.get("qa_pairs", list, []):
            if not (isinstance(pair, dict) and "question" in pair):
                raise rec.error("each 'qa_pairs' item to be {question, answer}", got=repr(pair)[:120])
            decomposition.append({"question": pair["question"], "answer": pair.get("answer")})
        meta = {k: v for k, v in rec.data.items() if k not in _MAPPED}
        meta["supporting_facts"] = facts
        meta["has_context"] = "context" in rec.data
        if aliases_path:
            meta["id_aliases"] = str(aliases_path)
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
