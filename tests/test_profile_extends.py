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
                  "placebo_kg": "2wiki-evidence-heldout", "datasets": ["2wiki"], "n": 100}
    assert base["notebooks"]["21_kg_infused_main"]["n"] is None
    assert p["notebooks"]["23_activation_rounds"]["rounds"] == [1, 2]
    grid = p["notebooks"]["11_metaqa_parameter_grid"]              # null drops the parent's per-dataset grids
    assert (grid["datasets"], grid["per_dataset"], grid["n"]) == (["metaqa-2hop"], None, 50)
    assert base["notebooks"]["11_metaqa_parameter_grid"]["per_dataset"]["metaqa-3hop"] == {"n": 30, "hops_grid": [3]}
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


def test_n_in_a_method_setting_is_the_profiles_run_n(tmp_path):
    """Issue 42: a KG spec names its sample as `n={n}`, filled from the profile's run.n when the profile is
    read, so a variant with another n (gpu-smoke's 2) needs no copy of the specs, and a run's identity still
    holds the number (as when the spec was written out)."""
    smoke, gpu = load_profile("cpu-smoke"), load_profile("gpu-smoke")
    assert smoke["methods"]["sa-rag"]["kg"] == "text:{dataset}:n=5:seed={seed}"
    assert gpu["methods"]["tcr-qf"]["kg"] == "tcr:{dataset}:n=2:seed={seed}"
    (tmp_path / "base.yaml").write_text('run: {n: 7}\nmethods:\n  sa-rag: {kg: "text:{dataset}:n={n}:seed={seed}"}\n')
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nrun: {n: 3}\n")
    assert load_profile(tmp_path / "child.yaml")["methods"]["sa-rag"]["kg"] == "text:{dataset}:n=3:seed={seed}"
    (tmp_path / "none.yaml").write_text('methods:\n  sa-rag: {kg: "text:{dataset}:n={n}:seed={seed}"}\n')
    with pytest.raises(ConfigError, match=r"none.yaml, methods.sa-rag.kg: .* uses \{n\}, the profile's run.n, "
                                          r"but run.n is None; set run.n"):
        load_profile(tmp_path / "none.yaml")
