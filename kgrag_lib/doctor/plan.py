"""What a profile will load, checked before an hour is lost: the hub weights it names (size, whether
the Hugging Face cache holds them, whether the repo is gated and a token is there), the disk the
missing ones need, and the GPU memory they take beside kgrag's own embedder and index (or beside a
vLLM server that takes `server.gpu_memory_utilization` of the GPU).

`weights_of` and `gpu_plan` are plain functions of a profile and of lookups passed in, so a GPU
machine's plan is testable anywhere; `probe_plan` wires them to this machine.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..config import profile_section
from ..data.manifest import load_manifest
from ..errors import ConfigError
from ..llm.engine import profile_spec
from ..llm.presets import PRESETS
from ..methods.registry import available_methods
from ..paths import data_root
from ..retrieval.embedder_specs import RECIPES, SHIPPED
from ..studies import notebook_settings

# bf16 weights on disk (the safetensors a hub snapshot holds), GiB; embedders as sentence-transformers
# loads them (float32). From the repos' file listings; an id not here is sized from its cached
# config.json when there is one, else reported as unknown.
KNOWN_GIB = {
    "Qwen/Qwen2.5-7B-Instruct": 14.2, "meta-llama/Llama-3.1-8B-Instruct": 15.0,
    "mistralai/Mistral-7B-Instruct-v0.2": 13.5, "selfrag/selfrag_llama2_7b": 12.6, "Qwen/Qwen2.5-0.5B-Instruct": 0.92,
    "BAAI/bge-large-en-v1.5": 1.25, "facebook/contriever-msmarco": 0.41,
    "sentence-transformers/multi-qa-mpnet-base-dot-v1": 0.41, "sentence-transformers/all-MiniLM-L6-v2": 0.08,
}
# Repos whose files the hub serves only to accounts that accepted the licence, with a token.
GATED_PREFIXES = ("meta-llama/", "mistralai/Mistral-7B-Instruct-v0.2", "google/gemma")
MODEL_KEYS = ("generator", "judge", "judge_model")   # method settings that name a model of their own
KV_FACTOR = 1.25          # an in-process LLM's weights plus the KV cache and activations of batched generation
PROCESS_MARGIN_GIB = 1.0  # the CUDA context, a faiss GPU index of a few thousand passages, buffers


@dataclass(frozen=True)
class Weights:
    """One model a profile names."""

    spec: str                 # as the profile (or --model) writes it
    role: str                 # "llm" | "embedder"
    families: tuple[str, ...]  # the study families that use it
    where: str                # "in-process" | "vllm-serve" | "server" | "shipped" | "gguf" | "local"
    hub_id: str | None = None
    gib: float | None = None
    cached: bool = False
    gated: bool = False


@dataclass(frozen=True)
class DataNeed:
    """One of the papers' resources a profile names, at full size (`PAPER_DATA`)."""

    name: str                 # the manifest entry: `kgrag data fetch <name>`
    setting: str              # where the profile names it, e.g. "methods.kg-infused.corpus: wikipedia"
    disk_gib: float           # source files + kgrag's store + embeddings + saved index
    build_ram_gib: float      # peak RAM of the one-time build (store, index)
    run_ram_gib: float        # resident RAM of an answering process (index memory-mapped)
    first_run_hours: float    # one H100, fp16 embedding; later runs load what was saved
    present: bool             # the source files are under the data root


# The papers' resources at full size (issue 43). Bytes are exact products (21,015,324 passages and
# 4,665,331 entity descriptions x 768 float32 dims; IVF-SQ8 codes 1 byte per dim, the scale bench's
# formula checked to 0.1%); the TSV and the KG store are their measured sizes; RAM and hours are
# projections written in docs/PERFORMANCE.md (the encoder: a Contriever-shaped BERT-base at fp16,
# batch 512, 4,435 passages/s in one process on an H100, `results/reference/index-scale/
# gpu-embed-h100.json`: 1.3 h of the 1.6; two `kgrag data embed --shard` processes at once halve it).
PAPER_DATA = {
    "wikipedia-2018": dict(disk_gib=12.1 + 12.6 + 60.1 + 15.2, build_ram_gib=20.0, run_ram_gib=6.0,
                           first_run_hours=1.6),
    "wikidata5m": dict(disk_gib=1.9 + 3.9 + 13.3 + 3.4, build_ram_gib=13.0, run_ram_gib=6.0, first_run_hours=0.4),
}


@dataclass(frozen=True)
class Plan:
    profile: str
    weights: tuple[Weights, ...]

    token: bool = False                  # a hub token is configured ($HF_TOKEN or `hf auth login`)
    hf_cache: str = ""
    disk_free_gib: float | None = None
    vllm_utilization: float | None = None   # the server section's, when the profile starts vLLM
    # vLLM servers up at once: (started by the study for all its notebooks, started by one notebook beside
    # them: 27's base + LoRA adapter, 28's Self-RAG generator; one at a time)
    vllm_servers: tuple[int, int] = (0, 0)
    engine: str = ""                     # run.engine as decided here, and why (`llm.engine.decide`)
    engine_why: str = ""
    engine_asked: str = ""               # run.engine as the profile says it (auto, vllm-serve, hf)
    # no share given (server section, spec): `kgrag study` plans it (`planned_utilization`) and sets it
    utilization_planned: bool = False
    # notebook 27's DPO training on the GPU, in kgrag's process, with or without a server (`dpo_memory`'s
    # estimate; None: the profile trains on the CPU or not at all, or the base model's shape is unknown here)
    dpo_gib: float | None = None
    notes: tuple[str, ...] = field(default=())
    data: tuple[DataNeed, ...] = field(default=())   # the papers' full-size resources it names
    data_root: str = ""                      # where `kgrag data fetch` writes them
    data_disk_free_gib: float | None = None  # free there (None: not read)
    data_disk_shared: bool = False           # the same filesystem as the HF cache: the two needs add up

    @property
    def data_disk_gib(self) -> float:
        """Disk the papers' resources still need: all of it for one whose files are not fetched yet."""
        return sum(d.disk_gib for d in self.data if not d.present)

    @property
    def download_gib(self) -> float:
        return sum(w.gib or 0.0 for w in self.weights if w.hub_id and not w.cached)

    @property
    def gated_without_token(self) -> list[str]:
        return [w.hub_id for w in self.weights if w.gated and not w.cached and not self.token and w.hub_id]


def _hub_id_of_llm(spec: str) -> tuple[str, str | None]:
    """(where it runs, hub id or None) of an LLM spec."""
    spec = spec.strip()
    if spec in PRESETS:
        p = PRESETS[spec]
        return ("gguf", None) if p.backend == "llamacpp" else ("in-process", p.model)
    prefix, _, rest = spec.partition(":")
    rest = rest.split("?", 1)[0]
    if prefix == "hf" and rest:
        return ("local", None) if Path(rest).expanduser().exists() else ("in-process", rest)
    if prefix == "vllm-serve" and rest:
        if rest in PRESETS:
            p = PRESETS[rest]
            return ("gguf", None) if p.backend == "llamacpp" else ("vllm-serve", p.model)
        return ("local", None) if Path(rest).expanduser().exists() or rest.endswith(".gguf") else ("vllm-serve", rest)
    if prefix in ("vllm", "openai", "ollama"):
        return "server", None
    return "gguf", None


def _hub_id_of_embedder(spec: str) -> tuple[str, str | None]:
    s = spec.strip()
    if s in SHIPPED:
        return "shipped", None
    if s in RECIPES:
        return "in-process", RECIPES[s].repo
    s = s[3:] if s.startswith("hf:") else s
    if Path(s).expanduser().exists():
        return "local", None
    return "in-process", s


def weights_of(profile: dict[str, Any], *, model: str | None = None, cached: Callable[[str], bool],
               size: Callable[[str], float | None]) -> list[Weights]:
    """Every model `profile` loads (`model` replaces its LLMs, as `kgrag study --model` does)."""
    families = sorted({s.family for s in available_methods().values() if s.family})
    run = profile_section(profile, "run")
    models, embedders = profile_section(profile, "models"), profile_section(profile, "embedders")
    found: dict[tuple[str, str], list[str]] = {}
    for fam in families:
        llm = model or profile_spec(profile, models.get(fam)) or run.get("model")
        emb = embedders.get(fam) or run.get("embedder") or "minilm"
        if llm:
            found.setdefault(("llm", llm), []).append(fam)
        found.setdefault(("embedder", emb), []).append(fam)
    specs = available_methods()
    skip = _methods_not_run(profile)
    sections = profile_section(profile, "methods")
    for name, spec in specs.items():   # a method's own model (Self-RAG, a judge), a default one too
        if name in skip:
            continue
        settings = _method_settings(spec, sections.get(name))
        for key in MODEL_KEYS:
            value = profile_spec(profile, settings.get(key)) if key == "generator" else settings.get(key)
            if isinstance(value, str) and value:
                fams = found.setdefault(("llm", value), [])
                if specs[name].family not in fams:
                    fams.append(specs[name].family)
    out = []
    for (role, spec), fams in found.items():
        where, hub = (_hub_id_of_llm if role == "llm" else _hub_id_of_embedder)(spec)
        gated = bool(hub) and hub.startswith(GATED_PREFIXES)
        out.append(Weights(spec, role, tuple(fams), where, hub, size(hub) if hub else None,
                           cached(hub) if hub else False, gated))
    return out


def _method_settings(spec: Any, section: Any) -> dict[str, Any]:
    """A method's settings with its config's defaults filled in (a profile leaves defaults out); the
    profile's own section where it does not type-check (the run itself reports that error)."""
    import dataclasses

    given = section if isinstance(section, dict) else {}
    try:
        return dataclasses.asdict(spec.check_config(given, where="doctor"))
    except (ConfigError, TypeError, ValueError):
        return dict(given)


def _methods_not_run(profile: dict[str, Any]) -> set[str]:
    """Methods with a model of their own that the profile's notebooks leave out: those that need a GPU
    (`MethodSpec.needs_gpu`, Self-RAG and Self-RAG + KG-Infused RAG) run only in notebook 28's Table 2."""
    try:
        tables = notebook_settings("28_plugins", profile).tables
    except Exception:  # noqa: BLE001 - a profile without the notebook's section: its defaults
        return set()
    return set() if "2" in tables else {name for name, spec in available_methods().items() if spec.needs_gpu}


def gpu_need_gib(weights: list[Weights] | tuple[Weights, ...]) -> float | None:
    """GPU memory kgrag's own process needs at its peak: one notebook runs one family, so the largest
    family's in-process LLM (with its KV cache) and embedder, plus the margin; None if a size is unknown."""
    peak = 0.0
    families = {f for w in weights for f in w.families}
    for fam in families:
        total = PROCESS_MARGIN_GIB
        for w in weights:
            if fam not in w.families or w.where not in ("in-process",):
                continue
            if w.gib is None:
                return None
            total += w.gib * (KV_FACTOR if w.role == "llm" else 1.0)
        peak = max(peak, total)
    return peak


def in_process_need_gib(weights: list[Weights] | tuple[Weights, ...], dpo_gib: float | None = None) -> float | None:
    """GPU memory kgrag's process needs at its peak without a server: the largest notebook's models
    (`gpu_need_gib`), or notebook 27's DPO training where that is more (it loads its own base model)."""
    need = gpu_need_gib(weights)
    if need is None or dpo_gib is None:
        return need
    return max(need, dpo_gib + PROCESS_MARGIN_GIB)


def kgrag_share_gib(weights: list[Weights] | tuple[Weights, ...], dpo_gib: float | None = None) -> float | None:
    """What kgrag's process needs on the GPU beside a vLLM server that stays up for the whole study: the
    largest notebook's in-process models (embedders, and a method's own LLM such as Self-RAG's that the
    served model does not replace) and the margin, or notebook 27's DPO training where that is more."""
    share = gpu_need_gib([w for w in weights if w.where != "vllm-serve"])
    if share is None or dpo_gib is None:
        return share
    return max(share, dpo_gib + PROCESS_MARGIN_GIB)


def dpo_training_gib(profile: dict[str, Any], base_config: Callable[[str], Any] | None = None) -> float | None:
    """Peak GPU memory of the profile's notebook 27 training (one GPU), or None when it uses a `cpu-*`
    set (made for a small model), leaves DPO out, or the base model's config cannot be read here."""
    from ..train.dpo_memory import KNOWN_CONFIGS, plan_for
    from ..train.dpo_train import dpo_config

    if "27_dpo_training" not in profile_section(profile, "notebooks"):
        return None
    try:
        nb = notebook_settings("27_dpo_training", profile)
        if str(nb.training).startswith("cpu"):
            return None
        cfg = dpo_config(nb.training, **(nb.training_overrides or {}))
        if base_config is None:
            from ..train.gguf_to_hf import base_model_config as base_config
        hub = PRESETS[cfg.base_model].model if cfg.base_model in PRESETS else cfg.base_model
        if hub in KNOWN_CONFIGS:   # its shape ships with kgrag: no hub request (offline, or a slow network)
            shape = KNOWN_CONFIGS[hub]
        else:
            shape = base_config(cfg.base_model)
        return round(plan_for(cfg, shape, n_gpus=1, sharded=False, cuda=False).total_gib, 1)
    except Exception:  # noqa: BLE001 - offline without the config.json, a gated repo: the plan says unknown
        return None


def vllm_servers(profile: dict[str, Any], weights: list[Weights] | tuple[Weights, ...]) -> tuple[int, int]:
    """(vLLM servers the study starts once for all its notebooks: one per distinct served model of a
    family; servers a notebook starts beside them, one at a time: notebook 27 answers with the base and
    its LoRA adapter, notebook 28 with a served Self-RAG generator)."""
    from ..experiment import resolve_model
    from ..studies import NOTEBOOKS

    notebooks = profile_section(profile, "notebooks")
    shared = {resolve_model(profile, NOTEBOOKS[nb].family) for nb in notebooks
              if nb in NOTEBOOKS and NOTEBOOKS[nb].family}
    shared = {s for s in shared if s.startswith("vllm-serve:")}
    own = [w for w in weights if w.where == "vllm-serve" and w.spec not in shared]
    lora = "27_dpo_training" in notebooks and resolve_model(profile, "kg-infused").startswith("vllm-serve:")
    return len(shared), int(bool(own) or lora)


def planned_utilization(total_gib: float, free_gib: float, servers: tuple[int, int], kgrag_gib: float,
                        dpo_gib: float | None) -> float:
    """gpu_memory_utilization for every vLLM server of a study, the same for each (vLLM's share is per
    server): the study's servers and notebook 27's DPO training fit together, and so do the study's
    servers, one notebook's own server and kgrag's in-process models (two decimals, down)."""
    import math

    shared, beside = servers
    if shared + beside == 0:
        return 0.0
    room = [(free_gib - kgrag_gib) / (shared + beside)]
    if dpo_gib is not None and shared:
        room.append((free_gib - dpo_gib - PROCESS_MARGIN_GIB) / shared)
    return max(0.0, math.floor(100 * min(room) / total_gib) / 100)


def vllm_utilization_fit(total_gib: float, free_gib: float, kgrag_gib: float) -> float:
    """The largest gpu_memory_utilization that leaves kgrag its share of what is free (two decimals, down)."""
    import math

    return max(0.0, math.floor(100 * (free_gib - kgrag_gib) / total_gib) / 100)


# ---- this machine ---------------------------------------------------------------------------------
def _hub_cache_lookup() -> tuple[Callable[[str], bool], Callable[[str], float | None], str]:
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError:
        return (lambda _: False), (lambda h: KNOWN_GIB.get(h)), ""

    def snapshot_dir(repo: str) -> Path | None:
        hit = try_to_load_from_cache(repo, "config.json")
        return Path(hit).parent if isinstance(hit, str) else None

    def cached(repo: str) -> bool:
        d = snapshot_dir(repo)
        return bool(d) and any(d.glob("*.safetensors")) or bool(d) and any(d.glob("pytorch_model*.bin"))

    def size(repo: str) -> float | None:
        if repo in KNOWN_GIB:
            return KNOWN_GIB[repo]
        d = snapshot_dir(repo)
        if d is None:
            return None
        files = list(d.glob("*.safetensors")) or list(d.glob("pytorch_model*.bin"))
        return round(sum(f.stat().st_size for f in files) / 2**30, 2) if files else None

    return cached, size, str(constants.HF_HUB_CACHE)


def _token() -> bool:
    if os.environ.get("HF_TOKEN"):
        return True
    try:
        from huggingface_hub import get_token
    except ImportError:
        return False
    try:
        return bool(get_token())
    except Exception:  # noqa: BLE001 - an unreadable token file is no token
        return False


def data_needs(profile: dict[str, Any], present: Callable[[str], bool]) -> list[DataNeed]:
    """The full-size resources `profile`'s method settings name (kg: wikidata5m, corpus: wikipedia),
    once each, with what they cost (`PAPER_DATA`); `present(name)` says whether the source files
    are under the data root."""
    found: dict[str, str] = {}
    for method, section in profile_section(profile, "methods").items():
        if not isinstance(section, dict):
            continue
        for key, prefix, name in (("kg", "wikidata5m", "wikidata5m"), ("corpus", "wikipedia", "wikipedia-2018")):
            value = section.get(key)
            if isinstance(value, str) and value.split(":")[0] == prefix:
                found.setdefault(name, f"methods.{method}.{key}: {value}")
    return [DataNeed(name, setting, **PAPER_DATA[name], present=present(name)) for name, setting in found.items()]


def _data_present(name: str) -> bool:
    entry = load_manifest()["datasets"].get(name) or {}
    root = data_root()
    return bool(entry.get("files")) and all((root / f["path"]).is_file() for f in entry["files"])


def _served_utilization(profile: dict[str, Any], served: list[str]) -> float | None:
    """vLLM's share of the GPU as the server will be started: a `?gpu_memory_utilization=` on the
    spec over the profile's `server` section over vLLM's default 0.9; None when nothing is served."""
    from ..llm import managed_server_options

    if not served:
        return None
    shares = []
    for spec in served:
        try:
            cfg = managed_server_options(spec, spec.partition(":")[2], profile_section(profile, "server"))[1]
            shares.append(cfg.gpu_memory_utilization)
        except ConfigError:   # the run itself reports a bad spec
            shares.append(None)
    given = [x for x in shares if x is not None]
    return max(given) if given else 0.9


def study_utilization(profile: dict[str, Any], gpu: Any) -> float | None:
    """The gpu_memory_utilization `kgrag study` gives each vLLM server when the profile's engine serves
    its models (`llm.engine`) and it sets no share itself: `planned_utilization` on `gpu` (a probes.Gpu,
    GPU 0); None when there is nothing to plan (or no GPU). A share too small to hold the largest served
    model is refused here, before any server starts."""
    from ..errors import KgragError
    from ..llm.engine import engine_of

    if gpu is None or engine_of(profile) != "vllm-serve" or given_utilization(profile):
        return None
    cached, size, _ = _hub_cache_lookup()
    weights = weights_of(profile, cached=cached, size=size)
    servers = vllm_servers(profile, weights)
    if not sum(servers):
        return None
    free = gpu.free_gib if gpu.free_gib is not None else gpu.memory_gib
    fit = planned_utilization(gpu.memory_gib, free, servers, kgrag_share_gib(weights) or PROCESS_MARGIN_GIB,
                              dpo_training_gib(profile))
    largest = max((w.gib or 0.0) for w in weights if w.where == "vllm-serve")
    if fit * gpu.memory_gib < largest * 1.1:
        raise KgragError(f"{sum(servers)} vLLM servers (one per model of profile {profile.get('name')!r}) and kgrag's "
                         f"own models do not fit on GPU 0 ({gpu.name}, {free:.1f} GiB free): each would get "
                         f"gpu_memory_utilization {fit} = {fit * gpu.memory_gib:.1f} GiB, too little for a "
                         f"{largest:.1f} GiB model and its KV cache. Run the models in kgrag's process (--engine hf), "
                         "or set server.gpu_memory_utilization and run the families apart (--only); "
                         f"`kgrag doctor --profile {profile.get('name')}` shows the plan")
    return fit


def _with_model(profile: dict[str, Any], model: str) -> dict[str, Any]:
    """`profile` as `kgrag study --model` runs it: one model for every family."""
    out = {k: v for k, v in profile.items() if k != "models"}
    out["run"] = {**(profile.get("run") or {}), "model": model}
    return out


def given_utilization(profile: dict[str, Any]) -> bool:
    """Does the profile set vLLM's share itself (its server section, or a served spec's `?gpu_memory_utilization=`)?"""
    if profile_section(profile, "server").get("gpu_memory_utilization") is not None:
        return True
    specs = list(profile_section(profile, "models").values()) + [profile_section(profile, "run").get("model")]
    return any(isinstance(s, str) and "gpu_memory_utilization=" in s for s in specs)


def probe_plan(profile: str, model: str | None = None) -> Plan:
    from ..llm.engine import decide
    from ..studies import load_profile

    prof = load_profile(profile)
    cached, size, cache_dir = _hub_cache_lookup()
    weights = weights_of(prof, model=model, cached=cached, size=size)
    where = Path(cache_dir) if cache_dir else Path.home()
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free / 2**30
    util = _served_utilization(prof, [w.spec for w in weights if w.where == "vllm-serve"])
    asked = str(profile_section(prof, "run").get("engine") or "hf")
    engine, why = decide(asked)
    planned = model is None and util is not None and engine == "vllm-serve" and not given_utilization(prof)
    return Plan(prof["name"], tuple(weights), _token(), cache_dir, round(free, 1), util,
                vllm_servers=vllm_servers(prof if model is None else _with_model(prof, model), weights),
                engine=engine if model is None else "", engine_why=why, engine_asked=asked,
                utilization_planned=planned,
                dpo_gib=dpo_training_gib(prof),   # in-process or beside a server, notebook 27 trains on the GPU
                data=tuple(data_needs(prof, _data_present)), **_data_disk(where))


def _data_disk(hf_where: Path) -> dict[str, Any]:
    """Free disk under the data root (its nearest existing folder) and whether the HF cache shares it."""
    try:
        root = data_root()
    except Exception:  # noqa: BLE001 - no data root here: the data line says so
        return {}
    at = root
    while not at.exists() and at != at.parent:
        at = at.parent
    try:
        shared = at.stat().st_dev == hf_where.stat().st_dev
    except OSError:
        shared = False
    return {"data_root": str(root), "data_disk_free_gib": round(shutil.disk_usage(at).free / 2**30, 1),
            "data_disk_shared": shared}
