"""`kgrag sweep NOTEBOOK -p NAME v1 v2 ... [-p ...]`: one papermill run per parameter combination.

Each combination's executed notebook and outputs go to their own folder; the rows each run
writes to `summary.json` are collected, with the combination's parameters, into one table
(`sweep.csv` and `sweep.md`). A combination is identified by everything that decides it (the
notebook, its parameters and the whole resolved profile, hashed into its folder name and kept in
`cell.json`): a rerun skips exactly the combinations that finished with the same identity (use
--force to rerun them). Parameter names must be the notebook's own (its `parameters` cell) and
Python identifiers; values are YAML scalars or lists; anything else is refused before a run starts.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import keyword
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from ..executors import add_arguments as add_executor_arguments
from ..redact import redact, refuse_secret


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a notebook over a parameter grid with papermill", description=__doc__)
    p.add_argument("notebook", help="notebook path or name, e.g. notebooks/11_metaqa_parameter_grid.ipynb")
    p.add_argument("-p", "--param", nargs="+", action="append", metavar=("NAME", "VALUE"), default=[],
                   help="a parameter and its values (YAML-parsed: 3, 0.5, true, [1,2])")
    p.add_argument("--profile", default="cpu-smoke", help="profile passed to every run (unless swept)")
    p.add_argument("--out", default=None, help="sweep folder (default results/sweeps/<notebook>)")
    p.add_argument("--force", action="store_true", help="rerun combinations that already finished")
    add_executor_arguments(p)
    p.set_defaults(func=handle)


CELL_FILE = "cell.json"


def _slug(params: dict, identity: dict) -> str:
    """A readable folder name, unique per identity: the parameters cut to 100 characters, then a hash."""
    s = "_".join(f"{k}={v}" for k, v in params.items())
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return (re.sub(r"[^A-Za-z0-9=._-]+", "-", s)[:100] or "default") + "-" + digest


def _grid(entries: list[list[str]], accepted: dict[str, Any], notebook: Path) -> dict[str, list]:
    """The swept parameters and their values, refused before anything runs when a name is not the
    notebook's or not an identifier, or a value is not plain YAML."""
    from ..errors import ConfigError

    from ..config import cli_yaml_value

    grid: dict[str, list] = {}
    for entry in entries:
        if len(entry) < 2:
            raise ConfigError(f"-p expects a name and at least one value, got {entry}")
        name = entry[0]
        if name in grid:   # `-p a 1 -p a 2` would silently keep only the last
            raise ConfigError(f"-p {name} is given twice; give all its values once: -p {name} "
                              f"{' '.join(map(str, grid[name]))} {' '.join(entry[1:])}")
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ConfigError(f"-p {name!r}: a parameter name must be a Python identifier (a variable of the "
                              f"notebook's parameters cell), e.g. top_k")
        if name not in accepted:
            raise ConfigError(f"-p {name!r}: {notebook.name} has no such parameter; its parameters cell sets "
                              f"{', '.join(sorted(accepted)) or 'nothing'}")
        values = []
        for raw in entry[1:]:
            try:
                value = cli_yaml_value(raw, f"-p {name}")
            except yaml.YAMLError as exc:
                what = str(exc).splitlines()[0]
                raise ConfigError(f"-p {name} {raw!r}: not a YAML value ({what}); quote strings, e.g. '\"{raw}\"'") from None
            if not _plain(value):
                raise ConfigError(f"-p {name} {raw!r}: expected a number, string, boolean, null or a list/mapping "
                                  f"of them, got {type(value).__name__}")
            refuse_secret(value, f"-p {name}", "the executed notebooks")
            values.append(value)
        grid[name] = values
    return grid


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, (str, int, float, bool))


def _notebook_parameters(notebook: Path) -> dict[str, Any]:
    import papermill as pm

    from ..errors import ConfigError

    if notebook.is_dir():
        raise ConfigError(f"notebook {notebook} is a folder; expected a Jupyter notebook file (.ipynb)")
    try:
        params = pm.inspect_notebook(str(notebook))
    except RecursionError:
        raise ConfigError(f"notebook {notebook}: nested too deeply to read; expected a Jupyter notebook (.ipynb)") from None
    except Exception as e:   # nbformat's NotJSONError, ValidationError, a decoding error: not a notebook
        raise ConfigError(f"notebook {notebook} is not a Jupyter notebook (.ipynb JSON with cells): "
                          f"{type(e).__name__}: {str(e)[:160]}") from None
    if not params:
        raise ConfigError(f"{notebook}: no cell tagged `parameters`, so nothing can be swept")
    return params


def _identity(notebook: Path, params: dict[str, Any]) -> dict[str, Any]:
    """What decides a combination's results: the notebook file, its parameters and the resolved
    profile (so another profile, even under the same name, is another combination)."""
    from ..errors import ConfigError
    from ..studies import load_profile

    if not isinstance(params["profile"], str):   # `-p profile 1010` reads as YAML: an int names no profile
        raise ConfigError(f"-p profile {params['profile']!r} is read as a YAML {type(params['profile']).__name__}; expected a "
                          f"profile name or a path to a profile YAML (quote a numeric name: -p profile \"'1010'\")")
    text = notebook.read_bytes()
    return {"notebook": notebook.name, "notebook_sha256": hashlib.sha256(text).hexdigest(),
            "parameters": params, "profile": load_profile(params["profile"])}


def handle(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..executors import make_executor, require_notebook_tools
    from ..notebooks import NOTEBOOK_DIR
    from ..paths import REPO_ROOT

    require_notebook_tools("kgrag sweep")
    nb = Path(args.notebook)
    if not nb.exists():
        nb = NOTEBOOK_DIR / (args.notebook if args.notebook.endswith(".ipynb") else args.notebook + ".ipynb")
    if not nb.exists():
        raise ConfigError(f"notebook {args.notebook!r} not found (looked in . and {NOTEBOOK_DIR})")
    grid = _grid(args.param, _notebook_parameters(nb), nb)
    if "out_dir" in grid:
        raise ConfigError("-p out_dir: each combination gets its own folder under --out; sweep other parameters")
    # absolute: the notebook runs with notebooks/ as its working directory
    out_root = Path(args.out or REPO_ROOT / "results" / "sweeps" / nb.stem).resolve()
    combos = [dict(zip(grid, vals)) for vals in itertools.product(*grid.values())] or [{}]
    cells = []
    for combo in combos:   # every identity (profiles included) resolved before the first run
        # redacted: a token in the profile (a user's own file) goes into no folder name, cell.json, table or message
        identity = redact(_identity(nb, {"profile": args.profile, **combo}))
        cells.append((combo, identity, out_root / _slug(redact(combo), identity)))
    executor = make_executor(getattr(args, "executor", "local"), address=getattr(args, "address", None),
                             num_cpus=getattr(args, "num_cpus", None))
    from ..rundir import folder_lock

    out_root.mkdir(parents=True, exist_ok=True)
    with folder_lock(out_root):   # two sweeps into one folder would run the same cell twice at once
        return _run_cells(args, nb, out_root, cells, combos, executor)


def _run_cells(args: argparse.Namespace, nb: Path, out_root: Path, cells: list, combos: list, executor: Any) -> int:
    import pandas as pd

    from ..executors.base import NotebookTask, resources_for
    from ..jsonl import atomic_json
    from ..notebooks import read_summary

    tasks = []
    for i, (combo, identity, run_dir) in enumerate(cells, 1):
        done_marker = run_dir / "executed.ipynb"
        if done_marker.exists() and read_summary(run_dir) and _same_cell(run_dir, identity) and not args.force:
            print(f"[{i}/{len(combos)}] {redact(combo)}: already done, skipped")
            continue
        if hasattr(executor, "check_profile"):
            executor.check_profile(identity["profile"], f"profile {args.profile}")
        done_marker.unlink(missing_ok=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_json(run_dir / CELL_FILE, identity)
        # the kernel inherits the task's environment: this combination's figures go to its own folder
        tasks.append(NotebookTask(
            key=run_dir.name, notebook=nb, root=run_dir, out_dir=run_dir, executed=run_dir / "executed.partial.ipynb",
            parameters={"profile": args.profile, **combo}, figures_root=run_dir / "figures",
            resources=resources_for(combo.get("model") or _profile_model(identity["profile"])),
            label=f"{redact(combo)}: running {nb.name}"))
    results = executor.run(tasks, on_done=lambda t: t.executed.replace(t.root / "executed.ipynb"))
    failed = [(t, results[t.key]) for t in tasks if not results[t.key].ok]
    rows = []
    for combo, run_dir in _finished_cells(out_root, nb, [(c, d) for c, _, d in cells]):
        for r in read_summary(run_dir) or [{}]:
            rows.append(redact({**combo, **r, "executed": str(run_dir / "executed.ipynb")}))
    table = pd.DataFrame(rows)
    out_root.mkdir(parents=True, exist_ok=True)
    from ..jsonl import atomic_text

    atomic_text(out_root / "sweep.csv", table.to_csv(index=False))
    atomic_text(out_root / "sweep.md", table.to_markdown(index=False) if _has_tabulate() else table.to_string(index=False))
    print(table.to_string(index=False))
    print(json.dumps({"combinations": len(combos), "table": str(out_root / "sweep.csv")}))
    for t, r in failed:
        print(f"kgrag: error: {t.name}: {r.error or f'not run: it needs {r.blocked_by}, which failed'}",
              file=sys.stderr)
    return 1 if failed else 0


def _profile_model(profile: dict[str, Any]) -> str | None:
    """The LLM a cell loads when its notebook does not sweep `model`: the profile's run.model
    (per-family choices count as well: the task holds what the largest of them needs)."""
    models = [m for m in (profile.get("models") or {}).values() if m] + [(profile.get("run") or {}).get("model")]
    specs = [m for m in models if isinstance(m, str)]
    if not specs:
        return None
    from ..executors.base import resources_for

    return max(specs, key=lambda m: (resources_for(m).num_gpus, resources_for(m).num_cpus))


def _finished_cells(out_root: Path, nb: Path, these: list[tuple[dict[str, Any], Path]]
                    ) -> list[tuple[dict[str, Any], Path]]:
    """Every finished cell of the sweep folder, for its table: this invocation's, in order, then
    those an earlier invocation with other values left there (a re-run with other values must
    not drop them from sweep.csv). Values come from each cell's parameters (cell.json); the
    profile is a column only when the folder holds cells of more than one."""
    mine = [d for _, d in these if (d / "executed.ipynb").exists()]   # failed cells are reported apart
    earlier = sorted(c.parent for c in out_root.glob(f"*/{CELL_FILE}")
                     if c.parent not in {d for _, d in these} and (c.parent / "executed.ipynb").exists())
    found = []
    for d in [*mine, *earlier]:
        try:
            stored = json.loads((d / CELL_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if stored.get("notebook") != nb.name or not isinstance(stored.get("parameters"), dict):
            continue   # another notebook's sweep in the same folder: not this table's
        found.append((dict(stored["parameters"]), d))
    several = len({json.dumps(p.get("profile"), sort_keys=True, default=str) for p, _ in found}) > 1
    out = []
    for params, d in found:
        profile = params.pop("profile", None)
        out.append(({"profile": profile, **params} if several else params, d))
    return out


def _same_cell(run_dir: Path, identity: dict[str, Any]) -> bool:
    try:
        stored = json.loads((run_dir / CELL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return stored == json.loads(json.dumps(identity, default=str))


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False

