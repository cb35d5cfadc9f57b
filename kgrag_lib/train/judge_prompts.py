"""The judge's instruction for DPO data (KG-Infused RAG §3.7, Appendix D.2 Table 17), in our own
words: the inputs of the knowledge-augmentation stage and its candidate outputs go in, a JSON
object naming the best and the worst candidate comes out.

The template has no run-dependent parts, so the same inputs and candidates render the same
request and a rerun is served by the LLM cache.
"""

from __future__ import annotations

import json
from typing import Sequence

from ..methods.kg_infused.prompts import NO_FACTS, Messages

JUDGE = """You will compare several rewritten versions of a passage. Each version was written to answer the same request: improve the retrieved passage by working in useful details from the facts, so that it helps answer the question. Pick the best version and the worst version.

How to judge:
1. Judge only the rewritten passage itself; disregard introductory remarks, explanations and layout that do not change what the passage says.
2. A better version:
   - works the facts into the passage well (integration);
   - reads as one logical, well-ordered, fluent text (coherence);
   - helps answer the question directly (relevance);
   - states the facts correctly, inventing or distorting nothing (accuracy);
   - keeps the meaning of the retrieved passage while enriching it (preservation).
3. Versions that carry essentially the same information count as equally good, even when the wording differs a little.
4. If all versions are about equally good, or you cannot find a clear difference, give the same id as best and as worst.

Question:
{question}

Retrieved passage:
{passage}

Facts:
{facts}

Rewritten versions:
{candidates}

Reply with a JSON object and nothing else, in this form:
{{"best_id": <id of the best version>, "worst_id": <id of the worst version>}}"""


def format_candidates(ids: Sequence[int], texts: Sequence[str]) -> str:
    """Each candidate under its id, as `[id]` then the text; blank line between candidates."""
    return "\n\n".join(f"[{i}]\n{t.strip()}" for i, t in zip(ids, texts))


def judge_request(question: str, passage: str, facts: str, ids: Sequence[int], texts: Sequence[str]) -> Messages:
    """One user turn asking for the best and worst of `texts` (shown under `ids`)."""
    text = JUDGE.format(question=question, passage=passage or NO_FACTS, facts=facts or NO_FACTS,
                        candidates=format_candidates(ids, texts))
    return [{"role": "user", "content": text}]


def verdict_schema(ids: Sequence[int]) -> str:
    """The JSON Schema of a verdict (for backends that constrain decoding): both ids among `ids`."""
    choice = {"type": "integer", "enum": [int(i) for i in ids]}
    return json.dumps({"type": "object", "properties": {"best_id": choice, "worst_id": choice},
                       "required": ["best_id", "worst_id"], "additionalProperties": False}, sort_keys=True)
