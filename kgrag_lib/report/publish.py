"""Publishing a study's results into a folder meant to be committed (`results/reference/`): the compact
results, the figures, the cached answers, and the report with its findings rendered from what the folder
then holds (`findings`). Above both `study` (the report) and `findings` (the rendered prose)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from ..errors import ConfigError
from ..llm.cache import export_cache_part
from ..redact import redact
from .findings import OUT_FILE as FINDINGS_FILE, README_TEMPLATE_FILE, TEMPLATE_FILE, render_folder
from .study import StudyResults, collect, compact_rows, write_report


def read_findings(folder: str | Path | None) -> str:
    """The findings kept beside a published report, or "" when there are none: rendered afresh from
    `<folder>/FINDINGS.template.md` and the results in the folder when it keeps a template
    (`report.findings`), else `<folder>/FINDINGS.md` as written."""
    if not folder:
        return ""
    rendered = render_folder(folder)
    if rendered:
        return rendered.strip()
    path = Path(folder) / FINDINGS_FILE
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


def publish(res: StudyResults, dest: str | Path, figures: str | Path | None = None,
            llm_cache: str | Path | None = None, *, profile: str | None = None, extra: str = "",
            findings: str = "") -> Path:
    """Copy what a reader needs into `dest` (meant to be committed): the results
    (`publish_results`), then the report (`publish_report`)."""
    dest = publish_results(res, dest, figures=figures, llm_cache=llm_cache)
    return publish_report(res, dest, profile=profile, extra=extra, findings=findings)


def copy_redacted(src: Path, dst: Path) -> None:
    """Copy a text file with its secrets masked (`redact`): a published folder is meant for git, and a
    run written by an older kgrag, or edited by hand, may hold a server URL's password or token."""
    text = src.read_text(encoding="utf-8")
    dst.write_text(redact(text), encoding="utf-8")
    shutil.copystat(src, dst)


def publish_results(res: StudyResults, dest: str | Path, figures: str | Path | None = None,
                    llm_cache: str | Path | None = None) -> Path:
    """Every notebook's summary.json, and per run its manifest.json, metrics.json and a compact
    questions.jsonl (no traces), plus the figures; and the cached answers of the runs' models
    as append-only parts (`llm-cache/part-NNNN.jsonl.gz`, only answers no earlier part holds), so
    `kgrag cache import DEST/llm-cache` then a rerun of the study costs no LLM call.

    A notebook `res` holds replaces its published self: runs published there earlier that `res`
    no longer has (another n, another grid) are removed (`stale_runs`), or the report would count
    both the old run and the new one. Findings kept in `dest` render from what it holds after this."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for stale in stale_runs(res, dest):
        shutil.rmtree(stale)
        for parent in stale.parents:   # and the folders (`runs/2wiki/n30_seed0`) it leaves empty
            if parent == dest or any(parent.iterdir()):
                break
            parent.rmdir()
        print(f"publish: removed {stale.relative_to(dest)}: an earlier run of a notebook this study re-ran, "
              "which it no longer holds (its answers stay in llm-cache/)")
    for nb in res.summaries:
        (dest / nb).mkdir(exist_ok=True)
        copy_redacted(res.root / nb / "summary.json", dest / nb / "summary.json")
    for run in res.runs:
        src = Path(run["folder"])
        out = dest / src.relative_to(res.root)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("manifest.json", "metrics.json"):
            copy_redacted(src / name, out / name)
        with open(out / "questions.jsonl", "w", encoding="utf-8") as fh:
            for r in compact_rows(src):
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    if figures and Path(figures).is_dir():
        shutil.copytree(figures, dest / "figures", dirs_exist_ok=True)
    identities = sorted({r["llm_identity"] for r in res.runs if r.get("llm_identity")})
    if identities:
        export_cache_part(dest / "llm-cache", llm_cache, identities=identities)
    return dest


def publish_report(res: StudyResults, dest: str | Path, *, profile: str | None = None, extra: str = "",
                   findings: str = "") -> Path:
    """REPORT.md/html into `dest`, after `publish_results`: the study's own, copied from `res.root`.

    A reference run is often finished one notebook at a time, on a machine whose results folder
    holds only that notebook: the REPORT copied from there would drop every claim published
    before. So when `dest` holds notebooks `res` lacks, or keeps a findings template, and `profile`
    is given, REPORT.md/html in `dest` are rebuilt from everything `dest` holds (`collect(dest)`)."""
    dest = Path(dest)
    for name in ("REPORT.md", "REPORT.html"):
        if (res.root / name).exists():
            copy_redacted(res.root / name, dest / name)
    templated = (dest / TEMPLATE_FILE).is_file()
    if profile is not None and (published_elsewhere(res, dest) or templated):
        # the findings are rendered from what `dest` now holds, and the REPORT rebuilt with them
        findings = read_findings(dest) if templated else findings
        write_report(collect(dest), dest, profile, extra=extra, findings=findings)
    return dest


def stale_runs(res: StudyResults, dest: str | Path) -> list[Path]:
    """Run folders published in `dest` (as `collect` finds them) for a notebook `res` holds, that
    are not among `res`'s runs."""
    dest = Path(dest)
    if not dest.is_dir():
        return []
    keep = {dest / Path(r["folder"]).relative_to(res.root) for r in res.runs}
    return sorted(Path(r["folder"]) for r in collect(dest).runs
                  if r["notebook"] in res.summaries and Path(r["folder"]) not in keep)


def published_elsewhere(res: StudyResults, dest: str | Path) -> list[str]:
    """Notebooks whose summaries `dest` holds from an earlier publish but `res` does not."""
    held = sorted(p.parent.name for p in Path(dest).glob("*/summary.json") if p.parent.name != "90_report")
    return [nb for nb in held if nb not in res.summaries]


def rebuild(dest: str | Path, profile: str) -> Path:
    """A published folder's findings and REPORT made again from what it holds, with no notebook run:
    after a change to the report's code (a verdict rule), or a sibling folder's re-run that its
    findings quote. README's findings block too, when the folder keeps its template."""
    from . import findings as F

    dest = Path(dest)
    if not (dest / "REPORT.md").is_file():
        raise ConfigError(f"{dest}: no REPORT.md, so not a published results folder (notebook 90 writes one "
                          "with publish_dir set)")
    check_profile(dest, profile)
    check_summaries(dest)
    check_questions(dest)
    findings = read_findings(dest)   # renders FINDINGS.md afresh where the folder keeps a template
    if (dest / TEMPLATE_FILE).is_file():
        print(f"wrote {dest / FINDINGS_FILE}")
    readme = F.update_readme(dest)
    if readme:
        print(f"rewrote the findings block of {readme}")
    elif (dest / F.README_TEMPLATE_FILE).is_file():
        print(f"README.md left as it is: {dest} lies outside this checkout ({F.CHECKOUT}), and only the "
              "checkout's own published folders write its findings block")
    write_report(collect(dest), dest, profile, findings=findings)
    return dest


def check_profile(dest: str | Path, profile: str) -> None:
    """`profile` must be the one the folder's REPORT.md names (a rebuild must not retitle it), or,
    where its first line names none, a profile kgrag knows."""
    from ..config import available_profiles

    named = _named_profile(Path(dest))
    if named is not None and profile != named:
        raise ConfigError(f"--profile {profile!r}: {Path(dest) / 'REPORT.md'} is the report of profile {named!r}; "
                          f"rebuild it with --profile {named}")
    if named is None and profile not in available_profiles():
        raise ConfigError(f"--profile {profile!r}: not a profile kgrag knows; expected one of "
                          f"{', '.join(available_profiles())}")


def check_summaries(dest: str | Path) -> None:
    """Every notebook's summary.json must be JSON holding one object or a list of objects (its rows)."""
    for path in sorted(Path(dest).glob("*/summary.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a JSON summary ({type(exc).__name__}); publish the notebook again") from None
        rows = data if isinstance(data, list) else [data]
        bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
        if bad is not None:
            raise ConfigError(f"{path}: row {bad} is {type(rows[bad]).__name__} {str(rows[bad])[:40]!r}; expected a list of "
                              "JSON objects (the rows a notebook writes); publish the notebook again")


def check_questions(dest: str | Path) -> None:
    """Every published run's questions.jsonl must be whole: one JSON object per question of its
    manifest's sample (`config.qids`), and as many as its metrics.json's n. A file cut short would
    change every count the findings quote ("4 of 15" instead of "12 of 30") with no error."""
    dest = Path(dest)
    found = (set(dest.glob("*/runs/**/manifest.json")) | set(dest.glob("*/*/runs/**/manifest.json"))
             | set(dest.glob("*/run/manifest.json")))
    for man in sorted(found):
        qfile = man.parent / "questions.jsonl"
        try:
            config = json.loads(man.read_text(encoding="utf-8")).get("config") or {}
            n = json.loads((man.parent / "metrics.json").read_text(encoding="utf-8")).get("n")
        except (OSError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{man.parent}: its manifest.json or metrics.json cannot be read "
                              f"({type(exc).__name__}); publish the run again") from None
        if not qfile.is_file():
            raise ConfigError(f"{qfile}: missing; a published run keeps one row per question (publish it again)")
        qids = []
        with open(qfile, encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise ConfigError(f"{qfile}:{i}: not a JSON line (a cut or edited file); publish the run "
                                      "again") from None
                if not isinstance(row, dict) or "qid" not in row:
                    raise ConfigError(f"{qfile}:{i}: expected a JSON object with a qid; publish the run again")
                qids.append(str(row["qid"]))
        want = [str(q) for q in config.get("qids") or ()]
        answered = n if isinstance(n, int) else len(want)
        if len(qids) != answered or (want and len(qids) != len(want)):
            raise ConfigError(f"{qfile}: {len(qids)} question rows, but its run answered {answered} (manifest.json's "
                              "sample, metrics.json's n): the file is cut, doubled or edited; publish the run again")
        if want and sorted(qids) != sorted(want):
            missing, extra = sorted(set(want) - set(qids)), sorted(set(qids) - set(want))
            raise ConfigError(f"{qfile}: its question ids are not its manifest.json's sample (missing "
                              f"{', '.join(missing[:3]) or 'none'}; not in the sample or twice: "
                              f"{', '.join(extra[:3]) or 'a repeated id'}); publish the run again")


def _named_profile(dest: Path) -> str | None:
    try:
        return report_profile(dest)
    except (ConfigError, OSError, UnicodeDecodeError):
        return None


_REPORT_HEAD = re.compile(r"^# kgrag study report \((?P<profile>[^)]+)\)")


def report_profile(folder: str | Path) -> str:
    """The profile a published folder's REPORT.md names in its first line."""
    path = Path(folder) / "REPORT.md"
    head = path.read_text(encoding="utf-8").split("\n", 1)[0] if path.is_file() else ""
    m = _REPORT_HEAD.match(head)
    if not m:
        raise ConfigError(f"{path}: its first line should read '# kgrag study report (<profile>)', as notebook 90 "
                          f"writes it; found {head[:80]!r}")
    return m.group("profile")


def quoting_folders(dest: str | Path) -> list[Path]:
    """Published folders beside `dest` whose findings templates quote it (`sibling("<name of dest>")`)."""
    dest = Path(dest).resolve()
    quote = re.compile(r"""sibling\(\s*["']%s["']\s*\)""" % re.escape(dest.name))
    found = []
    for folder in sorted(p for p in dest.parent.iterdir() if p.is_dir() and p != dest):
        templates = [folder / TEMPLATE_FILE, folder / README_TEMPLATE_FILE]
        if any(t.is_file() and quote.search(t.read_text(encoding="utf-8")) for t in templates):
            found.append(folder)
    return found


def rebuild_quoting(dest: str | Path) -> list[Path]:
    """Rebuild (`rebuild`) every published folder whose findings quote `dest`, after `dest` was
    published again: their figures (a sibling's Holm p, its Hit@1) would otherwise go stale, and
    their committed findings would no longer be what their results render."""
    done = []
    for folder in quoting_folders(dest):
        rebuild(folder, report_profile(folder))
        print(f"rebuilt {folder / 'REPORT.md'}: its findings quote {Path(dest).name}")
        done.append(folder)
    return done


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kgrag_lib.report.publish",
                                 description="Rebuild a published folder's FINDINGS.md, README findings block and "
                                             "REPORT.md/html from the results it holds (no notebook runs).")
    ap.add_argument("folder", help="a published results folder, e.g. results/reference")
    ap.add_argument("--profile", required=True, help="the profile named in its REPORT, e.g. cpu-reference")
    args = ap.parse_args(argv)
    try:
        folder = Path(args.folder)
        if (folder / "REPORT.md").is_file() and not any(folder.glob("*/summary.json")):
            raise ConfigError(f"{folder}: holds a REPORT.md but no notebook's results (<notebook>/summary.json), so "
                              "there is nothing to rebuild it from; publish the notebooks again (notebook 90)")
        out = rebuild(args.folder, args.profile)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:   # a read-only copy, a sibling folder its findings quote that is not beside it
        print(f"error: {exc.filename or args.folder}: {exc.strerror or exc}; a rebuild writes FINDINGS.md and "
              "REPORT.md/html into the folder and reads the sibling folders its findings quote "
              "(sibling('<name>') lies beside it)", file=sys.stderr)
        return 2
    print(f"rebuilt {out / 'REPORT.md'} and {out / 'REPORT.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
