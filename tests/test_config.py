"""Profiles and typed configs: layering, unknown keys, type checks."""

from __future__ import annotations

import pytest

from kgrag_lib.config import RunConfig, available_profiles, field_help, make_config, profile_section, read_profile
from kgrag_lib.errors import ConfigError


def test_shipped_profiles_load():
    assert {"cpu-smoke", "gpu-paper"} <= set(available_profiles())
    for name in ("cpu-smoke", "gpu-paper"):
        prof = read_profile(name)
        assert prof["name"] == name
        assert profile_section(prof, "models")["metaqa"]
        make_config(RunConfig, profile_section(prof, "run"), where=name)


def test_layers_override_in_order_and_none_is_skipped():
    cfg = make_config(RunConfig, {"n": 5, "seed": 1}, {"n": 7, "seed": None})
    assert (cfg.n, cfg.seed) == (7, 1)


def test_unknown_key_names_it_and_lists_fields():
    with pytest.raises(ConfigError, match=r"unknown parameter 'nn'.*accepted: .*seed"):
        make_config(RunConfig, {"nn": 3})


def test_wrong_type_is_reported():
    with pytest.raises(ConfigError, match=r"'seed'.*must be int"):
        make_config(RunConfig, {"seed": "zero"})


def test_every_field_has_help():
    assert all(field_help(RunConfig).values())


def test_missing_profile_lists_choices(tmp_path):
    with pytest.raises(ConfigError, match="cpu-smoke"):
        read_profile("no-such-profile")
    bad = tmp_path / "p.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        read_profile(bad)


def test_config_is_a_leaf():
    """Reading settings must not import the methods or the studies (every paper's code)."""
    import subprocess
    import sys

    code = ("import sys, kgrag_lib.config; "
            "print(sorted(m for m in sys.modules if m.startswith('kgrag_lib.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["kgrag_lib.config", "kgrag_lib.errors"]


def test_read_profile_runs_the_checks_it_is_given(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("methods:\n  llm-kgg: {}\n", encoding="utf-8")
    assert read_profile(p)["methods"] == {"llm-kgg": {}}        # config alone does not know the methods
    seen = []
    read_profile(p, lambda data, where: seen.append(where))
    assert seen == [str(p)]
