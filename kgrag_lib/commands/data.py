"""`kgrag data check | stats | refresh-manifest | fetch`: inspect and download the datasets under the data root."""

from __future__ import annotations

import argparse
import json

from ..data.check import STATS_DATASETS, check_data, dataset_stats, format_check, statuses_to_json, MISMATCH
from ..data.fetch import fetch_dataset, list_fetchable
from ..data.manifest import MANIFEST_PATH, refresh_manifest
from ..data.registry import default_path
from ..paths import data_root


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 when a file's checksum differs from the manifest; missing files are reported, exit 0."""
    root = data_root(getattr(args, "root", None))
    statuses = check_data(root, getattr(args, "manifest", None))
    if getattr(args, "json", False):
        print(json.dumps({"root": str(root), "files": statuses_to_json(statuses)}, indent=2))
    else:
        print(format_check(statuses, root))
    return 1 if any(s.status == MISMATCH for s in statuses) else 0


_STATS_DEFAULT = {"metaqa": "metaqa-1hop"}


def cmd_stats(args: argparse.Namespace) -> int:
    path = args.path
    if path is None:
        path = default_path(_STATS_DEFAULT.get(args.dataset, args.dataset), getattr(args, "split", None),
                            getattr(args, "root", None), must_exist=True)
    print(json.dumps(dataset_stats(args.dataset, path), ensure_ascii=False))
    return 0


def cmd_refresh_manifest(args: argparse.Namespace) -> int:
    updated = refresh_manifest(data_root(getattr(args, "root", None)), getattr(args, "manifest", None))
    print(f"updated sha256/size/rows of {len(updated)} files in {getattr(args, 'manifest', None) or MANIFEST_PATH}")
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    """Download one manifest entry (resumable, checked); `--list` shows what can be fetched."""
    if args.list:
        print(list_fetchable(args.manifest, args.root))
        return 0
    if not args.name:
        from ..errors import ConfigError

        raise ConfigError("kgrag data fetch: name a dataset (e.g. wikipedia-2018) or pass --list")
    n = fetch_dataset(args.name, args.root, args.manifest, force=args.force)
    print(f"{args.name}: {n} file(s) installed under {data_root(args.root)}" if n else
          f"{args.name}: nothing to fetch, every file is present")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("data", help="check, describe and download the datasets under the data root")
    sub = p.add_subparsers(dest="data_command", required=True)

    c = sub.add_parser("check", help="per dataset of the manifest: present / missing / checksum-mismatch")
    c.add_argument("--root", default=None, help="data root (default: $KGRAG_DATA_ROOT, else ../shared/data beside a source checkout)")
    c.add_argument("--manifest", default=None, help=f"manifest file (default: the {MANIFEST_PATH.name} shipped in kgrag_lib/data/manifests)")
    c.add_argument("--json", action="store_true", help="print JSON instead of a table")
    c.set_defaults(func=cmd_check)

    s = sub.add_parser("stats", help="counts of one dataset file as one JSON object")
    s.add_argument("--dataset", required=True, choices=STATS_DATASETS)
    s.add_argument("--path", default=None, help="the file (default: the dataset's default split under --root; "
                                                "for metaqa a QA file)")
    s.add_argument("--split", default=None, help="split used when --path is not given")
    s.add_argument("--root", default=None, help="data root used when --path is not given")
    s.set_defaults(func=cmd_stats)

    r = sub.add_parser("refresh-manifest", help="recompute sha256/size/rows of the manifest from files present")
    r.add_argument("--root", default=None, help="data root holding the files")
    r.add_argument("--manifest", default=None, help="manifest file to rewrite")
    r.set_defaults(func=cmd_refresh_manifest)

    f = sub.add_parser("fetch", help="download a dataset of the manifest (resumable; checked against its sha256)")
    f.add_argument("name", nargs="?", default=None, help="manifest entry, e.g. wikipedia-2018 or wikidata5m")
    f.add_argument("--list", action="store_true", help="list the entries that have download URLs, with their sizes")
    f.add_argument("--root", default=None, help="data root to download into (default: $KGRAG_DATA_ROOT, else "
                                                "../shared/data beside a source checkout)")
    f.add_argument("--force", action="store_true", help="download again even where the files are present")
    f.add_argument("--manifest", default=None, help=f"manifest file (default: the shipped {MANIFEST_PATH.name})")
    f.set_defaults(func=cmd_fetch)
