"""Which data manifest entries a profile reads, from its resolved settings through the registries.

`kgrag data fetch --profile P` fetches them, and `kgrag study` checks (or, into the per-user data
folder, fetches) them before the first notebook; `kgrag run`'s loaders name the fetch command for a
file they lack. The list is read off what the profile resolves to (every notebook's settings and
its study family's method configs, as `kgrag run --show-config` shows them), never kept by hand: a dataset
name maps to its `DatasetSpec.manifest_key` (and companions), a KG spec to its source's `data`,
a corpus to its file, a data path to the entry holding it, plus what a notebook class declares in
`reads` for data no setting names.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

from ..config import fill_run_n, profile_section
from ..data.manifest import load_manifest
from ..data.registry import DATASETS
from ..kg.sources import SOURCES
from ..methods.registry import available_methods
from . import cross_method
from .base import resolve
from .profiles import NOTEBOOKS, load_profile


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def _dataset_keys(name: str) -> list[str]:
    spec = DATASETS.get(name)
    if spec is None or spec.manifest_key not in load_manifest()["datasets"]:
        return []   # a registry row with no download source: its loader names the file it lacks
    return [spec.manifest_key, *spec.companions]


def _kg_keys(spec: str) -> list[str]:
    prefix, _, arg = spec.partition(":")
    source = SOURCES.get(prefix)
    if source is None:
        return []                      # a saved KG folder: nothing under the data root
    if source.needs_llm:               # text:<dataset>... / tcr:<dataset>...: the dataset it extracts from
        return _dataset_keys(arg.split(":")[0])
    return [] if arg else list(source.data)


def _corpus_keys(spec: str) -> list[str]:
    if spec == "wikipedia":
        return ["wikipedia-2018"]
    if spec.startswith("sample:"):
        return _dataset_keys(spec.split(":")[1])
    return []                          # auto / pooled: the run's own dataset; wikipedia:<file>: a file given


def _setting_keys(key: str, value: Any, files: dict[str, str]) -> list[str]:
    out: list[str] = []
    for s in _strings(value):
        out += _dataset_keys(s)
        if s in files:
            out.append(files[s])
        if key == "kg" or key.endswith("_kg"):
            out += _kg_keys(s)
        if key == "corpus":
            out += _corpus_keys(s)
    if key == "wikidata5m_dir" and value is None:
        return out                     # read only when the files are there (the Table 5 row says so otherwise)
    if key == "wikidata5m_dir":
        out.append("wikidata5m")
    return out


def profile_data(profile: str | Path | dict, notebooks: list[str] | None = None) -> list[str]:
    """The manifest entries `profile` reads (only `notebooks`' when given), in manifest order. A notebook
    reads its settings' data and, through the methods of its study family, their KG and corpus; the
    cross-method notebook runs every family's methods."""
    prof = load_profile(profile)
    prof = fill_run_n(prof, profile_section(prof, "run").get("n"), prof.get("name", "profile"))
    files = {spec["path"]: name for name, entry in load_manifest()["datasets"].items()
             for spec in entry.get("files", [])}
    chosen = {nb: cls for nb, cls in NOTEBOOKS.items() if notebooks is None or nb in notebooks}
    families = {cls.family for cls in chosen.values()}
    if any(nb in cross_method.NOTEBOOKS for nb in chosen):
        families |= {spec.family for spec in available_methods().values()}
    found: set[str] = set()
    for nb, cls in chosen.items():
        settings = resolve(cls, nb, prof, {})
        found.update(cls.reads)
        for f in dataclasses.fields(settings):
            found.update(_setting_keys(f.name, getattr(settings, f.name), files))
    for m, spec in available_methods().items():
        if spec.family not in families:
            continue
        config = spec.check_config(profile_section(prof, "methods", m), where=prof.get("name", "profile"))
        for f in dataclasses.fields(config):
            found.update(_setting_keys(f.name, getattr(config, f.name), files))
    order = list(load_manifest()["datasets"])
    return [k for k in order if k in found] + sorted(found - set(order))


def fetch_command(names: list[str] | None, root: Path, profile: str | None = None) -> str:
    """The exact `kgrag data fetch` line that brings `names` (or a profile's data) into `root`."""
    what = f"--profile {profile}" if profile else " ".join(names or [])
    return f"kgrag data fetch {what} --root {root}"


def ensure_data(profile: str | Path, notebooks: list[str] | None = None, *, say: Any = print,
                mirror: str | None = None) -> Path:
    """Before a study's first notebook: what `profile`'s `notebooks` read is under the data root, or
    - the root is the per-user data folder (the root of last resort): it is fetched there, with progress
      bars, saying where; a root someone chose, or ../shared/data, is never written behind their back;
    - an entry is wholly absent: a MissingDataError naming the exact fetch command;
    - an entry is partly there (a hand-made root holding the files a run needs): one line naming what is
      missing and the command, and the study goes on (a loader that lacks a file names the command too).
    Returns the data root."""
    from ..data.fetch import fetch_many, missing_files
    from ..errors import MissingDataError
    from ..paths import data_root, data_root_origin

    prof = load_profile(profile)
    explicit = profile_section(prof, "run").get("data_root")
    root, origin = data_root(explicit), data_root_origin(explicit)
    names = profile_data(prof, notebooks)
    missing = missing_files(names, root)
    if not missing:
        return root
    label = prof.get("name") or str(profile)
    command = fetch_command(None, root, label)
    manifest = load_manifest()["datasets"]
    lack = "; ".join(f"{name} ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''})"
                     for name, paths in missing.items())
    if origin != "the per-user data folder":
        absent = [n for n, paths in missing.items() if len(paths) == len(manifest[n]["files"])]
        if absent:
            raise MissingDataError(f"profile {label} reads data missing under the data root {root} ({origin}): "
                                   f"{lack}. Fetch it with: {command}")
        say(f"kgrag: the data root {root} ({origin}) lacks files profile {label} may read: {lack}; "
            f"`{command}` fetches them")
        return root
    say(f"kgrag: the data profile {label} reads is not here; fetching {', '.join(missing)} into {root} (the per-user "
        f"data folder: no $KGRAG_DATA_ROOT, no run.data_root, no ../shared/data beside the checkout)")
    fetch_many(names, root, say=say, mirror=mirror)
    still = missing_files(names, root)
    if still:
        raise MissingDataError(f"profile {label}: still missing under {root} after the fetch: {', '.join(still)}; "
                               f"rerun {command}")
    say(f"kgrag: the data of profile {label} is in {root}")
    return root
