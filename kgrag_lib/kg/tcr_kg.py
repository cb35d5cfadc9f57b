"""TCR-QF's KG (§3.1, §3.3, §3.4): built once from token chunks of the corpus by the EID-record
extraction, then grown during reasoning by feedback triples, without rebuilding the store.

- Chunks: `MAX_LEN` 512 tokens with `OVERLAP` 64 of a named tokenizer (`load_tokenizer`: the
  shipped MiniLM WordPiece by default, any local Hugging Face tokenizer, or `whitespace`), cut
  at token offsets so a chunk is a verbatim slice of its passage (title kept in front).
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

The build is cached and resumable like SA-RAG's text KG (`kg.sources`, spec `tcr:`): one
fsynced journal line per chunk, a rerun sends no LLM call for journaled chunks.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from ..errors import ConfigError, DataFormatError
from ..jsonl import atomic_text
from ..llm.base import PromptTooLongError
from ..records import Passage
from . import tcr_records as R
from .store import KGStore
from .text_index import Chunk, Journal, normalize

if TYPE_CHECKING:  # pragma: no cover
    from ..llm.base import LLM

TABLES_FILE = "tcr_kg.json"
TABLES_FORMAT = "kgrag-tcr-kg"
MAX_LEN, OVERLAP = 512, 64
_SENTENCE = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[A-Z0-9\"'(\[])")


# ---- chunking ------------------------------------------------------------------------------------
class WhitespaceTokenizer:
    """Tokens are whitespace-separated words (offsets into the text); for tests and tokenizer-free runs."""

    name = "whitespace"

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


class HFTokenizer:
    """A Hugging Face fast tokenizer's token offsets (no special tokens)."""

    def __init__(self, name: str, tok: Any):
        self.name, self._tok = name, tok

    def offsets(self, text: str) -> list[tuple[int, int]]:
        enc = self._tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [tuple(o) for o in enc["offset_mapping"] if o[1] > o[0]]


def load_tokenizer(name: str = "minilm") -> WhitespaceTokenizer | HFTokenizer:
    """`minilm` (the WordPiece of the shipped all-MiniLM-L6-v2), `whitespace`, or a local
    Hugging Face tokenizer folder / id (offline)."""
    if name == "whitespace":
        return WhitespaceTokenizer()
    from transformers import AutoTokenizer

    if name == "minilm":
        from ..retrieval.embedder import _minilm_dir

        return HFTokenizer("minilm (all-MiniLM-L6-v2 WordPiece)", AutoTokenizer.from_pretrained(str(_minilm_dir())))
    try:
        return HFTokenizer(name, AutoTokenizer.from_pretrained(name, local_files_only=True))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"parameter 'tokenizer': cannot load {name!r} offline ({exc}); use minilm, whitespace "
                          "or a local tokenizer folder") from None


def token_chunks(passages: Iterable[Passage], tokenizer: Any, size: int = MAX_LEN,
                 overlap: int = OVERLAP) -> list[Chunk]:
    """§3.1: windows of `size` tokens, each starting `size - overlap` tokens after the previous,
    the last ending at the passage's last token; each a verbatim slice of the passage text."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"chunk size: expected an int >= 1, got {size!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < size:
        raise ConfigError(f"chunk overlap: expected an int in [0, size={size}), got {overlap!r}")
    out = []
    for p in passages:
        offs = tokenizer.offsets(p.text)
        for i, start in enumerate(range(0, len(offs), size - overlap)):
            window = offs[start:start + size]
            out.append(Chunk(p.pid, i, p.title, p.text[window[0][0]:window[-1][1]]))
            if start + size >= len(offs):
                break
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of a chunk: a break after . ! ? (and closing quotes) before a capital, digit or quote."""
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


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

    triples: list[dict[str, Any]] = field(default_factory=list)  # {head, relation, tail, quote, origin, sources}
    entities: list[str] = field(default_factory=list)
    duplicates: int = 0
    merged_entities: int = 0  # new names joined to an existing entity by edit distance


class TcrKG:
    """The store plus TCR-QF's side tables (entity types, descriptions and sources; quotes)."""

    def __init__(self, store: KGStore, entities: dict[str, Entity], quotes: dict[int, list[list[str]]],
                 chunks: dict[str, Chunk], threshold: float = 0.85):
        self.store, self.entities, self.quotes, self.chunks = store, entities, quotes, chunks
        self.threshold = float(threshold)
        self._names: list[str] | None = None  # normalized entity keys, for fuzzy matching

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

    def add(self, ext: R.Extracted, origin: str, sources: Sequence[str]) -> Added:
        """Feedback: the records of `ext` joined to the KG (see the module doc); `sources` are the
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
            h, t = keys.get(r["source"]), keys.get(r["target"])
            if h is None or t is None or h == t or self._linked(h, t, r["relation"]):
                out.duplicates += 1
                continue
            hn, tn = self.entities[h].name, self.entities[t].name
            rows.append((hn, r["relation"], tn))
            prov.append(origin)
            meta.append({"head": hn, "relation": r["relation"], "tail": tn, "quote": r["quote"], "origin": origin,
                         "sources": list(sources)})
        if rows:
            new = self.store.add_triples(rows, provenance=prov)
            new_set = set(new.tolist())
            for tid, m in zip(self._ids_of(rows), meta):
                if tid in new_set:
                    self.quotes.setdefault(tid, []).append([m["quote"], origin])
                    out.triples.append(m)
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
            for tid in new.tolist():
                self.quotes.setdefault(tid, []).append([m["quote"], m["origin"]])

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
    def load(cls, folder: Path, threshold: float = 0.85) -> "TcrKG":
        """A private, mutable copy: the store is read into memory, so growing it never touches the
        cached build (nor another run's copy)."""
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
        return cls(KGStore.load(folder, mmap=False), entities, quotes, chunks, threshold)


# ---- the build ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BuildConfig:
    """What changes the extracted KG besides the model and the prompt version."""

    tokenizer: str = "minilm"
    chunk_size: int = MAX_LEN
    overlap: int = OVERLAP
    max_tokens: int = 768

    def key(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


def extract_chunk(llm: "LLM", chunk: Chunk, max_tokens: int) -> dict[str, Any]:
    """One chunk's journal record: the parsed records (with rejections), failure, usage."""
    before = llm.usage.snapshot()
    params = llm.default_params.replace(max_tokens=max_tokens, grammar=R.GRAMMAR)
    rec: dict[str, Any] = {"chunk": chunk.cid, "failure": ""}
    try:
        out = llm.generate(R.extraction_messages(chunk.as_text()), params)
    except PromptTooLongError as exc:
        out, rec["failure"] = "", f"prompt too long: {exc}"
    ext = R.parse_records(out)
    if not rec["failure"] and not ext.entities:
        rec["failure"] = "no valid entity record in the output"
        rec["output"] = out[:300]
    rec.update(ext.to_dict())
    used = llm.usage.since(before)
    rec["usage"] = {"requests": used.requests, "calls": used.calls, "prompt_tokens": used.total_prompt_tokens,
                    "completion_tokens": used.total_completion_tokens}
    return rec


def _in_chunk(quote: str, chunk: Chunk) -> bool:
    return " ".join(quote.split()).casefold() in " ".join(chunk.as_text().split()).casefold()


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
            quotes_in.append([r["quote"], chunk.cid])
            not_in_chunk += not _in_chunk(r["quote"], chunk)
    store = KGStore.from_triples(rows, provenance=prov)
    ids: dict[tuple[str, str, str], int] = {}
    for h, r, t in rows:
        if (h, r, t) not in ids:
            ids[(h, r, t)] = next(c for c in store.out_triples(store.entity_id(h)).tolist()
                                  if (store.triple(c).r, store.triple(c).o) == (r, t))
    quotes: dict[int, list[list[str]]] = {}
    for key, q in zip(rows, quotes_in):
        quotes.setdefault(ids[key], []).append(q)
    store.set_descriptions({store.entity_id(e.name): e.description for e in entities.values()
                            if e.description and store.find_entity(e.name) is not None})
    kg = TcrKG(store, entities, quotes, {c.cid: c for c in chunks})
    return store, kg, {"nodes": kg.num_nodes, "edges": kg.num_edges, "relation_records": len(rows),
                       "relations_dropped_same_entity": same_entity, "quotes_not_in_chunk": not_in_chunk}


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


def build_tcr_kg(passages: Sequence[Passage], llm: "LLM", journal: Path, *, config: BuildConfig = BuildConfig(),
                 show_progress: bool = True, about: dict[str, Any] | None = None
                 ) -> tuple[KGStore, dict[str, Any], TcrKG]:
    """Extract and assemble the KG of `passages`, resuming from `journal` (one line per chunk)."""
    from ..progress import progress

    start = time.perf_counter()
    chunks = token_chunks(passages, load_tokenizer(config.tokenizer), config.chunk_size, config.overlap)
    log = Journal(journal)
    done = log.read()
    todo = [c for c in chunks if c.cid not in done]
    calls0 = llm.usage.calls
    bar = progress(total=len(chunks), initial=len(chunks) - len(todo), unit="chunk", desc="TCR-QF extraction",
                   disable=not show_progress)
    try:
        for c in todo:
            rec = extract_chunk(llm, c, config.max_tokens)
            log.append(rec)
            done[c.cid] = rec
            bar.update(1)
    finally:
        bar.close()
        log.close()
    recs = [done[c.cid] for c in chunks]
    store, kg, counts = assemble(chunks, recs)
    stats = {"kg": "tcr", **(about or {}), "model": llm.name, "model_identity": llm.identity,
             "prompt_version": R.PROMPT_VERSION, "tokenizer": config.tokenizer, "chunk_size": config.chunk_size,
             "chunk_overlap": config.overlap, "max_tokens": config.max_tokens, "passages": len(passages),
             **build_stats(chunks, recs, counts),
             "chunks_extracted_this_build": len(todo), "llm_calls_this_build": llm.usage.calls - calls0,
             "seconds_this_build": round(time.perf_counter() - start, 3)}
    return store, stats, kg


# ---- sentences and context restoration (§3.3) ------------------------------------------------------
@dataclass
class SentenceIndex:
    """Every sentence of the corpus chunks, embedded once (cached on disk); per chunk its rows."""

    texts: list[str]
    rows: dict[str, tuple[int, int]]  # chunk id -> [start, end) rows
    vecs: np.ndarray

    @classmethod
    def build(cls, chunks: Iterable[Chunk], embedder: Any, cache_dir: Path, name: str,
              show_progress: bool = False) -> "SentenceIndex":
        from ..retrieval import embed_cached

        texts: list[str] = []
        rows: dict[str, tuple[int, int]] = {}
        for c in chunks:
            sents = split_sentences(c.text) or [c.text]
            rows[c.cid] = (len(texts), len(texts) + len(sents))
            texts.extend(sents)
        vecs = embed_cached(embedder, texts, cache_dir=cache_dir, name=name, show_progress=show_progress)
        return cls(texts, rows, np.asarray(vecs, dtype=np.float32))

    def candidates(self, chunk_ids: Iterable[str]) -> np.ndarray:
        spans = [self.rows[c] for c in dict.fromkeys(chunk_ids) if c in self.rows]
        if not spans:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([np.arange(a, b) for a, b in spans])


def restore_context(kg: TcrKG, sentences: SentenceIndex, triples: Sequence[tuple[str, str, str]],
                    template_vecs: np.ndarray) -> list[str]:
    """§3.3: per triple, the sentence of Sources(h) ∪ Sources(t) most similar to "h r t" ("" when
    neither end has a source chunk). `template_vecs[i]` is the unit embedding of triple i's
    template: a lookup and one dot product per candidate sentence, no sentence is re-embedded."""
    out = []
    for (h, _, t), v in zip(triples, template_vecs):
        rows = sentences.candidates([*kg.sources(h), *kg.sources(t)])
        if rows.size == 0:
            out.append("")
            continue
        scores = sentences.vecs[rows] @ v
        out.append(sentences.texts[int(rows[int(np.argmax(scores))])])
    return out


def template(triple: tuple[str, str, str]) -> str:
    """T(e_h, r, e_t) = "e_h r e_t" (§3.3)."""
    return " ".join(triple)
