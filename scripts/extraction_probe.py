"""Does a model's KG extraction give SA-RAG and TCR-QF a graph to work with? (issue 28, step 2)

The answer-level mechanism of both papers (spreading activation beyond the seeds; a reasoning
path through quoted relations) cannot run on a KG without relations, and re-extracting a whole
corpus with a bigger model costs hours on 2 cores. This probe measures the first link of the
chain cheaply: the same seeded sample of passages, extracted with the real build code
(`build_text_kg`, `build_tcr_kg`) by each model, and the extraction figures of each build
(relations per chunk, chunks without a relation, unparsable outputs, TCR-QF's quotes found in
their chunk). Answers come from the shared LLM cache where the same request was made before.

    python scripts/extraction_probe.py [--selection 2wiki:dev200:n=30:seed=0] [--passages 20]
        [--models qwen2.5-coder-0.5b-q4 qwen2.5-coder-1.5b-q4] [--out results/mechanism-probe/extraction]

Writes, per model and KG kind, `<kind>-<model>/stats.json` and the extraction journal, then
`summary.json`, and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kgrag_lib.data.selection import CorpusSelection  # noqa: E402
from kgrag_lib.paths import data_root  # noqa: E402

KINDS = ("sa-rag", "tcr-qf")


def chunk_relations_without(journal: Path) -> int:
    """Chunks whose extraction record holds no relation."""
    rows = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sum(not r.get("relations") for r in rows)


def build(kind: str, passages: list, llm, folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    journal = folder / "journal.jsonl"
    start = time.perf_counter()
    if kind == "sa-rag":
        from kgrag_lib.methods.sa_rag.extraction import build_text_kg

        _, stats, _ = build_text_kg(passages, llm, journal, about={"probe": True})
        extra = {}
    else:
        from kgrag_lib.methods.tcr_qf.extraction import build_tcr_kg

        _, stats, kg = build_tcr_kg(passages, llm, journal, about={"probe": True})
        extra = kg.quote_counts()
    stats = {**stats, **extra, "chunks_without_relations": chunk_relations_without(journal),
             "wall_seconds": round(time.perf_counter() - start, 1)}
    (folder / "stats.json").write_text(json.dumps(stats, indent=1, default=str) + "\n", encoding="utf-8")
    return stats


def row(kind: str, model: str, s: dict) -> str:
    quotes = (f"{s['relations_kept'] - s['relations_flagged']} of {s['relations_kept']}"
              if kind == "tcr-qf" else "–")
    unparsable = s.get("unparsable_outputs", s.get("failed_outputs", 0))
    return (f"| {kind} | {model} | {s['chunks']} | {s['entities_per_chunk']:.2f} | {s['relations_per_chunk']:.2f} | "
            f"{s['chunks_without_relations']} | {unparsable} | {quotes} | {s['llm_calls_this_build']} | "
            f"{s['wall_seconds']:.0f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--selection", default="2wiki:dev200:n=30:seed=0",
                    help="the passages to sample from (a text:/tcr: KG selection without its prefix)")
    ap.add_argument("--passages", type=int, default=20, help="passages sampled (seeded) from the selection")
    ap.add_argument("--seed", type=int, default=0, help="seed of the passage sample")
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-q4", "qwen2.5-coder-1.5b-q4"],
                    help="LLM specs (load_llm), each extracting the same passages")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS, help="which papers' extraction")
    ap.add_argument("--out", default="results/mechanism-probe/extraction", help="output folder")
    a = ap.parse_args(argv)

    from kgrag_lib.llm import load_llm

    if a.passages < 1:
        ap.error(f"--passages {a.passages}: expected a positive number")
    passages, about = CorpusSelection.parse(a.selection).passages(data_root())
    picked = sorted(random.Random(a.seed).sample(range(len(passages)), min(a.passages, len(passages))))
    sample = [passages[i] for i in picked]
    out = Path(a.out)
    summary = {"selection": a.selection, "about": about, "passages_in_selection": len(passages),
               "passages": len(sample), "seed": a.seed, "passage_ids": [p.pid for p in sample], "runs": []}
    rows = []
    for model in a.models:
        llm = load_llm(model)
        for kind in a.kinds:
            stats = build(kind, sample, llm, out / f"{kind}-{model}")
            summary["runs"].append({"kind": kind, "model": model, "stats": stats})
            rows.append(row(kind, model, stats))
        close = getattr(llm, "close", None)
        if close:
            close()
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    print("| KG | model | chunks | entities per chunk | relations per chunk | chunks without a relation | "
          "unparsable outputs | relation quotes found in their chunk | LLM calls (this build) | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
