"""The one settings path: profiles checked at every level, notebook settings resolved one way,
and a notebook's run writing the same files as the same `kgrag run` command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kgrag_lib.cli import main as kgrag
from kgrag_lib.config import available_profiles
from kgrag_lib.errors import ConfigError
from kgrag_lib.experiment import resolve_run
from kgrag_lib.grid import GridRun
from kgrag_lib.llm.fake import ScriptedLLM
from kgrag_lib.studies import NOTEBOOKS, load_profile, notebook_settings, setup


# ------------------------------------------------------------------ notebook settings
def test_notebook_settings_precedence():
    prof = {"name": "p", "run": {"n": 9, "seed": 4},
            "methods": {"kg-infused": {"rounds": 3, "kg": "wikidata5m"}},
            "notebooks": {"21_kg_infused_main": {"n": 7, "datasets": ["musique"]}}}
    s = notebook_settings("21_kg_infused_main", prof, n=None, corpus="pooled")
    assert s.n == 7 and s.datasets == ["musique"]                 # profile notebook section
    assert s.seed == 4                                            # the profile's run.seed
    assert s.rounds == 3 and s.kg == "wikidata5m"                 # the profile's methods.kg-infused
    assert s.corpus == "pooled"                                   # a papermill parameter
    assert s.paper_model == "Qwen2.5-7B"                          # the dataclass default
    s = notebook_settings("22_kg_infused_ablation", {"name": "p"})
    assert s.n is None and s.seed == 0 and s.rounds == 2 and s.kg == "2wiki-evidence-heldout"  # code defaults
    assert notebook_settings("12_metaqa_baselines", {"name": "p", "run": {"seed": 3}}).seeds == [3]


def test_notebook_settings_refuse_unknown_and_ill_typed_values():
    with pytest.raises(ConfigError, match=r"notebooks.21_kg_infused_main.*'nn'.*accepted"):
        notebook_settings("21_kg_infused_main", {"name": "p", "notebooks": {"21_kg_infused_main": {"nn": 1}}})
    with pytest.raises(ConfigError, match="parameters of 21_kg_infused_main.*'rounds'"):
        notebook_settings("21_kg_infused_main", {"name": "p"}, rounds="two")
    with pytest.raises(ConfigError, match="'n'.*must be int.*True"):
        notebook_settings("21_kg_infused_main", {"name": "p"}, n=True)
    with pytest.raises(ConfigError, match="no settings for notebook"):
        notebook_settings("99_nothing", {"name": "p"})


def test_parameter_grid_column_overrides_n_and_grids_per_dataset():
    """Notebook 11 may cut one dataset's column (its own n, N and K values) and keep the others."""
    prof = {"name": "p", "run": {"n": 9}, "notebooks": {"11_metaqa_parameter_grid": {
        "datasets": ["metaqa-1hop", "metaqa-2hop"], "hops_grid": [1, 2, 3], "top_k_grid": [10, 30], "n": 50,
        "per_dataset": {"metaqa-1hop": {"n": 30, "hops_grid": [1, 3]}}}}}
    s = notebook_settings("11_metaqa_parameter_grid", prof)
    assert s.column("metaqa-1hop") == (30, [1, 3], [10, 30])
    assert s.column("metaqa-2hop") == (50, [1, 2, 3], [10, 30])
    s = notebook_settings("11_metaqa_parameter_grid", prof, per_dataset={"metaqa-2hop": {"top_k_grid": [30]}})
    assert s.column("metaqa-1hop") == (50, [1, 2, 3], [10, 30]) and s.column("metaqa-2hop") == (50, [1, 2, 3], [30])


@pytest.mark.parametrize("per_dataset, match", [
    ({"metaqa-3hop": {"n": 30}}, r"'metaqa-3hop' is not one of this notebook's datasets"),
    ({"metaqa-1hop": {"hops": [1]}}, r"per_dataset'.metaqa-1hop: expected a non-empty mapping with keys among "
                                     r"hops_grid, n, top_k_grid"),
    ({"metaqa-1hop": {}}, r"expected a non-empty mapping"),
    ({"metaqa-1hop": {"n": 0}}, r"metaqa-1hop.n: expected a positive integer, got 0"),
    ({"metaqa-1hop": {"top_k_grid": [10, "30"]}}, r"metaqa-1hop.top_k_grid: expected a non-empty list of positive"),
    ({"metaqa-1hop": {"hops_grid": []}}, r"metaqa-1hop.hops_grid: expected a non-empty list"),
])
def test_parameter_grid_refuses_ill_formed_per_dataset(per_dataset, match):
    with pytest.raises(ConfigError, match=match):
        notebook_settings("11_metaqa_parameter_grid", {"name": "p"}, datasets=["metaqa-1hop", "metaqa-2hop"],
                          per_dataset=per_dataset)


def test_a_null_entry_drops_what_a_parent_profile_set_for_that_dataset():
    """A variant profile (`extends:`) merges `per_dataset` key by key, so it removes an inherited column's
    override by setting it to null (cpu-reference-1.5b drops cpu-reference's 3-hop column so)."""
    s = notebook_settings("11_metaqa_parameter_grid", {"name": "p"}, datasets=["metaqa-1hop", "metaqa-2hop"], n=50,
                          per_dataset={"metaqa-1hop": {"n": 71}, "metaqa-3hop": None})
    assert s.per_dataset == {"metaqa-1hop": {"n": 71}} and s.column("metaqa-2hop")[0] == 50


def test_baselines_give_one_dataset_its_own_n_and_keep_the_others():
    """Notebook 12 runs one dataset at the n a claims plan gives it (issue 56, unit 6) while the others keep n."""
    prof = {"name": "p", "run": {"n": 9}, "notebooks": {"12_metaqa_baselines": {
        "n": 100, "per_dataset": {"metaqa-1hop": {"n": 269}}}}}
    s = notebook_settings("12_metaqa_baselines", prof)
    assert [s.n_of(d) for d in s.datasets] == [269, 100, 100]
    assert [notebook_settings("12_metaqa_baselines", {"name": "p", "run": {"n": 9}}).n_of(d)
            for d in ("metaqa-1hop", "metaqa-3hop")] == [9, 9]          # no entry: the notebook's n, here run.n
    for bad, match in [({"metaqa-1hop": {"hops_grid": [1]}}, r"keys among n,"),
                       ({"metaqa-9hop": {"n": 5}}, r"'metaqa-9hop' is not one of this notebook's datasets"),
                       ({"metaqa-1hop": {"n": -1}}, r"metaqa-1hop.n: expected a positive integer")]:
        with pytest.raises(ConfigError, match=match):
            notebook_settings("12_metaqa_baselines", {"name": "p"}, per_dataset=bad)


def test_every_notebook_has_settings_and_every_shipped_profile_resolves():
    from kgrag_lib.notebooks import study_notebooks

    assert sorted(p.stem for p in study_notebooks()) == sorted(NOTEBOOKS)
    for profile in available_profiles():
        prof = load_profile(profile)   # read from its file once, then resolved for every notebook
        for name in NOTEBOOKS:
            notebook_settings(name, prof)


# ------------------------------------------------------------------ profiles
@pytest.mark.parametrize("text, match", [
    ("method:\n  llm: {max_tokens: 3}\n", r"unknown top-level key\(s\) 'method'; accepted: description, embedders, extends, methods"),
    ("methods:\n  llm-kgg: {}\n", r"section methods: unknown method\(s\) 'llm-kgg'"),
    ("methods:\n  kg-rag: {hopz: 2}\n", r"methods.kg-rag.*unknown parameter 'hopz'.*accepted:.*hops"),
    ("methods:\n  kg-rag: {top_k: true}\n", r"'top_k'.*must be int, got True"),
    ("methods:\n  kg-rag: {direction: sideways}\n", r"methods.kg-rag.*direction"),
    ("models:\n  metaqaa: x\n", r"unknown study family"),
    ("notebooks:\n  12_metaqa_baseline: {}\n", r"unknown notebook\(s\) '12_metaqa_baseline'"),
    ("run:\n  n: five\n", r"section run.*'n' .*must be"),
    ("run: [1, 2]\n", r"section 'run' must be a mapping"),
    ("run:\n  n: 3\n   seed: 1\n", r"p\.yaml:3: YAML syntax error"),
])
def test_profile_mistakes_are_refused_naming_file_and_key(tmp_path, text, match):
    p = tmp_path / "p.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        load_profile(p)


def test_profile_errors_reach_the_cli_as_one_line(tmp_path, capsys):
    p = tmp_path / "p.yaml"
    p.write_text("method:\n  llm: {}\n", encoding="utf-8")
    assert kgrag(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--profile", str(p), "--out",
                  str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown top-level key(s) 'method'" in err and str(p) in err


def test_shipped_profiles_pass_the_checks():
    for name in available_profiles():
        assert load_profile(name)["name"] == name


# ------------------------------------------------------------------ model and run settings
def test_model_is_resolved_once_per_family():
    r = resolve_run("kg-rag", "metaqa-2hop", "o", "gpu-paper")
    assert r.run.model == "mistral-7b-instruct-v0.2-hf"           # models.metaqa beats run.model
    assert resolve_run("kg-infused", "2wiki", "o", "gpu-paper").run.model == "qwen2.5-7b-instruct"
    assert resolve_run("kg-rag", "metaqa-2hop", "o", "gpu-paper", model="x.gguf").run.model == "x.gguf"
    nb = setup("12_metaqa_baselines", profile="gpu-paper", out_dir="/tmp/kgrag-test-nb12")
    assert nb.model == "mistral-7b-instruct-v0.2-hf"


def test_impossible_method_dataset_pairs_are_refused_before_loading():
    with pytest.raises(ConfigError, match="'llm-kg' does not run on dataset 'hotpotqa'.*metaqa-1hop"):
        resolve_run("llm-kg", "hotpotqa", "o", "cpu-smoke")


def test_profile_data_root_reaches_notebooks_and_runs(tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "metaqa" / "1-hop" / "vanilla").mkdir(parents=True)
    (root / "metaqa" / "1-hop" / "vanilla" / "qa_test.txt").write_text(
        "who directed [The Lovers]\tLouis Malle\nwhat films did [Louis Malle] direct\tThe Lovers\n", encoding="utf-8")
    prof = {"name": "mine", "run": {"data_root": str(root), "cache_dir": str(tmp_path / "cache")}}
    nb = setup("12_metaqa_baselines", profile=prof, out_dir=tmp_path / "nb")
    assert nb.ctx.data_root == root.resolve()
    nb.ctx.llm = ScriptedLLM(lambda m, p: "Louis Malle")
    metrics = nb.run("llm", "metaqa-1hop", tmp_path / "nb" / "run", n=2, seed=0)
    assert metrics["n"] == 2
    rows = [json.loads(line) for line in (tmp_path / "nb" / "run" / "predictions.jsonl").read_text().splitlines()]
    assert {r["question"] for r in rows} == {"who directed The Lovers", "what films did Louis Malle direct"}


# ------------------------------------------------------------------ a notebook run == the same kgrag run
def _same_files(nb_dir, cli_dir):
    """Manifests equal apart from timestamps; predictions equal apart from timings."""
    def manifest(d):
        m = json.loads((d / "manifest.json").read_text())
        for k in ("started", "resumed_from"):
            m.pop(k, None)
        return m

    def rows(d):
        out = []
        for line in (d / "predictions.jsonl").read_text().splitlines():
            r = json.loads(line)
            r["cost"] = {k: v for k, v in r["cost"].items() if "seconds" not in k and k not in
                         ("llm_calls", "llm_cache_hits", "llm_prompt_tokens", "llm_completion_tokens",
                          "llm_cached_prompt_tokens", "llm_cached_completion_tokens")}
            out.append(r)
        return out

    assert manifest(nb_dir) == manifest(cli_dir)
    assert rows(nb_dir) == rows(cli_dir)


def test_metaqa_notebook_run_equals_kgrag_run_with_the_same_seed(tmp_path, offline_parts):
    """Notebook 12 runs `llm` per seed on one shared context; seed 1 must seed the sample AND the
    LLM calls exactly as `kgrag run --seed 1` does (the request ids hold the sampling seed)."""
    out = tmp_path / "run"
    nb = setup("12_metaqa_baselines", profile="cpu-smoke", out_dir=tmp_path / "nb")
    nb.run("llm", "metaqa-1hop", out, n=2, seed=0)         # the shared context has served seed 0 first
    shutil.rmtree(out)
    nb.run("llm", "metaqa-1hop", out, n=2, seed=1)
    nb_rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    shutil.move(out, tmp_path / "from-notebook")
    assert kgrag(["run", "--method", "llm", "--dataset", "metaqa-1hop", "--n", "2", "--seed", "1",
                  "--out", str(out), "--no-progress"]) == 0
    _same_files(tmp_path / "from-notebook", out)
    seed0 = resolve_run("llm", "metaqa-1hop", out, "cpu-smoke", seed=0)
    assert seed0.run.seed == 0 and all(r["requests"] for r in nb_rows)


def test_kg_infused_grid_run_equals_kgrag_run(tmp_path, offline_parts):
    """A cell of notebook 21's grid and `kgrag run` of the same method, dataset, n and seed."""
    nb = setup("21_kg_infused_main", profile="cpu-smoke", out_dir=tmp_path / "nb")
    report = nb.grid([GridRun.of("vanilla-rag")], ["2wiki"], progress=False, kg=nb.settings.kg,
                     corpus=nb.settings.corpus)
    cell = report.cells[0]
    assert cell.metrics["n"] == 2 and report.requests == 4   # note + answer per question
    shutil.move(cell.out, tmp_path / "from-notebook")
    assert kgrag(["run", "--method", "vanilla-rag", "--dataset", "2wiki", "--n", "2", "--seed", "0",
                  "--out", str(cell.out), "--no-progress"]) == 0
    _same_files(tmp_path / "from-notebook", cell.out)


def test_a_profile_file_of_the_users_gets_its_own_results_and_figures_folders(tmp_path, monkeypatch):
    """`kgrag study --profile some/dir/cpu-smoke.yaml` once wrote into results/cpu-smoke and
    figures/cpu-smoke, over the shipped profile's; now a user's file is labelled by its stem and
    content hash, and the notebooks get a profile of that name (their figures folder)."""
    import kgrag_lib.notebooks as notebooks
    from kgrag_lib.config import PROFILE_DIR, profile_label

    mine = tmp_path / "some" / "dir" / "cpu-smoke.yaml"
    mine.parent.mkdir(parents=True)
    mine.write_text((PROFILE_DIR / "cpu-smoke.yaml").read_text(encoding="utf-8") + "\n# mine\n", encoding="utf-8")
    label = profile_label(mine)
    assert label.startswith("cpu-smoke-") and len(label) == len("cpu-smoke-") + 8
    assert profile_label("cpu-smoke") == profile_label(PROFILE_DIR / "cpu-smoke.yaml") == "cpu-smoke"
    with pytest.raises(ConfigError, match="not found"):
        profile_label(tmp_path / "missing.yaml")

    seen = []
    monkeypatch.setattr(notebooks, "REPO_ROOT", tmp_path / "repo")
    monkeypatch.setattr(notebooks, "execute", lambda nb, dest, params, progress=True, cwd=None:
                        seen.append({**params, "cwd": cwd}))
    report = notebooks.run_study(str(mine), only=["00"], progress=False)
    assert report["out_root"] == (tmp_path / "repo" / "results" / label).resolve()
    assert seen[0]["profile"] == "../profile.yaml" and seen[0]["out_dir"] == "../00_quickstart"   # relative to
    assert seen[0]["cwd"] == report["out_root"] / "executed"             # the kernel's folder, the executed copy's
    assert load_profile(seen[0]["cwd"] / seen[0]["profile"])["name"] == label          # so figures/<label>
    notebooks.run_study("cpu-smoke", only=["00"], progress=False)
    assert seen[1]["profile"] == "cpu-smoke"                          # the shipped profile as it is


def test_a_failing_notebook_blocks_only_the_notebooks_that_need_it_under_the_local_executor(tmp_path, capsys):
    """Issue 39's rehearsal: notebook 27 failed (no DPO pair) and the local study stopped there,
    leaving 28-90 unrun. Now a failure is reported and only the notebooks that need it are skipped."""
    from kgrag_lib.executors.base import NotebookTask
    from kgrag_lib.executors.execute import NotebookError
    from kgrag_lib.executors.local import LocalExecutor

    ran = []

    def run(notebook, executed, params, progress=True, cwd=None):
        ran.append(Path(notebook).stem)
        if Path(notebook).stem == "26_dpo_data":
            raise NotebookError("26_dpo_data.ipynb failed in cell 6: DataFormatError: no pair")

    def task(key, after=()):
        return NotebookTask(key=key, notebook=tmp_path / f"{key}.ipynb", root=tmp_path, out_dir=tmp_path / key,
                            executed=tmp_path / "executed" / f"{key}.ipynb", parameters={},
                            figures_root=tmp_path / "figures", after=after)

    tasks = [task("26_dpo_data"), task("27_dpo_training", ("26_dpo_data",)), task("28_plugins")]
    results = LocalExecutor(progress=False, run=run).run(tasks)
    assert ran == ["26_dpo_data", "28_plugins"]
    assert "no pair" in results["26_dpo_data"].error
    assert results["27_dpo_training"].blocked_by == "26_dpo_data" and results["28_plugins"].ok
    assert "27_dpo_training: not run, it needs 26_dpo_data" in capsys.readouterr().out


def test_notebook_12_runs_a_dataset_at_its_own_n_with_the_scripted_model(tmp_path, offline_parts, metaqa_root,
                                                                        monkeypatch):
    """Notebook 12's own cells, in this process: a `per_dataset` n reaches that dataset's runs, their folders
    and the summary rows; the other dataset keeps `n` (issue 56, unit 6)."""
    import IPython.display
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    monkeypatch.setenv("KGRAG_FIGURES_DIR", str(tmp_path / "figures"))
    two = metaqa_root / "metaqa" / "2-hop" / "vanilla"
    two.mkdir(parents=True)
    shutil.copy(metaqa_root / "metaqa" / "1-hop" / "vanilla" / "qa_test.txt", two / "qa_test.txt")
    out = tmp_path / "out"
    cells = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "12_metaqa_baselines.ipynb")
                       .read_text(encoding="utf-8"))["cells"]
    ns: dict = {}
    for c in cells:
        if c["cell_type"] == "code":
            exec("".join(c["source"]), ns)
            if "parameters" in c["metadata"].get("tags", []):
                ns.update(out_dir=str(out), datasets=["metaqa-1hop", "metaqa-2hop"], methods=["llm", "llm-kg"], n=2,
                          per_dataset={"metaqa-1hop": {"n": 3}})
    for d, n in (("metaqa-1hop", 3), ("metaqa-2hop", 2)):
        for m in ("llm", "llm-kg"):
            metrics = json.loads((out / "runs" / d / m / f"n{n}_seed0" / "metrics.json").read_text(encoding="utf-8"))
            assert metrics["n"] == n, (d, m)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert {(r["dataset"], r["n"]) for r in summary if r.get("experiment") == "exp2"} == {("metaqa-1hop", 3),
                                                                                          ("metaqa-2hop", 2)}
