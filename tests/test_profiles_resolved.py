"""Every shipped profile resolves to the settings recorded in tests/data/resolved_profiles.json: rewriting
a profile as a variant of another (`extends:`), or any other edit of its text, cannot change a run's
settings, so committed runs keep their identities and still resume and replay (issue 42). A deliberate
change of settings (a new method too) regenerates the file, from the repository root:
`PYTHONPATH=. .venv/bin/python tests/profile_views.py` (docs/EXTENDING.md says so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kgrag_lib.config import PROFILE_DIR, available_profiles
from profile_views import resolved_view

SNAPSHOT = json.loads((Path(__file__).resolve().parent / "data" / "resolved_profiles.json").read_text())


@pytest.mark.parametrize("name", available_profiles())
def test_every_setting_of_a_shipped_profile_resolves_as_recorded(name):
    assert name in SNAPSHOT, f"{name}: a new profile; add it to the snapshot (see this module's docstring)"
    view = resolved_view(name)
    changed = sorted(f"{section}.{key}" for section in view for key in set(view[section]) | set(SNAPSHOT[name][section])
                     if view[section].get(key) != SNAPSHOT[name][section].get(key))
    assert not changed, f"{name}: settings differ from the snapshot: {changed}"


@pytest.mark.parametrize("name, base", [("gpu-smoke", "cpu-smoke"), ("cpu-reference", "cpu-smoke"),
                                        ("cpu-reference-1.5b", "cpu-reference")])
def test_variants_hold_only_what_differs(name, base):
    own = yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    assert own["extends"] == base
    parent = yaml.safe_load((PROFILE_DIR / f"{base}.yaml").read_text(encoding="utf-8"))

    def repeated(a, b, path=""):
        if isinstance(a, dict) and isinstance(b, dict):
            return [p for k in a if k in b for p in repeated(a[k], b[k], f"{path}.{k}")]
        return [path] if a == b and path not in (".name", ".description") else []

    # a value equal to the one it would inherit is noise (the resolved base, through its own extends)
    from kgrag_lib.studies import load_profile

    assert repeated(own, {k: v for k, v in load_profile(base).items() if k != "extends"}) == [], name
    assert parent is not None


def test_show_config_prints_every_setting_a_profile_leaves_to_its_default(capsys):
    """Profiles leave out settings equal to their defaults (issue 42); `kgrag run --show-config`
    prints the whole resolved config, marking what the profile sets."""
    from kgrag_lib.cli import main

    assert main(["run", "--show-config", "--method", "kg-rag", "--profile", "cpu-smoke"]) == 0
    out = capsys.readouterr().out
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:]}
    assert "96" in lines["max_tokens"] and "[profile]" in lines["max_tokens"]
    assert "30" in lines["top_k"] and "[default]" in lines["top_k"]          # K=30, left out of the profile
    assert "0.3" in lines["temperature"] and "[default]" in lines["temperature"]
