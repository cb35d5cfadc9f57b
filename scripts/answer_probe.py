"""Does a bigger model write TCR-QF's final answer in a form we read? (issue 28, step 2)

TCR-QF's claims need its reasoning to end in an answer (`prompts.read_answer`: the `Final Answer:`
line, a closing "the answer is X" sentence, a leading yes/no). Running the whole method with the
1.5B model means rebuilding its KG and every search stage (hours here); this probe isolates the
last link instead: the final reasoning request of each question of a finished run (the same
messages and sampling, so the same retrieved context) is sent again to each model, and its output
read with the pipeline's own parse (`pipeline.predicted_answer`). It measures the answer step only, conditioned on the run's
retrieval; the run's own model is answered from the LLM cache.

    python scripts/answer_probe.py [--run results/cpu-reference/50_cross_method/runs/2wiki/n30_seed0/tcr-qf]
        [--questions 20] [--models qwen2.5-coder-0.5b-q4 qwen2.5-coder-1.5b-q4] [--out results/mechanism-probe/answer]

The run folder needs its `predictions.jsonl` (request ids) and the LLM cache that answered it (a
local run of notebook 50; the committed cache replays it without a model call). Writes
`summary.json` (per model: forms read, EM against gold) and `outputs.jsonl`, and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kgrag_lib.errors import KgragError  # noqa: E402


def final_requests(run: Path, cache_path: Path, limit: int) -> list[dict]:
    """Per question (first `limit` of the run): its last free-text request with the reasoning budget
    (the final answer), read back from the cache as (messages, params), with gold and prediction."""
    preds = run / "predictions.jsonl"
    if not preds.is_file():
        raise KgragError(f"{preds}: not found; expected a finished run folder with predictions.jsonl "
                         "(run notebook 50 or `kgrag run --method tcr-qf ...` first)")
    rows = [json.loads(line) for line in preds.read_text(encoding="utf-8").splitlines() if line.strip()]
    from kgrag_lib.llm.cache import LLMCache, existing_cache_file

    cache = LLMCache(existing_cache_file(cache_path))
    out = []
    for r in rows[:limit]:
        cfg = r["trace"]["config"]
        budget = cfg.get("reason_max_tokens") or cfg["max_tokens"]
        last = None
        for rid in r.get("requests", []):
            hit = cache.find(rid)
            if not hit:
                raise KgragError(f"{preds}: request {rid} of question {r['qid']} is not in {cache_path}; "
                                 "import the run's cache first (kgrag cache import results/reference/llm-cache)")
            req = hit[0]["request"]
            params = req["params"]   # extraction may share the budget, but it is grammar-constrained
            if params["max_tokens"] == budget and not params.get("grammar") and not params.get("json_schema"):
                last = {"messages": req["messages"], "params": req["params"], "response": hit[0]["text"]}
        if last is None:
            raise KgragError(f"{preds}: question {r['qid']} has no request with the reasoning budget {budget}")
        out.append({"qid": r["qid"], "answers": r["answers"], "prediction": r["prediction"], **last})
    cache.close()
    return out


def answer(llm, req: dict) -> str:
    from kgrag_lib.llm.base import SamplingParams

    params = {k: (tuple(v) if k == "stop" else v) for k, v in req["params"].items()}
    return llm.generate(req["messages"], SamplingParams(**params))


def summarize(model: str, outputs: list[dict]) -> dict:
    """Forms read, EM of the predictions, and how many equal the run's own prediction (for the run's
    model that is every question, a check that the right request was replayed)."""
    forms = Counter(o["form"] or "not read" for o in outputs)
    n = len(outputs)
    return {"model": model, "questions": n, "read": n - forms["not read"], "forms": dict(forms),
            "em": round(100 * sum(o["em"] for o in outputs) / n, 1) if n else None,
            "same_as_run": sum(o["same_as_run"] for o in outputs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="results/cpu-reference/50_cross_method/runs/2wiki/n30_seed0/tcr-qf",
                    help="a finished TCR-QF-family run folder (predictions.jsonl)")
    ap.add_argument("--questions", type=int, default=20, help="its first N questions")
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-q4", "qwen2.5-coder-1.5b-q4"],
                    help="LLM specs (load_llm), each answering the same final requests")
    ap.add_argument("--cache", default=None, help="the LLM cache that answered the run (default: the project's)")
    ap.add_argument("--out", default="results/mechanism-probe/answer", help="output folder")
    a = ap.parse_args(argv)
    if a.questions < 1:
        ap.error(f"--questions {a.questions}: expected a positive number")

    from kgrag_lib.eval.metrics import exact_match
    from kgrag_lib.llm import load_llm
    from kgrag_lib.llm.cache import default_cache_path
    from kgrag_lib.methods.tcr_qf.pipeline import predicted_answer

    cache_path = Path(a.cache) if a.cache else default_cache_path()
    reqs = final_requests(Path(a.run), cache_path, a.questions)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    outputs, summary = [], {"run": a.run, "questions": len(reqs), "models": []}
    for model in a.models:
        llm = load_llm(model, cache_path=cache_path)
        mine = []
        for req in reqs:
            text = answer(llm, req)
            pred, form = predicted_answer(text)   # what the pipeline predicts
            mine.append({"model": model, "qid": req["qid"], "answers": req["answers"], "prediction": pred,
                         "form": form, "em": bool(exact_match(pred, req["answers"])),
                         "same_as_run": pred == req["prediction"], "output": text})
        close = getattr(llm, "close", None)
        if close:
            close()
        outputs += mine
        summary["models"].append(summarize(model, mine))
    (out / "outputs.jsonl").write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in outputs),
                                       encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print("| model | questions | answer read | forms | EM | prediction as the run's |")
    print("|---|---|---|---|---|---|")
    for s in summary["models"]:
        forms = ", ".join(f"{k} {v}" for k, v in s["forms"].items())
        print(f"| {s['model']} | {s['questions']} | {s['read']} of {s['questions']} | {forms} | {s['em']} | "
              f"{s['same_as_run']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
