"""FINDINGS.md rendered from a template and the results it describes, so no figure in it is typed
by hand and a re-run cannot leave a stale one (issue 41).

A published results folder (`results/reference/`) keeps `FINDINGS.template.md`: the findings'
prose with every number written as a jinja2 expression over that folder's results (its notebooks'
summary rows, the report's claims table with Holm-adjusted p and testability, mechanism health,
what each notebook's runs cost). `render_folder` fills it and writes `FINDINGS.md`; notebook 90
does so whenever it publishes, and `tests/test_findings.py` renders the committed results and
compares. A template may hold no digit outside `{{ }}` except in the words `ALLOWED` names (a
notebook's number, a table's, a model's size).

    .venv/bin/python -m kgrag_lib.report.findings results/reference   # re-render FINDINGS.md and README's block
    .venv/bin/python -m kgrag_lib.report.publish results/reference --profile cpu-reference   # ... and REPORT.md/html
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ConfigError
from . import multiplicity
from .cross_method import mechanism_split, paper_of
from .mechanism import health_table
from .metaqa.readings import FLOOR, OWN_P, READINGS, is_floor, readings_table
from .study import (MODEL_HOURS, SECONDARY_METRICS, assessed_claims, built_requests, cache_request_seconds,
                    collect, cost_by_notebook, format_p, unique_runs)

TEMPLATE_FILE = "FINDINGS.template.md"
OUT_FILE = "FINDINGS.md"
README_TEMPLATE_FILE = "README.findings.template.md"   # the findings block of README.md
README_BEGIN, README_END = "<!-- findings:", "<!-- /findings -->"
MINUS = "\u2212"


def num(value: Any, digits: int = 1) -> str:
    """A number as the findings print it: fixed decimals, thousands separated, a real minus sign."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise ConfigError("findings template: a number it names is missing from the results (None/NaN)")
    text = f"{abs(float(value)):,.{digits}f}"
    return (MINUS if float(value) < 0 and float(text.replace(",", "")) != 0 else "") + text


def signed(value: Any, digits: int = 1) -> str:
    """A difference with its sign (+3.5, −8.7)."""
    text = num(value, digits)
    shown_zero = float(text.replace(",", "").lstrip(MINUS)) == 0
    return text if text.startswith(MINUS) or shown_zero else "+" + text


@dataclass(frozen=True)
class Claim:
    """One row of the report's claims table, ready to print."""

    row: dict[str, Any]

    def __getattr__(self, key: str) -> Any:
        try:
            return self.row[key]
        except KeyError:
            raise AttributeError(f"claim {self.row.get('claim')!r} has no field {key!r}; fields: "
                                 f"{', '.join(self.row)}") from None

    @property
    def v(self) -> str:
        """The verdict alone, without the note on MetaQA's readings."""
        return str(self.row["verdict"]).split(";")[0]

    @property
    def flips(self) -> str:
        """The note on MetaQA's readings when a reading's verdict differs ("" otherwise)."""
        parts = str(self.row["verdict"]).split(";", 1)
        return parts[1].strip() if len(parts) > 1 else ""

    @property
    def d(self) -> str:
        return signed(self.row["diff"])

    @property
    def ci(self) -> str:
        lo, hi = self.row["ci95"]
        return f"[{num(lo)}, {num(hi)}]"

    @property
    def p(self) -> str:
        """"p = 0.0029" or "p < 0.0001"."""
        return _p_phrase("p", self.row["p_value"])

    @property
    def pe(self) -> str:
        """A `~` claim's TOST p: "p_equiv = 0.0563" (the p its Holm-adjusted `holm` adjusts)."""
        return _p_phrase("p_equiv", self.row["p_equiv"])

    @property
    def holm(self) -> str:
        """"Holm 0.10" or "Holm < 0.0001"."""
        return _p_phrase("Holm", self.row["p_holm"]).replace(" = ", " ")


@dataclass(frozen=True)
class Reading:
    """One claim under one of MetaQA's readings: both sides' means, the difference, p, the Holm-adjusted
    p in the paper's family and the verdict read from it (`v`), and the verdict its own p gave
    (`v_own`: the rule before the family, which changed after the results were seen), ready to print."""

    mean_a: float
    mean_b: float
    diff: float
    p_value: float
    p_holm: float
    v: str
    v_own: str

    @property
    def d(self) -> str:
        return signed(self.diff)

    @property
    def means(self) -> str:
        """"37.0 vs 19.0" (percent, side A first)."""
        return f"{num(self.mean_a)} vs {num(self.mean_b)}"

    @property
    def p(self) -> str:
        return _p_phrase("p", self.p_value)

    @property
    def holm(self) -> str:
        return _p_phrase("Holm", self.p_holm).replace(" = ", " ")

    @property
    def floor(self) -> bool:
        """Whether the reading is a floor effect (neither side scores above `readings.FLOOR`)."""
        return is_floor(self.v)


# How the findings name MetaQA's readings of Hit@1 (`report/metaqa/readings.py`).
READING_NAMES = {"hit1": "gold-named", "hit1_first": "first-entity", "hit1_sentence": "first-sentence"}


def quantifier(k: int | str, n: int | None = None) -> str:
    """The word a sentence uses for k of n: "none", "fewer than half", "half", "more than half", "all"
    (so a sentence's quantifier is computed from its counts, never typed); `k` may be the text "x of n"
    that mechanism health reports."""
    if n is None:
        m = re.fullmatch(r"\s*(\d+) of (\d+)\s*", str(k))
        if not m:
            raise ConfigError(f"quantifier: expected k and n, or the text 'x of n'; got {k!r}")
        k, n = m.groups()
    k, n = int(k), int(n)
    if n <= 0 or not 0 <= k <= n:
        raise ConfigError(f"quantifier: k must be in [0, n] with n > 0; got k={k}, n={n}")
    if k == 0:
        return "none"
    if k == n:
        return "all"
    return "fewer than half" if 2 * k < n else "half" if 2 * k == n else "more than half"


def verdict_kind(verdict: Any) -> str:
    """A verdict without the readings' note or its parenthesised detail: "not testable at this model
    (mechanism ran for 13 of 30); ..." -> "not testable at this model"."""
    return str(verdict).split(";")[0].split(" (")[0].strip()


def tally_text(verdicts: list[Any]) -> str:
    """Outcome counts as a phrase, the most frequent first: "8 read not testable at this model, 2 not
    separable at this n"; "all 11 read ..." when one outcome covers every claim; "none" for no claim."""
    kinds = [verdict_kind(v) for v in verdicts]
    if not kinds:
        return "none"
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
    if len(counts) == 1:
        return f"all {len(kinds)} read {kinds[0]}"
    ordered = sorted(counts.items(), key=lambda kc: -kc[1])
    return ", ".join(f"{c} read {k}" if i == 0 else f"{c} {k}" for i, (k, c) in enumerate(ordered))


def require(condition: Any, sentence: str) -> str:
    """"" when `condition` holds; an error naming `sentence` when the data no longer support it (a
    template states a qualitative fact it cannot compute as text this way, so rendering fails)."""
    if not condition:
        raise ConfigError(f"findings template: the data no longer support {sentence!r}")
    return ""


def _p_phrase(name: str, value: Any) -> str:
    text = str(format_p(value))
    return f"{name} < {text[1:]}" if text.startswith("<") else f"{name} = {text}"


class Facts:
    """What a template may read from one results folder; every lookup that finds nothing, or more
    than one row where one is meant, raises an error naming the notebook and the filter."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._siblings: dict[str, Facts] = {}
        self.res = collect(self.folder)
        if not self.res.summaries:
            raise ConfigError(f"{self.folder}: no notebook summaries to render the findings from")

    # ---- notebook summary rows --------------------------------------------------------------------
    def _named(self, nb: str) -> list[str]:
        """The notebooks `nb` names: by number ("11") or by full name."""
        return [n for n in self.res.summaries if n.split("_", 1)[0] == str(nb) or n == nb]

    def _notebook(self, nb: str) -> str:
        names = self._named(nb)
        if len(names) != 1:
            raise ConfigError(f"findings template: notebook {nb!r} is not among {sorted(self.res.summaries)}")
        return names[0]

    def has(self, nb: str) -> bool:
        """Whether the folder holds notebook `nb`'s results: for a section written before a resumable
        run has reached that notebook (an unconditional lookup of a missing one is an error)."""
        return len(self._named(nb)) == 1

    def rows(self, nb: str, **match: Any) -> list[dict[str, Any]]:
        name = self._notebook(nb)
        return [r for r in self.res.summaries[name] if all(r.get(k) == v for k, v in match.items())]

    def row(self, nb: str, **match: Any) -> dict[str, Any]:
        found = self.rows(nb, **match)
        if len(found) != 1:
            raise ConfigError(f"findings template: {len(found)} rows of notebook {nb} match {match} (one expected)")
        return found[0]

    # ---- the report's tables --------------------------------------------------------------------
    @cached_property
    def every_run(self) -> pd.DataFrame:
        return pd.DataFrame(self.res.runs)

    @cached_property
    def runs(self) -> pd.DataFrame:
        return unique_runs(self.res.runs)

    @cached_property
    def _readings(self) -> pd.DataFrame:
        return readings_table(self.every_run)

    @cached_property
    def claims(self) -> pd.DataFrame:
        return assessed_claims(self.res, self._readings)

    def reading(self, claim_id: str, name: str) -> Reading:
        """A MetaQA claim under one reading of Hit@1 (`hit1`, `hit1_first`, `hit1_sentence`), as
        REPORT's readings table gives it."""
        r = self._readings
        sel = r[r["claim"] == claim_id] if not r.empty else r
        if len(sel) != 1 or f"{name} verdict" not in sel:
            raise ConfigError(f"findings template: no reading {name!r} of claim {claim_id!r} in the readings table")
        rec = sel.iloc[0]
        return Reading(rec[f"{name} a"], rec[f"{name} b"], rec[f"{name} diff"], rec[f"{name} p"],
                       rec[f"{name} p_holm"], str(rec[f"{name} verdict"]), str(rec[f"{name} {OWN_P}"]))

    def under_readings(self, **where: Any) -> list[dict[str, Any]]:
        """Each confirmed claim `select` finds (MetaQA's, which the readings re-test), with how it fares
        under every reading in the paper's Holm family: `claim`, `holds` (confirmed under every reading),
        `holds_own` (the same, each reading at its own p: the rule before the family), `floors` and
        `falls` ([(reading's name, Reading)]: floor effects, and readings that do not confirm it)."""
        out = []
        for c in self.select("confirmed", **where):
            readings = [(READING_NAMES[m], self.reading(c.claim, m)) for m in READINGS]
            out.append({"claim": c, "holds": all(r.v == "confirmed" for _, r in readings),
                        "holds_own": all(r.v_own == "confirmed" for _, r in readings),
                        "floors": [(m, r) for m, r in readings if r.floor],
                        "falls": [(m, r) for m, r in readings if not r.floor and r.v != "confirmed"]})
        return out

    def claim(self, claim_id: str, metric: str | None = None, dataset: str | None = None) -> Claim:
        c = self.claims
        sel = c[c["claim"] == claim_id]
        if metric is not None:
            sel = sel[sel["metric"] == metric]
        if dataset is not None:
            sel = sel[sel["dataset"] == dataset]
        if len(sel) > 1 and metric is None:   # the claim on its primary metric, not its exploratory twin
            sel = sel[~sel["metric"].isin(SECONDARY_METRICS)]
        if len(sel) != 1:
            raise ConfigError(f"findings template: {len(sel)} claims rows for {claim_id!r} (metric {metric}, "
                              f"dataset {dataset}); one expected")
        return Claim(sel.iloc[0].to_dict())

    def select(self, verdict: str | None = None, table: str | None = None, prefix: str | None = None,
               unadjusted: bool = False, notebook: str | None = None, dataset: str | None = None,
               ran: bool = False, paper: str | None = None, suffix: str | None = None,
               metric: str | None = None, without: str | None = None) -> list[Claim]:
        """The primary claims of a table (whose name starts with `table`), whose id starts with `prefix`
        (and ends with `suffix`: `@2wiki-evidence-oracle`, the claims on a KG; `without`: whose id lacks it),
        made by notebooks whose name starts with `notebook`, of `paper` (its name or study family), on
        `dataset`, with a verdict starting with `verdict` (the Holm-adjusted one, or the claim's own
        p's); `ran`: leave out those not run; `metric`: the claims on that metric instead (an exploratory one)."""
        c = self.claims
        c = c[c["metric"] == metric] if metric is not None else c[~c["metric"].isin(SECONDARY_METRICS)]
        if paper is not None:
            c = c[c["paper"] == paper_of(paper)]
        if notebook is not None:
            made = self.res.claims
            ids = set(made.loc[made["notebook"].astype(str).str.startswith(str(notebook)), "claim"])
            c = c[c["claim"].isin(ids)]
        if dataset is not None:
            c = c[c["dataset"] == dataset]
        if ran:
            c = c[~c["verdict"].astype(str).str.startswith("not run")]
        if table is not None:
            c = c[c["table"].astype(str).str.startswith(table)]
        if prefix is not None:
            c = c[c["claim"].astype(str).str.startswith(prefix)]
        if suffix is not None:
            c = c[c["claim"].astype(str).str.endswith(suffix)]
        if without is not None:
            c = c[~c["claim"].astype(str).str.contains(without, regex=False)]
        if verdict is not None:
            col = "unadjusted verdict" if unadjusted else "verdict"
            c = c[c[col].astype(str).str.startswith(verdict)]
        return [Claim(r) for r in c.to_dict("records")]

    def count(self, verdict: str | None = None, **where: Any) -> int:
        """How many primary claims `select` finds."""
        return len(self.select(verdict, **where))

    def tally(self, verdict: str | None = None, **where: Any) -> str:
        """The outcomes of the primary claims `select` finds, counted (`tally_text`): "8 not testable at
        this model, 2 not separable at this n"."""
        return tally_text([c.verdict for c in self.select(verdict, **where)])

    def mechanisms(self, nb: str, exclude: tuple[str, ...] | list[str] = ()) -> dict[str, list[dict[str, Any]]]:
        """The cross-method rows of notebook `nb` with a mechanism signal, split (`cross_method.mechanism_split`):
        `dead` (ran for fewer than half the questions) and `alive`, each [{method, ran}]."""
        dead, alive = mechanism_split(self.rows(nb), exclude)
        if not dead and not alive:
            raise ConfigError(f"findings template: notebook {nb} has no cross-method row with a mechanism signal")
        return {"dead": dead, "alive": alive}

    def family_size(self, paper: str) -> int:
        """m of `paper`'s Holm family (the paper's name, e.g. "KG-RAG on MetaQA", or its study family,
        e.g. "metaqa"); an error for a paper the report tested no claim of."""
        name = paper_of(paper)
        sizes = multiplicity.family_sizes(self.claims)
        if name not in sizes:
            raise ConfigError(f"findings template: family_size({paper!r}): the report holds no tested claim of "
                              f"that paper (its families: {', '.join(sizes) or 'none'})")
        return sizes[name]

    def cost(self, nb: str) -> dict[str, Any]:
        """Answering wall hours and core-hours of a notebook's runs, as REPORT's cost table counts them
        (a run shared by notebooks counts once, under the first), and `model`: its requests' model hours
        from the LLM cache (`study.MODEL_HOURS`; None where its runs do not record their requests)."""
        table = cost_by_notebook(self.runs, cache_request_seconds(self.folder), built_requests(self.res.summaries))
        name = self._notebook(nb)
        if name not in table.index:
            raise ConfigError(f"findings template: no runs of notebook {name} in the cost table")
        r = table.loc[name]
        model = r.get(MODEL_HOURS)
        return {"hours": float(r["answering wall hours"]), "core": float(r["core-hours (2 cores)"]), "runs": int(r["runs"]),
                "model": None if model is None or pd.isna(model) else float(model)}

    @cached_property
    def total_hours(self) -> float:
        return float(self.runs["answer_seconds_total"].sum()) / 3600

    @cached_property
    def _health(self) -> pd.DataFrame:
        return health_table(self.every_run).drop_duplicates()

    def health(self, nb: str, method: str, dataset: str, **match: Any) -> dict[str, Any]:
        """REPORT's mechanism-health row of a run (`ran` reads "x of n")."""
        h = self._health
        sel = h[(h["notebook"] == self._notebook(nb)) & (h["method"] == method) & (h["dataset"] == dataset)]
        for k, v in match.items():
            sel = sel[sel[k] == v]
        sel = sel.drop_duplicates(subset=[c for c in sel.columns if c != "model"])
        if len(sel) != 1:
            raise ConfigError(f"findings template: {len(sel)} mechanism-health rows for {nb} {method} {dataset} "
                              f"{match} (one expected)")
        return sel.iloc[0].to_dict()

    def scale(self, name: str) -> dict[str, Any]:
        """A benchmark's JSON kept beside the results (`index-scale/<name>.json`, written by
        `bench/scale_bench.py --json` or `scripts/gpu_embed_check.py`): sizes, not findings."""
        import json

        path = self.folder / "index-scale" / f"{name}.json"
        if not path.is_file():
            raise ConfigError(f"findings template: no benchmark file {path}")
        return json.loads(path.read_text(encoding="utf-8"))

    def sibling(self, name: str) -> "Facts":
        """The facts of another published folder beside this one (e.g. `reference-1.5b`), read once."""
        if name not in self._siblings:
            self._siblings[name] = Facts(self.folder.parent / name)
        return self._siblings[name]


def _environment(facts: Facts):
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters.update(n0=lambda v: num(v, 0), n1=lambda v: num(v, 1), n2=lambda v: num(v, 2),
                       n3=lambda v: num(v, 3), s1=lambda v: signed(v, 1), s0=lambda v: signed(v, 0),
                       nx=lambda v: num(v, 0 if float(v).is_integer() else 1))
    env.globals.update(row=facts.row, rows=facts.rows, has=facts.has, reading=facts.reading, claim=facts.claim,
                       count=facts.count, select=facts.select, cost=facts.cost, scale=facts.scale,
                       health=facts.health, sibling=facts.sibling, facts=facts, num=num, signed=signed,
                       tally=facts.tally, quantifier=quantifier, require=require, floor=FLOOR)
    env.filters["tally"] = lambda claims: tally_text([c.verdict for c in claims])
    return env


WIDTH = 115


def reflow(text: str, width: int = WIDTH) -> str:
    """Paragraphs and list items (nested ones too) re-wrapped, so a filled template reads as evenly as one
    typed by hand (headings, tables, code and blank lines are kept as they are)."""
    import textwrap

    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if block:
            first = block[0]
            indent = len(first) - len(first.lstrip())
            bullet = first.lstrip().startswith("- ")
            words = " ".join(line.strip() for line in block)
            lead = " " * indent + ("- " if bullet else "")
            out.extend(textwrap.wrap(words[2:] if bullet else words, width, initial_indent=lead,
                                     subsequent_indent=" " * len(lead), break_long_words=False,
                                     break_on_hyphens=False))
            block.clear()

    for line in text.splitlines():
        stripped = line.lstrip()
        plain = bool(stripped) and not stripped.startswith(("#", "|", "```", "<!--"))
        if plain and stripped.startswith("- "):
            flush()
            block.append(line)
        elif plain and (block or not line.startswith(" ")):
            block.append(line)
        else:
            flush()
            out.append(line)
    flush()
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def render(template: str, facts: Facts, name: str = TEMPLATE_FILE, wrap: bool = True) -> str:
    """The template filled from `facts` (and reflowed, with `wrap`); an expression that fails names its line."""
    import jinja2

    env = _environment(facts)
    try:
        text = env.from_string(template).render()
        return reflow(text) if wrap else text
    except jinja2.TemplateSyntaxError as e:
        raise ConfigError(f"{name}, line {e.lineno}: {e.message}") from None
    except jinja2.TemplateError as e:
        raise ConfigError(f"{name}{_failing_line(e)}: {type(e).__name__}: {e}") from None
    except ConfigError as e:
        line = _failing_line(e)
        raise ConfigError(f"{name}{line}: {e}") from None


def _failing_line(exc: BaseException) -> str:
    tb = exc.__traceback__
    lines = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            lines.append(str(tb.tb_lineno))
        tb = tb.tb_next
    return f", line {' -> '.join(lines)}" if lines else ""


# Words a template may write with digits outside `{{ }}`: names, not results.
ALLOWED = re.compile(
    r"`[^`]*`"                                   # code: notebook numbers, file names, commands
    r"|\{\{.*?\}\}|\{%.*?%\}"                    # the template's own expressions
    r"|\b(?:0\.5|1\.5|7|8)B\b"                   # model sizes
    r"|\b[1-3]-(?:hop\b|(?=\s))"                   # MetaQA's datasets (1-hop; "1- and 2-hop")
    r"|\b(?:Table|Tables|Figure|Fig\.|Experiment|Algorithm|§)\s?[0-9.]+(?:\s?(?:/|and|–)\s?[0-9.]+)*"
    r"|\bWikipedia-2018\b|\bWikidata5M\b|\b2Wiki\w*|\bdev200\b|\btest500\b|\bHit@1\b|\brecall@6\b"
    r"|\bQwen2\.5-\w+|\bK\s?=\s?\d+\b|\bN\s?=\s?\d+\b|\bk\s?=\s?\d+\b|\bseed \d\b"
    r"|\b\d{4}-\d{2}-\d{2}\b"                    # dates
    r"|\bissue \d+\b|\bp < 0\.05\b|±5 points|\bH100\b|\bA100\b|\bF1\b|\bnotebooks? \d\d\b|\b2 cores\b")


def stray_numbers(template: str) -> list[tuple[int, str]]:
    """(line, text) of every digit a template writes outside an expression and the allowed words."""
    out = []
    # a comment says why, not what was measured: blank it, keeping its lines
    # comments, statements and expressions may span lines: blank them, keeping their line breaks
    template = re.sub(r"\{#.*?#\}|\{%.*?%\}|\{\{.*?\}\}", lambda m: "\n" * m.group(0).count("\n"), template, flags=re.S)
    for i, line in enumerate(template.splitlines(), 1):
        rest = ALLOWED.sub(" ", line)
        out += [(i, m.group(0)) for m in re.finditer(r"\S*\d\S*", rest)]
    return out


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _template(tpl: Path) -> str:
    """A template's text, refused when it types a number by hand (both targets read templates this way)."""
    text = tpl.read_text(encoding="utf-8")
    stray = stray_numbers(text)
    if stray:
        shown = "; ".join(f"line {i}: {t!r}" for i, t in stray[:8])
        raise ConfigError(f"{tpl}: numbers typed by hand ({len(stray)}): {shown}. Write each as an expression "
                          "over the results ({{ row(...) }}, {{ claim(...) }}; kgrag_lib/report/findings.py)")
    return text


def render_folder(folder: str | Path, write: bool = True) -> str:
    """FINDINGS.md of a published results folder, from its template and its results ("" when the
    folder keeps no template); written beside it unless `write` is False."""
    folder = Path(folder)
    tpl = folder / TEMPLATE_FILE
    if not tpl.is_file():
        return ""
    out = render(_template(tpl), Facts(folder), name=str(tpl))
    if write:
        _write(folder / OUT_FILE, out)
    return out


def readme_block(folder: str | Path) -> str:
    """README's findings block, rendered from `<folder>/README.findings.template.md`."""
    tpl = Path(folder) / README_TEMPLATE_FILE
    return render(_template(tpl), Facts(folder), name=str(tpl), wrap=False)   # one line per finding


def replace_readme_block(readme: str, block: str, name: str = "README.md") -> str:
    """`readme` with the text between its findings markers replaced by `block`."""
    start = readme.find(README_BEGIN)
    end = readme.find(README_END)
    if start < 0 or end < start:
        raise ConfigError(f"{name}: no findings block ({README_BEGIN} ... {README_END})")
    head_end = readme.index("\n", start) + 1
    return readme[:head_end] + block + readme[end:]


CHECKOUT = Path(__file__).resolve().parents[2]   # the checkout whose README.md holds the findings block


def in_checkout(folder: str | Path) -> bool:
    """Does `folder` lie inside this checkout? Only such a folder's results may speak in its README: a
    scratch copy elsewhere (edited numbers, another machine's run) must not rewrite it."""
    return Path(folder).resolve().is_relative_to(CHECKOUT)


def update_readme(folder: str | Path) -> Path | None:
    """Rewrite README.md's findings block from `<folder>`'s README template; the README, or None
    when the folder keeps no such template or lies outside this checkout (`in_checkout`)."""
    if not (Path(folder) / README_TEMPLATE_FILE).is_file() or not in_checkout(folder):
        return None
    readme = CHECKOUT / "README.md"
    _write(readme, replace_readme_block(readme.read_text(encoding="utf-8"), readme_block(folder)))
    return readme


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kgrag_lib.report.findings <published results folder>", file=sys.stderr)
        return 2
    folder = Path(args[0])
    render_folder(folder)
    print(f"wrote {folder / OUT_FILE}")
    readme = update_readme(folder)
    if readme:
        print(f"rewrote the findings block of {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
