"""Which passages an LLM-built KG (`text:` / `tcr:` specs) indexes: a dataset's corpus, or the
pooled paragraphs of a seeded question sample."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..records import Passage
from .common import pool_passages
from .registry import default_path, get_spec, load_corpus, load_questions


@dataclass(frozen=True)
class CorpusSelection:
    """The passages a `text:` KG indexes: `<dataset>[:<split>][:n=<N>][:seed=<S>]`.

    Without `n`: the dataset's corpus (`load_corpus`: MuSiQue and HotpotQA pool the paragraphs
    of every question of the split, 2Wiki has its own corpus file). With `n`: the pooled,
    de-duplicated paragraphs of a seeded sample of `n` questions (`load_questions`), as SA-RAG
    and its code do. Titles are kept either way.
    """

    dataset: str
    split: str | None = None
    n: int | None = None
    seed: int = 0

    @classmethod
    def parse(cls, arg: str) -> "CorpusSelection":
        dataset, *rest = arg.split(":")
        if not dataset:
            raise ConfigError("expected text:<dataset>[:<split>][:n=<N>][:seed=<S>], e.g. text:musique:dev200:n=100")
        spec = get_spec(dataset)
        split, n, seed = None, None, 0
        for part in rest:
            key, eq, value = part.partition("=")
            if eq and key in ("n", "seed"):
                if not value.isdigit() or (key == "n" and int(value) < 1):
                    kind = "positive" if key == "n" else "non-negative"
                    raise ConfigError(f"{key}={value!r}: expected a {kind} integer")
                n, seed = (int(value), seed) if key == "n" else (n, int(value))
            elif eq or split is not None or part not in spec.splits:
                raise ConfigError(f"{part!r}: expected a split of {dataset} ({', '.join(spec.splits)}), "
                                  "n=<N> or seed=<S>")
            else:
                split = part
        if spec.corpus == "none":
            raise ConfigError(f"{dataset} ships no passages to index")
        if n is None and split is not None and spec.corpus not in ("pooled", "facts"):
            raise ConfigError(f"{dataset}'s corpus is one file whatever the split; drop {split!r} or add n=<N> "
                              "to index the paragraphs of sampled questions")
        return cls(dataset, split, n, seed)

    @property
    def whole_corpus_file(self) -> bool:
        return self.n is None and get_spec(self.dataset).corpus not in ("pooled", "facts")

    @property
    def name(self) -> str:
        sample = [f"n{self.n}s{self.seed}"] if self.n else []
        return "-".join(["text", self.dataset, self.split or "default", *sample])

    def input_files(self, root: Path) -> list[Path]:
        """The files the passages come from (MissingDataError names what is absent)."""
        if self.whole_corpus_file:
            return [root / get_spec(self.dataset).corpus]
        return [default_path(self.dataset, self.split, root, must_exist=True)]

    def passages(self, root: Path) -> tuple[list[Passage], dict[str, Any]]:
        """The passages and a description of them for the statistics."""
        about: dict[str, Any] = {"dataset": self.dataset, "split": self.split}
        if self.n is None:
            passages = load_corpus(self.dataset, root, split=self.split)
            about["corpus"] = (f"the {self.dataset} corpus file" if self.whole_corpus_file else
                               f"pooled paragraphs of every {self.dataset} question of the split") + ", titles kept"
        else:
            questions = load_questions(self.dataset, self.split, root=root, n=self.n, seed=self.seed)
            passages = pool_passages(q.context for q in questions)
            about.update(questions=len(questions), seed=self.seed,
                         questions_without_paragraphs=sum(not q.context for q in questions),
                         corpus=f"pooled paragraphs of {len(questions)} sampled {self.dataset} questions "
                                f"(seed {self.seed}), titles kept")
        if not passages:
            others = [s for s in get_spec(self.dataset).splits if s != self.split]
            raise ConfigError(f"{self.dataset}{':' + self.split if self.split else ''}: no passages to index (the "
                              "selected questions carry no paragraphs); select a split whose questions ship them "
                              f"in the KG spec and the run ({', '.join(others)}; for 2wiki: dev200, e.g. --split "
                              "dev200 --set kg=tcr:2wiki:dev200:n=<n>:seed={seed})")
        return passages, about
