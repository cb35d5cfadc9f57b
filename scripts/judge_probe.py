"""Which embedded model is a correctness judge worth asking? (issue 28: SA-RAG Table 1 needs a
judge that passes its controls)

SA-RAG's correctness column is an LLM's verdict, and a verdict tests something only when the
judge accepts each question's gold answer and rejects another question's (`eval.judge`'s
controls); the 0.5B model accepted every answer it was shown. This probe judges the same
committed predictions files with each model, controls included, and reports per model the
controls' acceptance rates, its acceptance of predictions that share no word with a gold answer,
whether the judge is informative (`eval.judge.control_summary`), and how often its verdict agrees
with exact match (on the rows where EM says correct, a judge should too). Judge calls go through
the shared LLM cache, so a rerun sends none.

    python scripts/judge_probe.py PREDICTIONS.jsonl [...] [--models qwen2.5-coder-0.5b-q4 qwen2.5-coder-1.5b-q4]
        [--out results/mechanism-probe/judge]

Writes `<model>/<run>.judge.jsonl` / `.judge.json` per predictions file (copied beside them),
then `summary.json`, and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_name(path: Path) -> str:
    """`naive-rag` for .../runs/2wiki/n30_seed0/naive-rag/predictions.jsonl, else the file's stem."""
    return path.parent.name if path.stem == "predictions" else path.stem


def em_agreement(judge_rows: list[dict]) -> dict:
    """Of the questions EM scores correct, how many the judge accepts; of the rest, how many it accepts."""
    from kgrag_lib.eval.metrics import exact_match

    em_right = [r for r in judge_rows if r["correct"] is not None and exact_match(r["prediction"], r["answers"])]
    em_wrong = [r for r in judge_rows if r["correct"] is not None and not exact_match(r["prediction"], r["answers"])]
    return {"em_correct": len(em_right), "judge_accepts_em_correct": sum(r["correct"] for r in em_right),
            "em_incorrect": len(em_wrong), "judge_accepts_em_incorrect": sum(r["correct"] for r in em_wrong)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("predictions", nargs="+", help="predictions .jsonl files (a run's predictions.jsonl)")
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-q4", "qwen2.5-coder-1.5b-q4"],
                    help="LLM specs (load_llm), each judging every file")
    ap.add_argument("--out", default="results/mechanism-probe/judge", help="output folder")
    a = ap.parse_args(argv)

    from kgrag_lib.eval.judge import judge_predictions
    from kgrag_lib.llm import load_llm

    files = [Path(p) for p in a.predictions]
    for f in files:
        if not f.is_file():
            ap.error(f"{f}: no such predictions file (expected a run's predictions.jsonl)")
    out = Path(a.out)
    summary = {"predictions": [str(f) for f in files], "runs": []}
    rows = []
    for model in a.models:
        llm = load_llm(model)
        for f in files:
            dest = out / model / f"{run_name(f)}.jsonl"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
            start = time.perf_counter()
            s = judge_predictions(dest, llm)
            s["wall_seconds"] = round(time.perf_counter() - start, 1)
            judged = [json.loads(line) for line in dest.with_name(f"{dest.stem}.judge.jsonl").open(encoding="utf-8")]
            s.update(em_agreement(judged))
            dest.unlink()   # the copy; the verdicts name the source in summary.json
            summary["runs"].append({"model": model, "run": run_name(f), "source": str(f), "summary": s})
            rows.append(f"| {model} | {run_name(f)} | {s['n']} | {s.get('control_gold_accepted')} | "
                        f"{s.get('control_wrong_accepted')} | {'yes' if s.get('judge_informative') else 'no'} | "
                        f"{s['judge_accepts_em_correct']} of {s['em_correct']} | "
                        f"{s['judge_accepts_em_incorrect']} of {s['em_incorrect']} | "
                        f"{s.get('no_overlap_accepted')} of {s.get('no_overlap_n')} | {s['unparsable']} | "
                        f"{s['wall_seconds']:.0f} |")
        close = getattr(llm, "close", None)
        if close:
            close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    print("| judge | run | n | gold answers accepted (%) | other questions' answers accepted (%) | informative | "
          "accepts EM-correct | accepts EM-incorrect | predictions sharing no word with a gold: accepted (%) of n | "
          "no verdict | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
