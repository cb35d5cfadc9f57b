"""`kgrag cache check | salvage | export | import`: test the LLM cache file, rescue the answers of a
damaged one, and carry answers between machines.

`export FILE.jsonl.gz` writes the cache's rows (optionally of some models only) as a compact
gzip file that can be committed: a long reference run's answers then survive a fresh checkout,
and `import FILE.jsonl.gz` loads them back so rerunning it sends no call for finished work.
`export --parts FOLDER` appends only the rows no earlier part holds, as the folder's next
`part-NNNN.jsonl.gz` (a checkpoint that can be committed every few minutes without rewriting
what was committed); `import FOLDER` loads every part.

`show ID...` prints the stored calls behind a prediction's `requests` ids (the first 16 hex
digits of a cache key): the model, the sampling parameters, every message and the answer, so a
trace can be read call by call.

A damaged cache stops every run with a message naming it. `salvage` copies every row that can
still be read (and whose key matches its request) into a fresh file at the same path and moves
the damaged file aside as `<name>.damaged-<time>`; the lost answers are recomputed by the next
run. Stop the runs that use the cache before salvaging it. PATH defaults to $KGRAG_LLM_CACHE,
else `<cache dir>/llm_cache.sqlite`.
"""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="check or salvage the LLM cache file", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    cache_sub = p.add_subparsers(dest="cache_command", metavar="CACHE_COMMAND", required=True)
    q = cache_sub.add_parser("check", help="full integrity check and row count, as JSON (exit 1 when damaged)")
    q.add_argument("path", nargs="?", default=None, help="the cache file (default: the one runs use)")
    q.set_defaults(func=handle_check)
    q = cache_sub.add_parser("salvage", help="copy the readable rows of a damaged cache into a fresh one")
    q.add_argument("path", nargs="?", default=None, help="the cache file (default: the one runs use)")
    q.set_defaults(func=handle_salvage)
    q = cache_sub.add_parser("export", help="write the cache's rows to a gzip JSON-lines file")
    q.add_argument("dest", help="the file to write, e.g. results/reference/llm-cache.jsonl.gz "
                               "(with --parts: the folder of parts, e.g. results/reference/llm-cache)")
    q.add_argument("--parts", action="store_true",
                   help="write only the rows no part in the folder DEST holds, as its next part-NNNN.jsonl.gz")
    q.add_argument("--cache", default=None, help="the cache file (default: the one runs use)")
    q.add_argument("--overwrite", action="store_true", help="replace DEST if it exists")
    q.add_argument("--identity", action="append", default=None,
                   help="only rows of this model identity (repeatable; see `kgrag cache check`)")
    q.set_defaults(func=handle_export)
    q = cache_sub.add_parser("show", help="print the stored calls behind request ids (a prediction's `requests`)")
    q.add_argument("ids", nargs="+", metavar="ID", help="a request id or any prefix of a cache key (hex)")
    q.add_argument("--cache", default=None, help="the cache file (default: the one runs use)")
    q.add_argument("--json", action="store_true", help="one JSON object per call instead of text")
    q.set_defaults(func=handle_show)
    q = cache_sub.add_parser("import", help="load rows written by `kgrag cache export` into the cache")
    q.add_argument("src", nargs="+", help="one or more .jsonl.gz files, or folders of part-NNNN.jsonl.gz")
    q.add_argument("--cache", default=None, help="the cache file (default: the one runs use)")
    q.set_defaults(func=handle_import)


def handle_check(args: argparse.Namespace) -> int:
    from ..llm.cache import check_cache

    status = check_cache(args.path)
    print(json.dumps(status))
    return 0 if status["ok"] else 1


def handle_salvage(args: argparse.Namespace) -> int:
    from ..llm.cache import salvage_cache

    r = salvage_cache(args.path)
    if r.moved_to is None:
        print(f"{r.path} passes integrity_check ({r.kept} rows); nothing to salvage")
        return 0
    lost = "an unknown number of rows" if r.unreadable is None else f"at most {r.unreadable} rows"
    print(f"kept {r.kept} rows in a fresh {r.path}; lost {lost} (the next run recomputes them); "
          f"the damaged file is now {r.moved_to}")
    return 0


def handle_export(args: argparse.Namespace) -> int:
    from ..llm.cache import export_cache, export_cache_part

    if args.parts:
        part, n = export_cache_part(args.dest, args.cache, identities=args.identity)
        print(f"wrote {n} new cached answers to {part}" if part else f"no answers that {args.dest} lacks")
        return 0
    from pathlib import Path

    from ..errors import ConfigError

    dest = Path(args.dest)
    if dest.is_dir():
        raise ConfigError(f"{dest} is a folder: name a file (or pass --parts to add a part to the folder)")
    if dest.exists() and not getattr(args, "overwrite", False):
        raise ConfigError(f"{dest} exists; nothing was written: name another file, or pass --overwrite to replace it")
    n = export_cache(args.dest, args.cache, identities=args.identity)
    print(f"wrote {n} cached answers to {args.dest}")
    return 0


def handle_import(args: argparse.Namespace) -> int:
    from ..llm.cache import cache_exports, import_cache

    for src in [f for given in args.src for f in cache_exports(given)]:
        added, refused = import_cache(src, args.cache)
        print(f"{src}: added {added} answers" + (f"; refused {refused} rows whose key does not match" if refused else ""))
    return 0


def handle_show(args: argparse.Namespace) -> int:
    from ..errors import ConfigError, MissingDataError
    from ..llm.cache import LLMCache, existing_cache_file

    path = existing_cache_file(args.cache)   # refuses a missing file, naming it
    cache = LLMCache(path)
    missing = []
    for rid in args.ids:
        try:
            calls = cache.find(rid.strip().lower())
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not calls:
            missing.append(rid)
        for call in calls:
            if args.json:
                print(json.dumps(call, ensure_ascii=False))
                continue
            req = call["request"]
            params = {k: v for k, v in req["params"].items() if k not in ("json_schema", "grammar")}
            constrained = [k for k in ("json_schema", "grammar") if req["params"].get(k)]
            print(f"=== {call['key'][:16]}  {req['backend']}:{req['identity']}")
            print(f"params: {json.dumps(params, sort_keys=True)}" + (f"  (+ {', '.join(constrained)})" if constrained else ""))
            for m in req["messages"]:
                print(f"--- {m['role']}\n{m['content']}")
            print(f"--- answer ({call['completion_tokens']} tokens, {call['seconds']:.1f} s)\n{call['text']}\n")
    cache.close()
    if missing:
        raise MissingDataError(f"{path}: no stored call for {', '.join(missing)}; the run's answers may live in "
                               "another cache (pass --cache) or need importing (kgrag cache import FOLDER)")
    return 0
