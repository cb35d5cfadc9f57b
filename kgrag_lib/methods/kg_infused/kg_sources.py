"""The KG KG-Infused RAG activates over (built by `kgrag_lib.kg.sources.load_kg`, specs there:
`2wiki-evidence-heldout`, the default here, `2wiki-evidence-oracle`, its upper bound;
`2wiki-evidence-full`, every real 2Wiki triple with real passages only; `wikidata5m` /
`wikidata5m:<dir>`, the paper's Wikidata5M-KG; a saved store folder) plus the dense index over
entity descriptions used for seed-entity retrieval (§3.4, eqs. 3-4). The description embeddings
are cached under `<cache>/embeddings/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ...data.wikidata5m import PAPER_TABLE5
from ...errors import ConfigError
from ...kg.sources import MAX_VERBALIZED_FACTS, SEED_TEXTS_PASSAGES, BuiltKG, shared_kg, verbalized_description
from ...retrieval import cache_path, embed_cached, source_index
from .corpus import _index_suffix


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


def description_text(name: str, description: str) -> str:
    """What gets embedded for an entity: title line then description, like a corpus passage."""
    return f"{name}\n{description}"


# What `SeedTexts` yields, as part of the embedding key: changing the text form changes the key.
SEED_TEXT_FORM = f"name\\ndescription-or-verbalized-{MAX_VERBALIZED_FACTS}-v1"
PASSAGE_SEED_TEXT_FORM = "name\\npassage-v1"   # a KG whose seeds are its real passages only


def described_ids(store: Any) -> np.ndarray:
    """Entities with a stored description, ascending: the seed candidates of a KG whose descriptions
    are real passages only (`2wiki-evidence-full`), with or without a triple (passage-only seeds,
    which, like Wikidata5M entities the question does not need, compete in the seed index)."""
    return np.flatnonzero(store.description_lengths() > 0).astype(np.int64)


def passages_only(kg: BuiltKG) -> bool:
    """Whether `kg`'s seed texts must be its real passages only (its build says so: no seed text
    verbalized from the entity's own triples, which on a KG of gold facts would restate them)."""
    return (kg.stats or {}).get("seed_texts") == SEED_TEXTS_PASSAGES


def seed_candidate_ids(store: Any) -> np.ndarray:
    """Entities eligible as seeds (Appendix B's completeness: a description and an outgoing
    triple), ascending: every head of a triple, since one without a stored description gets one
    verbalized from its out-triples (`SeedTexts`), which a head always has. One pass over the
    head array, no per-entity call."""
    heads = np.asarray(store.heads)
    if heads.size == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.bincount(heads, minlength=store.num_entities)).astype(np.int64)


class SeedTexts:
    """The `name\\ndescription` texts of seed candidates `ids`, built a block at a time when they
    are encoded (an `emb_cache.BlockTexts` source): Wikidata5M's 4.67M would be ~3 GB of strings.
    Entities without a stored description (found from the string offsets) get one verbalized
    from their triples."""

    def __init__(self, store: Any, ids: np.ndarray, verbalize: bool = True):
        self.store = store
        self.ids = np.asarray(ids, dtype=np.int64)
        self.has_description = store.description_lengths()[self.ids] > 0 if self.ids.size else np.zeros(0, bool)
        self.verbalize = verbalize
        if not verbalize and not self.has_description.all():
            raise ConfigError("seed texts from passages only: every seed candidate needs a stored description "
                              f"({int((~self.has_description).sum())} of {self.ids.size} have none)")

    def __len__(self) -> int:
        return int(self.ids.size)

    def iter_texts(self, block: int = 1024, start: int = 0, stop: int | None = None) -> Iterator[list[str]]:
        stop = len(self) if stop is None else min(stop, len(self))
        for a in range(max(start, 0), stop, block):
            b = min(a + block, stop)
            yield [self._text(e, has) for e, has in zip(self.ids[a:b].tolist(), self.has_description[a:b].tolist())]

    def _text(self, e: int, has_description: bool) -> str:
        store = self.store
        name = store.entity_name(e)
        if has_description:
            return description_text(name, store.description(e))
        tids = store.out_triples(e)[:MAX_VERBALIZED_FACTS + 1]
        desc = verbalized_description(name, [(t.r, t.o) for t in (store.triple(int(i)) for i in tids)])
        return description_text(name, desc)

    @property
    def key(self) -> str | None:
        """The embedding-cache key of these texts: the saved store's fingerprint and the text
        form; None for a store built in memory or changed since loading (then the texts are hashed)."""
        fp = getattr(self.store, "fingerprint", None)
        return f"kgstore:{fp}:{SEED_TEXT_FORM if self.verbalize else PASSAGE_SEED_TEXT_FORM}" if fp else None


def seed_candidates(store: Any) -> tuple[np.ndarray, list[str]]:
    """Seed candidates (`seed_candidate_ids`) and their texts as a list: for small KGs and tests;
    `build_kg_source` streams them instead (`SeedTexts`)."""
    ids = seed_candidate_ids(store)
    return ids, [t for block in SeedTexts(store, ids).iter_texts() for t in block]


def kg_seed_embedding_source(kg: BuiltKG) -> tuple[SeedTexts, dict[str, Any]]:
    """The seed texts of `kg` and the `embed_cached` keywords they are stored under: shared by
    `build_kg_source` and `kgrag data embed --kg`, so an array embedded ahead is the one a run opens."""
    real_only = passages_only(kg)
    ids = described_ids(kg.store) if real_only else seed_candidate_ids(kg.store)
    if len(ids) == 0:
        raise ConfigError(f"kg={kg.spec!r}: no entity has " + ("a passage" if real_only else
                                                               "both a description and an outgoing triple"))
    texts = SeedTexts(kg.store, ids, verbalize=not real_only)
    return texts, {"name": f"kg-{kg.name}-descriptions", "key": texts.key}


def kg_seed_cache_path(kg: BuiltKG, embedder: Any, cache_dir: Path) -> Path:
    """The .npy `build_kg_source` stores the seed-description embeddings of `kg` in."""
    texts, kw = kg_seed_embedding_source(kg)
    return cache_path(embedder, texts, cache_dir=cache_dir, **kw)


def build_kg_source(kg: BuiltKG, embedder: Any, cache_dir: Path, show_progress: bool = True,
                    batch_size: int = 64, index: str = "auto", placement: str = "auto") -> KGSource:
    """Embed the KG's seed candidates' descriptions (cached, keyed by the saved store's
    fingerprint: no text is built unless it must be encoded) and index them."""
    texts, kw = kg_seed_embedding_source(kg)
    ids = texts.ids
    vecs = embed_cached(embedder, texts, cache_dir=cache_dir, show_progress=show_progress, batch_size=batch_size, **kw)
    key = cache_path(embedder, texts, cache_dir=cache_dir, **kw).stem if texts.key else None
    found = source_index(vecs, key=key, label=kw["name"], cache_dir=cache_dir, setting=index, placement=placement)
    stats = {**kg.stats, "seed_candidates": int(len(ids)),
             "seed_descriptions_verbalized": int(len(ids) - texts.has_description.sum())}
    if not texts.verbalize:   # passage-only seeds: an entity with a passage and no outgoing triple
        heads = np.asarray(kg.store.heads)
        stats["seeds_without_out_triple"] = int(len(ids) - np.isin(ids, heads).sum())
    return KGSource(name=kg.name, store=kg.store, entity_ids=ids, index=found, stats=stats)


def table5_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """Table 5's layout (# entity, # relation, # triple) for a built KG, with the paper's rows.

    Wikidata5M builds report the original and filtered sizes; other KGs report their own size."""
    keys = ("entities", "relations", "triples")
    if "kept" in stats:
        ours = [{"kg": "Wikidata5M (ours)", **{k: stats["original"][k] for k in keys}},
                {"kg": "Wikidata5M-KG (ours)", **{k: stats["kept"][k] for k in keys}}]
    else:
        ours = [{"kg": f"{stats.get('kg', 'KG')} (ours)", **{k: stats.get(k) for k in keys}}]
    return ours + [{"kg": f"{name} (paper)", **row} for name, row in PAPER_TABLE5.items()]


def load_kg_source(ctx: Any, spec: str, index: str = "auto", placement: str = "auto") -> KGSource:
    """The KG source for a run context, built once per context (`ctx.memo`)."""
    key = f"kg-infused:kg:{spec}:{ctx.embedder.identity}" + _index_suffix(index, placement)
    return ctx.memo(key, lambda: build_kg_source(shared_kg(ctx, spec), ctx.embedder, Path(ctx.cache_dir),
                                                 index=index, placement=placement))
