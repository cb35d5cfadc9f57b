"""KG-RAG on MetaQA (Linders & Tomczak): labels, KB statistics (Fig. 3), and our seed-averaged
numbers beside the paper's printed ones and its ordinal claims (Figs. 4 and 5, §4.3).

Inputs are what the library already produces: a `KGStore`, questions, and seed-aggregated
tables from `report.tables.aggregate_seeds`. Scores are percent; the paper's fractions are
converted when laid beside ours.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ...errors import ConfigError
from ...eval.paired import NOT_RUN, claim_fields, paired_test, verdict
from ..tables import require_columns
from .paper_numbers import CLAIMS, NUMBERS, Claim, PaperNumber

_HOPS = re.compile(r"(\d)\s*-?\s*hop", re.I)

# The paper's names for the four systems of Experiment 2 (§4.2.2, Fig. 5).
METHOD_LABELS = {"llm": "LLM", "llm-qd": "LLM+QD", "llm-kg": "LLM+KG (KAPING)", "kg-rag": "KG-RAG"}


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def config_label(hops: int, top_k: int) -> str:
    """'N=3, K=30': one bar of Fig. 4."""
    return f"N={int(hops)}, K={int(top_k)}"


def dataset_hops(dataset: str | None) -> int | None:
    """3 for 'metaqa-3hop' (the number of KB hops between question entity and answer)."""
    m = _HOPS.search(dataset or "")
    return int(m.group(1)) if m else None


def dataset_label(dataset: str) -> str:
    """'metaqa-2hop' -> '2-hop' (axis labels as in the paper's figures)."""
    h = dataset_hops(dataset)
    return f"{h}-hop" if h else dataset


# ---------------------------------------------------------------------------- the KB (Fig. 3)

def entity_degrees(store: Any) -> np.ndarray:
    """Triples per entity (as subject or object; a self-loop counts once), indexed by entity id."""
    heads = np.asarray(store.heads, dtype=np.int64)
    tails = np.asarray(store.tails, dtype=np.int64)
    n = int(store.num_entities)
    return np.bincount(heads, minlength=n) + np.bincount(tails[tails != heads], minlength=n)


def degree_summary(degrees: np.ndarray, cutoff: int = 30) -> dict[str, float]:
    d = np.asarray(degrees)
    return {
        "entities": int(d.size),
        "median": float(np.median(d)),
        "mean": round(float(d.mean()), 2),
        "max": int(d.max()),
        f"share_above_{cutoff}_pct": round(100.0 * float((d > cutoff).mean()), 2),
    }


def relation_counts(store: Any) -> pd.DataFrame:
    """Triples per relation type, most frequent first, with their share of the KB."""
    counts = np.bincount(np.asarray(store.rels, dtype=np.int64), minlength=int(store.num_relations))
    df = pd.DataFrame({"relation": [store.relation_name(i) for i in range(len(counts))], "triples": counts})
    df["share_pct"] = (100.0 * df["triples"] / max(1, int(counts.sum()))).round(2)
    return df.sort_values("triples", ascending=False, kind="stable").reset_index(drop=True)


def top_entities(store: Any, degrees: np.ndarray, n: int = 10) -> pd.DataFrame:
    """The hubs that make N-hop candidate sets explode (ties broken by entity id)."""
    order = np.lexsort((np.arange(len(degrees)), -np.asarray(degrees)))[:n]
    return pd.DataFrame({"entity": [store.entity_name(int(i)) for i in order], "triples": np.asarray(degrees)[order]})


def candidate_counts(store: Any, questions: Iterable[Any], hops: Sequence[int] = (1, 2, 3),
                     direction: str = "both") -> pd.DataFrame:
    """How many candidate triples N-hop retrieval gathers around each question's entity (§3.4.2)."""
    rows = []
    for q in questions:
        for name in q.topic_entities:
            e = store.find_entity(name)
            for n in hops:
                size = 0 if e is None else int(len(store.neighborhood(int(e), n, direction=direction)))
                rows.append({"dataset": q.dataset, "qid": q.qid, "entity": name, "found": e is not None,
                             "hops": n, "candidates": size})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- beside the paper (§4.3)

def _matches(num: PaperNumber, row: Mapping[str, Any], on: Sequence[str]) -> bool:
    for col in on:
        want = getattr(num, col, None)
        if want is None or col not in row:
            continue
        got = row[col]
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            try:
                if float(got) != float(want):
                    return False
            except (TypeError, ValueError):
                return False
        elif got != want:
            return False
    return True


def beside_paper(agg: pd.DataFrame, key: str, metric: str = "hit1",
                 on: Sequence[str] = ("dataset", "method", "hops", "top_k"),
                 numbers: Sequence[PaperNumber] = NUMBERS, missing: str = "not printed in the paper") -> pd.DataFrame:
    """Our mean/std beside the paper's printed number with key `key` (percent), and the difference.

    A row whose setting the paper prints no number for gets NaN and `paper_source = missing`
    (e.g. "Fig. 5: bars only"); nothing is estimated.
    """
    require_columns(agg, [f"{metric}_mean"], "beside_paper")
    cand = [n for n in numbers if n.key == key]
    out = agg.copy()
    p_mean, p_std, p_src = [], [], []
    for row in out.to_dict("records"):
        hit = [n for n in cand if _matches(n, row, [c for c in on if c in out.columns])]
        if hit:
            p_mean.append(hit[0].value_percent())
            p_std.append(hit[0].std_percent() if hit[0].std is not None else np.nan)
            p_src.append(hit[0].source)
        else:
            p_mean.append(np.nan)
            p_std.append(np.nan)
            p_src.append(missing)
    out[f"paper_{metric}_mean"] = p_mean
    out[f"paper_{metric}_std"] = p_std
    out["paper_source"] = p_src
    out[f"{metric}_minus_paper"] = out[f"{metric}_mean"] - out[f"paper_{metric}_mean"]
    return out


def _claim_side(label: str) -> dict[str, Any]:
    """'kg-rag' -> {'method': 'kg-rag'}; 'N=2' -> {'hops': 2}; 'K=30' -> {'top_k': 30}."""
    if label.startswith("N="):
        return {"hops": int(label[2:])}
    if label.startswith("K="):
        return {"top_k": int(label[2:])}
    return {"method": label}


def _side(scores: pd.DataFrame, labels: Mapping[str, Any], metric: str) -> pd.Series | None:
    """Per-question values of one side of a claim, indexed by (seed, qid); None when not run."""
    sel = pd.Series(True, index=scores.index)
    for col, val in labels.items():
        if col not in scores.columns:
            return None
        sel &= scores[col] == val
    hit = scores[sel]
    if hit.empty:
        return None
    seeds = hit["seed"] if "seed" in hit.columns else pd.Series(0, index=hit.index)
    return pd.Series(hit[metric].to_numpy(dtype=float), index=pd.MultiIndex.from_arrays([seeds, hit["qid"]]))


def check_claims(scores: pd.DataFrame, claims: Sequence[Claim] | None = None, metric: str = "hit1",
                 method: str = "kg-rag", alpha: float = 0.05, margin: float = 5.0) -> pd.DataFrame:
    """Test the paper's ordinal statements on paired per-question scores (`question_scores` rows
    of every run: dataset, method, hops, top_k, seed, qid and the metric).

    The two sides of a claim are paired on the same (seed, question); the verdict is
    confirmed / refuted / not separable at this n (`kgrag_lib.eval.paired`: McNemar's exact
    test for 0/1 scores, `~` claims by TOST within ±`margin` points, or the claim's own). Experiment-1
    claims compare kg-rag settings (`N=`/`K=`) with the claim's other settings held fixed. A
    claim whose two sides were not both run reads 'not run'.
    """
    claims = list(CLAIMS if claims is None else claims)
    require_columns(scores, ("dataset", "qid", metric), "per-question scores")
    rows = []
    for c in claims:
        if c.relation not in (">", "<", "~"):
            raise ConfigError(f"claim {c.cid}: relation must be '>', '<' or '~', got {c.relation!r}")
        base = {"dataset": c.dataset, **c.fixed}
        if c.experiment == "exp1" and "method" in scores.columns:
            base["method"] = method
        a = _side(scores, {**base, **_claim_side(c.a)}, metric)
        b = _side(scores, {**base, **_claim_side(c.b)}, metric)
        row = {"claim": c.cid, "dataset": c.dataset, "statement": f"{c.a} {c.relation} {c.b}",
               "n_pairs": 0, "ours_a": np.nan, "ours_b": np.nan, "diff": np.nan, "ci95": None, "p_value": np.nan,
               "test": "", "verdict": NOT_RUN, "source": c.source, "quote": c.quote}
        if a is not None and b is not None:
            both = a.index.intersection(b.index)
            m = margin if c.margin is None else float(c.margin)
            r = paired_test(a.loc[both].to_numpy(), b.loc[both].to_numpy(), margin=m)
            row.update(n_pairs=r.n, ours_a=r.mean_a, ours_b=r.mean_b, diff=r.diff,
                       ci95=[round(v, 1) for v in r.ci95], p_value=r.p_value, test=r.test,
                       verdict=verdict(c.relation, r, alpha=alpha, margin=m),
                       **claim_fields(c.relation, r, alpha=alpha, margin=m))
        rows.append(row)
    return pd.DataFrame(rows)
