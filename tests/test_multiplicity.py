"""The report's verdicts are read from Holm-adjusted p over one stated family (issue 41, item 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kgrag_lib.report import multiplicity as mu
from kgrag_lib.report.study import SECONDARY_METRICS, assessed_claims, collect

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def test_holm_matches_the_step_down_procedure_worked_by_hand():
    # sorted 0.01, 0.02, 0.03, 0.04 times 4, 3, 2, 1 -> 0.04, 0.06, 0.06, 0.06 (kept non-decreasing)
    got = mu.holm([0.03, 0.01, 0.04, 0.02])
    assert np.allclose(got, [0.06, 0.04, 0.06, 0.06])
    assert mu.holm([0.5, 0.9]).max() == 1.0   # capped
    assert mu.holm([]).size == 0


def _claim(cid, p, verdict, statement="a > b", metric="hit1"):
    return {"claim": cid, "dataset": "d", "statement": statement, "metric": metric, "p_value": p, "verdict": verdict}


def test_adjusted_verdicts_keep_the_family_and_leave_exploratory_and_untested_claims_alone():
    claims = pd.DataFrame([
        _claim("strong", 0.001, "confirmed"),
        _claim("weak", 0.03, "confirmed"),
        _claim("against", 0.002, "refuted"),
        _claim("equal", 0.8, "confirmed", statement="a ~ b"),        # confirmed by its bound, not its p
        _claim("judge", 1.0, "not testable: the judge failed its controls"),
        _claim("missing", float("nan"), "not run"),
        _claim("silent", 1.0, "not testable on this metric (no question scores on either side)"),
        _claim("second", 0.01, "confirmed", metric=SECONDARY_METRICS[0]),
    ])
    out = mu.adjust(claims, SECONDARY_METRICS).set_index("claim")
    assert mu.family_sizes(out) == {"": 4}                            # strong, weak, against, equal
    assert out.loc["strong", "p_holm"] == pytest.approx(0.004)
    assert out.loc["strong", "verdict"] == "confirmed"
    assert out.loc["against", "verdict"] == "refuted"                 # 0.002 x 3 = 0.006
    assert out.loc["weak", "verdict"] == "not separable at this n"    # 0.03 x 2 = 0.06
    assert out.loc["weak", "unadjusted verdict"] == "confirmed"
    assert out.loc["equal", "verdict"] == "confirmed"
    assert out.loc["judge", "verdict"].startswith("not testable") and np.isnan(out.loc["judge", "p_holm"])
    assert out.loc["silent", "verdict"].startswith("not testable") and np.isnan(out.loc["silent", "p_holm"])
    assert out.loc["second", "family"] == mu.EXPLORATORY and out.loc["second", "verdict"] == "confirmed"


def test_each_paper_is_its_own_family():
    """A report testing two papers adjusts each paper's claims as if it were alone: the same four p
    as one family would leave the two weak ones unconfirmed (0.03 x 2, then 0.04 kept at 0.06);
    split two and two, each is its family's largest p and confirms."""
    claims = pd.DataFrame([
        {**_claim("strong", 0.001, "confirmed"), "paper": "A"},
        {**_claim("weak", 0.03, "confirmed"), "paper": "A"},
        {**_claim("other", 0.004, "confirmed"), "paper": "B"},
        {**_claim("other-weak", 0.04, "confirmed"), "paper": "B"},
    ])
    out = mu.adjust(claims, SECONDARY_METRICS).set_index("claim")
    assert mu.family_sizes(out) == {"A": 2, "B": 2}
    assert out.loc["weak", "p_holm"] == pytest.approx(0.03) and out.loc["weak", "verdict"] == "confirmed"
    assert out.loc["other-weak", "p_holm"] == pytest.approx(0.04) and out.loc["other-weak", "verdict"] == "confirmed"
    assert mu.family_text(out) == "m = 2 for A, 2 for B"
    one = mu.adjust(claims.drop(columns="paper"), SECONDARY_METRICS).set_index("claim")   # no paper: one family
    assert mu.family_sizes(one) == {"": 4} and one.loc["weak", "p_holm"] == pytest.approx(0.06)
    assert one.loc["weak", "verdict"] == one.loc["other-weak", "verdict"] == "not separable at this n"


def test_the_reference_report_families_and_the_two_metaqa_verdicts_they_change():
    """Issue 41, item 1 (per paper, primary claims). The audit's three MetaQA examples were computed
    over all 44 primary claims at once; within MetaQA's own family of 19, two of them change and
    KG-RAG over the LLM on 3-hop (p = 0.0029) stays confirmed."""
    claims = assessed_claims(collect(REFERENCE))
    assert mu.family_sizes(claims) == {"KG-RAG on MetaQA": 19, "KG-Infused RAG": 15, "TCR-QF": 10}
    changed = mu.changed_by_adjustment(claims).set_index("claim")
    assert set(changed.index) == {"exp1.1hop_best_at_N1", "exp2.ours_over_kaping_3hop"}
    for cid in changed.index:
        assert changed.loc[cid, "unadjusted verdict"] == "confirmed"
        assert changed.loc[cid, "adjusted verdict"] == "not separable at this n"
        assert changed.loc[cid, "p_holm"] >= 0.05
    held = claims.set_index("claim").loc["exp2.ours_over_llm_3hop"]
    held = held[held["metric"] == "hit1"].iloc[0]
    assert held["p_holm"] < 0.05 and held["verdict"].startswith("confirmed")


def test_the_claims_accounting_counts_every_registered_claim_and_says_why_one_did_not_run():
    """Issue 41, item 7: plug-in, StrategyQA and DPO claims are in the counts, each not-run claim
    with its reason."""
    from kgrag_lib.report.accounting import account, registered_claims

    claims = assessed_claims(collect(REFERENCE))
    every = registered_claims()
    assert every["claim"].is_unique
    assert {"t1.dpo_helps.2wiki", "t1.kg_infused_over_vanilla_rag.strategyqa",
            "table2.self-rag-kg-infused.r2.hotpotqa"} <= set(every["claim"])
    outcomes, idle = account(claims, "cpu-reference")
    total = outcomes.set_index("paper").loc["all"]
    assert "m1.kg_over_placebo.2wiki" in set(every["claim"])      # issue 56: registered before its runs
    assert total["claims"] == len(every) == 128
    assert total["confirmed"] == 8 and total["refuted"] == 0   # MetaQA's 8 (Holm within the paper)
    assert idle["claims"].sum() == total["not run"]
    assert "not run in this study" not in set(idle["reason"])   # the reference states each reason
    _, elsewhere = account(claims, "gpu-paper")
    assert set(elsewhere["reason"]) == {"not run in this study"}


def test_the_reference_report_confirms_nothing_on_a_metric_no_question_scores_on():
    """Exact match against MetaQA's sentence answers scores 0 for both systems on most claims; the
    committed notebook summaries predate the rule, and the report applies it when it reads them."""
    claims = assessed_claims(collect(REFERENCE))
    silent = claims[(claims["n_pairs"] > 0) & (claims["ours_a"] == 0) & (claims["ours_b"] == 0)]
    assert len(silent) >= 3 and set(silent["metric"]) == {"hit1_exact"}
    assert (silent["verdict"] == "not testable on this metric (no question scores on either side)").all()
