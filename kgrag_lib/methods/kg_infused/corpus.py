"""The text corpus D_c and its dense index (KG-Infused RAG §4.3: Wikipedia-2018 + Contriever).

Here the corpus is, per dataset, what the data root ships (`kgrag_lib.data.registry.load_corpus`:
pooled context paragraphs, HippoRAG's 2Wiki corpus, StrategyQA's fact stand-in). The paper
uses one corpus for every dataset; `pooled` mimics that with the union of the HotpotQA, 2Wiki
and MuSiQue corpora, and is also what `auto` gives a dataset without a corpus (Bamboogle).
`wikipedia` / `wikipedia:<tsv>` reads DPR's psgs_w100 (21M passages: a GPU-machine job) through a
memory-mapped passage store (`data.passage_store`, built once per file), so `CorpusIndex.passages`
is a Sequence of Passage decoded on access, and its embeddings are keyed by the store's fingerprint
and streamed to the encoder in blocks (shardable over GPUs: `corpus_embeddings(shard=)`).
`sample:<dataset>[:<split>]:n=<N>[:seed=<S>]` is the pooled context paragraphs of the run's own
seeded question sample, the very passages SA-RAG and TCR-QF index (`data.selection.CorpusSelection`,
the argument of their `text:` / `tcr:` KG specs), so every family can retrieve from one corpus
(notebook 50); `{dataset}` and `{seed}` in it are filled per question with its dataset and the run
seed, as in those KG specs. Passage embeddings are cached on disk (`embed_cached`), so the index is built in seconds
after the first run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...data.passage_store import PassageStore, open_passage_store
from ...data.registry import DATASETS, load_corpus, wikipedia_path
from ...data.selection import CorpusSelection
from ...errors import ConfigError
from ...records import Passage
from ...retrieval import cache_path, embed_cached, source_index
from ..common import resolve_spec

POOLED_PARTS = ("hotpotqa", "2wiki", "musique")
SAMPLE = "sample"   # corpus=sample:<dataset>[:<split>]:n=<N>[:seed=<S>]
ACCEPTED = ("auto, pooled, wikipedia, wikipedia:<psgs_w100.tsv>, sample:<dataset>[:<split>]:n=<N>[:seed=<S>] "
            "or a dataset name")


@dataclass
class CorpusIndex:
    name: str
    passages: Sequence[Passage]  # a list, or a memory-mapped PassageStore (wikipedia)
    index: Any  # kgrag_lib.retrieval.DenseIndex

    def __len__(self) -> int:
        return len(self.passages)


def resolve_corpus_name(setting: str, dataset: str, seed: int = 0) -> str:
    """The corpus a question uses: `auto` = its dataset's own corpus (`pooled` when it has none);
    a `sample:` template with the question's dataset and the run `seed` filled in."""
    if setting.startswith(SAMPLE + ":"):
        return resolve_spec(setting, dataset, seed, setting="corpus")
    if setting != "auto":
        return setting
    spec = DATASETS.get(dataset)
    if spec is None:
        raise ConfigError(f"corpus=auto needs a known dataset; question dataset is {dataset!r} "
                          f"(accepted: {', '.join(DATASETS)}); set corpus explicitly")
    return "pooled" if spec.corpus == "none" else dataset


def sample_selection(name: str) -> "CorpusSelection":
    """The question sample a `sample:` corpus pools the paragraphs of (it must name its size n:
    a dataset's whole corpus is `corpus=<dataset>`)."""
    try:
        selection = CorpusSelection.parse(name.partition(":")[2])
    except ConfigError as exc:
        raise ConfigError(f"corpus={name!r}: {exc} (expected {SAMPLE}:<dataset>[:<split>]:n=<N>[:seed=<S>])") from None
    if selection.n is None:
        raise ConfigError(f"corpus={name!r}: a sample corpus needs the sample's size, n=<N> (e.g. "
                          f"{SAMPLE}:2wiki:dev200:n=30:seed=0); a dataset's whole corpus is corpus=<dataset>")
    return selection


def check_corpus_setting(setting: str) -> None:
    """Refuse a malformed `sample:` corpus before the first question (a template naming
    `{dataset}` is checked when a question fills it)."""
    if setting.startswith(SAMPLE + ":") and "{dataset}" not in setting:
        sample_selection(resolve_corpus_name(setting, "", 0))


def load_passages(name: str, data_root: Path, cache_dir: Path | None = None,
                  show_progress: bool = True) -> Sequence[Passage]:
    """Passages of a corpus name (see the module doc): a list, or for `wikipedia` the passage
    store under `cache_dir` (default `paths.cache_dir()`), built on first use."""
    if name.startswith(SAMPLE + ":"):
        return sample_selection(name).passages(data_root)[0]
    if name == "pooled":
        seen: set[tuple[str, str]] = set()
        out: list[Passage] = []
        for part in POOLED_PARTS:
            for p in load_corpus(part, root=data_root):
                key = (p.title, p.text)
                if key not in seen:
                    seen.add(key)
                    out.append(Passage(pid=f"{part}:{p.pid}", text=p.text, title=p.title))
        return out
    if name == "wikipedia" or name.startswith("wikipedia:"):
        path = Path(name.split(":", 1)[1]).expanduser() if ":" in name else wikipedia_path(data_root)
        return open_passage_store(path, cache_dir=cache_dir, label="wikipedia" if ":" not in name else None,
                                  show_progress=show_progress)
    if name in DATASETS:
        passages = load_corpus(name, root=data_root)
        if not passages:
            raise ConfigError(f"corpus={name!r}: that dataset ships no corpus; use corpus=pooled or wikipedia")
        return passages
    raise ConfigError(f"corpus={name!r}: expected {ACCEPTED} ({', '.join(DATASETS)})")


def _cache_label(name: str) -> str:
    return sample_selection(name).name.replace("text-", "sample-", 1) if name.startswith(SAMPLE + ":") \
        else name.split(":")[0]


def _embedding_args(name: str, passages: Sequence[Passage]) -> tuple[Any, dict[str, Any]]:
    """The text source and `embed_cached` keywords of a corpus: a passage store streams its texts
    under its own key; a list is hashed as before (existing cache files keep their names)."""
    kw: dict[str, Any] = {"name": f"corpus-{_cache_label(name)}"}
    if isinstance(passages, PassageStore):
        return passages, {**kw, "key": passages.texts_key}
    return [p.as_text() for p in passages], kw


def corpus_embedding_source(name: str, data_root: Path, cache_root: Path,
                            show_progress: bool = True) -> tuple[Any, dict[str, Any]]:
    """The texts of a corpus and the `embed_cached` keywords they are stored under (as
    `build_corpus_index` stores them, so `kgrag data embed --corpus` fills the run's cache)."""
    return _embedding_args(name, load_passages(name, data_root, cache_root, show_progress))


def corpus_embeddings(name: str, embedder: Any, data_root: Path, cache_root: Path, *, show_progress: bool = True,
                      batch_size: int = 64, shard: tuple[int, int] | None = None,
                      passages: Sequence[Passage] | None = None) -> np.ndarray:
    """The corpus' passage embeddings (cached). `shard=(i, n)`: only shard i of n (for n GPUs or
    Ray workers; the last one to finish merges, see `emb_cache`)."""
    if passages is None:
        passages = load_passages(name, data_root, cache_root, show_progress)
    texts, kw = _embedding_args(name, passages)
    return embed_cached(embedder, texts, cache_dir=cache_root, show_progress=show_progress, batch_size=batch_size,
                        shard=shard, **kw)


def corpus_cache_path(name: str, embedder: Any, data_root: Path, cache_root: Path) -> Path:
    """The .npy `corpus_embeddings` stores this corpus' embeddings in (whether written yet or not)."""
    texts, kw = _embedding_args(name, load_passages(name, data_root, cache_root, show_progress=False))
    return cache_path(embedder, texts, cache_dir=cache_root, **kw)


def build_corpus_index(name: str, embedder: Any, data_root: Path, cache_root: Path,
                       show_progress: bool = True, batch_size: int = 64, index: str = "auto",
                       placement: str = "auto") -> CorpusIndex:
    """Passages, embeddings and search index of a corpus. A passage store's index is saved once
    and memory-mapped afterwards (`retrieval.source_index`), so a second process starts in seconds."""
    passages = load_passages(name, data_root, cache_root, show_progress)
    texts, kw = _embedding_args(name, passages)   # once: a list corpus's texts are built and hashed here
    vecs = embed_cached(embedder, texts, cache_dir=cache_root, show_progress=show_progress, batch_size=batch_size,
                        **kw)
    key = cache_path(embedder, texts, cache_dir=cache_root, **kw).stem if "key" in kw else None
    return CorpusIndex(name=name, passages=passages,
                       index=source_index(vecs, key=key, label=kw["name"], cache_dir=cache_root, setting=index,
                                          placement=placement))


def _index_suffix(index: str, placement: str) -> str:
    """What other index settings add to a context's memo key (the defaults add nothing)."""
    return "" if (index, placement) == ("auto", "auto") else f":index={index}:placement={placement}"


def load_corpus_index(ctx: Any, name: str, index: str = "auto", placement: str = "auto") -> CorpusIndex:
    """The corpus index for a run context, built once per context (`ctx.memo`)."""
    key = f"kg-infused:corpus:{name}:{ctx.embedder.identity}" + _index_suffix(index, placement)
    return ctx.memo(key, lambda: build_corpus_index(name, ctx.embedder, Path(ctx.data_root), Path(ctx.cache_dir),
                                                    index=index, placement=placement))
