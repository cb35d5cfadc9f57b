"""The claims plan (issue 56): power arithmetic against independent computations, blocker
classification on small synthetic claims tables, the ranking of run units, the frozen output,
and REPORT's section with and without a frozen plan, whether a model-blocked claim's remedy is
known, known not to be one, or untested (synthetic probes, then the committed probes and reports).
No model is called."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from kgrag_lib.errors import ConfigError
from kgrag_lib.eval.paired import paired_test
from kgrag_lib.eval.power import n_for_power, n_for_power_discordant, power_discordant, power_paired
from kgrag_lib.report import plan as P
from kgrag_lib.report import preregistration as R
from kgrag_lib.report.tables import to_markdown


# ------------------------------------------------------------------ power arithmetic


@pytest.mark.parametrize("delta,sd,alpha", [(10, 40, 0.05), (5, 30, 0.05 / 19), (-8, 25, 0.01), (20, 45, 0.05 / 25)])
def test_n_for_power_matches_the_two_sided_z_test_solved_independently(delta, sd, alpha):
    from scipy.optimize import brentq

    z = norm.ppf(1 - alpha / 2)
    two_sided = lambda n: norm.sf(z - abs(delta) * math.sqrt(n) / sd) + norm.cdf(-z - abs(delta) * math.sqrt(n) / sd)
    exact_n = brentq(lambda n: two_sided(n) - 0.8, 0.5, 1e7)
    want = math.ceil(exact_n - 1e-9)
    assert n_for_power(delta, sd, alpha) == want
    assert power_paired(delta, sd, want, alpha) == pytest.approx(two_sided(want), abs=1e-12)
    assert power_paired(delta, sd, want - 1, alpha) < 0.8 <= power_paired(delta, sd, want, alpha)
    # the textbook closed form, ((z_a + z_b) sd / delta)^2, is the same n up to the far tail
    assert abs(want - ((z + norm.ppf(0.8)) * sd / delta) ** 2) < 1.01


@pytest.mark.parametrize("p_a,p_b,alpha", [(0.20, 0.08, 0.05), (0.30, 0.10, 0.05 / 19), (0.05, 0.15, 0.01)])
def test_discordant_n_matches_connor_and_simulation(p_a, p_b, alpha):
    # Connor (1987), written out here on its own
    psi, d = p_a + p_b, p_a - p_b
    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(0.8)
    want = math.ceil((za * math.sqrt(psi) + zb * math.sqrt(psi - d * d)) ** 2 / d ** 2)
    n = n_for_power_discordant(p_a, p_b, alpha)
    assert n == want
    # the z form of McNemar's test at that n, simulated, has about the planned power
    rng = np.random.default_rng(0)
    cells = rng.multinomial(n, [p_a, p_b, 1 - psi], size=4000)
    b, c = cells[:, 0], cells[:, 1]
    z = np.abs(b - c) / np.sqrt(np.maximum(b + c, 1))
    assert abs(float((z > za).mean()) - 0.8) < 0.05
    assert power_discordant(p_a, p_b, n, alpha) >= 0.8 > power_discordant(p_a, p_b, n - 1, alpha)


def test_power_refuses_bad_input():
    with pytest.raises(ValueError, match="delta=0"):
        n_for_power(0.0, 10.0, 0.05)
    with pytest.raises(ValueError, match="alpha"):
        n_for_power(5.0, 10.0, 1.5)
    with pytest.raises(ValueError, match="power"):
        n_for_power_discordant(0.2, 0.1, 0.05, power=80)
    with pytest.raises(ValueError, match="p_a = p_b"):
        n_for_power_discordant(0.1, 0.1, 0.05)
    with pytest.raises(ValueError, match="discordant shares"):
        n_for_power_discordant(0.7, 0.6, 0.05)


def test_discordant_counts_recovered_from_a_mcnemar_result():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(20, 120))
        a = (rng.random(n) < rng.uniform(0.2, 0.8)).astype(float)
        b = np.where(rng.random(n) < 0.6, a, 1 - a)
        r = paired_test(a, b, n_boot=200)
        got = P.discordant_from_p(n, r.mean_a - r.mean_b, r.p_value)
        if r.a_only == r.b_only:
            assert got is None
        else:
            assert got == (r.a_only, r.b_only)


def test_effect_from_a_sign_flip_row_reads_the_sd_from_its_interval():
    rng = np.random.default_rng(1)
    a, b = rng.random(200), rng.random(200) * 0.8
    r = paired_test(a, b, n_boot=2000)
    row = {"n_pairs": r.n, "ours_a": r.mean_a, "ours_b": r.mean_b, "ci95": list(r.ci95), "p_value": r.p_value,
           "test": r.test, "metric": "avg"}
    eff = P.effect_from_row(row, "own run")
    assert eff.delta == pytest.approx(r.mean_a - r.mean_b)
    assert eff.sd == pytest.approx(100 * float(np.std(a - b, ddof=1)), rel=0.15)
    assert P.effect_from_row({**row, "ours_a": 10.0, "ours_b": 10.0}, "x").n_needed(0.05, 0.8) == math.inf


def test_shared_questions_follows_the_sampler_and_is_not_nested():
    total = 354
    draw = lambda n: set(np.random.default_rng(0).choice(total, size=n, replace=False).tolist())
    assert P.shared_questions(30, 100, total) == len(draw(30) & draw(100))
    assert P.shared_questions(30, 100, total) < 30          # a larger sample does not contain the smaller one
    assert P.shared_questions(50, 50, total) == 50
    assert P.shared_questions(0, 50, total) == 0


# ------------------------------------------------------------------ classification and ranking

M05, M15 = "small-0.5b", "small-1.5b"


def _row(claim, dataset, verdict, a, b, n, p, notebook, metric="em", test="mcnemar (exact)"):
    return {"claim": claim, "dataset": dataset, "metric": metric, "n_pairs": n, "ours_a": a, "ours_b": b,
            "ci95": [a - b - 10, a - b + 10], "p_value": p, "test": test, "verdict": verdict, "notebook": notebook}


def _registry():
    rows = [("tcr_qf", "c1.x.2wiki.tog", "2wiki", ">"), ("tcr_qf", "c1.x.hotpotqa.tog", "hotpotqa", ">"),
            ("tcr_qf", "c2.y.2wiki", "2wiki", ">"), ("tcr_qf", "c2.z.2wiki", "2wiki", ">"),
            ("tcr_qf", "c2.w.2wiki", "2wiki", ">"), ("kg_infused", "table2.self-rag-kg-infused.r2.2wiki", "2wiki", ">"),
            ("kg_infused", "t1.q.musique", "musique", ">"), ("kg_infused", "t1.q.2wiki", "2wiki", ">"),
            ("kg_infused", "table21.s.r1.2wiki", "2wiki", ">"), ("kg_infused", "t1.retrieval_over_nor.musique", "musique", ">"),
            ("kg_infused", "t1.retrieval_over_nor.bamboogle", "bamboogle", ">")]
    return pd.DataFrame([{"paper": p, "claim": c, "table": "Table 1", "dataset": d, "relation": r, "a": "tcr-qf",
                          "b": "tog", "metric": "em"} for p, c, d, r in rows])


def _runs(model, notebook="41_tcr_qf_main", secs=(10.0, 20.0)):
    return pd.DataFrame([{"notebook": notebook, "dataset": "2wiki", "model": model, "method": m, "n": 30, "kg": None,
                          "split": "dev200", "llm_seconds_per_q": s} for m, s in zip(("tcr-qf", "tog"), secs)])


def _outcomes():
    c05 = pd.DataFrame([
        _row("c1.x.2wiki.tog", "2wiki", "not testable at this model (mechanism ran for 13 of 30)", 30, 20, 30, 0.3,
             "41_tcr_qf_main"),
        _row("c2.y.2wiki", "2wiki", "not separable at this n", 40, 30, 30, 0.39, "42_tcr_qf_ablation"),
        _row("c2.z.2wiki", "2wiki", "confirmed", 60, 20, 30, 0.001, "42_tcr_qf_ablation"),
        _row("c2.w.2wiki", "2wiki", "not separable at this n", 40, 30, 30, 0.39, "42_tcr_qf_ablation"),
        _row("t1.q.2wiki", "2wiki", "not testable with the data here", 40, 30, 100, 0.2, "21_kg_infused_main",
             metric="avg", test="sign-flip permutation")])
    c15 = pd.DataFrame([
        _row("c2.z.2wiki", "2wiki", "not separable at this n", 40, 30, 30, 0.39, "42_tcr_qf_ablation"),
        _row("c2.w.2wiki", "2wiki", "not testable at this model (mechanism ran for 2 of 30)", 40, 30, 30, 0.39,
             "42_tcr_qf_ablation")])
    runs05 = pd.concat([_runs(M05), _runs(M05, "42_tcr_qf_ablation", (5.0, 5.0))], ignore_index=True)
    runs15 = _runs(M15, "42_tcr_qf_ablation", (15.0, 15.0))
    return [P.Outcomes("r/ref", M05, c05, runs05), P.Outcomes("r/ref-1.5b", M15, c15, runs15)]


def test_blockers_follow_the_reports_and_the_not_run_reasons():
    plan = P.build_plan(_outcomes(), P.PlanConfig(results=("a",)), reg=_registry())
    status = dict(zip(plan.claims["claim"], plan.claims["status"]))
    assert status["c2.z.2wiki"] == P.VERDICT                 # confirmed at one model, not separable at the other
    assert status["c2.y.2wiki"] == P.N
    assert status["c2.w.2wiki"] == P.N                       # n at 0.5B outranks the model block at 1.5B
    assert status["c1.x.2wiki.tog"] == P.MODEL               # the parse failed at 0.5B ...
    assert status["c1.x.hotpotqa.tog"] == P.NOT_RUN          # ... never run on HotpotQA
    assert status["table2.self-rag-kg-infused.r2.2wiki"] == P.MODEL   # Self-RAG's own 7B
    assert status["t1.q.musique"] == P.DATA                  # no KG holds MuSiQue's facts
    # held out at the committed run, but notebook 21 now runs the full 2Wiki KG: not run there, planned
    assert status["t1.q.2wiki"] == P.NOT_RUN and "2wiki-evidence-full" in dict(zip(plan.claims["claim"],
                                                                              plan.claims["evidence"]))["t1.q.2wiki"]
    assert status["table21.s.r1.2wiki"] == P.DATA             # never run, and its only 2Wiki KG is held out
    assert status["t1.retrieval_over_nor.musique"] == P.NOT_RUN   # needs a corpus, not a KG
    assert status["t1.retrieval_over_nor.bamboogle"] == P.DATA    # Bamboogle ships no corpus
    planned = dict(zip(plan.claims["claim"], plan.claims["planned"]))
    # a model block seen only at another model than the planned one (1.5B) is a remedy the plan runs
    assert planned["c1.x.2wiki.tog"] and planned["c1.x.hotpotqa.tog"] and planned["c2.y.2wiki"]
    assert not planned["table2.self-rag-kg-infused.r2.2wiki"] and not planned["t1.q.musique"]
    assert not planned["c2.z.2wiki"]
    src = dict(zip(plan.claims["claim"], plan.claims["effect_source"]))
    assert src["c1.x.hotpotqa.tog"].startswith("the same claim on 2wiki")
    assert src["c2.y.2wiki"].startswith(f"own run ({M05}")
    # m: the TCR-QF claims a test decided or the plan runs (all five); the KG-Infused data claim that carries a p
    assert plan.meta["m"]["tcr_qf"] == 5 and plan.meta["m"]["kg_infused"] == 2   # + retrieval_over_nor.musique
    counts = dict(zip(plan.blocker_counts["status"], plan.blocker_counts["claims"]))
    assert counts == {"verdict": 1, "n": 2, "data": 3, "model": 2, "not run": 3}


def test_units_are_capped_costed_and_ranked_by_verdicts_per_core_hour():
    plan = P.build_plan(_outcomes(), P.PlanConfig(results=("a",)), reg=_registry())
    u = plan.units
    assert list(u["rank"]) == list(range(1, len(u) + 1))
    vals = list(u["verdicts_per_core_hour"])
    assert vals == sorted(vals, reverse=True)
    assert (u["n"] <= u["available"]).all()                  # 2Wiki dev200 and HotpotQA's 500 cap the n
    c = plan.claims.set_index("claim")
    for rec in u.to_dict("records"):
        mine = c[(c["notebook"] == rec["notebook"]) & (c["dataset"] == rec["dataset"]) & c["planned"]]
        assert rec["expected_verdicts"] == pytest.approx(mine["power"].sum(), abs=0.02)
        assert (mine["planned_n"] == rec["n"]).all()
    abl = u[u["notebook"] == "42_tcr_qf_ablation"].iloc[0]
    # the ablation ran at the planned model: 15 + 15 LLM seconds a question, plus nothing to build
    assert abl["llm_s_per_q"] == pytest.approx(30.0)
    assert abl["core_hours"] == pytest.approx(2 * 30.0 * abl["n"] / 3600, abs=0.01)
    main = u[u["notebook"] == "41_tcr_qf_main"]
    # only 0.5B ran notebook 41: priced at its seconds times the 1.5B / 0.5B ratio of the ablation (15 / 5)
    assert main["llm_s_per_q"].iloc[0] == pytest.approx(30.0 * 3.0)


def test_a_unit_only_another_model_ran_is_priced_from_its_tokens_at_the_planned_models_throughput(tmp_path):
    """With the planned model's committed answers (its LLM cache), a unit only another model ran is priced
    from that model's requests and tokens per question at the fitted rates, not its seconds x the median
    ratio (which comes from short answers and under-prices generation-bound work)."""
    import gzip

    folder = tmp_path / "ref-1.5b"
    (folder / "llm-cache").mkdir(parents=True)
    rng = np.random.default_rng(0)
    with gzip.open(folder / "llm-cache" / "part-0000.jsonl.gz", "wt", encoding="utf-8") as fh:
        for i in range(80):   # 0.5 s a request, 0.01 s a prompt token, 0.1 s a completion token
            p_tok, c_tok = int(rng.integers(50, 900)), int(rng.integers(1, 600))
            fh.write(json.dumps({"key": f"{i:064x}", "identity": "id-15", "prompt_tokens": p_tok,
                                 "completion_tokens": c_tok, "seconds": 0.5 + 0.01 * p_tok + 0.1 * c_tok}) + "\n")
        fh.write(json.dumps({"key": "f" * 64, "identity": "id-15", "prompt_tokens": 10, "completion_tokens": 10,
                             "seconds": 5000.0}) + "\n")   # a paused run: left out of the fit
        fh.write(json.dumps({"key": "e" * 64, "identity": "another", "prompt_tokens": 10, "completion_tokens": 10,
                             "seconds": 99.0}) + "\n")     # another model's answer: not the planned one's
    outs = _outcomes()
    outs[1] = P.Outcomes(str(folder), M15, outs[1].claims, outs[1].runs.assign(llm_identity="id-15"))
    tokens = {"llm_requests_per_q": 2.0, "llm_total_prompt_tokens_per_q": 1000.0, "llm_total_completion_tokens_per_q": 300.0}
    outs[0] = P.Outcomes(outs[0].folder, M05, outs[0].claims, outs[0].runs.assign(**tokens))
    outs[0].builds.append({"notebook": "40_tcr_qf_kg_construction", "dataset": "2wiki", "model": M05, "passages": 10,
                           "questions": 5, "seconds_this_build": 100.0, "llm_requests": 10, "prompt_tokens": 4000,
                           "completion_tokens": 5000})
    tp = P.fit_throughput(outs, M15)
    assert tp.answers == 80
    assert (tp.per_request, tp.per_prompt_token, tp.per_completion_token) == pytest.approx((0.5, 0.01, 0.1), abs=1e-4)
    plan = P.build_plan(outs, P.PlanConfig(results=("a",)), reg=_registry())
    main = plan.units[plan.units["notebook"] == "41_tcr_qf_main"].iloc[0]
    # 0.5B's two runs of notebook 41, each 2 requests, 1,000 prompt and 300 completion tokens a question
    assert main["llm_s_per_q"] == pytest.approx(2 * (2 * 0.5 + 1000 * 0.01 + 300 * 0.1), abs=0.1)
    assert "tokens at the planned model's throughput" in main["cost_source"]
    # its KG: 0.5B's build (10 requests, 4,000 + 5,000 tokens for 10 passages, 2 a question) at 1.5B's rates
    assert main["kg_build_s_per_q"] == pytest.approx((10 * 0.5 + 4000 * 0.01 + 5000 * 0.1) / 10 * 2, abs=0.1)
    assert plan.meta["throughput"]["answers"] == 80 and "fitted over 80" in plan.to_markdown()
    # without the planned model's cache: the ratio, as before (the plan frozen on 2026-12-07 was priced so)
    assert P.fit_throughput(_outcomes(), M15) is None


def test_freeze_writes_json_and_markdown_with_the_commit(tmp_path):
    plan = P.build_plan(_outcomes(), P.PlanConfig(results=("a",)), reg=_registry())
    js, md = P.freeze(plan, tmp_path / "claims-plan")
    assert js.name == f"{plan.meta['made'][:10]}.json" and md.suffix == ".md" and js.stem == md.stem
    data = json.loads(js.read_text(encoding="utf-8"))
    assert data["commit"] == plan.meta["commit"] and "commit" in data
    assert {r["claim"] for r in data["claims"]} == set(_registry()["claim"])
    assert [u["rank"] for u in data["units"]] == list(plan.units["rank"])
    text = md.read_text(encoding="utf-8")
    assert text.startswith("# The claims plan") and "Run units" in text


def test_a_plan_frozen_that_day_is_never_written_over(tmp_path, capsys, monkeypatch):
    """Issue 59, probed: `report.plan --freeze DIR` run twice the same day replaced the frozen plan
    (exit 0), so a plan could be re-frozen after results were seen with no trace. Now refused, by
    `freeze` and by the command before it makes the plan; `--probes ""` is refused like the other
    blank values (it silently meant "read no probe")."""
    plan = P.build_plan(_outcomes(), P.PlanConfig(results=("a",)), reg=_registry())
    js, md = P.freeze(plan, tmp_path / "claims-plan")
    before = (js.read_bytes(), md.read_bytes())
    with pytest.raises(ConfigError, match=rf"--freeze {tmp_path / 'claims-plan'}: .*{js.name} exists, a plan frozen "
                                          rf"on {js.stem}; a frozen plan is never written over"):
        P.freeze(plan, tmp_path / "claims-plan")
    md.unlink()   # half of one left (a hand removal): still refused, naming what is there
    with pytest.raises(ConfigError, match=rf"{js.name} exists"):
        P.freeze(plan, tmp_path / "claims-plan")
    assert js.read_bytes() == before[0]
    P.freeze(plan, tmp_path / "another")
    monkeypatch.setattr(P, "make_plan", lambda config: pytest.fail("the plan was made before --freeze was checked"))
    monkeypatch.setattr(P.time, "strftime", lambda fmt, t=None: js.stem if fmt == "%Y-%m-%d" else time.strftime(fmt))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "REPORT.md").write_text("x")
    for argv, says in ((["--freeze", str(tmp_path / "claims-plan")], "a frozen plan is never written over"),
                       (["--probes", ""], "--probes '' is empty")):
        assert P.main([*argv, "--results", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _md(df, digits=1):
    return to_markdown(df, digits=digits) if not df.empty else "(none)"


def test_report_section_without_and_with_a_frozen_plan(tmp_path):
    root = tmp_path / "reference"
    root.mkdir()
    claims = pd.DataFrame([{"claim": "c2.y.2wiki", "metric": "em", "n_pairs": 120, "verdict": "confirmed"}])
    runs = pd.DataFrame([{"notebook": "42_tcr_qf_ablation", "dataset": "2wiki", "model": M15, "n": 120}])
    text = "\n".join(R.report_section(root, claims, runs, M15, _md))
    assert R.TITLE in text and "No claims plan is frozen" in text

    plan = P.build_plan(_outcomes(), P.PlanConfig(results=("a",)), reg=_registry())
    P.freeze(plan, tmp_path / "claims-plan")
    text = "\n".join(R.report_section(root, claims, runs, M15, _md))
    assert "No claims plan is frozen" not in text
    assert "c2.y.2wiki" in text and "c1.x.hotpotqa.tog" in text and "t1.q.musique" in text
    assert "c2.z.2wiki" not in text                            # it had its verdict when the plan was frozen
    blockers = text.split("by blocker")[1]
    assert "| n " in blockers and "| data " in blockers
    unit = next(line for line in text.splitlines() if "42_tcr_qf_ablation" in line)
    assert "| 120 " in unit                                    # n now beside the planned n
    assert R.SPENT not in text                                 # no LLM cache: no spent column
    # with the cache's seconds: the unit's distinct requests (k1 once) and its KG's extraction (k3), on 2 cores;
    # another dataset's KG (k4) is not this unit's
    runs = runs.assign(requests=[("k1", "k1", "k2")])
    secs = {"k1": 900.0, "k2": 900.0, "k3": 1800.0, "k4": 3600.0}
    built = {("42_tcr_qf_ablation", "2wiki"): {"k3"}, ("42_tcr_qf_ablation", "hotpotqa"): {"k4"}}
    assert R.spent_core_hours(runs, "42_tcr_qf_ablation", "2wiki", secs, built) == 2.0
    assert R.spent_core_hours(runs.assign(requests=[None]), "42_tcr_qf_ablation", "2wiki", secs, built) is None
    text = "\n".join(R.report_section(root, claims, runs, M15, _md, secs, built))
    header = next(line for line in text.splitlines() if line.startswith("| rank"))
    unit = next(line for line in text.splitlines() if "42_tcr_qf_ablation" in line)
    cells = [c.strip() for c in unit.split("|")]
    assert cells[[c.strip() for c in header.split("|")].index(R.SPENT)] == "2.00"


def test_registry_counts_every_papers_claims():
    reg = P.registry()
    assert reg["claim"].is_unique
    assert set(reg["paper"]) == {"metaqa", "kg_infused", "sa_rag", "tcr_qf"}
    assert set(reg["relation"]) <= {">", "<", "~"}
    assert P.claim_key("c1.tcr_qf_over_baselines.hotpotqa.tog", "hotpotqa") == \
        P.claim_key("c1.tcr_qf_over_baselines.2wiki.tog", "2wiki")
    assert P.claim_key("exp2.kg_helps_1hop", "metaqa-1hop") == P.claim_key("exp2.kg_helps_2hop", "metaqa-2hop")
    # the paper's printed numbers: TCR-QF over ToG on 2Wiki, Table 1 EM 59.8 vs 40.0
    a, b, where = P.paper_values("tcr_qf", "c1.tcr_qf_over_baselines.2wiki.tog", "2wiki", "tcr-qf", "tog", "em")
    assert (a, b) == (59.8, 40.0) and "Table 1" in where
    assert P.paper_values("metaqa", "exp2.kg_helps_1hop", "metaqa-1hop", "llm-kg", "llm", "hit1") is None


def test_report_markdown_carries_the_section(tmp_path):
    from kgrag_lib.report.study import StudyResults, report_markdown

    root = tmp_path / "reference"
    root.mkdir()
    text = report_markdown(StudyResults(root), "p")
    assert R.TITLE in text and "No claims plan is frozen" in text
    P.freeze(P.build_plan(_outcomes(), P.PlanConfig(results=("a",)), reg=_registry()), tmp_path / R.PLAN_DIR)
    text = report_markdown(StudyResults(root), "p")
    assert "No claims plan is frozen" not in text and "c1.x.hotpotqa.tog" in text


def test_the_command_refuses_a_folder_without_a_report(tmp_path, capsys):
    assert P.main(["--results", str(tmp_path / "nowhere")]) == 2
    assert "holds no REPORT.md" in capsys.readouterr().err
    with pytest.raises(Exception, match="alpha"):
        P.PlanConfig(alpha=2.0)


# ------------------------------------------------------------------ remedies at the planned model

SA_NB, TCR_NB, KGI_NB = "31_sa_rag_main", "41_tcr_qf_main", "24_retrieval_recall"


def _remedy_registry():
    rows = [("tcr_qf", "c1.x.2wiki.tog", "2wiki", "em"),              # answer line failed at 0.5B
            ("sa_rag", "c2.s.2wiki.naive", "2wiki", "correct"),       # the judge failed at 0.5B
            ("sa_rag", "c2.s.musique.naive", "musique", "correct"),   # never run; would need the judge
            ("sa_rag", "c2.f.2wiki.naive", "2wiki", "f1"),            # F1: no judge, activation failed at 0.5B
            ("kg_infused", "t4.k.2wiki", "2wiki", "recall@6")]        # subgraph failed at 0.5B
    # SA-RAG's sides as its registry names them, so the judged claims plan from the paper's printed numbers
    sides = {"sa_rag": (("sa-rag-cot", None), ("naive-rag", 5))}
    return pd.DataFrame([{"paper": p, "claim": c, "table": "T", "dataset": d, "relation": ">",
                          "a": sides.get(p, ("x", "y"))[0], "b": sides.get(p, ("x", "y"))[1], "metric": m}
                         for p, c, d, m in rows])


def _remedy_outcomes():
    dead = "not testable at this model (mechanism ran for 9 of 30)"
    c05 = pd.DataFrame([
        _row("c1.x.2wiki.tog", "2wiki", dead, 40, 25, 30, 0.1, TCR_NB),
        _row("c2.s.2wiki.naive", "2wiki", P.JUDGE_UNINFORMATIVE, 90, 80, 30, 0.4, SA_NB, metric="correct"),
        _row("c2.f.2wiki.naive", "2wiki", dead, 35, 25, 30, 0.2, SA_NB, metric="f1", test="sign-flip permutation"),
        _row("t4.k.2wiki", "2wiki", dead, 50, 40, 30, 0.2, KGI_NB, metric="recall@6", test="sign-flip permutation")])
    runs = pd.concat([_runs(M05, TCR_NB), _runs(M05, SA_NB, (8.0, 4.0)), _runs(M05, KGI_NB, (3.0, 3.0))],
                     ignore_index=True)
    return [P.Outcomes("r/ref", M05, c05, runs), P.Outcomes("r/ref-1.5b", M15, pd.DataFrame(), _runs(M15, TCR_NB))]


def _finding(mech, works, model=M15):
    return P.ProbeFinding(mech, model, works, f"{mech} probe figures", f"probe/{mech[:6]}")


def _plan(probes):
    return P.build_plan(_remedy_outcomes(), P.PlanConfig(results=("a",)), reg=_remedy_registry(), probes=probes)


def test_a_probe_that_saw_the_mechanism_run_at_the_planned_model_makes_it_a_known_remedy():
    probes = [_finding(P.ANSWER_LINE, True), _finding(P.ANSWER_LINE, False, model=M05)]   # 0.5B's finding is beside the point
    c = _plan(probes).claims.set_index("claim")
    r = c.loc["c1.x.2wiki.tog"]
    assert r["status"] == P.MODEL and r["remedy"] == P.KNOWN_REMEDY and r["planned"]
    assert "probe/TCR-QF" in r["evidence"] and f"known remedy at {M15}" in r["evidence"]
    assert r["power"] > 0 and r["planned_n"] > 0


def test_a_probe_that_saw_the_mechanism_fail_at_the_planned_model_blocks_the_claim_there():
    with_judge = _plan([_finding(P.JUDGE, False)])
    c = with_judge.claims.set_index("claim")
    for cid in ("c2.s.2wiki.naive", "c2.s.musique.naive"):   # blocked at 0.5B, and never run: both need the judge
        r = c.loc[cid]
        assert r["status"] == P.MODEL and r["remedy"] == P.NOT_A_REMEDY and not r["planned"]
        assert "not a remedy at" in r["evidence"] and "probe/the co" in r["evidence"]
        assert pd.isna(r["power"]) and pd.isna(r["planned_n"])
    assert c.loc["c2.s.musique.naive", "at"].startswith(M15)
    # SA-RAG's F1 claim needs no judge: still planned, its activation untested at the planned model
    assert c.loc["c2.f.2wiki.naive", "planned"] and c.loc["c2.f.2wiki.naive", "remedy"] == P.UNTESTED
    # the unit's expected verdicts count only the claims it can decide: the F1 one
    unit = with_judge.units[(with_judge.units["notebook"] == SA_NB) & (with_judge.units["dataset"] == "2wiki")].iloc[0]
    assert unit["claims"] == 1
    assert unit["expected_verdicts"] == pytest.approx(c.loc["c2.f.2wiki.naive", "power"], abs=0.01)
    assert "musique" not in set(with_judge.units["dataset"])
    # without the probe the judged claim is an untested remedy and its power is counted
    untested = _plan(None)
    u0 = untested.units[(untested.units["notebook"] == SA_NB) & (untested.units["dataset"] == "2wiki")].iloc[0]
    assert u0["claims"] == 2 and u0["expected_verdicts"] > unit["expected_verdicts"] + 0.05
    assert untested.claims.set_index("claim").loc["c2.s.2wiki.naive", "effect_source"].startswith("the paper's")
    assert untested.meta["m"]["sa_rag"] > with_judge.meta["m"]["sa_rag"]   # alpha / m no longer spent on them


def test_a_model_block_without_a_probe_at_the_planned_model_is_planned_as_untested():
    plan = _plan([_finding(P.KG_SUBGRAPH, True, model=M05), _finding(P.ANSWER_LINE, True)])
    r = plan.claims.set_index("claim").loc["t4.k.2wiki"]
    assert r["status"] == P.MODEL and r["remedy"] == P.UNTESTED and r["planned"]
    assert f"untested at the planned model ({M15})" in r["evidence"]
    assert plan.units["notebook"].eq(KGI_NB).any()
    # a never-run claim whose mechanism no probe saw fail stays `not run` and planned, with no remedy to name
    r = plan.claims.set_index("claim").loc["c2.s.musique.naive"]
    assert r["status"] == P.NOT_RUN and r["planned"] and r["remedy"] == ""
    md = plan.to_markdown()
    assert f"KG-Infused RAG's subgraph at `{M05}` runs" in md 
    header = md.split("## Every registered claim")[1].strip().splitlines()[0]
    assert [h.strip() for h in header.strip("|").split("|")][8] == "remedy"


def test_read_probes_reads_the_judge_the_answer_probe_and_run_folders(tmp_path):
    (tmp_path / "judge").mkdir()
    runs = [{"model": m, "run": r, "summary": {"judge_informative": ok, "control_wrong_accepted": 20.0,
                                               "no_overlap_accepted": 70.0 if not ok else 10.0, "no_overlap_n": 12}}
            for m, r, ok in ((M15, "naive-rag", True), (M15, "sa-rag", False), (M05, "naive-rag", True))]
    (tmp_path / "judge" / "summary.json").write_text(json.dumps({"runs": runs}))
    (tmp_path / "answer").mkdir()
    (tmp_path / "answer" / "summary.json").write_text(json.dumps({"models": [
        {"model": M05, "questions": 20, "read": 9}, {"model": M15, "questions": 20, "read": 10}]}))
    run = tmp_path / "kgi-x"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"config": {"run": {"method": "kg-infused", "dataset": "2wiki",
                                                                       "model": M15}}}))
    (run / "questions.jsonl").write_text("\n".join(json.dumps(
        {"qid": str(i), "issues": [], "mechanism": {"subgraph_triples": int(i < 7), "qe_changed": True}})
        for i in range(20)) + "\n")
    got = {(f.mechanism, f.model): f for f in P.read_probes(tmp_path)}
    assert not got[(P.JUDGE, M15)].works                      # one of its runs was uninformative
    assert got[(P.JUDGE, M05)].works
    assert "70% of 12" in got[(P.JUDGE, M15)].detail
    assert not got[(P.ANSWER_LINE, M05)].works and got[(P.ANSWER_LINE, M15)].works   # 9 < 20 / 2 <= 10
    kg = got[(P.KG_SUBGRAPH, M15)]
    assert not kg.works and "7 of 20" in kg.detail and kg.source == str(run)
    (tmp_path / "answer" / "summary.json").write_text("{not json")
    with pytest.raises(P.ConfigError, match="answer/summary.json"):
        P.read_probes(tmp_path)
    with pytest.raises(P.ConfigError, match="probes"):
        P.read_probes(tmp_path / "nowhere")


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def committed_plan():
    """The plan of the committed results folders and probes, made once for the tests that only read it (making
    it reads every results folder: about 10 s on a busy 2-core machine)."""
    folders = tuple(str(ROOT / f) for f in P.DEFAULT_RESULTS)
    return P.make_plan(P.PlanConfig(results=folders, probes=str(ROOT / P.DEFAULT_PROBES)))


def test_committed_probes_keep_sa_rag_judged_claims_out_of_the_1_5b_plan(committed_plan):
    plan = committed_plan
    assert plan.meta["planned_model"] == "qwen2.5-coder-1.5b-q4"
    c = plan.claims
    judged = c[(c["paper"] == "sa_rag") & (c["metric"] == "correct")]
    assert len(judged) > 0
    assert not judged["planned"].any() and (judged["status"] == P.MODEL).all()
    assert (judged["remedy"] == P.NOT_A_REMEDY).all() and judged["evidence"].str.contains("judge/summary.json").all()
    assert not (plan.units["notebook"] == SA_NB).any()        # no SA-RAG unit left to run at 1.5B
    # TCR-QF's answer line and KG-Infused RAG's subgraph run at 1.5B: their model-blocked claims are planned
    tcr_kgi = c[c["paper"].isin(["tcr_qf", "kg_infused"]) & (c["remedy"] != "")]
    assert len(tcr_kgi) > 0 and (tcr_kgi["remedy"] == P.KNOWN_REMEDY).all() and tcr_kgi["planned"].all()


def test_without_a_full_kg_notebook_a_held_out_2wiki_claim_stays_blocked_by_the_data():
    plan = P.build_plan(_outcomes(), P.PlanConfig(results=("a",), full_kg_notebooks=()), reg=_registry())
    row = plan.claims.set_index("claim").loc["t1.q.2wiki"]
    assert row["status"] == P.DATA and not row["planned"]


def test_an_equivalence_claim_is_planned_by_tost_inside_the_margin_and_by_refutation_beyond_it():
    from kgrag_lib.eval.power import n_for_equivalence, n_for_power

    inside = P.Effect(2.0, "own run", sd=20.0)
    n, what = inside.equivalence_n(5.0, 0.01, 0.8)
    assert n == n_for_equivalence(5.0, 20.0, 0.01, 0.8, diff=2.0) and "TOST" in what
    assert inside.equivalence_power(int(n), 5.0, 0.01) >= 0.8 > inside.equivalence_power(int(n) - 5, 5.0, 0.01)
    beyond = P.Effect(-9.0, "own run", sd=20.0)
    n, what = beyond.equivalence_n(5.0, 0.01, 0.8)
    assert n == n_for_power(4.0, 20.0, 0.01, 0.8) and "refute" in what
    assert P.Effect(5.0, "own run", sd=20.0).equivalence_n(5.0, 0.01, 0.8)[0] == float("inf")
    # 0/1 scores: the sd of the difference from the discordant shares (0.1 and 0.05: sd = 100 sqrt(0.15 - 0.0025))
    assert abs(P.Effect(5.0, "x", p_a=0.10, p_b=0.05).sd_points - 100 * (0.15 - 0.05 ** 2) ** 0.5) < 1e-9


def test_the_frozen_plan_planned_the_placebo_claim_on_the_full_kg_and_its_run_decided_it(committed_plan):
    """The plan frozen before unit 1 (results/claims-plan/2026-12-07.json) planned the placebo claim on
    the full KG from its committed effect; unit 1 has run since, so a plan made today finds a verdict."""
    import json

    frozen = json.loads((ROOT / "results" / "claims-plan" / "2026-12-07.json").read_text(encoding="utf-8"))
    row = next(c for c in frozen["claims"] if c["claim"] == "m1.kg_over_placebo.2wiki")
    assert row["planned"] and row["status"] == P.NOT_RUN and row["notebook"] == "21_kg_infused_main"
    assert "2wiki-evidence-oracle minus 2wiki-evidence-heldout" in row["effect_source"] and row["effect"] > 0
    unit = next(u for u in frozen["units"] if u["notebook"] == "21_kg_infused_main" and u["dataset"] == "2wiki")
    assert unit["kg"].startswith("2wiki-evidence-full") and "placebo arm" in unit["cost_source"] and unit["n"] == 237
    plan = committed_plan
    now = plan.claims.set_index("claim").loc["m1.kg_over_placebo.2wiki"]
    assert now["status"] == "verdict" and not now["planned"]
    # every `~` claim the plan runs has a TOST (or refutation) n
    tilde = plan.claims[plan.claims["planned"] & (plan.claims["relation"] == "~")]
    assert len(tilde) and tilde["note"].str.startswith("equivalence (~): ").all()


def test_the_full_kg_notebooks_are_the_ones_the_reference_profile_runs_on_the_full_kg():
    from kgrag_lib.studies.profiles import load_profile

    books = load_profile("cpu-reference")["notebooks"]
    assert {nb for nb, sec in books.items() if (sec or {}).get("kg") == "2wiki-evidence-full"} == \
        set(P.PlanConfig().full_kg_notebooks)
