"""What a profile resolves to, setting by setting: the run defaults, each method's typed config, each
notebook's typed settings, and the models, embedders and server sections. Two profile files that give
the same view run the same experiments with the same run identities, however they are written
(`extends:`, values equal to a default left out)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from kgrag_lib.config import RunConfig, fill_run_n, make_config, profile_section
from kgrag_lib.methods.registry import available_methods
from kgrag_lib.studies import NOTEBOOKS, load_profile, notebook_settings


def resolved_view(name: str) -> dict[str, Any]:
    prof = load_profile(name)
    prof = fill_run_n(prof, profile_section(prof, "run").get("n"), name)   # `{n}`: a run at the profile's n
    view = {"run": dataclasses.asdict(make_config(RunConfig, profile_section(prof, "run"), where=name)),
            "models": prof.get("models") or {}, "embedders": prof.get("embedders") or {},
            "server": prof.get("server") or {}}
    view["methods"] = {m: dataclasses.asdict(spec.check_config(profile_section(prof, "methods", m), where=name))
                       for m, spec in sorted(available_methods().items())}
    view["notebooks"] = {nb: dataclasses.asdict(notebook_settings(nb, prof)) for nb in sorted(NOTEBOOKS)}
    return json.loads(json.dumps(view, default=str, sort_keys=True))


if __name__ == "__main__":   # the snapshot tests/data/resolved_profiles.json holds: run after a deliberate change
    import sys
    from pathlib import Path

    from kgrag_lib.config import available_profiles

    out = Path(__file__).resolve().parent / "data" / "resolved_profiles.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({p: resolved_view(p) for p in available_profiles()}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}", file=sys.stderr)
