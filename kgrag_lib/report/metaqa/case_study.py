"""Reading MetaQA answers one by one (KG-RAG §4.4): the sub-questions a decomposition made
(Fig. 7's counts) and a Fig. 6 style account of one answer's trace.

Rows are lines of `predictions.jsonl` (the trace layout of
`kgrag_lib.methods.metaqa.stages.new_trace`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ...eval.metrics import hit1


def _trace(row: Mapping[str, Any]) -> Mapping[str, Any]:
    return row.get("trace") or {}


def subquestions(row: Mapping[str, Any]) -> list[str]:
    """The sub-questions the decomposition produced ([] when it produced none or did not run)."""
    dec = _trace(row).get("decomposition") or {}
    return list(dec.get("subquestions") or [])


def subquestion_counts(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per question: dataset, qid and the number of generated sub-questions."""
    return pd.DataFrame([{"dataset": r.get("dataset", ""), "qid": r.get("qid"), "n_subquestions": len(subquestions(r))}
                         for r in rows], columns=["dataset", "qid", "n_subquestions"])


def pick_example(rows: Sequence[Mapping[str, Any]], dataset: str | None = None) -> Mapping[str, Any] | None:
    """A row worth reading as a Fig. 6 example: from `dataset` if there is one, preferring an
    answer that names a gold entity and a decomposition into several sub-questions."""
    pool = [r for r in rows if dataset is None or r.get("dataset") == dataset] or list(rows)
    if not pool:
        return None

    def score(r: Mapping[str, Any]) -> tuple[int, int]:
        named = bool(hit1(r.get("prediction") or "", r.get("answers") or []))
        return (int(named), int(len(subquestions(r)) >= 2))

    return max(pool, key=score)  # max keeps the first of equals: the sample's order decides ties


def _clip(text: Any, limit: int) -> str:
    t = " ".join(str(text or "").split())
    return t if len(t) <= limit else t[:limit].rstrip() + f" … (+{len(t) - limit} characters)"


def trace_text(row: Mapping[str, Any], max_triples: int = 3, max_chars: int = 300) -> str:
    """A Fig. 6 style account of one answer: question, reasoning chain, each sub-question with
    its first triples and sub-answer, and the final answer beside the gold (markdown).
    Answers longer than `max_chars` (a small model can ramble to its token limit) are cut."""
    t = _trace(row)
    dec = t.get("decomposition") or {}
    lines = [f"**Question:** {row.get('question', t.get('question', ''))}"]
    if t.get("topic_entities"):
        lines.append(f"**Question entity:** {', '.join(t['topic_entities'])}")
    if dec.get("reasoning"):
        lines.append(f"**Chain-of-thought:** {dec['reasoning']}")
    for s in t.get("steps") or []:
        i = s.get("index", "?")
        sq = s.get("subquestion", "")
        lines.append(f"**Sub-question {i}:** {sq}")
        if s.get("asked") and s.get("asked") != sq:
            lines.append(f"**Reformulated {i}:** {s['asked']}")
        triples = s.get("triples") or []
        if triples:
            more = f" … ({len(triples)} in all)" if len(triples) > max_triples else ""
            lines.append(f"**Triples {i}:** " + " ".join(triples[:max_triples]) + more)
        lines.append(f"**Sub-answer {i}:** {_clip(s.get('answer', ''), max_chars)}")
    lines.append(f"**Final answer:** {_clip(row.get('prediction', ''), max_chars)}")
    lines.append(f"**Gold:** {' | '.join(row.get('answers') or [])}")
    if t.get("issues"):
        lines.append(f"**Issues:** {'; '.join(t['issues'])}")
    return "\n\n".join(lines)
