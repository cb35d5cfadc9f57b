"""`kgrag sweep`: one papermill run per combination, rows gathered, finished runs skipped."""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat
import pandas as pd
import pytest
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
    assert all(len(list((tmp_path / "sweep").glob(f"x={x}_y=10-*/executed.ipynb"))) == 1 for x in (2, 3))
    capsys.readouterr()
    assert sweep.handle(args) == 0  # second time: nothing reruns
    assert capsys.readouterr().out.count("already done, skipped") == 2


def test_a_rerun_with_other_values_keeps_the_earlier_cells_in_the_table(tmp_path, capsys):
    """Issue 40: sweep.csv was rewritten with this invocation's cells only; the folder's table
    lists every finished cell of it."""
    nb = tmp_path / "tiny.ipynb"
    _tiny_notebook(nb)
    first = argparse.Namespace(notebook=str(nb), param=[["x", "2", "3"], ["y", "10"]], profile="cpu-smoke",
                               out=str(tmp_path / "sweep"), force=False)
    assert sweep.handle(first) == 0
    second = argparse.Namespace(**{**vars(first), "param": [["x", "4"], ["y", "10"]]})
    assert sweep.handle(second) == 0
    table = pd.read_csv(tmp_path / "sweep" / "sweep.csv")
    assert list(table["x"]) == [4, 2, 3] and sorted(table["product"]) == [20, 30, 40]
    assert len(table) == 3 and len((tmp_path / "sweep" / "sweep.md").read_text(encoding="utf-8").splitlines()) == 5


def test_study_results_md_has_one_table_per_notebook(tmp_path, monkeypatch):
    """`kgrag study` writes one section per notebook, each without the other notebooks' columns."""
    from kgrag_lib.commands import study

    report = {"profile": "cpu-smoke", "notebooks": [
        {"notebook": "11_grid.ipynb", "seconds": 1.5, "rows": [{"dataset": "metaqa-1hop", "hit1": 50.0}]},
        {"notebook": "21_main.ipynb", "seconds": 2.0, "rows": [{"dataset": "2wiki", "acc": 33.333}]},
        {"notebook": "25_case.ipynb", "seconds": 0.5, "rows": []},
    ]}
    monkeypatch.setattr("kgrag_lib.notebooks.run_study",
                        lambda profile, out, **k: {**report, "out_root": Path(out).resolve()})
    args = argparse.Namespace(profile="cpu-smoke", only=None, out=str(tmp_path))
    assert study.handle(args) == 0
    md = (tmp_path / "results.md").read_text()
    grid = md.split("## 11_grid.ipynb")[1].split("## 21_main.ipynb")[0]
    main = md.split("## 21_main.ipynb")[1].split("## 25_case.ipynb")[0]
    assert "hit1" in grid and "acc" not in grid
    assert "acc" in main and "33.33" in main and "hit1" not in main
    assert "(no result rows)" in md.split("## 25_case.ipynb")[1]
    assert "- 11_grid.ipynb: 1.5 s" in md
    assert len(pd.read_csv(tmp_path / "results.csv")) == 2


def test_sweep_with_relative_out_writes_beside_the_caller_and_keeps_figures_apart(tmp_path, monkeypatch):
    """The kernel runs in the notebook's folder: a relative --out must still mean the caller's folder."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    nb = new_notebook()
    params = new_code_cell('profile = "cpu-smoke"\nx = 1\nout_dir = "out"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, new_code_cell(
        "import os\nfrom kgrag_lib.notebooks import write_summary\n"
        "from kgrag_lib.report.figures import figures_dir\n"
        "write_summary(out_dir, [{'x2': x * 2, 'figs': str(figures_dir(profile))}])")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nb_dir / "tiny.ipynb")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    args = argparse.Namespace(notebook=str(nb_dir / "tiny.ipynb"), param=[["x", "1", "2"]], profile="cpu-smoke",
                              out="sweep", force=False)
    assert sweep.handle(args) == 0
    table = pd.read_csv(work / "sweep" / "sweep.csv")
    assert sorted(table["x2"]) == [2, 4]
    assert not (nb_dir / "sweep").exists()
    assert set(table["figs"]) == {str(next((work / "sweep").glob(f"x={x}-*")) / "figures" / "cpu-smoke") for x in (1, 2)}
    assert "KGRAG_FIGURES_DIR" not in __import__("os").environ


def test_study_results_table_has_one_table_per_kind_of_row():
    from kgrag_lib.commands.study import notebook_table

    rows = [{"label": "NoR", "dataset": "2wiki", "acc": 40.0, "rounds": None},
            {"label": "KG-Infused", "dataset": "2wiki", "acc": 50.0, "rounds": 2},
            {"label": "request counts: grid", "independent_requests": 49, "distinct_requests": 37}]
    text = notebook_table(rows)
    assert text.count("```") == 4                     # two fenced tables
    first, second = text.split("\n\n")
    assert "independent_requests" not in first and "acc" not in second and "NaN" not in text
    assert notebook_table([]) == "(no result rows)"


def test_study_results_table_leaves_out_claims_not_run_and_quotes():
    from kgrag_lib.commands.study import notebook_table

    claims = [{"claim": "c.2wiki", "dataset": "2wiki", "verdict": "not separable at this n", "diff": 3.0,
               "quote": "a long sentence from the paper " * 5},
              {"claim": "c.musique", "dataset": "musique", "verdict": "not run", "diff": None, "quote": "q"}]
    text = notebook_table(claims)
    assert "c.2wiki" in text and "c.musique" not in text and "long sentence" not in text
    assert "1 claim on datasets this notebook did not run left out" in text
    only_not_run = notebook_table(claims[1:])
    assert only_not_run == "(1 claim, none run by this notebook's datasets)"


def _args(nb, param, tmp_path, profile="cpu-smoke"):
    return argparse.Namespace(notebook=str(nb), param=param, profile=profile, out=str(tmp_path / "sweep"), force=False)


def test_another_profile_is_another_combination_even_under_the_same_name(tmp_path, capsys):
    import yaml

    from kgrag_lib.config import PROFILE_DIR

    nb = tmp_path / "tiny.ipynb"
    _tiny_notebook(nb)
    assert sweep.handle(_args(nb, [["x", "2"]], tmp_path)) == 0
    other = yaml.safe_load((PROFILE_DIR / "cpu-smoke.yaml").read_text())
    other["run"]["n"] = 5
    custom = tmp_path / "elsewhere" / "cpu-smoke.yaml"      # same file stem, other settings
    custom.parent.mkdir()
    custom.write_text(yaml.safe_dump(other))
    capsys.readouterr()
    assert sweep.handle(_args(nb, [["x", "2"]], tmp_path, profile=str(custom))) == 0
    out = capsys.readouterr().out
    assert "already done" not in out and "running" in out
    assert len(list((tmp_path / "sweep").glob("x=2-*/executed.ipynb"))) == 2
    capsys.readouterr()
    assert sweep.handle(_args(nb, [["x", "2"]], tmp_path)) == 0      # the first one is still found
    assert "already done, skipped" in capsys.readouterr().out


def test_values_sharing_a_long_prefix_or_differing_in_slashes_get_their_own_folders(tmp_path):
    nb = tmp_path / "tiny.ipynb"
    _tiny_notebook(nb)
    long = "a" * 160
    assert sweep.handle(_args(nb, [["x", f"{long}1", f"{long}2", "a/b", "a-b"]], tmp_path)) == 0
    assert len(list((tmp_path / "sweep").glob("*/executed.ipynb"))) == 4


@pytest.mark.parametrize("param,message", [
    ([["hopz", "1"]], "has no such parameter; its parameters cell sets"),
    ([["import os; os.system('touch /tmp/kgrag-injected'); x", "7"]], "must be a Python identifier"),
    ([["x", "[1, 2"]], "not a YAML value"),
    ([["x", "!!python/object/apply:os.system ['true']"]], "not a YAML value"),
    ([["out_dir", "elsewhere"]], "each combination gets its own folder"),
])
def test_bad_sweeps_are_refused_before_anything_runs(tmp_path, param, message):
    from kgrag_lib.errors import ConfigError

    nb = tmp_path / "tiny.ipynb"
    _tiny_notebook(nb)
    with pytest.raises(ConfigError, match=message):
        sweep.handle(_args(nb, param, tmp_path))
    assert not (tmp_path / "sweep").exists() and not Path("/tmp/kgrag-injected").exists()


@pytest.mark.parametrize("content, message", [
    (b"this is not a notebook", r"is not a Jupyter notebook \(.ipynb JSON with cells\): NotJSONError"),
    (b'{"prediction": "x"}', r"is not a Jupyter notebook .*ValidationError"),
    (b"\x1f\x8b\x08\x00garbage", r"is not a Jupyter notebook .*UnicodeDecodeError"),
    (b"[" * 20000 + b"]" * 20000, r"is not a Jupyter notebook|nested too deeply"),
])
def test_a_file_that_is_no_notebook_is_refused_naming_it(tmp_path, content, message):
    """Issue 40's fuzz: `kgrag sweep` of a file that is not a notebook was an internal error."""
    from kgrag_lib.errors import ConfigError

    nb = tmp_path / "notes.ipynb"
    nb.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        sweep.handle(_args(nb, [["x", "1"]], tmp_path))
    assert not (tmp_path / "sweep").exists()


def test_a_token_in_a_swept_value_is_refused_before_anything_runs_and_summaries_never_hold_one(tmp_path):
    """A swept value is written into the executed notebook (papermill's parameters), so a token in a
    server spec is refused, pointing to $KGRAG_OPENAI_API_KEY; a summary row is written redacted."""
    from kgrag_lib.errors import ConfigError
    from kgrag_lib.notebooks import read_summary, write_summary

    nb = tmp_path / "tiny.ipynb"
    _tiny_notebook(nb)
    spec = "openai:http://user:SECRET1@127.0.0.1:9/v1?api_key=SECRET2#m"
    with pytest.raises(ConfigError, match=r"-p x: .*carries a token.*KGRAG_OPENAI_API_KEY") as err:
        sweep.handle(_args(nb, [["x", spec]], tmp_path))
    assert "SECRET" not in str(err.value) and not (tmp_path / "sweep").exists()
    write_summary(tmp_path / "s", [{"model": spec}])
    assert "SECRET" not in (tmp_path / "s" / "summary.json").read_text()
    assert read_summary(tmp_path / "s") == [{"model": "openai:http://***@127.0.0.1:9/v1?api_key=***#m"}]


def test_a_parameter_given_twice_and_an_ambiguous_number_are_refused_but_nan_is_a_value(tmp_path):
    """Issue 40: `-p a 1 -p a 2` dropped a=1; `-p x 010` ran x=8; `-p x .nan` was refused as a token."""
    from kgrag_lib.errors import ConfigError

    nb = tmp_path / "tiny.ipynb"
    _tiny_notebook(nb)
    accepted = {"x": {}, "y": {}}
    with pytest.raises(ConfigError, match=r"-p x is given twice; give all its values once: -p x 1 2"):
        sweep._grid([["x", "1"], ["x", "2"]], accepted, nb)
    with pytest.raises(ConfigError, match="ambiguous number"):
        sweep._grid([["x", "010"]], accepted, nb)
    grid = sweep._grid([["x", ".nan", "'010'"]], accepted, nb)
    assert grid["x"][1] == "010" and grid["x"][0] != grid["x"][0]   # the text, and NaN


def test_a_second_sweep_into_a_folder_being_written_is_refused(tmp_path):
    """Issue 40: two sweeps of one cell into one folder ran it twice at once (no lock)."""
    from kgrag_lib.errors import KgragError
    from kgrag_lib.runner import folder_lock

    nb = tmp_path / "tiny.ipynb"
    _tiny_notebook(nb)
    out = tmp_path / "sweep"
    out.mkdir()
    args = argparse.Namespace(notebook=str(nb), param=[["x", "2"], ["y", "10"]], profile="cpu-smoke",
                              out=str(out), force=False)
    with folder_lock(out):
        with pytest.raises(KgragError, match="is being written by process"):
            sweep.handle(args)
    assert not list(out.glob("x=2*"))
    assert sweep.handle(args) == 0   # once the other is done
