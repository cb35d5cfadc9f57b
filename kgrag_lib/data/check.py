"""`kgrag data check` and `kgrag data stats`: is the data there and intact, and what is in a file.

`check_data` compares each manifest file under the data root with its recorded size and
sha256; `dataset_stats` loads one file with its dataset's loader and counts what a user needs
to know before a run (questions, distinct context passages, evidence triples, answers).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..paths import data_root
from .common import read_json_records
from .manifest import load_manifest, sha256_file
from .registry import DATASETS, DatasetSpec
from .strategyqa import fact_passages

PRESENT, MISSING, MISMATCH, UNVERIFIED = "present", "missing", "checksum-mismatch", "present (no checksum)"


@dataclass
class FileStatus:
    dataset: str
    path: str
    status: str
    required: bool
    detail: str = ""
    obtain: str = ""


def check_data(root: str | Path | None = None, manifest: str | Path | None = None, *,
               hash_files: bool = True) -> list[FileStatus]:
    """One status per manifest file: present, missing, checksum-mismatch, or present (no checksum)."""
    base = data_root(root)
    doc = load_manifest(manifest)
    out = []
    for name, entry in doc["datasets"].items():
        required = bool(entry.get("required", True))
        obtain = " ".join(str(entry.get("obtain", "")).split())
        if any(spec.get("url") for spec in entry.get("files", [])):
            obtain = f"`kgrag data fetch {name}` (resumable), or by hand: {obtain}"
        # the inputs of a derived file that is present are not needed (a KB obtained by hand needs no sources)
        spare = {p: spec["path"] for spec in entry.get("files", []) if spec.get("derive")
                 and (base / spec["path"]).is_file() for p in spec.get("from", [])}
        for spec in entry.get("files", []):
            fp = base / spec["path"]
            if not fp.is_file():
                why = f"not needed: only an input of {spare[spec['path']]}, which is present" \
                    if spec["path"] in spare else ""
                out.append(FileStatus(name, spec["path"], MISSING, required and not why, why, obtain))
                continue
            size = fp.stat().st_size
            if spec.get("size") is not None and size != spec["size"]:
                out.append(FileStatus(name, spec["path"], MISMATCH, required,
                                      f"size {size} bytes, manifest says {spec['size']}", obtain))
            elif not spec.get("sha256"):
                out.append(FileStatus(name, spec["path"], UNVERIFIED, required))
            elif hash_files and (got := sha256_file(fp)) != spec["sha256"]:
                out.append(FileStatus(name, spec["path"], MISMATCH, required,
                                      f"sha256 {got[:12]}..., manifest says {spec['sha256'][:12]}...", obtain))
            else:
                out.append(FileStatus(name, spec["path"], PRESENT, required))
    return out


def format_check(statuses: list[FileStatus], root: Path) -> str:
    """A human-readable table grouped by dataset, with how to obtain what is missing."""
    lines = [f"data root: {root}", ""]
    width = max((len(s.path) for s in statuses), default=10)
    by_ds: dict[str, list[FileStatus]] = {}
    for s in statuses:
        by_ds.setdefault(s.dataset, []).append(s)
    for ds, items in by_ds.items():
        needed = any(s.required for s in items)   # a required entry; its spare derive inputs are not required
        bad = [s for s in items if s.status == MISMATCH or (s.status == MISSING and (s.required or not needed))]
        state = "ok" if not bad else ("optional, not present" if not needed and
                                      all(s.status == MISSING for s in items) else "INCOMPLETE")
        lines.append(f"{ds}: {state}")
        for s in items:
            detail = f"  ({s.detail})" if s.detail else ""
            lines.append(f"  {s.status:<22} {s.path:<{width}}{detail}".rstrip())
        if bad:
            lines.append(f"  how to obtain: {bad[0].obtain}")
        lines.append("")
    n_bad = sum(s.status == MISMATCH for s in statuses)
    n_missing_req = sum(s.status == MISSING and s.required for s in statuses)
    n_present = sum(s.status in (PRESENT, UNVERIFIED) for s in statuses)
    n_missing = sum(s.status == MISSING for s in statuses)
    lines.append(f"{n_present} present, {n_missing} missing ({n_missing_req} required), {n_bad} checksum mismatch")
    return "\n".join(lines)


def statuses_to_json(statuses: list[FileStatus]) -> list[dict[str, Any]]:
    return [asdict(s) for s in statuses]


def stats_datasets() -> dict[str, DatasetSpec]:
    """What `kgrag data stats --dataset` accepts, read from the registry: every dataset, and a family
    of datasets by its manifest key (`metaqa`: the MetaQA files, read with the MetaQA loader)."""
    out = dict(DATASETS)
    for spec in DATASETS.values():
        out.setdefault(spec.manifest_key, spec)
    return dict(sorted(out.items()))


def stats_default(dataset: str) -> str:
    """The registry dataset whose default split `kgrag data stats --dataset <dataset>` reads without --path."""
    return stats_datasets()[dataset].name


def _is_corpus(path: Path) -> bool:
    for rec in read_json_records(path, "{title, text} or a question record"):
        return "question" not in rec.data and "text" in rec.data and "title" in rec.data
    return False


def dataset_stats(dataset: str, path: str | Path) -> dict[str, Any]:
    """Counts of one file read with its dataset's loader (for metaqa, a QA file); a dataset whose corpus
    is a file (2wiki) also counts a corpus file given as `path`."""
    path = Path(path)
    accepted = stats_datasets()
    if dataset not in accepted:
        raise ConfigError(f"--dataset {dataset!r}; accepted: {', '.join(accepted)}")
    spec = accepted[dataset]
    if not path.exists():
        raise ConfigError(f"--path {path}: no such file")
    if spec.corpus_loader is not None and _is_corpus(path):
        corpus = spec.corpus_loader(path)
        return {"dataset": dataset, "path": str(path), "kind": "corpus", "questions": 0, "passages": len(corpus)}
    questions = spec.loader(path, dataset=dataset)
    pids = {p.pid for q in questions for p in q.context}
    out: dict[str, Any] = {
        "dataset": dataset, "path": str(path), "kind": "questions",
        "questions": len(questions),
        "passages": len(pids),
        "questions_with_context": sum(bool(q.context) for q in questions),
    }
    n_answers = [len(q.answers) for q in questions]
    if spec.many_answers:
        out["answers"] = {
            "total": sum(n_answers),
            "mean": round(statistics.fmean(n_answers), 3) if n_answers else 0.0,
            "median": statistics.median(n_answers) if n_answers else 0,
            "min": min(n_answers, default=0),
            "max": max(n_answers, default=0),
            "questions_with_multiple": sum(n > 1 for n in n_answers),
        }
        out["topic_entities"] = len({e for q in questions for e in q.topic_entities})
    else:
        out["answers_per_question_mean"] = round(statistics.fmean(n_answers), 3) if n_answers else 0.0
    if any(q.evidence for q in questions):
        out["triples"] = sum(len(q.evidence) for q in questions)
        out["distinct_triples"] = len({t for q in questions for t in q.evidence})
    if any(q.supporting for q in questions):
        out["supporting_per_question_mean"] = round(statistics.fmean(len(q.supporting) for q in questions), 3)
    if spec.corpus == "facts":   # yes/no questions with annotated facts (StrategyQA)
        out["yes"] = sum(q.answers == ["yes"] for q in questions)
        out["no"] = sum(q.answers == ["no"] for q in questions)
        out["facts"] = len({p.pid for q in questions for p in fact_passages(q)})
    if any("gold_in_context" in q.meta for q in questions):
        out["gold_in_context"] = sum(bool(q.meta.get("gold_in_context")) for q in questions)
    return out
