"""Add the per-question `mechanism` record (report/mechanism.py) to published KG-Infused runs that
were committed before runs recorded it, by replaying each run from the committed LLM answers.

Usage: python scripts/backfill_mechanism.py [RESULTS_FOLDER [PATH_SUBSTRING]] (default results/reference,
every run of a method with a mechanism signal).

A replay sends no model call: a request missing from the committed answers fails its question, and
the run is then left untouched. A replay whose predictions differ from the published ones is refused
too, so a record is only ever added from the same run. KG-Infused runs made before the answer prompt
was reworded (2026-11-25: the committed 0.5B runs) no longer replay: their last request is not among the
committed answers, so they keep the records they have (without `gold_in_subgraph`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(folder: str = "results/reference", only: str = "") -> int:
    pub = (ROOT / folder).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="kgrag-backfill-"))
    os.environ["KGRAG_LLM_CACHE"] = str(tmp / "llm.sqlite")
    from kgrag_lib.experiment import make_context, resolve_run, run_experiment
    from kgrag_lib.llm.cache import cache_exports, import_cache
    from kgrag_lib.report.mechanism import KG_METHODS, SA_RAG_METHODS, TCR_METHODS
    from kgrag_lib.report.study import compact_rows

    for part in cache_exports(pub / "llm-cache"):
        import_cache(part, tmp / "llm.sqlite")

    def no_model(*_a, **_k):
        raise RuntimeError("not among the committed answers: a backfill sends no model call")

    contexts: dict[str, object] = {}
    for manifest in sorted(pub.rglob("manifest.json")):
        cfg = json.loads(manifest.read_text(encoding="utf-8"))
        cfg = cfg.get("config", cfg)
        run, mcfg = cfg.get("run", {}), dict(cfg.get("method_config", {}))
        rel = manifest.parent.relative_to(pub)
        rows_path = manifest.parent / "questions.jsonl"
        if run.get("method") not in (*KG_METHODS, *SA_RAG_METHODS, *TCR_METHODS) or not rows_path.is_file() \
                or only not in str(rel):
            continue
        published = [json.loads(x) for x in rows_path.read_text(encoding="utf-8").splitlines() if x.strip()]
        if all("mechanism" in r for r in published):
            print(f"{rel}: has its records")
            continue
        if str(run.get("model", "")).startswith("hf:"):
            print(f"{rel}: skipped (a trained model folder of the original machine)")
            continue
        out = tmp / "runs" / rel
        given = {**{k: run[k] for k in ("split", "qa_file") if run.get(k) is not None},
                 **{k: v for k, v in mcfg.items() if v is not None}}
        r = resolve_run(run["method"], run["dataset"], out, run.get("profile") or "cpu-reference",
                        n=run.get("n"), seed=run.get("seed"), **given)
        key = f"{r.run.model}|{r.run.embedder}"
        if key not in contexts:
            contexts[key] = make_context(r.run, r.profile)
            contexts[key].llm._compute = no_model
        ctx = contexts[key]
        m = run_experiment(run["method"], run["dataset"], out, profile=run.get("profile") or "cpu-reference", ctx=ctx,
                           progress=False, n=run.get("n"), seed=run.get("seed"), **given)
        fresh = {row["qid"]: row for row in compact_rows(out)}
        same = all(fresh.get(p["qid"], {}).get("prediction") == p.get("prediction") for p in published)
        if m.get("failed") or not same:
            print(f"{rel}: NOT backfilled (failed {m.get('failed')}, same predictions {same})")
            continue
        for p in published:
            p["mechanism"] = fresh[p["qid"]].get("mechanism", {})
        rows_path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in published), encoding="utf-8")
        print(f"{rel}: mechanism records added to {len(published)} questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
