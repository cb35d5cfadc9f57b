"""`scripts/rehearse_gpu.py --fresh-clone`, the part before the study: the committed tree unpacked
with no ../shared beside it, the clone importing its own kgrag with the per-user folder as its data
root, `kgrag data mirror` serving a data root on loopback and the clone's `data fetch --profile`
filling the per-user folder through it (cpu-smoke's small stand-in files of tests/source_mirror.py).
The study itself is what tests/test_rehearse_gpu.py and the script's real runs cover."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import source_mirror
from _script_loader import load_script
from kgrag_lib.studies.data_needs import profile_data

REPO = Path(__file__).resolve().parents[1]


def _head_files() -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: there is no HEAD to clone")
    return out.splitlines()


def test_a_fresh_clone_fetches_its_profile_through_the_mirror_into_the_per_user_folder(tmp_path):
    committed = _head_files()
    mod = load_script("rehearse_gpu")
    work = tmp_path / "work"
    co = mod.fresh_clone(work)
    clone = work / "fresh" / "kgrag"
    assert co.cwd == clone and not (clone.parent / "shared").exists()
    assert sorted(str(p.relative_to(clone)) for p in clone.rglob("*") if p.is_file() or p.is_symlink()) == \
        sorted(committed)   # HEAD's tree, nothing else
    assert "KGRAG_DATA_ROOT" not in co.env and co.env["PYTHONPATH"] == str(clone)

    manifest, _ = source_mirror.mirror_manifest(tmp_path / "m", profile_data("cpu-smoke"))
    source = tmp_path / "m" / "facts"
    proc, url = mod.start_mirror(source, "cpu-smoke", manifest)
    try:
        secs, size, n = mod.fetch_data(co, "cpu-smoke", url, manifest)
    finally:
        mod.stop_mirror(proc)
    assert proc.returncode == 0
    root = work / "fresh" / "xdg" / "kgrag" / "data"
    fetched = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                     and not p.name.startswith(".kgrag-fetch"))   # the fetch's per-entry locks
    served = sorted(str(p.relative_to(source)) for p in source.rglob("*") if p.is_file())
    assert [p for p in fetched if not p.endswith(".sha256")] == served   # all of it; the aliases' zip: not served
    assert n == len(fetched) and size == sum((root / p).stat().st_size for p in fetched) and secs > 0

    # a second fresh clone starts again from nothing: no data left from the first
    mod.fresh_clone(work)
    assert not root.exists()
