"""What the exact sign-flip p costs against the Monte Carlo one it replaced, on the committed comparisons
of the claims plan's unit 1 (notebook 21 at 1.5B, 2Wiki, n = 237, Avg per question).

For each comparison: the grid bracket (`eval.paired.sign_flip_bounds`, the p REPORT now takes: its upper
end) with its width and time, beside the naive baseline, Monte Carlo over 200,000 sign patterns (the old
`MC_FLIPS`) under five seeds: its spread is what decided a verdict at a Holm threshold before. The
figures are printed, nothing is asserted.

    .venv/bin/python bench/sign_flip_bench.py [RESULTS_FOLDER]   (default results/reference-1.5b)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kgrag_lib.eval.paired import sign_flip_bounds, sign_flip_p  # noqa: E402
from kgrag_lib.report.rescore import question_avg  # noqa: E402

PAIRS = {   # claim: (side A, side B), folders under the notebook
    "t1.kg_infused_over_vanilla_rag.2wiki": ("runs/2wiki/n237_seed0/kg-infused_rounds=2", "runs/2wiki/n237_seed0/vanilla-rag"),
    "t1.kg_infused_over_vanilla_qe.2wiki": ("runs/2wiki/n237_seed0/kg-infused_rounds=2", "runs/2wiki/n237_seed0/vanilla-qe"),
    "t1.retrieval_over_nor.2wiki": ("runs/2wiki/n237_seed0/vanilla-rag", "runs/2wiki/n237_seed0/nor"),
    "m1.kg_over_placebo.2wiki": ("runs/2wiki/n237_seed0/kg-infused_rounds=2",
                                 "placebo/runs/2wiki/n237_seed0/kg-infused_rounds=2"),
}


def values(folder: Path) -> dict[str, float]:
    rows = [json.loads(x) for x in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    return question_avg(rows, "avg")


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "results/reference-1.5b") / "21_kg_infused_main"
    if not root.is_dir():
        sys.exit(f"sign_flip_bench: {root} not found; give a published results folder holding notebook 21")
    print(f"{'claim':40s} {'k':>4s} {'grid p':>9s} {'width':>9s} {'grid s':>7s}   {'MC p, 5 seeds (min..max)':>26s} {'MC s':>6s}")
    for claim, (a, b) in PAIRS.items():
        va, vb = values(root / a), values(root / b)
        d = np.array([va[q] - vb[q] for q in va if q in vb])
        t = time.perf_counter()
        lo, hi = sign_flip_bounds(d)
        p = sign_flip_p(d)
        grid_s = time.perf_counter() - t
        t = time.perf_counter()
        mc = []
        for seed in range(5):   # the old computation: Monte Carlo, 200,000 patterns
            rng = np.random.default_rng(seed)
            dd = d[d != 0]
            hits = sum(int((np.abs(rng.choice((-1.0, 1.0), size=(50_000, dd.size)) @ dd) >= abs(dd.sum()) * (1 - 1e-9)).sum())
                       for _ in range(4))
            mc.append((1 + hits) / 200_001)
        mc_s = (time.perf_counter() - t) / 5
        print(f"{claim:40s} {int((d != 0).sum()):4d} {p:9.6f} {hi - lo:9.2e} {grid_s:7.2f}   "
              f"{min(mc):.6f}..{max(mc):.6f}        {mc_s:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
