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


def main(argv: list[str] | None = None) -> int:
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
        print(f"kgrag: error: {redact(str(exc))}", file=sys.stderr)   # a message that quotes a spec keeps no token
        return 2
    except BrokenPipeError:   # `kgrag completion bash | head`: the reader closed the pipe, nothing failed
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 0
    except OSError as exc:
        if exc.errno not in _STORAGE_ERRNOS:
            raise
        print(f"kgrag: error: {exc.filename or 'a file'}: {exc.strerror or exc}; {_STORAGE_ADVICE}", file=sys.stderr)
        return 2
    except sqlite3.OperationalError as exc:
        if not any(m in str(exc) for m in ("readonly", "disk is full", "unable to open")):
            raise
        print(f"kgrag: error: the LLM cache ({_llm_cache_where(args)}): {exc}; {_STORAGE_ADVICE}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kgrag: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
