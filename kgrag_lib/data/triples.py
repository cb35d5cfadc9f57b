"""Line-oriented triple files: MetaQA `s|r|o`, Wikidata5M `Qhead<TAB>Prel<TAB>Qtail`, generic TSV.

This is the small-scale reader (one Triple object per line). Full Wikidata5M (21M triples)
goes through `wikidata5m.preprocess_wikidata5m`, which reads the same files in integer form.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from ..errors import ConfigError, DataFormatError
from ..records import Triple
from .common import open_text

FORMS = {
    "metaqa": "'subject|relation|object' (three non-empty fields separated by '|')",
    "wikidata5m": "'Qhead<TAB>Prel<TAB>Qtail' (Wikidata ids, e.g. 'Q7965079\\tP27\\tQ16')",
    "tsv": "'subject<TAB>relation<TAB>object' (three non-empty tab-separated fields)",
}
ENTITY_ID = re.compile(r"Q\d+")
RELATION_ID = re.compile(r"P\d+")


def read_triples(path: str | Path, format: str = "metaqa") -> Iterator[Triple]:
    """Stream the triples of a file; blank lines are skipped, any other malformed line raises."""
    if format not in FORMS:
        raise ConfigError(f"read_triples: format={format!r}; accepted: {', '.join(FORMS)}")
    path = Path(path)
    sep = "|" if format == "metaqa" else "\t"
    check_ids = format == "wikidata5m"
    with open_text(path, f"one triple per line: {FORMS[format]}") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split(sep)
            if len(parts) != 3 or not all(p.strip() for p in parts):
                raise DataFormatError(path, lineno, FORMS[format], line)
            s, r, o = parts
            if check_ids and not (ENTITY_ID.fullmatch(s) and RELATION_ID.fullmatch(r) and ENTITY_ID.fullmatch(o)):
                raise DataFormatError(path, lineno, FORMS[format], line)
            yield Triple(s, r, o)
