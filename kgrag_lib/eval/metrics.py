"""Answer and retrieval metrics as the four papers define them, in one registry.

Every per-item metric gives a value in [0, 1], or None when it does not apply (no gold
answers, no gold passages, a gold that is not yes/no); `score_records` averages the values
that apply and reports percentages. Max-over-golds everywhere: one seed's F1 kept only the
last gold answer's score, which we deliberately do not reproduce.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from kgrag_lib.errors import ConfigError
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


# The HotpotQA answer scorer (`hotpot_evaluate_v1.py`) and 2WikiMultihopQA's, adapted from it
# (`2wikimultihop_evaluate_v1.1.py`), give F1 0 when either normalized side is one of these
# words and the two differ: "yes" against "yes sir" is wrong, not 2/3 right.
YES_NO_NOANSWER = frozenset({"yes", "no", "noanswer"})


def f1_hotpot(pred: str, golds: Sequence[str]) -> float | None:
    """Answer F1 exactly as HotpotQA's official script (and 2Wiki's, which copies it) computes it.

    It differs from SQuAD's F1 (`f1`) in two cases only: F1 is 0 when the normalized prediction
    or gold is "yes", "no" or "noanswer" and they are not equal; and two answers that both
    normalize to nothing score 0, not 1 (no common token). Max over golds, as 2Wiki's v1.1 takes
    the max over the answer and its aliases (a HotpotQA question has one gold).
    """
    gs = _golds(golds)
    if not gs:
        return None
    p = normalize_answer(pred or "")
    best = 0.0
    for g in gs:
        ng = normalize_answer(g)
        if (p in YES_NO_NOANSWER or ng in YES_NO_NOANSWER) and p != ng:
            continue
        pt, gt = p.split(), ng.split()
        same = sum((Counter(pt) & Counter(gt)).values())
        if same:
            prec, rec = same / len(pt), same / len(gt)
            best = max(best, 2 * prec * rec / (prec + rec))
    return best


# Which answer scorer a dataset's official evaluation uses, where it is not SQuAD's: record
# scoring (`get_metric`) reads the record's "dataset" and takes the official one. EM needs no
# entry: every official script compares normalized strings as `exact_match` does. MuSiQue's
# official scorer is SQuAD's (max over the answer and its aliases), which `f1` is already.
OFFICIAL_ANSWER_METRICS: dict[str, dict[str, "AnswerMetric"]] = {
    "hotpotqa": {"f1": f1_hotpot},
    "2wiki": {"f1": f1_hotpot},
}


def answer_metric_for(name: str, dataset: str | None) -> "AnswerMetric":
    """The answer metric `name` as `dataset`'s official scorer computes it (`METRICS[name]` for a
    dataset without an official variant, or no dataset)."""
    return OFFICIAL_ANSWER_METRICS.get(str(dataset or ""), {}).get(name) or METRICS[name]


def accuracy(pred: str, golds: Sequence[str]) -> float | None:
    """KG-Infused RAG's Acc: some gold, lower-cased, is a substring of the lower-cased answer.

    Record scoring (`get_metric("acc")`) applies it to the raw final answer where the trace
    keeps one (`answer_raw`), as the paper's code scores the model's output.
    """
    gs = _golds(golds)
    if not gs:
        return None
    p = (pred or "").lower()
    return float(any(g.lower() in p for g in gs))


def hit1(pred: str, golds: Sequence[str]) -> float | None:
    """Hit@1 as the MetaQA paper's figures behave: a gold entity occurs in the answer.

    §4.2.1 words it as exact match, but the paper's systems answer in sentences and its
    Fig. 6, Table 5 and §4.5 count such answers correct; so the number to set beside its
    0.787 is this one: a normalized gold occurs as whole tokens in the normalized answer.
    The literal reading is `hit1_exact`, the usual KGQA one `hit1_first`.
    """
    gs = _golds(golds)
    if not gs:
        return None
    p = f" {normalize_answer(pred or '')} "
    for g in gs:
        ng = normalize_answer(g)
        if ng and f" {ng} " in p:
            return 1.0
    return 0.0


def hit1_exact(pred: str, golds: Sequence[str]) -> float | None:
    """§4.2.1 to the letter: the stripped, lower-cased answer equals a gold entity."""
    gs = _golds(golds)
    if not gs:
        return None
    p = (pred or "").strip().lower()
    return float(any(p == g.strip().lower() for g in gs))


_LEAD = re.compile(r"^[\s\-*\u2022\"'`(\[]+")
_AFTER_FIRST = re.compile(r"^(?:\s*[,;|\n.!?)\]\"']|\s+and\b|\s*$)")


def hit1_first(pred: str, golds: Sequence[str]) -> float | None:
    """The usual KGQA Hit@1: the answer's first entity is a gold entity. The answer (lower-cased,
    white space squeezed, leading bullets and quotes dropped) must start with a gold followed by
    its end, a list separator (, ; | newline "and") or closing punctuation; so "Louis Malle,
    Jeanne Moreau" counts for Louis Malle, and a gold that holds a comma or "and" ("Crime and
    Punishment") is matched whole. A sentence counts only when it starts with the entity."""
    gs = _golds(golds)
    if not gs:
        return None
    p = re.sub(r"[ \t]+", " ", _LEAD.sub("", (pred or "").lower().strip()))
    for g in gs:
        ng = " ".join(g.lower().split())
        if ng and p.startswith(ng) and _AFTER_FIRST.match(p[len(ng):]):
            return 1.0
    return 0.0


# a sentence ends at . ! ? before white space, unless the word before it is a title or an initial
# (MetaQA titles: "Dr. No", "Mr. Deeds Goes to Town", "Jules Verne's 20,000 Leagues ... J. Verne")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_NOT_AN_END = re.compile(r"(?:^|\s)(?:mr|mrs|ms|dr|st|jr|sr|vs|no|vol|mt|ft|prof|gen|sgt|lt|col|[a-z])\.$", re.I)


def first_sentence(text: str) -> str:
    """The answer's first sentence (or first line): what a reader takes as its answer."""
    text = (text or "").strip()
    for m in _SENTENCE_END.finditer(text):
        head = text[:m.start()]
        if "\n" in m.group(0) or not _NOT_AN_END.search(head):
            return head.strip()
    return text


def hit1_sentence(pred: str, golds: Sequence[str]) -> float | None:
    """Hit@1 read on the answer's first sentence only: a length-matched reading of `hit1` for
    answers that differ in length (a long answer that names many entities cannot score by
    listing them after its first sentence)."""
    return hit1(first_sentence(pred), golds)


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


def yesno_agree(pred: str, golds: Sequence[str]) -> float | None:
    """Prediction and gold agree after yes/no normalization ("Yes, because ..." agrees with
    "yes"); None when the gold is not yes/no. A separate column: EM, F1 and Acc score yes/no
    questions like any other."""
    if isinstance(golds, (str, bool, np.bool_)):
        golds = [golds]
    gold_yn = {normalize_yes_no(g) for g in golds} - {None}
    if len(gold_yn) != 1:
        return None
    return float(normalize_yes_no(pred) in gold_yn)


# ---------------------------------------------------------------------------- registry

AnswerMetric = Callable[[str, Sequence[str]], "float | None"]
RecordMetric = Callable[[Any], "float | None"]

# name -> fn(prediction, golds); recall@K is resolved by `get_metric` for any K.
METRICS: dict[str, AnswerMetric] = {
    "em": exact_match,
    "f1": f1,
    "acc": accuracy,
    "hit1": hit1,
    "hit1_exact": hit1_exact,
    "hit1_first": hit1_first,
    "hit1_sentence": hit1_sentence,
    "yesno_agree": yesno_agree,
}
LABELS = {
    "em": "EM", "f1": "F1", "acc": "Acc",
    "hit1": "Hit@1 (gold entity in answer, as the paper's figures behave)",
    "hit1_exact": "Hit@1 exact (answer equals a gold entity, §4.2.1 literally)",
    "hit1_first": "Hit@1 first (first listed entity is gold, usual KGQA)",
    "hit1_sentence": "Hit@1 first sentence (a gold entity in the answer's first sentence)",
    "yesno_agree": "yes/no agreement",
}
RAW_ANSWER_METRICS = {"acc"}   # scored on the raw final answer where the trace keeps it


def register_metric(name: str) -> Callable[[AnswerMetric], AnswerMetric]:
    """Register `fn(prediction, golds) -> float | None` under `name`."""

    def deco(fn: AnswerMetric) -> AnswerMetric:
        METRICS[name] = fn
        return fn

    return deco


def _get(record: Any, key: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(key, default)
    return getattr(record, key, default)


def _from_record_or_trace(record: Any, *keys: str) -> Any:
    for key in keys:
        v = _get(record, key)
        if v is not None:
            return v
        trace = _get(record, "trace") or {}
        if isinstance(trace, Mapping) and trace.get(key) is not None:
            return trace[key]
    return None


def _answer_record_metric(name: str, fn: AnswerMetric) -> RecordMetric:
    raw = name in RAW_ANSWER_METRICS

    def score(rec: Any) -> float | None:
        # a failed question (unparsable output, `Prediction.failed`) scores as an empty answer on
        # every metric: its raw text is not an answer the method gave
        failed = bool(_get(rec, "failed"))
        pred = "" if failed else (_from_record_or_trace(rec, "answer_raw") if raw else None) or _get(rec, "prediction") or ""
        official = OFFICIAL_ANSWER_METRICS.get(str(_get(rec, "dataset") or ""), {}).get(name)
        return (official or fn)(pred, _get(rec, "answers") or [])

    return score


_RECALL = re.compile(r"^recall@(\d+)$")


def get_metric(name: str) -> RecordMetric:
    """A record-level scorer (dict or Prediction) for a metric name.

    Answer metrics read "prediction" (Acc: the raw answer, see `RAW_ANSWER_METRICS`) and
    "answers"; a record whose "dataset" has an official scorer (`OFFICIAL_ANSWER_METRICS`:
    HotpotQA's and 2Wiki's F1 with their yes/no rule) is scored by it, any other the SQuAD way.
    recall@K reads the retrieved ids from "retrieved_ids" and gold ids from "gold_ids" or
    "supporting" (on the record or in its "trace").
    """
    if name in METRICS:
        return _answer_record_metric(name, METRICS[name])
    m = _RECALL.match(name)
    if m:
        k = int(m.group(1))

        def recall(rec: Any) -> float | None:
            return recall_at_k(_from_record_or_trace(rec, "retrieved_ids") or [],
                               _from_record_or_trace(rec, "gold_ids", "supporting") or [], k)

        return recall
    raise ConfigError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}, recall@K (any K)")


def score_items(records: Iterable[Any], metrics: Sequence[str] = ("em", "f1", "acc", "hit1")
                ) -> dict[str, list[float | None]]:
    """Per-item values (None where a metric does not apply), one list per metric."""
    scorers = {m: get_metric(m) for m in metrics}
    recs = list(records)
    return {m: [fn(r) for r in recs] for m, fn in scorers.items()}


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
    "<metric>_ci95": [lo, hi] (BCa bootstrap, level 1 - alpha); `per_item` adds
    "per_item": {metric: [value or None, ...]}.
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
                out[f"{name}_ci95"] = [lo * 100, hi * 100]
            else:
                out[f"{name}_ci95"] = None
    if per_item:
        out["per_item"] = items
    return out
