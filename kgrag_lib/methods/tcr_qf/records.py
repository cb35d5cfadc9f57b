"""TCR-QF's extraction output (§3.1): bracketed records, parsed strictly.

    [entity | E1 | Person | "Ada Lovelace" | English mathematician who wrote the first program]
    [relation | E1 | collaborated with | E2 | "she worked with Charles Babbage"]

`parse_records` is strict: every line that looks like a record and breaks a rule is rejected
with its reason and counted, never guessed at; lines that are not records (headings, prose)
are counted as ignored. The prompts that ask for them are in `prompts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

EID = re.compile(r"^E([1-9][0-9]{0,2})$")


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
