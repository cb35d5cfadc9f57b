"""`pip install .` (not editable) works: the wheel carries the dataset manifest, the profiles and
the notebooks; the data root comes from $KGRAG_DATA_ROOT or --data-root, never from inside
site-packages.

The wheel is built from a copy of the sources and installed into a fresh venv; the
dependencies are borrowed from the running environment through a `.pth` line (a `.pth` file's
own `.pth` files are not processed, so the running environment's editable kgrag cannot shadow
the wheel's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from kgrag_lib.paths import REPO_ROOT

SOURCES = ("pyproject.toml", "README.md", "kgrag_lib", "notebooks")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A venv with kgrag installed from its wheel; returns (venv bin folder, a clean environment)."""
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        s = REPO_ROOT / name
        if s.is_dir():
            shutil.copytree(s, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(s, src / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KGRAG_", "VIRTUAL_ENV"))}
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                  str(tmp / "dist"), str(src)], tmp, env)
    assert built.returncode == 0, built.stderr
    wheel = next((tmp / "dist").glob("kgrag-*.whl"))
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    installed = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
                     tmp, env)
    assert installed.returncode == 0, installed.stderr
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).stdout.strip())
    (site / "zz_borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return venv / "bin", env


def test_the_wheel_carries_manifest_profiles_and_notebooks(wheel_venv, tmp_path):
    bin_dir, env = wheel_venv
    where = _run([str(bin_dir / "python"), "-c", "import kgrag_lib, kgrag_lib.paths as p; "
                  "print(kgrag_lib.__file__); print(p.IN_CHECKOUT)"], tmp_path, env)
    assert where.returncode == 0, where.stderr
    file, in_checkout = where.stdout.split()
    assert file.startswith(str(bin_dir.parent)) and in_checkout == "False"   # the wheel's copy, not the editable one

    listed = _run([str(bin_dir / "kgrag"), "run", "--list"], tmp_path, env)
    assert listed.returncode == 0 and "kg-infused" in listed.stdout, listed.stderr
    books = _run([str(bin_dir / "kgrag"), "study", "--list"], tmp_path, env)
    assert books.returncode == 0 and "00_quickstart.ipynb" in books.stdout and "90_report.ipynb" in books.stdout
    assert "site-packages" in books.stdout   # read from the package data


def test_installed_data_check_reads_the_root_it_is_given(wheel_venv, tmp_path):
    bin_dir, env = wheel_venv
    root = tmp_path / "data"
    (root / "metaqa").mkdir(parents=True)
    (root / "metaqa" / "kb.txt").write_text("The Lovers|directed_by|Louis Malle\n", encoding="utf-8")

    # no checkout, no variable: the per-user data folder that `kgrag data fetch` fills (issue 57)
    bare = _run([str(bin_dir / "kgrag"), "data", "check", "--json"], tmp_path,
                {**env, "XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert bare.returncode == 0, bare.stderr
    assert Path(json.loads(bare.stdout)["root"]) == (tmp_path / "xdg" / "kgrag" / "data").resolve()

    for how, run_env, argv in (("env", {**env, "KGRAG_DATA_ROOT": str(root)}, ["data", "check", "--json"]),
                               ("flag", env, ["--data-root", str(root), "data", "check", "--json"])):
        res = _run([str(bin_dir / "kgrag"), *argv], tmp_path, run_env)
        assert res.returncode in (0, 1), (how, res.stderr)   # 1: the 1-line kb.txt differs from the manifest
        doc = json.loads(res.stdout)
        assert Path(doc["root"]) == root.resolve()
        found = [f for f in doc["files"] if f["status"] != "missing"]
        assert len(doc["files"]) > 10 and [f["path"] for f in found] == ["metaqa/kb.txt"], (how, found)
