"""Progress bars redraw rarely where their output is stored (notebooks, logs)."""

from __future__ import annotations

import io

from kgrag_lib import progress as P


def test_non_tty_bar_uses_long_interval(monkeypatch):
    monkeypatch.setattr(P, "_interactive", lambda: False)
    bar = P.progress(range(3), file=io.StringIO())
    assert bar.mininterval == P.NON_TTY_INTERVAL_S
    assert list(bar) == [0, 1, 2]
    assert P.progress(range(1), file=io.StringIO(), mininterval=0.5).mininterval == 0.5  # caller wins


def test_tty_bar_keeps_tqdm_default(monkeypatch):
    monkeypatch.setattr(P, "_interactive", lambda: True)
    assert P.progress(range(1), file=io.StringIO()).mininterval == 0.1
