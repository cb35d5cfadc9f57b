"""KG-Infused RAG case study (Table 22's trace, Figure 4's subgraph): which question to show,
the accumulated subgraph G_act of its trace, one line per activation round, and the
methods' processes and answers side by side in markdown.
"""

from __future__ import annotations

import textwrap
from typing import Any, Mapping, Sequence

import pandas as pd

from ...eval.metrics import accuracy


def pick_case(report: Any, questions: Sequence[Any], label: str, against: str, qid: str | None = None) -> Any:
    """The question to show: `qid` if given, else the first where `label` is right (paper's
    Acc) and `against` wrong, else the first where `label` selected triples, else the first."""
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


def _clip(text: Any, width: int) -> str:
    return textwrap.shorten(" ".join(str(text or "").split()), width, placeholder=" …") if text else "(none)"


def case_study_markdown(question: str, golds: Sequence[str], runs: Mapping[str, Mapping[str, Any]],
                        width: int = 600) -> str:
    """Table 22's layout in markdown: each method's process (new query, passage note, KG triples,
    summary, fact-enhanced note), then every answer marked ✓/✗ by the paper's Acc, then the gold.

    `runs` maps a label (e.g. "Vanilla RAG") to a prediction row (prediction + trace).
    """
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
