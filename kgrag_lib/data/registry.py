"""Dataset names -> files under the data root, loaders, seeded samples and pooled corpora.

Methods and notebooks ask for `load_questions("hotpotqa", n=20, seed=0)` and never spell a
path; the data root comes from `kgrag_lib.paths.data_root` (argument, $KGRAG_DATA_ROOT, or
../shared/data). Corpora here are what each file ships (see `load_corpus`); the papers'
Wikipedia-2018 corpus and full Wikidata5M are read by `wikipedia` / `wikidata5m` when present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import ConfigError, DataFormatError, MissingDataError
from ..paths import data_root
from ..records import Passage, Question
from . import bamboogle, hotpotqa, musique, strategyqa, twowiki
from .bamboogle import load_bamboogle
from .common import DATASET_MARKS, check_file, pool_passages
from .generic import FORM as JSONL_FORM, load_jsonl_questions
from .hotpotqa import load_hotpotqa
from .manifest import load_manifest, obtain_hint
from .metaqa import QA_FORM, load_metaqa_qa
from .musique import load_musique
from .strategyqa import fact_passages, load_strategyqa
from .triples import FORMS
from .twowiki import load_2wiki, load_2wiki_corpus

# What a dataset can give a method (`DatasetSpec.provides`); a method that runs on any dataset in kgrag's own
# question format names the parts it reads (`MethodSpec.needs`) and is refused a dataset that lacks one.
PARTS = {
    "question": "the question text",
    "answers": "gold answers (the first, then its aliases)",
    "corpus": "passages to retrieve from (pooled context paragraphs, facts, or a corpus file)",
}


@dataclass(frozen=True)
class DatasetSpec:
    """One benchmark: its files (relative to the data root) and how its corpus is formed."""

    name: str
    manifest_key: str
    loader: Callable[..., list[Question]]
    splits: dict[str, str]
    default_split: str
    corpus: str  # "none" | "pooled" | "facts" | a relative corpus file path
    form: str  # the question record form, for error messages
    qtypes: dict[str, str] = field(default_factory=dict)  # MetaQA: split -> aligned qtype file
    note: str = ""
    # the record fields only this dataset's files carry: every other dataset's loader refuses a record with
    # one, naming this dataset (a 2Wiki file read as HotpotQA fails on its first record, not in the scores)
    marks: tuple[str, ...] = ()
    # reads `corpus` when it is a file (a path, not none/pooled/facts), with the form its errors show
    corpus_loader: Callable[[Path], list[Passage]] | None = None
    corpus_form: str = ""
    # extra keyword files the loader reads beside the question file, by data root (2Wiki's id aliases)
    loader_files: Callable[[str | Path | None], dict[str, Path]] | None = None
    many_answers: bool = False  # several gold answers per question (MetaQA): `kgrag data stats` shows their spread
    # further manifest entries its loader reads when present (2Wiki's id aliases): `data fetch --profile` gets them
    companions: tuple[str, ...] = ()
    # kgrag's own question format (`jsonl_dataset`): methods that can run on any such dataset accept it by
    # what it provides (`provides`, `MethodSpec.needs`) instead of by name
    generic: bool = False
    # how to get its files where no manifest entry lists them (a row with no download source)
    obtain: str = ""

    @property
    def provides(self) -> frozenset[str]:
        """The PARTS its questions and corpus give a method."""
        return frozenset({"question", "answers", *(("corpus",) if self.corpus != "none" else ())})

    def __post_init__(self) -> None:
        if self.corpus not in ("none", "pooled", "facts") and self.corpus_loader is None:
            raise ConfigError(f"dataset {self.name!r}: corpus {self.corpus!r} is a file, so the DatasetSpec needs "
                              f"its corpus_loader (and corpus_form)")


def _metaqa(k: int) -> DatasetSpec:
    return DatasetSpec(
        name=f"metaqa-{k}hop", manifest_key="metaqa",
        loader=load_metaqa_qa,
        splits={"test": f"metaqa/{k}-hop/vanilla/qa_test.txt", "dev": f"metaqa/{k}-hop/vanilla/qa_dev.txt"},
        default_split="test", corpus="none", form=f"one question per line: {QA_FORM}",
        qtypes={"test": f"metaqa/qtype/{k}hop_qa_test_qtype.txt", "dev": f"metaqa/qtype/{k}hop_qa_dev_qtype.txt"},
        note="KG question answering over metaqa/kb.txt (see metaqa_kb_path); no text corpus.", many_answers=True,
    )


def jsonl_dataset(name: str, splits: dict[str, str], *, default_split: str | None = None, corpus: str = "pooled",
                  note: str = "", many_answers: bool = False, obtain: str = "") -> DatasetSpec:
    """A dataset in kgrag's own question format (`data/generic.py`: `{"id", "question", "answers", "context"?,
    ...}` per line): one registry row, no loader code, no manifest entry needed. `corpus` is "pooled" (the
    questions' `context` paragraphs, de-duplicated by id) or "none"; `obtain` says how to get the files (a
    missing file's error shows it); its manifest key is its name, read when the manifest has such an entry
    (then `kgrag data fetch` and `data check` know it too). Methods that run on any such dataset accept it
    by what it provides (`DatasetSpec.provides`)."""
    if corpus not in ("pooled", "none"):
        raise ConfigError(f"dataset {name!r}: a JSONL dataset's corpus is 'pooled' (its questions' context "
                          f"paragraphs) or 'none', not {corpus!r}")
    if not splits:
        raise ConfigError(f"dataset {name!r}: at least one split (name -> file under the data root)")
    return DatasetSpec(name, name, load_jsonl_questions, dict(splits), default_split or next(iter(splits)), corpus,
                       JSONL_FORM, note=note, many_answers=many_answers, generic=True, obtain=obtain)


def _twowiki_files(root: str | Path | None) -> dict[str, Path]:
    """2Wiki's id aliases (the official scorer's) beside its questions, when there are any."""
    aliases = twowiki_aliases_path(root)
    return {"aliases_path": aliases} if aliases is not None else {}


DATASETS: dict[str, DatasetSpec] = {
    **{f"metaqa-{k}hop": _metaqa(k) for k in (1, 2, 3)},
    "hotpotqa": DatasetSpec(
        "hotpotqa", "hotpotqa", load_hotpotqa,
        {"distractor500": "hotpotqa/AMOR_test500_distractor.jsonl", "dev100": "hotpotqa/AMOR_dev100.jsonl"},
        "distractor500", "pooled", hotpotqa.FORM,
        note="corpus = pooled, de-duplicated context paragraphs of the question file; in the 500-question "
             "file 349 questions lack at least one gold page in their context (meta['gold_in_context']).",
        marks=("level",),
    ),
    "2wiki": DatasetSpec(
        "2wiki", "2wiki", load_2wiki,
        {
            "corpus354": "2wiki/DERIVED_lag_dev_questions_with_gold_titles_in_HippoRAG_corpus_354.json",
            "dev200": "2wiki/MIGRES_200_2wiki.jsonl",
            "dev4000": "2wiki/lag_2wiki_dev_4000_nocontext.json",
        },
        "corpus354", "2wiki/HippoRAG_2wiki_1000q_corpus.json", twowiki.FORM,
        note="default split = the 354 dev questions whose gold pages are all in the 6,119-passage "
             "HippoRAG corpus, so open retrieval over that corpus can find the evidence.",
        marks=("evidences", "entity_ids", "evidences_id", "answer_id"),
        corpus_loader=load_2wiki_corpus, corpus_form=twowiki.CORPUS_FORM, loader_files=_twowiki_files,
        companions=("2wiki-aliases",),
    ),
    "musique": DatasetSpec(
        "musique", "musique", load_musique,
        {"dev200": "musique/MIGRES_200_musique_ans.jsonl",
         "dev2417": "musique/lag_musique_ans_dev_2417_noparagraphs.json"},
        "dev200", "pooled", musique.FORM,
        note="corpus = pooled, de-duplicated paragraphs of the 200 questions with paragraphs.",
        marks=("paragraphs", "question_decomposition", "answerable"),
    ),
    "bamboogle": DatasetSpec(
        "bamboogle", "bamboogle", load_bamboogle,
        {"test": "bamboogle/bamboogle.json", "csv": "bamboogle/bamboogle.csv"},
        "test", "none", f"{bamboogle.FORM} (JSON), or {bamboogle.CSV_FORM}",
        note="no corpus ships with Bamboogle (its questions were written against Google search).",
        marks=("Question", "Q1", "Q2"),
    ),
    "strategyqa": DatasetSpec(
        "strategyqa", "strategyqa", load_strategyqa,
        {"train": "strategyqa/strategyqa_train.json",
         "evidence229": "strategyqa/MIGRES_229_strategyqa_with_evidence.jsonl"},
        "train", "facts", strategyqa.FORM,
        note="corpus = the annotated facts (pid 'fact:...'): a gold-derived stand-in for the missing "
             "evidence paragraphs, easier than real retrieval; say so in every table built on it.",
        marks=("facts", "term", "description"),
    ),
}
# the loaders (below this module) read the marks of every registered dataset from here
DATASET_MARKS.update({spec.name: spec.marks for spec in DATASETS.values() if spec.marks})

WIKIPEDIA_PATH = "wikipedia/psgs_w100.tsv"
WIKIDATA5M_DIR = "wikidata5m"
WIKIDATA5M_FILES = {
    "entity_alias_path": "wikidata5m_entity.txt",
    "relation_alias_path": "wikidata5m_relation.txt",
    "text_path": "wikidata5m_text.txt",
}
# The triple files, first complete group wins: all_triplet (21,354,359 rows = Table 5's
# "Wikidata5M"), else the transductive split.
WIKIDATA5M_TRIPLES = (
    ("wikidata5m_all_triplet.txt",),
    ("wikidata5m_transductive_train.txt", "wikidata5m_transductive_valid.txt", "wikidata5m_transductive_test.txt"),
)


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise ConfigError(f"unknown dataset {name!r}; accepted: {', '.join(DATASETS)}") from None


def _missing(path: Path, manifest_key: str, what: str, root: Path | None = None) -> MissingDataError:
    where = (f"looked under the data root {root}, chosen by the root argument, else $KGRAG_DATA_ROOT, "
             f"else ../shared/data beside the repository, else the per-user data folder" if root
             else "looked at the path given")
    return MissingDataError(f"{what}: file not found: {path} ({where}). {_how_to_obtain(manifest_key, root)}")


def _how_to_obtain(manifest_key: str, root: Path | None) -> str:
    """The manifest's steps for the file; for a registry row no manifest entry holds, that it has no download
    source and what to write where."""
    row = next((s for s in DATASETS.values() if s.manifest_key == manifest_key), None)
    if row is None or manifest_key in load_manifest()["datasets"]:
        return f"How to obtain it: {obtain_hint(manifest_key, root=root)}"
    return (f"The registry row {row.name!r} (DATASETS in kgrag_lib/data/registry.py) expects it there and has no "
            f"download source (no entry {manifest_key!r} in kgrag_lib/data/manifests/datasets.yaml): "
            f"{row.obtain or 'put the file there'}; each record {row.form}.")


def _checked(path: Path, root: Path | None, manifest_key: str, what: str, must_exist: bool, form: str = "") -> Path:
    if must_exist and not path.is_file():
        if path.exists():  # a directory: named as one, without download advice
            check_file(path, f"the {what} file" + (f", {form}" if form else ""))
        raise _missing(path, manifest_key, what, root)
    return path


def default_path(name: str, split: str | None = None, root: str | Path | None = None, *,
                 must_exist: bool = False) -> Path:
    """The file of a dataset split under the data root (MissingDataError if `must_exist` and absent)."""
    spec = get_spec(name)
    split = split or spec.default_split
    if split not in spec.splits:
        raise ConfigError(f"dataset {name!r} has no split {split!r}; accepted: {', '.join(spec.splits)}")
    base = data_root(root)
    return _checked(base / spec.splits[split], base, spec.manifest_key, f"{name} ({split})", must_exist, spec.form)


def metaqa_kb_path(root: str | Path | None = None) -> Path:
    """MetaQA's kb.txt under the data root; MissingDataError saying how to get it when absent."""
    base = data_root(root)
    return _checked(base / "metaqa" / "kb.txt", base, "metaqa", "MetaQA KB", True,
                    f"one triple per line: {FORMS['metaqa']}")


def wikipedia_path(root: str | Path | None = None, *, must_exist: bool = True) -> Path:
    """DPR's psgs_w100.tsv (Wikipedia-2018) under the data root; not shipped with the repository."""
    base = data_root(root)
    return _checked(base / WIKIPEDIA_PATH, base, "wikipedia-2018", "Wikipedia-2018 psgs_w100", must_exist)


def wikidata5m_paths(root: str | Path | None = None, *, folder: str | Path | None = None,
                     must_exist: bool = True) -> dict[str, Path | list[Path]]:
    """Full Wikidata5M files in `folder` (default `<data root>/wikidata5m`), keyed by
    `preprocess_wikidata5m`'s parameter names: `preprocess_wikidata5m(**wikidata5m_paths())`.

    With `must_exist`, a MissingDataError lists every missing file and how to get them.
    """
    base = Path(folder).expanduser() if folder else data_root(root) / WIKIDATA5M_DIR
    triples = next((g for g in WIKIDATA5M_TRIPLES if all((base / n).is_file() for n in g)), WIKIDATA5M_TRIPLES[0])
    out: dict[str, Path | list[Path]] = {"triple_paths": [base / n for n in triples],
                                         **{k: base / n for k, n in WIKIDATA5M_FILES.items()}}
    missing = [n for n in (*triples, *WIKIDATA5M_FILES.values()) if not (base / n).is_file()]
    if must_exist and missing:
        raise MissingDataError(
            f"Wikidata5M files missing in {base}: {', '.join(missing)} (the triples may also be "
            f"wikidata5m_transductive_{{train,valid,test}}.txt). How to obtain them: {obtain_hint('wikidata5m')}")
    return out


TWOWIKI_ALIASES_ENV = "KGRAG_2WIKI_ALIASES"
TWOWIKI_ALIASES = "2wiki/id_aliases.json"


def twowiki_aliases_path(root: str | Path | None = None) -> Path | None:
    """The 2Wiki id_aliases.json the official scorer reads: $KGRAG_2WIKI_ALIASES (which must
    exist), else `<data root>/2wiki/id_aliases.json` when it is there, else None (no aliases)."""
    import os

    env = os.environ.get(TWOWIKI_ALIASES_ENV)
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError(f"${TWOWIKI_ALIASES_ENV}={env}: no such file; point it at the ID-enhanced 2Wiki "
                              f"release's id_aliases.json ({twowiki.ALIASES_FORM}) or unset it")
        return p
    p = data_root(root) / TWOWIKI_ALIASES
    return p if p.is_file() else None


def load_questions(
    name: str,
    split: str | None = None,
    path: str | Path | None = None,
    root: str | Path | None = None,
    n: int | None = None,
    seed: int = 0,
) -> list[Question]:
    """Questions of a dataset split (or of `path`, read with the dataset's loader); a file
    without questions is refused.

    `n` draws a seeded sample without replacement, `numpy.random.default_rng(seed).choice`,
    kept in the drawn order; the same (file, n, seed) always gives the same questions. An `n`
    above the file size returns every question in a seeded random order.
    """
    spec = get_spec(name)
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0):
        raise ConfigError(f"n={n!r}: expected a positive integer sample size (or None for all questions)")
    if path is None:
        split = split or spec.default_split
        file = default_path(name, split, root, must_exist=True)
    else:
        file = _checked(Path(path), None, spec.manifest_key, name, True, spec.form)
    kwargs: dict[str, Path] = dict(spec.loader_files(root)) if spec.loader_files else {}
    if spec.qtypes:
        qsplit = split if path is None else next((s for s, rel in spec.splits.items()
                                                   if (data_root(root) / rel).resolve() == file.resolve()), None)
        if qsplit is not None and (data_root(root) / spec.qtypes[qsplit]).is_file():
            kwargs["qtype_path"] = data_root(root) / spec.qtypes[qsplit]
    questions = spec.loader(file, dataset=name, **kwargs)
    if not questions:
        raise DataFormatError(file, None, f"at least one {name} question, each {spec.form}", "no questions")
    _check_questions(questions, file, name)
    if n is None:
        return questions
    idx = np.random.default_rng(seed).choice(len(questions), size=min(int(n), len(questions)), replace=False)
    return [questions[i] for i in idx.tolist()]


def _check_questions(questions: list[Question], file: Path, name: str) -> None:
    """Refuse what would score wrong: a question without text (it would be sent as "None"), or two
    questions under one id (metrics and resume key on the id), naming the records."""
    first: dict[str, int] = {}
    for i, q in enumerate(questions, start=1):
        if not isinstance(q.question, str) or not q.question.strip():
            raise DataFormatError(file, None, f"every {name} question with its text",
                                  f"question {i} (id {q.qid!r}) has no text: {q.question!r}")
        if q.qid in first:
            raise DataFormatError(file, None, f"one {name} question per id",
                                  f"id {q.qid!r} at questions {first[q.qid]} and {i} of the file")
        first[q.qid] = i


def load_corpus(
    name: str, root: str | Path | None = None, *, split: str | None = None, path: str | Path | None = None
) -> list[Passage]:
    """The passages a dataset ships, as a retrieval corpus.

    - a file corpus, read by the spec's `corpus_loader`: 2wiki, HippoRAG's 6,119-passage corpus (pid = title).
    - hotpotqa, musique and a `jsonl_dataset` with corpus pooled: the pooled, de-duplicated context paragraphs
      of every question in the file.
    - strategyqa: the pooled annotated facts, pid `fact:<digest>` — a gold-derived stand-in.
    - bamboogle, metaqa-*: none (empty list); Bamboogle has no corpus, MetaQA is KG-only.
    `path` is the corpus file for 2wiki and the question file to pool from otherwise (`split`
    picks a registry question file instead; default split when neither is given).
    """
    spec = get_spec(name)
    if spec.corpus == "none":
        return []
    if spec.corpus not in ("pooled", "facts"):
        assert spec.corpus_loader is not None   # (DatasetSpec refuses a file corpus without its reader)
        file = _checked(Path(path) if path else data_root(root) / spec.corpus, None if path else data_root(root),
                        spec.manifest_key, f"{name} corpus", True, spec.corpus_form)
        passages = spec.corpus_loader(file)
        if not passages:
            raise DataFormatError(file, None, f"at least one passage, each {spec.corpus_form}", "no passages")
        return passages
    questions = load_questions(name, split=split, path=path, root=root)
    if spec.corpus == "facts":
        return pool_passages(fact_passages(q) for q in questions)
    pooled = pool_passages(q.context for q in questions)
    if not pooled:   # a pooled corpus with nothing in it would give every method an empty retrieval, silently
        raise DataFormatError(path or default_path(name, split, root), None,
                              f"questions with context paragraphs to pool into the {name} corpus, each {spec.form}",
                              "no question has any")
    return pooled
