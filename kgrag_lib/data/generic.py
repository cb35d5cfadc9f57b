"""kgrag's own question format: one JSON object per line, one schema for every dataset that has no layout of
its own, so such a dataset is one row of the registry (`registry.jsonl_dataset`) and no loader code.

A record is `{"id", "question", "answers": [...], "context"?: [{"id"?, "title"?, "text"}, ...],
"supporting"?: [passage id, ...], "meta"?: {...}}`. `answers` holds the gold answer first, then its aliases;
`context` the paragraphs shipped with the question (pooled into the corpus of a `pooled` dataset); a
paragraph's id is its `id`, else its `title`, else `<question id>#<position>`. Any other field is refused,
naming it, so a misspelt `answer` never loads as a question without golds. (FlashRAG reads every dataset
through one such schema; its `golden_answers`/`metadata` are our `answers`/`meta`.)
"""

from __future__ import annotations

from pathlib import Path

from ..records import Passage, Question
from .common import Record, read_json_records

FORM = ('{"id", "question", "answers": [answer, alias, ...], "context"?: [{"id"?, "title"?, "text"}, ...], '
        '"supporting"?: [passage id, ...], "meta"?: {...}}')
FIELDS = ("id", "question", "answers", "context", "supporting", "meta")
_PASSAGE_FIELDS = ("id", "title", "text")


def _strings(rec: Record, key: str, *, required: bool) -> list[str]:
    """A list of non-empty strings (answers, supporting ids); `required`: at least one."""
    value = rec.need(key, list) if required else rec.get(key, list, [])
    if required and not value:
        raise rec.error(f"field {key!r} to hold at least one string", got="[]")
    bad = next((v for v in value if not isinstance(v, str) or not v.strip()), None)
    if bad is not None:
        raise rec.error(f"every item of {key!r} to be a non-empty string", got=repr(bad)[:120])
    return list(value)


def _context(rec: Record, qid: str) -> list[Passage]:
    out = []
    for i, item in enumerate(rec.get("context", list, [])):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise rec.error(f"'context' item {i} to be an object with a non-empty 'text'", got=repr(item)[:120])
        extra = sorted(set(item) - set(_PASSAGE_FIELDS))
        if extra:
            raise rec.error(f"'context' item {i} to have only the fields {', '.join(_PASSAGE_FIELDS)}",
                            got=f"also {', '.join(map(repr, extra))}")
        for key in ("id", "title"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise rec.error(f"'context' item {i}: field {key!r} to be a string", got=repr(item[key])[:120])
        title = item.get("title") or ""
        out.append(Passage(item.get("id") or title or f"{qid}#{i}", item["text"], title))
    return out


def load_jsonl_questions(path: str | Path, dataset: str) -> list[Question]:
    """The questions of a file in this module's format; a bad record is a DataFormatError naming the file,
    the line and the expected form."""
    out = []
    for rec in read_json_records(path, FORM, own=dataset):
        extra = sorted(set(rec.data) - set(FIELDS))
        if extra:
            raise rec.error(f"only the fields {', '.join(FIELDS)}", got=f"also {', '.join(map(repr, extra))}")
        qid = rec.need("id", (str, int))
        qid = str(qid)
        if not qid.strip():
            raise rec.error("field 'id' to be a non-empty string or an integer", got=repr(qid))
        context = _context(rec, qid)
        supporting = _strings(rec, "supporting", required=False)
        unknown = sorted(set(supporting) - {p.pid for p in context}) if context else []
        if unknown:
            raise rec.error("every 'supporting' id to name a passage of its 'context'", got=repr(unknown)[:120])
        out.append(Question(qid=qid, question=rec.need("question"), answers=_strings(rec, "answers", required=True),
                            dataset=dataset, supporting=supporting, context=context,
                            meta=dict(rec.get("meta", dict, {}))))
    return out
