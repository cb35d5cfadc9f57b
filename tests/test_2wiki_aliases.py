"""2Wiki's official scorer accepts the aliases of the answer's Wikidata id (the ID-enhanced
release's id_aliases.json); with the file, ours does too (issue 41, item 4). Tested on a small
file in the exact format, beside a question record as the real files give it."""

from __future__ import annotations

import json

import pytest

from kgrag_lib.data.registry import TWOWIKI_ALIASES_ENV, load_questions
from kgrag_lib.data.twowiki import load_2wiki, load_id_aliases
from kgrag_lib.errors import ConfigError, DataFormatError
from kgrag_lib.eval.metrics import get_metric

QUESTION = {"_id": "c4bdfbea08c911ebbd92ac1f6bf848b6", "type": "compositional",
            "question": "What is the nationality of the director of film Zvezdopad?", "entity_ids": "Q8072839",
            "supporting_facts": [["Zvezdopad", 0]], "evidences": [["Zvezdopad", "director", "Igor Talankin"]],
            "answer": "Russia", "evidences_id": [], "answer_id": "Q159"}
ALIASES = [{"Q_id": "Q159", "aliases": ["Russian Federation", "RF"], "demonyms": ["Russian"]},
           {"Q_id": "Q42", "aliases": ["Douglas Noel Adams"], "demonyms": []}]


def _write(tmp_path, aliases=ALIASES):
    qfile = tmp_path / "dev.json"
    qfile.write_text(json.dumps([QUESTION]), encoding="utf-8")
    afile = tmp_path / "id_aliases.json"
    afile.write_text("".join(json.dumps(a) + "\n" for a in aliases), encoding="utf-8")
    return qfile, afile


def test_aliases_of_the_answer_id_become_golds_and_score_as_the_official_scorer(tmp_path):
    qfile, afile = _write(tmp_path)
    assert load_id_aliases(afile)["Q159"] == ["Russian Federation", "RF", "Russian"]
    without = load_2wiki(qfile)[0]
    with_aliases = load_2wiki(qfile, aliases_path=afile)[0]
    assert without.answers == ["Russia"]
    assert with_aliases.answers == ["Russia", "Russian Federation", "RF", "Russian"]
    rec = {"dataset": "2wiki", "prediction": "Russian"}
    assert get_metric("em")({**rec, "answers": without.answers}) == 0.0     # the lower bound
    assert get_metric("em")({**rec, "answers": with_aliases.answers}) == 1.0


def test_a_malformed_alias_line_is_refused_with_its_file_and_line(tmp_path):
    _, afile = _write(tmp_path)
    afile.write_text(json.dumps(ALIASES[0]) + "\n" + '{"Q_id": 159, "aliases": []}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"id_aliases\.json:2: .*Q_id"):
        load_id_aliases(afile)


def test_the_alias_file_is_found_beside_the_data_or_named_by_the_environment(tmp_path, monkeypatch):
    qfile, afile = _write(tmp_path)
    monkeypatch.setenv(TWOWIKI_ALIASES_ENV, str(afile))
    q = load_questions("2wiki", path=qfile)[0]
    assert "Russian Federation" in q.answers and q.meta["id_aliases"] == str(afile)
    monkeypatch.setenv(TWOWIKI_ALIASES_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match="KGRAG_2WIKI_ALIASES"):
        load_questions("2wiki", path=qfile)
    monkeypatch.delenv(TWOWIKI_ALIASES_ENV)
    assert load_questions("2wiki", path=qfile)[0].answers == ["Russia"]   # none in the shared data: no aliases


def test_a_run_records_the_alias_file_and_one_made_without_it_is_another_run(tmp_path, offline_parts, monkeypatch):
    """The manifest says which 2Wiki scores had the aliases (the report flags the others as lower
    bounds); adding the alias file is another run, not a resume of the one scored without it."""
    from kgrag_lib.experiment import run_experiment
    from kgrag_lib.runner import StaleRunError

    qfile, afile = _write(tmp_path)
    monkeypatch.delenv(TWOWIKI_ALIASES_ENV, raising=False)
    out = tmp_path / "run"
    run_experiment("nor", "2wiki", out, profile="cpu-smoke", qa_file=str(qfile), n=1, progress=False)
    assert json.loads((out / "manifest.json").read_text())["config"]["answer_aliases"] is None
    monkeypatch.setenv(TWOWIKI_ALIASES_ENV, str(afile))
    with pytest.raises(StaleRunError, match="answer_aliases"):
        run_experiment("nor", "2wiki", out, profile="cpu-smoke", qa_file=str(qfile), n=1, progress=False)
    run_experiment("nor", "2wiki", tmp_path / "with", profile="cpu-smoke", qa_file=str(qfile), n=1, progress=False)
    assert json.loads((tmp_path / "with" / "manifest.json").read_text())["config"]["answer_aliases"] == str(afile)


def test_a_run_scored_without_the_aliases_says_its_scores_are_lower_bounds(tmp_path, offline_parts, monkeypatch, capsys):
    """Issue 41: every 2Wiki table a notebook prints sits under this line when the alias file is absent."""
    from kgrag_lib import experiment
    from kgrag_lib.experiment import run_experiment

    qfile, afile = _write(tmp_path)
    monkeypatch.delenv(TWOWIKI_ALIASES_ENV, raising=False)
    monkeypatch.setattr(experiment, "_SAID", set())
    run_experiment("nor", "2wiki", tmp_path / "a", profile="cpu-smoke", qa_file=str(qfile), n=1, progress=False)
    run_experiment("vanilla-rag", "2wiki", tmp_path / "b", profile="cpu-smoke", qa_file=str(qfile), n=1, progress=False)
    err = capsys.readouterr().err
    assert err.count("2Wiki is scored without its id aliases") == 1 and "lower bounds of the official scorer" in err
    monkeypatch.setattr(experiment, "_SAID", set())
    monkeypatch.setenv(TWOWIKI_ALIASES_ENV, str(afile))
    run_experiment("nor", "2wiki", tmp_path / "c", profile="cpu-smoke", qa_file=str(qfile), n=1, progress=False)
    assert "without its id aliases" not in capsys.readouterr().err
