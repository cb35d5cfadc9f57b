"""The device check for a day a GPU is lent (issue 58, item 5): what `bench/study_time.py` needs to
turn its stated speeds into measured ones, in one run of at most 10 minutes with no internet and
nothing carried but this repository (models built from configs with seeded random weights, as
`scripts/gpu_embed_check.py` does: speed and memory depend on shapes, not on weight values).

Parts, each timed and written to ONE JSON (`<out>/gpu_day_check.json`):
- `hf_throughput`: a Qwen2.5-7B-shaped model in bf16 through transformers, batches of 1, 8 and 32:
  prefill and decode tokens/s (aggregate over the batch), peak GPU memory; and 8 prompts of
  different lengths, left-padded in one batch, against each alone (greedy): tokens identical?
- `dpo`: one LoRA DPO step of that model (rank 16 on the 7 linear maps, bf16, gradient
  checkpointing, one pair), peak memory and seconds per pair against `dpo_memory`'s plan.
- `faiss`: a CPU IVF index (`IVF{4 sqrt n},SQ8`) over 1M x 768 clustered vectors on 16 threads:
  train, add, search seconds and recall@6 against exact search.
- `client`: kgrag's OpenAI client against `bench/batching_server.py` set to the speeds measured
  above, 1-64 requests in flight, beside a plain `openai` client sending the same requests.

    PYTHONPATH=. python3 scripts/gpu_day_check.py --out $OUT              # on the GPU machine
    .venv/bin/python scripts/gpu_day_check.py --tiny --out /tmp/check   # any CPU: every part, tiny, seconds
    .venv/bin/python bench/study_time.py --measured $OUT/gpu_day_check.json

Without `--tiny` the GPU parts refuse to run without a CUDA device (no number is made up); the JSON
then says which part failed and why, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Sizes:
    """What one run measures; `full` is the GPU day's, `tiny` the CPU test's."""

    model: dict              # Qwen2Config fields
    dtype: str               # bf16 | fp32
    batches: tuple[int, ...]
    prompt_tokens: int
    new_tokens: int
    dpo_seq_len: int         # tokens of chosen and of rejected (prompt included)
    dpo_steps: int           # timed steps after one warm-up
    faiss_n: int
    faiss_dim: int
    faiss_threads: int
    faiss_queries: int
    client_levels: tuple[int, ...]
    client_new_tokens: int
    client_time_scale: float  # the modelled engine's latencies x this (1: as measured)


QWEN25_7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                 num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768, rope_theta=1e6,
                 tie_word_embeddings=False)   # Qwen/Qwen2.5-7B-Instruct's config.json
FULL = Sizes(model=QWEN25_7B, dtype="bf16", batches=(1, 8, 32), prompt_tokens=512, new_tokens=128,
             dpo_seq_len=2048, dpo_steps=3, faiss_n=1_000_000, faiss_dim=768, faiss_threads=16, faiss_queries=1000,
             client_levels=(1, 2, 4, 8, 16, 32, 64), client_new_tokens=48, client_time_scale=1.0)
TINY = Sizes(model=dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                        tie_word_embeddings=False),
             dtype="fp32", batches=(1, 8, 32), prompt_tokens=16, new_tokens=8, dpo_seq_len=32, dpo_steps=2,
             faiss_n=20_000, faiss_dim=32, faiss_threads=2, faiss_queries=100, client_levels=(1, 4),
             client_new_tokens=8, client_time_scale=0.05)


def _device(tiny: bool) -> str:
    import torch

    if tiny:
        return "cpu"
    if not torch.cuda.is_available():
        raise RuntimeError("this part needs a CUDA device and torch sees none (torch "
                           f"{torch.__version__}); run with --tiny for the CPU check of the script itself")
    return "cuda"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _peak_gib(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None


def _reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def build_model(sizes: Sizes, device: str):
    """A causal LM of the sizes' shape with seeded random weights, in its dtype, on `device`."""
    import torch
    import transformers

    torch.manual_seed(0)
    dtype = torch.bfloat16 if sizes.dtype == "bf16" else torch.float32
    cfg = transformers.Qwen2Config(**sizes.model)
    cfg._attn_implementation = "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = transformers.Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    model.eval()
    model.generation_config.eos_token_id = None   # random weights: never stop early, decode exactly new_tokens
    model.generation_config.pad_token_id = 0
    return model, cfg


def _timed(fn, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def hf_throughput(model, sizes: Sizes, device: str) -> dict:
    """Prefill and decode tokens/s per batch size, peak memory, and batched-vs-alone agreement."""
    import torch

    g = torch.Generator().manual_seed(1)
    vocab = sizes.model["vocab_size"]
    levels = []
    for b in sizes.batches:
        ids = torch.randint(1, vocab, (b, sizes.prompt_tokens), generator=g).to(device)
        mask = torch.ones_like(ids)
        with torch.no_grad():
            model(input_ids=ids[:, :8], attention_mask=mask[:, :8])   # warm-up: kernels, allocator
            _reset_peak(device)
            # the last position's logits only, as generate's prefill computes them
            prefill_s = min(_timed(lambda: model(input_ids=ids, attention_mask=mask, logits_to_keep=1), device)
                            for _ in range(2))
            gen_s = _timed(lambda: model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                                  max_new_tokens=sizes.new_tokens, min_new_tokens=sizes.new_tokens),
                           device)
        decode_s = max(gen_s - prefill_s, 1e-9)
        levels.append({"batch": b, "prompt_tokens": sizes.prompt_tokens, "new_tokens": sizes.new_tokens,
                       "prefill_s": round(prefill_s, 4), "generate_s": round(gen_s, 4),
                       "prefill_tok_s": round(b * sizes.prompt_tokens / prefill_s, 1),
                       "decode_tok_s": round(b * sizes.new_tokens / decode_s, 1),
                       "decode_ms_per_step": round(1000 * decode_s / sizes.new_tokens, 2),
                       "peak_gib": _peak_gib(device)})
        print("hf", json.dumps(levels[-1]), flush=True)
    return {"levels": levels, "agreement": agreement(model, sizes, device, g)}


def agreement(model, sizes: Sizes, device: str, g) -> dict:
    """8 prompts of different lengths, greedy: left-padded together vs each alone."""
    import torch

    vocab = sizes.model["vocab_size"]
    lengths = [max(2, sizes.prompt_tokens * (i + 1) // 8) for i in range(8)]
    prompts = [torch.randint(1, vocab, (n,), generator=g) for n in lengths]
    width = max(lengths)
    ids = torch.zeros(8, width, dtype=torch.long)
    mask = torch.zeros(8, width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = p, 1
    kw = dict(do_sample=False, max_new_tokens=sizes.new_tokens, min_new_tokens=sizes.new_tokens)
    with torch.no_grad():
        batched = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kw)[:, width:].cpu()
        alone = [model.generate(input_ids=p[None].to(device), attention_mask=torch.ones(1, len(p), dtype=torch.long,
                                                                                        device=device), **kw)
                 [0, len(p):].cpu() for p in prompts]
    same = [bool(torch.equal(batched[i], alone[i])) for i in range(8)]
    first_diff = [next((j for j in range(sizes.new_tokens) if batched[i, j] != alone[i][j]), None) for i in range(8)]
    return {"prompts": 8, "identical": sum(same), "first_differing_token": first_diff, "prompt_lengths": lengths}


def dpo_step(model, cfg, sizes: Sizes, device: str) -> dict:
    """Seconds and peak memory of LoRA DPO steps on one pair, against dpo_memory's plan at this length.

    The loss is the sigmoid DPO loss trl computes (beta 0.1); the reference is the base with the
    adapter off, as with trl and LoRA. Written out here so the check carries no trl."""
    import peft
    import torch
    import torch.nn.functional as F

    from kgrag_lib.train.dpo_memory import estimate_dpo_memory, model_shape

    plan = estimate_dpo_memory(model_shape(cfg.to_dict() | {"model_type": "qwen2"}), mode="lora", dtype=sizes.dtype,
                               seq_len=sizes.dpo_seq_len, batch=1, gradient_checkpointing=True)
    model.config.use_cache = False
    with warnings.catch_warnings():   # transformers 5.2x renames it activation_checkpointing_*, 5.1x has only this
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    lora = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                                      target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM"))
    lora.train()
    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=5e-6)
    g = torch.Generator().manual_seed(2)
    T, prompt = sizes.dpo_seq_len, sizes.dpo_seq_len // 2
    pair = torch.randint(1, sizes.model["vocab_size"], (2, T), generator=g).to(device)   # chosen, rejected
    pair[1, :prompt] = pair[0, :prompt]

    def logps(m) -> torch.Tensor:
        logits = m(input_ids=pair).logits[:, prompt - 1:-1].float()
        return torch.gather(F.log_softmax(logits, -1), 2, pair[:, prompt:, None]).squeeze(-1).sum(-1)

    def step() -> float:
        with torch.no_grad(), lora.disable_adapter():
            ref = logps(lora)
        pol = logps(lora)
        loss = -F.logsigmoid(0.1 * ((pol[0] - ref[0]) - (pol[1] - ref[1])))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach().item()

    step()                                   # warm-up: kernels, optimizer state
    _reset_peak(device)
    times, losses = [], []
    for _ in range(sizes.dpo_steps):
        t = _timed(lambda: losses.append(step()), device)
        times.append(t)
    peak = _peak_gib(device)
    lora.unload()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_disable()
    model.config.use_cache = True
    model.eval()
    return {"seq_len": T, "tokens_per_pair": 2 * T, "steps": sizes.dpo_steps, "step_s": [round(t, 3) for t in times],
            "seconds_per_pair": round(sorted(times)[len(times) // 2], 3), "losses": [round(x, 5) for x in losses],
            "finite": all(math.isfinite(x) for x in losses), "peak_gib": peak,
            "plan_gib": round(plan.total_gib, 2), "plan": plan.to_dict(),
            "peak_over_plan": round(peak / plan.total_gib, 3) if peak else None}


def faiss_ivf(sizes: Sizes) -> dict:
    """A CPU IVF-SQ8 index over clustered random vectors: build and search times, recall@6 vs exact."""
    import faiss
    import numpy as np

    faiss.omp_set_num_threads(sizes.faiss_threads)
    rng = np.random.default_rng(0)
    n, d = sizes.faiss_n, sizes.faiss_dim
    centers = rng.standard_normal((1000, d), dtype=np.float32)
    x = centers[rng.integers(0, 1000, n)] + 0.5 * rng.standard_normal((n, d), dtype=np.float32)
    q = x[rng.choice(n, sizes.faiss_queries, replace=False)] + 0.1 * rng.standard_normal(
        (sizes.faiss_queries, d), dtype=np.float32)
    nlist = int(4 * math.sqrt(n))
    index = faiss.index_factory(d, f"IVF{nlist},SQ8", faiss.METRIC_INNER_PRODUCT)
    train = x[rng.choice(n, min(n, 64 * nlist), replace=False)]
    t0 = time.perf_counter()
    index.train(train)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.add(x)
    add_s = time.perf_counter() - t0
    flat = faiss.IndexFlatIP(d)
    flat.add(x)
    t0 = time.perf_counter()
    _, exact = flat.search(q, 6)
    exact_s = time.perf_counter() - t0
    rows = []
    for nprobe in (1, 8, 32):
        index.nprobe = nprobe
        t0 = time.perf_counter()
        _, got = index.search(q, 6)
        s = time.perf_counter() - t0
        recall = float(np.mean([len(set(a) & set(b)) / 6 for a, b in zip(got.tolist(), exact.tolist())]))
        rows.append({"nprobe": nprobe, "search_s": round(s, 4), "queries_per_s": round(len(q) / s, 1),
                     "recall_at_6": round(recall, 4)})
    return {"n": n, "dim": d, "factory": f"IVF{nlist},SQ8", "threads": sizes.faiss_threads,
            "train_rows": len(train), "train_s": round(train_s, 2), "add_s": round(add_s, 2),
            "exact_search_s": round(exact_s, 3), "search": rows}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client_levels(hf: dict, sizes: Sizes) -> dict:
    """kgrag's OpenAI client vs the plain `openai` SDK against the modelled engine set to the hf speeds."""
    from openai import OpenAI

    from kgrag_lib.llm import load_llm
    from kgrag_lib.llm.base import SamplingParams

    one = next(r for r in hf["levels"] if r["batch"] == min(x["batch"] for x in hf["levels"]))
    step_ms = max(one["decode_ms_per_step"], 0.5)
    prefill = one["prefill_tok_s"]
    port = _free_port()
    cmd = [sys.executable, str(REPO / "bench" / "batching_server.py"), "--port", str(port), "--step-ms", str(step_ms),
           "--max-batch", "64", "--prefill-tok-per-s", str(prefill), "--time-scale", str(sizes.client_time_scale)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/models", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"bench/batching_server.py did not start: {server.stderr.read()[-800:]}")
                time.sleep(0.2)
        rows = []
        for c in sizes.client_levels:
            n = max(8, 2 * c)
            prompts = [[{"role": "user", "content": f"question {c}-{i}: " + "word " * 200}] for i in range(n)]
            params = SamplingParams(max_tokens=sizes.client_new_tokens, temperature=0.0, seed=0)
            llm = load_llm(f"openai:{url}#modelled", cache=False, max_in_flight=c, timeout=600)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(c) as ex:
                list(ex.map(lambda m: llm.generate(m, params), prompts))
            kgrag_s = time.perf_counter() - t0
            plain = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
            send = lambda m: plain.chat.completions.create(model="modelled", messages=m, temperature=0.0,  # noqa: E731
                                                           max_tokens=sizes.client_new_tokens, seed=0)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(c) as ex:
                list(ex.map(send, prompts))
            plain_s = time.perf_counter() - t0
            rows.append({"in_flight": c, "requests": n, "kgrag_req_per_s": round(n / kgrag_s, 2),
                         "plain_req_per_s": round(n / plain_s, 2), "kgrag_over_plain": round(plain_s / kgrag_s, 3)})
            print("client", json.dumps(rows[-1]), flush=True)
        return {"server": {"step_ms": step_ms, "prefill_tok_per_s": prefill, "max_batch": 64,
                           "time_scale": sizes.client_time_scale,
                           "from": f"hf_throughput at batch {one['batch']}"}, "levels": rows}
    finally:
        server.terminate()
        server.wait(timeout=30)


PACKAGES = ("torch", "transformers", "peft", "faiss", "numpy", "fastapi", "uvicorn", "openai", "httpx")


def package_versions() -> dict[str, str | None]:
    """What this machine has of what the parts import (None: missing; that part then fails by name)."""
    import importlib

    out = {}
    for name in PACKAGES:
        try:
            out[name] = str(getattr(importlib.import_module(name), "__version__", "?"))
        except Exception:   # noqa: BLE001 -- missing or broken: recorded, the part that needs it says so
            out[name] = None
    return out


def run(sizes: Sizes, tiny: bool, only: set[str], budget_s: float) -> dict:
    import torch

    report: dict = {"kind": "gpu_day_check", "tiny": tiny, "date": time.strftime("%Y-%m-%d"),
                    "command": " ".join(sys.argv), "torch": torch.__version__, "cuda": torch.version.cuda,
                    "device": (torch.cuda.get_device_name(0) if torch.cuda.is_available() and not tiny else "cpu"),
                    "packages": package_versions(), "sizes": asdict(sizes), "budget_s": budget_s, "errors": {}}
    t_start = time.perf_counter()

    def part(name: str, fn):
        if name not in only:
            return None
        if time.perf_counter() - t_start > budget_s:
            report["errors"][name] = f"not run: the time budget of {budget_s:.0f} s was spent before it"
            return None
        t0 = time.perf_counter()
        try:
            report[name] = fn()
            report[name]["wall_s"] = round(time.perf_counter() - t0, 1)
        except Exception as exc:   # the JSON still comes back, naming the part that failed
            report["errors"][name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
            print(f"{name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return report.get(name)

    model = cfg = None
    try:
        device = _device(tiny)
        if {"hf_throughput", "dpo"} & only:
            model, cfg = build_model(sizes, device)
    except Exception as exc:
        for name in {"hf_throughput", "dpo"} & only:
            report["errors"][name] = f"{type(exc).__name__}: {exc}"
            print(f"{name}: FAILED: {exc}", file=sys.stderr, flush=True)
    if model is not None:
        hf = part("hf_throughput", lambda: hf_throughput(model, sizes, device))
        part("dpo", lambda: dpo_step(model, cfg, sizes, device))
        del model
    else:
        hf = None
    part("faiss", lambda: faiss_ivf(sizes))

    def client():
        if not hf:
            raise RuntimeError("the client part runs the modelled engine at the measured hf speeds, and "
                               "hf_throughput did not run or failed")
        return client_levels(hf, sizes)
    part("client", client)
    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    report["ok"] = not report["errors"]
    return report


PARTS = ("hf_throughput", "dpo", "faiss", "client")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for gpu_day_check.json")
    ap.add_argument("--tiny", action="store_true", help="every part with a tiny model on the CPU (seconds): a check "
                                                        "of this script, not a measurement")
    ap.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run")
    ap.add_argument("--budget-s", type=float, default=480.0, help="a part that would start after this many seconds "
                                                                  "is skipped (named in errors), so the JSON comes "
                                                                  "back within a device call's limit")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    report = run(TINY if a.tiny else FULL, a.tiny, set(a.only), a.budget_s)
    a.out.mkdir(parents=True, exist_ok=True)
    tmp = a.out / "gpu_day_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(a.out / "gpu_day_check.json")
    print(json.dumps({k: v for k, v in report.items() if k in ("ok", "errors", "wall_s", "device")}, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
