"""Progress bars redraw rarely where their output is stored (notebooks, logs)."""

from __future__ import annotations

import io

from kgrag_lib import progress


def test_non_tty_bar_uses_long_interval(monkeypatch):
    monkeypatch.setattr(progress, "_interactive", lambda: False)
    bar = progress.progress(range(3), file=io.StringIO())
    assert bar.mininterval == progress.NON_TTY_INTERVAL_S
    assert list(bar) == [0, 1, 2]
    assert progress.progress(range(1), file=io.StringIO(), mininterval=0.5).mininterval == 0.5  # caller wins


def test_tty_bar_keeps_tqdm_default(monkeypatch):
    monkeypatch.setattr(progress, "_interactive", lambda: True)
    assert progress.progress(range(1), file=io.StringIO()).mininterval == 0.1
