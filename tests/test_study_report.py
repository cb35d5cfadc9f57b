"""The study report reads only files: notebook summaries (with claim rows) and run folders."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kgrag_lib.eval.summary import summarize
from kgrag_lib.report import study as ST
from kgrag_lib.errors import ConfigError
from kgrag_lib.report import publish as PUB
from kgrag_lib.runner import run_identity


def _run(folder, method, dataset, preds, golds, seconds=2.0):
    folder.mkdir(parents=True)
    rows = [{"qid": f"q{i}", "question": "?", "prediction": p, "answers": [g], "dataset": dataset, "method": method,
             "trace": {"steps": [{"triples": ["(a, b, c)"] * 30}], "issues": []}, "failed": False,
             "cost": {"seconds": seconds, "llm_requests": 3}} for i, (p, g) in enumerate(zip(preds, golds))]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "metrics.json").write_text(json.dumps(summarize(rows)), encoding="utf-8")
    config = {"run": {"method": method, "dataset": dataset, "seed": 0, "model": "m", "embedder": "e"},
              "method_config": {"hops": 3}, "qids": [r["qid"] for r in rows], "llm_identity": "scripted:m"}
    (folder / "manifest.json").write_text(json.dumps({"config": config, "git": {"commit": "abc"}}), encoding="utf-8")


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results" / "p"
    golds = ["Ann", "Bob", "Cy", "Di"]
    _run(root / "12_x" / "runs" / "metaqa-1hop" / "llm", "llm", "metaqa-1hop", ["no", "Bob", "no", "no"], golds)
    _run(root / "12_x" / "runs" / "metaqa-1hop" / "kg-rag", "kg-rag", "metaqa-1hop",
         ["It is Ann.", "Bob", "Cy", "no"], golds)
    _run(root / "13_y" / "runs" / "metaqa-1hop" / "kg-rag", "kg-rag", "metaqa-1hop",    # the same run again
         ["It is Ann.", "Bob", "Cy", "no"], golds)
    (root / "12_x" / "summary.json").write_text(json.dumps([
        {"dataset": "metaqa-1hop", "method": "kg-rag", "hit1_mean": 75.0},
        {"claim": "exp2.ours_over_llm_1hop", "table": "Figure 5", "dataset": "metaqa-1hop", "statement": "kg-rag > llm",
         "metric": "hit1", "n_pairs": 4, "ours_a": 75.0, "ours_b": 25.0, "diff": 50.0, "ci95": [0.0, 100.0],
         "p_value": 0.5, "verdict": "not separable at this n"},
        {"claim": "exp2.ours_over_llm_1hop", "table": "Figure 5", "dataset": "metaqa-1hop", "statement": "kg-rag > llm",
         "metric": "hit1_exact", "n_pairs": 4, "verdict": "not separable at this n"}]), encoding="utf-8")
    (root / "13_y" / "summary.json").write_text(json.dumps([{"method": "kg-rag", "correct": 3},
                                                            {"configuration": "x", "p_value": 0.0497}]),
                                                encoding="utf-8")
    (root / "90_report").mkdir()
    (root / "90_report" / "summary.json").write_text(json.dumps([{"table": "study"}]), encoding="utf-8")
    return root


def test_collect_reads_summaries_claims_and_runs(results):
    res = ST.collect(results)
    assert list(res.summaries) == ["12_x", "13_y"]                      # the report's own folder is left out
    assert len(res.runs) == 3 and len(ST.unique_runs(res.runs)) == 2   # 13_y repeats 12_x's kg-rag run
    assert list(res.claims["claim"]) == ["exp2.ours_over_llm_1hop"] * 2
    table = ST.cross_method_table(ST.unique_runs(res.runs)).set_index("method")
    assert table.loc["kg-rag", "hit1"] == 75.0 and table.loc["llm", "hit1"] == 25.0
    assert table.loc["kg-rag", "llm_requests_per_q"] == 3
    cost = ST.cost_by_notebook(ST.unique_runs(res.runs))
    assert cost.loc["12_x", "answering wall hours"] == pytest.approx(round(16 / 3600, 2))


def test_collect_finds_grids_one_level_down(results):
    """Notebook 27 runs its base and +DPO grids in runs-base/ and runs-dpo/, notebook 21 its
    upper-bound KG in upper-bound/: their runs are collected (and published) too, once each."""
    _run(results / "27_z" / "runs-dpo" / "runs" / "metaqa-1hop" / "kg-rag", "kg-rag", "metaqa-1hop",
         ["no", "no", "Cy", "no"], ["Ann", "Bob", "Cy", "Di"])
    (results / "27_z" / "summary.json").write_text("[]", encoding="utf-8")
    res = ST.collect(results)
    folders = [r["folder"] for r in res.runs]
    assert len(res.runs) == 4 and len(set(folders)) == 4
    nested = [r for r in res.runs if "runs-dpo" in r["folder"]]
    assert len(nested) == 1 and nested[0]["notebook"] == "27_z" and nested[0]["hit1"] == 25.0


def test_collect_finds_a_single_run_notebook(results):
    """Notebook 00 keeps its one run in run/: it counts in the tables and the cost lines too."""
    _run(results / "00_q" / "run", "llm-kg", "metaqa-1hop", ["Ann", "no", "no", "no"], ["Ann", "Bob", "Cy", "Di"],
         seconds=9.0)
    (results / "00_q" / "summary.json").write_text("[]", encoding="utf-8")
    res = ST.collect(results)
    single = [r for r in res.runs if r["notebook"] == "00_q"]
    assert len(single) == 1 and single[0]["method"] == "llm-kg" and single[0]["hit1"] == 25.0
    cost = ST.cost_by_notebook(ST.unique_runs(res.runs))
    assert cost.loc["00_q", "answering wall hours"] == pytest.approx(round(36 / 3600, 2))


def test_report_and_publish(results, tmp_path):
    res = ST.collect(results)
    md, html = ST.write_report(res, results, "p", extra="What the run showed.")
    text = md.read_text()
    for heading in ("## The papers' claims, tested", "## Every distinct run", "## What each notebook",
                    "### 12_x", "## Deviations from the papers"):
        assert heading in text
    assert "What the run showed." in text and "Hit@1 exact, §4.2.1 read literally" in text
    assert re.search(r"\| 0\.5000 +\| not separable at this n +\|", text)   # p with four decimals, not one
    assert re.search(r"\| x +\| 0\.0497 +\|", text)                           # in a notebook's own table too
    assert [ST.format_p(v) for v in (0.0500259, 0.0497, 0.00004, None)] == ["0.0500", "0.0497", "<0.0001", None]
    assert "KG-Infused RAG: DPO (§3.7) on CPU" in text and "<table>" in html.read_text()
    from kgrag_lib.llm.cache import LLMCache
    from kgrag_lib.llm.fake import ScriptedLLM

    cache = LLMCache(tmp_path / "llm.sqlite")
    ScriptedLLM(["x"], identity="scripted:m", cache=cache).generate([{"role": "user", "content": "q"}])
    ScriptedLLM(["y"], identity="scripted:other", cache=cache).generate([{"role": "user", "content": "q"}])
    cache.close()
    dest = PUB.publish(res, tmp_path / "published", llm_cache=tmp_path / "llm.sqlite")
    import gzip
    exported = [json.loads(l) for l in gzip.open(dest / "llm-cache" / "part-0001.jsonl.gz", "rt").read().splitlines()]
    assert [r["identity"] for r in exported] == ["scripted:m"]       # only the runs' model
    PUB.publish(res, tmp_path / "published", llm_cache=tmp_path / "llm.sqlite")   # again: no new answers, no new part
    assert sorted(p.name for p in (dest / "llm-cache").iterdir()) == ["part-0001.jsonl.gz"]
    q = [json.loads(l) for l in (dest / "12_x/runs/metaqa-1hop/kg-rag/questions.jsonl").read_text().splitlines()]
    assert q[0]["hit1"] == 1.0 and q[0]["hit1_exact"] == 0.0 and "trace" not in q[0] and q[0]["cost"]["seconds"] == 2.0
    assert (dest / "REPORT.md").exists() and (dest / "12_x" / "summary.json").exists()
    man = json.loads((dest / "12_x/runs/metaqa-1hop/kg-rag/manifest.json").read_text())
    assert run_identity(man["config"])["run"]["method"] == "kg-rag"


def test_compare_runs_pairs_two_models_and_weighs_time(results):
    out = ST.compare_runs(results / "12_x/runs/metaqa-1hop/kg-rag", results / "12_x/runs/metaqa-1hop/llm", "hit1")
    # kg-rag 3 of 4 (hit1 counts "It is Ann."), llm 1 of 4; 2 s per question each
    assert (out["n"], out["a"], out["b"], out["diff"]) == (4, 75.0, 25.0, 50.0)
    assert out["test"] == "mcnemar (exact)" and out["seconds_per_q_a"] == 2.0
    assert out["correct_per_cpu_hour_a"] == 1350.0 and out["correct_per_cpu_hour_b"] == 450.0
    avg = ST.compare_runs(results / "12_x/runs/metaqa-1hop/kg-rag", results / "12_x/runs/metaqa-1hop/llm", "avg")
    assert avg["metric"] == "avg" and avg["test"] == "sign-flip permutation"


def test_published_reference_runs_are_committable(tmp_path):
    """What `publish` writes under results/reference/ is meant for git: a `runs/` folder there
    must not fall under the repository's ignore rules (they ignore `runs/` everywhere else)."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("needs a git checkout of the repository")
    probes = ["results/reference/12_x/runs/metaqa-1hop/kg-rag/n100_seed0/questions.jsonl",
              "results/reference/21_x/upper-bound/runs/2wiki/n100_seed0/kg-infused/metrics.json",
              "results/reference/27_x/runs-dpo/runs/2wiki/n20_seed0/kg-infused/manifest.json",
              "results/reference/00_x/run/questions.jsonl"]
    from kgrag_lib.config import available_profiles
    from kgrag_lib.studies.profiles import load_profile

    for name in available_profiles():   # every shipped profile that publishes (cpu-reference-1.5b, ...)
        dest = ((load_profile(name).get("notebooks") or {}).get("90_report") or {}).get("publish_dir")
        if dest:
            probes.append(f"{dest}/21_x/upper-bound/runs/2wiki/n30_seed0/kg-infused/questions.jsonl")
    out = subprocess.run(["git", "check-ignore", "--no-index", *probes], cwd=root, capture_output=True, text=True)
    assert out.stdout.split() == [], f"ignored by .gitignore: {out.stdout.split()}"
    elsewhere = subprocess.run(["git", "check-ignore", "--no-index", "runs/x/questions.jsonl",
                                "results/cpu-smoke/12_x/runs/a/questions.jsonl"], cwd=root, capture_output=True, text=True)
    assert elsewhere.stdout.split() == ["runs/x/questions.jsonl", "results/cpu-smoke/12_x/runs/a/questions.jsonl"]
    committed = root / "results/reference"
    if committed.is_dir():   # every run the committed report counts has its per-question results beside it
        for metrics in committed.rglob("metrics.json"):
            assert (metrics.parent / "questions.jsonl").is_file() and (metrics.parent / "manifest.json").is_file()
        assert any(committed.glob("12_*/runs/*/*/*/questions.jsonl")), "no committed MetaQA run of the reference"


def test_publishing_one_notebook_keeps_the_claims_published_before(results, tmp_path):
    """A reference run finished notebook by notebook on a machine that holds only the last one:
    the published REPORT still covers every notebook published there, not only this machine's."""
    dest = tmp_path / "published"
    from kgrag_lib.llm.cache import LLMCache

    LLMCache(tmp_path / "llm.sqlite").close()   # this test's own (empty) answer cache, never the machine's
    PUB.publish(ST.collect(results), dest, llm_cache=tmp_path / "llm.sqlite", profile="p")   # everything, from a full machine
    later = tmp_path / "later" / "p"                                       # another machine: only 13_y
    (later / "13_y").mkdir(parents=True)
    shutil.copytree(results / "13_y", later / "13_y", dirs_exist_ok=True)
    res = ST.collect(later)
    ST.write_report(res, later, "p")
    assert "exp2.ours_over_llm_1hop" not in (later / "REPORT.md").read_text()   # the local report lacks 12_x
    assert PUB.published_elsewhere(res, dest) == ["12_x"]
    PUB.publish(res, dest, llm_cache=tmp_path / "llm.sqlite", profile="p", findings="## Findings\n\nKept.")
    text = (dest / "REPORT.md").read_text()
    assert "exp2.ours_over_llm_1hop" in text and "Kept." in text and "### 12_x" in text and "### 13_y" in text
    assert PUB.published_elsewhere(ST.collect(dest), dest) == []


def test_a_notebook_published_again_replaces_its_earlier_runs(results, tmp_path, capsys):
    """A notebook re-run at another n publishes new run folders: the earlier ones (which the report
    would count beside the new) go, and so do the folders they leave empty; other notebooks' stay."""
    from kgrag_lib.llm.cache import LLMCache

    LLMCache(tmp_path / "llm.sqlite").close()
    dest = PUB.publish(ST.collect(results), tmp_path / "published", llm_cache=tmp_path / "llm.sqlite")
    later = tmp_path / "later" / "p"                     # 12_x again, its kg-rag run now in another folder
    shutil.copytree(results / "12_x", later / "12_x")
    shutil.rmtree(later / "12_x/runs/metaqa-1hop/llm")
    (later / "12_x/runs/metaqa-1hop/kg-rag").rename(later / "12_x/runs/metaqa-1hop-n4")
    res = ST.collect(later)
    assert PUB.stale_runs(res, dest) == [dest / "12_x/runs/metaqa-1hop/kg-rag", dest / "12_x/runs/metaqa-1hop/llm"]
    (dest / "FINDINGS.template.md").write_text("x ran {{ cost('12').runs }} runs\n", encoding="utf-8")
    assert PUB.read_findings(dest) == "x ran 2 runs"
    # notebook 90's order: the results first, so the findings render from the new runs only
    PUB.publish_results(res, dest, llm_cache=tmp_path / "llm.sqlite")
    assert PUB.read_findings(dest) == "x ran 1 runs"
    PUB.publish_report(res, dest, profile="p")
    assert "x ran 1 runs" in (dest / "REPORT.md").read_text()
    assert not (dest / "12_x/runs/metaqa-1hop").exists() and "publish: removed 12_x" in capsys.readouterr().out
    runs = ST.collect(dest).runs
    assert sorted(Path(r["folder"]).relative_to(dest).as_posix() for r in runs) == [
        "12_x/runs/metaqa-1hop-n4", "13_y/runs/metaqa-1hop/kg-rag"]
    assert PUB.stale_runs(ST.collect(dest), dest) == []


def test_rebuild_makes_a_published_report_again_from_what_the_folder_holds(results, tmp_path, capsys):
    from kgrag_lib.llm.cache import LLMCache

    LLMCache(tmp_path / "llm.sqlite").close()
    dest = PUB.publish(ST.collect(results), tmp_path / "published", llm_cache=tmp_path / "llm.sqlite", profile="p")
    (dest / "FINDINGS.template.md").write_text("x holds {{ cost('12').runs }} runs\n", encoding="utf-8")
    (dest / "REPORT.md").write_text("# kgrag study report (p)\nstale", encoding="utf-8")
    assert PUB.main([str(dest), "--profile", "p"]) == 0
    text = (dest / "REPORT.md").read_text()
    assert text.startswith("# kgrag study report (p)") and "x holds 2 runs" in text and "### 13_y" in text
    assert (dest / "FINDINGS.md").read_text().strip() == "x holds 2 runs"
    assert PUB.main([str(tmp_path), "--profile", "p"]) == 2
    assert "no REPORT.md, so not a published results folder" in capsys.readouterr().err


def _published(results, tmp_path):
    from kgrag_lib.llm.cache import LLMCache

    LLMCache(tmp_path / "llm.sqlite").close()
    ST.write_report(ST.collect(results), results, "p")
    return PUB.publish(ST.collect(results), tmp_path / "scratch", llm_cache=tmp_path / "llm.sqlite", profile="p")


def test_rebuilding_a_folder_outside_the_checkout_never_rewrites_the_checkout_readme(results, tmp_path, capsys):
    """Issue 59: publish on a scratch copy with edited numbers rewrote the checkout's README findings."""
    from kgrag_lib.report import findings as F

    dest = _published(results, tmp_path)
    (dest / F.README_TEMPLATE_FILE).write_text("highest F1 `nor` 99.9\n", encoding="utf-8")
    readme = F.CHECKOUT / "README.md"
    before = readme.read_bytes()
    assert not F.in_checkout(dest) and F.in_checkout(F.CHECKOUT / "results" / "reference")
    assert F.update_readme(dest) is None
    assert PUB.main([str(dest), "--profile", "p"]) == 0
    assert readme.read_bytes() == before
    assert f"README.md left as it is: {dest} lies outside this checkout" in capsys.readouterr().out


@pytest.mark.parametrize("damage, says", [
    (lambda text: "".join(text.splitlines(True)[:2]), "2 question rows, but its run answered 4"),
    (lambda text: text + text.splitlines(True)[0], "5 question rows, but its run answered 4"),
    (lambda text: text[:-9], r"questions.jsonl:4: not a JSON line"),
    (lambda text: text.replace('"q1"', '"q9"'), r"question ids are not its manifest.json's sample \(missing q1; "
                                                r"not in the sample or twice: q9\)"),
])
def test_a_damaged_questions_file_is_refused_naming_it(results, tmp_path, capsys, damage, says):
    """Issue 59: a questions.jsonl cut in half was published (exit 0) and the findings changed from
    "12 of 30" to "4 of 15". It must hold one row per question of its manifest's sample."""
    dest = _published(results, tmp_path)
    qfile = dest / "12_x" / "runs" / "metaqa-1hop" / "llm" / "questions.jsonl"
    qfile.write_text(damage(qfile.read_text(encoding="utf-8")), encoding="utf-8")
    report = (dest / "REPORT.md").read_bytes()
    assert PUB.main([str(dest), "--profile", "p"]) == 2
    err = capsys.readouterr().err
    assert str(qfile) in err and re.search(says, err) and "publish the run again" in err
    assert (dest / "REPORT.md").read_bytes() == report   # nothing rebuilt from the damaged folder


def test_rebuild_refuses_a_profile_it_does_not_know_or_that_the_report_does_not_name(results, tmp_path, capsys):
    """Issue 59: `--profile bogus-profile` was accepted and retitled REPORT."""
    dest = _published(results, tmp_path)
    assert PUB.main([str(dest), "--profile", "bogus-profile"]) == 2
    assert "--profile 'bogus-profile': " in capsys.readouterr().err and \
        (dest / "REPORT.md").read_text().startswith("# kgrag study report (p)")
    (dest / "REPORT.md").write_text("an old report without its head\n", encoding="utf-8")
    assert PUB.main([str(dest), "--profile", "bogus-profile"]) == 2
    assert "not a profile kgrag knows; expected one of" in capsys.readouterr().err
    assert PUB.main([str(dest), "--profile", "cpu-smoke"]) == 0   # a known profile where the report names none


def test_rebuild_refuses_a_summary_of_non_objects_and_a_missing_sibling_in_one_line(results, tmp_path, capsys):
    """Issue 59: a summary.json holding a list of numbers, or findings quoting a sibling folder that is
    not there, ended in a traceback."""
    dest = _published(results, tmp_path)
    good = (dest / "12_x" / "summary.json").read_text(encoding="utf-8")
    (dest / "12_x" / "summary.json").write_text("[1, 2]", encoding="utf-8")
    assert PUB.main([str(dest), "--profile", "p"]) == 2
    assert "12_x/summary.json: row 0 is int '1'; expected a list of JSON objects" in capsys.readouterr().err
    (dest / "12_x" / "summary.json").write_text(good, encoding="utf-8")
    (dest / "FINDINGS.template.md").write_text("big holds {{ sibling('big').cost('12').runs }} runs\n", encoding="utf-8")
    assert PUB.main([str(dest), "--profile", "p"]) == 2
    err = capsys.readouterr().err
    assert f"error: {dest.parent / 'big'}: No such file or directory" in err and "Traceback" not in err


def test_publishing_a_folder_rebuilds_the_folders_whose_findings_quote_it(results, tmp_path):
    from kgrag_lib.llm.cache import LLMCache

    LLMCache(tmp_path / "llm.sqlite").close()
    ST.write_report(ST.collect(results), results, "p")   # the study's own REPORT, which publishing copies
    pub = tmp_path / "published"
    small = PUB.publish(ST.collect(results), pub / "small", llm_cache=tmp_path / "llm.sqlite", profile="p")
    big = PUB.publish(ST.collect(results), pub / "big", llm_cache=tmp_path / "llm.sqlite", profile="p-big")
    (small / "FINDINGS.template.md").write_text("big holds {{ sibling('big').cost('12').runs }} runs\n", encoding="utf-8")
    (small / "FINDINGS.md").write_text("stale\n", encoding="utf-8")
    (pub / "other").mkdir()   # a folder that quotes nothing is left alone
    assert PUB.quoting_folders(big) == [small]
    assert PUB.rebuild_quoting(big) == [small]
    assert (small / "FINDINGS.md").read_text().strip() == "big holds 2 runs"
    assert (small / "REPORT.md").read_text().startswith("# kgrag study report (p)\n")
    assert PUB.rebuild_quoting(small) == []
    (small / "REPORT.md").write_text("not a report\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"REPORT.md: its first line should read"):
        PUB.rebuild_quoting(big)


@pytest.mark.parametrize("given, shown", [
    ("hf:/work/ref/.cache/hf_from_gguf/1d9614638d18024d", "hf:.cache/hf_from_gguf/1d9614638d18024d"),
    ("hf:/home/me/kgrag/results/cpu-reference/27_dpo_training/dpo/model",
     "hf:results/cpu-reference/27_dpo_training/dpo/model"),
    ("/srv/models/qwen", "/srv/models/qwen"),            # no known folder: the path as given
    ("qwen2.5-coder-0.5b-q4", "qwen2.5-coder-0.5b-q4"),
    ("hf:Qwen/Qwen2.5-7B-Instruct", "hf:Qwen/Qwen2.5-7B-Instruct"),
    (None, None),
])
def test_models_named_by_a_local_path_show_the_path_from_their_checkout_folder(given, shown):
    assert ST.shown_model(given) == shown


def test_a_verdict_the_exact_sign_flip_p_moved_is_shown_under_both_p_values(results):
    """A claim re-tested after the sign-flip p became exact (`rescore --retest`) keeps its Monte Carlo
    p and verdict; REPORT says the rule's computation changed after a result was seen and shows the
    verdict under both, Holm included (the standard: a changed rule is stated with both outcomes)."""
    from kgrag_lib.report.claims import BEFORE_EXACT_FLIP

    md, _ = ST.write_report(ST.collect(results), results, "p")
    assert "The sign-flip p made exact" not in md.read_text()          # nothing re-tested: no section
    path = results / "12_x" / "summary.json"
    rows = json.loads(path.read_text())
    rows[1][BEFORE_EXACT_FLIP] = {"p_value": 0.01, "verdict": "confirmed"}
    path.write_text(json.dumps(rows))
    text = ST.write_report(ST.collect(results), results, "p")[0].read_text()
    section = text.split("### The sign-flip p made exact")[1].split("###")[0]
    assert "Comparisons re-tested: 1; verdicts moved: 1." in section
    row = next(ln for ln in section.splitlines() if "exp2.ours_over_llm_1hop" in ln)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4:] == ["0.0100", "0.0100", "confirmed", "0.5000", "0.5000", "not separable at this n"]


def test_the_cost_section_gives_the_caches_model_time_beside_the_tables_lower_bound(results):
    """An answer replayed from the LLM cache costs its run about 0 s, so the cost table is a lower bound
    (unit 1's notebook 21 counted 0.68 h after a fresh checkout replayed it); the committed cache's own
    seconds give the upper bound, each answer once."""
    import gzip

    text = ST.write_report(ST.collect(results), results, "p")[0].read_text()
    assert "The committed LLM cache" not in text                       # no parts: no line
    (results / "llm-cache").mkdir()
    with gzip.open(results / "llm-cache" / "part-0001.jsonl.gz", "wt", encoding="utf-8") as fh:
        for key, sec in (("a", 1.0), ("b", 2.0), ("c", 700.0)):
            fh.write(json.dumps({"key": key, "response": "x", "seconds": sec}) + "\n")
    assert ST.cache_model_time(results) == {"answers": 3, "hours": pytest.approx(703 / 3600), "long": 1}
    text = ST.write_report(ST.collect(results), results, "p")[0].read_text()
    assert "records 0.20 wall hours (0.39 core-hours on 2 cores) for its 3 answers" in text
    assert "and 1 answers over 600 s" in text


def test_model_hours_count_each_request_once_at_its_generation_seconds():
    """The cost table's model hours: the cache's seconds of each distinct request, in the first notebook
    (by name) whose runs made it, however often later runs replayed it; missing where no run records."""
    import pandas as pd

    runs = pd.DataFrame([
        {"notebook": "21_a", "answer_seconds_total": 3.6, "requests": ("k1", "k2", "k2")},
        {"notebook": "21_a", "answer_seconds_total": 0.0, "requests": ("k3",)},
        {"notebook": "22_b", "answer_seconds_total": 0.0, "requests": ("k1", "k4")},   # k1 replays 21's answer
        {"notebook": "23_c", "answer_seconds_total": 7.2, "requests": None},          # published before requests
    ])
    secs = {"k1": 3600.0, "k2": 1800.0, "k3": 900.0, "k4": 360.0}
    table = ST.cost_by_notebook(runs, secs)
    assert list(table[ST.MODEL_HOURS]) == [1.75, 0.1, None]
    assert list(table["answering wall hours"]) == [0.0, 0.0, 0.0]        # 3.6 s and 7.2 s round to 0.00 h
    assert ST.MODEL_HOURS not in ST.cost_by_notebook(runs)                 # no cache: the column is left out
    # an LLM-built KG's extraction (its summary row's `requests`, made before any run) joins its notebook's
    # model hours, once: k4 was 22's, k5 is new; a claim row's fields are not a KG's
    built = ST.built_requests({"22_b": [{"label": "KG statistics: 2wiki", "requests": ["k4", "k5"]},
                                        {"claim": "c", "requests": ["k9"]}, {"label": "old KG", "requests": None}]})
    assert built == {"22_b": {"k4", "k5"}}
    secs["k5"] = 720.0
    assert list(ST.cost_by_notebook(runs, secs, built)[ST.MODEL_HOURS]) == [1.75, 0.3, None]


def test_published_rows_keep_their_request_ids(results, tmp_path):
    folder = results / "12_x" / "runs" / "metaqa-1hop" / "llm"
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    for i, r in enumerate(rows):
        r["requests"] = [f"{i:016x}"]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    compact = ST.compact_rows(folder)
    assert [r["requests"] for r in compact] == [[f"{i:016x}"] for i in range(4)]
    assert ST.run_requests(folder) == tuple(f"{i:016x}" for i in range(4))
    assert ST.run_requests(results / "12_x" / "runs" / "metaqa-1hop" / "kg-rag") is None   # rows without the field


def test_a_kg_rows_request_ids_price_it_but_are_no_table_cell(results):
    """A KG row keeps its extraction's request ids for the cost table; REPORT's notebook tables show its
    size, not hundreds of ids."""
    rows = json.loads((results / "13_y" / "summary.json").read_text())
    rows.append({"label": "KG statistics: 2wiki", "dataset": "2wiki", "nodes": 4, "requests": ["deadbeefdeadbeef"]})
    (results / "13_y" / "summary.json").write_text(json.dumps(rows), encoding="utf-8")
    res = ST.collect(results)
    assert ST.built_requests(res.summaries) == {"13_y": {"deadbeefdeadbeef"}}
    text = ST.report_markdown(res, "p")
    section = text.split("### 13_y")[1]
    assert "KG statistics: 2wiki" in section and "deadbeefdeadbeef" not in text
