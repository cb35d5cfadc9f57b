"""The KGs KG-Infused RAG activates over, all held in the one `KGStore`, plus the dense index
over entity descriptions used for seed-entity retrieval (§3.4, eqs. 3-4).

Sources (the `kg` config value):
- `2wiki-evidence` (the default here): the union of the Wikidata `evidences` triples of the
  4,000 2WikiMultiHopQA dev questions of lag_2wiki_dev_4000_nocontext.json. Real Wikidata facts
  with names, but only the facts those questions were generated from; an entity's description
  is its passage in HippoRAG's 2Wiki corpus (title match) where there is one, else a sentence
  verbalized from its own triples. 2Wiki questions from that dev file find their own gold
  facts in this KG, which makes it easier than Wikidata5M-KG for them.
- `wikidata5m` or `wikidata5m:<dir>`: the paper's Wikidata5M-KG, built by
  `kgrag_lib.data.wikidata5m.build_wikidata5m_kg` (Appendix B filters, Table 5 statistics) from
  the official files in `<data root>/wikidata5m/` (or `<dir>`).
- a path to a folder written by `KGStore.save`.

Both the built store and the description embeddings are cached under `<cache>/kg/` and
`<cache>/embeddings/`: the first use builds them, later processes load them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...errors import ConfigError, MissingDataError

BUILDER_VERSION = 1
TWOWIKI_QUESTIONS = "2wiki/lag_2wiki_dev_4000_nocontext.json"
TWOWIKI_CORPUS = "2wiki/HippoRAG_2wiki_1000q_corpus.json"
WIKIDATA5M_FILES = {
    "entity": "wikidata5m_entity.txt",
    "relation": "wikidata5m_relation.txt",
    "text": "wikidata5m_text.txt",
}
WIKIDATA5M_TRIPLES = (
    ("wikidata5m_transductive_train.txt", "wikidata5m_transductive_valid.txt", "wikidata5m_transductive_test.txt"),
    ("wikidata5m_all_triplet.txt",),
)
MAX_VERBALIZED_FACTS = 12


@dataclass
class KGSource:
    """A KG plus the seed-entity index: `index` row i is entity `entity_ids[i]`."""

    name: str
    store: Any                        # kgrag_lib.kg.KGStore
    entity_ids: np.ndarray            # seed candidates: entities with a description and an out-triple
    index: Any                        # kgrag_lib.retrieval.DenseIndex over their description embeddings
    stats: dict[str, Any] = field(default_factory=dict)

    def seed_entities(self, qvec: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Top-k entities by inner product of the query with the descriptions (eqs. 3-4)."""
        if k <= 0 or len(self.entity_ids) == 0:
            return []
        scores, rows = self.index.search(np.asarray(qvec, dtype=np.float32).reshape(1, -1), k)
        return [(int(self.entity_ids[r]), float(s)) for r, s in zip(rows[0], scores[0]) if r >= 0]


# ---- helpers ------------------------------------------------------------------------
def _fingerprint(paths: list[Path], extra: str = "") -> str:
    """Cheap identity of the inputs (path, size, mtime) for the build cache."""
    h = hashlib.sha256(f"v{BUILDER_VERSION}\0{extra}".encode())
    for p in paths:
        st = p.stat()
        h.update(f"{p.resolve()}\0{st.st_size}\0{int(st.st_mtime)}\0".encode())
    return h.hexdigest()[:16]


def _cached_store(folder: Path, build: Callable[[], tuple[Any, dict[str, Any]]]) -> tuple[Any, dict[str, Any]]:
    """Load the store saved in `folder`, or build and save it once (under a file lock)."""
    from filelock import FileLock

    from ...kg import KGStore

    stats_file = folder / "kg_infused_stats.json"
    if stats_file.exists():
        return KGStore.load(folder), json.loads(stats_file.read_text(encoding="utf-8"))
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not stats_file.exists():
            store, stats = build()
            store.save(folder)
            tmp = stats_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(stats, indent=1), encoding="utf-8")
            os.replace(tmp, stats_file)  # written last: marks a complete build
    return KGStore.load(folder), json.loads(stats_file.read_text(encoding="utf-8"))


def verbalized_description(name: str, facts: list[tuple[str, str]]) -> str:
    """A description for an entity without a text: `name: relation object; ...`."""
    shown = facts[:MAX_VERBALIZED_FACTS]
    body = "; ".join(f"{r} {o}" for r, o in shown)
    more = f"; and {len(facts) - len(shown)} more facts" if len(facts) > len(shown) else ""
    return f"{name}: {body}{more}." if body else ""


def description_text(name: str, description: str) -> str:
    """What gets embedded for an entity: title line then description, like a corpus passage."""
    return f"{name}\n{description}"


# ---- 2wiki evidence slice -------------------------------------------------------------
def build_2wiki_evidence_store(data_root: Path) -> tuple[Any, dict[str, Any]]:
    """Build the 2Wiki-evidence KG (see the module doc) from the real files in `data_root`."""
    from ...data.twowiki import load_2wiki, load_2wiki_corpus
    from ...kg import KGStore

    qpath, cpath = data_root / TWOWIKI_QUESTIONS, data_root / TWOWIKI_CORPUS
    for p in (qpath, cpath):
        if not p.exists():
            raise MissingDataError(f"{p} not found: the 2wiki-evidence KG is built from "
                                   f"{TWOWIKI_QUESTIONS} and {TWOWIKI_CORPUS} under the data root")
    triples, prov = [], []
    n_questions = 0
    for q in load_2wiki(qpath):
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
        "kg": "2wiki-evidence",
        "source": [TWOWIKI_QUESTIONS, TWOWIKI_CORPUS],
        "questions": n_questions,
        "evidence_rows": len(triples),
        "entities": int(store.num_entities),
        "relations": int(store.num_relations),
        "triples": int(store.num_triples),
        "entities_heading_a_triple": int(heads.size),
        "descriptions_from_corpus_passage": from_passage,
        "descriptions_verbalized_from_triples": from_facts,
        "entities_without_description": int(store.num_entities - from_passage - from_facts),
    }
    return store, stats


# ---- Wikidata5M ----------------------------------------------------------------------
def wikidata5m_paths(folder: Path) -> dict[str, Any]:
    """The official Wikidata5M files in `folder`, or a MissingDataError saying what is needed."""
    missing = [n for n in WIKIDATA5M_FILES.values() if not (folder / n).exists()]
    triple_files = next(([folder / n for n in group] for group in WIKIDATA5M_TRIPLES
                         if all((folder / n).exists() for n in group)), None)
    if missing or triple_files is None:
        need = missing + ([] if triple_files else ["wikidata5m_transductive_{train,valid,test}.txt "
                                                   "or wikidata5m_all_triplet.txt"])
        raise MissingDataError(
            f"Wikidata5M files missing in {folder}: {', '.join(need)}. Download the transductive split, "
            f"the alias files and the corpus from https://deepgraphlearning.github.io/project/wikidata5m "
            f"and unpack them there (or pass kg=wikidata5m:<folder>).")
    return {"triples": triple_files, **{k: folder / v for k, v in WIKIDATA5M_FILES.items()}}


def build_wikidata5m_store(folder: Path, **kw: Any) -> tuple[Any, dict[str, Any]]:
    """Wikidata5M-KG through the foundation loader (Appendix B filters + Table 5 statistics)."""
    from ...data.wikidata5m import build_wikidata5m_kg

    paths = wikidata5m_paths(folder)
    store, stats = build_wikidata5m_kg(paths["triples"], paths["entity"], paths["relation"], paths["text"], **kw)
    return store, {"kg": "wikidata5m", "source": str(folder), **stats}


# ---- resolution ------------------------------------------------------------------------
def resolve_kg(spec: str, data_root: Path, cache_root: Path) -> tuple[str, Any, dict[str, Any]]:
    """(display name, KGStore, statistics) for a `kg` config value; built stores are cached."""
    if spec == "2wiki-evidence":
        inputs = [data_root / TWOWIKI_QUESTIONS, data_root / TWOWIKI_CORPUS]
        if not all(p.exists() for p in inputs):
            build_2wiki_evidence_store(data_root)  # raises the MissingDataError
        folder = cache_root / "kg" / f"2wiki-evidence-{_fingerprint(inputs)}"
        store, stats = _cached_store(folder, lambda: build_2wiki_evidence_store(data_root))
        return spec, store, stats
    if spec == "wikidata5m" or spec.startswith("wikidata5m:"):
        folder = Path(spec.split(":", 1)[1]).expanduser() if ":" in spec else data_root / "wikidata5m"
        paths = wikidata5m_paths(folder)
        inputs = [*paths["triples"], paths["entity"], paths["relation"], paths["text"]]
        out = cache_root / "kg" / f"wikidata5m-kg-{_fingerprint(inputs)}"
        store, stats = _cached_store(out, lambda: build_wikidata5m_store(folder))
        return "wikidata5m", store, stats
    path = Path(spec).expanduser()
    if path.is_dir():
        from ...kg import KGStore

        store = KGStore.load(path)
        stats = {"kg": str(path), "entities": int(store.num_entities),
                 "relations": int(store.num_relations), "triples": int(store.num_triples)}
        return f"store:{path.name}", store, stats
    raise ConfigError(f"kg={spec!r}: expected '2wiki-evidence', 'wikidata5m', 'wikidata5m:<folder>' "
                      f"or the folder of a saved KGStore")


def seed_candidates(store: Any) -> tuple[np.ndarray, list[str]]:
    """Entities eligible as seeds (Appendix B's completeness: a description and an outgoing
    triple) and the texts to embed for them. Entities without a stored description get one
    verbalized from their triples, so any saved store works."""
    heads = np.unique(np.asarray(store.heads, dtype=np.int64))
    ids, texts = [], []
    for e in heads.tolist():
        name = store.entity_name(e)
        desc = store.description(e) or ""
        if not desc:
            tids = store.out_triples(e)[:MAX_VERBALIZED_FACTS + 1]
            desc = verbalized_description(name, [(t.r, t.o) for t in (store.triple(int(i)) for i in tids)])
        if desc:
            ids.append(e)
            texts.append(description_text(name, desc))
    return np.asarray(ids, dtype=np.int64), texts


def build_kg_source(spec: str, embedder: Any, data_root: Path, cache_root: Path,
                    show_progress: bool = True) -> KGSource:
    """Resolve the KG, embed its seed candidates' descriptions (cached), index them."""
    from ...retrieval import DenseIndex, embed_cached

    name, store, stats = resolve_kg(spec, data_root, cache_root)
    ids, texts = seed_candidates(store)
    if len(ids) == 0:
        raise ConfigError(f"kg={spec!r}: no entity has both a description and an outgoing triple")
    vecs = embed_cached(embedder, texts, cache_dir=cache_root, name=f"kg-{name}-descriptions",
                        show_progress=show_progress)
    kind = "flat" if len(ids) <= 2_000_000 else "ivf"
    index = DenseIndex.build(vecs, kind=kind, metric="ip")
    return KGSource(name=name, store=store, entity_ids=ids, index=index,
                    stats={**stats, "seed_candidates": int(len(ids))})


def table5_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """Table 5's layout (# entity, # relation, # triple) for a built KG, with the paper's rows.

    Wikidata5M builds report the original and filtered sizes; other KGs report their own size."""
    from ...data.wikidata5m import PAPER_TABLE5

    keys = ("entities", "relations", "triples")
    if "kept" in stats:
        ours = [{"kg": "Wikidata5M (ours)", **{k: stats["original"][k] for k in keys}},
                {"kg": "Wikidata5M-KG (ours)", **{k: stats["kept"][k] for k in keys}}]
    else:
        ours = [{"kg": f"{stats.get('kg', 'KG')} (ours)", **{k: stats.get(k) for k in keys}}]
    return ours + [{"kg": f"{name} (paper)", **row} for name, row in PAPER_TABLE5.items()]


def load_kg_source(ctx: Any, spec: str) -> KGSource:
    """The KG source for a run context, built once per context (`ctx.memo`)."""
    key = f"kg-infused:kg:{spec}:{ctx.embedder.identity}"
    return ctx.memo(key, lambda: build_kg_source(spec, ctx.embedder, Path(ctx.data_root), Path(ctx.cache_dir)))
