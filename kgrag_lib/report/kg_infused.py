"""KG-Infused RAG tables and figures in the paper's layouts, our runs beside the paper's numbers.

The notebooks 20-25 only call these helpers: Table 1/3 (Acc, F1, EM, Avg per multi-hop set;
Acc for StrategyQA), Table 4 (Recall@6 of gold passages, computed from the traces), Table 5
(KG statistics), Figure 2 (score against activation rounds), and the case study (Table 22's
trace, Figure 4's accumulated subgraph). Every table carries a caption naming the model, KG,
corpus and sample sizes, because ours differ from the paper's (§4.3) and a reader must see it.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from . import paper_numbers_kg_infused as P

METRIC_LABELS = {"acc": "Acc", "f1": "F1", "em": "EM", "avg": "Avg"}
# Our method variants (kgrag_lib.methods.kg_infused) and the paper's row names.
VARIANT_LABELS = {
    "nor": "NoR",
    "vanilla-rag": "Vanilla RAG",
    "vanilla-qe": "Vanilla QE",
    "kg-infused": "KG-Infused RAG",
    "kg-qe-only": "+ KG-Based QE",
    "kg-aug-only": "+ KG-Aug Gen",
}
ABLATION_LABELS = {**VARIANT_LABELS, "kg-infused": "+ Both"}
ROUND_VARIANTS = ("kg-infused", "kg-qe-only", "kg-aug-only")   # variants whose score depends on rounds
KG_DESCRIPTIONS = {
    "2wiki-evidence": "2Wiki evidence slice (Wikidata facts of 2WikiMQA dev questions), not Wikidata5M-KG",
    "wikidata5m": "Wikidata5M-KG (Appendix B preprocessing)",
}
CORPUS_LOCAL = "pooled question contexts per dataset (2Wiki: HippoRAG's 6,119 passages), not Wikipedia-2018"


def metrics_for(dataset: str) -> tuple[str, ...]:
    """The paper's metrics for a dataset (§4.1, Table 6): Acc only for yes/no StrategyQA."""
    return P.YES_NO_METRICS if dataset == "strategyqa" else P.MULTI_HOP_METRICS


def round_label(variant: str, rounds: int | None, ablation: bool = False) -> str:
    """`KG-Infused RAG (w/ 2-Round)` as the paper writes it; baselines have no rounds."""
    base = (ABLATION_LABELS if ablation else VARIANT_LABELS).get(variant, variant)
    return f"{base} (w/ {rounds}-Round)" if rounds and variant in ROUND_VARIANTS else base


def scores(metrics: Mapping[str, Any], dataset: str) -> dict[str, float]:
    """The paper's columns for one run's metrics dict (percent); Avg = mean of Acc, F1, EM.

    For StrategyQA the run's `acc` is the yes/no accuracy (the summary scores yes/no golds by
    normalized yes/no match), which is what the paper reports there.
    """
    out: dict[str, float] = {}
    for m in metrics_for(dataset):
        if m == "avg":
            parts = [metrics.get(k) for k in ("acc", "f1", "em")]
            if any(v is None for v in parts):
                raise KeyError(f"{dataset}: Avg needs acc, f1 and em in the run metrics; got {sorted(metrics)}")
            out["avg"] = round(sum(float(v) for v in parts) / 3, 2)
        else:
            if metrics.get(m) is None:
                raise KeyError(f"{dataset}: metric {m!r} missing from the run metrics; got {sorted(metrics)}")
            out[m] = round(float(metrics[m]), 2)
    return out


@dataclass
class Setting:
    """What a table's numbers were made with: printed as the caption under every table."""

    model: str
    kg: str
    corpus: str = CORPUS_LOCAL
    n: Mapping[str, int] = field(default_factory=dict)
    profile: str = ""
    extra: str = ""

    def caption(self, what: str) -> str:
        kg = KG_DESCRIPTIONS.get(self.kg, self.kg)
        ns = ", ".join(f"{P.DATASET_LABELS.get(d, d)} n={k}" for d, k in self.n.items())
        lines = [f"{what} — ours: model {self.model}; KG {kg}; corpus {self.corpus}",
                 f"samples: {ns or 'none'}" + (f"; profile {self.profile}" if self.profile else "")]
        if self.extra:
            lines.append(self.extra)
        return "\n".join(lines)


def result_row(variant: str, dataset: str, metrics: Mapping[str, Any], *, rounds: int | None = None,
               setting: Setting | None = None, ablation: bool = False, **extra: Any) -> dict[str, Any]:
    """One flat row (for `write_summary` and the layouts below) from a run's metrics dict."""
    cost = metrics.get("cost_per_question") or {}
    row: dict[str, Any] = {
        "label": round_label(variant, rounds, ablation),
        "variant": variant,
        "dataset": dataset,
        "rounds": rounds if variant in ROUND_VARIANTS else None,
        "n": metrics.get("n"),
        "failed": metrics.get("failed", 0),
        **scores(metrics, dataset),
        "llm_calls_per_q": cost.get("llm_calls"),
        "seconds_per_q": cost.get("seconds"),
    }
    for m in metrics_for(dataset):
        if metrics.get(f"{m}_ci95") is not None:
            row[f"{m}_ci95"] = metrics[f"{m}_ci95"]
    if setting is not None:
        row.update(model=setting.model, kg=setting.kg, corpus=setting.corpus)
    row.update(extra)
    return row


# ------------------------------------------------------------------------- Table 1 / 3
def _columns(datasets: Sequence[str]) -> pd.MultiIndex:
    return pd.MultiIndex.from_tuples(
        [(P.DATASET_LABELS.get(d, d), METRIC_LABELS[m]) for d in datasets for m in metrics_for(d)],
        names=["dataset", "metric"])


def layout(rows: Iterable[Mapping[str, Any]], datasets: Sequence[str] | None = None,
           order: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows (label, dataset, acc/f1/em/avg) -> the paper's table: one line per label,
    (dataset, metric) columns; datasets we did not run stay empty (NaN)."""
    rows = list(rows)
    datasets = list(datasets or [d for d in P.DATASETS if any(r["dataset"] == d for r in rows)])
    labels = list(order or dict.fromkeys(r["label"] for r in rows))
    df = pd.DataFrame(math.nan, index=pd.Index(labels, name="method"), columns=_columns(datasets))
    for r in rows:
        if r["dataset"] not in datasets or r["label"] not in labels:
            continue
        for m in metrics_for(r["dataset"]):
            df.loc[r["label"], (P.DATASET_LABELS.get(r["dataset"], r["dataset"]), METRIC_LABELS[m])] = r.get(m)
    return df


def paper_layout(table: Mapping[str, Mapping[str, Mapping[str, float]]],
                 datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """A transcribed paper table ({row: {dataset: {metric: value}}}) in the same layout."""
    rows = [{"label": label, "dataset": d, **vals} for label, per in table.items() for d, vals in per.items()]
    return layout(rows, datasets or P.DATASETS, order=list(table))


def paper_table1(model: str = "LLaMA3.1-8B", datasets: Sequence[str] | None = None) -> pd.DataFrame:
    if model not in P.TABLE1:
        raise KeyError(f"Table 1 has models {list(P.TABLE1)}; got {model!r}")
    return paper_layout(P.TABLE1[model], datasets)


def paper_table3(datasets: Sequence[str] | None = None) -> pd.DataFrame:
    return paper_layout(P.TABLE3, datasets)


def delta(df: pd.DataFrame, row: str, base: str) -> pd.Series:
    """The paper's `Δ row → base` line: row minus base, per column."""
    s = (df.loc[row] - df.loc[base]).round(2)
    s.name = f"Δ {row} → {base}"
    return s


def with_deltas(df: pd.DataFrame, rows: Sequence[str], base: str) -> pd.DataFrame:
    """The table with Δ lines appended for `rows` present in it (as in Table 1)."""
    extra = [delta(df, r, base) for r in rows if r in df.index and base in df.index]
    return pd.concat([df, pd.DataFrame(extra)]) if extra else df


def side_by_side(ours: pd.DataFrame, paper: pd.DataFrame, ours_name: str = "ours",
                 paper_name: str = "paper") -> pd.DataFrame:
    """Ours above the paper's, same columns (the paper's restricted to the datasets we ran)."""
    cols = [c for c in ours.columns if c in paper.columns]
    return pd.concat({ours_name: ours, paper_name: paper.reindex(columns=ours.columns)[cols or ours.columns]},
                     names=["source"])


def plot_side_by_side(ours: pd.DataFrame, paper: pd.DataFrame, metric: str = "Avg", title: str = "",
                      match: Mapping[str, str] | None = None):
    """Grouped bars per dataset: each of our rows beside the paper row it reproduces.

    `match` maps our row label to the paper's (default: same label). StrategyQA falls back to
    Acc (its only metric).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    match = dict(match or {})
    datasets = list(dict.fromkeys(c[0] for c in ours.columns))
    labels = list(ours.index)
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 3.4), squeeze=False, sharey=True)
    x = np.arange(len(labels))
    for ax, ds in zip(axes[0], datasets):
        m = metric if (ds, metric) in ours.columns else "Acc"
        ov = [ours.loc[l, (ds, m)] for l in labels]
        pv = [paper.loc[match.get(l, l), (ds, m)] if match.get(l, l) in paper.index and (ds, m) in paper.columns
              else np.nan for l in labels]
        bars = ax.bar(x - 0.2, ov, 0.4, label="ours", color="#4C72B0")
        ax.bar_label(bars, labels=["–" if np.isnan(v) else f"{v:.0f}" for v in ov], fontsize=6, padding=1)
        ax.bar(x + 0.2, pv, 0.4, label="paper", color="#BBBBBB", hatch="//", edgecolor="#777777")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7, rotation=35, ha="right")
        ax.set_title(f"{ds} ({m})", fontsize=9)
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("score (%)")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------- Figure 2
def rounds_frame(rows: Iterable[Mapping[str, Any]], metric: str = "avg") -> pd.DataFrame:
    """Long rows -> (variant, dataset) x rounds table of one metric (Acc for StrategyQA)."""
    recs = []
    for r in rows:
        m = metric if metric in metrics_for(r["dataset"]) else "acc"
        recs.append({"variant": r["variant"], "dataset": r["dataset"], "rounds": r.get("rounds"), "value": r.get(m)})
    df = pd.DataFrame(recs)
    if df.empty:
        return df
    df = df[df["rounds"].notna()]
    return df.pivot_table(index=["dataset", "variant"], columns="rounds", values="value", aggfunc="first")


def plot_rounds(rows: Iterable[Mapping[str, Any]], metric: str = "avg",
                baselines: Iterable[Mapping[str, Any]] = (), title: str = ""):
    """Figure 2's layout: one panel per dataset, score against activation rounds, one line per
    KG variant (offset sideways by ±0.06 so equal values stay visible); baselines (no rounds:
    Vanilla RAG, Vanilla QE) as dashed horizontal lines."""
    import matplotlib.pyplot as plt

    rows = list(rows)
    baselines = list(baselines)
    datasets = [d for d in P.DATASETS if any(r["dataset"] == d for r in rows)]
    styles = {"kg-infused": ("#C44E52", "o"), "kg-qe-only": ("#4C72B0", "s"), "kg-aug-only": ("#55A868", "^")}
    base_colors = {"vanilla-rag": "#555555", "vanilla-qe": "#999999", "nor": "#BBBBBB"}
    fig, axes = plt.subplots(1, max(len(datasets), 1), figsize=(3.6 * max(len(datasets), 1), 3.3), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        m = metric if metric in metrics_for(ds) else "acc"
        for j, variant in enumerate(ROUND_VARIANTS):
            pts = sorted((r["rounds"], r.get(m)) for r in rows
                         if r["dataset"] == ds and r["variant"] == variant and r.get("rounds"))
            if pts:
                color, marker = styles[variant]
                shift = 0.06 * (j - 1)  # a small sideways offset keeps equal values visible
                ax.plot([p[0] + shift for p in pts], [p[1] for p in pts], marker=marker, color=color, alpha=0.9,
                        label=ABLATION_LABELS[variant] if variant != "kg-infused" else "KG-Infused RAG")
        for b in baselines:
            if b["dataset"] == ds and b.get(m) is not None:
                ax.axhline(b[m], ls="--", lw=1, color=base_colors.get(b["variant"], "#777777"),
                           label=VARIANT_LABELS.get(b["variant"], b["variant"]))
        all_rounds = sorted({r["rounds"] for r in rows if r["dataset"] == ds and r.get("rounds")})
        if all_rounds:
            ax.set_xticks(all_rounds)
        ax.set_xlabel("activation rounds")
        ax.set_ylabel(f"{METRIC_LABELS[m]} (%)")
        ax.set_ylim(-2, 102)
        ax.set_title(P.DATASET_LABELS.get(ds, ds), fontsize=10)
        ax.grid(alpha=0.3)
    if datasets:
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8,
                   bbox_to_anchor=(0.5, -0.08))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------- Table 4
# Where a trace lists the passages the answer stage saw, in retrieval order (first match wins).
RETRIEVED_KEYS = ("retrieved_ids", "passage_ids", "passages")


def retrieved_ids(trace: Mapping[str, Any]) -> list[str]:
    """Passage ids a prediction's trace retrieved, in rank order (q's then q''s for QE)."""
    for key in RETRIEVED_KEYS:
        v = (trace or {}).get(key)
        if v:
            return [str(x["pid"]) if isinstance(x, Mapping) else str(x) for x in v]
    return []


def recall_rows(predictions: Iterable[Mapping[str, Any]], supporting: Mapping[str, Sequence[str]],
                k: int = 6) -> list[dict[str, Any]]:
    """Per-question Recall@k of the gold supporting passages (None: question has no gold ids)."""
    from ..eval.metrics import recall_at_k

    out = []
    for r in predictions:
        gold = list(supporting.get(r["qid"], []))
        got = retrieved_ids(r.get("trace") or {})
        out.append({"qid": r["qid"], "dataset": r.get("dataset", ""), "n_retrieved": len(got),
                    "n_gold": len(gold), f"recall@{k}": recall_at_k(got, gold, k) if gold else None})
    return out


def recall_table(runs: Mapping[str, Iterable[Mapping[str, Any]]], supporting: Mapping[str, Sequence[str]],
                 k: int = 6) -> pd.DataFrame:
    """Table 4's layout: one line per run label, one R@k column per dataset (percent).

    A dataset whose questions carry no gold passage ids (Bamboogle here) stays empty; the
    `n` columns say over how many questions each mean is taken.
    """
    recs = []
    for label, preds in runs.items():
        for r in recall_rows(preds, supporting, k):
            recs.append({"label": label, **r})
    df = pd.DataFrame(recs)
    if df.empty:
        return df
    col = f"recall@{k}"
    scored = df[df[col].notna()]
    mean = scored.groupby(["label", "dataset"])[col].mean().mul(100).round(1).unstack("dataset")
    n = scored.groupby(["label", "dataset"])[col].size().unstack("dataset")
    datasets = [d for d in P.DATASETS if d in set(df["dataset"])]
    labels = list(runs)
    out = pd.DataFrame(index=pd.Index(labels, name="method"))
    for d in datasets:
        name = P.DATASET_LABELS.get(d, d)
        out[(name, f"R@{k}")] = mean[d].reindex(labels) if d in mean else math.nan
        out[(name, "n")] = n[d].reindex(labels).fillna(0).astype(int) if d in n else 0
    out.columns = pd.MultiIndex.from_tuples(out.columns, names=["dataset", ""])
    return out


def paper_table4() -> pd.DataFrame:
    df = pd.DataFrame(P.TABLE4).T
    df.columns = [P.DATASET_LABELS[c] for c in df.columns]
    df.index.name = "method"
    return df


# ------------------------------------------------------------------------- Table 5
def table5_frame(ours: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Table 5: the paper's two lines, then for each of our preprocessing runs (stats dicts as
    returned by `preprocess_wikidata5m`) its 'original' and 'kept' lines; plus removed shares."""
    rows = []
    orig, kept = P.TABLE5["Wikidata5M"], P.TABLE5["Wikidata5M-KG"]
    rows.append({"source": "paper", "dataset/KG": "Wikidata5M", **orig})
    rows.append({"source": "paper", "dataset/KG": "Wikidata5M-KG", **kept,
                 **{f"removed % {k}": P.TABLE5_REMOVED_PCT[k] for k in orig}})
    for name, stats in (ours or {}).items():
        o, kp = stats["original"], stats["kept"]
        rows.append({"source": "ours", "dataset/KG": f"{name} (input)",
                     **{k: o[k] for k in ("entities", "relations", "triples")}})
        rows.append({"source": "ours", "dataset/KG": f"{name} (kept)",
                     **{k: kp[k] for k in ("entities", "relations", "triples")},
                     **{f"removed % {k}": stats["removed_pct"][k] for k in ("entities", "relations", "triples")}})
    df = pd.DataFrame(rows).set_index(["source", "dataset/KG"])
    for k in ("entities", "relations", "triples"):
        df[k] = df[k].astype("Int64")
    return df


def removed_pct(original: Mapping[str, int], kept: Mapping[str, int]) -> dict[str, float]:
    """Share removed by preprocessing, percent of the original (Appendix B.2's 5.65/2.17/1.72)."""
    return {k: round(100.0 * (original[k] - kept[k]) / original[k], 2) if original[k] else 0.0
            for k in ("entities", "relations", "triples")}


# ------------------------------------------------------------------------- case study
def split_triple(text: str) -> tuple[str, str, str]:
    """`<s | r | o>` -> (s, r, o); the relation is the middle field, names may hold '|'
    only if the KG wrote them so (we split on the first and last ' | ')."""
    body = text.strip()
    if body.startswith("<") and body.endswith(">"):
        body = body[1:-1]
    first, last = body.find(" | "), body.rfind(" | ")
    if first < 0 or first == last:
        raise ValueError(f"not a '<subject | relation | object>' triple: {text!r}")
    return body[:first].strip(), body[first + 3:last].strip(), body[last + 3:].strip()


def subgraph(trace: Mapping[str, Any]):
    """The accumulated subgraph G_act of a KG-Infused trace as a networkx MultiDiGraph.

    Nodes carry `round` (0 for seed entities, else the round whose selected triple first
    reached them); edges carry `relation` and the `round` that selected them.
    """
    import networkx as nx

    G = nx.MultiDiGraph()
    act = trace.get("activation") or trace
    for e in act.get("seed_entities") or []:
        G.add_node(e, round=0, seed=True)
    for rec in act.get("rounds") or []:
        i = int(rec.get("round", 0))
        for t in rec.get("selected") or []:
            s, r, o = split_triple(t)
            for node in (s, o):
                if node not in G:
                    G.add_node(node, round=i, seed=False)
            G.add_edge(s, o, relation=r, round=i)
    return G


def draw_subgraph(G, title: str = "", max_label: int = 40, ax=None):
    """Figure 4's picture: entities as nodes coloured by activation round (seeds ringed),
    selected triples as labelled arrows."""
    import matplotlib.pyplot as plt
    import networkx as nx

    if ax is None:
        n = max(G.number_of_nodes(), 1)
        fig, ax = plt.subplots(figsize=(min(6 + 0.35 * n, 16), min(4.5 + 0.25 * n, 12)))
    else:
        fig = ax.figure
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=10)
    if G.number_of_nodes() == 0:
        ax.text(0.5, 0.5, "no triple was selected (empty subgraph)", ha="center", va="center")
        return fig
    pos = nx.kamada_kawai_layout(nx.Graph(G)) if G.number_of_nodes() > 2 else nx.spring_layout(G, seed=0)
    rounds = sorted({d["round"] for _, d in G.nodes(data=True)})
    cmap = plt.get_cmap("viridis", max(len(rounds), 2))
    color = {r: cmap(i) for i, r in enumerate(rounds)}
    short = {v: textwrap.shorten(str(v), max_label, placeholder="…") for v in G.nodes}
    nx.draw_networkx_nodes(G, pos, ax=ax, node_size=900, alpha=0.85,
                           node_color=[color[G.nodes[v]["round"]] for v in G.nodes],
                           edgecolors=["#C44E52" if G.nodes[v].get("seed") else "#333333" for v in G.nodes],
                           linewidths=[3 if G.nodes[v].get("seed") else 1 for v in G.nodes])
    nx.draw_networkx_labels(G, pos, labels={v: textwrap.fill(short[v], 16) for v in G.nodes}, font_size=7, ax=ax)
    nx.draw_networkx_edges(G, pos, ax=ax, arrows=True, arrowstyle="-|>", arrowsize=14, node_size=900,
                           edge_color="#555555", connectionstyle="arc3,rad=0.08")
    elabels: dict[tuple[str, str], str] = {}
    for s, o, d in G.edges(data=True):
        key = (s, o)
        elabels[key] = (elabels[key] + "; " if key in elabels else "") + f"{d['relation']} (r{d['round']})"
    nx.draw_networkx_edge_labels(G, pos, edge_labels={k: textwrap.fill(v, 22) for k, v in elabels.items()},
                                 font_size=6, ax=ax, rotate=False)
    from matplotlib.patches import Patch

    handles = [Patch(color=color[r], label="seed entities" if r == 0 else f"reached in round {r}") for r in rounds]
    ax.legend(handles=handles, fontsize=7, loc="lower left")
    return fig


def _clip(text: Any, width: int) -> str:
    return textwrap.shorten(" ".join(str(text or "").split()), width, placeholder=" …") if text else "(none)"


def case_study_markdown(question: str, golds: Sequence[str], runs: Mapping[str, Mapping[str, Any]],
                        width: int = 600) -> str:
    """Table 22's layout in markdown: each method's process (new query, passage note, KG triples,
    summary, fact-enhanced note), then every answer marked ✓/✗ by the paper's Acc, then the gold.

    `runs` maps a label (e.g. "Vanilla RAG") to a prediction row (prediction + trace).
    """
    from ..eval.metrics import accuracy

    parts = [f"**Question:** {question}", ""]
    for label, row in runs.items():
        tr = row.get("trace") or {}
        act = tr.get("activation") or {}
        parts.append(f"**Process of {label}:**")
        parts.append("")
        if act.get("rounds"):
            sel = [t for rec in act["rounds"] for t in rec.get("selected") or []]
            n_r = len(act["rounds"])
            parts.append(f"*Retrieved query-relevant triples (after {n_r}-round KG-guided spreading activation, "
                         f"seeds: {', '.join(act.get('seed_entities') or []) or 'none'}):*")
            parts += [f"- `{t}`" for t in sel] or ["- (none selected)"]
            parts.append("")
        for key, name in (("summary", "Triples summary"), ("expanded_query", "New query"),
                          ("note", "Passage note"), ("augmented_note", "Fact-enhanced note")):
            if tr.get(key):
                parts.append(f"*{name}:* {_clip(tr[key], width)}")
                parts.append("")
    parts.append("**Answers:**")
    parts.append("")
    for label, row in runs.items():
        ok = accuracy(row.get("prediction") or "", list(golds))
        parts.append(f"- {label}: {row.get('prediction') or '(empty)'} {'✓' if ok else '✗'}")
    parts.append(f"- Golden answer: {golds[0] if golds else '(none)'}")
    return "\n".join(parts)


# ------------------------------------------------------------------------- notebook plumbing
NOTEBOOK_DEFAULTS: dict[str, dict[str, Any]] = {
    # kg / corpus None: the profile's `methods` setting (else 2wiki-evidence / auto) is used.
    "20_kg_preprocessing": {"kg": None, "wikidata5m_dir": None,
                            "slice_files": ["wikidata5m/libkge_test.txt", "wikidata5m/libkge_valid.txt"]},
    "21_kg_infused_main": {"datasets": ["2wiki", "hotpotqa"], "n": 2, "rounds": 2, "kg": None,
                           "corpus": None, "paper_model": "Qwen2.5-7B"},
    "22_kg_infused_ablation": {"datasets": ["2wiki", "hotpotqa"], "n": 2, "rounds": 2, "kg": None, "corpus": None},
    "23_activation_rounds": {"datasets": ["2wiki", "hotpotqa"], "n": 2, "rounds": [1, 2], "main_rounds": 2,
                             "kg": None, "corpus": None},
    "24_retrieval_recall": {"datasets": ["2wiki", "hotpotqa"], "n": 2, "rounds": [1, 2], "k": 6,
                            "kg": None, "corpus": None},
    "25_case_study": {"datasets": ["2wiki"], "n": 2, "rounds": 2, "qid": None, "kg": None, "corpus": None},
}


def notebook_settings(profile: Mapping[str, Any], notebook: str, **given: Any) -> dict[str, Any]:
    """A notebook's settings: papermill parameters that are not None win, then the profile's
    `notebooks: {<notebook>: {...}}` section, then `NOTEBOOK_DEFAULTS` (cpu-smoke sizes).

    An unknown key in the profile section is a ConfigError naming the accepted ones.
    """
    from ..errors import ConfigError

    defaults = NOTEBOOK_DEFAULTS.get(notebook)
    if defaults is None:
        raise ConfigError(f"no settings for notebook {notebook!r}; known: {', '.join(NOTEBOOK_DEFAULTS)}")
    section = dict(((profile.get("notebooks") or {}).get(notebook)) or {})
    unknown = sorted(set(section) - set(defaults))
    if unknown:
        raise ConfigError(f"profile {profile.get('name')!r}, notebooks.{notebook}: unknown key(s) {unknown}; "
                          f"accepted: {', '.join(sorted(defaults))}")
    out = {**defaults, **section}
    out.update({k: v for k, v in given.items() if v is not None})
    return out


def grid_rows(report: Any, runs: Sequence[Any], questions: Sequence[Any], setting: Setting | None = None,
              ablation: bool = False) -> list[dict[str, Any]]:
    """Score every (configuration, dataset) of a `run_grid` report: one `result_row` each.

    Per-question LLM requests come from the grid's own counts (what an independent run of
    that configuration would send)."""
    from ..eval.summary import summarize

    ds_of = {q.qid: q.dataset for q in questions}
    per_cfg = {r["config"]: r for r in report.per_config}
    out = []
    for run in runs:
        preds = report.predictions[run.label]
        cfg = dict(run.cfg)
        for ds in dict.fromkeys(ds_of[p.qid] for p in preds):
            recs = [{**p.to_dict(), "dataset": ds} for p in preds if ds_of[p.qid] == ds]
            m = summarize(recs, metrics=("em", "f1", "acc"))
            row = result_row(run.method, ds, m, rounds=cfg.get("rounds"), setting=setting, ablation=ablation,
                             config=run.label)
            row["requests_per_q"] = per_cfg.get(run.label, {}).get("requests_per_q")
            out.append(row)
    return out


def grid_counts_row(report: Any, what: str, wall_s: float | None = None) -> dict[str, Any]:
    """Item 7's numbers as one summary row: requests independent runs would send, distinct
    requests (= what a shared cache sends from cold), what reached the model this time."""
    return {"label": f"request counts: {what}", "configs": len(report.per_config), "questions": report.n_questions,
            "independent_requests": report.requests, "distinct_requests": report.distinct,
            "sent_this_run": report.sent, "ratio_distinct_to_independent": round(report.ratio, 3),
            "wall_s": None if wall_s is None else round(wall_s, 1)}


def save_grid_predictions(report: Any, questions: Sequence[Any], out_dir: Any) -> list[Any]:
    """Write each configuration's predictions (answer + full trace) as JSON lines for inspection."""
    import json
    from pathlib import Path

    ds_of = {q.qid: q.dataset for q in questions}
    folder = Path(out_dir) / "predictions"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for label, preds in report.predictions.items():
        p = folder / f"{label.replace('@', '_r').replace('/', '_')}.jsonl"
        with open(p, "w", encoding="utf-8") as fh:
            for pred in preds:
                fh.write(json.dumps({**pred.to_dict(), "dataset": ds_of.get(pred.qid, "")},
                                    ensure_ascii=False, default=str) + "\n")
        paths.append(p)
    return paths


def rounds_table(trace: Mapping[str, Any]) -> pd.DataFrame:
    """One line per activation round: active entities, candidates shown, triples selected,
    entities passed on (and those dropped as leaves or by the per-round cap)."""
    act = trace.get("activation") or trace
    recs = []
    for r in act.get("rounds") or []:
        recs.append({"round": r.get("round"), "active entities": ", ".join(r.get("active_entities") or []),
                     "candidates": r.get("n_candidates"), "selected": len(r.get("selected") or []),
                     "selected triples": "\n".join(r.get("selected") or []),
                     "next entities": ", ".join(r.get("next_entities") or []),
                     "leaves (no out-triples)": ", ".join(r.get("leaves_skipped") or []),
                     "unmatched output": len(r.get("unmatched") or [])})
    return pd.DataFrame(recs)


def pick_case(report: Any, questions: Sequence[Any], label: str, against: str, qid: str | None = None) -> Any:
    """The question to show: `qid` if given, else the first where `label` is right (paper's
    Acc) and `against` wrong, else the first where `label` selected triples, else the first."""
    from ..eval.metrics import accuracy

    by_q = {q.qid: q for q in questions}
    mine = {p.qid: p for p in report.predictions[label]}
    other = {p.qid: p for p in report.predictions[against]}
    if qid is not None:
        if qid not in by_q:
            raise KeyError(f"qid {qid!r} is not in the sample; have {list(by_q)}")
        return by_q[qid]
    for q in questions:
        if accuracy(mine[q.qid].prediction, q.answers) and not accuracy(other[q.qid].prediction, q.answers):
            return q
    for q in questions:
        if (mine[q.qid].trace.get("activation") or {}).get("subgraph"):
            return q
    return questions[0]


def plot_recall(ours: pd.DataFrame, k: int = 6, title: str = ""):
    """Table 4 as bars: our R@k per dataset for each run, the paper's beside it (hatched)."""
    import matplotlib.pyplot as plt
    import numpy as np

    paper = paper_table4()
    datasets = list(dict.fromkeys(c[0] for c in ours.columns if c[1] == f"R@{k}"))
    labels = list(ours.index)
    fig, axes = plt.subplots(1, max(len(datasets), 1), figsize=(3.4 * max(len(datasets), 1), 3.3), squeeze=False,
                             sharey=True)
    x = np.arange(len(labels))
    for ax, ds in zip(axes[0], datasets):
        ov = [ours.loc[l, (ds, f"R@{k}")] for l in labels]
        pv = [paper.loc[l, ds] if l in paper.index and ds in paper.columns else np.nan for l in labels]
        bars = ax.bar(x - 0.2, ov, 0.4, label="ours", color="#4C72B0")
        ax.bar_label(bars, labels=["–" if np.isnan(v) else f"{v:.0f}" for v in ov], fontsize=6, padding=1)
        ax.bar(x + 0.2, pv, 0.4, label="paper", color="#BBBBBB", hatch="//", edgecolor="#777777")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7, rotation=35, ha="right")
        ns = ", ".join(str(int(ours.loc[l, (ds, "n")])) for l in labels[:1])
        ax.set_title(f"{ds} (n={ns})", fontsize=9)
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"Recall@{k} (%)")
    axes[0][-1].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------- KG profile (notebook 20)
def out_degrees(heads: Any) -> Any:
    """Outgoing-triple count of every entity that heads at least one triple."""
    import numpy as np

    h = np.asarray(heads, dtype=np.int64)
    if h.size == 0:
        return np.zeros(0, dtype=np.int64)
    counts = np.bincount(h)
    return counts[counts > 0]


def relation_frequencies(rels: Any, names: Sequence[str] | Mapping[int, str], top: int = 15) -> pd.DataFrame:
    """The `top` most frequent relations with their triple counts and share (percent)."""
    import numpy as np

    r = np.asarray(rels, dtype=np.int64)
    counts = np.bincount(r) if r.size else np.zeros(0, dtype=np.int64)
    order = np.argsort(-counts, kind="stable")[:top]
    return pd.DataFrame({"relation": [names[int(i)] for i in order if counts[i] > 0],
                         "triples": [int(counts[i]) for i in order if counts[i] > 0],
                         "share %": [round(100.0 * counts[i] / max(r.size, 1), 2) for i in order if counts[i] > 0]})


def plot_out_degrees(kgs: Mapping[str, Any], title: str = ""):
    """Out-degree distributions (how many triples an activated entity offers the LLM), log-log,
    one line per KG; MAX_TRIPLES_PER_ENTITY caps what a round shows of the right tail."""
    import matplotlib.pyplot as plt
    import numpy as np

    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    top = 0
    for (name, heads), color in zip(kgs.items(), ("#4C72B0", "#C44E52", "#55A868", "#8172B2")):
        deg = out_degrees(heads)
        if deg.size == 0:
            continue
        top = max(top, int(deg.max()))
        vals, counts = np.unique(deg, return_counts=True)
        ax.plot(vals, counts, marker="o", ms=3, lw=1, color=color,
                label=f"{name} ({deg.size:,} heads, max {int(deg.max())})")
    if top > 30:  # heavy tails (Wikidata5M): log-log; small KGs: integer degrees on a linear axis
        ax.set_xscale("log")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yscale("log")
    ax.set_xlabel("outgoing triples per entity")
    ax.set_ylabel("entities")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def grid_base_cfg(profile: Mapping[str, Any], variants: Sequence[str], **overrides: Any) -> dict[str, Any]:
    """The method settings every configuration of a grid shares: the profile's `methods`
    sections of the variants (which must agree: sharing stages through the cache needs equal
    settings), minus `rounds` (each configuration sets its own), plus non-None overrides; `kg`
    and `corpus` default to 2wiki-evidence and auto."""
    from ..errors import ConfigError

    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for v in variants:
        for k, val in ((profile.get("methods") or {}).get(v) or {}).items():
            if k == "rounds":
                continue
            if k in merged and merged[k] != val:
                raise ConfigError(f"profile {profile.get('name')!r}: methods.{origin[k]}.{k}={merged[k]!r} but "
                                  f"methods.{v}.{k}={val!r}; a shared grid needs one value for every variant")
            merged[k], origin[k] = val, v
    merged.update({k: v for k, v in overrides.items() if v is not None})
    merged.setdefault("kg", "2wiki-evidence")
    merged.setdefault("corpus", "auto")
    return merged


def answers_frame(report: Any, runs: Sequence[Any], questions: Sequence[Any], width: int = 60) -> pd.DataFrame:
    """One line per question: the gold answer and each configuration's answer, marked ✓/✗ by
    the paper's Acc (a gold is a substring of the prediction)."""
    from ..eval.metrics import accuracy

    preds = {run.label: {p.qid: p for p in report.predictions[run.label]} for run in runs}
    recs = []
    for q in questions:
        rec = {"dataset": q.dataset, "question": textwrap.shorten(q.question, width, placeholder="…"),
               "gold": q.answers[0] if q.answers else ""}
        for run in runs:
            p = preds[run.label].get(q.qid)
            if p is None:
                continue
            ok = accuracy(p.prediction or "", q.answers)
            rec[run.label] = f"{'✓' if ok else '✗'} {textwrap.shorten(p.prediction or '(empty)', width, placeholder='…')}"
        recs.append(rec)
    return pd.DataFrame(recs)


def corpus_description(corpus: str, datasets: Sequence[str] = ()) -> str:
    """What a `corpus` setting means, in words for a caption (`auto` depends on the dataset)."""
    if corpus == "auto":
        parts = [CORPUS_LOCAL]
        if "bamboogle" in datasets:
            parts.append("Bamboogle: the pooled HotpotQA+2Wiki+MuSiQue paragraphs")
        if "strategyqa" in datasets:
            parts.append("StrategyQA: its annotated facts (a gold-derived stand-in, easier than real retrieval)")
        return "; ".join(parts)
    if corpus == "pooled":
        return "pooled HotpotQA+2Wiki+MuSiQue context paragraphs (one corpus for all datasets), not Wikipedia-2018"
    if corpus.startswith("wikipedia"):
        return "Wikipedia-2018 (DPR psgs_w100), as in the paper"
    return corpus


def recall_runs(report: Any, runs: Sequence[Any], questions: Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
    """Prediction rows of a grid under Table 4's labels (`Vanilla RAG`, `+ KG-Based QE (k-Round)`)."""
    ds_of = {q.qid: q.dataset for q in questions}
    out: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        r = dict(run.cfg).get("rounds")
        label = {"vanilla-rag": "Vanilla RAG", "vanilla-qe": "Vanilla QE"}.get(run.method) or (
            f"+ KG-Based QE ({r}-Round)" if run.method == "kg-qe-only" else round_label(run.method, r))
        out[label] = [{**p.to_dict(), "dataset": ds_of[p.qid]} for p in report.predictions[run.label]]
    return out


def gold_sources(runs: Mapping[str, Iterable[Mapping[str, Any]]], supporting: Mapping[str, Sequence[str]],
                 k: int = 6) -> pd.DataFrame:
    """Gold passages retrieved in the top k, counted by the query that found them (q or q′)."""
    recs = []
    for label, preds in runs.items():
        for p in preds:
            gold = set(supporting.get(p["qid"], []))
            for hit in list((p.get("trace") or {}).get("passages") or [])[:k]:
                if isinstance(hit, Mapping) and hit.get("pid") in gold:
                    recs.append({"run": label, "dataset": p.get("dataset", ""), "from": hit.get("from", "q")})
    if not recs:
        return pd.DataFrame(columns=["run", "dataset"])
    return pd.DataFrame(recs).groupby(["run", "dataset", "from"]).size().unstack("from", fill_value=0)


def recall_summary_rows(table: pd.DataFrame, k: int = 6, **labels: Any) -> list[dict[str, Any]]:
    """Flat rows of a `recall_table` for `write_summary`."""
    rows = []
    for label in table.index:
        for ds in dict.fromkeys(c[0] for c in table.columns):
            v = table.loc[label, (ds, f"R@{k}")]
            rows.append({"label": label, "dataset": ds, f"recall@{k}": None if pd.isna(v) else float(v),
                         "n": int(table.loc[label, (ds, "n")]), **labels})
    return rows


def activation_depth(report: Any, runs: Sequence[Any], variant: str = "kg-infused") -> pd.DataFrame:
    """Per round budget: how many rounds activation really ran, triples it kept, and how many
    questions stopped early (no new entity or no candidate triple left)."""
    recs = []
    for run in runs:
        if run.method != variant:
            continue
        for p in report.predictions[run.label]:
            act = p.trace.get("activation") or {}
            recs.append({"rounds (max)": dict(run.cfg).get("rounds"), "rounds run": len(act.get("rounds") or []),
                         "triples selected": len(act.get("subgraph") or []),
                         "early": act.get("stop_reason") not in (None, "max_rounds")})
    if not recs:
        return pd.DataFrame()
    return pd.DataFrame(recs).groupby("rounds (max)").agg(
        questions=("rounds run", "size"), mean_rounds_run=("rounds run", "mean"),
        mean_triples_selected=("triples selected", "mean"), stopped_early=("early", "sum")).round(2)
