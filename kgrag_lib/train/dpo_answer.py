"""Which model specs answer notebook 27's rows: the DPO base, and the base with the trained adapter.

Training stays in kgrag's process; answering need not. When the notebook's generator is a vLLM that
kgrag starts (`vllm-serve:`), both rows are answered through vLLM with the generator's server options:
the base as `vllm-serve:<DPO base>`, the trained model as the same base with the LoRA adapter
(`?lora=dpo=<adapter/>`: no merged copy of the weights is loaded), or the merged folder after a full
fine-tune. Otherwise the base through transformers (`hf:`), as it was trained, and the merged folder.
"""

from __future__ import annotations

from typing import Any

ADAPTER_NAME = "dpo"
SERVED = "vllm-serve:"


def answer_specs(generator: str, base: Any, result: Any) -> tuple[str, str]:
    """(base spec, +DPO spec) for `base` (`gguf_to_hf.BaseModel`) and `result` (`dpo_train.DPOResult`).
    A generator serving the DPO base itself is kept as it is written, so a study's shared server answers
    the base rows."""
    if not generator.startswith(SERVED):
        return (base.spec if base.source == "hub" else f"hf:{base.path}"), result.model_spec
    target, _, query = generator[len(SERVED):].partition("?")
    own = base.path if base.source == "folder" else base.spec
    base_spec = generator if target.strip().lower() == own.strip().lower() else _spec(own, query)
    adapter = (result.files or {}).get("adapter")
    tuned = _spec(own, "&".join(q for q in (query, f"lora={ADAPTER_NAME}={adapter}") if q)) if adapter \
        else _spec(result.model_dir, query)
    return base_spec, tuned


def _spec(target: str, query: str) -> str:
    return f"{SERVED}{target}" + (f"?{query}" if query else "")
