"""A loopback stand-in for the datasets' sources: small files in the exact layouts the real sources
publish (MetaQA's QA lines and ID-form KB, HotpotQA/2Wiki/MuSiQue JSON and JSON Lines records, the
Wikidata5M slice's id triples, 2Wiki's id aliases inside the release's zip), served by `kgrag data
mirror`'s own server (kgrag_lib/data/mirror.py, in a thread; here with a cut connection or a stall
where a test asks) under `<mirror>/<host>/<path>` of each URL in the shipped manifest, and
a copy of that manifest whose sums and sizes are those of these small files.

The derived files' expected bytes are written out by hand here (not made by the derive step), so a
fetch that installs them checks the step itself.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import threading
import zipfile
from pathlib import Path

import yaml

from kgrag_lib.data.manifest import MANIFEST_PATH, count_rows
from kgrag_lib.data.mirror import MirrorHandler, MirrorServer, served_at

# ---- MetaQA: ID-form KB (RoBERTa-KGQA), names in first-appearance order (keallm), QA and qtype files
ENTITIES = ["Kismet", "William Dieterle", "Marlene Dietrich", "1944", "Flags of Our Fathers", "Clint Eastwood",
            "Ryan Phillippe", "2006", "English"]
ENTITIES_DICT = "".join(f"{i}\t{n}\n" for i, n in enumerate(sorted(ENTITIES)))   # the dictionary's own order
ENTITY2TEXT = "".join(f"{i}\t{n}\n" for i, n in enumerate(ENTITIES))
RELATIONS = ["directed_by", "directed_by_reverse", "in_language", "in_language_reverse", "release_year",
             "release_year_reverse", "starred_actors", "starred_actors_reverse"]
RELATIONS_DICT = "".join(f"{i}\t{r}\n" for i, r in enumerate(RELATIONS))
_TRIPLES = [("Flags of Our Fathers", "starred_actors", "Ryan Phillippe"), ("Kismet", "release_year", "1944"),
            ("Flags of Our Fathers", "directed_by", "Clint Eastwood"), ("Kismet", "starred_actors", "Marlene Dietrich"),
            ("Kismet", "directed_by", "William Dieterle"), ("Flags of Our Fathers", "release_year", "2006"),
            ("Flags of Our Fathers", "in_language", "English"), ("Kismet", "in_language", "English")]
_EID = {n: str(i) for i, n in enumerate(sorted(ENTITIES))}
TRAIN = "".join(f"{_EID[h]}\t{RELATIONS.index(r)}\t{_EID[t]}\n" for h, r, t in _TRIPLES)
# what the derive step must give: movies in entity2text order, then MetaQA's relation order
KB = ("Kismet|directed_by|William Dieterle\nKismet|starred_actors|Marlene Dietrich\nKismet|release_year|1944\n"
      "Kismet|in_language|English\nFlags of Our Fathers|directed_by|Clint Eastwood\n"
      "Flags of Our Fathers|starred_actors|Ryan Phillippe\nFlags of Our Fathers|release_year|2006\n"
      "Flags of Our Fathers|in_language|English\n")
METAQA_QA = {
    1: ("what movies did [William Dieterle] direct\tKismet\nwho directed [Flags of Our Fathers]\tClint Eastwood\n",
        "director_to_movie\nmovie_to_director\n"),
    2: ("who starred in the movies directed by [William Dieterle]\tMarlene Dietrich\n"
        "what language are the films directed by [Clint Eastwood] in\tEnglish\n",
        "director_to_movie_to_actor\ndirector_to_movie_to_language\n"),
    3: ("the films directed by the director of [Kismet] were released in which years\t1944\n"
        "what languages are the movies starring the star of [Flags of Our Fathers] in\tEnglish\n",
        "movie_to_director_to_movie_to_year\nmovie_to_actor_to_movie_to_language\n"),
}

# ---- HotpotQA (distractor record form), 2Wiki (with evidence), MuSiQue-Ans, all as their sources ship them


def _hotpot(i: int) -> dict:
    return {"_id": f"5a7166395542994082a3e8{i:02d}", "answer": "Kansas Song", "question": f"What is fight song {i}?",
            "supporting_facts": [["Kansas Song", 0], ["University of Kansas", 1]],
            "context": [["University of Kansas", ["The University of Kansas is a university.",
                                                  " Its main campus is in Lawrence."]],
                        ["Kansas Song", ["Kansas Song is a fight song."]]],
            "type": "bridge", "level": "hard"}


def _twowiki(i: int, title: str, context: bool) -> dict:
    rec = {"_id": f"13c1565a087311ebbd66ac1f6bf848{i:02d}", "type": "compositional",
           "question": f"Who directed {title}?", "entity_ids": f"Q{1000 + i}",
           "supporting_facts": [[title, 0]], "evidences": [[title, "director", f"Director {i}"]],
           "answer": f"Director {i}", "evidences_id": [[f"Q{1000 + i}", "P57", f"Q{2000 + i}"]],
           "answer_id": f"Q{2000 + i}"}
    if context:
        rec["context"] = [[title, [f"{title} is a film directed by Director {i}."]]]
    return rec


TWOWIKI_CORPUS = [{"title": f"Film {i}", "text": f"Film {i} is a film directed by Director {i}."} for i in range(3)]
TWOWIKI_DEV = [_twowiki(i, f"Film {i}", False) for i in range(5)]           # Film 3 and 4: not in the corpus
TWOWIKI_354 = json.dumps(TWOWIKI_DEV[:3], ensure_ascii=False)               # what the derive step must give
TWOWIKI_ALIASES = "".join(json.dumps({"Q_id": f"Q{2000 + i}", "aliases": [f"Dir. {i}"], "demonyms": []}) + "\n"
                          for i in range(5))


def _musique(i: int) -> dict:
    return {"id": f"2hop__57441{i}_270105", "question": f"What is the seat of county {i}?", "answer": "Stanley",
            "answer_aliases": ["Stanley, North Dakota"], "answerable": True,
            "paragraphs": [{"idx": 0, "title": "Port Blair", "paragraph_text": "Port Blair is a capital.",
                            "is_supporting": False},
                           {"idx": 1, "title": "Mountrail County", "paragraph_text": "Stanley is the seat.",
                            "is_supporting": True}],
            "question_decomposition": [{"id": 574419, "question": f"county {i} >> capital", "answer": "Stanley",
                                        "paragraph_support_idx": 1}]}


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def _musique_bare(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "paragraphs"}


def files() -> dict[str, str]:
    """Manifest path -> the small file's text, for every file of cpu-smoke's entries (downloaded or derived)."""
    out = {"metaqa/src_RoBERTa-KGQA/train.txt": TRAIN, "metaqa/src_RoBERTa-KGQA/entities.dict": ENTITIES_DICT,
           "metaqa/src_RoBERTa-KGQA/relations.dict": RELATIONS_DICT, "metaqa/src_keallm/entity2text.txt": ENTITY2TEXT,
           "metaqa/kb.txt": KB}
    for k, (qa, qtype) in METAQA_QA.items():
        for split in ("test", "dev"):
            out[f"metaqa/{k}-hop/vanilla/qa_{split}.txt"] = qa
            out[f"metaqa/qtype/{k}hop_qa_{split}_qtype.txt"] = qtype
    out["hotpotqa/AMOR_test500_distractor.jsonl"] = _jsonl([_hotpot(i) for i in range(4)])
    out["hotpotqa/AMOR_dev100.jsonl"] = _jsonl([_hotpot(i) for i in range(10, 12)])
    out["2wiki/MIGRES_200_2wiki.jsonl"] = _jsonl([_twowiki(i, f"Film {i}", True) for i in range(10, 13)])
    out["2wiki/lag_2wiki_dev_4000_nocontext.json"] = json.dumps(TWOWIKI_DEV, indent=2, ensure_ascii=False)
    out["2wiki/HippoRAG_2wiki_1000q_corpus.json"] = json.dumps(TWOWIKI_CORPUS, indent=4, ensure_ascii=False)
    out["2wiki/DERIVED_lag_dev_questions_with_gold_titles_in_HippoRAG_corpus_354.json"] = TWOWIKI_354
    out["musique/MIGRES_200_musique_ans.jsonl"] = _jsonl([_musique(i) for i in range(4)])
    bare = [_musique_bare(_musique(i)) for i in range(6)]
    out["musique/lag_musique_ans_dev_2417_noparagraphs.json"] = json.dumps(bare)
    out["wikidata5m/libkge_test.txt"] = "Q22686\tP39\tQ11696\nQ11696\tP1001\tQ30\n"
    out["wikidata5m/libkge_valid.txt"] = "Q30\tP36\tQ61\n"
    return out


def aliases_zip(text: str = TWOWIKI_ALIASES) -> bytes:
    """The ID-enhanced release's archive: its files in one folder, id_aliases.json among them."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("data_ids_april7/dev.json", json.dumps(TWOWIKI_DEV))
        zf.writestr("data_ids_april7/id_aliases.json", text)
    return buf.getvalue()


def mirror_manifest(folder: Path, entries: list[str]) -> tuple[Path, dict[str, bytes]]:
    """A copy of the shipped manifest holding `entries` with the small files' sums, sizes and rows, and
    what the mirror serves (URL path under the mirror -> bytes), taken from each shipped URL."""
    doc = yaml.safe_load(MANIFEST_PATH.read_text(encoding="utf-8"))
    small = files()
    served: dict[str, bytes] = {}
    out = {"version": 1, "datasets": {}}
    folder.mkdir(parents=True, exist_ok=True)
    for name in entries:
        entry = copy.deepcopy(doc["datasets"][name])
        for spec in entry["files"]:
            if spec.get("unpack") == "zip":
                served[_served_at(spec["url"])] = aliases_zip()
                continue
            data = small[spec["path"]].encode()
            tmp = folder / "facts" / spec["path"]
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            spec.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data), rows=count_rows(tmp))
            if spec.get("url"):
                served[_served_at(spec["url"])] = data
        out["datasets"][name] = entry
    path = folder / "datasets.yaml"
    path.write_text(yaml.safe_dump(out, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path, served


def _served_at(url: str) -> str:
    return served_at(url)


class State:
    """How the mirror misbehaves (fault injection, on top of kgrag's own mirror server)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}       # the server's own table (set by Mirror)
        self.requests: list[tuple[str, str | None]] = []
        self.cut_after: dict[str, int] = {}     # path -> bytes to send once before dropping the connection
        self.silent: set[str] = set()           # paths whose answer stops after the headers
        self.release = threading.Event()        # set at teardown: a silent answer ends


class Handler(MirrorHandler):
    """`kgrag data mirror`'s handler, with a cut connection or a stall after the headers where the test asks."""

    def send_body(self, key: str, source, start: int) -> None:
        state: State = self.server.state   # type: ignore[attr-defined]
        if key in state.silent:
            self.wfile.flush()
            state.release.wait(30)   # headers sent, then nothing: a stalled source
            return
        if key in state.cut_after:
            self.wfile.write(bytes(source[start:])[:state.cut_after.pop(key)])
            self.wfile.flush()
            return
        super().send_body(key, source, start)


class Mirror:
    """A running loopback mirror (kgrag_lib.data.mirror's server): `url` is what `--mirror` takes."""

    def __init__(self) -> None:
        self.server = MirrorServer({}, handler=Handler)
        self.state = State()
        self.state.files = self.server.files       # one table: what the tests change is what is served
        self.state.requests = self.server.requests
        self.server.state = self.state   # type: ignore[attr-defined]
        self.url = self.server.url

    def __enter__(self) -> "Mirror":
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.state.release.set()
        self.server.stop()

    def serve(self, served: dict[str, bytes]) -> None:
        self.server.files.update(served)

    def path_of(self, url: str) -> str:
        return served_at(url)
