"""`kgrag score FILE.jsonl`: EM, F1, Acc and Hit@1 of any predictions file.

Each line is a JSON object with "prediction" (string) and "answers" (list of gold strings,
gold first then aliases), e.g. a run's predictions.jsonl, or predictions from elsewhere. A line
whose "dataset" is "hotpotqa" or "2wiki" gets F1 as that dataset's official script computes it
(`hotpot_evaluate_v1.py`: F1 0 when either side is yes/no/noanswer and they differ); any other
line SQuAD's F1 (MuSiQue's official scorer).
Prints one JSON object of percentages (2 decimals) with "n".
"""

from __future__ import annotations

import argparse
import json
from typing import Any

DEFAULT_METRICS = ("em", "f1", "acc", "hit1", "hit1_exact", "hit1_first")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score a predictions .jsonl file (EM, F1, Acc, Hit@1)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="JSONL file: one {\"prediction\": str, \"answers\": [str, ...]} per line")
    p.add_argument("--ci", action="store_true", help="add bootstrap 95%% intervals as \"<metric>_ci95\": [lo, hi]")
    p.add_argument("--metrics", default=",".join(DEFAULT_METRICS),
                   help="comma-separated metrics: em, f1, acc (the raw answer contains a gold), hit1 (a gold "
                        "entity occurs in the answer, as the MetaQA paper's figures behave), hit1_exact (the "
                        "answer equals a gold), hit1_first (the first listed entity is gold), yesno_agree, "
                        "recall@K; default %(default)s")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for --ci (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default %(default)s)")
    p.set_defaults(func=handle)


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 2)
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def handle(args: argparse.Namespace) -> int:
    from ..data.common import check_file
    from ..errors import ConfigError, DataFormatError
    from ..eval.metrics import get_metric, score_records
    from ..rundir import EXPECTED, read_predictions

    metrics = tuple(m.strip() for m in str(args.metrics).split(",") if m.strip())
    if not metrics:
        raise ConfigError("--metrics: give at least one metric name, e.g. em,f1,acc,hit1")
    for m in metrics:
        get_metric(m)  # unknown names fail before the file is read
    if args.n_boot < 1:
        raise ConfigError(f"--n-boot: expected an integer >= 1 (bootstrap resamples for --ci), got {args.n_boot}")
    records = read_predictions(check_file(args.file, EXPECTED))
    if not records:
        raise DataFormatError(args.file, None, f"at least one prediction, {EXPECTED}", "no predictions")
    scores = score_records(records, metrics, ci=args.ci, n_boot=args.n_boot, seed=args.seed)
    print(json.dumps({k: _rounded(v) for k, v in scores.items()}))
    return 0
