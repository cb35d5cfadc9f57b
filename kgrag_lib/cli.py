"""The `kgrag` command: one sub-command per module in kgrag_lib.commands."""

from __future__ import annotations

import argparse
import errno
import sqlite3
import sys
from pathlib import Path

from . import __version__
from .commands import cache, completion, data, doctor, kg, run, score, study, sweep, train
from .errors import KgragError
from .paths import REPO_ROOT
from .redact import redact

COMMANDS = (run, study, sweep, score, data, kg, cache, train, doctor, completion)
# A full disk or a read-only folder ends a command in one line naming the path, not a traceback.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EFBIG}
# A path that cannot be what the command needs (missing, too long, below a file, a folder for a
# file, a loop of links): refused naming it.
_PATH_ERRNOS = {errno.ENOENT, errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ELOOP}
_STORAGE_ADVICE = ("free space or choose a writable folder (--out, --cache-dir or KGRAG_CACHE_DIR), "
                   "then rerun the same command: finished work is kept")


def _llm_cache_where(args: argparse.Namespace) -> str:
    """The cache file the command used (named without creating any folder)."""
    import os

    if getattr(args, "cache", None):
        return str(args.cache)
    if getattr(args, "cache_dir", None):
        return str(os.path.join(args.cache_dir, "llm_cache.sqlite"))
    return os.environ.get("KGRAG_LLM_CACHE") or os.path.join(os.environ.get("KGRAG_CACHE_DIR") or REPO_ROOT / ".cache",
                                                                "llm_cache.sqlite")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgrag",
        description="Reproduce KG-augmented RAG papers: run methods, score predictions, inspect data and KGs.",
    )
    parser.add_argument("--version", action="version", version=f"kgrag {__version__}")
    parser.add_argument("--data-root", dest="global_data_root", default=None, metavar="DIR",
                        help="dataset root for every command (sets $KGRAG_DATA_ROOT; default: $KGRAG_DATA_ROOT, "
                             "else ../shared/data beside a source checkout)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    parser.set_defaults(root_parser=parser)   # `kgrag completion` renders the whole parser
    return parser


def _show_progress_log() -> None:
    """kgrag's INFO lines on stderr: what a long one-time build does (a passage store, embedding
    shards, a faiss index trained once and then loaded memory-mapped: "loaded saved index ...")."""
    import logging

    class _CurrentStderr(logging.StreamHandler):
        """Writes to the stderr of the moment, not the one of the first call: a caller that swaps
        `sys.stderr` later (a notebook cell's capture, a test's) still gets the lines, never a
        closed stream's "Logging error"."""

        @property
        def stream(self):   # type: ignore[override]
            return sys.stderr

        @stream.setter
        def stream(self, _value) -> None:
            pass

    logger = logging.getLogger("kgrag_lib")
    if not any(getattr(h, "_kgrag", False) for h in logger.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("kgrag: %(message)s"))
        handler._kgrag = True   # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):   # a path with a non-UTF-8 byte is shown escaped, never a second error
        if hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
    _absolute_env_paths()
    _show_progress_log()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.global_data_root:   # through the environment, so notebook kernels started by papermill see it too
        import os

        os.environ["KGRAG_DATA_ROOT"] = str(Path(args.global_data_root).expanduser().resolve())
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except KgragError as exc:
        _say(f"kgrag: error: {redact(str(exc))}")   # a message that quotes a spec keeps no token
        return 2
    except BrokenPipeError:   # `kgrag completion bash | head`: the reader closed the pipe, nothing failed
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 0
    except OSError as exc:
        if exc.errno in _PATH_ERRNOS and exc.filename:   # a path given that cannot be what it names
            _say(f"kgrag: error: {redact(str(exc.filename))[:300]}: {exc.strerror or exc}; check the paths given "
                 "(--out, --cache, --manifest, files and folders on the command line)")
            return 2
        if exc.errno not in _STORAGE_ERRNOS:
            return _internal_error(exc)
        _say(f"kgrag: error: {exc.filename or 'a file'}: {exc.strerror or exc}; {_STORAGE_ADVICE}")
        return 2
    except RecursionError:
        _say("kgrag: error: an input nests deeper than can be read (a JSON or YAML file of thousands of nested "
             "brackets, or a profile `extends:` chain that long); check the files given")
        return 2
    except sqlite3.OperationalError as exc:
        if "disk I/O error" in str(exc) or "not a database" in str(exc):
            return _not_a_cache(args, exc)
        if not any(m in str(exc) for m in ("readonly", "disk is full", "unable to open")):
            return _internal_error(exc)
        _say(f"kgrag: error: the LLM cache ({_llm_cache_where(args)}): {exc}; {_STORAGE_ADVICE}")
        return 2
    except sqlite3.DatabaseError as exc:   # "file is not a database": --cache names another kind of file
        return _not_a_cache(args, exc)
    except KeyboardInterrupt:
        _say("kgrag: interrupted; rerun the same command to resume")
        return 130
    except Exception as exc:   # noqa: BLE001 - the generic guard: no user sees a Python traceback
        return _internal_error(exc)


PATH_ENV = ("KGRAG_CACHE_DIR", "KGRAG_LLM_CACHE", "KGRAG_DATA_ROOT", "KGRAG_FIGURES_DIR", "KGRAG_2WIKI_ALIASES")


def _absolute_env_paths() -> None:
    """Relative paths in the environment are made absolute against the directory kgrag was started
    in: notebook kernels and sweep cells run elsewhere (notebooks/, each cell's folder), where a
    relative KGRAG_CACHE_DIR would give every cell a cache of its own."""
    import os

    for name in PATH_ENV:
        value = os.environ.get(name)
        if value and not os.path.isabs(os.path.expanduser(value)):
            os.environ[name] = os.path.abspath(os.path.expanduser(value))


def _not_a_cache(args: argparse.Namespace, exc: Exception) -> int:
    _say(f"kgrag: error: the LLM cache ({_llm_cache_where(args)}) is not an SQLite cache file ({exc}); name a cache "
         "file kgrag wrote (--cache, KGRAG_LLM_CACHE) or a new path")
    return 2


def _say(line: str) -> None:
    """One line on stderr, whatever it holds: a path with a byte that is no UTF-8 (a lone
    surrogate from the command line) is shown escaped, never a second error."""
    sys.stderr.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
    sys.stderr.flush()


INTERNAL_ERROR = 3   # exit status of an unexpected exception (a bug of kgrag, not a refused input: those exit 2)
DEBUG_ENV = "KGRAG_DEBUG"   # set to 1 to let the exception through (a developer's traceback on the terminal)


def _internal_error(exc: BaseException) -> int:
    """One line naming the error and a file holding its (redacted) traceback, instead of the traceback."""
    import os
    import tempfile
    import time
    import traceback

    if os.environ.get(DEBUG_ENV) == "1":
        raise exc
    text = redact("".join(traceback.format_exception(exc)))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log = None
    for folder in (Path(os.environ.get("KGRAG_CACHE_DIR") or REPO_ROOT / ".cache") / "crash-reports",
                   Path(tempfile.gettempdir()) / "kgrag-crash-reports"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            log = folder / f"kgrag-{stamp}-{os.getpid()}.log"
            log.write_text(f"kgrag {__version__}\nargv: {redact(' '.join(sys.argv))}\n\n{text}", encoding="utf-8",
                           errors="backslashreplace")
            break
        except OSError:
            log = None
    what = redact(f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__)
    where = f"the traceback is in {log}" if log else "no file could be written for its traceback"
    _say(f"kgrag: internal error: {what[:300]} ({where}; this is a bug of kgrag: please report it with that file, "
         f"or rerun with {DEBUG_ENV}=1 to see it here)")
    return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
