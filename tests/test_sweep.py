"""`kgrag sweep`: one papermill run per combination, rows gathered, finished runs skipped."""

from __future__ import annotations

import argparse

import nbformat
import pandas as pd
from nbformat.v4 import new_code_cell, new_notebook

from kgrag_lib.commands import sweep


def _tiny_notebook(path):
    nb = new_notebook()
    params = new_code_cell('profile = "cpu-smoke"\nx = 1\ny = 2\nout_dir = "out"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, new_code_cell(
        "from kgrag_lib.notebooks import write_summary\n"
        "write_summary(out_dir, [{'product': x * y, 'profile': profile}])")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_sweep_runs_grid_and_collects_rows(tmp_path, capsys):
    nb = tmp_path / "tiny.ipynb"
    _tiny_notebook(nb)
    args = argparse.Namespace(notebook=str(nb), param=[["x", "2", "3"], ["y", "10"]], profile="cpu-smoke",
                              out=str(tmp_path / "sweep"), force=False)
    assert sweep.handle(args) == 0
    table = pd.read_csv(tmp_path / "sweep" / "sweep.csv")
    assert sorted(table["product"]) == [20, 30]
    assert set(table["x"]) == {2, 3}
    assert all((tmp_path / "sweep" / f"x={x}_y=10" / "executed.ipynb").exists() for x in (2, 3))
    capsys.readouterr()
    assert sweep.handle(args) == 0  # second time: nothing reruns
    assert capsys.readouterr().out.count("already done, skipped") == 2
