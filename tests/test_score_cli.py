"""`kgrag score FILE.jsonl`: output contract and errors naming file:line."""

from __future__ import annotations

import argparse
import json

import pytest

from kgrag_lib.commands import score
from kgrag_lib.errors import ConfigError, DataFormatError, MissingDataError


def _run(argv, capsys):
    parser = argparse.ArgumentParser(prog="kgrag")
    score.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["score", *argv])
    rc = args.func(args)
    return rc, capsys.readouterr().out


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


ROWS = [
    {"prediction": "Paris", "answers": ["Paris"], "qid": "a"},
    {"prediction": "the Eiffel tower in Paris", "answers": ["Eiffel Tower"]},
    {"prediction": "", "answers": ["London"]},
    {"prediction": "It's Berlin.", "answers": ["Berlin", "Berlin, Germany"]},
]


def test_prints_the_scores_and_the_three_hit1_in_percent(tmp_path, capsys):
    f = _write(tmp_path / "p.jsonl", ROWS[:2] + [""] + ROWS[2:])  # a blank line is skipped
    rc, out = _run([str(f)], capsys)
    assert rc == 0
    # hand-computed: em 1/4, f1 (1 + 2/3 + 0 + 2/3)/4 = 58.33, acc 3/4; hit1 (a gold occurs as whole
    # tokens) 3/4; hit1_exact (the answer is a gold) 1/4; hit1_first: "Paris" only -> 1/4
    assert json.loads(out) == {"n": 4, "em": 25.0, "f1": 58.33, "acc": 75.0, "hit1": 75.0, "hit1_exact": 25.0,
                               "hit1_first": 25.0}
    assert out.count("\n") == 1


def test_ci_and_extra_metrics(tmp_path, capsys):
    f = _write(tmp_path / "p.jsonl", ROWS * 5)
    rc, out = _run([str(f), "--ci", "--metrics", "em,hit1", "--n-boot", "200"], capsys)
    s = json.loads(out)
    assert rc == 0 and set(s) == {"n", "em", "em_ci95", "hit1", "hit1_ci95"}
    assert s["n"] == 20 and s["em"] == 25.0
    # hit1: Paris yes, "eiffel tower" in "eiffel tower in paris" yes, "" no, "berlin" yes -> 75
    assert s["hit1"] == 75.0
    lo, hi = s["em_ci95"]
    assert 0 <= lo <= 25.0 <= hi <= 100 and lo < hi
    assert s["em_ci95"] == [round(x, 2) for x in s["em_ci95"]]


def test_yes_no_golds_are_scored_like_any_answer(tmp_path, capsys):
    f = _write(tmp_path / "yn.jsonl", [{"prediction": "Yes, because it is older.", "answers": ["yes"]},
                                        {"prediction": "no", "answers": ["yes"]}])
    # EM/F1 as SQuAD: "yes because it is older" vs "yes": P 1/5, R 1 -> F1 1/3 (16.67 over 2);
    # Acc and hit1 credit the first answer ("yes" occurs); yes/no agreement is its own metric
    s = json.loads(_run([str(f), "--metrics", "em,f1,acc,hit1,yesno_agree"], capsys)[1])
    assert s == {"n": 2, "em": 0.0, "f1": 16.67, "acc": 50.0, "hit1": 50.0, "yesno_agree": 50.0}


def test_predictions_jsonl_from_a_run_is_scorable(tmp_path, capsys):
    from kgrag_lib.records import Prediction

    preds = [Prediction(qid="1", question="q", prediction="Kismet", answers=["Kismet"], method="m",
                        trace={"retrieved_ids": [1, 2]}, failed=False)]
    f = _write(tmp_path / "predictions.jsonl", [p.to_dict() for p in preds])
    rc, out = _run([str(f)], capsys)
    assert json.loads(out) == {"n": 1, "em": 100.0, "f1": 100.0, "acc": 100.0, "hit1": 100.0, "hit1_exact": 100.0,
                               "hit1_first": 100.0}


@pytest.mark.parametrize("bad_line,fragment", [
    ("{not json", "not JSON"),
    ('["Paris", ["Paris"]]', "expected a JSON object"),
    ('{"answers": ["Paris"]}', "field \"prediction\" missing"),
    ('{"prediction": 3, "answers": ["Paris"]}', "field \"prediction\" missing or not a string"),
    ('{"prediction": "Paris"}', "field \"answers\" missing"),
    ('{"prediction": "Paris", "answers": "Paris"}', "not a list of strings"),
])
def test_bad_lines_name_file_and_line(tmp_path, capsys, bad_line, fragment):
    f = _write(tmp_path / "bad.jsonl", [ROWS[0], ROWS[1], bad_line])
    with pytest.raises(DataFormatError) as ei:
        _run([str(f)], capsys)
    msg = str(ei.value)
    assert f"{f}:3" in msg and fragment in msg and '"prediction"' in msg and '"answers"' in msg
    assert capsys.readouterr().out == ""


def test_missing_file_and_unknown_metric(tmp_path, capsys):
    with pytest.raises(MissingDataError, match="absent.jsonl: no such file; expected a JSON object per line"):
        _run([str(tmp_path / "absent.jsonl")], capsys)
    f = _write(tmp_path / "p.jsonl", ROWS)
    with pytest.raises(ConfigError, match="unknown metric 'bleu'"):
        _run([str(f), "--metrics", "em,bleu"], capsys)


def test_through_the_kgrag_cli(tmp_path, capsys):
    """The lead's `kgrag` entry point routes to this command and prints errors without a traceback."""
    cli = pytest.importorskip("kgrag_lib.cli")
    try:
        parser_ok = cli.build_parser()
    except ModuleNotFoundError as e:  # another engineer's command module not written yet
        pytest.skip(f"kgrag CLI not complete yet: {e}")
    assert parser_ok is not None
    f = _write(tmp_path / "p.jsonl", ROWS)
    assert cli.main(["score", str(f)]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 4
    bad = _write(tmp_path / "bad.jsonl", ["oops"])
    assert cli.main(["score", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1" in err and "Traceback" not in err
