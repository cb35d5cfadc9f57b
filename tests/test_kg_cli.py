"""`kgrag kg stats|neighbors|build` on small files in the real formats, KG specs and the real MetaQA KB."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from kgrag_lib.commands import kg as kg_cmd
from kgrag_lib.errors import DataFormatError, KgragError
from kgrag_lib.kg import UnknownEntityError
from kgrag_lib.paths import data_root

KB = data_root() / "metaqa" / "kb.txt"
needs_kb = pytest.mark.skipif(not KB.is_file(), reason=f"real MetaQA KB not found at {KB}")

SMALL = ["Kismet|directed_by|William Dieterle", "Kismet|starred_actors|Marlene Dietrich",
         "Blonde Venus|starred_actors|Marlene Dietrich", "Kismet|directed_by|William Dieterle",
         "Blonde Venus|release_year|1932"]


def run(argv: list[str], capsys) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="kgrag")
    kg_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    rc = args.func(args)
    return rc, capsys.readouterr().out


@pytest.fixture()
def small_kb(tmp_path: Path) -> Path:
    path = tmp_path / "kb.txt"
    path.write_text("\n".join(SMALL) + "\n", encoding="utf-8")
    return path


def test_stats_small_metaqa_file_dedupes(small_kb: Path, capsys) -> None:
    rc, out = run(["kg", "stats", "--triples", str(small_kb)], capsys)
    assert rc == 0 and json.loads(out) == {"entities": 5, "relations": 3, "triples": 4}


@pytest.mark.parametrize("direction,expected", [
    ("out", ["<Kismet | directed_by | William Dieterle>", "<Kismet | starred_actors | Marlene Dietrich>"]),
    ("in", []),
    ("both", ["<Blonde Venus | release_year | 1932>", "<Blonde Venus | starred_actors | Marlene Dietrich>",
              "<Kismet | directed_by | William Dieterle>", "<Kismet | starred_actors | Marlene Dietrich>"]),
])
def test_neighbors_two_hops_each_direction(small_kb: Path, capsys, direction: str, expected: list[str]) -> None:
    rc, out = run(["kg", "neighbors", "--triples", str(small_kb), "--entity", "Kismet", "--hops", "3",
                   "--direction", direction], capsys)
    assert rc == 0 and out.splitlines() == expected


def test_neighbors_in_direction_and_case_insensitive_name(small_kb: Path, capsys) -> None:
    rc, out = run(["kg", "neighbors", "--triples", str(small_kb), "--entity", "marlene dietrich", "--hops", "1",
                   "--direction", "in"], capsys)
    assert out.splitlines() == ["<Blonde Venus | starred_actors | Marlene Dietrich>",
                                "<Kismet | starred_actors | Marlene Dietrich>"]


def test_unknown_entity_and_bad_hops(small_kb: Path, capsys) -> None:
    with pytest.raises(UnknownEntityError, match="did you mean: 'Kismet'") as err:
        run(["kg", "neighbors", "--triples", str(small_kb), "--entity", "Kismat"], capsys)
    assert isinstance(err.value, KgragError)
    with pytest.raises(KgragError, match="--hops"):
        run(["kg", "neighbors", "--triples", str(small_kb), "--entity", "Kismet", "--hops", "0"], capsys)
    with pytest.raises(KgragError, match="no such file"):
        run(["kg", "stats", "--triples", str(small_kb.parent / "missing.txt")], capsys)


def test_cli_main_prints_error_without_traceback(small_kb: Path, capsys) -> None:
    cli = pytest.importorskip("kgrag_lib.cli")
    rc = cli.main(["kg", "neighbors", "--triples", str(small_kb), "--entity", "Blond Venus"])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown entity 'Blond Venus'" in err and "'Blonde Venus'" in err and "Traceback" not in err


def test_format_inference_and_tsv_wikidata5m(tmp_path: Path, capsys) -> None:
    tsv = tmp_path / "facts.tsv"
    tsv.write_text("a\tlikes\tb\nb\tlikes\tc\n", encoding="utf-8")
    piped = tmp_path / "graph.txt"
    piped.write_text("a|likes|b\n", encoding="utf-8")
    wd = tmp_path / "wikidata5m_transductive_valid.txt"
    wd.write_text("Q1\tP31\tQ5\nQ2\tP31\tQ5\nQ1\tP31\tQ5\n", encoding="utf-8")
    assert [kg_cmd.infer_format(p) for p in (tsv, piped, wd, tmp_path / "kb.txt")] == \
        ["tsv", "metaqa", "wikidata5m", "metaqa"]
    assert json.loads(run(["kg", "stats", "--triples", str(tsv)], capsys)[1]) == \
        {"entities": 3, "relations": 1, "triples": 2}
    assert json.loads(run(["kg", "stats", "--triples", str(wd)], capsys)[1]) == \
        {"entities": 3, "relations": 1, "triples": 2}
    with pytest.raises(DataFormatError, match=r"facts\.tsv:1"):
        run(["kg", "stats", "--triples", str(tsv), "--format", "metaqa"], capsys)


def test_build_then_query_store(small_kb: Path, tmp_path: Path, capsys) -> None:
    rc, out = run(["kg", "build", "--triples", str(small_kb), "--out", str(tmp_path / "store")], capsys)
    assert rc == 0 and json.loads(out)["triples"] == 4
    _, stats = run(["kg", "stats", "--store", str(tmp_path / "store")], capsys)
    assert json.loads(stats) == {"entities": 5, "relations": 3, "triples": 4}
    _, lines = run(["kg", "neighbors", "--store", str(tmp_path / "store"), "--entity", "1932", "--direction", "in"],
                   capsys)
    assert lines.splitlines() == ["<Blonde Venus | release_year | 1932>"]


def test_kg_spec_goes_through_load_kg(small_kb: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGRAG_DATA_ROOT", str(tmp_path / "no-data"))
    rc, out = run(["kg", "stats", "--kg", f"metaqa:{small_kb}"], capsys)
    assert rc == 0 and json.loads(out) == {"entities": 5, "relations": 3, "triples": 4}
    assert list((tmp_path / "cache" / "kg").glob("metaqa-*/stats.json"))   # built once into the KG cache
    rc, out = run(["kg", "build", "--kg", f"metaqa:{small_kb}", "--out", str(tmp_path / "copy")], capsys)
    assert rc == 0 and json.loads(out)["triples"] == 4
    _, lines = run(["kg", "neighbors", "--store", str(tmp_path / "copy"), "--entity", "1932", "--direction", "in"],
                   capsys)
    assert lines.splitlines() == ["<Blonde Venus | release_year | 1932>"]
    with pytest.raises(KgragError, match="kg='2wiki-evidence-oracle'.*lag_2wiki_dev_4000_nocontext.json"):
        run(["kg", "stats", "--kg", "2wiki-evidence-oracle"], capsys)


@needs_kb
def test_real_metaqa_stats_and_neighbors(capsys) -> None:
    import pandas as pd

    rc, out = run(["kg", "stats", "--triples", str(KB)], capsys)
    assert rc == 0 and json.loads(out) == {"entities": 43_234, "relations": 9, "triples": 133_582}
    rc, out = run(["kg", "neighbors", "--triples", str(KB), "--entity", "William Dieterle", "--hops", "1",
                   "--direction", "both"], capsys)
    df = pd.read_csv(KB, sep="|", header=None, names=["s", "r", "o"], dtype=str, keep_default_na=False,
                     quoting=csv.QUOTE_NONE)
    inc = df[(df.s == "William Dieterle") | (df.o == "William Dieterle")]
    expected = sorted(f"<{s} | {r} | {o}>" for s, r, o in inc.itertuples(index=False, name=None))
    assert rc == 0 and out.splitlines() == expected and len(expected) > 10


def test_build_never_replaces_an_existing_folder_or_file_without_overwrite(small_kb: Path, tmp_path: Path,
                                                                           capsys) -> None:
    from kgrag_lib.errors import ConfigError

    out = tmp_path / "store"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="exists and is not empty; nothing was changed"):
        run(["kg", "build", "--triples", str(small_kb), "--out", str(out)], capsys)
    assert (out / "mine.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        run(["kg", "build", "--triples", str(small_kb), "--out", str(tmp_path / "file")], capsys)
    rc, _ = run(["kg", "build", "--triples", str(small_kb), "--out", str(tmp_path / "fresh")], capsys)
    assert rc == 0
    with pytest.raises(ConfigError, match="--overwrite"):      # a built store is not replaced silently either
        run(["kg", "build", "--triples", str(small_kb), "--out", str(tmp_path / "fresh")], capsys)
