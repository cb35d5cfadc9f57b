"""Answer and retrieval metrics as the four papers define them, in one registry.

Every per-item metric maps a record to a value in [0, 1], or None when it does not apply
(no gold answers, no gold passages, a gold that is not yes/no); `score_records` averages
the values that apply and reports percentages. Max-over-golds everywhere: one seed's F1
kept only the last gold answer's score, which we deliberately do not reproduce.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from kgrag_lib.eval.bootstrap import bootstrap_ci

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalization: lower-case, drop ASCII punctuation and articles, squeeze spaces.

    Kept identical to the official SQuAD/HotpotQA script so scores compare with published
    ones; accents and non-ASCII punctuation are left as they are.
    """
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _golds(golds: Sequence[str] | str) -> list[str]:
    """Gold answers as non-empty strings (a bare string counts as one gold)."""
    if isinstance(golds, str):
        golds = [golds]
    return [str(g) for g in golds if g is not None and str(g).strip()]


def exact_match(pred: str, golds: Sequence[str]) -> float | None:
    """1.0 if the normalized prediction equals some normalized gold."""
    gs = _golds(golds)
    if not gs:
        return None
    p = normalize_answer(pred or "")
    return float(any(p == normalize_answer(g) for g in gs))


def _f1_tokens(pred_toks: list[str], gold_toks: list[str]) -> float:
    if not pred_toks or not gold_toks:
        return float(pred_toks == gold_toks)
    common = Counter(pred_toks) & Counter(gold_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    p = same / len(pred_toks)
    r = same / len(gold_toks)
    return 2 * p * r / (p + r)


def f1(pred: str, golds: Sequence[str]) -> float | None:
    """SQuAD token F1 against the best-matching gold (max over golds and aliases)."""
    gs = _golds(golds)
    if not gs:
        return None
    pt = normalize_answer(pred or "").split()
    return max(_f1_tokens(pt, normalize_answer(g).split()) for g in gs)


def accuracy(pred: str, golds: Sequence[str]) -> float | None:
    """KG-Infused RAG's Acc: some gold, lower-cased, is a substring of the lower-cased prediction."""
    gs = _golds(golds)
    if not gs:
        return None
    p = (pred or "").lower()
    return float(any(g.lower() in p for g in gs))


def hit1(pred: str, golds: Sequence[str]) -> float | None:
    """The MetaQA paper's Hit@1: the stripped, lower-cased prediction equals a gold entity."""
    gs = _golds(golds)
    if not gs:
        return None
    p = (pred or "").strip().lower()
    return float(any(p == g.strip().lower() for g in gs))


def mentions_gold(pred: str, golds: Sequence[str]) -> float | None:
    """Looser than Hit@1: a normalized gold occurs as whole tokens in the normalized prediction."""
    gs = _golds(golds)
    if not gs:
        return None
    p = f" {normalize_answer(pred or '')} "
    for g in gs:
        ng = normalize_answer(g)
        if ng and f" {ng} " in p:
            return 1.0
    return 0.0


def recall_at_k(retrieved_ids: Sequence[Any], gold_ids: Sequence[Any], k: int) -> float | None:
    """Fraction of the distinct gold ids found among the first k retrieved; None without golds."""
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}")
    gold = set(gold_ids or [])
    if not gold:
        return None
    top = set(list(retrieved_ids or [])[:k])
    return len(gold & top) / len(gold)


_YES = {"yes", "true", "yeah", "yep", "correct"}
_NO = {"no", "false", "nope", "incorrect"}
_LEAD_WORD = re.compile(r"^[\W_]*([a-z]+)\b")
_ANSWER_IS = re.compile(r"\banswer\s*(?:is|:)\s*[:\W_]*\s*(yes|no|true|false)\b")


def normalize_yes_no(text: Any) -> str | None:
    """Map a yes/no style answer to 'yes' or 'no' ("Yes.", "yes, because", "True", False, ...).

    Looks at the leading word, then at an explicit "answer is X" / "answer: X"; anything
    else is None (unknown), never guessed.
    """
    if isinstance(text, (bool, np.bool_)):
        return "yes" if text else "no"
    if text is None:
        return None
    s = str(text).strip().lower()
    m = _LEAD_WORD.match(s)
    if m:
        w = m.group(1)
        if w in _YES:
            return "yes"
        if w in _NO:
            return "no"
    m = _ANSWER_IS.search(s)
    if m:
        return "yes" if m.group(1) in ("yes", "true") else "no"
    return None


def yes_no_accuracy(pred: str, golds: Sequence[str]) -> float | None:
    """StrategyQA: prediction and gold compared after yes/no normalization; None if gold isn't yes/no."""
    if isinstance(golds, (str, bool, np.bool_)):
        golds = [golds]
    gold_yn = {normalize_yes_no(g) for g in golds} - {None}
    if len(gold_yn) != 1:
        return None
    return float(normalize_yes_no(pred) in gold_yn)


# ---------------------------------------------------------------------------- registry

def _get(record: Any, key: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(key, default)
    return getattr(record, key, default)


def _trace_get(record: Any, *keys: str) -> Any:
    for key in keys:
        v = _get(record, key)
        if v is not None:
            return v
        trace = _get(record, "trace") or {}
        if isinstance(trace, Mapping) and trace.get(key) is not None:
            return trace[key]
    return None


@dataclass(frozen=True)
class Metric:
    """A per-item metric: record (dict or Prediction) -> value in [0, 1] or None."""

    name: str
    fn: Callable[[Any], float | None]
    help: str = ""


METRICS: dict[str, Metric] = {}


def register_metric(name: str, help: str = "") -> Callable:
    """Register `fn(record) -> float | None` under `name`."""

    def deco(fn: Callable[[Any], float | None]) -> Callable[[Any], float | None]:
        METRICS[name] = Metric(name, fn, help or (fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return deco


def _answer_metric(name: str, fn: Callable[[str, Sequence[str]], float | None]) -> None:
    register_metric(name, (fn.__doc__ or "").strip().split("\n")[0])(
        lambda rec: fn(_get(rec, "prediction") or "", _get(rec, "answers") or [])
    )


for _n, _f in (("em", exact_match), ("f1", f1), ("acc", accuracy), ("hit1", hit1),
               ("mentions_gold", mentions_gold), ("yes_no", yes_no_accuracy)):
    _answer_metric(_n, _f)

_RECALL = re.compile(r"^recall@(\d+)$")


def get_metric(name: str) -> Metric:
    """Look up a metric; `recall@K` is built on demand for any K.

    recall@K reads retrieved ids from `retrieved_ids` (record or its trace) and gold ids
    from `gold_ids` or `supporting` (record or trace).
    """
    if name in METRICS:
        return METRICS[name]
    m = _RECALL.match(name)
    if m:
        k = int(m.group(1))

        def fn(rec: Any, k: int = k) -> float | None:
            return recall_at_k(_trace_get(rec, "retrieved_ids") or [], _trace_get(rec, "gold_ids", "supporting") or [], k)

        return Metric(name, fn, f"fraction of gold passages among the top {k} retrieved")
    from kgrag_lib.errors import ConfigError

    raise ConfigError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}, recall@K")


def score_items(records: Iterable[Any], metrics: Sequence[str] = ("em", "f1", "acc", "hit1")) -> dict[str, list[float | None]]:
    """Per-item values (None where a metric does not apply), one list per metric."""
    ms = [get_metric(m) for m in metrics]
    recs = list(records)
    return {m.name: [m.fn(r) for r in recs] for m in ms}


def score_records(
    records: Iterable[Any],
    metrics: Sequence[str] = ("em", "f1", "acc", "hit1"),
    *,
    per_item: bool = False,
    ci: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Aggregate scores in percent plus "n" (records scored).

    A metric's mean is over the items where it applies; when that count differs from n it
    is reported as "n_<metric>", and a metric that applies nowhere is None. `ci` adds
    "<metric>_ci": [lo, hi] (percentile bootstrap); `per_item` adds "per_item": lists.
    """
    recs = list(records)
    items = score_items(recs, metrics)
    out: dict[str, Any] = {"n": len(recs)}
    for name, vals in items.items():
        vs = np.array([v for v in vals if v is not None], dtype=np.float64)
        out[name] = float(vs.mean() * 100) if vs.size else None
        if vs.size != len(recs):
            out[f"n_{name}"] = int(vs.size)
        if ci:
            if vs.size:
                lo, hi = bootstrap_ci(vs, n_boot=n_boot, seed=seed, alpha=alpha)
                out[f"{name}_ci"] = [lo * 100, hi * 100]
            else:
                out[f"{name}_ci"] = None
    if per_item:
        out["per_item"] = items
    return out
