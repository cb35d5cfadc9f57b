"""Mechanism health: did the part of a method that a paper's claim is about actually run?

A claim such as "TCR-QF beats ToG" tests the paper only when TCR-QF's mechanism ran on the
questions compared; with a small model it may not (the reasoning output has no `Final Answer:`
line, the query expansion returns the question, the KG holds no fact of the dataset). So every
claim gets, beside its statistical verdict, the health of its mechanism, and the verdict
becomes

- "not testable with the data here" when a side of the claim searches a KG that holds no fact
  of the claim's dataset (`KG_DOMAINS`; e.g. 2Wiki's evidence triples on HotpotQA), a KG built
  without the evaluated questions' own facts (`HELD_OUT_KGS`), or one whose subgraphs never name
  an answer, and
- "not testable at this model (mechanism ran for x of n)" when the mechanism ran for fewer
  than half of the claim's questions.

Health is read from the per-question files a run publishes (`questions.jsonl`: its trace's
`issues` and, for runs made since, a `mechanism` record, `study.compact_rows`) and from the
notebooks' summary rows (SA-RAG's index statistics and judge controls). What a published run
does not record is said as such ("not recorded in the compact results"), never guessed.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from ..eval.metrics import normalize_answer
from ..methods.registry import available_methods
from .kg_infused import paper_numbers as kgi
from .sa_rag import paper_numbers as sar
from .tcr_qf import paper_numbers as tcr

NOT_TESTABLE_DATA = "not testable with the data here"
NOT_TESTABLE_MODEL = "not testable at this model"
NOT_RECORDED = "not recorded in the compact results"

# The datasets whose facts a KG holds: a claim on another dataset that searches it tests nothing.
KG_DOMAINS: dict[str, tuple[str, ...]] = {
    "2wiki-evidence-heldout": ("2wiki",),
    "2wiki-evidence-oracle": ("2wiki",),
    "2wiki-evidence-full": ("2wiki",),
}
# KGs built to leave out the evaluated questions' own facts, which the paper's KG holds (Wikidata5M for
# 2Wiki): a claim on one compares mostly other questions' facts, whatever a count of answers met in
# its subgraphs says (facts other questions share stay in it, so an answer turns up now and then:
# 1 of 87 at 1.5B, n = 100).
HELD_OUT_KGS: dict[str, str] = {
    "2wiki-evidence-heldout": "is built without the evaluated questions' evidence rows (only facts other questions "
                              "share stay; its build's stats.json counts them), which the paper's Wikidata5M holds",
}
# The verdict rule for a KG, fixed before the runs it decides (issue 56) and printed by REPORT: it is
# never changed after a result is seen (a change would be stated there with both readings).
KG_VERDICT_RULE = (
    "A KG-Infused claim on 2wiki-evidence-heldout reads not testable with the data here (that KG lacks the "
    "evaluated questions' own facts, which the paper's Wikidata5M holds); one on 2wiki-evidence-full (every real "
    "2Wiki triple, real passages as seed texts) is testable; and the placebo claim (same method, same questions, "
    "2wiki-evidence-full against 2wiki-evidence-heldout) is testable, its mechanism read on the full KG's side. "
    "Beside a full KG in the same notebook, the held-out KG is the placebo arm, not a claim's own KG. This rule "
    "was stated before any run on 2wiki-evidence-full.")
# Which methods show which mechanism signal is said where each is registered (`MethodSpec.mechanism`):
# "kg-subgraph" (answers resting on the KG they are given: KG-Infused RAG and its ablations),
# "final-answer" (TCR-QF, its ablations and baselines: the answer from a `Final Answer:` line, or a weaker
# form of it, `methods.tcr_qf.prompts.read_answer`; only the last-line fallback counts as not parsed),
# "activation" (SA-RAG and its combinations: spreading activation from seed entities over the LLM-built KG)
# and "decomposition" (a parsed question decomposition).


def methods_with(signal: str) -> tuple[str, ...]:
    """The registered methods whose mechanism `signal` (a key of `methods.base.MECHANISMS`) says theirs ran."""
    return _by_signal().get(signal, ())


def signal_of(method: str) -> str:
    """The mechanism signal of a registered method ("" for none, or a method no longer registered)."""
    return next((sig for sig, names in _by_signal().items() if method in names), "")


@functools.cache
def _by_signal() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for spec in available_methods().values():
        if spec.mechanism:
            out[spec.mechanism] = (*out.get(spec.mechanism, ()), spec.name)
    return out


NO_FINAL_ANSWER = "answer: no 'Final Answer:' line"
DECOMPOSITION_FAILED = "decomposition: fell back to the original question"


def run_rows(folder: str | Path) -> list[dict[str, Any]]:
    """A run folder's per-question rows, published or not: the published `questions.jsonl`, else
    the full `predictions.jsonl`, whose rows get the `mechanism` record their trace gives (as
    `study.compact_rows` would publish it), so an unpublished run's health is read, not reported
    as unrecorded. [] for a folder with neither. The one reader of a run's questions for the
    report's modules that take a run folder (here and `report.plan`)."""
    path = Path(folder) / "questions.jsonl"
    full = not path.is_file()
    if full:
        path = Path(folder) / "predictions.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    if full:
        for r in rows:
            if "mechanism" not in r and isinstance(r.get("trace"), Mapping):
                mech = mechanism_record(r["trace"], r.get("question"), r.get("answers"))
                if mech:
                    r["mechanism"] = mech
    return rows


def _issues(row: Mapping[str, Any]) -> list[str]:
    return [str(i) for i in (row.get("issues") or (row.get("trace") or {}).get("issues") or [])]


def answer_in_triples(triples: Iterable[Any], answers: Iterable[Any] | None) -> bool | None:
    """Does a verbalised triple name a gold answer (normalised as EM normalises, whole words)?
    None when no gold can be looked for: no golds, or yes/no golds, which no triple spells out."""
    golds = [g for g in (normalize_answer(str(a)) for a in answers or []) if g and g not in ("yes", "no")]
    if not golds:
        return None
    texts = [f" {normalize_answer(str(t))} " for t in triples]
    return any(f" {g} " in t for g in golds for t in texts)


def mechanism_record(trace: Mapping[str, Any], question: str | None = None,
                     answers: Iterable[Any] | None = None) -> dict[str, Any]:
    """What a run's trace says about its mechanism, small enough to publish with every question:
    KG-Infused RAG's q' differs from the question, its subgraph size and whether the subgraph
    names a gold answer (the gold-bearing triple was reached); SA-RAG's activated entities beyond
    the seeds; TCR-QF's triples the feedback added. Empty when the trace holds none."""
    out: dict[str, Any] = {}
    spread = _sa_retrievals(trace)
    if spread:   # SA-RAG (and its CoT / decomposition combinations): one retrieval per step
        out["activated_beyond_seeds"] = sum(
            len(set(r.get("activation") or {}) - {s.get("entity") for s in r.get("seeds") or [] if isinstance(s, Mapping)})
            for r in spread)
        return out
    if "expanded_query" in trace and question is not None:
        out["qe_changed"] = bool(trace.get("expanded_query")) and \
            " ".join(str(trace["expanded_query"]).split()).lower() != " ".join(question.split()).lower()
    steps = [st for st in trace.get("steps") or [] if isinstance(st, Mapping)]
    if "activation" not in trace and (any(isinstance(st.get("activation"), Mapping) for st in steps)
                                      or trace.get("variant") == "self-ask-kg-infused"):
        # Self-Ask + KG-Infused RAG: one activation per follow-up question; the KG reached the
        # answer when any follow-up's subgraph holds a triple (none when it asked no follow-up)
        triples = [t for st in steps for t in (st.get("activation") or {}).get("subgraph") or []]
        out["subgraph_triples"] = len(triples)
        _gold_reached(out, triples, answers)
        return out
    act = trace.get("activation")
    if isinstance(act, Mapping) and "subgraph" in act:
        out["subgraph_triples"] = len(act.get("subgraph") or [])
        _gold_reached(out, act.get("subgraph") or [], answers)
        out["activated_beyond_seeds"] = len(set(act.get("activated_entities") or [])
                                            - set(act.get("seed_entities") or []))
    elif isinstance(act, Mapping) and isinstance(trace.get("subgraph"), Mapping):   # SA-RAG: entity -> activation
        out["activated_entities"] = len(act)
    if "kg_added" in trace:
        out["feedback_triples"] = len(trace.get("kg_added") or [])
    return out


def _gold_reached(out: dict[str, Any], triples: list[Any], answers: Iterable[Any] | None) -> None:
    hit = answer_in_triples(triples, answers)
    if hit is not None:
        out["gold_in_subgraph"] = hit


def _sa_retrievals(o: Any) -> list[Mapping[str, Any]]:
    """Every spreading-activation retrieval recorded anywhere in a trace."""
    if isinstance(o, Mapping):
        if o.get("retriever") == "sa":
            return [o]
        return [r for v in o.values() for r in _sa_retrievals(v)]
    if isinstance(o, list):
        return [r for v in o for r in _sa_retrievals(v)]
    return []


GOLD_COLUMN = "gold answer in subgraph"   # of the questions whose golds are not yes/no


def run_health(run: Mapping[str, Any]) -> dict[str, Any]:
    """One run's mechanism health: which signal, for how many of its questions it held (x of n),
    or `NOT_RECORDED` for a method whose signal its published files lack."""
    method = str(run.get("method"))
    rows = run_rows(run["folder"])
    n = len(rows)
    rec = {"notebook": run.get("notebook"), "method": method, "dataset": run.get("dataset"),
           "model": run.get("model"), "kg": run.get("kg"), "n": n, "folder": run.get("folder")}
    signal = signal_of(method)
    if signal == "final-answer":
        x = sum(not any(i.startswith(NO_FINAL_ANSWER) for i in _issues(r)) for r in rows)
        rec.update(signal="final answer parsed", ran=x)
        fb = [r["mechanism"].get("feedback_triples") for r in rows if isinstance(r.get("mechanism"), Mapping)]
        rec["feedback produced triples"] = (f"{sum(1 for v in fb if v)} of {len(fb)}" if fb else NOT_RECORDED)
    elif signal == "decomposition":
        x = sum(not any(i.startswith(DECOMPOSITION_FAILED) for i in _issues(r)) for r in rows)
        rec.update(signal="decomposition parsed", ran=x)
    elif signal == "kg-subgraph":
        mech = [r.get("mechanism") for r in rows if isinstance(r.get("mechanism"), Mapping)]
        mech_ok = bool(mech) and len(mech) == n and all("subgraph_triples" in m for m in mech)
        if mech_ok and method == "kg-qe-only":
            # KG-based query expansion ran when the KG gave a subgraph and q' differs from q
            ran = sum(1 for m in mech if m["subgraph_triples"] and m.get("qe_changed"))
            rec.update(signal="q' != q from a non-empty subgraph", ran=ran,
                       **{"q' != q": f"{sum(bool(m.get('qe_changed')) for m in mech)} of {n}"})
        elif mech_ok:
            qe = [m["qe_changed"] for m in mech if "qe_changed" in m]
            rec.update(signal="subgraph non-empty", ran=sum(1 for m in mech if m["subgraph_triples"]),
                       **{"q' != q": f"{sum(qe)} of {len(qe)}" if qe else "–"})
        else:
            rec.update(signal="q' != q, subgraph non-empty", ran=None, note=NOT_RECORDED)
        if mech_ok:
            gold = [m["gold_in_subgraph"] for m in mech if "gold_in_subgraph" in m]
            rec[GOLD_COLUMN] = f"{sum(gold)} of {len(gold)}" if gold else NOT_RECORDED
    elif signal == "activation":
        mech = [r.get("mechanism") for r in rows if isinstance(r.get("mechanism"), Mapping)]
        if mech and len(mech) == n and all("activated_beyond_seeds" in m for m in mech):
            rec.update(signal="activated beyond seeds", ran=sum(1 for m in mech if m["activated_beyond_seeds"]))
        else:
            rec.update(signal="activated beyond seeds", ran=None, note=NOT_RECORDED)
    else:
        rec.update(signal="", ran=None)
    return rec


def health_table(runs: pd.DataFrame) -> pd.DataFrame:
    """`run_health` of every distinct run whose method has a mechanism signal."""
    if runs.empty:
        return pd.DataFrame()
    recs = [run_health(r) for r in runs.to_dict("records")]
    df = pd.DataFrame([r for r in recs if r.get("signal")])
    if df.empty:
        return df
    df["ran"] = [None if pd.isna(v) else f"{int(v)} of {n}" for v, n in zip(df["ran"], df["n"])]
    return df.drop(columns=["folder"])


def sa_rag_index_health(summaries: Mapping[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """The LLM-built KGs (SA-RAG's index, TCR-QF's text KG) as their statistics give them."""
    rows = [{"notebook": nb, "dataset": r.get("dataset"), "model": r.get("model"), "chunks": r.get("chunks"),
             "entities per chunk": r.get("entities_per_chunk"), "relations per chunk": r.get("relations_per_chunk"),
             "entity nodes": r.get("entity_nodes"), "related_to triples": r.get("related_to_triples")}
            for nb, rs in summaries.items() for r in rs if "relations_per_chunk" in r]
    return pd.DataFrame(rows)


def judge_health(summaries: Mapping[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """Each LLM judge's controls: gold answers accepted, other questions' answers accepted."""
    seen: dict[tuple, dict[str, Any]] = {}
    for nb, rs in summaries.items():
        for r in rs:
            if "judge_informative" in r:
                key = (nb, r.get("dataset"), r.get("judge_model"))
                seen.setdefault(key, {"notebook": nb, "dataset": r.get("dataset"), "judge": r.get("judge_model"),
                                      "gold accepted %": r.get("judge_gold_accepted"),
                                      "wrong accepted %": r.get("judge_wrong_accepted"),
                                      "controls passed": bool(r.get("judge_informative"))})
    return pd.DataFrame(list(seen.values()))


def _claim_sides(claim_id: str) -> tuple[str, ...]:
    """The methods a KG-Infused RAG, SA-RAG or TCR-QF claim compares (from its paper's CLAIMS),
    else (): a claim's testability rests on its own sides' mechanisms, not on every run beside them."""
    cid = str(claim_id)   # "<id>", "<id>@<metric>", "<id>@<kg>"; SA-RAG ids hold "@k5" themselves
    known = {c[0]: c for c in (*kgi.CLAIMS, *getattr(kgi, "PLUGIN_CLAIMS", ()), *kgi.MECHANISM_CLAIMS,
                               *sar.CLAIMS, *tcr.CLAIMS)}
    for base in (cid, cid.rsplit("@", 1)[0], cid.split("@")[0]):
        if base in known:
            c = known[base]
            return tuple(str(s[0] if isinstance(s, tuple) else s) for s in (c[3], c[5]))
    return ()


def _fewest(rows: pd.DataFrame) -> tuple[int, int, str] | None:
    """(x, n, method) of the health row whose mechanism ran for the fewest questions ("x of n"
    as `health_table` writes it), or None when no row records a count."""
    counts = [(int(r.split(" of ")[0]), int(r.split(" of ")[1]), m)
              for r, m in zip(rows.get("ran", []), rows.get("method", [])) if isinstance(r, str)]
    return min(counts) if counts else None


def ran_too_rarely(x: int, n: int) -> bool:
    """The rule of every 'not testable at this model' verdict: the mechanism ran for fewer than half."""
    return x < n / 2


def _dead(x: int, n: int) -> str:
    return f"{NOT_TESTABLE_MODEL} (mechanism ran for {x} of {n})"


def testability(claim: Mapping[str, Any], runs: pd.DataFrame, health: pd.DataFrame) -> tuple[str | None, str]:
    """(verdict that replaces the statistical one or None, the health text shown beside it)."""
    nb, dataset = claim.get("notebook"), claim.get("dataset")
    mine = runs[(runs["notebook"] == nb) & (runs["dataset"] == dataset)] if not runs.empty else runs
    sides = _claim_sides(str(claim.get("claim")))
    kg_methods = methods_with("kg-subgraph")
    on_kg = str(claim.get("claim")).split("@", 1)[1] if "@" in str(claim.get("claim")) else None   # claim@<kg>
    kg_runs = mine[mine["method"].isin([s for s in sides if s in kg_methods])] if sides and "method" in mine \
        else mine.iloc[0:0]
    if on_kg and "kg" in kg_runs:
        kg_runs = kg_runs[kg_runs["kg"] == on_kg]
    for kg in sorted({str(k) for k in kg_runs.get("kg", pd.Series(dtype=str)).dropna()}):
        domain = KG_DOMAINS.get(kg)
        if domain is not None and dataset not in domain:
            return NOT_TESTABLE_DATA, (f"KG {kg} holds facts of {', '.join(domain)} only, none of {dataset}'s "
                                      "questions: the KG side cannot help")
    if health.empty:
        return None, ""
    h = health[(health["notebook"] == nb) & (health["dataset"] == dataset)]
    run = claim.get("verdict") != "not run"
    def compared(methods: tuple[str, ...]) -> pd.DataFrame:   # the claim's own sides among `methods`
        return h[h["method"].isin(methods) & (h["method"].isin(sides) if sides else True)]

    tcr = _fewest(compared(methods_with("final-answer")))
    if tcr and run:
        x, n, m = tcr
        text = f"final answer parsed for {x} of {n} ({m}; fewest among the TCR-QF runs compared)"
        return (_dead(x, n) if ran_too_rarely(x, n) else None), text
    sa = _fewest(compared(methods_with("activation")))
    if sa and run and "sa_rag" in str(claim.get("claim")):
        x, n, m = sa
        text = f"activation spread beyond its seeds for {x} of {n} ({m}; fewest among the SA-RAG runs compared)"
        judged = str(claim.get("verdict")).startswith("not testable")   # the judge's own reason stands
        return (_dead(x, n) if ran_too_rarely(x, n) and not judged else None), text
    # beside a KG that is neither held out nor the oracle (2wiki-evidence-full), a held-out KG is the
    # placebo arm (KG_VERDICT_RULE): no claim's own KG, the placebo claim's included
    kgs_here = {str(k) for k in h[h["method"].isin(kg_methods)].get("kg", pd.Series(dtype=object)).dropna()}
    placebo_arm = any(not k.endswith("oracle") and k not in HELD_OUT_KGS for k in kgs_here)

    def this_kg(r: Mapping[str, Any]) -> bool:   # on the claim's own KG (claim@<kg>; else not the oracle)
        if on_kg:
            return r["kg"] == on_kg
        return not str(r["kg"]).endswith("oracle") and not (placebo_arm and r["kg"] in HELD_OUT_KGS)

    recs = [r for r in h.to_dict("records") if (not sides or r["method"] in sides)]
    kg_recs = [r for r in recs if sides and r["method"] in kg_methods]
    kg_recs = [r for r in kg_recs if isinstance(r.get("kg"), str) and this_kg(r)] or kg_recs
    recs = [r for r in recs if not (sides and r["method"] in kg_methods)] + kg_recs
    parts = [(f"{r['method']}: {r['signal']} {r['ran']}" if isinstance(r.get("ran"), str) else
              f"{r['method']}: {r['signal']} {NOT_RECORDED}")
             + (f", {GOLD_COLUMN} {r[GOLD_COLUMN]}" if " of " in str(r.get(GOLD_COLUMN, "")) else "") for r in recs]
    text = "; ".join(dict.fromkeys(parts))
    # a KG-Infused claim: its KG side's mechanism on the claim's own KG (not the oracle upper bound)
    kg_side = pd.DataFrame(kg_recs)
    kg = _fewest(kg_side)
    if kg and run and ran_too_rarely(kg[0], kg[1]):
        return _dead(kg[0], kg[1]), f"{text} (fewest: {kg[2]})"
    held = sorted({str(k) for k in kg_side.get("kg", pd.Series(dtype=str)).dropna()} & set(HELD_OUT_KGS))
    if held and run:
        return NOT_TESTABLE_DATA, f"{text}: KG {held[0]} {HELD_OUT_KGS[held[0]]}"
    gold = [str(g) for g in kg_side.get(GOLD_COLUMN, pd.Series(dtype=str)).dropna() if " of " in str(g)]
    if gold and run and all(g.startswith("0 of ") and not g.endswith(" of 0") for g in gold):
        # the KG ran but holds no fact naming any answer (a held-out KG by design): what the claim
        # compares is then facts unrelated to the answers, not the paper's KG, which holds them
        kgs = ", ".join(sorted({str(k) for k in kg_side.get("kg", pd.Series(dtype=str)).dropna()}))
        return NOT_TESTABLE_DATA, f"{text}: KG {kgs} holds no fact naming these questions' answers"
    return None, text


def apply_testability(claims: pd.DataFrame, runs: pd.DataFrame, health: pd.DataFrame) -> pd.DataFrame:
    """Claims with a `mechanism` column and, where the claim cannot test the paper, the verdict
    replaced (the statistical one kept as `statistical verdict`)."""
    if claims.empty:
        return claims
    out = claims.copy()
    verdicts, texts = [], []
    for rec in out.to_dict("records"):
        v, text = testability(rec, runs, health)
        verdicts.append(v if v and rec.get("verdict") != "not run" else rec.get("verdict"))
        texts.append(text)
    out["statistical verdict"] = out["verdict"]
    out["verdict"] = verdicts
    out["mechanism"] = texts
    return out


def changed_verdicts(claims: pd.DataFrame) -> list[dict[str, Any]]:
    """Claims whose verdict testability replaced: claim, dataset, metric, old -> new."""
    if claims.empty or "statistical verdict" not in claims:
        return []
    ch = claims[claims["verdict"] != claims["statistical verdict"]]
    return [{"claim": r["claim"], "dataset": r["dataset"], "metric": r.get("metric"),
             "old": r["statistical verdict"], "new": r["verdict"], "why": r["mechanism"]} for r in ch.to_dict("records")]


def kg_domain_note(kg: str, datasets: Any, labels: Mapping[str, str] | None = None) -> str:
    """A figure caption for the datasets whose questions search a KG holding none of their facts
    (`KG_DOMAINS`), so that a reader does not read a KG comparison on them as the paper's; "" when
    every dataset is in the KG's domain or the KG is not listed."""
    domain = KG_DOMAINS.get(str(kg))
    if domain is None:
        return ""
    labels = dict(labels or {})
    off = [labels.get(d, d) for d in dict.fromkeys(datasets) if d not in domain]
    if not off:
        return ""
    return (f"{', '.join(off)}: the KG {kg} holds {', '.join(labels.get(d, d) for d in domain)} facts only, none "
            f"about {'these datasets' if len(off) > 1 else 'this dataset'}'s questions, so KG comparisons there are "
            f"{NOT_TESTABLE_DATA}.")



def tcr_parse_note(health: pd.DataFrame, model: str, labels: Mapping[str, str] | None = None) -> str:
    """A figure caption for TCR-QF figures (Tables 1-2, Figs. 3-4) on the datasets where a TCR-QF
    run parsed a final answer for fewer than half of its questions (`testability`'s rule):
    there the scores are the fallback's, not the mechanism's, so the figure cannot test the paper.
    `health` is `health_table` of the figure's runs; "" when every TCR run parsed enough."""
    if health.empty or "method" not in health:
        return ""
    labels = dict(labels or {})
    parts = []
    for ds, h in health[health["method"].isin(methods_with("final-answer"))].groupby("dataset", sort=False):
        counts = [(int(r.split(" of ")[0]), int(r.split(" of ")[1]), m)
                  for r, m in zip(h["ran"], h["method"]) if isinstance(r, str)]
        low = [(x, n, m) for x, n, m in counts if ran_too_rarely(x, n)]
        if low:
            parts.append(f"{labels.get(ds, ds)}: " + ", ".join(f"{m} {x} of {n}" for x, n, m in low))
    if not parts:
        return ""
    return (f"{NOT_TESTABLE_MODEL}: {model}'s reasoning gave a parseable final answer (a `Final Answer:` line, a 'the answer is' sentence or a leading yes/no) for fewer than half "
            f"of the questions (questions parsed, per run: {'; '.join(parts)}), so these runs' scores are the "
            "fallback answer's, not the TCR-QF mechanism's (mechanism health).")


def grid_runs(reports: Mapping[str, Any], notebook: str, model: str | None = None) -> pd.DataFrame:
    """The runs of a notebook's grids (`{dataset: GridReport}`) as `health_table` takes them:
    method, dataset and the folder whose predictions it reads."""
    return pd.DataFrame([{"notebook": notebook, "method": c.run.method, "dataset": c.dataset, "model": model,
                          "folder": str(c.out)} for rep in reports.values() for c in rep.cells])


def judge_note(judges: pd.DataFrame, labels: Mapping[str, str] | None = None) -> str:
    """A figure caption for a correctness figure whose LLM judge failed its controls
    (`judge_health`): there the bars measure what the judge accepts, not the answers, so they
    are not a measure of correctness; "" when every judge passed."""
    if judges.empty or "controls passed" not in judges:
        return ""
    labels = dict(labels or {})
    bad = judges[~judges["controls passed"].astype(bool)]
    if bad.empty:
        return ""
    parts = [f"{labels.get(r['dataset'], r['dataset'])}: judge {r['judge']} accepted {_pct(r['gold accepted %'])} of "
             f"the gold answers and {_pct(r['wrong accepted %'])} of other questions' answers"
             for r in bad.to_dict("records")]
    return ("Not a measure of correctness: the LLM judge failed its controls (" + "; ".join(parts)
            + "), so these bars show what the judge accepts, not which answers are right.")


def _pct(v: Any) -> str:
    return "–" if v is None or (isinstance(v, float) and pd.isna(v)) else f"{float(v):.0f}%"
