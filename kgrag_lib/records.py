"""The small record types every loader yields and every method consumes.

One shape for all datasets keeps methods dataset-agnostic: a method sees a `Question`,
a corpus of `Passage`s and a KG built from `Triple`s, whatever the source format was.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Triple:
    """A (subject, relation, object) fact, by surface name or id."""

    s: str
    r: str
    o: str

    def verbalize(self) -> str:
        """The `<s | r | o>` form used in every prompt (KG-Infused RAG §3, KAPING)."""
        return f"<{self.s} | {self.r} | {self.o}>"


@dataclass
class Passage:
    """A retrievable text unit (a Wikipedia passage, a context paragraph, a fact)."""

    pid: str
    text: str
    title: str = ""

    def as_text(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass
class Question:
    """One benchmark question with every gold field a metric or an oracle may need.

    `answers` holds the gold answer first, then its aliases. `topic_entities` are the
    entities the dataset marks in the question (MetaQA's `[brackets]`). `supporting`
    lists the ids of gold supporting passages (for Recall@k). `context` holds the
    passages shipped with the question (distractor settings), and `evidence` gold triples.
    """

    qid: str
    question: str
    answers: list[str]
    dataset: str = ""
    topic_entities: list[str] = field(default_factory=list)
    supporting: list[str] = field(default_factory=list)
    context: list[Passage] = field(default_factory=list)
    evidence: list[Triple] = field(default_factory=list)
    decomposition: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Prediction:
    """A method's answer to one question and the readable trace of how it got there."""

    qid: str
    question: str
    prediction: str
    answers: list[str]
    method: str
    trace: dict[str, Any] = field(default_factory=dict)
    failed: bool = False
    error: str = ""
    cost: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
