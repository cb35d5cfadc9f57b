"""`kgrag score FILE.jsonl`: EM, F1, Acc and Hit@1 of any predictions file.

Each line is a JSON object with "prediction" (string) and "answers" (list of gold strings,
gold first then aliases), e.g. a run's predictions.jsonl, or predictions from elsewhere.
Prints one JSON object of percentages (2 decimals) with "n".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EXPECTED = 'a JSON object per line like {"prediction": "Paris", "answers": ["Paris", "City of Light"]}'
DEFAULT_METRICS = ("em", "f1", "acc", "hit1")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score a predictions .jsonl file (EM, F1, Acc, Hit@1)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="JSONL file: one {\"prediction\": str, \"answers\": [str, ...]} per line")
    p.add_argument("--ci", action="store_true", help="add bootstrap 95%% intervals as \"<metric>_ci95\": [lo, hi]")
    p.add_argument("--metrics", default=",".join(DEFAULT_METRICS),
                   help="comma-separated metrics (em, f1, acc, hit1, mentions_gold, yes_no, recall@K); "
                        "default %(default)s")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for --ci (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default %(default)s)")
    p.add_argument("--no-yes-no", action="store_true",
                   help="score yes/no golds as plain strings (default: \"Yes, because...\" matches gold \"yes\")")
    p.set_defaults(func=handle)


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a predictions file; a bad line raises DataFormatError(file, line)."""
    from ..errors import DataFormatError, MissingDataError

    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"{path}: no such predictions file (expected {EXPECTED})")
    records: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(path, lineno, EXPECTED, f"not JSON ({e.msg}): {line.strip()}") from None
            if not isinstance(rec, dict):
                raise DataFormatError(path, lineno, EXPECTED, line.strip())
            pred, answers = rec.get("prediction"), rec.get("answers")
            if "prediction" not in rec or not (pred is None or isinstance(pred, str)):
                raise DataFormatError(path, lineno, EXPECTED, f'field "prediction" missing or not a string in {line.strip()}')
            if not isinstance(answers, list) or not all(isinstance(a, (str, int, float)) for a in answers):
                raise DataFormatError(path, lineno, EXPECTED, f'field "answers" missing or not a list of strings in {line.strip()}')
            rec["prediction"] = pred or ""
            rec["answers"] = [a if isinstance(a, str) else json.dumps(a) for a in answers]
            records.append(rec)
    return records


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 2)
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def handle(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..eval.metrics import get_metric, score_records

    metrics = tuple(m.strip() for m in str(args.metrics).split(",") if m.strip())
    if not metrics:
        raise ConfigError("--metrics: give at least one metric name, e.g. em,f1,acc,hit1")
    for m in metrics:
        get_metric(m)  # unknown names fail before the file is read
    records = read_predictions(args.file)
    scores = score_records(records, metrics, ci=args.ci, n_boot=args.n_boot, seed=args.seed,
                           yes_no=not args.no_yes_no)
    print(json.dumps({k: _rounded(v) for k, v in scores.items()}))
    return 0
