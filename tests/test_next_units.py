"""docs/NEXT-UNITS.md is executable (issue 56): each unit's profile block (units 2 to 6), laid over cpu-reference-1.5b
after the blocks before it, resolves; its new column gets the frozen claims plan's n on the grid the
0.5B reference used for that dataset, every other column keeps its n, and no other notebook's settings
change (notebook 21, the run in progress, least of all). Unit 2's block is the shipped profile's."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from kgrag_lib.config import PROFILE_DIR
from kgrag_lib.paths import REPO_ROOT
from kgrag_lib.studies import NOTEBOOKS, load_profile, notebook_settings

DOC = (REPO_ROOT / "docs" / "NEXT-UNITS.md").read_text(encoding="utf-8")
UNIT = re.compile(r"<!-- unit: (\d+) \| (\w+) -->\n```yaml\n(.*?)```", re.S)
PLAN = json.loads((REPO_ROOT / "results" / "claims-plan" / "2026-12-07.json").read_text(encoding="utf-8"))
PROFILE = "cpu-reference-1.5b"
SNAPSHOT = json.loads((REPO_ROOT / "tests" / "data" / "resolved_profiles.json").read_text(encoding="utf-8"))[PROFILE]


def units() -> list[tuple[int, str, dict]]:
    out = [(int(rank), nb, yaml.safe_load(body)) for rank, nb, body in UNIT.findall(DOC)]
    for rank, nb, block in out:
        assert list(block) == [nb], f"unit {rank}: its block must hold exactly the notebook {nb} it names"
    return out


def _settings(prof: dict) -> dict[str, dict]:
    return {nb: json.loads(json.dumps(dataclasses.asdict(notebook_settings(nb, prof)), default=str, sort_keys=True))
            for nb in sorted(NOTEBOOKS)}


def _columns(nb: str, s: dict, datasets: list[str]) -> dict[str, tuple]:
    """dataset -> (n, grid) of notebook `nb`'s resolved settings `s`."""
    over = s.get("per_dataset") or {}
    if nb == "11_metaqa_parameter_grid":
        return {d: (over.get(d, {}).get("n", s["n"]), over.get(d, {}).get("hops_grid", s["hops_grid"]),
                    over.get(d, {}).get("top_k_grid", s["top_k_grid"])) for d in datasets}
    return {d: (over.get(d, {}).get("n", s["n"]),) for d in datasets}


def _plan_unit(rank: int) -> dict:
    (unit,) = [u for u in PLAN["units"] if u["rank"] == rank]
    return unit


NAMES = {"metaqa-1hop": "MetaQA 1-hop", "metaqa-3hop": "MetaQA 3-hop", "2wiki": "TCR-QF on 2Wiki",
         "hotpotqa": "TCR-QF on HotpotQA"}


def test_the_doc_names_units_2_to_6_of_the_frozen_plan_in_its_order():
    found = units()
    assert [r for r, _, _ in found] == [2, 3, 4, 5, 6]
    for rank, nb, _ in found:
        unit = _plan_unit(rank)
        assert unit["notebook"] == nb and unit["model"] == "qwen2.5-coder-1.5b-q4"
        assert f"## Unit {rank}: `{nb[:2]}` {NAMES[unit['dataset']]}, n = {unit['n']}" in DOC
        assert f"{unit['core_hours']:.2f} core-hours" in DOC


APPLIED = (2, 3, 5, 6)   # the units whose blocks are in the shipped profile, in the order they were applied


def test_the_shipped_profile_holds_the_blocks_of_the_units_applied():
    """Each notebook's entry is the block of the last unit applied to it (unit 5's replaced unit 2's)."""
    shipped = yaml.safe_load((PROFILE_DIR / f"{PROFILE}.yaml").read_text(encoding="utf-8"))["notebooks"]
    last = {nb: block[nb] for rank, nb, block in units() if rank in APPLIED}
    assert last and all(shipped[nb] == block for nb, block in last.items())


@pytest.mark.parametrize("upto", [2, 3, 4, 5, 6])
def test_each_unit_resolves_to_the_plans_n_and_changes_nothing_else(upto, tmp_path):
    """As the doc says to apply them: each block not yet in the shipped file (`APPLIED`) replaces its
    notebook's entry there, which then merges over cpu-reference (`extends:`) as the shipped file does."""
    reference = _settings(load_profile("cpu-reference"))
    text = yaml.safe_load((PROFILE_DIR / f"{PROFILE}.yaml").read_text(encoding="utf-8"))
    planned: dict[tuple[str, str], int] = {}
    for rank, nb, block in units():
        if rank > upto:
            break
        if rank not in APPLIED:       # an applied unit's block is in the shipped file already (a later one may follow it)
            text["notebooks"][nb] = block[nb]
        unit = _plan_unit(rank)
        planned[(nb, unit["dataset"])] = unit["n"]
    (tmp_path / f"{PROFILE}.yaml").write_text(yaml.safe_dump(text), encoding="utf-8")
    now = _settings(load_profile(tmp_path / f"{PROFILE}.yaml"))
    touched = {nb for nb, _ in planned}
    ran = set(yaml.safe_load((PROFILE_DIR / f"{PROFILE}.yaml").read_text(encoding="utf-8"))["notebooks"])
    for nb in NOTEBOOKS:
        if nb not in touched:
            assert now[nb] == SNAPSHOT["notebooks"][nb], f"unit {upto}: {nb} changed"
    assert now["21_kg_infused_main"]["n"] == 237             # unit 1, the run in progress, untouched
    for nb in touched:
        cols = _columns(nb, now[nb], now[nb]["datasets"])
        before = _columns(nb, SNAPSHOT["notebooks"][nb], SNAPSHOT["notebooks"][nb]["datasets"])
        ref = _columns(nb, reference[nb], sorted(set(reference[nb]["datasets"]) | set(cols)))   # its grid, run or not
        for d, col in cols.items():
            if (nb, d) in planned:        # the plan's n, on the grid the 0.5B reference ran for this dataset
                assert col[0] == planned[(nb, d)] and col[1:] == ref[d][1:], (upto, nb, d, col)
            else:                         # a column published before keeps its settings: it replays
                assert col == before[d], (upto, nb, d, col, before[d])
        if nb in ran:                     # a notebook never run at this model has no published column to keep
            assert set(before) <= set(cols), f"unit {upto}: {nb} drops a published column"
