"""docs/EXTENDING.md names the files of every extension point; each must exist, and each table it names
must be defined where it says, so the guide cannot drift from the tree (issue 42)."""

from __future__ import annotations

import re

from kgrag_lib.paths import REPO_ROOT

DOC = (REPO_ROOT / "docs" / "EXTENDING.md").read_text(encoding="utf-8")


def _paths() -> list[str]:
    found = re.findall(r"`((?:kgrag_lib|tests|notebooks|docs)/[^`\s]*)`", DOC)
    # files a recipe makes (tests/test_extending_recipes.py) do not exist in the tree
    created = set(re.findall(r"<!-- recipe: \w+ \| create (\S+) -->", DOC))
    return sorted({p.replace("<paper>", "kg_infused") for p in found
                   if "<NN>" not in p and "<name>" not in p and p not in created})


def test_the_guide_names_files_that_exist():
    paths = _paths()
    assert len(paths) >= 20
    missing = [p for p in paths if not (REPO_ROOT / p).exists()]
    assert not missing, f"docs/EXTENDING.md names files that are gone: {missing}"


def test_the_tables_it_names_are_defined_where_it_says():
    where = {"DATASETS": "kgrag_lib/data/registry.py", "FLAVORS": "kgrag_lib/llm/server_flavors.py",
             "LABELS": "kgrag_lib/llm/server_flavors.py", "SPEC_KINDS": "kgrag_lib/llm/__init__.py",
             "PAPERS": "kgrag_lib/methods/registry.py", "READS": "kgrag_lib/studies/order.py",
             "describe_specs": "kgrag_lib/llm/__init__.py", "_load_managed": "kgrag_lib/llm/__init__.py",
             "build_body": "kgrag_lib/llm/server_flavors.py", "detect": "kgrag_lib/llm/server_flavors.py",
             "check_profile_methods": "kgrag_lib/methods/registry.py", "ServerConfig": "kgrag_lib/config.py"}
    # issue 60: what a newcomer adding a dataset or a reusing method met outside the guide
    where.update({"DatasetSpec": "kgrag_lib/data/registry.py", "read_json_records": "kgrag_lib/data/common.py",
                  "VARIANTS": "kgrag_lib/methods/sa_rag/pipeline.py", "offline_parts": "tests/conftest.py",
                  "metaqa_root": "tests/conftest.py", "NAMES": "tests/test_sa_rag.py",
                  "jsonl_dataset": "kgrag_lib/data/registry.py", "method_specs": "kgrag_lib/methods/base.py"})
    for name, file in [*where.items(), ("METHODS", "kgrag_lib/methods/kg_infused/pipeline.py"),
                       ("METHODS", "kgrag_lib/studies/cross_method.py")]:
        assert f"`{name}`" in DOC, name
        text = (REPO_ROOT / file).read_text(encoding="utf-8")
        assert re.search(rf"^(?:def|class) {name}\b|^{name}\b\s*[:=]", text, re.M), f"{name} is not defined in {file}"


def test_every_spec_kind_is_in_the_help_and_loads_through_its_table(monkeypatch):
    """A model-spec form is one SPEC_KINDS entry: the error list, the --model help and load_llm all read it."""
    from kgrag_lib import llm
    from kgrag_lib.llm import SPEC_KINDS, SpecKind, describe_specs, load_llm, spec_help

    for prefix, kind in SPEC_KINDS.items():
        assert kind.description in describe_specs() and kind.form in spec_help(), prefix
        assert llm.is_server_spec(f"{prefix}:m") == kind.server and llm.is_managed_spec(f"{prefix}:m") == kind.managed
    seen = []
    monkeypatch.setitem(SPEC_KINDS, "toy", SpecKind(lambda spec, prefix, rest, cache, kw: seen.append(rest) or "loaded",
                                                    "toy:<name>", "toy:<name>: a test backend", False))
    assert load_llm("toy:abc", cache=False) == "loaded" and seen == ["abc"]
    assert "toy:<name>: a test backend" in describe_specs() and "toy:<name>" in spec_help()


def test_the_guide_says_how_to_regenerate_the_profile_snapshot():
    """A new method changes every profile's resolved view (`tests/profile_views.py`), so the snapshot test
    fails until the snapshot is regenerated: the guide gives the command the snapshot test's docstring gives."""
    command = "PYTHONPATH=. .venv/bin/python tests/profile_views.py"
    assert command in DOC
    assert command in (REPO_ROOT / "tests" / "test_profiles_resolved.py").read_text(encoding="utf-8")
    views = (REPO_ROOT / "tests" / "profile_views.py").read_text(encoding="utf-8")
    assert 'if __name__ == "__main__":' in views and '"resolved_profiles.json"' in views
    assert "available_methods()" in views   # every registered method is in the view: a new one changes it
