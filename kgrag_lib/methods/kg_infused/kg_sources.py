"""The KG KG-Infused RAG activates over (built by `kgrag_lib.kg.sources.load_kg`, specs there:
`2wiki-evidence-heldout`, the default here, `2wiki-evidence-oracle`, its upper bound; `wikidata5m` / `wikidata5m:<dir>`, the paper's Wikidata5M-KG;
a saved store folder) plus the dense index over entity descriptions used for seed-entity
retrieval (§3.4, eqs. 3-4). The description embeddings are cached under `<cache>/embeddings/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...kg.sources import MAX_VERBALIZED_FACTS, BuiltKG, shared_kg, verbalized_description


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


def build_kg_source(kg: BuiltKG, embedder: Any, cache_dir: Path, show_progress: bool = True) -> KGSource:
    """Embed the KG's seed candidates' descriptions (cached) and index them."""
    from ...retrieval import DenseIndex, embed_cached

    ids, texts = seed_candidates(kg.store)
    if len(ids) == 0:
        raise ConfigError(f"kg={kg.spec!r}: no entity has both a description and an outgoing triple")
    vecs = embed_cached(embedder, texts, cache_dir=cache_dir, name=f"kg-{kg.name}-descriptions",
                        show_progress=show_progress)
    kind = "flat" if len(ids) <= 2_000_000 else "ivf"
    index = DenseIndex.build(vecs, kind=kind, metric="ip")
    return KGSource(name=kg.name, store=kg.store, entity_ids=ids, index=index,
                    stats={**kg.stats, "seed_candidates": int(len(ids))})


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
    return ctx.memo(key, lambda: build_kg_source(shared_kg(ctx, spec), ctx.embedder, Path(ctx.cache_dir)))
