"""A profile that extends another: the variant states only what differs (cpu-reference-1.5b)."""

from __future__ import annotations

import pytest

from kgrag_lib.config import profile_label, read_profile
from kgrag_lib.errors import ConfigError
from kgrag_lib.studies.profiles import load_profile


def test_shipped_variant_merges_over_its_parent():
    base, p = load_profile("cpu-reference"), load_profile("cpu-reference-1.5b")
    assert p["name"] == "cpu-reference-1.5b" and profile_label("cpu-reference-1.5b") == "cpu-reference-1.5b"
    assert p["run"] == {**base["run"], "model": "qwen2.5-coder-1.5b-q4", "n": 30}
    assert set(p["models"].values()) == {"qwen2.5-coder-1.5b-q4"}
    assert p["methods"] == base["methods"]                       # untouched sections come whole
    nb = p["notebooks"]["21_kg_infused_main"]                   # mappings merge key by key ...
    # (cpu-reference's n: null, the run's n, is replaced by the child's n: 100; issue 41)
    assert nb == {"upper_bound_kg": "2wiki-evidence-oracle", "kg": "2wiki-evidence-full",
                  "placebo_kg": "2wiki-evidence-heldout", "datasets": ["2wiki"], "n": 237}   # the frozen plan's n (issue 56)
    assert base["notebooks"]["21_kg_infused_main"]["n"] is None
    assert p["notebooks"]["23_activation_rounds"]["rounds"] == [1, 2]
    grid = p["notebooks"]["11_metaqa_parameter_grid"]   # each entry merges over the parent's
    assert (grid["datasets"], grid["n"]) == (["metaqa-1hop", "metaqa-2hop", "metaqa-3hop"], 50)
    assert grid["per_dataset"] == {"metaqa-1hop": {"n": 71, "hops_grid": [1, 3]},
                                   "metaqa-3hop": {"n": 86, "hops_grid": [3]}}   # units 2 and 5 (issue 56)
    assert base["notebooks"]["11_metaqa_parameter_grid"]["per_dataset"]["metaqa-3hop"] == {"n": 30, "hops_grid": [3]}
    assert p["notebooks"]["41_tcr_qf_main"] == {**base["notebooks"]["41_tcr_qf_main"], "n": 129}   # unit 3 (issue 56)
    assert p["notebooks"]["12_metaqa_baselines"]["per_dataset"]["metaqa-1hop"]["n"] == 269   # unit 6 (issue 56)
    assert p["notebooks"]["90_report"]["publish_dir"] == "results/reference-1.5b"
    assert "extends" not in p


def test_lists_replace_and_relative_paths_read_beside_the_file(tmp_path):
    (tmp_path / "base.yaml").write_text("run: {n: 5, seed: 1}\nnotebooks:\n  23_activation_rounds: {rounds: [1, 2, 3]}\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nrun: {n: 7}\nnotebooks:\n  23_activation_rounds: {rounds: [4]}\n")
    p = load_profile(tmp_path / "child.yaml")
    assert p["run"] == {"n": 7, "seed": 1} and p["notebooks"]["23_activation_rounds"]["rounds"] == [4]
    assert p["name"] == "child"


def test_a_mistake_in_the_parent_is_refused_through_the_child(tmp_path):
    (tmp_path / "base.yaml").write_text("methods:\n  kg-infused: {roundz: 2}\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\n")
    with pytest.raises(ConfigError, match="roundz"):
        load_profile(tmp_path / "child.yaml")


@pytest.mark.parametrize("text, match", [
    ("extends: [cpu-reference]\n", "expected a profile name or YAML path"),
    ("extends: nowhere.yaml\n", "not found"),
    ("extends: loop.yaml\n", "extends itself"),
])
def test_bad_extends_is_refused(tmp_path, text, match):
    (tmp_path / "loop.yaml").write_text(text)
    with pytest.raises(ConfigError, match=match):
        read_profile(tmp_path / "loop.yaml")


def test_a_misspelt_key_in_a_parent_profile_is_reported_against_the_parent(tmp_path):
    """Issue 40: the error named the child file, which does not hold the key."""
    from kgrag_lib.errors import ConfigError
    from kgrag_lib.studies import load_profile

    (tmp_path / "parent.yaml").write_text("extends: cpu-smoke\nmethods:\n  llm: {max_tokenz: 8}\n", encoding="utf-8")
    (tmp_path / "child.yaml").write_text("extends: parent.yaml\nrun: {n: 2}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"parent\.yaml, methods\.llm: unknown parameter 'max_tokenz'"):
        load_profile(str(tmp_path / "child.yaml"))
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="extends itself"):
        load_profile(str(tmp_path / "a.yaml"))


def test_n_in_a_method_setting_is_the_runs_n(tmp_path):
    """Issue 42 wrote a KG spec's sample as `n={n}`, so a variant with another n (gpu-smoke's 2) needs no copy
    of the specs; issue 60: `{n}` is the run's n, filled per run like `{dataset}` and `{seed}` (before, it was
    the profile's run.n, so `--n 20` answered 20 questions over a KG built from another sample)."""
    from kgrag_lib.config import fill_run_n
    from kgrag_lib.experiment import resolve_run

    smoke = load_profile("cpu-smoke")
    assert smoke["methods"]["sa-rag"]["kg"] == "text:{dataset}:n={n}:seed={seed}"   # as written, until a run
    assert fill_run_n(smoke, 5, "x")["methods"]["sa-rag"]["kg"] == "text:{dataset}:n=5:seed={seed}"
    assert resolve_run("sa-rag", "musique", tmp_path, "cpu-smoke").method_config.kg == "text:{dataset}:n=5:seed={seed}"
    assert resolve_run("tcr-qf", "musique", tmp_path, "gpu-smoke").method_config.kg == "tcr:{dataset}:n=2:seed={seed}"
    r = resolve_run("sa-rag", "musique", tmp_path, "cpu-smoke", n=20)
    assert r.run.n == 20 and r.method_config.kg == "text:{dataset}:n=20:seed={seed}"
    assert r.profile["methods"]["sa-rag"]["kg"] == r.profile["methods"]["ppr-rag"]["kg"] == \
        "text:{dataset}:n=20:seed={seed}"                      # the profile a run's identity records: the run's n
    (tmp_path / "base.yaml").write_text('run: {n: 7}\nmethods:\n  sa-rag: {kg: "text:{dataset}:n={n}:seed={seed}"}\n')
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nrun: {n: 3}\n")
    assert resolve_run("sa-rag", "musique", tmp_path, str(tmp_path / "child.yaml")).method_config.kg == \
        "text:{dataset}:n=3:seed={seed}"
    (tmp_path / "none.yaml").write_text('methods:\n  sa-rag: {kg: "text:{dataset}:n={n}:seed={seed}"}\n')
    load_profile(tmp_path / "none.yaml")                     # a profile without run.n is fine: a run may give --n
    assert resolve_run("sa-rag", "musique", tmp_path, str(tmp_path / "none.yaml"), n=4).method_config.kg == \
        "text:{dataset}:n=4:seed={seed}"
    with pytest.raises(ConfigError, match=r"method sa-rag .*parameter 'kg': .* uses \{n\}, the run's n, but the "
                                          r"run's n is None \(all questions\); give the run an n"):
        resolve_run("sa-rag", "musique", tmp_path, str(tmp_path / "none.yaml"))


def _musique_root(root, n_questions):
    """A MuSiQue dev200 file whose every question has its own two paragraphs (no two questions share one)."""
    import json

    rows = [{"id": f"2hop__{i}", "question": f"Where was person{i} born?", "answer": "Paris",
             "paragraphs": [{"idx": k, "title": f"Page {i}-{k}", "paragraph_text": f"person{i} fact{k} born Paris.",
                             "is_supporting": True} for k in range(2)]} for i in range(n_questions)]
    path = root / "musique" / "MIGRES_200_musique_ans.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


@pytest.mark.parametrize("n_override", [None, 6])
def test_a_runs_kg_sample_is_the_sample_it_answers(tmp_path, offline_parts, n_override):
    """Issue 60, end to end with the scripted LLM: a KG spec `n={n}` names the questions the run answers,
    at the profile's n and under an `--n` override, so every question finds its own paragraphs in the index
    (before, the override answered 6 questions over the paragraphs of the profile's 2)."""
    from kgrag_lib.data.registry import load_questions
    from kgrag_lib.experiment import run_experiment
    from kgrag_lib.jsonl import read_jsonl

    root = _musique_root(tmp_path / "data", 12)
    profile = {"name": "n-test", "run": {"n": 2, "seed": 3},
               "methods": {"naive-rag": {"kg": "text:{dataset}:n={n}:seed={seed}", "top_k": 2}}}
    out = tmp_path / "run"
    metrics = run_experiment("naive-rag", "musique", out, profile=profile, progress=False, data_root=str(root),
                             n=n_override)
    n = n_override or 2
    preds = read_jsonl(out / "predictions.jsonl").rows
    answered = [q.qid for q in load_questions("musique", root=root, n=n, seed=3)]
    assert metrics["n"] == n and sorted(p["qid"] for p in preds) == sorted(answered)
    for p in preds:
        assert p["trace"]["kg"] == f"text:musique:n={n}:seed=3"          # the KG of the very sample answered
        assert not [i for i in p["trace"]["issues"] if i.startswith("kg sample")], p["trace"]["issues"]
        own = {f"Page {p['qid'].split('__')[1]}-{k}" for k in range(2)}
        assert own & {d["title"] for d in p["trace"]["retrieval"]["documents"]}   # its own paragraphs are there
