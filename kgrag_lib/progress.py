"""Progress bars that stay readable in executed notebooks and log files.

Where output is not a terminal (papermill kernels, CI logs, `> log`), every refresh becomes a
new line that ends up stored in the executed notebook; there a bar redraws at most every
`NON_TTY_INTERVAL_S` seconds (plus its first and last state).
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm as _tqdm

NON_TTY_INTERVAL_S = 30.0


def _interactive() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress(iterable: Any = None, **kw: Any) -> _tqdm:
    """`tqdm.auto.tqdm` with a long refresh interval off a terminal (caller's mininterval wins)."""
    if not _interactive():
        kw.setdefault("mininterval", NON_TTY_INTERVAL_S)
    return _tqdm(iterable, **kw)
