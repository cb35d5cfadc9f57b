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
    monkeypatch.setattr(F, "Facts", _committed_facts)


_REAL_FACTS = F.Facts


def _committed_facts(folder):
    key = str(folder.resolve() if hasattr(folder, "resolve") else folder)
    if key not in _COMMITTED_FACTS:
        _COMMITTED_FACTS[key] = _REAL_FACTS(folder)
    return _COMMITTED_FACTS[key]


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


# ---- issue 56, item 6: qualitative words computed from the data ----------------------------------------------

@pytest.mark.parametrize("k, n, word", [(0, 4, "none"), (1, 4, "fewer than half"), (2, 4, "half"), (3, 4, "more than half"),
                                        (4, 4, "all"), ("15 of 30", None, "half"), ("14 of 30", None, "fewer than half"),
                                        ("25 of 30", None, "more than half")])
def test_a_quantifier_is_computed_from_its_counts(k, n, word):
    assert F.quantifier(k, n) == word


@pytest.mark.parametrize("k, n", [(5, 4), (-1, 4), (0, 0), ("most of 30", None)])
def test_a_quantifier_of_impossible_counts_is_refused(k, n):
    with pytest.raises(ConfigError, match="quantifier"):
        F.quantifier(k, n)


def test_outcomes_are_tallied_by_kind_most_frequent_first():
    model = "not testable at this model (mechanism ran for {} of 30)"
    assert F.tally_text([model.format(13), "not separable at this n", model.format(8)]) == \
        "2 read not testable at this model, 1 not separable at this n"
    assert F.tally_text(["not testable: the judge failed its controls"] * 3) == \
        "all 3 read not testable: the judge failed its controls"
    assert F.tally_text(["confirmed; the readings differ (Holm, the paper's family): hit1 confirmed, hit1_first x"]) == \
        "all 1 read confirmed"
    assert F.tally_text([]) == "none"


def test_mechanisms_split_at_half_as_the_cross_method_table_marks_them():
    from kgrag_lib.report.cross_method import mechanism_split

    rows = [{"table": "cross-method", "method": "naive-rag", "mechanism_dead": None},
            {"table": "cross-method", "method": "sa-rag", "mechanism_dead": True, "mechanism_ran": "12 of 30"},
            {"table": "cross-method", "method": "tog", "mechanism_dead": False, "mechanism_ran": "25 of 30"},
            {"table": "cross-method", "method": "sa-rag-qd", "mechanism_dead": False, "mechanism_ran": "15 of 30"},
            {"table": "cross-method KG build", "method": "x", "mechanism_dead": True}]
    dead, alive = mechanism_split(rows, exclude=["sa-rag-qd"])
    assert dead == [{"method": "sa-rag", "ran": "12 of 30"}] and alive == [{"method": "tog", "ran": "25 of 30"}]


@pytest.fixture
def cross_folder(tmp_path):
    nb = tmp_path / "50_cross_method"
    nb.mkdir()
    rows = [{"table": "cross-method", "method": m, "mechanism_ran": f"{k} of 30", "mechanism_dead": k < 15}
            for m, k in (("tog", 25), ("tog-tcr", 18), ("tcr-qf", 13))]
    (nb / "summary.json").write_text(json.dumps(rows))
    return tmp_path


def test_a_sentence_on_the_mechanisms_follows_their_counts(cross_folder):
    (cross_folder / F.TEMPLATE_FILE).write_text(
        "{% set m = facts.mechanisms('50') %}{{ m.dead|length }} of {{ (m.dead + m.alive)|length }} ran for fewer "
        "than half ({% for r in m.dead %}{{ r.method }} {{ r.ran }}{{ ', ' if not loop.last }}{% endfor %})\n")
    assert read_findings(cross_folder) == "1 of 3 ran for fewer than half (tcr-qf 13 of 30)"
    summary = cross_folder / "50_cross_method" / "summary.json"
    rows = json.loads(summary.read_text())
    rows[1].update(mechanism_ran="9 of 30", mechanism_dead=True)
    summary.write_text(json.dumps(rows))
    assert read_findings(cross_folder) == "2 of 3 ran for fewer than half (tog-tcr 9 of 30, tcr-qf 13 of 30)"


def test_a_qualitative_sentence_the_data_stop_supporting_fails_to_render(cross_folder):
    (cross_folder / F.TEMPLATE_FILE).write_text(
        "{% set m = facts.mechanisms('50') %}{{ require(quantifier(m.alive[0].ran) == 'more than half', "
        "'ToG ran for more than half') }}ToG ran for more than half the questions.\n")
    assert read_findings(cross_folder) == "ToG ran for more than half the questions."
    summary = cross_folder / "50_cross_method" / "summary.json"
    rows = json.loads(summary.read_text())
    rows[0]["mechanism_ran"] = "10 of 30"
    summary.write_text(json.dumps(rows))
    with pytest.raises(ConfigError, match="line 1: .*the data no longer support 'ToG ran for more than half'"):
        F.render_folder(cross_folder, write=False)


@pytest.fixture(scope="module")
def reference_facts():
    return _committed_facts(REPO_ROOT / "results" / "reference")   # read once with the renders' reads


@pytest.mark.usefixtures("committed_facts_read_once")   # its sibling and README block: the same reads
def test_the_findings_counts_per_paper_are_the_claims_tables(reference_facts):
    """README's SA-RAG / TCR-QF line and the oracle sentence are tallies of the claims table, not one verdict
    stretched over a paper (issue 56: "not testable" where two TCR-QF claims read "not separable")."""
    f = reference_facts
    for paper in ("sa-rag", "tcr-qf"):
        verdicts = [F.verdict_kind(c.verdict) for c in f.select(paper=paper, ran=True)]
        text = f.tally(paper=paper, ran=True)
        for kind in set(verdicts):
            assert f"{verdicts.count(kind)} read {kind}" in text or f"{verdicts.count(kind)} {kind}" in text
    big = f.sibling("reference-1.5b")
    oracle = big.select(paper="kg-infused", suffix="@2wiki-evidence-oracle", ran=True)
    assert 0 < len(oracle) < big.family_size("kg-infused")          # the oracle claims are part of the family
    assert all(c.claim.endswith("@2wiki-evidence-oracle") for c in oracle)
    block = F.readme_block(REPO_ROOT / "results" / "reference")
    won = sum(c.verdict == "confirmed" for c in oracle)
    assert (f"separates {won or 'none'} of its {len(oracle)} claims, all after the Holm adjustment over the paper's "
            f"{big.family_size('kg-infused')}") in block
    # the full KG's claims (unit 1 of the frozen plan) read as the 1.5B claims table says, the placebo's included
    rag, qe, placebo = (big.claim(c).v for c in ("t1.kg_infused_over_vanilla_rag.2wiki", "t1.kg_infused_over_vanilla_qe.2wiki",
                                                  "m1.kg_over_placebo.2wiki"))
    assert (f"over Vanilla RAG reads {rag}, over Vanilla QE {qe}, over itself on the held-out KG (the placebo) "
            f"{placebo};") in block


def test_which_confirmations_hold_under_every_reading_follows_the_readings_table(reference_facts):
    f = reference_facts
    under = f.under_readings(prefix="exp")
    assert len(under) == f.count("confirmed", prefix="exp")
    for u in under:
        readings = [f.reading(u["claim"].claim, m) for m in ("hit1", "hit1_first", "hit1_sentence")]
        assert u["holds"] == all(r.v == "confirmed" for r in readings)
        assert len(u["floors"]) + len(u["falls"]) == sum(r.v != "confirmed" for r in readings)
    falls = {u["claim"].claim: dict(u["falls"]) for u in under}
    assert "first-sentence" in falls["exp2.ours_over_llm_3hop"]          # the multi-hop headline (issue 56: Holm 0.38)
    assert falls["exp2.ours_over_llm_3hop"]["first-sentence"].holm == "Holm 0.3828"
    # the rule changed after the results were seen, so the old outcome (each reading at its own p) is kept beside it
    headline = falls["exp2.ours_over_llm_3hop"]["first-sentence"]
    assert headline.p == "p = 0.0294" and headline.v_own == "confirmed" and headline.v != "confirmed"
    for u in under:
        readings = [f.reading(u["claim"].claim, m) for m in ("hit1", "hit1_first", "hit1_sentence")]
        assert u["holds_own"] == all(r.v_own == "confirmed" for r in readings)
    text = " ".join(F.render_folder(REPO_ROOT / "results" / "reference", write=False).split())
    assert "first-sentence 32.0 vs 19.0, +13.0, p = 0.0294, Holm 0.3828, not separable at this n, confirmed at its own p" \
        in text
    held_own = sum(u["holds_own"] for u in under)
    assert f"Judged each at its own p, the rule before the family (it changed after these results were seen; REPORT " \
           f"shows both), {held_own} of the {len(under)}" in text


@pytest.mark.usefixtures("committed_facts_read_once")
def test_the_15b_findings_give_each_comparison_its_own_p():
    folder = REPO_ROOT / "results" / "reference-1.5b"
    text = " ".join(F.render_folder(folder, write=False).split())
    big = F.Facts(folder)
    for cid in ("t1.kg_infused_over_vanilla_rag.2wiki", "t1.kg_infused_over_vanilla_qe.2wiki", "t3.kg_qe_helps.2wiki",
                "t3.kg_aug_helps.2wiki", "f2.round2_over_round1.2wiki"):
        c = big.claim(cid)
        assert f"{c.d} {c.ci}, {c.p}, {c.holm}" in text, cid
