"""Progress bars that stay readable where they are seen live and where their output is stored.

Three audiences, three forms:
- a terminal: tqdm's bar, redrawn as usual;
- a notebook opened in JupyterLab (ipywidgets installed): tqdm's widget, redrawn in place;
- output that is stored (papermill runs, CI logs, `> log`): every redraw becomes a new line of
  the executed notebook or log. Where `$KGRAG_PROGRESS=summary` (set by `kgrag study` and
  `kgrag sweep` for the notebooks they execute) a loop prints ONE line when it ends (what it
  did, how long it took) and nothing while it runs; elsewhere off a terminal a bar redraws at
  most every `NON_TTY_INTERVAL_S` seconds (plus its first and last state).
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

from tqdm.std import tqdm as _std_tqdm

NON_TTY_INTERVAL_S = 30.0
MODE_ENV = "KGRAG_PROGRESS"   # "summary": one line per loop; anything else (or unset): bars
SUMMARY = "summary"


def _interactive() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def summary_mode() -> bool:
    return os.environ.get(MODE_ENV, "").strip().lower() == SUMMARY


def _widget_class() -> type | None:
    """tqdm's notebook widget when running in a Jupyter kernel that can draw it, else None (and
    no `TqdmWarning: IProgress not found` where ipywidgets is missing: the text bar is used)."""
    ipython = sys.modules.get("IPython")
    try:
        if ipython is None or "IPKernelApp" not in ipython.get_ipython().config:
            return None
        import ipywidgets  # noqa: F401
        from tqdm.notebook import tqdm as notebook_tqdm
    except Exception:   # no kernel, no ipywidgets, or a console IPython
        return None
    return notebook_tqdm


class SummaryBar(_std_tqdm):
    """Counts like a bar, draws nothing, and prints one line when closed, e.g.
    `method llm-kg: 5/5 q in 00:12 (2.40 s/q)`."""

    def __init__(self, iterable: Any = None, **kw: Any) -> None:
        self._out = kw.pop("file", None) or sys.stdout
        kw["file"] = io.StringIO()            # tqdm's own drawing goes nowhere
        kw["mininterval"] = float("inf")
        kw.pop("leave", None)
        kw.pop("dynamic_ncols", None)
        super().__init__(iterable, **kw)

    def close(self) -> None:
        if self.disable:
            return
        line = self.summary_line()
        super().close()
        print(line, file=self._out, flush=True)

    def summary_line(self) -> str:
        elapsed = self.format_dict["elapsed"]
        desc = self.desc.rstrip(": ") or "progress"
        unit = self.unit
        done = self.n - (self.format_dict.get("initial") or 0)
        of = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        rate = f", {elapsed / done:.2f} s/{unit}" if done > 0 and elapsed > 0 else ""
        resumed = f", {self.n - done} done before" if done != self.n else ""
        return f"{desc}: {of} {unit} in {self.format_interval(elapsed)}{rate}{resumed}"


def progress(iterable: Any = None, **kw: Any) -> _std_tqdm:
    """A progress bar in the form that suits where its output goes (see the module docstring);
    the caller's tqdm keywords (desc, unit, total, disable, mininterval) are kept."""
    if summary_mode():
        return SummaryBar(iterable, **kw)
    widget = _widget_class()
    if widget is not None:
        return widget(iterable, **kw)
    if not _interactive():
        kw.setdefault("mininterval", NON_TTY_INTERVAL_S)
    return _std_tqdm(iterable, **kw)
