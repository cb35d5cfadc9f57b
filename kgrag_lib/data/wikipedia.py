"""Wikipedia-2018 in DPR's `psgs_w100.tsv` form (21,015,324 passages of 100 words).

The file is 13 GB, so passages are streamed, never held in memory. Format: a header line
`id<TAB>text<TAB>title`, then one passage per line with the text in double quotes (inner quotes
doubled, CSV style); the title is quoted only when it needs to be.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterator

from ..errors import DataFormatError
from ..records import Passage
from .common import open_text

HEADER = ["id", "text", "title"]
FORM = 'a row id<TAB>"passage text"<TAB>title'


def iter_passages(path: str | Path, *, limit: int | None = None) -> Iterator[Passage]:
    """Yield Passage(pid=id, text, title) in file order; `limit` stops after that many passages.

    An unbalanced quote makes the csv reader swallow following lines until its field-size
    limit (128 KiB, far above a 100-word passage) and then fail: reported as a DataFormatError.
    """
    path = Path(path)
    if limit is not None and limit <= 0:
        return
    with open_text(path, f"a header 'id<TAB>text<TAB>title', then {FORM} per line", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quotechar='"', doublequote=True, strict=True)
        start = 1
        n = 0
        try:
            for row in reader:
                lineno, start = start, reader.line_num + 1
                if lineno == 1:
                    if row != HEADER:
                        raise DataFormatError(path, 1, "the header line 'id<TAB>text<TAB>title'", "\t".join(row))
                    continue
                if not row:
                    continue
                if len(row) != 3 or not row[0].strip() or not row[1].strip():
                    raise DataFormatError(path, lineno, FORM, "\t".join(row))
                yield Passage(pid=row[0], text=row[1], title=row[2])
                n += 1
                if limit is not None and n >= limit:
                    return
        except csv.Error as exc:
            raise DataFormatError(path, start, f"{FORM} with balanced double quotes", str(exc)) from None
