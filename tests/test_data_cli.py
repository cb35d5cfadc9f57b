"""`kgrag data check | stats` handlers, called through the parser `register` builds."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from kgrag_lib.commands import data as data_cmd
from kgrag_lib.data.manifest import file_facts, load_manifest, refresh_manifest
from kgrag_lib.paths import data_root

ROOT = data_root()
needs_data = pytest.mark.skipif(not (ROOT / "metaqa" / "kb.txt").is_file(), reason=f"real data root not found at {ROOT}")


def run(argv: list[str], capsys) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="kgrag")
    sub = parser.add_subparsers(dest="command", required=True)
    data_cmd.register(sub)
    args = parser.parse_args(argv)
    rc = args.func(args)
    return rc, capsys.readouterr().out


@needs_data
def test_check_real_root_table_and_json(capsys):
    rc, out = run(["data", "check", "--root", str(ROOT)], capsys)
    assert rc == 0
    assert "metaqa: ok" in out and "2wiki: ok" in out and "strategyqa: ok" in out
    assert "wikipedia-2018: optional, not present" in out and "psgs_w100.tsv.gz" in out
    assert "0 checksum mismatch" in out
    rc, out = run(["data", "check", "--root", str(ROOT), "--json"], capsys)
    doc = json.loads(out)
    status = {f["path"]: f["status"] for f in doc["files"]}
    assert status["metaqa/kb.txt"] == "present"
    assert status["wikipedia/psgs_w100.tsv"] == "missing"
    assert status["wikidata5m/wikidata5m_all_triplet.txt"] == "missing"


def test_check_detects_mismatch_and_missing(tmp_path, capsys):
    root = tmp_path / "root"
    (root / "toy").mkdir(parents=True)
    good = root / "toy" / "good.txt"
    good.write_text("a|b|c\n")
    bad = root / "toy" / "bad.txt"
    bad.write_text("a|b|c\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(yaml.safe_dump({"datasets": {
        "toy": {"obtain": "Ask the toy maintainers.", "required": True, "files": [
            {"path": "toy/good.txt", **file_facts(good)},
            {"path": "toy/bad.txt", **file_facts(bad)},
            {"path": "toy/absent.txt", "sha256": "0" * 64, "size": 3, "rows": 1},
        ]}}}))
    bad.write_text("a|b|d\n")  # same size, different content
    rc, out = run(["data", "check", "--root", str(root), "--manifest", str(manifest)], capsys)
    assert rc == 1
    assert "toy: INCOMPLETE" in out and "how to obtain: Ask the toy maintainers." in out
    lines = {ln.split()[1]: ln.split()[0] for ln in out.splitlines() if ln.startswith("  ") and "toy/" in ln}
    assert lines == {"toy/good.txt": "present", "toy/bad.txt": "checksum-mismatch", "toy/absent.txt": "missing"}
    rc, out = run(["data", "check", "--root", str(root), "--manifest", str(manifest), "--json"], capsys)
    assert rc == 1 and [f["status"] for f in json.loads(out)["files"]] == ["present", "checksum-mismatch", "missing"]


def test_refresh_manifest_recomputes(tmp_path):
    root = tmp_path / "root"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "q.json").write_text(json.dumps([{"a": 1}, {"a": 2}]))
    manifest = tmp_path / "m.yaml"
    manifest.write_text("# header kept\n" + yaml.safe_dump({"datasets": {"toy": {"files": [
        {"path": "toy/q.json"}, {"path": "toy/absent.txt"}]}}}))
    assert refresh_manifest(root, manifest) == ["toy/q.json"]
    assert manifest.read_text().startswith("# header kept\n")
    files = load_manifest(manifest)["datasets"]["toy"]["files"]
    assert files[0]["rows"] == 2 and files[0]["size"] == len(json.dumps([{"a": 1}, {"a": 2}]))
    assert len(files[0]["sha256"]) == 64 and "sha256" not in files[1]


@needs_data
@pytest.mark.parametrize("dataset, rel, expect", [
    ("hotpotqa", "hotpotqa/AMOR_test500_distractor.jsonl", {"questions": 500, "passages": 4920}),
    ("musique", "musique/MIGRES_200_musique_ans.jsonl", {"questions": 200, "passages": 3141}),
    ("2wiki", "2wiki/MIGRES_200_2wiki.jsonl", {"questions": 200, "questions_with_context": 164, "triples": 522}),
    ("2wiki", "2wiki/HippoRAG_2wiki_1000q_corpus.json", {"questions": 0, "passages": 6119, "kind": "corpus"}),
    ("2wiki", "2wiki/lag_2wiki_dev_4000_nocontext.json", {"questions": 4000, "passages": 0}),
    ("bamboogle", "bamboogle/bamboogle.csv", {"questions": 125, "passages": 0}),
    ("strategyqa", "strategyqa/strategyqa_train.json", {"questions": 2290, "passages": 0, "yes": 1071, "no": 1219}),
])
def test_stats_real_files(dataset, rel, expect, capsys):
    rc, out = run(["data", "stats", "--dataset", dataset, "--path", str(ROOT / rel)], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert {k: doc[k] for k in expect} == expect


@needs_data
def test_stats_metaqa_answers(capsys):
    rc, out = run(["data", "stats", "--dataset", "metaqa", "--path", str(ROOT / "metaqa/1-hop/vanilla/qa_test.txt")], capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["questions"] == 9947 and doc["passages"] == 0
    ans = doc["answers"]
    assert ans["min"] == 1 and ans["max"] >= ans["median"] >= 1 and ans["total"] >= 9947
    assert ans["mean"] == pytest.approx(ans["total"] / 9947, abs=1e-3)
    # default path: the dataset's default split under --root
    rc, out = run(["data", "stats", "--dataset", "musique", "--root", str(ROOT)], capsys)
    assert json.loads(out)["questions"] == 200


def test_stats_bad_arguments(tmp_path, capsys):
    from kgrag_lib.errors import ConfigError, MissingDataError

    with pytest.raises(ConfigError, match="no such file"):
        run(["data", "stats", "--dataset", "hotpotqa", "--path", str(tmp_path / "nope.jsonl")], capsys)
    with pytest.raises(MissingDataError, match="How to obtain it"):
        run(["data", "stats", "--dataset", "hotpotqa", "--root", str(tmp_path)], capsys)
    with pytest.raises(SystemExit):
        run(["data", "stats", "--dataset", "nq"], capsys)


def test_a_dataset_registered_in_the_registry_alone_is_accepted_by_stats(tmp_path, monkeypatch, capsys):
    """Issue 60: `kgrag data stats` reads the registry (before, its own list refused a new dataset); a
    family by manifest key (`metaqa`) still reads its first dataset's loader and default split."""
    from kgrag_lib.data import registry
    from kgrag_lib.data.check import stats_datasets, stats_default
    from kgrag_lib.data.hotpotqa import FORM, load_hotpotqa

    rows = [{"_id": f"q{i}", "question": f"Q{i}?", "answer": "a", "context": [[f"T{i}", ["s."]], ["Shared", ["x."]]]}
            for i in range(3)]
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = registry.DatasetSpec("toyqa", "toyqa", load_hotpotqa, {"dev": "toy/dev.jsonl"}, "dev", "pooled", FORM)
    monkeypatch.setitem(registry.DATASETS, "toyqa", spec)
    assert stats_datasets()["toyqa"] is spec and stats_default("metaqa") == "metaqa-1hop"
    rc, out = run(["data", "stats", "--dataset", "toyqa", "--root", str(tmp_path)], capsys)
    doc = json.loads(out)
    assert rc == 0 and (doc["dataset"], doc["questions"], doc["passages"]) == ("toyqa", 3, 4)
    assert "answers" not in doc and "yes" not in doc   # neither many answers (MetaQA) nor facts (StrategyQA)
