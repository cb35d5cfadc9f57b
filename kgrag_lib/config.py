"""Typed configs and YAML profiles.

A profile (`cpu-smoke`, `gpu-paper`, or a YAML path) holds the defaults of a study; command
line flags and papermill parameters override single fields. Every field carries a help
string so that `kgrag run --help` and the notebooks document themselves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .errors import ConfigError

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
T = TypeVar("T")


def opt(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with a help string (mutable defaults are copied per instance)."""
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> dict[str, Any]:
    """Read a profile by name (shipped in kgrag_lib/profiles) or by YAML path."""
    p = Path(name_or_path)
    if not p.suffix:
        p = PROFILE_DIR / f"{name_or_path}.yaml"
    if not p.exists():
        raise ConfigError(
            f"profile {name_or_path!r} not found; expected one of {available_profiles()} "
            f"or a path to a YAML file"
        )
    with open(p, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a profile must be a YAML mapping at the top level")
    data.setdefault("name", p.stem)
    return data


def profile_section(profile: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Nested lookup that returns {} for missing sections (profiles may omit anything)."""
    cur: Any = profile
    for k in keys:
        if not isinstance(cur, dict):
            return {}
        cur = cur.get(k, {})
    return dict(cur or {})


def field_help(cls: type) -> dict[str, str]:
    return {f.name: f.metadata.get("help", "") for f in fields(cls)}


def make_config(cls: type[T], *layers: dict[str, Any] | None, where: str = "") -> T:
    """Build a dataclass config from layered dicts (later layers win; None values are skipped).

    An unknown key is a ConfigError naming it and listing the accepted fields, so a typo in a
    profile or a papermill parameter never passes silently.
    """
    names = {f.name: f for f in fields(cls)}
    merged: dict[str, Any] = {}
    for layer in layers:
        for k, v in (layer or {}).items():
            key = k.replace("-", "_")
            if key not in names:
                raise ConfigError(
                    f"unknown parameter {k!r}{' in ' + where if where else ''} for {cls.__name__}; "
                    f"accepted: {', '.join(sorted(names))}"
                )
            if v is not None:
                merged[key] = v
    try:
        cfg = cls(**merged)
    except TypeError as exc:  # pragma: no cover - dataclass signature errors
        raise ConfigError(f"{cls.__name__}: {exc}") from exc
    for name, f in names.items():
        val = getattr(cfg, name)
        if f.default is not dataclasses.MISSING and f.default is not None and val is not None:
            want = type(f.default)
            if want is float and isinstance(val, int) and not isinstance(val, bool):
                setattr(cfg, name, float(val))
            elif want in (int, float, str, bool) and not isinstance(val, want):
                raise ConfigError(
                    f"parameter {name!r}{' in ' + where if where else ''} must be {want.__name__}, got {val!r}"
                )
    return cfg


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


@dataclass
class RunConfig:
    """Settings shared by every `kgrag run` (one method on one dataset)."""

    method: str = opt("kg-rag", "method name (see `kgrag run --help` for the list)")
    dataset: str = opt("metaqa-1hop", "dataset name, e.g. metaqa-2hop, hotpotqa, 2wiki")
    split: str = opt("test", "dataset split where the dataset has several (MetaQA: test|dev)")
    qa_file: str | None = opt(None, "a question file in the dataset's format, instead of the default")
    n: int | None = opt(None, "number of questions to sample (None = all)")
    seed: int = opt(0, "seed of the question sample and of every sampled choice in the method")
    model: str = opt("qwen2.5-coder-0.5b-q4", "LLM preset, .gguf path, hf:<id|dir> or openai:<url>#<model>")
    embedder: str = opt("minilm", "embedding model: minilm, mpnet, or a sentence-transformers id/path")
    data_root: str | None = opt(None, "dataset root (default: $KGRAG_DATA_ROOT, then ../shared/data)")
    cache_dir: str | None = opt(None, "cache folder for LLM calls, embeddings and models (default: $KGRAG_CACHE_DIR, then .cache/)")
    out: str = opt("runs/latest", "output folder for predictions.jsonl, metrics.json and manifest.json")
    profile: str = opt("cpu-smoke", "profile name (cpu-smoke, gpu-paper) or YAML path")
