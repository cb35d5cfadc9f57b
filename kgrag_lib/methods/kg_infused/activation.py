"""LLM-guided spreading activation over a KG (KG-Infused RAG §3.4), as pure logic.

Round i shows the LLM the (sampled) 1-hop triples of the active entities E^i and keeps the
ones it selects; the Activation Memory accumulates the selected subgraph G_act and the
activated entities E_act; the next active set is the selected triples' tail entities not yet
activated (eq. 6), capped per round. The loop stops after `rounds` rounds or when no new
entity remains.

Everything a round shows the LLM depends only on the question, the seeds and the earlier
rounds, never on the total number of rounds: the per-entity triple sample is seeded by
(seed, entity name), so a (k+1)-round run sends exactly the k-round run's requests first and
the LLM cache serves them. The graph bookkeeping (sample, activated set, eq. 6 step) is in
`kgrag_lib.kg.traverse`; this module adds the prompts and the parsing of the LLM's selection.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from ...kg.traverse import Frontier, GraphView, sample_out_triples
from ...llm.base import Generator
from ...records import Triple
from . import prompts

STOP_MAX_ROUNDS = "max_rounds"
STOP_NO_NEW_ENTITIES = "no_new_entities"
STOP_NO_CANDIDATES = "no_candidate_triples"


# ---- parsing the selection ----------------------------------------------------------
_LOOSE = re.compile(r"[\W_]+", re.UNICODE)
_BULLET = re.compile(r"^\s*(?:[-*\u2022+>]|\(?\d{1,3}[.):]|\[\d{1,3}\])\s*")
_CHUNK = re.compile(r"<([^<>]*)>|\(([^()]*)\)|\[([^\[\]]*)\]")


def loose_key(*parts: str) -> str:
    """Case-, space- and punctuation-blind key: `<A | b | C>`, `A, b, C` and `a b c` agree."""
    return _LOOSE.sub("", "".join(parts).casefold())


def match_selected(output: str, candidates: Sequence[tuple[int, Triple]]) -> tuple[list[int], list[str]]:
    """Candidate triple ids the output names, in order of appearance, plus fact-like pieces
    of the output that name no candidate (invented or garbled facts, kept for the trace).

    Tolerates bullets, numbering, missing or extra brackets, changed case, commas for bars and
    prose around the facts; a fact not among the candidates is never accepted (the prompt
    forbids new facts, and we enforce it).
    """
    index: dict[str, list[int]] = {}
    for tid, t in candidates:
        index.setdefault(loose_key(t.s, t.r, t.o), []).append(tid)
    found: list[int] = []
    seen: set[int] = set()
    unmatched: list[str] = []

    def take(piece: str) -> bool:
        ids = index.get(loose_key(piece))
        if not ids:
            return False
        for tid in ids:
            if tid not in seen:
                seen.add(tid)
                found.append(tid)
        return True

    for line in (output or "").splitlines():
        body = _BULLET.sub("", line).strip()
        if not body:
            continue
        hit = angled = False
        for m in _CHUNK.finditer(body):
            piece = next(g for g in m.groups() if g is not None)
            if take(piece):
                hit = True
            elif m.group(1) is not None and piece.strip():
                angled = True
                unmatched.append(piece.strip())
        if not hit and not take(body) and not angled and ("|" in body or body.count(",") >= 2 or "->" in body):
            unmatched.append(body)
    try:  # looser formats the line scan misses: JSON lists, (s, r, o) tuples
        from ...llm.parsing import parse_triples
    except ImportError:  # pragma: no cover - the llm package is part of the project
        parse_triples = None
    if parse_triples is not None:
        for t in parse_triples(output or ""):
            key = loose_key(t.s, t.r, t.o)
            if key in index:
                take(t.s + t.r + t.o)
                unmatched = [u for u in unmatched if loose_key(u) != key]
    return found, unmatched


# ---- the loop -----------------------------------------------------------------------
@dataclass
class RoundRecord:
    """What one activation round saw and did (all names, for the trace)."""

    round: int
    stage: str                      # "triple_selection" (round 1) or "triple_update"
    active_entities: list[str]      # E^i
    n_candidates: int               # triples shown to the LLM
    raw_output: str
    selected: list[str]             # newly selected triples, `<s | r | o>`
    unmatched: list[str]            # fact-like output naming no candidate
    next_entities: list[str]        # E^{i+1}
    leaves_skipped: list[str] = field(default_factory=list)   # new tails with no outgoing triple
    capped: list[str] = field(default_factory=list)           # new entities beyond the per-round cap


@dataclass
class ActivationResult:
    """Activation Memory M = (G_act, E_act) after the loop, and the per-round records."""

    seeds: list[int]
    triple_ids: list[int]            # G_act, in selection order
    entity_ids: list[int]            # E_act, in activation order
    round_triples: list[list[int]]   # newly selected triple ids per round
    rounds: list[RoundRecord]
    stop_reason: str

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    def subgraph_after(self, k: int) -> list[int]:
        """G_act as it stood after round k (what a k-round run would have)."""
        return [t for r in self.round_triples[:k] for t in r]

    def to_trace(self, kg: GraphView) -> dict[str, Any]:
        return {
            "seed_entities": [kg.entity_name(e) for e in self.seeds],
            "activated_entities": [kg.entity_name(e) for e in self.entity_ids],
            "subgraph": kg.verbalize(self.triple_ids),
            "rounds": [asdict(r) for r in self.rounds],
            "stop_reason": self.stop_reason,
        }


@dataclass(frozen=True)
class ActivationSettings:
    rounds: int = 2
    max_entities_per_round: int = 10
    max_triples_per_entity: int = 50
    seed: int = 42


def spread_activation(
    kg: GraphView,
    llm: Generator,
    question: str,
    seeds: Sequence[int],
    settings: ActivationSettings,
    params: Any = None,
) -> ActivationResult:
    """Run up to `settings.rounds` rounds of LLM-guided activation from `seeds` (E^0)."""
    frontier = Frontier(kg)
    selected: list[int] = []
    sel_set: set[int] = set()
    round_triples: list[list[int]] = []
    records: list[RoundRecord] = []
    active = list(dict.fromkeys(int(e) for e in seeds))
    stop = STOP_MAX_ROUNDS
    for i in range(1, settings.rounds + 1):
        if not active:
            stop = STOP_NO_NEW_ENTITIES
            break
        groups: list[tuple[str, list[str]]] = []
        candidates: list[tuple[int, Triple]] = []
        for e in active:
            ids = [int(t) for t in sample_out_triples(kg, e, settings.max_triples_per_entity, settings.seed)
                   if int(t) not in sel_set]
            if not ids:
                continue
            triples = [kg.triple(t) for t in ids]
            groups.append((kg.entity_name(e), [t.verbalize() for t in triples]))
            candidates.extend(zip(ids, triples))
        frontier.activate(active)  # eq. 5, entity half: E^i joins E_act whatever is selected
        if not candidates:
            stop = STOP_NO_CANDIDATES
            break
        if i == 1:
            stage = "triple_selection"
            text = prompts.TRIPLE_SELECTION.format(question=question, triples=prompts.format_grouped_triples(groups))
        else:
            stage = "triple_update"
            text = prompts.TRIPLE_UPDATE.format(
                question=question,
                previous=prompts.format_triple_lines(kg.verbalize(selected)),
                new=prompts.format_grouped_triples(groups),
            )
        output = llm.generate(prompts.user(text), params)
        picked, unmatched = match_selected(output, candidates)
        new = [t for t in picked if t not in sel_set]
        for t in new:  # eq. 5, triple half
            sel_set.add(t)
            selected.append(t)
        round_triples.append(new)
        step = frontier.next_from_tails(new, settings.max_entities_per_round)  # eq. 6
        records.append(RoundRecord(
            round=i, stage=stage, active_entities=[kg.entity_name(e) for e in active],
            n_candidates=len(candidates), raw_output=output, selected=kg.verbalize(new),
            unmatched=unmatched, next_entities=[kg.entity_name(e) for e in step.entities],
            leaves_skipped=list(dict.fromkeys(kg.entity_name(e) for e in step.leaves)),  # homonyms once
            capped=[kg.entity_name(e) for e in step.capped],
        ))
        active = step.entities
        if not active:
            stop = STOP_NO_NEW_ENTITIES
            break
    return ActivationResult(
        seeds=[int(e) for e in seeds], triple_ids=selected, entity_ids=frontier.activated,
        round_triples=round_triples, rounds=records, stop_reason=stop,
    )
