"""The `kgrag` command: one sub-command per module in kgrag_lib.commands."""

from __future__ import annotations

import argparse
import sys

from .commands import cache, data, kg, run, score, study, sweep
from .errors import KgragError
from .redact import redact

COMMANDS = (run, study, sweep, score, data, kg, cache)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgrag",
        description="Reproduce KG-augmented RAG papers: run methods, score predictions, inspect data and KGs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except KgragError as exc:
        print(f"kgrag: error: {redact(str(exc))}", file=sys.stderr)   # a message that quotes a spec keeps no token
        return 2
    except KeyboardInterrupt:
        print("kgrag: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
