"""Files the loaders read that no source publishes as such, made from files that one does.

Two of them: MetaQA's de-duplicated `kb.txt` (the original has 1,159 repeated lines; rebuilt
from the ID-form KB that RoBERTa-KGQA publishes, in the original's order), and the 354 2Wiki dev
questions whose gold pages are all in HippoRAG's corpus (so retrieval over that corpus can find the
evidence). A manifest file names its step (`derive: NAME`) and its inputs (`from: [paths]`, other
manifest files under the same data root); `data fetch` runs the step once the inputs are in, writes
to `<file>.deriving` and renames it into place only when its sha256 is the manifest's. Both steps
reproduce the files in ../shared/data byte for byte (checked by tests/test_data_derive.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from ..errors import ConfigError, DataFormatError

# MetaQA's kb.txt lists each movie's facts in this relation order (its first lines show it)
METAQA_RELATIONS = ("directed_by", "written_by", "starred_actors", "release_year", "in_language", "has_genre",
                    "has_imdb_votes", "has_imdb_rating", "has_tags")


def _tab_dict(path: Path) -> list[tuple[str, str]]:
    """`<id>\\t<name>` lines, in file order (refused naming the line when one is not)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            key, sep, name = line.rstrip("\n").partition("\t")
            if not sep:
                raise DataFormatError(path, lineno, "'<id>\\t<name>' per line", line.strip()[:80])
            rows.append((key, name))
    return rows


def metaqa_kb(inputs: list[Path], out: Path) -> None:
    """kb.txt (`subject|relation|object`) from RoBERTa-KGQA's ID triples (`train.txt`, `entities.dict`,
    `relations.dict`): every triple once, movies in the order of keallm's `entity2text.txt` (its line
    order, which follows the original kb.txt), then METAQA_RELATIONS, then the object's line there."""
    triples, entities, relations, names = inputs
    ent = dict(_tab_dict(entities))
    rel = dict(_tab_dict(relations))
    line_of: dict[str, int] = {}
    for i, (_, name) in enumerate(_tab_dict(names)):
        line_of.setdefault(name, i)
    rows = []
    with open(triples, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 3 or parts[0] not in ent or parts[1] not in rel or parts[2] not in ent:
                raise DataFormatError(triples, lineno, "'<head id>\\t<relation id>\\t<tail id>' with ids of the "
                                      "dictionaries", line.strip()[:80])
            h, r, t = ent[parts[0]], rel[parts[1]], ent[parts[2]]
            if r not in METAQA_RELATIONS or h not in line_of or t not in line_of:
                raise DataFormatError(triples, lineno, f"a MetaQA relation ({', '.join(METAQA_RELATIONS)}) between "
                                      f"entities named in {names.name}", f"{h}|{r}|{t}")
            rows.append((line_of[h], METAQA_RELATIONS.index(r), line_of[t], f"{h}|{r}|{t}\n"))
    rows.sort()
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(r[3] for r in rows)


def twowiki_gold_in_corpus(inputs: list[Path], out: Path) -> None:
    """The questions of a 2Wiki question file (JSON list) whose supporting-fact titles all occur among
    the titles of a passage corpus (JSON list of {title, text}), in file order, as one JSON line."""
    questions_path, corpus_path = inputs
    with open(questions_path, encoding="utf-8") as f:
        questions = json.load(f)
    with open(corpus_path, encoding="utf-8") as f:
        titles = {p["title"] for p in json.load(f)}
    kept = [q for q in questions if all(title in titles for title, _ in q["supporting_facts"])]
    with open(out, "w", encoding="utf-8") as f:
        f.write(json.dumps(kept, ensure_ascii=False))


STEPS: dict[str, tuple[int, Callable[[list[Path], Path], None]]] = {
    "metaqa_kb": (4, metaqa_kb),
    "twowiki_gold_in_corpus": (2, twowiki_gold_in_corpus),
}


def run_step(name: str, inputs: list[Path], out: Path, where: str) -> Path:
    """Run step `name` into `<out>.deriving` (fsynced) and return that file; the caller checks and renames it."""
    if name not in STEPS:
        raise ConfigError(f"{where}: derive {name!r}; known steps: {', '.join(STEPS)}")
    arity, fn = STEPS[name]
    if len(inputs) != arity:
        raise ConfigError(f"{where}: derive {name} takes {arity} input files ('from:'), got {len(inputs)}")
    tmp = out.with_name(out.name + ".deriving")
    try:
        fn(inputs, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp
