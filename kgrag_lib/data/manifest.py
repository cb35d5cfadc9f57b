"""The data manifest (`kgrag_lib/data/manifests/datasets.yaml`, package data so that an installed
kgrag checks data too; `data/manifests/datasets.yaml` links to it): what each dataset's files are
and how to get them.

Loaders use it to turn a missing file into a message that says where to obtain it; `kgrag data
check` compares files on disk with its sizes and sha256 sums; `refresh_manifest` recomputes
those facts from files present (run by maintainers, never hand-edited).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from ..jsonl import atomic_text
MANIFEST_PATH = Path(__file__).resolve().parent / "manifests" / "datasets.yaml"


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> dict[str, Any]:
    return _read(Path(path))


def _read(path: Path) -> dict[str, Any]:
    """The manifest document, refused in one line naming the file when it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: not a YAML data manifest ({reason[:160]}); expected UTF-8 YAML with a "
                          "top-level 'datasets:' mapping") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("datasets"), dict):
        raise ConfigError(f"{path}: expected a top-level 'datasets:' mapping")
    for name, entry in doc["datasets"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("files", []), list) \
                or not all(isinstance(f, dict) and isinstance(f.get("path"), str) for f in entry.get("files", [])):
            raise ConfigError(f"{path}: datasets.{name}: expected a mapping whose 'files' is a list of "
                              "{path: ..., sha256: ..., size: ..., rows: ...}")
        for spec in entry.get("files", []):
            check_file_path(spec["path"], f"{path}: datasets.{name}: path {spec['path']!r}")
    return doc


def check_file_path(raw: str, where: str) -> str:
    """A manifest file's `path`, refused unless it names a file inside the data root: relative,
    in '/'-separated parts, none of them '..' (`data fetch` writes there, `data check` reads there)."""
    parts = raw.split("/")
    bad = ("is absolute" if raw.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[/\\]", raw) else
           "leaves the data root ('..')" if ".." in parts else
           "names no file" if not raw.strip() or parts[-1] in ("", ".") or "\0" in raw else None)
    if bad:
        raise ConfigError(f"{where} {bad}; expected a path relative to the data root, e.g. metaqa/kb.txt")
    return raw


def load_manifest(path: str | Path | None = None) -> dict[str, Any]:
    """The parsed manifest; an absent file (e.g. a wheel install without the repo) gives no datasets."""
    p = Path(path) if path else MANIFEST_PATH
    if not p.exists():
        return {"datasets": {}}
    return _load(str(p), p.stat().st_mtime)


def obtain_hint(dataset: str, manifest: dict[str, Any] | None = None, root: str | Path | None = None) -> str:
    """How to obtain a dataset, from the manifest (source and steps): the exact `kgrag data fetch`
    command (naming `root`, the data root that lacks it, when known) where the manifest has a URL."""
    entry = (manifest or load_manifest())["datasets"].get(dataset)
    if not entry:
        return "see kgrag_lib/data/manifests/datasets.yaml and data/README.md of the repository"
    parts = [str(entry.get("obtain", "")).strip()]
    if any(spec.get("url") for spec in entry.get("files", [])):
        where = f" --root {root}" if root else ""
        parts.insert(0, f"Run `kgrag data fetch {dataset}{where}` (resumable; or `kgrag data fetch --profile "
                        f"<profile>{where}` for all a profile reads), or by hand:")
    if entry.get("source"):
        parts.append(f"Source: {str(entry['source']).strip()}")
    return " ".join(p for p in parts if p)


def sha256_file(path: str | Path, block: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def count_rows(path: str | Path) -> int:
    """Records in a data file: JSON list/object length, CSV rows, or non-blank lines (JSONL, txt, tsv)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        with open(path, encoding="utf-8-sig") as f:
            return len(json.load(f))
    if suffix == ".csv":
        with open(path, encoding="utf-8-sig", newline="") as f:
            return sum(1 for row in csv.reader(f) if any(c.strip() for c in row))
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def file_facts(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    return {"sha256": sha256_file(path), "size": path.stat().st_size, "rows": count_rows(path)}


def refresh_manifest(root: str | Path, path: str | Path | None = None) -> list[str]:
    """Recompute sha256/size/rows of every manifest file present under `root`; returns the paths updated."""
    p = Path(path) if path else MANIFEST_PATH
    doc = _read(p)
    header = []
    with open(p, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            header.append(line)
    updated = []
    for entry in doc["datasets"].values():
        for spec in entry.get("files", []):
            fp = Path(root) / spec["path"]
            if fp.is_file():
                spec.update(file_facts(fp))
                updated.append(spec["path"])
    # replaced whole (temporary file, rename): a full disk leaves the old manifest, never a cut one
    atomic_text(p, "".join(header) + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100))
    _load.cache_clear()
    return updated
