"""Profiles and typed configs: layering, unknown keys, type checks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kgrag_lib.config import (RunConfig, available_profiles, check_values, field_help, make_config, opt,
                              profile_section, read_profile)
from kgrag_lib.errors import ConfigError


def test_shipped_profiles_load():
    assert {"cpu-smoke", "gpu-paper", "gpu-smoke"} <= set(available_profiles())
    for name in available_profiles():
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


@dataclass
class _Bounded:
    k: int = opt(3, "a count", min=1)
    cap: int | None = opt(None, "an optional cap", min=0)
    damping: float = opt(0.5, "a probability strictly inside (0, 1)", gt=0.0, lt=1.0)
    share: float = opt(0.5, "a fraction", min=0.0, max=1.0)
    side: str = opt("both", "a direction", choices=("out", "both"))

    def cross_check(self) -> None:
        if self.cap is not None and self.cap < self.k:
            raise ConfigError(f"parameter 'cap' must be at least k={self.k}, got {self.cap}")


@pytest.mark.parametrize("given, message", [
    ({"k": 0}, "parameter 'k' must be an integer >= 1, got 0"),
    ({"cap": -1}, "parameter 'cap' must be an integer >= 0 or null, got -1"),
    ({"damping": 1.0}, r"parameter 'damping' must be a number in \(0.0, 1.0\), got 1.0"),
    ({"damping": float("nan")}, "parameter 'damping' must be a number in .*got nan"),
    ({"share": 1.5}, r"parameter 'share' must be a number in \[0.0, 1.0\], got 1.5"),
    ({"side": "in"}, "parameter 'side' must be one of out, both, got 'in'"),
    ({"k": 4, "cap": 2}, "parameter 'cap' must be at least k=4, got 2"),
])
def test_declared_bounds_and_choices_are_enforced_naming_parameter_value_and_allowed(given, message):
    with pytest.raises(ConfigError, match=rf"^profile p, methods.m: {message}$"):
        make_config(_Bounded, given, where="profile p, methods.m")


def test_values_inside_the_bounds_pass_and_none_passes_where_allowed():
    cfg = make_config(_Bounded, {"k": 1, "cap": None, "damping": 0.999, "share": 1, "side": "out"})
    assert (cfg.k, cfg.cap, cfg.damping, cfg.share, cfg.side) == (1, None, 0.999, 1.0, "out")
    check_values(_Bounded())  # the defaults pass
    with pytest.raises(ConfigError, match="'k' must be an integer >= 1, got 0"):
        check_values(_Bounded(k=0))  # a config built directly is checked the same way


def test_an_alias_bomb_is_refused_and_ordinary_aliases_pass(tmp_path):
    """A 'billion laughs' profile is a few hundred bytes that loads as shared objects and explodes
    only when written out (the run manifest): refuse it when read, naming the file."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("name: bomb\ndescription:\n" + "\n".join("  " + ln for ln in lines) + "\n", encoding="utf-8")
    assert bomb.stat().st_size < 600
    with pytest.raises(ConfigError, match=r"bomb\.yaml: its anchors and aliases expand to [\d,]+ values"):
        read_profile(bomb)
    assert read_profile("cpu-reference")["methods"]["kg-infused"] == read_profile("cpu-reference")["methods"]["nor"]


def test_a_run_checks_its_profile_once_and_a_changed_one_again(monkeypatch, tmp_path):
    """Issue 60: `kgrag run` checks every section (`load_profile`), then `resolve_run` reads the same dict: it
    is not checked a second time, unless it was changed in place since."""
    from kgrag_lib import config as config_mod
    from kgrag_lib.experiment import resolve_run
    from kgrag_lib.studies import load_profile

    seen = []
    real = config_mod.check_profile_basics
    monkeypatch.setattr(config_mod, "check_profile_basics", lambda data, where: seen.append(where) or real(data, where))
    prof = load_profile("cpu-smoke")
    assert len(seen) == 1
    r = resolve_run("llm", "metaqa-1hop", tmp_path / "r", profile=prof)
    assert len(seen) == 1 and r.run.profile == "cpu-smoke"
    prof["methods"]["llm"] = {"max_tokenz": 3}   # changed in place after its check: checked again, and refused
    with pytest.raises(ConfigError, match="max_tokenz"):
        resolve_run("llm", "metaqa-1hop", tmp_path / "r", profile=prof)
    assert len(seen) == 2
