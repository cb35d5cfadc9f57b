"""TCR-QF's KG (§3.1, §3.3, §3.4): built once from token chunks of the corpus by the EID-record
extraction, then grown during reasoning by feedback triples, without rebuilding the store.

- Chunks: 512 tokens with 64 of overlap of a named tokenizer (`kg.extraction.token_chunks`),
  each a verbatim slice of its passage (title kept in front).
- One unified KG: entities of every chunk are merged by normalized name (NFKC, case-folded,
  punctuation removed); the first type and description seen are kept; `sources` lists every
  chunk an entity was extracted from (Sources(e) of §3.3). A relation record becomes the
  triple (head name, relation type, tail name) with the chunk as provenance and its quote kept.
- Nodes are entities (also those without a relation), edges are distinct triples: the counts
  of Table 3.
- Feedback (`add`): new triples are matched to existing entities by normalized name, else by
  edit distance (rapidfuzz normalized Indel similarity >= `threshold`, the closest name); a
  triple whose two ends map to existing entities that are already linked by a relation type
  within the same similarity is a duplicate and dropped (§3.4 "filtered based on edit
  distance"; the paper gives no threshold: ours is `dedupe_threshold`, default 0.85).
- Quotes (§3.1 asks each relation to quote its text exactly): every relation record keeps its
  quote with its origin and whether the quote is found in its chunk (`quote_in_text`: NFKC,
  whitespace runs collapsed, case-folded, then a substring test; so a quote that differs from
  the text only in spacing, line breaks or capitals counts as found, a paraphrase does not).
  A feedback relation's chunk is any of the passages it was extracted from; TCR-AF's triples
  come from the model's answer, not a chunk, and are not checked (None). `quote_check` decides
  what happens to a relation whose quote is not found: "flag" keeps it, marked
  `quote_in_chunk: false`; "drop" leaves it out, both of the built KG (`TcrKG.load`) and of
  feedback (`add`). `quote_counts` says how many were kept, flagged and dropped.

The extraction (EID records, its prompts and parser) is TCR-QF's own (`methods.tcr_qf.extraction`,
spec `tcr:`); this module holds the KG it assembles and grows.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import DataFormatError
from ..jsonl import atomic_text
from .extraction import Chunk, normalize
from .store import KGStore

TABLES_FILE = "tcr_kg.json"
TABLES_FORMAT = "kgrag-tcr-kg"


# ---- the KG ----------------------------------------------------------------------------------------
@dataclass
class Entity:
    name: str
    type: str
    description: str
    sources: list[str] = field(default_factory=list)  # chunk ids (feedback passages included)


@dataclass
class Added:
    """What one `add` changed: triples and entities new to the KG, and what it dropped."""

    triples: list[dict[str, Any]] = field(default_factory=list)  # {head, relation, tail, quote, quote_in_chunk,
    entities: list[str] = field(default_factory=list)            #  origin, sources}
    duplicates: int = 0
    merged_entities: int = 0  # new names joined to an existing entity by edit distance
    quotes_not_in_chunk: int = 0  # relations kept, flagged: their quote is in none of `sources`
    dropped_quote: int = 0        # relations left out (quote_check "drop"): their quote is in none of `sources`


QUOTE_CHECKS = ("flag", "drop")


def _folded(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split()).casefold()


def quote_in_text(quote: str, text: str) -> bool:
    """Whether `quote` occurs in `text` once both are NFKC-normalised, their whitespace runs
    collapsed to one space and case-folded (see the module doc)."""
    q = _folded(quote)
    return bool(q) and q in _folded(text)


class TcrKG:
    """The store plus TCR-QF's side tables (entity types, descriptions and sources; quotes)."""

    def __init__(self, store: KGStore, entities: dict[str, Entity], quotes: dict[int, list[list[Any]]],
                 chunks: dict[str, Chunk], threshold: float = 0.85, quote_check: str = "flag"):
        if quote_check not in QUOTE_CHECKS:
            raise ValueError(f"quote_check: expected one of {', '.join(QUOTE_CHECKS)}, got {quote_check!r}")
        self.store, self.entities, self.quotes, self.chunks = store, entities, quotes, chunks
        self.threshold = float(threshold)
        self.quote_check = quote_check
        self.dropped_quotes = 0  # relation records left out, of the built KG and of feedback (quote_check "drop")
        self._names: list[str] | None = None  # normalized entity keys, for fuzzy matching
        for entries in self.quotes.values():   # side tables written before the flag: check now
            for e in entries:
                if len(e) < 3:
                    e.append(self._quote_found(e[0], [e[1]]) if e[1] in self.chunks else None)

    def _quote_found(self, quote: str, sources: Sequence[str]) -> bool | None:
        """Whether the quote is in one of the chunks `sources` (None: no chunk to check it against)."""
        texts = [self.chunks[c].as_text() for c in sources if c in self.chunks]
        return any(quote_in_text(quote, t) for t in texts) if texts else None

    def quote_counts(self) -> dict[str, Any]:
        """Relation records (one per quote kept) by the quote check: kept, kept but flagged
        (quote not in its chunk), dropped; and the distinct triples (edges) kept."""
        flags = [e[2] for entries in self.quotes.values() for e in entries]
        return {"quote_check": self.quote_check, "relations_kept": len(flags),
                "relations_flagged": sum(f is False for f in flags), "relations_dropped": self.dropped_quotes,
                "edges_kept": self.num_edges}

    def drop_unquoted(self) -> int:
        """Leave out every relation record whose quote is not in its chunk, and the triples left
        with no record; the store is rebuilt (ids change, quotes follow). The records dropped."""
        store = self.store
        rows, prov, quotes_in = [], [], []
        dropped = 0
        for tid in range(store.num_triples):
            t = store.triple(tid)
            entries = self.quotes.get(tid)
            if not entries:   # no quote recorded (not an extracted relation): kept as it is
                for src in store.provenance_of_triple(tid) or [None]:
                    rows.append((t.s, t.r, t.o))
                    prov.append(src)
                    quotes_in.append(None)
                continue
            for e in entries:
                if e[2] is False:
                    dropped += 1
                    continue
                rows.append((t.s, t.r, t.o))
                prov.append(e[1])
                quotes_in.append(e)
        if dropped:
            self.store, self.quotes = _store_of(rows, prov, quotes_in, self.entities)
            self._names = None
        self.dropped_quotes += dropped
        return dropped

    # -- counts -----------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.entities)

    @property
    def num_edges(self) -> int:
        return int(self.store.num_triples)

    def entity(self, name: str) -> Entity | None:
        return self.entities.get(normalize(name))

    def sources(self, name: str) -> list[str]:
        e = self.entity(name)
        return e.sources if e else []

    # -- growth -----------------------------------------------------------------------------------
    def _match(self, name: str) -> tuple[str | None, bool]:
        """The key of the existing entity a new name denotes (exact, else by edit distance)."""
        key = normalize(name)
        if key in self.entities:
            return key, False
        from rapidfuzz import fuzz, process

        if self._names is None:
            self._names = list(self.entities)
        best = process.extractOne(key, self._names, scorer=fuzz.ratio, score_cutoff=100 * self.threshold)
        return (best[0], True) if best else (None, False)

    def _linked(self, h: str, t: str, relation: str) -> bool:
        from rapidfuzz import fuzz

        hi, ti = self.store.find_entity(self.entities[h].name), self.store.find_entity(self.entities[t].name)
        if hi is None or ti is None:
            return False
        rel = normalize(relation)
        for tid in self.store.out_triples(hi).tolist():
            tr = self.store.triple(tid)
            if self.store.find_entity(tr.o) == ti and fuzz.ratio(rel, normalize(tr.r)) >= 100 * self.threshold:
                return True
        return False

    def add(self, ext: Any, origin: str, sources: Sequence[str]) -> Added:
        """Feedback: the records of `ext` (`.entities` by EID, `.relations` between EIDs, as TCR-QF's
        record parser gives them) joined to the KG (see the module doc); `sources` are the
        chunks they were read from (they become Sources(e) of new and matched entities)."""
        out = Added()
        keys: dict[str, str] = {}
        for eid, e in ext.entities.items():
            key, fuzzy = self._match(e["name"])
            if key is None:
                key = normalize(e["name"])
                if not key:
                    continue
                self.entities[key] = Entity(e["name"], e["type"], e["description"], [])
                self._names = None
                out.entities.append(e["name"])
            elif fuzzy:
                out.merged_entities += 1
            ent = self.entities[key]
            ent.sources.extend(s for s in sources if s not in ent.sources)
            keys[eid] = key
        rows, prov, meta = [], [], []
        for r in ext.relations:
            found = self._quote_found(r["quote"], sources)
            if found is False and self.quote_check == "drop":
                out.dropped_quote += 1
                self.dropped_quotes += 1
                continue
            h, t = keys.get(r["source"]), keys.get(r["target"])
            if h is None or t is None or h == t or self._linked(h, t, r["relation"]):
                out.duplicates += 1
                continue
            hn, tn = self.entities[h].name, self.entities[t].name
            rows.append((hn, r["relation"], tn))
            prov.append(origin)
            meta.append({"head": hn, "relation": r["relation"], "tail": tn, "quote": r["quote"],
                         "quote_in_chunk": found, "origin": origin, "sources": list(sources)})
        if rows:
            new = self.store.add_triples(rows, provenance=prov)
            new_set = set(new.tolist())
            for tid, m in zip(self._ids_of(rows), meta):
                if tid in new_set:
                    self.quotes.setdefault(tid, []).append([m["quote"], origin, m["quote_in_chunk"]])
                    out.triples.append(m)
                    out.quotes_not_in_chunk += m["quote_in_chunk"] is False
                    new_set.discard(tid)
                else:
                    out.duplicates += 1
        return out

    def _ids_of(self, rows: list[tuple[str, str, str]]) -> list[int]:
        ids = []
        for h, r, t in rows:
            hi, ti = self.store.find_entity(h), self.store.find_entity(t)
            tid = -1
            for cand in self.store.out_triples(hi).tolist():
                tr = self.store.triple(cand)
                if tr.r == r and tr.o == t:
                    tid = cand
                    break
            ids.append(tid)
        return ids

    def replay(self, added: Iterable[dict[str, Any]]) -> None:
        """Apply triples recorded by earlier `add` calls (a resumed run rebuilds its grown KG)."""
        for m in added:
            for name in (m["head"], m["tail"]):
                key = normalize(name)
                if key not in self.entities:
                    self.entities[key] = Entity(name, "Entity", "", [])
                    self._names = None
                ent = self.entities[key]
                ent.sources.extend(s for s in m.get("sources", []) if s not in ent.sources)
            new = self.store.add_triples([(m["head"], m["relation"], m["tail"])], provenance=[m["origin"]])
            flag = m["quote_in_chunk"] if "quote_in_chunk" in m else self._quote_found(m["quote"], m.get("sources", []))
            for tid in new.tolist():
                self.quotes.setdefault(tid, []).append([m["quote"], m["origin"], flag])

    # -- persistence --------------------------------------------------------------------------------
    def save(self, folder: Path) -> Path:
        """The side tables beside the store (`KGStore.save` writes the store itself)."""
        path = Path(folder) / TABLES_FILE
        payload = {"format": TABLES_FORMAT, "version": 1,
                   "entities": [[k, e.name, e.type, e.description, e.sources] for k, e in self.entities.items()],
                   "quotes": {str(k): v for k, v in self.quotes.items()},
                   "chunks": [[c.pid, c.index, c.title, c.text] for c in self.chunks.values()]}
        atomic_text(path, json.dumps(payload, ensure_ascii=False))
        return path

    @classmethod
    def load(cls, folder: Path, threshold: float = 0.85, quote_check: str = "flag") -> "TcrKG":
        """A private, mutable copy: the store is read into memory, so growing it never touches the
        cached build (nor another run's copy). With quote_check "drop" the relations whose quote
        is not in their chunk are left out of the copy (`drop_unquoted`)."""
        path = Path(folder) / TABLES_FILE
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            if d.get("format") != TABLES_FORMAT:
                raise ValueError(f"format {d.get('format')!r}")
            entities = {k: Entity(n, t, desc, list(src)) for k, n, t, desc, src in d["entities"]}
            quotes = {int(k): [list(q) for q in v] for k, v in d["quotes"].items()}
            chunks = {c.cid: c for c in (Chunk(p, int(i), title, text) for p, i, title, text in d["chunks"])}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataFormatError(path, None, f"the side tables of a TCR-QF KG ({TABLES_FORMAT}, written by "
                                  "TcrKG.save)", f"{type(exc).__name__}: {exc}") from None
        kg = cls(KGStore.load(folder, mmap=False), entities, quotes, chunks, threshold, quote_check)
        if quote_check == "drop":
            kg.drop_unquoted()
        return kg


# ---- the assembly --------------------------------------------------------------------------------
def _store_of(rows: list[tuple[str, str, str]], prov: list[str | None], quotes_in: list[list[Any] | None],
              entities: dict[str, Entity]) -> tuple[KGStore, dict[int, list[list[Any]]]]:
    """The store of relation rows (one per record, duplicates merged) and its quotes by triple id."""
    store = KGStore.from_triples(rows, provenance=prov)
    ids: dict[tuple[str, str, str], int] = {}
    for h, r, t in rows:
        if (h, r, t) not in ids:
            ids[(h, r, t)] = next(c for c in store.out_triples(store.entity_id(h)).tolist()
                                  if (store.triple(c).r, store.triple(c).o) == (r, t))
    quotes: dict[int, list[list[Any]]] = {}
    for key, q in zip(rows, quotes_in):
        if q is not None:
            quotes.setdefault(ids[key], []).append(q)
    store.set_descriptions({store.entity_id(e.name): e.description for e in entities.values()
                            if e.description and store.find_entity(e.name) is not None})
    return store, quotes


def assemble(chunks: Sequence[Chunk], recs: Sequence[dict[str, Any]]) -> tuple[KGStore, TcrKG, dict[str, Any]]:
    """The unified KG of the journal records of `chunks` (same order), and its counts."""
    entities: dict[str, Entity] = {}
    rows, prov, quotes_in = [], [], []
    not_in_chunk = same_entity = 0
    for chunk, rec in zip(chunks, recs):
        keys = {}
        for eid, e in rec["entities"].items():
            key = normalize(e["name"])
            if not key:
                continue
            ent = entities.setdefault(key, Entity(e["name"], e["type"], e["description"], []))
            if chunk.cid not in ent.sources:
                ent.sources.append(chunk.cid)
            keys[eid] = key
        for r in rec["relations"]:
            h, t = keys.get(r["source"]), keys.get(r["target"])
            if h is None or t is None or h == t:  # two EIDs of one name: a self-loop once merged
                same_entity += 1
                continue
            rows.append((entities[h].name, r["relation"], entities[t].name))
            prov.append(chunk.cid)
            found = quote_in_text(r["quote"], chunk.as_text())
            quotes_in.append([r["quote"], chunk.cid, found])
            not_in_chunk += not found
    store, quotes = _store_of(rows, prov, quotes_in, entities)
    kg = TcrKG(store, entities, quotes, {c.cid: c for c in chunks})
    return store, kg, {"nodes": kg.num_nodes, "edges": kg.num_edges, "relation_records": len(rows),
                       "relations_dropped_same_entity": same_entity, "quotes_not_in_chunk": not_in_chunk,
                       "edges_without_chunk_quote": sum(all(e[2] is False for e in v) for v in quotes.values())}


def build_stats(chunks: Sequence[Chunk], recs: Sequence[dict[str, Any]], counts: dict[str, Any]) -> dict[str, Any]:
    n = max(len(chunks), 1)
    rejected: dict[str, int] = {}
    for r in recs:
        for x in r["rejected"]:
            key = x["reason"].split(":")[0]
            rejected[key] = rejected.get(key, 0) + 1
    accepted = sum(len(r["entities"]) + len(r["relations"]) for r in recs)
    n_rej = sum(rejected.values())
    usage = {k: sum(r["usage"][k] for r in recs) for k in ("requests", "calls", "prompt_tokens", "completion_tokens")}
    return {
        "chunks": len(chunks), **counts,
        "entity_records": sum(len(r["entities"]) for r in recs),
        "entities_per_chunk": round(sum(len(r["entities"]) for r in recs) / n, 3),
        "relations_per_chunk": round(sum(len(r["relations"]) for r in recs) / n, 3),
        "chunks_with_zero_entities": sum(not r["entities"] for r in recs),
        "failed_outputs": sum(bool(r["failure"]) for r in recs),
        "records_rejected": n_rej, "rejected_by_reason": rejected,
        "unparsable_record_rate": round(n_rej / max(accepted + n_rej, 1), 4),
        "unregistered_eid_relations": rejected.get("unregistered EID", 0),
        "ignored_lines": sum(r["ignored_lines"] for r in recs),
        "llm_requests": usage["requests"], "llm_calls": usage["calls"],
        "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
    }
