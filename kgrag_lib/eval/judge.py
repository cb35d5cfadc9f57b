"""Answer correctness by an LLM judge (SA-RAG's "Correctness" column, Table 1).

The SA-RAG paper says its correctness was a manual check (semantically right answers that EM
misses, such as aliases; answers with a high F1 from word overlap that are wrong); its code
used an LLM judge (deepeval GEval). We use an LLM judge and say so: any configured model reads
the question, the gold answers and the prediction and replies {"verdict": "correct"} or
{"verdict": "incorrect"}. The reply is parsed strictly (the whole reply one JSON object, the
verdict one of the two words); anything else is no verdict (None, with the reason), left out
of the score rather than guessed. An empty prediction is incorrect without asking.

Not in the metrics registry: it needs a model. `judge_predictions` scores a run's predictions
file and writes the verdicts beside it, naming the judge model in every row and the summary.

A judge is only worth its controls: per question it is also shown the gold answer itself (it
should accept it) and another question's gold answer (it should reject it). The summary reports
both rates and calls the judge uninformative when it rejects half the golds or accepts half the
wrong answers (the 0.5B model accepted every answer it was shown, EM 0 or not). Another
question's answer is often of another type (a date for a person) and easy to reject, so a third
check reads the run's own predictions: those sharing no word with any gold answer (token F1 0:
"no" for "yes", "Derby" for "Lancashire") are nearly all wrong, and a judge that accepts half of
them (at least `NO_OVERLAP_MIN` seen) is uninformative too. The 1.5B model passed the first two
(gold 100%, other answers 23%) and failed this one (`scripts/judge_probe.py`). The controls
are the same requests for every run on the same questions, so the LLM cache asks them once.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from ..llm.base import Generator, SamplingParams
from ..llm.parsing import strip_think
from ..rundir import read_predictions
from .bootstrap import bootstrap_ci
from .metrics import f1, normalize_answer

VERDICTS = {"correct": True, "incorrect": False}
SCHEMA = json.dumps({"type": "object", "properties": {"verdict": {"type": "string", "enum": list(VERDICTS)}},
                     "required": ["verdict"]}, separators=(",", ":"))
PARAMS = SamplingParams(max_tokens=16, temperature=0.0, json_schema=SCHEMA)

PROMPT = """You check answers to quiz questions. Below are a question, its reference answers (any one of them is right; they are alternative names or forms of the same answer) and a candidate answer.

The candidate is correct when it names the same thing as a reference answer, even in other words, another spelling, an alias, another date format or with extra words that do not change what it says. It is incorrect when it names something else, gives several candidates, only part of a multi-part answer, or says it cannot answer.

Question: {question}
Reference answers: {answers}
Candidate answer: {prediction}

Reply with {{"verdict": "correct"}} or {{"verdict": "incorrect"}} and nothing else."""


@dataclass(frozen=True)
class Verdict:
    correct: bool | None   # None: the judge's reply gave no verdict (not counted)
    reason: str            # why there is no verdict, or why none was asked; "" otherwise
    raw: str               # the judge's reply ("" when not asked)


def parse_verdict(text: str) -> tuple[bool | None, str]:
    """(correct?, "") from a reply that is exactly one JSON object with a valid "verdict"; else (None, reason)."""
    body = strip_think(text).strip()
    try:
        value = json.loads(body)
    except ValueError:
        return None, "the reply is not one JSON object"
    if not isinstance(value, dict) or "verdict" not in value:
        return None, 'the reply has no "verdict" field'
    verdict = value["verdict"]
    if not isinstance(verdict, str) or verdict.strip().lower() not in VERDICTS:
        return None, f'"verdict" is {verdict!r}, not "correct" or "incorrect"'
    return VERDICTS[verdict.strip().lower()], ""


def judge_answer(llm: Generator, question: str, answers: Sequence[str], prediction: str,
                 params: SamplingParams = PARAMS) -> Verdict:
    """One verdict: is `prediction` a correct answer to `question`, given the gold `answers`?"""
    if not (prediction or "").strip():
        return Verdict(False, "empty prediction (not sent to the judge)", "")
    golds = "; ".join(str(a) for a in answers) or "(none given)"
    text = PROMPT.format(question=question, answers=golds, prediction=prediction.strip())
    raw = llm.generate([{"role": "user", "content": text}], params)
    correct, reason = parse_verdict(raw)
    return Verdict(correct, reason, raw)


def judge_identity(llm: Any) -> dict[str, str]:
    return {"judge_model": str(getattr(llm, "name", type(llm).__name__)),
            "judge_identity": str(getattr(llm, "identity", ""))}


UNINFORMATIVE_AT = 50.0  # percent of gold answers rejected, or of wrong answers accepted
NO_OVERLAP_MIN = 5       # predictions without a word of any gold needed before their acceptance rate counts


def control_answers(records: Sequence[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """Per record (gold answer it should accept, another question's gold answer it should reject);
    the wrong one is the next record's first gold (cyclically) that matches none of this record's
    golds, None when every other record shares a gold with it."""
    golds = [[str(a) for a in r.get("answers") or []] for r in records]
    out = []
    for i, mine in enumerate(golds):
        own = {normalize_answer(a) for a in mine}
        wrong = next((golds[j][0] for k in range(1, len(golds)) for j in [(i + k) % len(golds)]
                      if golds[j] and not own & {normalize_answer(a) for a in golds[j]}), None)
        out.append((mine[0] if mine else "", wrong))
    return out


def control_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Acceptance rates of the controls (verdicts without a decision left out) and whether the
    judge separates right from wrong at all."""
    def rate(key: str) -> tuple[float | None, int]:
        seen = [r[key] for r in rows if r.get(key) is not None]
        return (round(100.0 * sum(seen) / len(seen), 2) if seen else None), len(seen)

    gold, n_gold = rate("control_gold")
    wrong, n_wrong = rate("control_wrong")
    disjoint = [r["correct"] for r in rows if r.get("correct") is not None and r.get("prediction")
                and f1(str(r["prediction"]), r.get("answers") or []) == 0]
    no_overlap = round(100.0 * sum(disjoint) / len(disjoint), 2) if disjoint else None
    out: dict[str, Any] = {"control_gold_accepted": gold, "control_gold_n": n_gold,
                           "control_wrong_accepted": wrong, "control_wrong_n": n_wrong,
                           "no_overlap_accepted": no_overlap, "no_overlap_n": len(disjoint)}
    bad = []
    if gold is not None and 100 - gold >= UNINFORMATIVE_AT:
        bad.append(f"rejected {100 - gold:.0f}% of gold answers")
    if wrong is not None and wrong >= UNINFORMATIVE_AT:
        bad.append(f"accepted {wrong:.0f}% of other questions' answers")
    if no_overlap is not None and len(disjoint) >= NO_OVERLAP_MIN and no_overlap >= UNINFORMATIVE_AT:
        bad.append(f"accepted {no_overlap:.0f}% of the {len(disjoint)} predictions that share no word with a gold "
                   "answer")
    out["judge_informative"] = None if gold is None and wrong is None else not bad
    if bad:
        out["judge_warning"] = "the judge " + " and ".join(bad) + ": its correctness does not tell right from wrong"
    return out


def judge_predictions(path: str | Path, llm: Generator, params: SamplingParams = PARAMS,
                      controls: bool = True) -> dict[str, Any]:
    """Judge every row of a predictions file; write `<stem>.judge.jsonl` (one verdict per question)
    and `<stem>.judge.json` (the summary) beside it, and return the summary: n, judged, unparsable,
    correct and `correctness` in percent of the judged questions with a bootstrap 95% interval,
    and the judge model; with `controls`, the judge's verdicts on each question's gold answer and
    on another question's answer (`control_summary`). Judge calls go through the model's cache,
    so a rerun sends none."""
    path = Path(path)
    who = judge_identity(llm)
    records = list(read_predictions(path))
    checks = control_answers(records) if controls else [("", None)] * len(records)
    rows = []
    for rec, (gold, wrong) in zip(records, checks):
        question = str(rec.get("question", ""))
        v = judge_answer(llm, question, rec["answers"], rec["prediction"], params)
        row = {"qid": rec.get("qid"), "prediction": rec["prediction"], "answers": rec["answers"], **asdict(v), **who}
        if controls:
            row["control_gold"] = judge_answer(llm, question, rec["answers"], gold, params).correct if gold else None
            row["control_wrong"] = judge_answer(llm, question, rec["answers"], wrong, params).correct if wrong else None
        rows.append(row)
    verdicts = [r["correct"] for r in rows if r["correct"] is not None]
    summary: dict[str, Any] = {"n": len(rows), "judged": len(verdicts), "unparsable": len(rows) - len(verdicts),
                               "correct": sum(verdicts), **who,
                               "note": "LLM judge; the SA-RAG paper's correctness was a manual check"}
    if controls:
        summary.update(control_summary(rows))
    if verdicts:
        lo, hi = bootstrap_ci([float(c) for c in verdicts])
        summary["correctness"] = round(100.0 * sum(verdicts) / len(verdicts), 2)
        summary["correctness_ci95"] = [round(100.0 * lo, 2), round(100.0 * hi, 2)]
    out = path.with_name(f"{path.stem}.judge.jsonl")
    tmp = out.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)
    path.with_name(f"{path.stem}.judge.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
