"""Issue 41: no number in FINDINGS or README's findings is typed by hand. Each published folder keeps a
template whose numbers are expressions over its results; these tests render the committed results and
compare, so a re-run that changed a figure cannot leave the old one standing."""

from __future__ import annotations

import json
import shutil

import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.paths import REPO_ROOT
from kgrag_lib.report import findings as F
from kgrag_lib.report.publish import read_findings

PUBLISHED = ["reference", "reference-1.5b"]
_COMMITTED_FACTS: dict = {}


@pytest.fixture
def committed_facts_read_once(monkeypatch):
    """The committed folders' `Facts` (their results collected, claims assessed) made once for this module's
    renders of them: FINDINGS of both folders and README's block render from the same reads (1.5B's findings
    quote the 0.5B folder), each still through `render_folder` / `readme_block`. Only these tests, which never
    change the committed results, share them."""
    real = F.Facts

    def facts(folder):
        key = str(folder.resolve() if hasattr(folder, "resolve") else folder)
        if key not in _COMMITTED_FACTS:
            _COMMITTED_FACTS[key] = real(folder)
        return _COMMITTED_FACTS[key]

    monkeypatch.setattr(F, "Facts", facts)


@pytest.mark.usefixtures("committed_facts_read_once")
@pytest.mark.parametrize("name", PUBLISHED)
def test_committed_findings_are_what_the_results_render(name):
    folder = REPO_ROOT / "results" / name
    committed = (folder / F.OUT_FILE).read_text(encoding="utf-8")
    assert F.render_folder(folder, write=False) == committed, (
        f"results/{name}/FINDINGS.md is stale: run `.venv/bin/python -m kgrag_lib.report.findings results/{name}`")


@pytest.mark.usefixtures("committed_facts_read_once")
def test_readme_findings_block_is_what_the_results_render():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = F.readme_block(REPO_ROOT / "results" / "reference")
    assert F.replace_readme_block(readme, block) == readme, (
        "README's findings block is stale: run `.venv/bin/python -m kgrag_lib.report.findings results/reference`")


@pytest.mark.parametrize("path", ["reference/FINDINGS.template.md", "reference/README.findings.template.md",
                                  "reference-1.5b/FINDINGS.template.md"])
def test_templates_type_no_number(path):
    assert F.stray_numbers((REPO_ROOT / "results" / path).read_text(encoding="utf-8")) == []


def test_a_typed_number_is_found_and_names_allowed_are_not():
    text = ("Table 3 and `21` on 2Wiki with the 0.5B model, 1- and 2-hop at N = 3, K = 30 (2026-11-27);\n"
            "{{ row('21').avg }} then\nNaive RAG 46.7 beats {# a comment 12 #} {% if x > 3 %}it{% endif %}\n")
    assert F.stray_numbers(text) == [(3, "46.7")]


def test_numbers_print_as_the_findings_do():
    assert (F.num(-8.66), F.num(4842.6, 0), F.signed(3.5), F.signed(-0.04), F.signed(0)) == \
           ("\u22128.7", "4,843", "+3.5", "0.0", "0.0")
    with pytest.raises(ConfigError, match="missing from the results"):
        F.num(float("nan"))


@pytest.fixture
def folder(tmp_path):
    """A published folder with one notebook's summary, as notebook 90 leaves it."""
    nb = tmp_path / "21_kg_infused_main"
    nb.mkdir()
    (nb / "summary.json").write_text(json.dumps([
        {"label": "NoR", "variant": "nor", "dataset": "2wiki", "avg": 15.21, "n": 100},
        {"label": "Vanilla RAG", "variant": "vanilla-rag", "dataset": "2wiki", "avg": 18.01, "n": 100}]))
    return tmp_path


def test_read_findings_renders_the_template_of_a_folder(folder):
    (folder / F.TEMPLATE_FILE).write_text(
        "## Findings\n\n- Vanilla RAG {{ row('21', variant='vanilla-rag').avg|n1 }} vs NoR\n"
        "  {{ row('21', variant='nor').avg|n1 }} on n = {{ row('21', variant='nor').n }}.\n")
    text = read_findings(folder)
    assert text == "## Findings\n\n- Vanilla RAG 18.0 vs NoR 15.2 on n = 100."
    assert (folder / F.OUT_FILE).read_text(encoding="utf-8").strip() == text
    # a later result is what the next publish prints: nothing keeps the old figure
    rows = json.loads((folder / "21_kg_infused_main" / "summary.json").read_text())
    rows[1]["avg"] = 19.49
    (folder / "21_kg_infused_main" / "summary.json").write_text(json.dumps(rows))
    assert "Vanilla RAG 19.5 vs" in read_findings(folder)


@pytest.mark.parametrize("template, message", [
    ("x {{ row('21', variant='self-rag').avg }}\n", r"line 1: .*0 rows of notebook 21 match \{'variant': 'self-rag'\}"),
    ("x\n{{ row('21').avg }}\n", r"line 2: .*2 rows of notebook 21 match \{\} \(one expected\)"),
    ("x {{ row('99').avg }}\n", r"notebook '99' is not among \['21_kg_infused_main'\]"),
    ("x {{ row('21', variant='nor').avgg }}\n", r"avgg"),
    ("{% if %}\n", r"line 1"),
    ("Vanilla RAG 18.0\n", r"numbers typed by hand \(1\): line 1: '18.0'"),
])
def test_a_template_that_reads_nothing_real_is_refused_with_its_line(folder, template, message):
    (folder / F.TEMPLATE_FILE).write_text(template)
    with pytest.raises(ConfigError, match=message):
        F.render_folder(folder)
    assert not (folder / F.OUT_FILE).exists()


def test_a_section_can_wait_for_a_notebook_a_resumable_run_has_not_reached(folder):
    (folder / F.TEMPLATE_FILE).write_text(
        "## Findings\n\n{% if has('21') %}- NoR {{ row('21', variant='nor').avg|n1 }}.{% endif %}\n"
        "{% if has('12') %}- {{ row('12').hit1 }}{% else %}- Figure 5: not run yet.{% endif %}\n")
    assert read_findings(folder) == "## Findings\n\n- NoR 15.2.\n- Figure 5: not run yet."


def test_a_family_size_of_a_paper_the_report_did_not_test_is_refused(folder):
    (folder / F.TEMPLATE_FILE).write_text("m = {{ facts.family_size('metaqa') }}\n")
    with pytest.raises(ConfigError, match=r"family_size\('metaqa'\): the report holds no tested claim of that paper"):
        F.render_folder(folder)


def test_a_folder_without_a_template_keeps_its_findings_file(folder):
    (folder / F.OUT_FILE).write_text("## Findings\n\nwritten\n")
    assert read_findings(folder) == "## Findings\n\nwritten"


def test_a_readme_without_its_block_is_refused():
    with pytest.raises(ConfigError, match="no findings block"):
        F.replace_readme_block("# kgrag\n", "- x\n")


def test_publish_renders_the_findings_from_what_it_published(folder, tmp_path):
    """notebook 90 publishing into a folder with a template rebuilds REPORT with the findings rendered
    from the folder's results after the copy, not from what it held before."""
    from kgrag_lib.report.publish import publish
    from kgrag_lib.report.study import StudyResults

    src = tmp_path / "study"
    shutil.copytree(folder / "21_kg_infused_main", src / "21_kg_infused_main")
    rows = json.loads((src / "21_kg_infused_main" / "summary.json").read_text())
    rows[0]["avg"] = 11.04
    (src / "21_kg_infused_main" / "summary.json").write_text(json.dumps(rows))
    dest = tmp_path / "published"
    dest.mkdir()
    (dest / F.TEMPLATE_FILE).write_text("## Findings\n\nNoR {{ row('21', variant='nor').avg|n1 }}\n")
    res = StudyResults(src, summaries={"21_kg_infused_main": rows})
    publish(res, dest, profile="cpu-reference")
    assert (dest / F.OUT_FILE).read_text().strip() == "## Findings\n\nNoR 11.0"
    assert "NoR 11.0" in (dest / "REPORT.md").read_text()
