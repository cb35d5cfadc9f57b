"""What made a result: config, package versions, git commit, machine."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from importlib import metadata
from typing import Any

from .paths import REPO_ROOT
from .redact import redact

TRACKED_PACKAGES = (
    "kgrag", "numpy", "pandas", "torch", "sentence-transformers", "transformers", "faiss-cpu",
    "faiss-gpu", "llama-cpp-python", "vllm", "trl", "papermill",
)


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit() -> dict[str, Any]:
    """The commit of the code that ran, and whether the tree had uncommitted changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return {"commit": None, "dirty": None}
        return {"commit": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def manifest(config: dict[str, Any]) -> dict[str, Any]:
    """`config` is recorded `redact`ed: a model spec's token is no part of what made a result."""
    return {
        "config": redact(config),
        "versions": package_versions(),
        "git": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
