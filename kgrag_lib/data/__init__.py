"""Dataset loaders: one module per real format, all yielding Question / Passage / Triple records.

Entry points: `load_questions(name, ...)` and `load_corpus(name)` (registry), the per-format
loaders below (`load_jsonl_questions`: kgrag's own format, a dataset in it is one `jsonl_dataset` row), `preprocess_wikidata5m` for the KG-Infused RAG KG, `iter_passages` for
Wikipedia-2018. Bad rows raise DataFormatError naming file and line; absent files raise
MissingDataError saying how to obtain them.
"""

from .bamboogle import load_bamboogle
from .generic import load_jsonl_questions
from .hotpotqa import load_hotpotqa
from .metaqa import load_metaqa_kb, load_metaqa_qa
from .musique import load_musique
from .registry import (
    DATASETS,
    default_path,
    jsonl_dataset,
    load_corpus,
    load_questions,
    metaqa_kb_path,
    wikidata5m_paths,
    wikipedia_path,
)
from .strategyqa import fact_passages, load_strategyqa
from .triples import read_triples
from .twowiki import load_2wiki, load_2wiki_corpus
from .wikidata5m import Wikidata5MKG, preprocess_wikidata5m
from .wikipedia import iter_passages

__all__ = [
    "DATASETS", "Wikidata5MKG", "default_path", "fact_passages", "iter_passages", "jsonl_dataset",
    "load_2wiki", "load_2wiki_corpus", "load_bamboogle", "load_corpus", "load_hotpotqa", "load_jsonl_questions", "load_metaqa_kb",
    "load_metaqa_qa", "load_musique", "load_questions", "load_strategyqa", "metaqa_kb_path",
    "preprocess_wikidata5m", "read_triples", "wikidata5m_paths", "wikipedia_path",
]
