"""Which engine runs a profile's hub models: transformers in kgrag's process (`hf`), or a vLLM that
kgrag starts once per study (`vllm-serve`); `auto` picks vLLM where it can run on a GPU.

The switch is the run's `engine` setting (`config.RunConfig.engine`; gpu-paper says `auto`). It
rewrites only what the profile names and leaves to the engine: a hub-model preset (backend `hf`,
e.g. `qwen2.5-7b-instruct`) in the `models:` section or as a method's own `generator`, served as
`vllm-serve:<preset>`. A spec the user wrote with a prefix, a GGUF preset, `run.model` and
`--model` are used as written.
"""

from __future__ import annotations

from typing import Any

from ..errors import KgragError
from .presets import PRESETS

ENGINES = ("auto", "vllm-serve", "hf")
SERVED = "vllm-serve:"
INSTALL = "bash scripts/install_vllm.sh (builds .venv-vllm with vLLM's CUDA build on a CUDA machine; docs/GPU.md)"

# engine `auto`, decided once per process: (engine, why)
_DECIDED: dict[str, tuple[str, str]] = {}


def vllm_found() -> tuple[bool, str]:
    """(a CUDA build of vLLM that `vllm-serve:` would start is installed, what was found or why not)."""
    from .vllm_env import find_vllm

    try:
        engine = find_vllm()
    except KgragError as e:
        return False, str(e).split(";")[0]
    if engine.is_cpu_build:
        return False, f"the vLLM here is the CPU build ({engine.dist} {engine.version}, {engine.found})"
    return True, f"{engine.dist or 'vllm'} {engine.version or ''} from {engine.found}".replace("  ", " ")


def cuda_visible() -> tuple[bool, str]:
    """(torch sees a CUDA GPU, which one or why not)."""
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return True, torch.cuda.get_device_name(0)
    except Exception as e:  # noqa: BLE001 - a broken torch sees no GPU
        return False, f"torch cannot look for a GPU ({type(e).__name__})"
    return False, "no CUDA GPU is visible to torch"


def decide(engine: str) -> tuple[str, str]:
    """The engine `engine` stands for here ("vllm-serve" or "hf") and why; `auto` probes once per process."""
    if engine not in ENGINES:
        raise KgragError(f"run.engine: {engine!r} is not an engine; expected one of {', '.join(ENGINES)}")
    if engine != "auto":
        return engine, f"run.engine: {engine}"
    if "auto" not in _DECIDED:
        found, what = vllm_found()
        gpu, which = cuda_visible() if found else (False, "")
        if found and gpu:
            _DECIDED["auto"] = ("vllm-serve", f"vLLM ({what}) and a CUDA GPU ({which}) are here")
        else:
            _DECIDED["auto"] = ("hf", f"{what if not found else which}: hub models run in kgrag's process (hf:); "
                                      f"for vLLM: {INSTALL}")
    return _DECIDED["auto"]


def forget() -> None:
    """Decide `auto` again (tests; a process that installed vLLM meanwhile)."""
    _DECIDED.clear()


def engine_of(profile: dict[str, Any]) -> str:
    """The engine a profile's hub models run on here: "vllm-serve" or "hf"."""
    run = profile.get("run") if isinstance(profile, dict) else None
    return decide(str((run or {}).get("engine") or "hf"))[0]


def served(spec: Any, engine: str) -> Any:
    """`spec` as `engine` runs it: a hub-model preset becomes `vllm-serve:<preset>` under vllm-serve;
    anything else (a prefixed spec, a GGUF preset, a path, None) is returned as it is."""
    if engine != "vllm-serve" or not isinstance(spec, str):
        return spec
    name = spec.strip()
    preset = PRESETS.get(name)
    return f"{SERVED}{name}" if preset is not None and preset.backend == "hf" else spec


def profile_spec(profile: dict[str, Any], spec: Any) -> Any:
    """A model spec the profile names (a `models:` entry, a method's `generator`) as its engine runs it."""
    if isinstance(spec, str) and spec.strip() in PRESETS and PRESETS[spec.strip()].backend == "hf":
        return served(spec, engine_of(profile))
    return spec   # nothing to rewrite: no need to decide `auto` (no probe on a CPU profile)
