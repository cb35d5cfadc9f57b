"""What only a CUDA machine shows, with no real weights: a tiny Qwen2 built from a config (random
weights, seeded) through the `hf:` backend in bf16, batched, plus `kgrag doctor`'s report.

The GPU user's `hf:` path (issue 39) differs from the CPU rehearsal in exactly what this checks:
the model lands on `cuda` in bf16 with `device_map="auto"`, a batch is left-padded on the GPU,
seeded sampling repeats, log-probabilities come back, and the doctor reads a real driver. Run on
the device machine (torch with CUDA, transformers, accelerate there):

    PYTHONPATH=. python3 scripts/gpu_check.py --tokenizer .gpu/qwen-tok --out $OUT [--dpo]

`--tokenizer` is a folder with Qwen2.5's tokenizer files (a few MB; weights are never needed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import traceback
from pathlib import Path


def build_tiny_qwen(tokenizer: Path, folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    torch.manual_seed(seed)
    real = transformers.AutoConfig.from_pretrained(str(tokenizer))
    cfg = transformers.Qwen2Config(vocab_size=real.vocab_size, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   bos_token_id=real.bos_token_id, eos_token_id=real.eos_token_id,
                                   tie_word_embeddings=True)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(str(folder))
    for f in tokenizer.iterdir():
        if f.name != "config.json":
            shutil.copy(f, folder / f.name)
    return folder


def check_hf(folder: Path) -> dict:
    import torch

    from kgrag_lib.llm.backends.hf import HFLLM

    llm = HFLLM(str(folder), name="tiny-qwen2", dtype="bfloat16", batch_size=8, needs_gpu=True)
    out: dict = {"device": str(llm.model.device), "dtype": str(llm.model.dtype), "identity": llm.identity}
    prompts = [[{"role": "user", "content": "word " * (3 + 7 * i) + f"question {i}?"}] for i in range(8)]
    t0 = time.perf_counter()
    batched = llm.generate_batch(prompts, max_tokens=16, temperature=0.0)
    out["batch_of_8_s"] = round(time.perf_counter() - t0, 3)
    single = [llm.generate(p, max_tokens=16, temperature=0.0) for p in prompts]
    out["batched_equals_single"] = sum(a == b for a, b in zip(batched, single))
    out["nonempty"] = sum(bool(t.strip()) for t in batched)
    # other seed, other request: the cache must not answer; the same seed twice must repeat
    s1 = llm.generate(prompts[0], max_tokens=16, temperature=1.0, seed=7)
    llm.cache = None
    s2 = llm.generate(prompts[0], max_tokens=16, temperature=1.0, seed=7)
    out["seeded_sampling_repeats"] = s1 == s2
    g = llm.generate_logprobs(prompts[1], max_tokens=4, logprobs=3)
    out["logprob_tokens"] = len(g.tokens)
    out["max_memory_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    llm.close()
    return out


def check_dpo(folder: Path, out: Path) -> dict:
    """gpu-smoke's notebook 27 on CUDA: bf16 LoRA DPO with gradient checkpointing (the one setting
    the CPU rehearsal has to switch off), then the merged model answers through `hf:`."""
    import torch

    from kgrag_lib.llm import load_llm
    from kgrag_lib.train import dpo_train as dt

    def pair(q: str, good: str, bad: str) -> dict:
        return {"prompt": [{"role": "user", "content": q}], "chosen": [{"role": "assistant", "content": good}],
                "rejected": [{"role": "assistant", "content": bad}], "id": q}

    cfg = dt.dpo_config("cpu-smoke", base_model=str(folder), bf16=True, gradient_checkpointing=True, max_steps=2,
                        batch_size=1, gradient_accumulation_steps=2, max_length=128, max_pairs=4)
    pairs = [pair("capital of france?", "Paris.", "Berlin, probably."), pair("who wrote Hamlet?", "Shakespeare.",
                                                                           "A film director."),
             pair("2 + 2?", "4.", "22."), pair("largest ocean?", "The Pacific.", "The desert.")]
    t = time.perf_counter()
    res = dt.train_dpo(cfg, pairs, out / "dpo", progress=False)
    got = {"steps": res.n_steps, "pairs": res.n_pairs_used, "train_s": round(time.perf_counter() - t, 2),
           "losses": [h.get("loss") for h in res.log_history if "loss" in h], "model_spec": res.model_spec}
    llm = load_llm(res.model_spec)
    got["merged_device"] = str(llm.model.device)
    got["merged_dtype"] = str(llm.model.dtype)
    got["answer_chars"] = len(llm.generate([{"role": "user", "content": "capital of france?"}], max_tokens=8))
    got["max_memory_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dpo", action="store_true", help="also DPO-train the tiny model in bf16 (needs trl, datasets)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    report: dict = {}
    try:
        from kgrag_lib.doctor.probes import probe_all
        from kgrag_lib.doctor.report import render

        text = render(probe_all(profile="gpu-smoke"))
        (a.out / "doctor.txt").write_text(text)
        print(text)
        report["doctor"] = "ok"
    except Exception:
        report["doctor"] = traceback.format_exc()[-2000:]
    try:
        folder = build_tiny_qwen(a.tokenizer, Path("/tmp/tiny-qwen2"))
        report["hf"] = check_hf(folder)
    except Exception:
        report["hf"] = traceback.format_exc()[-3000:]
    if a.dpo:
        try:
            report["dpo"] = check_dpo(Path("/tmp/tiny-qwen2"), Path("/tmp/gpu-check"))
        except Exception:
            report["dpo"] = traceback.format_exc()[-3000:]
    (a.out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
