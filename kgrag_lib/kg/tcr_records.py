"""TCR-QF's extraction output (§3.1, appendix "Triples Extraction Prompt"): bracketed records,
entities first, then relations between registered entity ids, each relation with a quote.

    [entity | E1 | Person | "Ada Lovelace" | English mathematician who wrote the first program]
    [relation | E1 | collaborated with | E2 | "she worked with Charles Babbage"]

The prompts are our own wording of the appendix's rules (sequential EIDs from E1, exact names,
no pronouns as entities, specific natural types, relations only between listed EIDs, each
backed by an exact quote). `parse_records` is strict: every line that looks like a record and
breaks a rule is rejected with its reason and counted, never guessed at; lines that are not
records (headings, prose) are counted as ignored. `GRAMMAR` constrains decoding to the format
where the backend can (llama.cpp); its bounds stop a small model's loops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..llm.base import Messages

PROMPT_VERSION = "tcr2"
MAX_ENTITIES, MAX_RELATIONS = 12, 15
EID = re.compile(r"^E([1-9][0-9]{0,2})$")

# GBNF: at least one entity, then relations; every field bounded (names 60, descriptions 120,
# relation labels 40, quotes 160 characters), so a looping model ends with valid records. Tight on
# purpose: the 0.5B model fills every list to its bound, and grammar sampling over Qwen's 151k-token
# vocabulary runs at about 11 tokens/s on 2 cores (a 1,024-token output took ~95 s).
GRAMMAR = r'''
root ::= entity{1,%d} relation{0,%d}
entity ::= "[entity | E" num " | " type " | \"" name "\" | " desc "]\n"
relation ::= "[relation | E" num " | " label " | E" num " | \"" quote "\"]\n"
num ::= [1-9] [0-9]{0,1}
type ::= [A-Za-z] [A-Za-z ]{0,29}
name ::= [^"\n|\]\[]{1,60}
desc ::= [^\n|\]\[]{1,120}
label ::= [^\n|\]\["]{1,40}
quote ::= [^"\n\]\[]{1,160}
''' % (MAX_ENTITIES, MAX_RELATIONS)

_SYSTEM = ("You build knowledge graphs from text. You copy names exactly as the text writes them, invent "
           "nothing, and answer only with records in the format you are given.")

_RULES = """Write the entities first, one record per line:
[entity | EID | Type | "Entity Name" | Description]
- number the entities E1, E2, E3, ... in order, with no gaps and no repeats
- copy each name exactly as the text writes it (same capitals); when the text refers to one
  entity in several ways, write one record for it; never use a pronoun or a phrase like
  "the film" as a name
- Type is a specific, natural category (for example Person, Film, City, Football Club,
  Political Party, Year, Award), not a code like PRODUCT
- Description says in a few words what the entity is and what role it plays in the text

Then the relations, one record per line:
[relation | SourceEID | relation type | TargetEID | "exact quote"]
- SourceEID and TargetEID must be EIDs you listed above; never make up a new EID here
- the relation type is a short phrase such as "directed by" or "born in"
- the quote is the exact words of the text that state the relation
- write only relations the text states directly

Write nothing but these records."""

_EXTRACT_TASK = """{rules}

Text:
\"{text}\"

Records:"""

_FEEDBACK_TASK = """We need this piece of information: {need}

Below are passages that may contain it. Extract, as records, the entities and relations of the
passages that give this information (and the facts needed to understand it).

{rules}

Passages:
{passages}

Records:"""

_ANSWER_TASK = """Below is an answer a model wrote to the question "{question}". Extract, as records,
the entities and relations the answer states (whether or not they are true).

{rules}

Answer:
\"{answer}\"

Records:"""


def extraction_messages(text: str) -> Messages:
    """ExtractTriples(C_i): the records of one chunk (§3.1)."""
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _EXTRACT_TASK.format(rules=_RULES, text=text)}]


def feedback_messages(need: str, passages: list[str]) -> Messages:
    """ExtractTriples(k_q, D_relevant): records that answer one missing-knowledge question (§3.4)."""
    shown = "\n\n".join(f"[{i}] {p}" for i, p in enumerate(passages, 1))
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _FEEDBACK_TASK.format(need=need, rules=_RULES, passages=shown)}]


def answer_messages(question: str, answer: str) -> Messages:
    """TCR-AF's extraction: records stated by the model's own answer (§4.2, answer-driven feedback)."""
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _ANSWER_TASK.format(question=question, answer=answer, rules=_RULES)}]


@dataclass
class Extracted:
    """One output's accepted records and what was rejected, with reasons."""

    entities: dict[str, dict[str, str]] = field(default_factory=dict)  # EID -> {type, name, description}
    relations: list[dict[str, str]] = field(default_factory=list)  # {source, relation, target, quote} (EIDs)
    rejected: list[dict[str, str]] = field(default_factory=list)  # {"record", "reason"}
    ignored_lines: int = 0

    def counts(self) -> dict[str, int]:
        reasons: dict[str, int] = {}
        for r in self.rejected:
            key = r["reason"].split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        return {"entities": len(self.entities), "relations": len(self.relations),
                "rejected": len(self.rejected), "ignored_lines": self.ignored_lines, **{f"rejected_{k}": v
                                                                                       for k, v in reasons.items()}}

    def to_dict(self) -> dict:
        return {"entities": self.entities, "relations": self.relations, "rejected": self.rejected,
                "ignored_lines": self.ignored_lines}


_RECORD = re.compile(r"\[\s*(entity|relation)\s*\|(.*)\]\s*$", re.IGNORECASE)
_QUOTED = re.compile(r'^"(.*)"$', re.DOTALL)


def _unquote(value: str) -> str | None:
    m = _QUOTED.match(value.strip())
    return m.group(1).strip() if m else None


def parse_records(text: str) -> Extracted:
    """The records of one output, validated line by line (see the module doc).

    Rejected (with a reason): a record with the wrong number of fields, an EID not of the form
    E<n>, an EID listed twice, an entity without a quoted name, a relation whose source or
    target EID is not a listed entity ("unregistered EID", the paper's first rule), a relation
    of an entity with itself, a relation without a quoted quote or type, an entity record after
    the first relation record ("entity after relations")."""
    out = Extracted()
    seen_relation = False
    pending: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _RECORD.search(line)
        if m is None:
            out.ignored_lines += 1
            continue
        kind = m.group(1).lower()
        parts = [p.strip() for p in m.group(2).split("|")]
        shown = line[:300]
        if kind == "entity":
            if len(parts) < 4:
                out.rejected.append({"record": shown, "reason": "malformed: an entity needs EID, type, name, description"})
                continue
            eid, etype, name, desc = parts[0], parts[1], _unquote(parts[2]), " | ".join(parts[3:]).strip()
            if seen_relation:
                out.rejected.append({"record": shown, "reason": "entity after relations: entities come first"})
            elif not EID.match(eid):
                out.rejected.append({"record": shown, "reason": f"bad EID: {eid!r} is not E<number>"})
            elif eid in out.entities:
                out.rejected.append({"record": shown, "reason": f"duplicate EID: {eid} is listed twice"})
            elif not name:
                out.rejected.append({"record": shown, "reason": "no name: the name must be in double quotes"})
            else:
                out.entities[eid] = {"type": etype or "Entity", "name": " ".join(name.split()),
                                     "description": " ".join(desc.split())}
        else:
            seen_relation = True
            pending.append((shown, parts))
    for shown, parts in pending:  # relations are checked against the complete entity list
        if len(parts) < 4:
            out.rejected.append({"record": shown, "reason": "malformed: a relation needs source, type, target, quote"})
            continue
        src, rel, tgt, quote = parts[0], parts[1], parts[2], _unquote(" | ".join(parts[3:]))
        missing = [e for e in (src, tgt) if e not in out.entities]
        if missing:
            out.rejected.append({"record": shown, "reason": f"unregistered EID: {', '.join(missing)} is not a listed entity"})
        elif src == tgt:
            out.rejected.append({"record": shown, "reason": "self relation: source and target are the same entity"})
        elif not rel:
            out.rejected.append({"record": shown, "reason": "no relation type"})
        elif quote is None:
            out.rejected.append({"record": shown, "reason": "no quote: the evidence must be in double quotes"})
        else:
            out.relations.append({"source": src, "relation": " ".join(rel.split()), "target": tgt,
                                  "quote": " ".join(quote.split())})
    return out
