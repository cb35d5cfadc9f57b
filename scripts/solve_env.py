#!/usr/bin/env python
"""Solve the conda part of environment.yml without installing anything, and without a GPU.

`conda env create` on a GPU machine fails late (after downloads) when the file cannot be
solved; this runs the same kind of solve first, with the rattler solver (the one pixi uses),
for any platform and with virtual packages standing in for the GPU machine's driver and libc:

    python -m venv /tmp/rattler && /tmp/rattler/bin/pip install py-rattler pyyaml
    /tmp/rattler/bin/python scripts/solve_env.py                      # linux-64, __cuda=12.4
    /tmp/rattler/bin/python scripts/solve_env.py --cuda 13.0 --glibc 2.39
    /tmp/rattler/bin/python scripts/solve_env.py --channel https://prefix.dev/conda-forge

It needs the channel's repodata (conda.anaconda.org, a mirror given with --channel, or a
local channel folder). It prints the solved versions of the packages that decide whether the
environment works (python, torch and its CUDA build, cuda-version, faiss, numpy, llama.cpp)
and exits 0; 1 when a spec is malformed or the specs cannot be solved (the solver's explanation
follows); 3 when the repodata cannot be fetched. The `pip:` section is not solved here: check it with
`pip install --dry-run` (docs/INSTALL-GPU.md).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KEY_PACKAGES = ("python", "pytorch", "pytorch-gpu", "cuda-version", "cuda-cudart", "libfaiss", "faiss",
                "faiss-gpu", "numpy", "llama.cpp", "llama-cpp-python", "transformers",
                "sentence-transformers", "trl", "peft", "accelerate")


def read_env(path: Path) -> tuple[list[str], list[str], list[str]]:
    """(channels, conda specs, pip lines) of an environment.yml; a clear error if malformed."""
    import yaml

    doc = yaml.safe_load(Path(path).read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("dependencies"), list):
        raise SystemExit(f"{path}: expected a mapping with a `dependencies:` list")
    channels = [str(c) for c in doc.get("channels") or []]
    specs: list[str] = []
    pip: list[str] = []
    for dep in doc["dependencies"]:
        if isinstance(dep, str):
            specs.append(dep)
        elif isinstance(dep, dict) and set(dep) == {"pip"}:
            pip.extend(str(x) for x in dep["pip"] or [])
        else:
            raise SystemExit(f"{path}: unexpected dependency entry {dep!r} (a spec string or a `pip:` list)")
    return channels, specs, pip


def virtual_packages(cuda: str | None, glibc: str, linux: str = "5.15"):
    """The virtual packages a linux-64 GPU machine reports (`conda info` lists the same)."""
    from rattler import BuildString, GenericVirtualPackage, PackageName, Version

    found = [("__unix", "0"), ("__linux", linux), ("__glibc", glibc), ("__archspec", "1")]
    if cuda:
        found.append(("__cuda", cuda))
    build = {"__archspec": "x86_64"}
    return [GenericVirtualPackage(PackageName(n), Version(v), BuildString(build.get(n, "0"))) for n, v in found]


async def solve(channels: list[str], specs: list[str], platform: str, vpkgs, timeout_s: float):
    from rattler import solve as rattler_solve

    return await rattler_solve(channels, specs, platforms=[platform, "noarch"], virtual_packages=vpkgs,
                               timeout=dt.timedelta(seconds=timeout_s))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, default=REPO / "environment.yml", help="the environment file")
    ap.add_argument("--platform", default="linux-64", help="conda subdir to solve for")
    ap.add_argument("--cuda", default="12.4", help="the __cuda virtual package (driver's CUDA version); "
                                                    "'none' for a machine without an NVIDIA driver")
    ap.add_argument("--glibc", default="2.35", help="the __glibc virtual package (Ubuntu 22.04: 2.35)")
    ap.add_argument("--channel", action="append", default=None,
                    help="channel name, URL or local folder to use instead of the file's channels "
                         "(repeatable; e.g. a mirror of conda-forge)")
    ap.add_argument("--timeout", type=float, default=600.0, help="solver time limit in seconds")
    args = ap.parse_args(argv)

    try:
        import rattler  # noqa: F401
    except ImportError:
        print("solve_env: needs py-rattler: python -m venv /tmp/rattler && /tmp/rattler/bin/pip install "
              "py-rattler pyyaml, then run this script with /tmp/rattler/bin/python", file=sys.stderr)
        return 2
    channels, specs, pip = read_env(args.file)
    channels = args.channel or channels
    cuda = None if args.cuda.lower() == "none" else args.cuda
    print(f"solving {len(specs)} conda specs of {args.file.name} for {args.platform} "
          f"(__cuda={cuda or '-'}, __glibc={args.glibc}) from {', '.join(channels)}")
    try:
        records = asyncio.run(solve(channels, specs, args.platform, virtual_packages(cuda, args.glibc),
                                    args.timeout))
    except Exception as exc:  # rattler raises its own exception types per failure kind
        kind = type(exc).__name__
        text = str(exc)
        if "MatchSpec" in kind:
            print(f"INVALID SPEC in {args.file.name} ({kind}): {text}", file=sys.stderr)
            return 1
        if "Solver" in kind or "Unsolvable" in text or "cannot be installed" in text:
            print(f"UNSOLVABLE ({kind}):\n{text}", file=sys.stderr)
            return 1
        print(f"could not fetch repodata ({kind}): {text}\n(the channel must be reachable; "
              "give a mirror or a local channel folder with --channel)", file=sys.stderr)
        return 3
    by_name = {r.name.normalized: r for r in records}
    print(f"solved: {len(records)} packages")
    for name in KEY_PACKAGES:
        r = by_name.get(name)
        if r is not None:
            print(f"  {name:24s} {str(r.version):14s} {r.build}  ({r.channel or r.subdir})")
    if pip:
        print(f"not solved here (pip section): {' '.join(pip)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
