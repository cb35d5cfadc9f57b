"""The closed sets the `kgrag` flags take, read from the registries (so help, validation and
shell completion list the same names as the code that runs them)."""

from __future__ import annotations

from pathlib import Path


def method_names() -> list[str]:
    from .methods import available_methods

    return sorted(available_methods())


def dataset_names() -> list[str]:
    from .data.registry import DATASETS

    return list(DATASETS)


class ProfileChoices(list):
    """The shipped profiles' names (what `--help` and completion list) that also admit a profile
    file of the user's: argparse checks `value in choices`, and a path is not a name. Anything
    written as a path passes here; the profile loader names a missing or ill-formed file."""

    def __contains__(self, value: object) -> bool:
        return list.__contains__(self, value) or (
            isinstance(value, str) and (value.endswith((".yaml", ".yml")) or "/" in value or Path(value).exists()))


def profile_choices() -> ProfileChoices:
    from .config import available_profiles

    return ProfileChoices(available_profiles())


def profile_help(default: str = "cpu-smoke") -> str:
    return f"profile: {', '.join(profile_choices())} (default {default}) or the path of a YAML profile"
