"""Triple context restoration (TCR-QF §3.3): cached sentence embeddings against re-embedding.

For each retrieved triple TCR-QF picks, among the sentences of the head's and tail's source
chunks, the one most similar to "h r t". Ours (`kg.tcr_kg.restore_context`) embeds every corpus
sentence once (cached) and per triple does a lookup of the candidate rows and one dot product;
the naive way embeds the candidate sentences again for every triple. Both must select the same
sentences. The corpus is real: the pooled paragraphs of sampled 2Wiki dev200 questions, with
a synthetic KG over them (each triple's ends drawn from entities whose sources are 1-3 random
chunks), so no LLM is needed.

    .venv/bin/python bench/tcr_context_bench.py --questions 50 --triples 300 --baseline-triples 60
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=50, help="2Wiki dev200 questions whose paragraphs form the corpus")
    ap.add_argument("--entities", type=int, default=2000, help="entities of the synthetic KG")
    ap.add_argument("--triples", type=int, default=300, help="retrieved triples restored by ours")
    ap.add_argument("--baseline-triples", type=int, default=60, help="of those, restored the naive way too")
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from kgrag_lib.data.common import pool_passages
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.kg.store import KGStore
    from kgrag_lib.kg.extraction import load_tokenizer, token_chunks
    from kgrag_lib.kg.tcr_kg import Entity, TcrKG
    from kgrag_lib.methods.tcr_qf.context import SentenceIndex, restore_context, template
    from kgrag_lib.retrieval import load_embedder

    rng = np.random.default_rng(args.seed)
    qs = load_questions("2wiki", "dev200", n=args.questions, seed=args.seed)
    passages = pool_passages(q.context for q in qs)
    chunks = token_chunks(passages, load_tokenizer("minilm"))
    cids = [c.cid for c in chunks]
    names = [f"entity {i}" for i in range(args.entities)]
    ents = {n: Entity(n, "Thing", "", [cids[j] for j in rng.choice(len(cids), rng.integers(1, 4), replace=False)])
            for n in names}
    heads, tails = rng.integers(0, len(names), args.triples), rng.integers(0, len(names), args.triples)
    triples = [(names[h], f"relation {rng.integers(0, 50)}", names[t]) for h, t in zip(heads, tails)]
    store = KGStore.from_triples(triples)
    kg = TcrKG(store, ents, {}, {c.cid: c for c in chunks})
    embedder = load_embedder(args.embedder)

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        sents = SentenceIndex.build(chunks, embedder, Path(tmp), "bench-sentences")
        index_s = time.perf_counter() - t
    templates = np.asarray(embedder.encode([template(tr) for tr in triples]), dtype=np.float32)

    ours = []
    for tr, v in zip(triples, templates):
        t = time.perf_counter()
        got = restore_context(kg, sents, [tr], v[None, :])
        ours.append(time.perf_counter() - t)
    picked = restore_context(kg, sents, triples, templates)

    naive, same = [], 0
    nb = min(args.baseline_triples, len(triples))
    for tr, v, mine in zip(triples[:nb], templates[:nb], picked[:nb]):
        t = time.perf_counter()
        rows = sents.candidates([*kg.sources(tr[0]), *kg.sources(tr[2])])
        texts = [sents.texts[i] for i in rows]
        vecs = np.asarray(embedder.encode(texts), dtype=np.float32)
        best = texts[int(np.argmax(vecs @ v))] if texts else ""
        naive.append(time.perf_counter() - t)
        same += best == mine
    cands = [len(sents.candidates([*kg.sources(a), *kg.sources(b)])) for a, _, b in triples]
    med = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    p95 = lambda xs: float(np.percentile(xs, 95)) * 1e3  # noqa: E731
    print("=== TCR context restoration ===")
    print(f"corpus: {len(passages)} paragraphs of {len(qs)} 2Wiki dev200 questions -> {len(chunks)} chunks, "
          f"{len(sents.texts)} sentences embedded once in {index_s:.1f} s ({embedder.identity})")
    print(f"triples: {len(triples)}; candidate sentences per triple median {statistics.median(cands):.0f}, "
          f"max {max(cands)}")
    print(f"ours (cached sentence vectors: lookup + dot product): median {med(ours):.3f} ms, p95 {p95(ours):.3f} ms")
    print(f"naive (re-embed the candidates per triple), first {nb}: median {med(naive):.1f} ms, "
          f"p95 {p95(naive):.1f} ms")
    print(f"speed-up (median): {statistics.median(naive) / statistics.median(ours):.0f}x; "
          f"same sentence selected: {same}/{nb}")
    return 0 if same == nb else 1


if __name__ == "__main__":
    raise SystemExit(main())
