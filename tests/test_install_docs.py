"""Every `pip install` a reader is told to run (README, docs, environment files, profiles, scripts
and the messages kgrag prints) names extras that exist, never `kgrag[...]` from PyPI (kgrag is
not on PyPI: it installs from the checkout), and a GPU install brings what `kgrag study` imports."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
TEXT_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("environment*.yml")),
              *sorted((REPO / "kgrag_lib" / "profiles").glob("*.yaml")), *sorted((REPO / "scripts").glob("*.sh"))]
PIP_EXTRAS = re.compile(r"""pip install[^\n`]*?\s-e\s+['"]?\.\[([\w,-]+)\]""")
FROM_PYPI = re.compile(r"""pip install[^\n`]*?['"\s]kgrag\[""")


def _strings(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)))
    return out


def _sources() -> list[tuple[str, str]]:
    out = [(str(p.relative_to(REPO)), p.read_text(encoding="utf-8")) for p in TEXT_FILES]
    for p in sorted((REPO / "kgrag_lib").rglob("*.py")):
        out += [(str(p.relative_to(REPO)), s) for s in _strings(p) if "pip install" in s]
    return out


def _closure(names: set[str]) -> set[str]:
    """The extras an install gets, `kgrag[...]` self-references followed."""
    seen, todo = set(), list(names)
    while todo:
        e = todo.pop()
        if e in seen:
            continue
        seen.add(e)
        for req in EXTRAS.get(e, ()):
            m = re.fullmatch(r"kgrag\[([\w,-]+)\]", req.replace(" ", ""))
            if m:
                todo += m.group(1).split(",")
    return seen


INSTALLS = [(where, m.group(0), set(m.group(1).split(","))) for where, text in _sources() for m in PIP_EXTRAS.finditer(text)]


def test_the_scan_finds_the_install_lines():
    where = {w for w, _, _ in INSTALLS}
    assert {"README.md", "docs/INSTALL-GPU.md", "docs/GPU.md", "kgrag_lib/doctor/report.py"} <= where, where
    assert len(INSTALLS) >= 12


@pytest.mark.parametrize("where, line, extras", INSTALLS, ids=[f"{w}:{sorted(e)}" for w, _, e in INSTALLS])
def test_every_extra_named_exists(where, line, extras):
    assert extras <= set(EXTRAS), f"{where}: {line!r} names {sorted(extras - set(EXTRAS))}, not an extra of pyproject.toml"


@pytest.mark.parametrize("where, line, extras", INSTALLS, ids=[f"{w}:{sorted(e)}" for w, _, e in INSTALLS])
def test_a_gpu_install_brings_what_the_study_runs(where, line, extras):
    """The GPU profiles are run by `kgrag study`, which executes notebooks with papermill."""
    got = _closure(extras)
    if got & {"gpu", "vllm"}:
        assert "notebooks" in got, f"{where}: {line!r} installs the GPU path without the notebooks extra (papermill)"


def test_kgrag_is_never_installed_from_pypi():
    bad = [(w, m.group(0)) for w, text in _sources() for m in FROM_PYPI.finditer(text)]
    assert not bad, f"kgrag is not on PyPI; install from the checkout with pip install -e '.[...]': {bad}"


def test_the_vllm_extra_pins_a_tested_release():
    """An unpinned vllm beside transformers>=4.56 makes pip backtrack to an old vLLM (0.19.1)."""
    (pin,) = [r for r in EXTRAS["vllm"] if r.startswith("vllm")]
    assert re.fullmatch(r"vllm==\d+\.\d+\.\d+", pin), pin
    text = (REPO / "docs" / "INSTALL-GPU.md").read_text()
    assert pin in text and pin in (REPO / "scripts" / "install_vllm.sh").read_text().replace(
        "vllm==$CUDA_VERSION", "vllm==" + re.search(r'CUDA_VERSION="\$\{KGRAG_VLLM_CUDA_VERSION:-([\d.]+)\}"',
                                                     (REPO / "scripts" / "install_vllm.sh").read_text()).group(1))


def test_study_and_sweep_without_papermill_name_the_extra(monkeypatch, capsys):
    import importlib.util

    from kgrag_lib.errors import BackendUnavailableError
    from kgrag_lib.executors import require_notebook_tools

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "papermill" else real(name, *a))
    with pytest.raises(BackendUnavailableError, match=r'kgrag study executes notebooks with papermill and needs papermill.*'
                                                      r'pip install -e "\.\[notebooks\]"'):
        require_notebook_tools("kgrag study")
    from kgrag_lib.cli import main

    assert main(["study", "--profile", "cpu-smoke", "--only", "00"]) != 0   # refused before any notebook runs
    assert "kgrag study executes notebooks with papermill" in capsys.readouterr().err
    assert main(["sweep", "00_quickstart", "-p", "seed", "0"]) != 0
    assert "kgrag sweep executes notebooks with papermill" in capsys.readouterr().err


def test_a_driverless_host_is_told_how_to_solve_the_conda_env():
    """conda-forge's CUDA builds need the __cuda virtual package: without a driver, CONDA_OVERRIDE_CUDA."""
    for path in ("environment.yml", "docs/INSTALL-GPU.md"):
        assert "CONDA_OVERRIDE_CUDA=" in (REPO / path).read_text(), path


def test_a_missing_hub_model_names_the_current_download_command(tmp_path, monkeypatch):
    """huggingface_hub 2.x has no `huggingface-cli`; its command is `hf download`."""
    from kgrag_lib.errors import BackendUnavailableError
    from kgrag_lib.hub import snapshot

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(BackendUnavailableError, match=r"`hf download kgrag-test/not-cached`") as err:
        snapshot("kgrag-test/not-cached", ["*.json"], local_only=True)
    assert "huggingface-cli" not in str(err.value)
    everywhere = " ".join(text for _, text in _sources())
    assert "huggingface-cli" not in everywhere


SWEEP = re.compile(r"kgrag sweep\s+(\S+)([^\n`]*)")


def test_every_documented_sweep_names_parameters_the_notebook_has():
    """A `kgrag sweep NB -p NAME ...` line in the docs is refused if NAME is not in NB's parameters
    cell (CLUSTER.md swept `seed` where notebook 11 has `seeds`)."""
    from kgrag_lib.commands.sweep import _notebook_parameters as notebook_parameters

    found = []
    for p in TEXT_FILES:
        for m in SWEEP.finditer(p.read_text(encoding="utf-8")):
            book, rest = m.group(1), m.group(2)
            if book.startswith(("NOTEBOOK", "-", "<")):
                continue
            path = REPO / "notebooks" / (Path(book).name if book.endswith(".ipynb") else f"{book}.ipynb")
            names = re.findall(r"(?:-p|--param)\s+(\w+)", rest)
            have = set(notebook_parameters(path))
            found.append(book)
            assert set(names) <= have, f"{p.relative_to(REPO)}: kgrag sweep {book} sweeps {names}; it has {sorted(have)}"
    assert found, "the scan found no documented sweep"
