"""Every KG a method runs on, by name: `load_kg(spec)` builds it once, caches it, and loads it.

Specs (the `kg` / `kb` config values):
- `metaqa`: the data root's metaqa/kb.txt; `metaqa:<path>`: any file in that `s|r|o` format.
  Triple ids follow the file (de-duplicated, sorted by KGStore), so whole-KB embedding
  matrices indexed by triple id stay valid.
- `2wiki-evidence-oracle` (an upper bound): the union of the Wikidata `evidences` triples of the
  4,000 2WikiMultiHopQA dev questions (lag_2wiki_dev_4000_nocontext.json), with provenance
  `2wiki-dev:<qid>`. Real Wikidata facts with names, but only those the questions were
  generated from; an entity's description is its passage in HippoRAG's 2Wiki corpus (title
  match) where there is one, else a sentence verbalized from its own triples. The evaluated
  2Wiki questions are among those 4,000, so each finds its own gold facts here: an oracle.
- `2wiki-evidence-heldout` (the default): the same without the evidence of every question of
  the evaluated 2Wiki splits (corpus354 and dev200), so no evaluated question brings its own
  gold facts; facts shared with other questions stay, and the build statistics say how much
  of the evaluated questions' evidence that leaves in the KG.
- `2wiki-evidence-full` (KG-Infused RAG's 2Wiki KG in the reference profiles): every real
  2Wiki triple the data root holds (the `evidences` of the 4,000 dev questions and of the 200
  of MIGRES_200_2wiki.jsonl), entities named as the files name them, and every entity's text a
  real passage (HippoRAG's 2Wiki corpus, else a paragraph shipped with a MIGRES question): no
  description is verbalized from the entity's own triples, so no seed text restates a gold
  fact. Entities with a passage but no triple stay as passage-only seeds; heads without a
  passage are reachable by activation but never seeds (`stats["seed_texts"] == "passages"`).
  Like the paper's Wikidata5M, it holds every evaluated question's evidence among other facts;
  `evidence_coverage` / `evidence_table` measure how much and how diluted.
- `wikidata5m` / `wikidata5m:<folder>`: KG-Infused RAG's Wikidata5M-KG, built by
  `build_wikidata5m_kg` (Appendix B filters, Table 5 statistics) from the
  official files in `<data root>/wikidata5m/` (or `<folder>`).
- `tcr:<dataset>[:<split>][:n=<N>][:seed=<S>]` (TCR-QF): the same passages as `text:`, chunked
  into 512 tokens and extracted as EID records (`methods.tcr_qf.extraction`, into `kg.tcr_kg`);
  `BuiltKG.extra["tcr_folder"]`.
- `text:<dataset>[:<split>][:n=<N>][:seed=<S>][:max_<cap>=<N>...]` (SA-RAG): a KG an LLM
  extracts from the dataset's passages (`methods.sa_rag.extraction`, into `kg.text_kg`; the
  corpus forms are in `data.selection.CorpusSelection`, the caps in `ExtractionConfig`). These
  two are planned by their paper's package, which provides the plan when imported (`provide`). Needs
  `llm=`; its build folder is keyed by the model identity, the prompt version and the
  extraction settings too, the build resumes from a per-chunk journal, and `BuiltKG.extra["text"]`
  holds the `TextKG` side tables.
- the path of a folder written by `KGStore.save` (or a copy of a build folder): loaded as it
  is, with its `TextKG` when the folder has one.

A built store is saved under `<cache>/kg/<name>-<fingerprint of its inputs>/`, under a
file lock, with `stats.json` written last (its presence marks a complete build); later calls,
in any process, load it memory-mapped. The side files beside the store (`stats.json`, an SA-RAG
`text_kg.json`, a TCR-QF `tcr_kg.json`) are recorded in `side_files.json` (their block crc32s,
written just before `stats.json`) and checked on every load like the store's own files: a
changed one is a damaged build (rebuilt; a build from before the record is rebuilt too). A resumable build keeps its journal beside that folder
(`<folder>.journal.jsonl`) while it runs and moves it into the folder when done.

Adding a source: write one function `(arg, data_root) -> SourcePlan` (`(arg, data_root, llm)`
for a source that needs an LLM) naming the input files (their paths and contents key the
cache), an `identity` for anything else the output depends on (model, prompt version,
settings), and a `build()` returning `(KGStore, stats)`, and add one row to `SOURCES`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..data.common import check_file
from ..data.metaqa import load_metaqa_kb
from ..data.registry import metaqa_kb_path, wikidata5m_paths
from ..data.triples import FORMS
from ..data.twowiki import load_2wiki, load_2wiki_corpus
from ..data.wikidata5m import PAPER_TABLE5, preprocess_wikidata5m
from ..errors import ConfigError, DataFormatError, KgragError, MissingDataError
from ..blocksums import BlockSums, check_files, record_file
from ..jsonl import atomic_text
from ..paths import cache_dir as _cache_dir
from ..paths import data_root as _data_root
from .store import KGStore, rebuild_hint
from .tcr_kg import TABLES_FILE
from .text_kg import TEXT_KG_FILE, TextKG

if TYPE_CHECKING:  # pragma: no cover
    from ..llm.base import LLM

BUILDER_VERSION = 1
STATS_FILE = "stats.json"
SIDE_SUMS_FILE = "side_files.json"   # block crc32s of stats.json and the side tables
log = logging.getLogger(__name__)
TWOWIKI_QUESTIONS = "2wiki/lag_2wiki_dev_4000_nocontext.json"
TWOWIKI_CORPUS = "2wiki/HippoRAG_2wiki_1000q_corpus.json"
MAX_VERBALIZED_FACTS = 12
JOURNAL_FILE = "journal.jsonl"


class EmptyKGError(KgragError, ValueError):
    """A source produced a KG without triples: nothing to retrieve or activate over."""


@dataclass
class BuiltKG:
    """A loaded KG: its display name, the spec it came from, the store, its build statistics and
    any side tables its source keeps beside the store (`extra["text"]`: a `TextKG`)."""

    name: str
    spec: str
    store: KGStore
    stats: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SourcePlan:
    """What a source builds: a name, the input files and identity that key the cache, and the build.

    A `resumable` build is called as `build(journal_path)` and returns `(store, stats, tables)`;
    `tables.save(folder)` writes its side tables next to the store and `load_extra(folder)` reads
    them back into `BuiltKG.extra`.
    """

    name: str
    inputs: list[Path]
    build: Callable[..., tuple[Any, ...]]
    identity: str = ""
    resumable: bool = False
    load_extra: Callable[[Path], dict[str, Any]] | None = None


def size_stats(store: KGStore) -> dict[str, int]:
    return {"entities": int(store.num_entities), "relations": int(store.num_relations),
            "triples": int(store.num_triples)}


def verbalized_description(name: str, facts: list[tuple[str, str]]) -> str:
    """A description for an entity without a text: `name: relation object; ...`."""
    shown = facts[:MAX_VERBALIZED_FACTS]
    body = "; ".join(f"{r} {o}" for r, o in shown)
    more = f"; and {len(facts) - len(shown)} more facts" if len(facts) > len(shown) else ""
    return f"{name}: {body}{more}." if body else ""


def _no_argument(prefix: str, arg: str) -> None:
    if arg:
        raise ConfigError(f"{prefix} takes no ':<argument>', got {arg!r}")


# ---- MetaQA ---------------------------------------------------------------------------
def metaqa_kb_file(arg: str, data_root: Path) -> Path:
    """The kb.txt to read: `arg` when given, else `<data root>/metaqa/kb.txt`."""
    if not arg:
        return metaqa_kb_path(data_root).resolve()
    path = Path(arg).expanduser()
    if not path.exists():
        raise MissingDataError(f"MetaQA KB not found at {path}; expected a kb.txt-format file with one "
                               f"'subject|relation|object' per line (set --kb, --data-root or $KGRAG_DATA_ROOT)")
    return check_file(path, f"a MetaQA KB file, one triple per line: {FORMS['metaqa']}").resolve()


def metaqa_source(arg: str, data_root: Path) -> SourcePlan:
    path = metaqa_kb_file(arg, data_root)

    def build() -> tuple[KGStore, dict[str, Any]]:
        store = KGStore.from_triples(load_metaqa_kb(path))
        return store, {"kg": "metaqa", "source": str(path), **size_stats(store)}

    return SourcePlan("metaqa", [path], build)


# ---- 2wiki evidence slices ------------------------------------------------------------
# The 2Wiki splits the study evaluates (registry names): their questions' evidence is what the
# held-out KG leaves out.
TWOWIKI_EVALUATED = ("2wiki/DERIVED_lag_dev_questions_with_gold_titles_in_HippoRAG_corpus_354.json",
                     "2wiki/MIGRES_200_2wiki.jsonl")


def build_2wiki_evidence_store(data_root: Path, held_out: bool) -> tuple[KGStore, dict[str, Any]]:
    """The 2Wiki-evidence KG from the real files in `data_root` (see the module doc).

    `held_out`: leave out the evidence rows of every question of the evaluated splits
    (`TWOWIKI_EVALUATED`), so a question does not find its own gold facts; a fact it shares
    with another question stays (a real KG would hold it too), and the statistics say how much
    of the evaluated questions' evidence is still in the KG that way.
    """
    qpath, cpath = data_root / TWOWIKI_QUESTIONS, data_root / TWOWIKI_CORPUS
    evaluated = {q.qid: q for f in TWOWIKI_EVALUATED for q in load_2wiki(data_root / f)} if held_out else {}
    triples, prov = [], []
    n_questions = n_excluded = 0
    for q in load_2wiki(qpath):
        if q.qid in evaluated:
            n_excluded += 1
            continue
        n_questions += 1
        for t in q.evidence:
            triples.append(t)
            prov.append(f"2wiki-dev:{q.qid}")
    store = KGStore.from_triples(triples, provenance=prov)
    passages = {p.title: p.text for p in load_2wiki_corpus(cpath)}
    facts: dict[int, list[tuple[str, str]]] = {}
    for i in range(store.num_triples):
        facts.setdefault(int(store.heads[i]), []).append(
            (store.relation_name(int(store.rels[i])), store.entity_name(int(store.tails[i]))))
    descriptions: dict[int, str] = {}
    from_passage = from_facts = 0
    for e in range(store.num_entities):
        name = store.entity_name(e)
        if name in passages:
            descriptions[e] = passages[name]
            from_passage += 1
        elif e in facts:
            descriptions[e] = verbalized_description(name, facts[e])
            from_facts += 1
    store.set_descriptions(descriptions)
    heads = np.unique(np.asarray(store.heads))
    stats = {
        "kg": "2wiki-evidence-heldout" if held_out else "2wiki-evidence-oracle",
        "source": [TWOWIKI_QUESTIONS, TWOWIKI_CORPUS],
        "questions": n_questions,
        "evidence_rows": len(triples),
        **size_stats(store),
        "entities_heading_a_triple": int(heads.size),
        "descriptions_from_corpus_passage": from_passage,
        "descriptions_verbalized_from_triples": from_facts,
        "entities_without_description": int(store.num_entities - from_passage - from_facts),
    }
    if held_out:
        kept = {(t.s, t.r, t.o) for t in triples}
        gold = [(t.s, t.r, t.o) for q in evaluated.values() for t in q.evidence]
        whole = [all((t.s, t.r, t.o) in kept for t in q.evidence) for q in evaluated.values() if q.evidence]
        stats.update({
            "evaluated_questions_left_out": len(evaluated), "dev4000_questions_left_out": n_excluded,
            "evaluated_evidence_rows": len(gold),
            "evaluated_evidence_still_in_kg_pct": round(100.0 * sum(g in kept for g in gold) / max(len(gold), 1), 2),
            "evaluated_questions_with_all_evidence_in_kg_pct": round(100.0 * sum(whole) / max(len(whole), 1), 2),
        })
    return store, stats


def twowiki_evidence_source(held_out: bool) -> Callable[[str, Path], SourcePlan]:
    name = "2wiki-evidence-heldout" if held_out else "2wiki-evidence-oracle"

    def plan(arg: str, data_root: Path) -> SourcePlan:
        _no_argument(name, arg)
        inputs = [data_root / TWOWIKI_QUESTIONS, data_root / TWOWIKI_CORPUS]
        inputs += [data_root / f for f in TWOWIKI_EVALUATED] if held_out else []
        missing = [p for p in inputs if not p.is_file()]
        if missing:
            raise MissingDataError(f"{missing[0]} not found: the {name} KG is built from "
                                   f"{', '.join(str(p.relative_to(data_root)) for p in inputs)} under the data root; "
                                   f"fetch them with: kgrag data fetch 2wiki --root {data_root}")
        return SourcePlan(name, inputs, lambda: build_2wiki_evidence_store(data_root, held_out))

    return plan


# ---- 2wiki-evidence-full: every real 2Wiki triple, real passages only -----------------------
FULL_KG = "2wiki-evidence-full"
# Every file under the data root that holds 2Wiki `evidences` triples (checked against data/INDEX.md:
# the 4,000 dev questions and MIGRES' 200; the 354-question file is a subset of the 4,000). The
# Wikidata5M slice there is ids only (no names, no relation labels), so it cannot join these names.
TWOWIKI_EVIDENCE_FILES = (TWOWIKI_QUESTIONS, "2wiki/MIGRES_200_2wiki.jsonl")
# `stats["seed_texts"]` of a KG whose seed index holds real passages only (see kg_infused.kg_sources)
SEED_TEXTS_PASSAGES = "passages"


def twowiki_passages(data_root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Real 2Wiki passages by title: (HippoRAG's corpus, paragraphs shipped with MIGRES' questions
    whose title the corpus lacks). Only Wikipedia text, never text built from triples."""
    corpus = {p.title: p.text for p in load_2wiki_corpus(data_root / TWOWIKI_CORPUS)}
    context: dict[str, str] = {}
    for q in load_2wiki(data_root / TWOWIKI_EVIDENCE_FILES[1]):
        for p in q.context:
            if p.title not in corpus:
                context.setdefault(p.title, p.text)
    return corpus, context


def build_2wiki_full_store(data_root: Path) -> tuple[KGStore, dict[str, Any]]:
    """The `2wiki-evidence-full` KG (see the module doc): returns (KGStore, stats)."""
    triples, prov = [], []
    qids: set[str] = set()
    for f in TWOWIKI_EVIDENCE_FILES:
        for q in load_2wiki(data_root / f):
            qids.add(q.qid)
            for t in q.evidence:
                triples.append(t)
                prov.append(f"2wiki-dev:{q.qid}")
    corpus, context = twowiki_passages(data_root)
    store = KGStore.from_triples(triples, provenance=prov, extra_entities=[*corpus, *context])
    descriptions, from_corpus, from_context = {}, 0, 0
    for e in range(store.num_entities):
        name = store.entity_name(e)
        if name in corpus:
            descriptions[e], from_corpus = corpus[name], from_corpus + 1
        elif name in context:
            descriptions[e], from_context = context[name], from_context + 1
    store.set_descriptions(descriptions)
    heads = np.unique(np.asarray(store.heads))
    in_triples = np.zeros(store.num_entities, dtype=bool)
    in_triples[heads] = True
    in_triples[np.asarray(store.tails)] = True
    described = np.zeros(store.num_entities, dtype=bool)
    described[np.fromiter(descriptions, dtype=np.int64, count=len(descriptions))] = True
    stats = {
        "kg": FULL_KG,
        "source": [*TWOWIKI_EVIDENCE_FILES, TWOWIKI_CORPUS],
        "questions": len(qids),
        "evidence_rows": len(triples),
        **size_stats(store),
        "entities_heading_a_triple": int(heads.size),
        "descriptions_from_corpus_passage": from_corpus,
        "descriptions_from_question_paragraph": from_context,
        "descriptions_verbalized_from_triples": 0,
        "seed_texts": SEED_TEXTS_PASSAGES,
        "seed_candidates": int(described.sum()),
        "passage_only_seeds": int((described & ~in_triples).sum()),
        "heads_without_passage": int(heads.size - described[heads].sum()),
        "entities_without_description": int((~described).sum()),
        **{k: v for k, v in evidence_coverage(store, evaluated_questions(data_root)).items() if k != "kg"},
    }
    return store, stats


def full_source(arg: str, data_root: Path) -> SourcePlan:
    _no_argument(FULL_KG, arg)
    inputs = [data_root / f for f in (*TWOWIKI_EVIDENCE_FILES, TWOWIKI_CORPUS, *TWOWIKI_EVALUATED)]
    missing = [p for p in dict.fromkeys(inputs) if not p.is_file()]
    if missing:
        raise MissingDataError(f"{missing[0]} not found: the {FULL_KG} KG is built from "
                               f"{', '.join(str(p.relative_to(data_root)) for p in dict.fromkeys(inputs))} "
                               "under the data root")
    return SourcePlan(FULL_KG, list(dict.fromkeys(inputs)), lambda: build_2wiki_full_store(data_root))


# ---- how much of the evaluated questions' evidence a KG holds ---------------------------------
def evaluated_questions(data_root: Path) -> list[Any]:
    """The questions of the evaluated 2Wiki splits (`TWOWIKI_EVALUATED`) that carry evidence, once each."""
    seen: dict[str, Any] = {}
    for f in TWOWIKI_EVALUATED:
        for q in load_2wiki(data_root / f):
            if q.evidence:
                seen.setdefault(q.qid, q)
    return list(seen.values())


def evidence_coverage(store: KGStore, questions: Sequence[Any], kg: str = "") -> dict[str, Any]:
    """How much of each question's gold evidence (`Question.evidence`) `store` holds, and how diluted
    it is there: the mean share per question (%), the share of questions with all of theirs (%), the
    distinct evidence triples, and which share of the KG's triples they are (%). Triples compare by
    their names (subject, relation, object) as the files give them. For KGs of the 2Wiki
    evidence's size (it reads every triple of the store)."""
    held = {(t.s, t.r, t.o) for t in (store.triple(i) for i in range(store.num_triples))}
    shares, gold = [], set()
    for q in questions:
        ev = {(t.s, t.r, t.o) for t in q.evidence}
        if ev:
            gold |= ev
            shares.append(sum(t in held for t in ev) / len(ev))
    if not shares:
        raise ConfigError("evidence_coverage: no question carries evidence triples (Question.evidence)")
    in_kg = sum(t in held for t in gold)
    return {"kg": kg, "triples": int(store.num_triples), "entities": int(store.num_entities),
            "evaluated_questions": len(shares),
            "evidence_held_mean_pct": round(100.0 * sum(shares) / len(shares), 2),
            "questions_with_all_evidence_pct": round(100.0 * sum(s == 1.0 for s in shares) / len(shares), 2),
            "evaluated_evidence_triples": len(gold),
            "kg_triples_that_are_evidence_pct": round(100.0 * in_kg / max(store.num_triples, 1), 4)}


def wikidata5m_evidence_row(evidence_triples: int) -> dict[str, Any]:
    """The paper's KG (Wikidata5M-KG, Table 5) in `evidence_coverage`'s terms, computed from its
    published size: it holds every evaluated question's evidence by the paper's premise (2Wiki was
    generated from Wikidata; not checked here, the data root has no Wikidata5M names), so the share of
    its triples that are evidence is `evidence_triples` over its 20,987,217 triples."""
    size = PAPER_TABLE5["Wikidata5M-KG"]
    return {"kg": "Wikidata5M-KG (paper, Table 5; computed)", "triples": size["triples"],
            "entities": size["entities"], "evaluated_questions": None,
            "evidence_held_mean_pct": 100.0, "questions_with_all_evidence_pct": 100.0,
            "evaluated_evidence_triples": evidence_triples,
            "kg_triples_that_are_evidence_pct": round(100.0 * evidence_triples / size["triples"], 4)}


EVIDENCE_KGS = ("2wiki-evidence-heldout", "2wiki-evidence-oracle", FULL_KG)


def evidence_table(data_root: Path | str | None = None, cache_dir: Path | str | None = None,
                   specs: Sequence[str] = EVIDENCE_KGS) -> list[dict[str, Any]]:
    """`evidence_coverage` of each KG in `specs` (built once, cached) over the evaluated 2Wiki
    questions, then the paper's Wikidata5M-KG computed from its size (`wikidata5m_evidence_row`):
    what `kgrag kg coverage` prints and notebooks 20 and 21 show. No model is involved."""
    root = _data_root(data_root)
    questions = evaluated_questions(root)
    rows = [evidence_coverage(load_kg(s, data_root=root, cache_dir=cache_dir).store, questions, kg=s) for s in specs]
    gold = {(t.s, t.r, t.o) for q in questions for t in q.evidence}
    return rows + [wikidata5m_evidence_row(len(gold))]


# ---- Wikidata5M -----------------------------------------------------------------------
def wikidata5m_source(arg: str, data_root: Path) -> SourcePlan:
    paths = wikidata5m_paths(data_root, folder=Path(arg).expanduser() if arg else None)
    where = str(paths["text_path"].parent)

    def build() -> tuple[KGStore, dict[str, Any]]:
        store, stats = build_wikidata5m_kg(**paths)
        return store, {"kg": "wikidata5m", "source": where, **stats}

    inputs = [*paths["triple_paths"], paths["entity_alias_path"], paths["relation_alias_path"], paths["text_path"]]
    return SourcePlan("wikidata5m", inputs, build)


def wikidata5m_store(w5m: Any) -> KGStore:
    """The graph store of a preprocessed Wikidata5M (`data.wikidata5m.Wikidata5MKG`)."""
    return KGStore.from_id_arrays(w5m.heads, w5m.rels, w5m.tails, w5m.entity_names, w5m.relation_names,
                                  aliases=w5m.aliases, descriptions=w5m.descriptions)


def build_wikidata5m_kg(triple_paths: Any, entity_alias_path: Any, relation_alias_path: Any, text_path: Any,
                        **kw: Any) -> tuple[KGStore, dict[str, Any]]:
    """`data.wikidata5m.preprocess_wikidata5m`, then its store: returns (KGStore, stats)."""
    w5m, stats = preprocess_wikidata5m(triple_paths, entity_alias_path, relation_alias_path, text_path, **kw)
    return wikidata5m_store(w5m), stats


# ---- text: and tcr: LLM-extracted KGs (planned by their paper's package) ---------------------
def text_tables(folder: Path) -> dict[str, Any]:
    """The side tables of an SA-RAG text KG folder: `extra["text"]` is its `TextKG`."""
    return {"text": TextKG.load(folder)}


def tcr_tables(folder: Path) -> dict[str, Any]:
    """A TCR-QF KG folder: `extra["tcr_folder"]` is the folder `TcrKG.load` reads a private copy from."""
    return {"tcr_folder": folder}


# ---- the table and the cache ------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """A row of `SOURCES`: `plan(arg, data_root)` gets the text after `<prefix>:` ("" if none);
    with `needs_llm`, `plan(arg, data_root, llm)`. A KG extracted with a paper's own prompts
    has no plan here: its package (`provider`) provides it when imported (`provide`), so the KG
    layer never imports a method's code."""

    plan: Callable[..., SourcePlan] | None
    forms: str  # the spec forms it accepts, for error messages
    needs_llm: bool = False
    provider: str = ""
    # the data manifest entries its plan reads under the data root (a `text:`/`tcr:` KG reads the dataset its
    # spec names, `metaqa:<file>` / `wikidata5m:<folder>` a file given, no entry)
    data: tuple[str, ...] = ()


SOURCES: dict[str, Source] = {
    "metaqa": Source(metaqa_source, "'metaqa', 'metaqa:<kb.txt-format file>'", data=("metaqa",)),
    "2wiki-evidence-heldout": Source(twowiki_evidence_source(True), "'2wiki-evidence-heldout'", data=("2wiki",)),
    "2wiki-evidence-oracle": Source(twowiki_evidence_source(False), "'2wiki-evidence-oracle' (upper bound)",
                                    data=("2wiki",)),
    FULL_KG: Source(full_source, f"'{FULL_KG}'", data=("2wiki",)),
    "wikidata5m": Source(wikidata5m_source, "'wikidata5m', 'wikidata5m:<folder>'", data=("wikidata5m",)),
    "text": Source(None, "'text:<dataset>[:<split>][:n=<N>][:seed=<S>][:max_<cap>=<N>...]' (with llm=)", needs_llm=True,
                   provider="kgrag_lib.methods.sa_rag"),
    "tcr": Source(None, "'tcr:<dataset>[:<split>][:n=<N>][:seed=<S>]' (with llm=)", needs_llm=True,
                  provider="kgrag_lib.methods.tcr_qf"),
}
ACCEPTED = ", ".join(s.forms for s in SOURCES.values()) + " or the folder of a saved KGStore"


def provide(prefix: str, plan: Callable[..., SourcePlan]) -> None:
    """Called by a paper's package on import: the plan of its `prefix:` KG (a row of `SOURCES`)."""
    SOURCES[prefix] = dataclasses.replace(SOURCES[prefix], plan=plan)


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes, read in 1 MiB blocks.

    The whole content, not size + mtime + sampled blocks: an edit that keeps the size within the
    same second (or the same mtime_ns on a coarse filesystem, or a restored mtime) or that falls
    between samples would serve the old graph. sha256 (hardware-accelerated here) reads the
    5.2 MB MetaQA kb.txt in 4 ms, about 1.3 GB/s (blake2b: 0.9 GB/s), so Wikidata5M's few GB
    cost a few seconds per resolve, small next to parsing them on a build and paid once per
    run context (`shared_kg`). No memo: a (path, size, mtime_ns, inode) key is the kind of
    shortcut that misses such an edit.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _fingerprint(paths: list[Path], identity: str = "") -> str:
    """Identity of the inputs for the build cache: each file's resolved path (the statistics name
    it) and content hash (`file_digest`), and what else the plan names."""
    h = hashlib.sha256(f"v{BUILDER_VERSION}\0content\0".encode())
    for p in paths:
        h.update(f"{p.resolve()}\0{file_digest(p)}\0".encode())
    if identity:
        h.update(f"identity\0{identity}".encode())
    return h.hexdigest()[:16]


def build_folder(plan: SourcePlan, cache: Path) -> Path:
    """Where `plan`'s KG is (or will be) built in the KG cache under `cache`."""
    return cache / "kg" / f"{plan.name}-{_fingerprint(plan.inputs, plan.identity)}"


def _refuse_empty(spec: str, store: KGStore, where: str) -> None:
    if store.num_triples == 0:
        raise EmptyKGError(f"kg={spec!r}: the KG from {where} has no triples; a KG needs at least one")


def _cached_build(spec: str, plan: SourcePlan, cache: Path) -> tuple[KGStore, dict[str, Any], dict[str, Any]]:
    """Load the store saved for `plan`'s inputs, or build and save it once (under a file lock).

    A complete build whose store fails `KGStore.load`'s checks (damaged on disk) is named in a
    warning, deleted and rebuilt, like a damaged embedding file; a user-given store folder is
    refused instead (`_saved_folder`)."""
    from filelock import FileLock

    folder = build_folder(plan, cache)
    stats_file = folder / STATS_FILE

    def load(saved_before: bool = True) -> tuple[KGStore, dict[str, Any], dict[str, Any]]:
        t0 = time.perf_counter()
        store = KGStore.load(folder)
        check_side_files(folder)
        extra = plan.load_extra(folder) if plan.load_extra else {}
        if saved_before:   # a later process reusing the build says so, as the passage store and indexes do
            log.info("opened saved KG store %s (%d entities, %d triples) in %.2f s", folder, store.num_entities,
                     len(store.heads), time.perf_counter() - t0)
        return store, json.loads(stats_file.read_text(encoding="utf-8")), extra

    if stats_file.exists():
        try:
            return load()
        except DataFormatError:
            pass  # looked at again under the lock: another process may be rebuilding it
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if stats_file.exists():
            try:
                return load()
            except DataFormatError as exc:
                log.warning("built KG %s is damaged (%s); rebuilding it", folder, exc)
                if (folder / JOURNAL_FILE).is_file():   # an LLM extraction's records: the rebuild replays them
                    os.replace(folder / JOURNAL_FILE, folder.with_name(f"{folder.name}.{JOURNAL_FILE}"))
                shutil.rmtree(folder)
        journal = folder.with_name(f"{folder.name}.{JOURNAL_FILE}")
        store, stats, *tables = plan.build(journal) if plan.resumable else plan.build()
        _refuse_empty(spec, store, ", ".join(map(str, plan.inputs)))
        store.save(folder)
        for t in tables:
            t.save(folder)
        if journal.exists():
            os.replace(journal, folder / JOURNAL_FILE)
        stats_text = json.dumps(stats, indent=1)
        record_side_files(folder, stats_text)
        atomic_text(stats_file, stats_text)  # written last: marks a complete build
    return load(saved_before=False)


def _side_files(folder: Path) -> list[str]:
    """The side files present in a KG folder (besides the store's own)."""
    return [n for n in (STATS_FILE, TEXT_KG_FILE, TABLES_FILE) if (folder / n).is_file()]


def record_side_files(folder: Path, stats_text: str) -> None:
    """Write `side_files.json`: the block crc32s of the side tables now in `folder` and of the
    `stats.json` text about to be written (so that it can be written last)."""
    records = {n: record_file(folder / n) for n in (TEXT_KG_FILE, TABLES_FILE) if (folder / n).is_file()}
    sums = BlockSums()
    sums.update(stats_text.encode("utf-8"))
    records[STATS_FILE] = sums.record()
    atomic_text(folder / SIDE_SUMS_FILE, json.dumps({"files": records}, indent=1))


def check_side_files(folder: Path) -> None:
    """Refuse a KG folder whose side files changed since they were recorded, or have no record
    (a build from before records, or a file added by hand): one line naming the file, with the
    way to rebuild the folder."""
    remedy = rebuild_hint(folder)
    path = folder / SIDE_SUMS_FILE
    present = _side_files(folder)
    if not path.is_file():
        raise DataFormatError(path, None, f"the checksum record of the side files {', '.join(present)} "
                              f"(a folder built before such records cannot be checked: {remedy})", "no such file")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))["files"]
        if not isinstance(records, dict):
            raise TypeError(f"files is {type(records).__name__}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataFormatError(path, None, f"a JSON object {{\"files\": {{name: block record}}}} ({remedy})",
                              f"{type(exc).__name__}: {exc}") from None
    unrecorded = sorted(set(present) - set(records))
    if unrecorded:
        raise DataFormatError(path, None, f"a record for every side file ({remedy})",
                              f"no record for {', '.join(unrecorded)}")
    check_files(folder, records, f"a side file of the KG is damaged: {remedy}", path)


def _saved_folder(spec: str, folder: Path) -> BuiltKG:
    """A folder written by `KGStore.save` or copied from the KG cache (stats and side tables kept,
    and checked against their record: `check_side_files`)."""
    store = KGStore.load(folder)
    if _side_files(folder):
        check_side_files(folder)
    _refuse_empty(spec, store, str(folder))
    stats = {"kg": str(folder), **size_stats(store)}
    if (folder / STATS_FILE).is_file():
        stats = json.loads((folder / STATS_FILE).read_text(encoding="utf-8"))
    extra = text_tables(folder) if (folder / TEXT_KG_FILE).is_file() else {}
    if (folder / TABLES_FILE).is_file():
        extra = tcr_tables(folder)
    return BuiltKG(f"store:{folder.name}", spec, store, stats, extra)


def load_kg(spec: str, *, data_root: Path | str | None = None, cache_dir: Path | str | None = None,
            llm: "LLM | None" = None) -> BuiltKG:
    """The KG named by `spec` (see the module doc), built on first use and cached.

    `llm` extracts a `text:` KG (other sources ignore it); its identity keys the build.
    """
    spec = str(spec).strip()
    prefix, _, arg = spec.partition(":")
    source = SOURCES.get(prefix)
    if source is None:
        folder = Path(spec).expanduser()
        if spec and folder.is_dir():
            return _saved_folder(spec, folder)
        raise ConfigError(f"kg={spec!r}: unknown KG; accepted: {ACCEPTED}")
    if source.plan is None:
        raise ConfigError(f"kg={spec!r}: this KG is extracted with the prompts of {source.provider}, which provides "
                          f"it when imported (its methods do); import {source.provider} first")
    try:
        root = _data_root(data_root)
        plan = source.plan(arg, root, llm) if source.needs_llm else source.plan(arg, root)
    except (ConfigError, MissingDataError) as exc:
        raise type(exc)(f"kg={spec!r}: {exc} (accepted: {source.forms})") from exc
    store, stats, extra = _cached_build(spec, plan, _cache_dir(cache_dir))
    return BuiltKG(plan.name, spec, store, stats, extra)


def check_spec(spec: Any, where: str) -> None:
    """Refuse, without building anything, a KG spec `load_kg` would refuse by its form: empty, or
    neither a known source nor an existing folder. For settings read long before their KG is
    loaded (a notebook's placebo KG, loaded after hours of other runs)."""
    text = str(spec).strip() if isinstance(spec, str) else ""
    if not text:
        raise ConfigError(f"{where}: {spec!r} is empty; expected {ACCEPTED} (None: no such KG)")
    if text.partition(":")[0] not in SOURCES and not Path(text).expanduser().is_dir():
        raise ConfigError(f"{where}: {spec!r} is no KG; accepted: {ACCEPTED}")


def needs_llm(spec: str) -> bool:
    """Whether `spec` names a KG an LLM extracts (`text:`)."""
    source = SOURCES.get(str(spec).strip().partition(":")[0])
    return source is not None and source.needs_llm


def shared_kg(ctx: Any, spec: str, llm: "LLM | None" = None) -> BuiltKG:
    """`load_kg` once per run context (`ctx.memo`), with the context's data root and cache; a
    `text:` KG is extracted by `llm`, else by the context's model (other KGs take no LLM)."""
    llm = (ctx.llm if llm is None else llm) if needs_llm(spec) else None
    key = f"kg:{spec}" if llm is None else f"kg:{spec}@{llm.backend}:{llm.identity}"
    return ctx.memo(key, lambda: load_kg(spec, data_root=ctx.data_root, cache_dir=ctx.cache_dir, llm=llm))
