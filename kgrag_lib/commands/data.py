"""`kgrag data check | stats | refresh-manifest | fetch | mirror`: inspect, download and serve the datasets under the data root."""

from __future__ import annotations

import argparse
import json
import os
import time

from ..cli_choices import profile_choices
from ..data.check import MISMATCH, check_data, dataset_stats, format_check, stats_datasets, stats_default, statuses_to_json
from ..data.fetch import MIRROR_ENV, TIMEOUT_ENV, TIMEOUT_S, fetch_many, list_fetchable
from ..data.manifest import MANIFEST_PATH, refresh_manifest
from ..data.registry import default_path
from ..errors import ConfigError
from ..paths import data_root, data_root_origin


def _given(args: argparse.Namespace, *names: str) -> None:
    """A path or name flag given empty or blank (`--root "$UNSET"`) is refused: `''` would silently
    mean the default (another data root, the shipped manifest) and `' '` a folder named blank."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and not str(value).strip():
            raise ConfigError(f"--{name.replace('_', '-')} {value!r} is empty (an unset shell variable?); "
                              "give a value or leave the flag out")


def _root_folder(root: str | None) -> None:
    """`--root` that exists must be a folder (a file or a device would fail later, or not at all)."""
    from pathlib import Path

    if root is not None and Path(root).exists() and not Path(root).is_dir():
        raise ConfigError(f"--root {root}: not a folder; expected the data root, a folder holding the datasets")
    if root is not None and Path(root).is_symlink() and not Path(root).exists():   # a broken link: an unmounted disk?
        raise ConfigError(f"--root {root}: a symbolic link to {os.readlink(root)}, which does not exist; mount or "
                          "create its target, or give the data root folder itself")


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 when a file's checksum differs from the manifest; missing files are reported, exit 0."""
    _given(args, "root", "manifest")
    root = data_root(getattr(args, "root", None))
    statuses = check_data(root, getattr(args, "manifest", None))
    if getattr(args, "json", False):
        print(json.dumps({"root": str(root), "files": statuses_to_json(statuses)}, indent=2))
    else:
        print(format_check(statuses, root))
    return 1 if any(s.status == MISMATCH for s in statuses) else 0


def cmd_stats(args: argparse.Namespace) -> int:
    _given(args, "path", "split", "root")
    path = args.path
    if path is None:
        path = default_path(stats_default(args.dataset), getattr(args, "split", None),
                            getattr(args, "root", None), must_exist=True)
    print(json.dumps(dataset_stats(args.dataset, path), ensure_ascii=False))
    return 0


def cmd_refresh_manifest(args: argparse.Namespace) -> int:
    _given(args, "root", "manifest")
    updated = refresh_manifest(data_root(getattr(args, "root", None)), getattr(args, "manifest", None))
    print(f"updated sha256/size/rows of {len(updated)} files in {getattr(args, 'manifest', None) or MANIFEST_PATH}")
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    """Download one manifest entry, or every entry a profile reads (resumable, checked); `--list`
    shows what can be fetched."""
    _given(args, "root", "manifest", "profile", "mirror")
    if any(not str(n).strip() for n in args.name or []):
        raise ConfigError(f"kgrag data fetch: a blank dataset name in {args.name!r} (an unset shell variable?); "
                          "name manifest entries, e.g. metaqa 2wiki")
    _root_folder(args.root)
    if args.list:
        print(list_fetchable(args.manifest, args.root))
        return 0
    if bool(args.name) == bool(args.profile):
        raise ConfigError("kgrag data fetch: name a dataset (e.g. metaqa) or --profile P (every dataset P reads), "
                          "not both; or pass --list")
    if args.profile:
        from ..studies.data_needs import profile_data

        names = profile_data(args.profile)
        print(f"profile {args.profile} reads: {', '.join(names)}")
        n = fetch_many(names, args.root, args.manifest, force=args.force, mirror=args.mirror, timeout=args.timeout)
        what = f"profile {args.profile}"
    else:
        n = fetch_many(args.name, args.root, args.manifest, force=args.force, mirror=args.mirror,
                       timeout=args.timeout, optional_failures=False)
        what = ", ".join(args.name)
    root = data_root(args.root)
    print(f"{what}: {n} file(s) installed under {root} ({data_root_origin(args.root)})" if n else
          f"{what}: nothing to fetch, every file is present under {root}")
    return 0


def cmd_mirror(args: argparse.Namespace) -> int:
    """Serve the root's downloads to `data fetch --mirror` on other machines until interrupted."""
    from ..data.mirror import MirrorServer, mirror_plan

    _given(args, "root", "manifest", "profile", "host")
    _root_folder(args.root)
    root = data_root(args.root)
    if not root.is_dir():
        raise ConfigError(f"--root {root}: no such folder; expected a data root holding the datasets to serve")
    names = args.name or None
    if args.profile:
        if names:
            raise ConfigError("kgrag data mirror: name datasets or --profile P, not both (or neither: every entry)")
        from ..studies.data_needs import profile_data

        names = profile_data(args.profile)
    served = mirror_plan(root, args.manifest, names)
    for line in served.missing:
        print(f"not served: {line}")
    if not served.files:
        raise ConfigError(f"kgrag data mirror: {root} holds none of the downloads "
                          f"{'of ' + ', '.join(names) if names else 'the manifest names'}; nothing to serve")
    server = MirrorServer(served.files, args.host, args.port, allow_remote=args.allow_remote)
    what = f"--profile {args.profile}" if args.profile else " ".join(served.entries)
    print(f"serving {len(served.files)} download(s), {served.total_bytes() / 2**20:.1f} MiB, of {root} "
          f"({', '.join(served.entries)})")
    print(f"mirror: {server.url}", flush=True)   # scripts read this line
    print(f"on another machine: kgrag data fetch {what} --mirror {server.url}   (Ctrl-C here to stop)", flush=True)
    import signal

    def _stop(signum, frame):   # SIGTERM (a script's stop) and SIGINT, even where a background start ignored it
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print(f"stopped after {len(server.requests)} request(s)")
    finally:
        server.server_close()
    return 0


def _shard(raw: str | None) -> tuple[int, int] | None:
    if raw is None:
        return None
    i, sep, n = raw.partition("/")
    plain = all(part.isascii() and part.isdigit() for part in (i, n))   # '²'.isdigit() is True, int('²') fails
    if not (sep and plain and 0 <= int(i) < int(n)):
        raise ConfigError(f"--shard {raw!r}: expected I/N with 0 <= I < N, e.g. 0/4 (shard 0 of 4)")
    return int(i), int(n)


def _check_device(device: str | None) -> None:
    """`--device`: cpu, cuda, cuda:N or mps, and one this machine has (checked before any data is read)."""
    import re

    if device is None:
        return
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
        raise ConfigError(f"--device {device!r}: expected cpu, cuda, cuda:N or mps (or leave it out: cuda when "
                          "torch sees one, else cpu)")
    if device.startswith("cuda"):
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.partition(":")[2] or 0)
        if index >= count:
            raise ConfigError(f"--device {device}: torch sees {count} CUDA device(s) here"
                              + ("" if count else " (a CPU-only torch build, or no GPU)") + "; use cpu or leave it out")
    elif device == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise ConfigError("--device mps: torch sees no Apple GPU here; use cpu or leave it out")


def cmd_embed(args: argparse.Namespace) -> int:
    """Embed a corpus or a KG's seed descriptions ahead of a run, or one shard of them (one process
    per GPU, `CUDA_VISIBLE_DEVICES=i ... --shard i/N`): the array lands where the run looks for it
    (same embedder identity: pass the run's `--embedder` and dtype), the last shard merges."""
    from ..kg.sources import load_kg
    from ..methods.kg_infused.corpus import corpus_embedding_source
    from ..methods.kg_infused.kg_sources import kg_seed_embedding_source
    from ..paths import cache_dir
    from ..retrieval import cache_path, embed_cached, embed_shard, shard_path
    from ..retrieval.embedder import load_embedder

    _given(args, "corpus", "kg", "embedder", "root", "cache_dir")
    if bool(args.corpus) == bool(args.kg):
        raise ConfigError("kgrag data embed: name exactly one of --corpus (e.g. wikipedia) or --kg (e.g. wikidata5m)")
    shard = _shard(args.shard)
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size {args.batch_size}: expected a number of texts >= 1, e.g. 64")
    _check_device(args.device)
    _root_folder(args.root)
    root, cache = data_root(args.root), cache_dir(args.cache_dir)
    if args.corpus:
        texts, kw = corpus_embedding_source(args.corpus, root, cache)
    else:
        texts, kw = kg_seed_embedding_source(load_kg(args.kg, data_root=root, cache_dir=cache))
    embedder = load_embedder(args.embedder, device=args.device, dtype=args.dtype, cache_dir=cache)
    final = cache_path(embedder, texts, cache_dir=cache, **kw)
    what = f"{args.corpus or args.kg}: {len(texts)} texts, embedder {embedder.identity}"
    t0 = time.perf_counter()
    if shard is None:
        fresh = not final.exists()
        embed_cached(embedder, texts, cache_dir=cache, batch_size=args.batch_size, **kw)
        rows = len(texts)
    else:
        fresh = not shard_path(final, *shard).exists() and not final.exists()
        res = embed_shard(embedder, texts, shard, cache_dir=cache, batch_size=args.batch_size, **kw)
        rows = res.rows[1] - res.rows[0]
        what += f", shard {shard[0]}/{shard[1]} (rows {res.rows[0]}-{res.rows[1] - 1})"
        if res.missing:
            what += f"; shards {', '.join(map(str, res.missing))} still to run (the last one merges)"
    secs = time.perf_counter() - t0
    rate = f", {rows / secs:,.0f} texts/s" if fresh and secs > 0 else " (found done)"
    print(f"{what}\n  {rows} rows in {secs:.1f} s{rate} -> {final if final.exists() else final.parent}")
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
    s.add_argument("--dataset", required=True, choices=list(stats_datasets()),
                   help="a registered dataset (kgrag_lib/data/registry.py), or a family of them by manifest key")
    s.add_argument("--path", default=None, help="the file (default: the dataset's default split under --root; "
                                                "for metaqa a QA file)")
    s.add_argument("--split", default=None, help="split used when --path is not given")
    s.add_argument("--root", default=None, help="data root used when --path is not given")
    s.set_defaults(func=cmd_stats)

    r = sub.add_parser("refresh-manifest", help="recompute sha256/size/rows of the manifest from files present")
    r.add_argument("--root", default=None, help="data root holding the files")
    r.add_argument("--manifest", default=None, help="manifest file to rewrite")
    r.set_defaults(func=cmd_refresh_manifest)

    f = sub.add_parser("fetch", help="download a dataset of the manifest, or all a profile reads (resumable; "
                                     "checked against its sha256)")
    f.add_argument("name", nargs="*", default=None, help="manifest entries, e.g. metaqa 2wiki, or wikipedia-2018")
    f.add_argument("--profile", default=None, choices=profile_choices(), metavar="PROFILE",
                   help="fetch every dataset this profile's notebooks and methods read (from its resolved settings)")
    f.add_argument("--list", action="store_true", help="list the entries that have download URLs, with their sizes")
    f.add_argument("--root", default=None, help="data root to download into (default: $KGRAG_DATA_ROOT, else "
                                                "../shared/data beside a source checkout, else the per-user data "
                                                "folder ~/.local/share/kgrag/data)")
    f.add_argument("--mirror", default=None, help=f"fetch https://host/path from <mirror>/host/path instead (a local "
                                                  f"copy of the sources); default ${MIRROR_ENV}")
    f.add_argument("--timeout", type=float, default=None,
                   help=f"seconds a download may stay silent (connecting or between reads) before the try counts as "
                        f"cut and is resumed (default ${TIMEOUT_ENV}, else {TIMEOUT_S:g})")
    f.add_argument("--force", action="store_true", help="download again even where the files are present")
    f.add_argument("--manifest", default=None, help=f"manifest file (default: the shipped {MANIFEST_PATH.name})")
    f.set_defaults(func=cmd_fetch)

    m = sub.add_parser("mirror", help="serve a data root's downloads over HTTP in the layout `data fetch --mirror` "
                                      "reads (loopback unless --allow-remote), until Ctrl-C")
    m.add_argument("name", nargs="*", default=None, help="manifest entries to serve (default: every one found)")
    m.add_argument("--profile", default=None, choices=profile_choices(), metavar="PROFILE",
                   help="serve the datasets this profile reads")
    m.add_argument("--root", default=None, help="data root to serve (default: the data root kgrag resolves)")
    m.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; another needs "
                                                       "--allow-remote)")
    m.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0: any free port, printed)")
    m.add_argument("--allow-remote", action="store_true",
                   help="listen on a non-loopback --host: anyone who reaches the port can read the data")
    m.add_argument("--manifest", default=None, help=f"manifest file (default: the shipped {MANIFEST_PATH.name})")
    m.set_defaults(func=cmd_mirror)

    e = sub.add_parser("embed", help="embed a corpus or a KG's seed descriptions ahead of a run (or one shard, "
                                     "one process per GPU), into the cache the run reads")
    e.add_argument("--corpus", default=None, help="a KG-Infused corpus: wikipedia, wikipedia:<psgs_w100.tsv>, pooled, ...")
    e.add_argument("--kg", default=None, help="a KG whose seed descriptions to embed: wikidata5m, wikidata5m:<folder>, ...")
    e.add_argument("--embedder", default="minilm", help="the run's embedder spec (minilm, contriever-msmarco, hf:<id>, "
                                                          "a folder); default minilm")
    e.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"],
                   help="encoder precision on a GPU (default $KGRAG_EMBEDDER_DTYPE, else fp32); the run must use the "
                        "same, since it is part of the cache key")
    e.add_argument("--batch-size", type=int, default=64, help="texts per encoder batch (512 suits fp16 on a large GPU)")
    e.add_argument("--shard", default=None, help="I/N: embed only shard I of N (rows I*len/N to (I+1)*len/N)")
    e.add_argument("--device", default=None, help="torch device (default: cuda when torch sees one, else cpu)")
    e.add_argument("--root", default=None, help="data root (default: $KGRAG_DATA_ROOT, else ../shared/data)")
    e.add_argument("--cache-dir", default=None, help="cache folder (default: $KGRAG_CACHE_DIR, else .cache)")
    e.set_defaults(func=cmd_embed)
