"""What the methods of several papers share about their KG spec and corpus: a spec template
filled in per question (`{dataset}`, `{seed}`: the KG built from the run's own seeded sample),
and the issue recorded when none of a question's paragraphs is in the index built from it."""

from __future__ import annotations

from ..errors import ConfigError
from ..records import Question

PLACEHOLDERS = ("{dataset}", "{seed}")


def resolve_spec(template: str, dataset: str, seed: int, setting: str = "kg") -> str:
    """The KG spec (or, with `setting="corpus"`, the corpus) of a question: `template` with
    `{dataset}` and `{seed}` filled in."""
    spec = str(template).replace("{dataset}", dataset).replace("{seed}", str(int(seed)))
    if "{" in spec or "}" in spec:
        raise ConfigError(f"parameter {setting!r}: {template!r} has a placeholder other than {', '.join(PLACEHOLDERS)}")
    if not spec.strip():
        raise ConfigError(f"parameter {setting!r}: empty {'KG spec' if setting == 'kg' else setting}")
    return spec


def coverage_issue(question: Question, indexed_pids: set[str], what: str) -> str | None:
    """An issue line when the question ships paragraphs and none of them is in the index."""
    own = [p.pid for p in question.context]
    if not own or any(pid in indexed_pids for pid in own):
        return None
    return (f"kg sample: none of the question's {len(own)} paragraphs is in the {what}; build the KG from the "
            "run's own sample (same dataset, split, n and seed)")
