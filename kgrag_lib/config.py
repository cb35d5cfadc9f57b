"""Typed configs and YAML profiles.

A profile (`cpu-smoke`, `gpu-paper`, or a YAML path) holds the defaults of a study; command
line flags and papermill parameters override single fields. Every field carries a help
string so that `kgrag run --help` and the notebooks document themselves, and the values it
accepts (`opt(min=, max=, choices=)`), so a bad value is refused where it is set.

This module is a leaf (it imports nothing of kgrag_lib but errors): the methods and notebooks
check their own profile sections (`read_profile`'s `checks`), so reading settings loads no paper.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

from .errors import ConfigError

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
T = TypeVar("T")


_NO_VALUE = object()


def opt(default: Any, help: str, *, min: float | None = None, max: float | None = None, gt: float | None = None,
        lt: float | None = None, choices: tuple | list | None = None, absent: Any = _NO_VALUE, **kw: Any) -> Any:
    """A dataclass field with a help string and the values it accepts (mutable defaults are
    copied per instance). `min`/`max` are inclusive bounds, `gt`/`lt` exclusive ones, `choices`
    the allowed values; `make_config` and `check_values` refuse anything else (None passes
    when the annotation allows it). `absent`: for a field added after runs were made, the value
    a manifest without it stands for (what the code did before), so those runs keep their
    identity when that value is asked and are refused when another is."""
    meta = {"help": help, **{k: v for k, v in (("min", min), ("max", max), ("gt", gt), ("lt", lt),
                                                 ("choices", tuple(choices) if choices is not None else None))
                             if v is not None}}
    if absent is not _NO_VALUE:
        meta["absent"] = absent
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


PROFILE_KEYS = {
    "name": "the profile's name (default: the file's stem)",
    "extends": "a profile (shipped name or YAML path; a relative path is read beside this file) whose sections this "
               "one starts from: mappings merge key by key, any other value (a list, a number) replaces",
    "description": "one line saying what the profile is for",
    "run": "RunConfig defaults of every run (n, seed, model, embedder, data_root, cache_dir, ...)",
    "models": "the LLM per study family (metaqa, kg-infused, ...): beats run.model for that family's methods",
    "embedders": "the embedding model per study family (each paper's retriever): beats run.embedder for that "
                 "family's methods",
    "methods": "per-method settings, one section per method name (each method's config dataclass)",
    "notebooks": "per-notebook settings, one section per notebook name (kgrag_lib.studies)",
    "server": "how kgrag starts a server for vllm-serve: / llamacpp-server: / llama-server: models (ServerConfig: "
              "max_model_len, dtype, gpu_memory_utilization, cpu_kvcache_gib, startup_timeout, python, ...)",
}


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


ProfileCheck = Callable[[dict[str, Any], str], None]


class CheckedProfile(dict):
    """A profile as `read_profile` returned it, with the checks it passed: read again with no more checks than
    these and unchanged since, it is returned as it is, so a run checks its profile once (`kgrag run` checks every
    section, then `experiment.resolve_run` reads the same dict). Changed in place, it is checked again."""

    def __init__(self, data: dict[str, Any], checks: tuple[ProfileCheck, ...]) -> None:
        super().__init__(data)
        self.checks = checks
        self.digest = _profile_digest(data)

    def passed(self, checks: tuple[ProfileCheck, ...]) -> bool:
        return set(checks) <= set(self.checks) and _profile_digest(self) == self.digest


# written out (a study's profile.yaml) as the mapping it is
yaml.SafeDumper.add_representer(CheckedProfile, yaml.representer.SafeRepresenter.represent_dict)


def _profile_digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


def read_profile(name_or_path: str | Path | dict, *checks: ProfileCheck,
                 _children: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a profile: by name (shipped in kgrag_lib/profiles), YAML path, or a dict.

    The keys this module knows are checked here (top level, `run`, the shape of `models`,
    `methods` and `notebooks`); the sections of methods and notebooks are checked by the
    layers that define them, passed as `checks` (each called with the profile and where it
    came from): `methods.registry.check_profile_methods`, `studies.check_profile_notebooks`.
    `studies.load_profile` runs them all. So a misspelt section is refused with the file, the
    key and the accepted keys instead of silently falling back to code defaults.
    """
    if isinstance(name_or_path, CheckedProfile) and name_or_path.passed(checks):
        return name_or_path
    if isinstance(name_or_path, dict):
        data = dict(name_or_path)
        data.setdefault("name", "custom")
        where = f"profile {data['name']!r}"
    else:
        p = Path(name_or_path)
        if _is_name(name_or_path):
            p = PROFILE_DIR / f"{name_or_path}.yaml"
        data = _read_yaml(p, name_or_path)
        data.setdefault("name", p.stem)
        where = str(p)
        parent = data.get("extends")
        if isinstance(parent, str) and parent and checks:
            q = _parent_path(parent, p)
            chain = (*_children, p.resolve())
            if q.resolve() not in chain and q.is_file():   # (a cycle is refused by _extend below)
                # the parent checked on its own first, so a misspelt key there is reported against its file
                read_profile(q, *checks, _children=chain)
        data = _extend(data, p, where, seen=(p.resolve(),))
    check_profile_basics(data, where)
    for check in checks:
        check(data, where)
    return CheckedProfile(data, checks)


def fill_n(section: dict[str, Any], n: Any, where: str) -> dict[str, Any]:
    """`{n}` in a method's string setting (a KG spec, `text:{dataset}:n={n}:seed={seed}`) is the run's n,
    filled per run like `{dataset}` and `{seed}` (`methods.common.resolve_spec`): `kgrag run --n 20` builds its
    KG from the same 20-question sample it answers, and a variant with another n (gpu-smoke's 2) needs no
    copy of every spec. Filled before the run's identity is taken, so the identity holds the number, as it
    did when the spec was written out. `where` names the section in an error."""
    if not any(isinstance(v, str) and "{n}" in v for v in section.values()):
        return section
    if isinstance(n, bool) or not isinstance(n, int):
        key = next(k for k, v in section.items() if isinstance(v, str) and "{n}" in v)
        raise ConfigError(f"{where}, parameter {key!r}: {section[key]!r} uses {{n}}, the run's n, but the run's n is {n!r} "
                          f"(all questions); give the run an n (--n or the profile's run.n) or write the number "
                          f"in the spec")
    return {k: v.replace("{n}", str(n)) if isinstance(v, str) else v for k, v in section.items()}


def fill_run_n(profile: dict[str, Any], n: Any, where: str) -> dict[str, Any]:
    """`profile` with `{n}` filled with `n` in every method section that can take it (`fill_n`); a
    section using `{n}` while `n` is not a number is left as written (the run that reads it refuses)."""
    methods = profile.get("methods")
    if not isinstance(methods, dict) or isinstance(n, bool) or not isinstance(n, int):
        return profile
    return {**profile, "methods": {name: fill_n(section, n, f"{where}, methods.{name}") if isinstance(section, dict)
                                   else section for name, section in methods.items()}}


def _is_name(profile: str | Path) -> bool:
    """A shipped profile's name (cpu-reference-1.5b: its ".5b" is no file suffix), not a YAML path."""
    return Path(profile).suffix.lower() not in (".yaml", ".yml")


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merge(base.get(k), v) if k in base else v for k, v in over.items()}}
    return over


def _parent_path(parent: str, child: Path) -> Path:
    """The file an `extends:` names: a shipped profile's name, or a path relative to the child."""
    q = Path(parent)
    return PROFILE_DIR / f"{parent}.yaml" if _is_name(parent) else (q if q.is_absolute() else child.parent / q)


def _extend(data: dict[str, Any], p: Path, where: str, seen: tuple[Path, ...]) -> dict[str, Any]:
    """`data` laid over the profile its `extends` names (recursively), so a variant of a profile
    (another model, another n) states only what differs instead of copying every section."""
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{where}, extends: expected a profile name or YAML path, got {parent!r}")
    q = _parent_path(parent, p)
    if q.resolve() in seen:
        raise ConfigError(f"{where}, extends: {parent!r} extends itself through "
                          f"{' -> '.join(str(s) for s in seen)}; a profile chain must end")
    base = _read_yaml(q, parent)
    base.setdefault("name", q.stem)
    base = _extend(base, q, str(q), seen=(*seen, q.resolve()))
    return _merge(base, data)


def profile_label(profile: str | Path) -> str:
    """The folder name of a study's results and figures: a shipped profile's own name; for any other
    file its stem and the first 8 hex digits of its content's sha256, so a copy or an edit that
    shares a shipped profile's file name (some/dir/cpu-smoke.yaml) never writes into that
    profile's folders, and two different files never share one."""
    p = Path(profile)
    if _is_name(profile):
        return str(profile)
    if p.resolve().parent == PROFILE_DIR:
        return p.stem
    if not p.is_file():
        _read_yaml(p, profile)   # the one message for a profile that is not there
    return f"{p.stem}-{hashlib.sha256(p.read_bytes()).hexdigest()[:8]}"


def _read_yaml(p: Path, asked: str | Path) -> dict[str, Any]:
    if not p.is_file():
        raise ConfigError(
            f"profile {str(asked)!r} not found{' (it is a directory)' if p.is_dir() else ''}; "
            f"expected one of {available_profiles()} or a path to a YAML file"
        )
    try:
        with open(p, encoding="utf-8") as fh:
            data = yaml.load(fh, Loader=UniqueKeyLoader) or {}   # noqa: S506 - a SafeLoader subclass
    except DuplicateKeyError as exc:
        raise ConfigError(f"{p}:{exc.line}: the key {exc.key!r} appears twice in one mapping (the second would "
                          f"silently replace the first); merge them into one") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start}); expected a YAML profile") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{p}{at}: YAML syntax error: {what}; expected a YAML mapping of sections") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a profile must be a YAML mapping at the top level")
    size = expanded_size(data)
    if size > MAX_PROFILE_NODES:
        raise ConfigError(f"{p}: its anchors and aliases expand to {size:,} values (at most {MAX_PROFILE_NODES:,}); "
                          "a profile that large is an alias bomb or a mistake: write the values out or use fewer aliases")
    return data


MAX_PROFILE_NODES = 100_000
# The largest seed every backend reproduces: llama.cpp takes 0xFFFFFFFF as "pick a random seed", and
# some servers read seeds as signed 32-bit integers.
MAX_SEED = 2**31 - 1


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(f"duplicate key {key!r} at line {line}")
        self.key, self.line = key, line


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in one mapping is refused: PyYAML keeps the
    last one silently, so a second `methods:` section would replace the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:   # the mapping's own keys (a `<<` merge may be overridden: not counted)
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise DuplicateKeyError(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 (PyYAML) reads 010 as 8, 0x10 as 16, 0b11 as 3 and 1_000 as 1000; a user who typed
# --set top_k=010 meant 10 or the string. Such a value on the command line is refused.
_AMBIGUOUS_NUMBER = re.compile(r"^[-+]?(?:0[0-9_]+|0[xXoObB][0-9a-fA-F_]+|[0-9]+(?:_[0-9]+)+(?:\.[0-9_]*)?|[0-9]+:[0-5]?[0-9](?::[0-5]?[0-9])*)$")


def cli_yaml_value(raw: str, where: str) -> Any:
    """A value given on the command line (`--set k=v`, `-p name v`), read as YAML, except the
    number forms YAML 1.1 reads in surprising ways (010 -> 8, 0x10 -> 16, 1:30 -> 90), which are
    refused with the reading to use instead."""
    text = raw.strip()
    if _AMBIGUOUS_NUMBER.match(text):
        raise ConfigError(f"{where} {raw!r}: an ambiguous number (YAML 1.1 reads 010 as 8, 0x10 as 16, 1_000 as "
                          f"1000 and 1:30 as 90); write it in plain decimal, or quote it to pass the text "
                          f"(e.g. \"'{text}'\")")
    if _DECIMAL_FLOAT.match(text):   # YAML 1.1 reads 1e-3 (no dot) as a string
        return float(text)
    return yaml.safe_load(raw)


_DECIMAL_FLOAT = re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$")


def expanded_size(obj: Any) -> int:
    """How many values `obj` holds once every YAML alias is written out (as a manifest writes it).

    YAML aliases load as shared objects, so a few hundred bytes can stand for billions of values
    that only blow up when the profile is dumped; counting per shared object keeps this linear."""
    memo: dict[int, int] = {}

    def count(o: Any) -> int:
        if isinstance(o, dict):
            children = [*o.keys(), *o.values()]
        elif isinstance(o, (list, tuple)):
            children = list(o)
        else:
            return 1
        if id(o) not in memo:
            memo[id(o)] = 1 + sum(count(c) for c in children)
        return memo[id(o)]

    return count(obj)


def profile_mapping(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """Section `key` of a profile ({} when absent); anything but a mapping is refused."""
    sec = data.get(key)
    if sec is None:
        return {}
    if not isinstance(sec, dict):
        raise ConfigError(f"{where}: section {key!r} must be a mapping, got {type(sec).__name__}")
    return sec


def refuse_unknown(keys: Any, accepted: Any, where: str, what: str) -> None:
    """ConfigError naming the keys not in `accepted` and listing those accepted."""
    bad = sorted(set(keys) - set(accepted))
    if bad:
        raise ConfigError(f"{where}: unknown {what} {', '.join(map(repr, bad))}; accepted: {', '.join(sorted(accepted))}")


def check_profile_basics(data: dict[str, Any], where: str) -> None:
    """Refuse unknown top-level keys, a bad `run` section, and sections that are not mappings."""
    refuse_unknown(data, PROFILE_KEYS, where, "top-level key(s)")
    make_config(RunConfig, profile_mapping(data, "run", where), where=f"{where}, section run")
    for section in ("models", "embedders"):
        for fam, spec in profile_mapping(data, section, where).items():
            if spec is not None and not isinstance(spec, str):
                raise ConfigError(f"{where}, {section}.{fam}: expected a model spec string, got {spec!r}")
    profile_mapping(data, "methods", where)
    profile_mapping(data, "notebooks", where)
    make_config(ServerConfig, profile_mapping(data, "server", where), where=f"{where}, section server")


def profile_section(profile: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Nested lookup that returns {} for missing sections (profiles may omit anything)."""
    cur: Any = profile
    for k in keys:
        if not isinstance(cur, dict):
            return {}
        cur = cur.get(k, {})
    return dict(cur or {})


def absent_values(cfg: Any, prefix: str) -> dict[str, Any]:
    """`{prefix.field: value}` of the fields of a config that declare what their absence means."""
    return {f"{prefix}.{f.name}": f.metadata["absent"] for f in fields(cfg) if "absent" in f.metadata}


def field_help(cls: type) -> dict[str, str]:
    return {f.name: f.metadata.get("help", "") for f in fields(cls)}


_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict}


def _allowed_types(f: dataclasses.Field) -> tuple[set[type], bool] | None:
    """The plain types a field's annotation admits, and whether None is allowed; None when the
    annotation is not a simple union of int/float/str/bool/list/dict (then nothing is checked)."""
    ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    kinds: set[type] = set()
    optional = False
    for part in (a.strip() for a in ann.split("|")):
        base = part.split("[", 1)[0]
        if base == "None":
            optional = True
        elif base in _TYPES:
            kinds.add(_TYPES[base])
        else:
            return None
    return (kinds, optional) if kinds else None


def make_config(cls: type[T], *layers: dict[str, Any] | None, where: str = "") -> T:
    """Build a dataclass config from layered dicts (later layers win; None values are skipped).

    An unknown key is a ConfigError naming it and listing the accepted fields, and a value of
    the wrong type (a string for a number, a boolean for an integer) is refused too, so a typo
    in a profile or a papermill parameter never passes silently.
    """
    if len(layers) == 1 and isinstance(layers[0], cls):
        # already typed and checked (experiment.resolve_run): a config is built once, not once per layer
        return dataclasses.replace(layers[0])
    names = {f.name: f for f in fields(cls)}
    at = f"{where}: " if where else ""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer is not None and not isinstance(layer, dict):
            raise ConfigError(f"{at}settings for {cls.__name__}: expected a mapping, got {type(layer).__name__}")
        for k, v in (layer or {}).items():
            key = str(k).replace("-", "_")
            if key not in names:
                raise ConfigError(
                    f"{at}unknown parameter {k!r} for {cls.__name__}; accepted: {', '.join(sorted(names))}"
                )
            if v is not None:
                merged[key] = v
    for name, val in merged.items():
        allowed = _allowed_types(names[name])
        if allowed is None:
            continue
        kinds, _ = allowed
        if float in kinds and isinstance(val, int) and not isinstance(val, bool):
            merged[name] = val = float(val)
        ok = isinstance(val, tuple(kinds)) and not (isinstance(val, bool) and bool not in kinds)
        if not ok:
            expected = " or ".join(sorted(k.__name__ for k in kinds))
            raise ConfigError(f"{at}parameter {name!r} must be {expected}, got {val!r}")
    try:
        cfg = cls(**merged)
    except TypeError as exc:  # pragma: no cover - dataclass signature errors
        raise ConfigError(f"{cls.__name__}: {exc}") from exc
    check_values(cfg, where)
    return cfg


def _accepted(f: dataclasses.Field) -> str | None:
    """What the `opt` constraints of a field accept, in words (None: no constraint)."""
    m = f.metadata
    if "choices" in m:
        return "one of " + ", ".join(map(str, m["choices"]))
    lo = ("[", m["min"]) if "min" in m else ("(", m["gt"]) if "gt" in m else None
    hi = (m["max"], "]") if "max" in m else (m["lt"], ")") if "lt" in m else None
    if lo is None and hi is None:
        return None
    allowed = _allowed_types(f)
    kind = "an integer" if allowed and int in allowed[0] and float not in allowed[0] else "a number"
    if lo is not None and hi is not None:
        return f"{kind} in {lo[0]}{lo[1]}, {hi[0]}{hi[1]}"
    if lo is not None:
        return f"{kind} {'>=' if lo[0] == '[' else '>'} {lo[1]}"
    return f"{kind} {'<=' if hi[1] == ']' else '<'} {hi[0]}"


def _within(f: dataclasses.Field, v: Any) -> bool:
    m = f.metadata
    if "choices" in m:
        return v in m["choices"]
    if isinstance(v, float) and not math.isfinite(v):   # inf passes "> 0"; NaN no bound at all
        return False
    try:  # written so that NaN is outside every bound
        return (("min" not in m or v >= m["min"]) and ("gt" not in m or v > m["gt"])
                and ("max" not in m or v <= m["max"]) and ("lt" not in m or v < m["lt"]))
    except TypeError:
        return False


def check_values(cfg: Any, where: str = "") -> None:
    """Refuse a config whose field values break the bounds or choices their `opt` declares,
    then run its own `cross_check()` (rules between fields) if it has one. `make_config` calls
    it; code that takes a config dataclass built directly calls it too."""
    at = f"{where}: " if where else ""
    for f in fields(cfg):
        what = _accepted(f)
        v = getattr(cfg, f.name)
        if what is None or (v is None and (_allowed_types(f) or (set(), False))[1]):
            continue
        if isinstance(v, bool) or not _within(f, v):
            null = " or null" if (_allowed_types(f) or (set(), False))[1] else ""
            raise ConfigError(f"{at}parameter {f.name!r} must be {what}{null}, got {v!r}")
    cross_check = getattr(cfg, "cross_check", None)
    if cross_check is not None:
        try:
            cross_check()
        except ConfigError as exc:
            raise ConfigError(f"{at}{exc}") from None


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


@dataclass
class RunConfig:
    """Settings shared by every `kgrag run` (one method on one dataset)."""

    method: str = opt("kg-rag", "method name (see `kgrag run --help` for the list)")
    dataset: str = opt("metaqa-1hop", "dataset name, e.g. metaqa-2hop, hotpotqa, 2wiki")
    split: str | None = opt(None, "dataset split (None: the dataset's default, e.g. MetaQA test, 2Wiki corpus354)")
    qa_file: str | None = opt(None, "a question file in the dataset's format, instead of the default")
    n: int | None = opt(None, "number of questions to sample (None = all)")
    seed: int = opt(0, "seed of the question sample and of every sampled choice in the method (at most 2**31 - 1: llama.cpp reads 4294967295 as 'a random seed')", min=0, max=MAX_SEED)
    model: str | None = opt(None, "LLM preset, .gguf path, hf:<id|dir> or openai:<url>#<model> (None: the "
                                  "profile's models.<family>, else the embedded default)")
    engine: str = opt("hf", "what runs the hub-model presets the profile names (models:, a method's generator): hf = "
                            "transformers in kgrag's process; vllm-serve = a vLLM kgrag starts once per study for "
                            "each model (scripts/install_vllm.sh); auto = vllm-serve where a CUDA build of vLLM is "
                            "installed and a CUDA GPU is visible, else hf (the doctor says which). run.model, "
                            "--model and prefixed specs are used as written", choices=("auto", "vllm-serve", "hf"))
    embedder: str = opt("minilm", "embedding model: minilm, mpnet (shipped), a paper's retriever (multi-qa-mpnet-dot, "
                                  "contriever-msmarco, bge-large), hf:<hub id or folder>, a folder or a hub id; "
                                  "the profile's embedders.<family> wins for that family")
    data_root: str | None = opt(None, "dataset root (default: $KGRAG_DATA_ROOT, then ../shared/data)")
    cache_dir: str | None = opt(None, "cache folder for LLM calls, embeddings and models (default: $KGRAG_CACHE_DIR, then .cache/)")
    concurrency: int | None = opt(None, "questions answered at once (None: the backend's default, 1 for in-process "
                                        "models, more for servers; a transformers `hf:` model computes them as "
                                        "batches); which questions are answered does not depend on it, the batched "
                                        "arithmetic of a server or `hf:` model rarely changes a token (docs/GPU.md)")
    max_in_flight: int | None = opt(None, "requests a server or transformers (`hf:`) model is sent at once within one "
                                          "step: a text KG's chunk extraction (SA-RAG, TCR-QF), DPO's decodings, a "
                                          "batch (None: the run's concurrency, else the backend's: 8 for a server, "
                                          "1 in-process; llama.cpp in-process: always 1)", min=1)
    request_timeout: float | None = opt(None, "seconds one server request may take before the run stops saying the "
                                              "server stalled (None: the backend's, 60; server models only)", gt=0)
    request_retries: int | None = opt(None, "retries of a server request after a connection error, HTTP 408/409/429 "
                                            "or 5xx (None: the backend's, 2; server models only)", min=0)
    out: str = opt("runs/latest", "output folder for predictions.jsonl, metrics.json and manifest.json")
    profile: str = opt("cpu-smoke", "profile name (cpu-smoke, gpu-paper) or YAML path")


VLLM_DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass
class ServerConfig:
    """How kgrag starts an inference server for a run (`--model vllm-serve:<model>`,
    `llamacpp-server:<gguf>`, `llama-server:<gguf>`): the profile's `server` section, overridden
    per run by options after `?` in the spec (`vllm-serve:<model>?max_model_len=4096&dtype=bfloat16`).
    None leaves the server's own default. None of these changes which answers a request gets,
    except `dtype` (part of the cache identity) and `batch_invariant`."""

    python: str | None = opt(None, "the Python of the vLLM server environment (None: $KGRAG_VLLM_PYTHON, then "
                                   ".venv-vllm/bin/python of this checkout or the working folder, then this Python "
                                   "when it imports vllm, then a `vllm` command on PATH)")
    max_model_len: int | None = opt(None, "context length the server allocates for (vLLM --max-model-len; llama.cpp "
                                          "servers' n_ctx, default 4096); None: vLLM takes the model's own, except "
                                          "vLLM's CPU build, 4096 (the in-process llama.cpp context)", min=64)
    dtype: str = opt("auto", "vLLM --dtype of weights and activations; auto: the model folder's own, except a GGUF "
                             "preset's dequantized weights, which are served as bfloat16", choices=VLLM_DTYPES)
    gpu_memory_utilization: float | None = opt(None, "share of the GPU's memory vLLM takes for weights and KV cache "
                                                     "(--gpu-memory-utilization; vLLM's default 0.9, and it refuses to "
                                                     "start when less than that is free: kgrag's own embedder and "
                                                     "index on the same GPU need a lower value); on vLLM's CPU build "
                                                     "the share of the RAM, used when cpu_kvcache_gib is not set",
                                               gt=0, max=1)
    cpu_kvcache_gib: int | None = opt(None, "GiB of KV cache vLLM's CPU build takes (VLLM_CPU_KVCACHE_SPACE); None: "
                                            "4, unless gpu_memory_utilization is set (without either, vLLM reserves "
                                            "0.92 of the RAM and refuses to start when that is not free)", min=1)
    cpu_reserved_cores: int | None = opt(None, "cores vLLM on a CPU keeps free of its compute threads for its HTTP "
                                               "front end (VLLM_CPU_NUM_OF_RESERVED_CPU); None: vLLM's default (1), "
                                               "but 0 on a machine of at most 4 cores, where one core less costs "
                                               "a third of the throughput (measured on 2 cores: docs/GPU.md)", min=0)
    max_num_seqs: int | None = opt(None, "requests vLLM decodes in one batch at most (--max-num-seqs)", min=1)
    n_gpu_layers: int | None = opt(None, "layers a llama.cpp server puts on the GPU (-1: all; None: the preset's "
                                         "n_gpu_layers, else all (-1) when nvidia-smi lists a GPU, else none)",
                                   min=-1)
    startup_timeout: float = opt(900.0, "seconds to wait for the server to load the model and list it", gt=0)
    batch_invariant: bool = opt(False, "start vLLM with VLLM_BATCH_INVARIANT=1, so an answer does not depend on the "
                                       "other requests in its batch (vLLM on NVIDIA compute capability >= 8.0, AMD "
                                       "Instinct or Intel XPU; refused with vllm-cpu, which has no such mode)")
    args: list = opt([], "further command-line arguments passed to the server as they are, e.g. "
                         "['--enforce-eager']; for vLLM they join the cache identity (hashed, a secret flag's value "
                         "masked); a flag kgrag sets itself (the address, the port, the model, its alias, the "
                         "dtype, the context size, GPU layers) is refused in every spelling the server reads")

    def cross_check(self) -> None:
        if not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in self.args):
            raise ConfigError(f"parameter 'args' must be a list of command-line words (strings), got {self.args!r}")
        if self.python is not None and not str(self.python).strip():
            raise ConfigError("parameter 'python' must be the path of a Python interpreter or null, got ''")


def parse_set_items(items: list[str]) -> dict:
    """`--set KEY=VALUE` items as a dict, each value read as YAML (1.2 numbers), a bad item named."""
    import yaml

    out = {}
    for item in items or []:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise ConfigError(f"--set expects KEY=VALUE (the value is read as YAML), got {item!r}")
        try:
            out[k.strip().replace("-", "_")] = cli_yaml_value(v, f"--set {k.strip()}=")
        except yaml.YAMLError:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML; quote it, e.g. {k.strip()}='...'") from None
    return out
