"""The stages of KG-Infused RAG (§3.4-3.6) and its baselines, one small function each.

Every function takes what the stage needs and returns its output, so a notebook can run and
show a single stage; `pipeline.py` only chains them. LLM stages send one request each,
rendered from `prompts.py`, so equal inputs give byte-identical requests (cache hits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from ...llm.base import Generator
from ...llm.parsing import clean_answer
from ...records import Passage
from ...retrieval import encode_queries
from . import prompts


class SearchIndex(Protocol):
    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]: ...


# ---- output clean-up -----------------------------------------------------------------
_LEAD_LABEL = re.compile(
    r"^\s*(?:#+\s*)?(?:\*\*)?(?:note|summary|improved passage|enhanced passage|new query|query|answer)"
    r"(?:\*\*)?\s*:\s*(?:\*\*)?\s*", re.I)


def clean_text(output: str) -> str:
    """Drop a leading label the model echoes ('Note:', '### Summary:') and outer whitespace."""
    text = (output or "").strip()
    return _LEAD_LABEL.sub("", text, count=1).strip()


def clean_query(output: str) -> str:
    """The first non-empty line, without a label or surrounding quotes."""
    for line in clean_text(output).splitlines():
        line = _LEAD_LABEL.sub("", line.strip(), count=1).strip().strip("\"'`*").strip()
        line = _LEAD_LABEL.sub("", line, count=1).strip().strip("\"'`*").strip()
        if line:
            return line
    return ""


# ---- dense retrieval -----------------------------------------------------------------
def embed_query(embedder: Any, text: str) -> np.ndarray:
    """(1, dim) float32 query vector with the same embedder as the passages / descriptions (through
    its query side: a retriever's query prompt, where it has one)."""
    return encode_queries(embedder, [text])


def top_k(index: SearchIndex, qvec: np.ndarray, k: int) -> list[tuple[int, float]]:
    """(row, score) pairs, best first; padding ids (-1) of approximate indexes are dropped."""
    if k <= 0:
        return []
    scores, ids = index.search(qvec, k)
    return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if int(i) >= 0]


def merge_dual(ids_q: Sequence[int], ids_q2: Sequence[int], k_p: int) -> tuple[list[int], list[int]]:
    """Appendix C.2: the top ceil(k_p/2) of q, then the best floor(k_p/2) of q' not already
    taken (q' is searched k_p deep, so enough survive). Returns (from_q, from_q2)."""
    n_q = (k_p + 1) // 2
    from_q = list(dict.fromkeys(ids_q))[:n_q]
    taken = set(from_q)
    from_q2: list[int] = []
    for i in ids_q2:
        if len(from_q2) >= k_p - n_q:
            break
        if i not in taken:
            taken.add(i)
            from_q2.append(i)
    return from_q, from_q2


@dataclass
class Retrieved:
    """Passages handed to the note stage, and where each came from."""

    passages: list[Passage]
    rows: list[int]
    scores: list[float]
    sources: list[str]                     # "q" or "q'" per passage
    skipped_duplicates: list[int] = field(default_factory=list)  # q' hits dropped as already taken

    def to_trace(self) -> list[dict[str, Any]]:
        return [{"pid": p.pid, "title": p.title, "score": round(s, 4), "from": src}
                for p, s, src in zip(self.passages, self.scores, self.sources)]


def retrieve_single(passages: Sequence[Passage], index: SearchIndex, qvec: np.ndarray, k: int) -> Retrieved:
    hits = top_k(index, qvec, k)
    return Retrieved([passages[i] for i, _ in hits], [i for i, _ in hits], [s for _, s in hits], ["q"] * len(hits))


def retrieve_dual(passages: Sequence[Passage], index: SearchIndex, qvec: np.ndarray, q2vec: np.ndarray,
                  k_p: int) -> Retrieved:
    """Dual-query retrieval with the de-duplication rule of Appendix C.2 (eq. 8)."""
    hits_q = top_k(index, qvec, (k_p + 1) // 2)
    hits_q2 = top_k(index, q2vec, k_p)
    from_q, from_q2 = merge_dual([i for i, _ in hits_q], [i for i, _ in hits_q2], k_p)
    score = {**{i: s for i, s in hits_q2}, **{i: s for i, s in hits_q}}
    q_set = set(from_q)
    rows = from_q + from_q2
    return Retrieved(
        passages=[passages[i] for i in rows], rows=rows, scores=[score[i] for i in rows],
        sources=["q"] * len(from_q) + ["q'"] * len(from_q2),
        skipped_duplicates=[i for i, _ in hits_q2 if i in q_set],
    )


# ---- LLM stages -----------------------------------------------------------------------
def answer_question(llm: Generator, params: Any, question: str, context: str | None,
                    yes_no: bool = False) -> tuple[str, str]:
    """Tables 8/9: the final answer, from the question alone (NoR) or from a (fact-enhanced)
    passage note. Returns (raw output, cleaned answer)."""
    style = prompts.answer_style(yes_no)
    if context is None:
        text = prompts.NO_RETRIEVAL.format(style=style, question=question)
    else:
        text = prompts.WITH_RETRIEVAL.format(style=style, passages=context, question=question)
    raw = llm.generate(prompts.user(text), params)
    return raw, clean_answer(raw, yes_no=yes_no)


def write_note(llm: Generator, params: Any, question: str, passages: Sequence[Passage]) -> str:
    """Table 11 / eq. 9: a query-focused note over the retrieved passages."""
    text = prompts.PASSAGE_NOTE.format(question=question, passages=prompts.format_passages(passages))
    return clean_text(llm.generate(prompts.user(text), params))


def expand_query_vanilla(llm: Generator, params: Any, question: str) -> str:
    """Table 10: q' from the question alone (Vanilla QE)."""
    return clean_query(llm.generate(prompts.user(prompts.VANILLA_QE.format(question=question)), params))


def summarize_subgraph(llm: Generator, params: Any, question: str, triple_lines: Sequence[str]) -> str:
    """Table 14: the accumulated subgraph G_act as a paragraph S_G (sent even when G_act is
    empty, as the paper's code does: later stages then see a summary of no facts)."""
    text = prompts.SUBGRAPH_SUMMARY.format(question=question, triples=prompts.format_triple_lines(triple_lines))
    return clean_text(llm.generate(prompts.user(text), params))


def expand_query_kg(llm: Generator, params: Any, question: str, summary: str) -> str:
    """Table 15 / eq. 7: q' from the question and the subgraph summary."""
    text = prompts.KG_QE.format(question=question, summary=summary or prompts.NO_FACTS)
    return clean_query(llm.generate(prompts.user(text), params))


def augment_request(question: str, note: str, summary: str) -> prompts.Messages:
    """The messages of the eq. 10 request: also the prompt x of the DPO pairs (§3.7), so
    the training data and evaluation runs share one rendering."""
    text = prompts.KNOWLEDGE_AUGMENTATION.format(question=question, passage=note or prompts.NO_FACTS,
                                           summary=summary or prompts.NO_FACTS)
    return prompts.user(text)


def augment_note(llm: Generator, params: Any, question: str, note: str, summary: str) -> str:
    """Table 16 / eq. 10: the passage note enhanced with the subgraph summary."""
    return clean_text(llm.generate(augment_request(question, note, summary), params))
