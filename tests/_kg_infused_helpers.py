"""Shared fixtures of the KG-Infused RAG tests: a tiny real-format KG and a scripted LLM that
answers each stage's prompt by its final cue line (the embedder is `fakes.BagOfWordsEmbedder`)."""

from __future__ import annotations

import hashlib
import re

from kgrag_lib.kg import KGStore
from kgrag_lib.records import Passage, Triple

TRIPLES = [
    ("Taxi!", "director", "Roy Del Ruth"),
    ("Taxi!", "publication date", "1932"),
    ("Taxi!", "cast member", "James Cagney"),
    ("Roy Del Ruth", "date of death", "April 27, 1961"),
    ("Roy Del Ruth", "place of birth", "Philadelphia"),
    ("Roy Del Ruth", "spouse", "Winnie Lightner"),
    ("Winnie Lightner", "spouse", "Roy Del Ruth"),
    ("Philadelphia", "country", "United States"),
    ("United States", "capital", "Washington, D.C."),
    ("James Cagney", "place of birth", "New York City"),
    ("What Price Hollywood?", "director", "George Cukor"),
    ("George Cukor", "date of death", "January 24, 1983"),
]

PASSAGES = [
    Passage("Taxi!", "Taxi! is a 1932 American drama film directed by Roy Del Ruth and starring James Cagney.", "Taxi!"),
    Passage("Roy Del Ruth", "Roy Del Ruth was an American film director born in Philadelphia; he died in 1961.", "Roy Del Ruth"),
    Passage("George Cukor", "George Cukor was an American film director who died on January 24, 1983.", "George Cukor"),
    Passage("What Price Hollywood?", "What Price Hollywood? is a 1932 film directed by George Cukor.", "What Price Hollywood?"),
    Passage("Philadelphia", "Philadelphia is a city in Pennsylvania, United States.", "Philadelphia"),
    Passage("James Cagney", "James Cagney was an American actor born in New York City.", "James Cagney"),
    Passage("Winnie Lightner", "Winnie Lightner was an American actress married to Roy Del Ruth.", "Winnie Lightner"),
    Passage("New York City", "New York City is the most populous city in the United States.", "New York City"),
]


def tiny_store() -> KGStore:
    store = KGStore.from_triples([Triple(*t) for t in TRIPLES])
    store.set_descriptions({p.title: p.text for p in PASSAGES if store.find_entity(p.title) is not None})
    return store


def cue(messages) -> str:
    return messages[-1]["content"].rstrip().splitlines()[-1].strip()


def candidate_section(prompt: str) -> str:
    if "New facts:" in prompt:
        return prompt.split("New facts:", 1)[1]
    return prompt.split("\nFacts:\n", 1)[1]


def echo_all(messages, params) -> str:
    """Select every candidate triple (worst case for spreading)."""
    return "\n".join(re.findall(r"<[^<>]+>", candidate_section(messages[-1]["content"])))


def stage_responder(select=echo_all, answer="Roy Del Ruth"):
    """A responder for the whole pipeline: one canned output per stage cue."""

    def respond(messages, params) -> str:
        c = cue(messages)
        prompt = messages[-1]["content"]
        if c in ("Chosen facts:", "Chosen new facts:"):
            return select(messages, params)
        if c == "Summary:":
            facts = re.findall(r"<[^<>]+>", prompt)
            return "Summary: " + (" ".join(facts) if facts else "no facts")
        if c == "New query:":
            return "New query: \"Who directed Taxi! and where was he born?\"" if "Background" in prompt else "Taxi! 1932 film director"
        if c == "Note:":
            titles = re.findall(r"^\[\d+\] (.+)$", prompt, re.M)
            return "Note: the documents say Taxi! was directed by Roy Del Ruth. Sources: " + "; ".join(titles)
        if c == "Improved passage:":
            tag = hashlib.md5(prompt.encode()).hexdigest()[:6]
            return f"Taxi! (1932) was directed by Roy Del Ruth, born in Philadelphia. [{tag}]"
        if c == "Answer:":
            return f"Answer: {answer}"
        raise AssertionError(f"unexpected prompt cue {c!r}")

    return respond
