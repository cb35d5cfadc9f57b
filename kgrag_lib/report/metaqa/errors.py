"""Why an answer missed: transparent rules over a MetaQA prediction trace (KG-RAG §4.4.3).

The paper names its error types from reading outputs by hand (over/under-decomposition,
sub-answer inconsistencies, final answer synthesis, and Hit@1 rejecting answers that do
name the entity, Table 6). Here each prediction row gets exactly one category by the
first rule that applies, in this order (an earlier stage's failure explains the later ones):

1. `correct`            Hit@1 exact = 1 (the answer, lower-cased and stripped, equals a gold entity).
2. `run_failure`        the method produced no usable answer (row `failed`: empty or unparsable output).
3. `answer_format`      Hit@1 = 1 but not exactly: the answer names a gold entity (normalized
                        whole-token match) in a sentence or a list (the caveat of §4.2.1, Table 6;
                        our primary Hit@1 counts these correct, as the paper's figures do).
4. `entity_not_found`   KG systems: the question entity is not in the KB, or it has no candidate triple.
5. `decomposition`      QD systems: no sub-question could be read, or fewer sub-questions than
                        the dataset's hops (under-decomposition, §4.4.3).
6. `retrieval_miss`     KG systems: no triple shown to the LLM (any step) has a gold entity as
                        its subject or object.
7. `answer_ignores_facts` KG systems: a gold entity was among the shown triples, but no
                        (sub-)answer names one (sub-answer inconsistency, §4.4.3).
8. `synthesis_lost`     a sub-answer names a gold entity but the final answer does not (§4.4.3).
9. `wrong_answer`       none of the above: the answer names no gold entity and no trace stage
                        explains it (the only category left for the plain `llm` baseline).

Caveat of rule 6: a gold that is a frequent entity (a genre, year or language) can sit in a
triple about another film, so `gold_retrieved` is an upper bound for such answers.

Flags that are not exclusive: `over_decomposed` (more sub-questions than hops; the paper
counts ~16% of 1-hop questions) and `under_decomposed`.
"""

from __future__ import annotations

import textwrap
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ...eval.metrics import hit1, hit1_exact
from .case_study import subquestions
from .tables import dataset_hops

CATEGORIES = ("correct", "run_failure", "answer_format", "entity_not_found", "decomposition",
              "retrieval_miss", "answer_ignores_facts", "synthesis_lost", "wrong_answer")


def _norm(s: str) -> str:
    return " ".join(str(s).lower().split())


def _gold_in_triples(step: Mapping[str, Any], golds: set[str], store: Any | None) -> bool:
    """A gold entity is subject or object of a shown triple: by id via the store, else by text.

    Without a store the verbalized `(subject, relation, object)` text is searched for a gold
    as its first or last element (exact after lower-casing).
    """
    if store is not None and step.get("triple_ids"):
        for i in step["triple_ids"]:
            i = int(i)
            h, t = int(store.heads[i]), int(store.tails[i])
            if _norm(store.entity_name(h)) in golds or _norm(store.entity_name(t)) in golds:
                return True
        return False
    for text in step.get("triples") or []:
        s = _norm(text).strip("()<>")
        if any(s.startswith(g + ",") or s.endswith(", " + g) for g in golds):
            return True
    return False


def categorize(row: Mapping[str, Any], store: Any | None = None, hops: int | None = None) -> dict[str, Any]:
    """The category of one prediction row (a line of predictions.jsonl) and the facts behind it."""
    pred = row.get("prediction") or ""
    answers = list(row.get("answers") or [])
    trace = row.get("trace") or {}
    steps = list(trace.get("steps") or [])
    hops = hops if hops is not None else dataset_hops(row.get("dataset"))
    golds = {_norm(a) for a in answers}
    retrieval = trace.get("retrieval")
    uses_kg = retrieval is not None or any("triple_ids" in s for s in steps)
    uses_qd = trace.get("decomposition") is not None
    subqs = subquestions(row)
    facts: dict[str, Any] = {
        "hit1_exact": bool(hit1_exact(pred, answers)),
        "hit1": bool(hit1(pred, answers)),
        "n_subquestions": len(subqs) if uses_qd else None,
        "over_decomposed": bool(uses_qd and hops and len(subqs) > hops),
        "under_decomposed": bool(uses_qd and hops and 0 < len(subqs) < hops),
        "gold_retrieved": None,
        "gold_in_subanswer": None,
    }
    if uses_kg:
        facts["gold_retrieved"] = any(_gold_in_triples(s, golds, store) for s in steps)
    sub_answers = [s.get("answer") or "" for s in steps]
    if uses_qd:
        facts["gold_in_subanswer"] = any(hit1(a, answers) for a in sub_answers)

    def done(cat: str) -> dict[str, Any]:
        return {"qid": row.get("qid"), "dataset": row.get("dataset"), "method": row.get("method"),
                "category": cat, **facts}

    if facts["hit1_exact"]:
        return done("correct")
    if row.get("failed"):
        return done("run_failure")
    if facts["hit1"]:
        return done("answer_format")
    if uses_kg:
        no_entity = not (retrieval or {}).get("entity_ids") or int((retrieval or {}).get("num_candidates") or 0) == 0
        if retrieval is not None and no_entity:
            return done("entity_not_found")
    if uses_qd and (not subqs or (hops and len(subqs) < hops)):
        return done("decomposition")
    if uses_kg and not facts["gold_retrieved"]:
        return done("retrieval_miss")
    any_sub = any(hit1(a, answers) for a in sub_answers)
    if uses_kg and not any_sub:
        return done("answer_ignores_facts")
    if any_sub:  # the final answer names no gold (rule 3 did not fire), a sub-answer did
        return done("synthesis_lost")
    return done("wrong_answer")


def categorize_rows(rows: Iterable[Mapping[str, Any]], store: Any | None = None) -> pd.DataFrame:
    """One categorized row per prediction (see the module docstring for the rules)."""
    return pd.DataFrame([categorize(r, store) for r in rows])


def category_table(cats: pd.DataFrame, by: Sequence[str] = ("dataset",)) -> pd.DataFrame:
    """Counts per category (columns in rule order) for each `by` group, with the group size."""
    if cats.empty:
        return pd.DataFrame(columns=[*by, *CATEGORIES, "n"])
    table = pd.crosstab([cats[c] for c in by], cats["category"])
    table = table.reindex(columns=list(CATEGORIES), fill_value=0)
    table["n"] = table.sum(axis=1)
    table.columns.name = None
    return table.reset_index()


CATEGORY_COLORS = {
    "correct": "#55A868", "answer_format": "#A6D49F", "run_failure": "#4D4D4D", "entity_not_found": "#937860",
    "decomposition": "#8172B3", "retrieval_miss": "#C44E52", "answer_ignores_facts": "#DD8452",
    "synthesis_lost": "#CCB974", "wrong_answer": "#A0A0A0",
}


def plot_categories(table: pd.DataFrame, label: str = "dataset", ax: Any = None) -> Any:
    """Horizontal stacked bars: the share of each category per group (rule order, left to right).
    Categories with no question in any group are left out of the bars and the legend and named
    in the legend's title instead, so that the legend lists only colours the bars show."""
    import matplotlib.pyplot as plt

    present = [c for c in CATEGORIES if c in table.columns]
    cats = [c for c in present if float(pd.to_numeric(table[c], errors="coerce").fillna(0).sum()) > 0]
    empty = [c for c in present if c not in cats]
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.45 * len(table) + 1.2))
    left = np.zeros(len(table))
    shares = table[cats].to_numpy(dtype=float) / np.maximum(table["n"].to_numpy(dtype=float)[:, None], 1)
    labels = [f"{r} (n={n})" for r, n in zip(table[label], table["n"])]
    for j, c in enumerate(cats):
        ax.barh(labels, 100 * shares[:, j], left=100 * left, color=CATEGORY_COLORS.get(c, "#CCCCCC"), label=c)
        left += shares[:, j]
    ax.set_xlim(0, 100)
    ax.set_xlabel("questions (%)")
    ax.invert_yaxis()
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title=("none in any group:\n" + "\n".join(textwrap.wrap(", ".join(empty), 34))) if empty else None,
              title_fontsize=7, alignment="left")
    return ax
