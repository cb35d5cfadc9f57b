"""Write synthetic stand-ins for KG-Infused RAG's full-size resources in their exact formats, for
rehearsing `--kg wikidata5m:<folder> --corpus wikipedia:<tsv>` where the real files are not.

- `<out>/wikipedia/psgs_w100.tsv`: DPR's layout (header `id<TAB>text<TAB>title`, the text in double
  quotes with inner quotes doubled, a title quoted only when it must be), 100-word passages.
- `<out>/wikidata5m/`: `wikidata5m_all_triplet.txt` (Q<TAB>P<TAB>Q), `wikidata5m_entity.txt` and
  `wikidata5m_relation.txt` (id<TAB>name<TAB>aliases...), `wikidata5m_text.txt` (id<TAB>description),
  with Wikidata5M's proportions (about 4.5 triples per entity, 5% of entities without description).

Words come from a fixed vocabulary, so an encoder sees text, not noise; nothing here is a fact.

    .venv/bin/python scripts/synthetic_paper_data.py --out /tmp/paper-data --passages 100000 --triples 100000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

VOCAB = ("river film album city village football player born married director singer novel war county church "
         "school station museum island mountain bridge castle league season army village railway company "
         "university composer painter poet dynasty kingdom province valley lake harbour festival theatre "
         "album single band guitar orchestra opera election senate minister governor bishop").split()


def write_passages(path: Path, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("id\ttext\ttitle\n")
        for lo in range(0, n, 10_000):
            rows = []
            for i in range(lo, min(lo + 10_000, n)):
                words = [VOCAB[j] for j in rng.integers(0, len(VOCAB), 100)]
                words[7] = f'"{words[7]}"'                       # an inner quote, doubled in the file
                text = " ".join(words).replace('"', '""')
                title = f"Topic {i // 5}" if i % 97 else f'Topic "{i // 5}"'   # some titles need quoting
                title = f'"{title.replace(chr(34), chr(34) * 2)}"' if '"' in title else title
                rows.append(f'{i + 1}\t"{text}"\t{title}\n')
            f.write("".join(rows))


def write_wikidata5m(folder: Path, n_triples: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    n_ent = max(10, n_triples * 10 // 45)
    qnums = np.sort(rng.choice(np.arange(1, n_ent * 20), size=n_ent, replace=False))
    pnums = np.arange(1, 829)
    h = qnums[rng.integers(0, n_ent, n_triples)]
    t = qnums[np.minimum(rng.zipf(1.3, n_triples) - 1, n_ent - 1)]   # skewed tails, as in Wikidata
    r = pnums[np.minimum(rng.zipf(1.5, n_triples) - 1, pnums.size - 1)]
    with open(folder / "wikidata5m_all_triplet.txt", "w", encoding="utf-8") as f:
        f.write("".join(f"Q{a}\tP{b}\tQ{c}\n" for a, b, c in zip(h.tolist(), r.tolist(), t.tolist())))
    described = qnums[rng.random(n_ent) > 0.05]
    with open(folder / "wikidata5m_text.txt", "w", encoding="utf-8") as f:
        f.write("".join(f"Q{q}\tEntity {q} is a {VOCAB[q % len(VOCAB)]} described in a sentence of moderate length.\n"
                        for q in described.tolist()))
    with open(folder / "wikidata5m_entity.txt", "w", encoding="utf-8") as f:
        f.write("".join(f"Q{q}\tname {q}\talias {q}\n" for q in qnums.tolist()))
    with open(folder / "wikidata5m_relation.txt", "w", encoding="utf-8") as f:
        f.write("".join(f"P{p}\trelation {p}\n" for p in pnums.tolist()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--triples", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    write_passages(a.out / "wikipedia" / "psgs_w100.tsv", a.passages, a.seed)
    write_wikidata5m(a.out / "wikidata5m", a.triples, a.seed)
    print(f"wrote {a.passages:,} passages and {a.triples:,} triples under {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
