"""Issue 43's embedding step on a CUDA machine, with no real weights: `kgrag data embed` in fp16 at
batch 512 against fp32 at batch 64, on passages in psgs_w100's exact format, through encoders shaped
like all-MiniLM-L6-v2 and Contriever (BERT-base) built from their configs (seeded random weights;
the real bert-base-uncased WordPiece vocabulary, so passages tokenise to their real lengths).

Throughput depends on the shapes, not on the weights' values, so the passages/s measured here
project the paper's embedding of Wikipedia-2018 (21,015,324 passages, Contriever, fp16) on this
GPU. Agreement of fp16 with fp32 (cosine per vector, top-6 overlap) is measured on the same random
encoders: a check of the half-precision path, not of a trained retriever's ranking.

    PYTHONPATH=. python3 scripts/gpu_embed_check.py --tokenizer .gpu/bert-tok --out $OUT

`--tokenizer` holds the shipped MiniLM's tokenizer files (vocab.txt, tokenizer.json, ...).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WIKIPEDIA_PASSAGES = 21_015_324
SHAPES = {  # hidden, layers, heads, intermediate: the two encoders' published configs
    "minilm-l6-shape": (384, 6, 12, 1536),
    "contriever-shape": (768, 12, 12, 3072),
}


def _synthetic_writer():
    spec = importlib.util.spec_from_file_location("synthetic_paper_data", REPO / "scripts" / "synthetic_paper_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.write_passages


def build_encoder(name: str, tokenizer: Path, folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    hidden, layers, heads, inter = SHAPES[name]
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=inter, max_position_embeddings=512)
    transformers.BertModel(cfg).save_pretrained(str(folder))
    for f in tokenizer.iterdir():
        if f.is_file() and f.name != "config.json":
            shutil.copy(f, folder / f.name)
    return folder


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class _StLoop:
    """sentence-transformers' `encode` as it is, for the baseline beside `Embedder.encode`."""

    def __init__(self, model):
        self.model = model

    def encode(self, texts, batch_size):
        return self.model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=False)


def timed_encode(embedder, texts: list[str], batch: int) -> tuple[np.ndarray, float]:
    embedder.encode(texts[:batch], batch_size=batch)   # warm-up: kernels, allocator
    _sync()
    t0 = time.perf_counter()
    out = embedder.encode(texts, batch_size=batch)
    _sync()
    return np.asarray(out, dtype=np.float32), time.perf_counter() - t0


def compare(folder: Path, texts: list[str], queries: list[str], device: str) -> dict:
    """fp32 batch 64 (the old default) and fp16 batch 512 (`--dtype fp16 --batch-size 512`) on the same texts."""
    import torch

    from kgrag_lib.retrieval.embedder import load_embedder

    row: dict = {}
    vecs = {}
    for dtype, batch in (("fp32", 64), ("fp16", 512)):
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        emb = load_embedder(str(folder), device=device, dtype=dtype)
        v, secs = timed_encode(emb, texts, batch)
        st, st_secs = timed_encode(_StLoop(emb.model), texts, batch)   # sentence-transformers' own loop
        q = np.asarray(emb.encode(queries, batch_size=batch), dtype=np.float32)
        vecs[dtype] = (v, q)
        row[f"{dtype}_b{batch}"] = {"passages_per_s": round(len(texts) / secs, 1), "seconds": round(secs, 2),
                                    "identity": emb.identity, "precision": emb.precision,
                                    "param_dtype": str(next(emb.model.parameters()).dtype),
                                    "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
                                    "sentence_transformers_loop_passages_per_s": round(len(texts) / st_secs, 1),
                                    "max_abs_diff_vs_that_loop": float(np.abs(v - st).max())}
        del emb
        if cuda:
            torch.cuda.empty_cache()
    (a, qa), (b, qb) = vecs["fp32"], vecs["fp16"]
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    top_a = np.argsort(-(qa @ a.T), axis=1)[:, :6]
    top_b = np.argsort(-(qb @ b.T), axis=1)[:, :6]
    overlap = np.mean([len(set(x) & set(y)) / 6 for x, y in zip(top_a.tolist(), top_b.tolist())])
    row["fp16_vs_fp32"] = {"cosine_mean": round(float(cos.mean()), 6), "cosine_min": round(float(cos.min()), 6),
                           "top6_overlap": round(float(overlap), 4), "queries": len(queries)}
    fast = row["fp16_b512"]["passages_per_s"]
    row["speedup_fp16_b512_over_fp32_b64"] = round(fast / row["fp32_b64"]["passages_per_s"], 2)
    row["projected_hours_21M_one_gpu_fp16"] = round(WIKIPEDIA_PASSAGES / fast / 3600, 2)
    row["projected_hours_21M_one_gpu_fp16_sentence_transformers_loop"] = round(
        WIKIPEDIA_PASSAGES / row["fp16_b512"]["sentence_transformers_loop_passages_per_s"] / 3600, 2)
    row["projected_hours_21M_one_gpu_fp32_b64"] = round(WIKIPEDIA_PASSAGES / row["fp32_b64"]["passages_per_s"] / 3600, 2)
    return row


def encoded(stdout: str) -> list[tuple[int, float]]:
    """(rows, seconds) of each `kgrag data embed` line that encoded something ("N rows in S s, R texts/s")."""
    return [(int(r), float(t)) for r, t in re.findall(r"(\d+) rows in ([\d.]+) s, [\d,]+ texts/s", stdout)]


def summarise(runs: list[dict]) -> dict:
    """Passages/s of the sequential shards and of the concurrent ones (all rows over the slowest shard)."""
    seq = [x for r in runs if r["argv"].startswith("--shard") for x in encoded(r["stdout"])]
    conc = [x for r in runs if "at once" in r["argv"] for x in encoded(r["stdout"])]
    out = {}
    if seq:
        out["sequential_passages_per_s"] = round(sum(r for r, _ in seq) / sum(t for _, t in seq), 1)
    if conc:
        out["concurrent_passages_per_s"] = round(sum(r for r, _ in conc) / max(t for _, t in conc), 1)
        out["concurrent_processes"] = len(conc)
    return out


def cli_shards(folder: Path, tsv: Path, cache: Path, shards: int, device: str) -> dict:
    """`kgrag data embed --shard i/N` as separate processes (what one process per GPU runs), then once
    more without a shard: it must find the merged array and encode nothing."""
    base = [sys.executable, "-m", "kgrag_lib", "data", "embed", "--corpus", f"wikipedia:{tsv}", "--embedder",
            str(folder), "--dtype", "fp16", "--batch-size", "512", "--cache-dir", str(cache), "--device", device]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = []
    for argv in [["--shard", f"{i}/{shards}"] for i in range(shards)] + [[]]:
        t0 = time.perf_counter()
        p = subprocess.run(base + argv, capture_output=True, text=True, env=env, cwd=REPO)
        runs.append({"argv": " ".join(argv) or "(whole)", "rc": p.returncode, "wall_s": round(time.perf_counter() - t0, 1),
                     "stdout": p.stdout.strip()[-600:], "stderr_tail": p.stderr.strip()[-600:] if p.returncode else ""})
    # the same shards as concurrent processes on the one GPU (the authors' 4 shards; a fresh cache)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(base[:-4] + ["--cache-dir", str(cache) + "-concurrent", "--device", device, "--shard", f"{i}/{shards}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for i in range(shards)]
    outs = [p.communicate() for p in procs]
    runs.append({"argv": f"{shards} shards at once", "rc": max(p.returncode for p in procs),
                 "wall_s": round(time.perf_counter() - t0, 1), "stdout": " | ".join(o[0].strip()[-300:] for o in outs),
                 "stderr_tail": " | ".join(o[1].strip()[-300:] for o in outs if o[1]) if any(p.returncode for p in procs) else ""})
    arrays = sorted((cache / "embeddings").glob("corpus-wikipedia-*.npy"))
    out: dict = {"runs": runs, "files": [a.name for a in arrays], **summarise(runs)}
    if arrays:
        arr = np.load(arrays[0], mmap_mode="r")
        out["array"] = {"shape": list(arr.shape), "dtype": str(arr.dtype), "finite": bool(np.isfinite(arr[:1000]).all())}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--passages", type=int, default=100_000, help="passages written for the CLI shard run")
    ap.add_argument("--compare", type=int, default=20_000, help="passages timed in fp32 and fp16 per encoder shape")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--device", default="cuda", help="cpu only to dry-run this script's logic (fp16 is then ignored)")
    args = ap.parse_args()
    import torch

    sys.path.insert(0, str(REPO))
    from kgrag_lib.data.passage_store import open_passage_store

    work = Path(os.environ.get("TMPDIR", "/tmp")) / "kgrag-gpu-embed"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    report: dict = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device}
    try:
        tsv = work / "psgs_w100.tsv"
        t0 = time.perf_counter()
        _synthetic_writer()(tsv, args.passages)
        store = open_passage_store(tsv, cache_dir=work / "cache", show_progress=False)
        report["store"] = {"passages": len(store), "build_s": round(time.perf_counter() - t0, 1)}
        texts = [t for block in store.iter_texts(block=4096, stop=args.compare) for t in block]
        queries = [t for block in store.iter_texts(start=args.compare, stop=args.compare + 200) for t in block]
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(args.tokenizer))
        lengths = [len(ids) for ids in tok(texts[:2000])["input_ids"]]
        report["tokens_per_passage"] = {"mean": round(float(np.mean(lengths)), 1), "max": int(max(lengths))}
        for name in SHAPES:
            folder = build_encoder(name, args.tokenizer, work / name)
            report[name] = compare(folder, texts, queries, args.device)
            print(name, json.dumps(report[name]), flush=True)
        report["cli_shards_contriever_shape"] = cli_shards(work / "contriever-shape", tsv, work / "cache", args.shards,
                                                               args.device)
        report["ok"] = all(r["rc"] == 0 for r in report["cli_shards_contriever_shape"]["runs"])
    except Exception:  # the report still comes back, with the failure in it
        report["ok"] = False
        report["error"] = traceback.format_exc()[-3000:]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_embed_check.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
