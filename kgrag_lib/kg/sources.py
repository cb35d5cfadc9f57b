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
- `wikidata5m` / `wikidata5m:<folder>`: KG-Infused RAG's Wikidata5M-KG, built by
  `data.wikidata5m.build_wikidata5m_kg` (Appendix B filters, Table 5 statistics) from the
  official files in `<data root>/wikidata5m/` (or `<folder>`).
- the path of a folder written by `KGStore.save`: loaded as it is.

A built store is saved under `<cache>/kg/<name>-<fingerprint of its input files>/`, under a
file lock, with `stats.json` written last (its presence marks a complete build); later calls,
in any process, load it memory-mapped.

Adding a source (SA-RAG and TCR-QF build their KG from documents): write one function
`(arg, data_root) -> SourcePlan` naming the input files (their paths, sizes and mtimes key
the cache) and a `build()` returning `(KGStore, stats)`, and add one row to `SOURCES`. A `text:`
source, say, would read the corpus chunks, extract triples with the LLM, and call
`KGStore.from_triples(triples, provenance=[f"doc:{doc_id}/chunk:{i}", ...])` so every triple
keeps where it came from; anything else its output depends on (the extraction model, the
prompt version) belongs in its name or inputs, so a change rebuilds.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import ConfigError, KgragError, MissingDataError
from ..paths import cache_dir as _cache_dir
from ..paths import data_root as _data_root
from .store import KGStore

BUILDER_VERSION = 1
STATS_FILE = "stats.json"
TWOWIKI_QUESTIONS = "2wiki/lag_2wiki_dev_4000_nocontext.json"
TWOWIKI_CORPUS = "2wiki/HippoRAG_2wiki_1000q_corpus.json"
MAX_VERBALIZED_FACTS = 12


class EmptyKGError(KgragError, ValueError):
    """A source produced a KG without triples: nothing to retrieve or activate over."""


@dataclass
class BuiltKG:
    """A loaded KG: its display name, the spec it came from, the store and its build statistics."""

    name: str
    spec: str
    store: KGStore
    stats: dict[str, Any]


@dataclass(frozen=True)
class SourcePlan:
    """What a source builds: a name, the input files that key the cache, and the build itself."""

    name: str
    inputs: list[Path]
    build: Callable[[], tuple[KGStore, dict[str, Any]]]


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
        from ..data.registry import metaqa_kb_path

        return metaqa_kb_path(data_root).resolve()
    from ..data.common import check_file
    from ..data.triples import FORMS

    path = Path(arg).expanduser()
    if not path.exists():
        raise MissingDataError(f"MetaQA KB not found at {path}; expected a kb.txt-format file with one "
                               f"'subject|relation|object' per line (set --kb, --data-root or $KGRAG_DATA_ROOT)")
    return check_file(path, f"a MetaQA KB file, one triple per line: {FORMS['metaqa']}").resolve()


def metaqa_source(arg: str, data_root: Path) -> SourcePlan:
    path = metaqa_kb_file(arg, data_root)

    def build() -> tuple[KGStore, dict[str, Any]]:
        from ..data.metaqa import load_metaqa_kb

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
    from ..data.twowiki import load_2wiki, load_2wiki_corpus

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
                                   f"{', '.join(str(p.relative_to(data_root)) for p in inputs)} under the data root")
        return SourcePlan(name, inputs, lambda: build_2wiki_evidence_store(data_root, held_out))

    return plan


# ---- Wikidata5M -----------------------------------------------------------------------
def wikidata5m_source(arg: str, data_root: Path) -> SourcePlan:
    from ..data.registry import wikidata5m_paths

    paths = wikidata5m_paths(data_root, folder=Path(arg).expanduser() if arg else None)
    where = str(paths["text_path"].parent)

    def build() -> tuple[KGStore, dict[str, Any]]:
        from ..data.wikidata5m import build_wikidata5m_kg

        store, stats = build_wikidata5m_kg(**paths)
        return store, {"kg": "wikidata5m", "source": where, **stats}

    inputs = [*paths["triple_paths"], paths["entity_alias_path"], paths["relation_alias_path"], paths["text_path"]]
    return SourcePlan("wikidata5m", inputs, build)


# ---- the table and the cache ------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """A row of `SOURCES`: `plan(arg, data_root)` gets the text after `<prefix>:` ("" if none)."""

    plan: Callable[[str, Path], SourcePlan]
    forms: str  # the spec forms it accepts, for error messages


SOURCES: dict[str, Source] = {
    "metaqa": Source(metaqa_source, "'metaqa', 'metaqa:<kb.txt-format file>'"),
    "2wiki-evidence-heldout": Source(twowiki_evidence_source(True), "'2wiki-evidence-heldout'"),
    "2wiki-evidence-oracle": Source(twowiki_evidence_source(False), "'2wiki-evidence-oracle' (upper bound)"),
    "wikidata5m": Source(wikidata5m_source, "'wikidata5m', 'wikidata5m:<folder>'"),
}
ACCEPTED = ", ".join(s.forms for s in SOURCES.values()) + " or the folder of a saved KGStore"


def _fingerprint(paths: list[Path]) -> str:
    """Cheap identity of the inputs (path, size, mtime) for the build cache."""
    h = hashlib.sha256(f"v{BUILDER_VERSION}\0".encode())
    for p in paths:
        st = p.stat()
        h.update(f"{p.resolve()}\0{st.st_size}\0{int(st.st_mtime)}\0".encode())
    return h.hexdigest()[:16]


def _refuse_empty(spec: str, store: KGStore, where: str) -> None:
    if store.num_triples == 0:
        raise EmptyKGError(f"kg={spec!r}: the KG from {where} has no triples; a KG needs at least one")


def _cached_build(spec: str, plan: SourcePlan, cache: Path) -> tuple[KGStore, dict[str, Any]]:
    """Load the store saved for `plan`'s inputs, or build and save it once (under a file lock)."""
    from filelock import FileLock

    folder = cache / "kg" / f"{plan.name}-{_fingerprint(plan.inputs)}"
    stats_file = folder / STATS_FILE
    if not stats_file.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):
            if not stats_file.exists():
                store, stats = plan.build()
                _refuse_empty(spec, store, ", ".join(map(str, plan.inputs)))
                store.save(folder)
                tmp = stats_file.with_suffix(".tmp")
                tmp.write_text(json.dumps(stats, indent=1), encoding="utf-8")
                os.replace(tmp, stats_file)  # written last: marks a complete build
    return KGStore.load(folder), json.loads(stats_file.read_text(encoding="utf-8"))


def load_kg(spec: str, *, data_root: Path | str | None = None, cache_dir: Path | str | None = None) -> BuiltKG:
    """The KG named by `spec` (see the module doc), built on first use and cached."""
    spec = str(spec).strip()
    prefix, _, arg = spec.partition(":")
    source = SOURCES.get(prefix)
    if source is None:
        folder = Path(spec).expanduser()
        if spec and folder.is_dir():
            store = KGStore.load(folder)
            _refuse_empty(spec, store, str(folder))
            return BuiltKG(f"store:{folder.name}", spec, store, {"kg": str(folder), **size_stats(store)})
        raise ConfigError(f"kg={spec!r}: unknown KG; accepted: {ACCEPTED}")
    try:
        plan = source.plan(arg, _data_root(data_root))
    except (ConfigError, MissingDataError) as exc:
        raise type(exc)(f"kg={spec!r}: {exc} (accepted: {source.forms})") from exc
    store, stats = _cached_build(spec, plan, _cache_dir(cache_dir))
    return BuiltKG(plan.name, spec, store, stats)


def shared_kg(ctx: Any, spec: str) -> BuiltKG:
    """`load_kg` once per run context (`ctx.memo`), with the context's data root and cache."""
    return ctx.memo(f"kg:{spec}", lambda: load_kg(spec, data_root=ctx.data_root, cache_dir=ctx.cache_dir))
