"""Errors that tell the user where the problem is and what the expected form was."""

from __future__ import annotations

from pathlib import Path


class KgragError(Exception):
    """Base class: an error the user can act on (shown without a traceback by the CLI)."""


class DataFormatError(KgragError, ValueError):
    """A malformed input row: names the file, the 1-based line (or record) and the expected form."""

    def __init__(self, path: str | Path, line: int | None, expected: str, got: str = ""):
        self.path = str(path)
        self.line = line
        self.expected = expected
        self.got = got
        where = f"{self.path}:{line}" if line is not None else self.path
        msg = f"{where}: malformed input; expected {expected}"
        if got:
            shown = got if len(got) <= 120 else got[:117] + "..."
            msg += f"; got {shown!r}"
        super().__init__(msg)


class MissingDataError(KgragError, FileNotFoundError):
    """A dataset file is not where the configuration says; the message says how to get it."""


class UnreadableFileError(KgragError, OSError):
    """A path where an input file is expected names a directory, or a file that cannot be opened."""


class ConfigError(KgragError, ValueError):
    """A bad configuration value; names the parameter and the accepted values."""


class BackendUnavailableError(KgragError, RuntimeError):
    """A requested backend (GPU, vLLM, a server) cannot run on this machine."""


class CacheDamagedError(KgragError, RuntimeError):
    """A cache file is damaged; the message names the file and how to recover (nothing is written to it)."""
