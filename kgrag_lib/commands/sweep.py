"""`kgrag sweep NOTEBOOK -p NAME v1 v2 ... [-p ...]`: one papermill run per parameter combination.

Each combination's executed notebook and outputs go to their own folder; the rows each run
writes to `summary.json` are collected, with the combination's parameters, into one table
(`sweep.csv` and `sweep.md`). Finished combinations are skipped on a rerun (use --force).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
from pathlib import Path
from unittest import mock

import yaml


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a notebook over a parameter grid with papermill", description=__doc__)
    p.add_argument("notebook", help="notebook path or name, e.g. notebooks/11_metaqa_parameter_grid.ipynb")
    p.add_argument("-p", "--param", nargs="+", action="append", metavar=("NAME", "VALUE"), default=[],
                   help="a parameter and its values (YAML-parsed: 3, 0.5, true, [1,2])")
    p.add_argument("--profile", default="cpu-smoke", help="profile passed to every run (unless swept)")
    p.add_argument("--out", default=None, help="sweep folder (default results/sweeps/<notebook>)")
    p.add_argument("--force", action="store_true", help="rerun combinations that already finished")
    p.set_defaults(func=handle)


def _slug(params: dict) -> str:
    s = "_".join(f"{k}={v}" for k, v in params.items())
    return re.sub(r"[^A-Za-z0-9=._-]+", "-", s)[:150] or "default"


def handle(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..errors import ConfigError
    from ..notebooks import NOTEBOOK_DIR, execute, read_summary
    from ..paths import REPO_ROOT

    nb = Path(args.notebook)
    if not nb.exists():
        nb = NOTEBOOK_DIR / (args.notebook if args.notebook.endswith(".ipynb") else args.notebook + ".ipynb")
    if not nb.exists():
        raise ConfigError(f"notebook {args.notebook!r} not found (looked in . and {NOTEBOOK_DIR})")
    grid: dict[str, list] = {}
    for entry in args.param:
        if len(entry) < 2:
            raise ConfigError(f"-p expects a name and at least one value, got {entry}")
        grid[entry[0]] = [yaml.safe_load(v) for v in entry[1:]]
    # absolute: the notebook runs with notebooks/ as its working directory
    out_root = Path(args.out or REPO_ROOT / "results" / "sweeps" / nb.stem).resolve()
    combos = [dict(zip(grid, vals)) for vals in itertools.product(*grid.values())] or [{}]
    rows = []
    for i, combo in enumerate(combos, 1):
        run_dir = out_root / _slug(combo)
        done_marker = run_dir / "executed.ipynb"
        params = {"profile": args.profile, **combo, "out_dir": str(run_dir)}
        if done_marker.exists() and read_summary(run_dir) and not args.force:
            print(f"[{i}/{len(combos)}] {combo}: already done, skipped")
        else:
            print(f"[{i}/{len(combos)}] {combo}: running {nb.name}", flush=True)
            # the kernel inherits our environment: this combination's figures go to its own folder
            with mock.patch.dict(os.environ, {"KGRAG_FIGURES_DIR": str(run_dir / "figures")}):
                execute(nb, run_dir / "executed.partial.ipynb", params)
            (run_dir / "executed.partial.ipynb").replace(done_marker)
        for r in read_summary(run_dir) or [{}]:
            rows.append({**combo, **r, "executed": str(done_marker)})
    table = pd.DataFrame(rows)
    out_root.mkdir(parents=True, exist_ok=True)
    table.to_csv(out_root / "sweep.csv", index=False)
    (out_root / "sweep.md").write_text(table.to_markdown(index=False) if _has_tabulate() else table.to_string(index=False))
    print(table.to_string(index=False))
    print(json.dumps({"combinations": len(combos), "table": str(out_root / "sweep.csv")}))
    return 0


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False

