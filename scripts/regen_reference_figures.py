"""Redraw the reference figures that the committed compact results suffice for, without any model.

    PYTHONPATH=. .venv/bin/python scripts/regen_reference_figures.py [results/reference]

Reads each notebook's summary.json and its runs' questions.jsonl (Avg intervals, TCR-QF's
mechanism health) and writes the PNGs into <reference>/figures/, as the notebooks would: 13's error
categories, 21-24, 31's Table 1, 33's recall vs context, 41-43. Figures whose inputs are traces or
training logs (13's sub-question counts, 25's subgraph, 27's curves, 32/33's activations) are not
redrawn here: they need the notebook to run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from kgrag_lib.report import kg_infused as K  # noqa: E402
from kgrag_lib.report import mechanism  # noqa: E402
from kgrag_lib.report import tcr_qf as T  # noqa: E402
from kgrag_lib.report.kg_infused import paper_numbers  # noqa: E402


def _rows(ref: Path, nb: str) -> list[dict]:
    """The notebook's result rows (one per configuration and dataset), Avg interval added from the
    run's questions.jsonl."""
    out = []
    for r in json.loads((ref / nb / "summary.json").read_text(encoding="utf-8")):
        if "variant" not in r or "avg" not in r:
            continue
        folder = str(r["config"]).replace("[", "_").replace("]", "")   # GridRun.folder of the label
        hits = sorted((ref / nb / "runs" / r["dataset"]).glob(f"n{r['n']}_seed*/{folder}/questions.jsonl"))
        if hits:
            qs = [json.loads(x) for x in hits[0].read_text(encoding="utf-8").splitlines() if x.strip()]
            r["avg_ci95"] = K.avg_ci95(qs)
        out.append(r)
    return out


def _save(fig, ref: Path, name: str) -> None:
    path = ref / "figures" / f"{name}.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    print("wrote", path)


def main(ref: Path) -> None:
    datasets = ["2wiki", "hotpotqa"]
    labels = paper_numbers.DATASET_LABELS
    # 21: Table 1
    rows = _rows(ref, "21_kg_infused_main")
    model, kg = rows[0]["model"], rows[0]["kg"]
    note = mechanism.kg_domain_note(kg, datasets, labels)
    main_label = K.round_label("kg-infused", 2)
    fig = K.plot_side_by_side(K.layout(rows, datasets=datasets), K.paper_table1("Qwen2.5-7B", datasets=datasets),
                              metric="Avg", match={main_label: "KG-Infused RAG (w/ 2-Round)"}, rows=rows, note=note,
                              title=f"Table 1 layout: ours ({model}, KG {kg}) vs paper (Qwen2.5-7B)")
    _save(fig, ref, "21_table1_avg")
    # 22: Table 3
    rows = _rows(ref, "22_kg_infused_ablation")
    match = {"Vanilla RAG": "Vanilla RAG (LLaMA3.1-8B)"}
    match.update({K.round_label(v, 2, ablation=True): K.round_label(v, 2, ablation=True) for v in K.ROUND_VARIANTS})
    fig = K.plot_side_by_side(K.layout(rows, datasets=datasets), K.paper_table3(datasets=datasets), metric="Avg",
                              match=match, rows=rows, note=note,
                              title=f"Table 3 layout: ours ({model}, KG {kg}) vs paper (LLaMA3.1-8B, DPO)")
    _save(fig, ref, "22_table3_avg")
    # 23: Figure 2
    rows = _rows(ref, "23_activation_rounds")
    n = {d: next(r["n"] for r in rows if r["dataset"] == d) for d in datasets}
    fig = K.plot_rounds([r for r in rows if r["variant"] in K.ROUND_VARIANTS], metric="avg",
                        baselines=[r for r in rows if r["variant"] in ("vanilla-rag", "vanilla-qe")], note=note,
                        title=f"Score vs activation rounds — {model}, KG {kg}, n per dataset: "
                              + ", ".join(f"{labels[d]} {k}" for d, k in n.items()))
    _save(fig, ref, "23_fig2_rounds")
    # 24: Table 4 (recall rows of the summary: label, dataset label, recall@6, n)
    import pandas as pd

    recs = [r for r in json.loads((ref / "24_retrieval_recall" / "summary.json").read_text(encoding="utf-8"))
            if "recall@6" in r]
    ds_labels = list(dict.fromkeys(r["dataset"] for r in recs))
    ours = pd.DataFrame({(d, c): {r["label"]: r["recall@6" if c == "R@6" else "n"] for r in recs if r["dataset"] == d}
                         for d in ds_labels for c in ("R@6", "n")})
    ours = ours.loc[list(dict.fromkeys(r["label"] for r in recs))]
    kg24 = recs[0]["kg"]
    fig = K.plot_recall(ours, k=6, note=mechanism.kg_domain_note(kg24, datasets, labels),
                        title=f"Recall@6 of gold passages — ours ({kg24}, local corpora) vs paper")
    _save(fig, ref, "24_table4_recall")


def _summary(ref: Path, nb: str) -> list[dict]:
    return json.loads((ref / nb / "summary.json").read_text(encoding="utf-8"))


def _tcr_note(ref: Path, nb: str, rows: list[dict]) -> str:
    """`mechanism.tcr_parse_note` of the notebook's runs, read from their questions.jsonl."""
    import pandas as pd

    runs = [{"notebook": nb, "method": r["method"], "dataset": r["dataset"], "model": r.get("model"), "folder": str(f)}
            for r in rows for f in sorted((ref / nb / "runs" / r["dataset"]).glob(f"n{r['n']}_seed*/{r['config']}"))]
    health = mechanism.health_table(pd.DataFrame(runs).drop_duplicates("folder")) if runs else pd.DataFrame()
    return mechanism.tcr_parse_note(health, rows[0].get("model", "the model"), T.paper_numbers.DATASET_LABELS)


def tcr_qf(ref: Path) -> None:
    """41-43: Tables 1-2, Fig. 3 and Fig. 4 with intervals, n and the mechanism-health caption."""
    import pandas as pd

    rows = [r for r in _summary(ref, "41_tcr_qf_main") if "config" in r and "em" in r]
    model, ds = rows[0]["model"], list(dict.fromkeys(r["dataset"] for r in rows))
    note = _tcr_note(ref, "41_tcr_qf_main", rows)
    table = T.table1(rows, ds)
    for metric in ("EM", "F1"):
        fig = T.plot_table(table, metric, rows=rows, note=note,
                           title=f"Table 1 layout, {metric}: ours ({model}) vs paper (gpt-4o-mini)")
        _save(fig, ref, f"41_table1_{metric.lower()}")
    summ = _summary(ref, "42_tcr_qf_ablation")
    rows = [r for r in summ if "config" in r and "em" in r]
    note = _tcr_note(ref, "42_tcr_qf_ablation", rows)
    fig = T.plot_table(T.table2(rows, ds), "EM", rows=rows, note=note,
                       title=f"Table 2 layout, EM: ours ({model}) vs paper (gpt-4o-mini)")
    _save(fig, ref, "42_table2_em")
    frame = pd.DataFrame([r for r in summ if r.get("label") == "Fig. 3: EM by round"])
    frame = frame.drop(columns="label").rename(columns={"system": "label"})
    fig = T.plot_rounds(frame, "em", note=note,
                        title=f"Fig. 3 layout: EM by round ({model}; rounds 0-{int(frame['round'].max())})")
    _save(fig, ref, "42_fig3_em_by_round")
    summ = _summary(ref, "43_tcr_qf_kg_growth")
    rows = [r for r in summ if "config" in r and "em" in r]
    note = _tcr_note(ref, "43_tcr_qf_kg_growth", rows)
    for r in rows:
        d = r["dataset"]
        growth = pd.DataFrame([g for g in summ if str(g.get("label", "")).startswith("Table 3: KG growth")
                               and g["dataset"] == d]).sort_values("round")
        fig = T.plot_kg_growth(growth, paper=(d == "2wiki"), note=note,
                               title=f"Fig. 4 layout, {T.dataset_label(d)} (n={r['n']}): {T.system_label(r['method'])}, "
                                     f"{model}")
        _save(fig, ref, f"43_fig4_kg_growth_{d}")


def sa_rag(ref: Path) -> None:
    """31: Table 1 (correctness, F1) with intervals, n and, for correctness, the judge-controls caption."""
    from kgrag_lib.report import sa_rag as SR

    rows = [r for r in _summary(ref, "31_sa_rag_main") if "config" in r and "f1" in r]
    model, judge = rows[0]["model"], rows[0].get("judge_model")
    paper_model = "phi4"
    note = mechanism.judge_note(mechanism.judge_health({"31_sa_rag_main": rows}), SR.paper_numbers.DATASET_LABELS)
    table = SR.table1(rows, paper_model, list(dict.fromkeys(r["dataset"] for r in rows)))
    for metric in ("Correctness", "F1"):
        fig = SR.plot_table1(table, metric, rows=rows, note=note if metric == "Correctness" else "",
                             title=f"Table 1 layout, {metric}: ours ({model}, judge {judge}) "
                                   f"vs paper ({paper_model}, manual correctness)")
        _save(fig, ref, f"31_table1_{metric.lower()}")
    # 33: recall vs context over c x tau_a (the summary's rows are recall_table's)
    import pandas as pd

    recall = pd.DataFrame([r for r in _summary(ref, "33_sa_rag_c_sweep") if r.get("label") == "recall vs context (c x tau_a)"])
    fig = SR.plot_recall_vs_context(recall, title=f"SA-RAG recall vs context size over c x tau_a ({recall['model'].iloc[0]})")
    _save(fig, ref, "33_recall_vs_context")


def metaqa(ref: Path) -> None:
    """13: the error categories of the decomposing method, from the summary's category counts."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from kgrag_lib.report.metaqa import dataset_label
    from kgrag_lib.report.metaqa.errors import CATEGORIES, plot_categories

    rows = [r for r in _summary(ref, "13_metaqa_qualitative") if all(c in r for c in CATEGORIES) and "n" in r]
    method = next(r["method"] for r in rows if r["method"] != "llm")
    mine = [r for r in rows if r["method"] == method]
    table = pd.DataFrame(mine).assign(dataset=lambda t: t["dataset"].map(dataset_label))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(table) + 1.2))
    plot_categories(table, label="dataset", ax=ax)
    manifest = next((ref / "13_metaqa_qualitative" / "runs").glob(f"*/{method}/n*/manifest.json"))
    profile = json.loads(manifest.read_text(encoding="utf-8")).get("profile")
    ax.set_title(f"Error categories of {method} ({profile}, {mine[0]['model']})", fontsize=10)
    _save(fig, ref, "13_metaqa_error_categories")


if __name__ == "__main__":
    ref = Path(sys.argv[1] if len(sys.argv) > 1 else "results/reference")
    main(ref)
    tcr_qf(ref)
    sa_rag(ref)
    metaqa(ref)
