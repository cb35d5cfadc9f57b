"""Replay committed reference runs from the committed LLM answers: 0 model calls, the same scores.

A refactor that changes a prompt, a cache key, a run identity or a method's logic shows up here
as a run that sends calls or scores differently from what `results/reference` holds. Each chosen
run is rebuilt from its manifest (the shipped profile of its name, its method settings, its
sample) and answered into a scratch folder against an LLM cache holding only the committed answers
(`results/reference/llm-cache/part-*.jsonl.gz`); the embedding and KG caches are the usual ones.

    .venv/bin/python scripts/replay_reference.py 12_metaqa_baselines/runs/metaqa-2hop 41_tcr_qf_main
    .venv/bin/python scripts/replay_reference.py --all            # every committed run (hours of CPU)

Exit 1 when a run sent a call or scored differently.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "results" / "reference"
SCORES = ("n", "em", "f1", "acc", "hit1", "hit1_exact", "hit1_first")


def manifests(prefixes: list[str]) -> list[Path]:
    found = sorted(p for p in REFERENCE.rglob("manifest.json")
                   if "method" in (json.loads(p.read_text(encoding="utf-8")).get("config", {}).get("run") or {}))
    return [p for p in found if not prefixes or any(str(p.relative_to(REFERENCE)).startswith(x) for x in prefixes)]


def replay(path: Path, cache: Path, scratch: Path) -> tuple[bool, str]:
    from kgrag_lib.config import available_profiles
    from kgrag_lib.experiment import RUN_FIELDS, make_context, resolve_run, run_experiment
    from kgrag_lib.llm import load_llm

    stored = json.loads(path.read_text(encoding="utf-8"))["config"]
    run = stored["run"]
    given = {k: v for k, v in run.items()
             if k in RUN_FIELDS and k not in ("method", "dataset", "out", "profile", "data_root", "cache_dir")}
    method = {k: v for k, v in stored["method_config"].items() if k not in RUN_FIELDS}
    name = stored["profile"].get("name")
    profile = name if name in available_profiles() else stored["profile"]
    out = scratch / path.parent.relative_to(REFERENCE)
    r = resolve_run(run["method"], run["dataset"], out, profile, **given, **method)
    ctx = make_context(r.run, r.profile)
    ctx.llm = load_llm(r.run.model, cache_path=cache)
    got = run_experiment(run["method"], run["dataset"], out, profile=profile, ctx=ctx, progress=False,
                         **given, **method)
    want = json.loads((path.parent / "metrics.json").read_text(encoding="utf-8"))
    sent = got["this_run"].get("llm_calls_sent", 0)
    diff = {k: (want.get(k), got.get(k)) for k in SCORES if want.get(k) != got.get(k)}
    ok = sent == 0 and not diff
    return ok, f"{'ok ' if ok else 'BAD'} {path.parent.relative_to(REFERENCE)}: sent {sent} calls" + \
        (f"; scores differ {diff}" if diff else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="prefixes of run folders under results/reference")
    ap.add_argument("--all", action="store_true", help="every committed run")
    a = ap.parse_args()
    if not a.runs and not a.all:
        ap.error("name run folders (prefixes under results/reference) or pass --all")
    from kgrag_lib.llm.cache import import_cache

    chosen = manifests([] if a.all else a.runs)
    if not chosen:
        print(f"no committed run matches {a.runs}", file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        cache = Path(tmp) / "reference.sqlite"
        for part in sorted((REFERENCE / "llm-cache").glob("part-*.jsonl.gz")):
            import_cache(part, cache)
        for path in chosen:
            ok, line = replay(path, cache, Path(tmp) / "runs")
            bad += not ok
            print(line, flush=True)
    print(f"{len(chosen) - bad} of {len(chosen)} runs replayed with 0 calls and the committed scores")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
