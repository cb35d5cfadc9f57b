"""The derive steps (kgrag_lib/data/derive.py) reproduce the real files in ../shared/data byte for byte
from the files the manifest downloads, and the shipped manifest says where every file a loader reads
comes from (a pinned URL or a derive step)."""

from __future__ import annotations

import pytest

from kgrag_lib.data.derive import STEPS, run_step
from kgrag_lib.data.fetch import derived, plan
from kgrag_lib.data.manifest import load_manifest, sha256_file
from kgrag_lib.paths import data_root

ROOT = data_root()
real_data = pytest.mark.skipif(not (ROOT / "metaqa" / "kb.txt").is_file(), reason=f"real data root not found at {ROOT}")
DATASETS = load_manifest()["datasets"]


def _derived_specs():
    return [(name, spec) for name, entry in DATASETS.items() for spec in derived(entry, name, "manifest")]


def test_every_shipped_file_has_a_pinned_source_or_a_derive_step(tmp_path):
    for name, entry in DATASETS.items():
        downloads = {t.spec["path"]: d for d in plan(name, entry, tmp_path) for t in d.targets}
        for spec in entry["files"]:
            assert spec["path"] in downloads or spec.get("derive") in STEPS, (name, spec["path"])
            if "raw.githubusercontent.com" in spec.get("url", ""):
                commit = spec["url"].split("/")[5]
                assert len(commit) == 40 and spec.get("sha256"), (name, spec["path"])   # pinned, and checkable
    assert {s["derive"] for _, s in _derived_specs()} == set(STEPS)


@real_data
@pytest.mark.parametrize("name, spec", _derived_specs(), ids=lambda v: v if isinstance(v, str) else v["path"])
def test_a_derive_step_reproduces_the_shared_file(name, spec, tmp_path):
    out = run_step(spec["derive"], [ROOT / p for p in spec["from"]], tmp_path / "out", name)
    assert sha256_file(out) == spec["sha256"] == sha256_file(ROOT / spec["path"])
    assert not (tmp_path / "out").exists()   # the caller renames the `.deriving` file into place
