"""`kgrag data fetch --profile cpu-smoke` on a machine without ../shared: every file comes from a real
loopback HTTP mirror of the sources (tests/source_mirror.py: small files in the sources' own layouts
and archive forms), is checked, derived where the manifest says, and read by the loaders; a cut
connection resumes, a wrong checksum and a source that changed are refused, a silent server ends
after the timeout, and `kgrag study` / `kgrag run` name the exact fetch command when data is missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import source_mirror
from kgrag_lib import cli
from kgrag_lib.data import fetch
from kgrag_lib.data.check import PRESENT, check_data
from kgrag_lib.data.manifest import load_manifest
from kgrag_lib.data.registry import DATASETS, load_corpus, load_questions, metaqa_kb_path
from kgrag_lib.paths import data_root
from kgrag_lib.studies.data_needs import profile_data

CPU_SMOKE = profile_data("cpu-smoke")


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "RETRY_BACKOFF_S", 0.0)
    monkeypatch.setattr(fetch, "CHUNK", 64)   # several reads per small file, so a cut lands mid-stream
    monkeypatch.delenv("KGRAG_DATA_ROOT", raising=False)
    monkeypatch.delenv(fetch.MIRROR_ENV, raising=False)
    with source_mirror.Mirror() as m:
        m.manifest, served = source_mirror.mirror_manifest(tmp_path / "manifest", CPU_SMOKE)
        m.serve(served)
        yield m


def _fetch(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = cli.main(["data", "fetch", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, "".join(ln + "\n" for ln in re.split(r"[\r\n]", err) if ln.startswith("kgrag"))


def _args(m, root: Path, *more: str) -> list[str]:
    return [*more, "--root", str(root), "--manifest", str(m.manifest), "--mirror", m.url]


def test_cpu_smoke_reads_what_its_settings_name():
    assert CPU_SMOKE == ["metaqa", "hotpotqa", "2wiki", "2wiki-aliases", "musique", "wikidata5m-slice"]
    assert "bamboogle" in profile_data("gpu-paper") and "wikipedia-2018" in profile_data("gpu-paper-data")


def test_fetch_profile_cpu_smoke_from_the_mirror_then_the_loaders_read_it(mirror, tmp_path, capsys):
    root = tmp_path / "root"
    rc, out, err = _fetch(_args(mirror, root, "--profile", "cpu-smoke"), capsys)
    assert rc == 0, out + err
    assert "metaqa/kb.txt: derived (metaqa_kb" in out and "metaqa/kb.txt: installed, sha256 verified" in out
    assert "DERIVED_lag_dev_questions_with_gold_titles_in_HippoRAG_corpus_354.json: installed, sha256 verified" in out
    assert "2wiki/id_aliases.json: installed" in out
    statuses = check_data(root, mirror.manifest)
    assert {s.path: s.status for s in statuses if s.path != "2wiki/id_aliases.json"} == \
        {s.path: PRESENT for s in statuses if s.path != "2wiki/id_aliases.json"}
    # every URL came through the mirror once, with nothing left beside the files
    assert len(mirror.state.requests) == len(mirror.state.files)
    leftovers = (".part", ".unpacking", ".deriving", ".rejected", ".zip")
    assert not [p for p in root.rglob("*") if p.name.endswith(leftovers)]

    # the loaders read what was fetched, every split of every dataset in it
    keys = set(CPU_SMOKE)
    for name, spec in DATASETS.items():
        if spec.manifest_key in keys:
            for split in spec.splits:
                assert load_questions(name, split=split, root=root), (name, split)
    assert metaqa_kb_path(root).read_text().startswith("Kismet|directed_by|William Dieterle\n")
    assert [q.qid for q in load_questions("2wiki", root=root)] == [r["_id"] for r in source_mirror.TWOWIKI_DEV[:3]]
    assert "Dir. 0" in load_questions("2wiki", root=root)[0].answers   # the official id aliases are read
    assert len(load_corpus("2wiki", root=root)) == 3

    rc, out, _ = _fetch(_args(mirror, root, "--profile", "cpu-smoke"), capsys)   # all there: nothing requested
    assert rc == 0 and "nothing to fetch" in out and len(mirror.state.requests) == len(mirror.state.files)

    # a KB obtained another way needs no ID-form sources: neither check nor fetch asks for them
    for src in ("src_RoBERTa-KGQA", "src_keallm"):
        for p in (root / "metaqa" / src).iterdir():
            p.unlink()
    metaqa = [s for s in check_data(root, mirror.manifest) if s.dataset == "metaqa"]
    assert not [s for s in metaqa if s.required and s.status != PRESENT]
    assert sum("only an input of metaqa/kb.txt" in s.detail for s in metaqa) == 4
    rc, out, _ = _fetch(_args(mirror, root, "metaqa"), capsys)
    assert rc == 0 and "nothing to fetch" in out and len(mirror.state.requests) == len(mirror.state.files)


def test_a_cut_connection_resumes_with_a_range_request(mirror, tmp_path, capsys):
    url = load_manifest(mirror.manifest)["datasets"]["hotpotqa"]["files"][0]["url"]
    path = mirror.path_of(url)
    mirror.state.cut_after[path] = 200
    rc, out, err = _fetch(_args(mirror, tmp_path / "root", "hotpotqa"), capsys)
    assert rc == 0, out + err
    ranges = [r for p, r in mirror.state.requests if p == path]
    assert ranges == [None, "bytes=200-"]
    assert "AMOR_test500_distractor.jsonl: installed, sha256 verified" in out


def test_a_wrong_checksum_is_refused_and_nothing_installed(mirror, tmp_path, capsys):
    url = load_manifest(mirror.manifest)["datasets"]["musique"]["files"][0]["url"]
    mirror.state.files[mirror.path_of(url)] += b"\n"   # one byte more than the source's file
    root = tmp_path / "root"
    rc, out, err = _fetch(_args(mirror, root, "musique"), capsys)
    assert rc != 0 and "MIGRES_200_musique_ans.jsonl: sha256" in err and "not installed" in err
    assert not (root / "musique" / "MIGRES_200_musique_ans.jsonl").exists()
    assert (root / "musique" / "MIGRES_200_musique_ans.jsonl.rejected").is_file()


def test_a_source_that_changed_since_the_first_fetch_is_refused(mirror, tmp_path, capsys):
    root = tmp_path / "root"
    rc, out, _ = _fetch(_args(mirror, root, "2wiki-aliases"), capsys)
    assert rc == 0 and "not verified: the manifest has no sum" in out
    first = (root / "2wiki" / "id_aliases.json").read_bytes()
    assert (root / "2wiki" / "data_ids_april7.zip.sha256").is_file()   # recorded on the first fetch
    url = load_manifest(mirror.manifest)["datasets"]["2wiki-aliases"]["files"][0]["url"]
    mirror.state.files[mirror.path_of(url)] = source_mirror.aliases_zip('{"Q_id": "Q1", "aliases": ["x"]}\n')
    rc, out, err = _fetch(_args(mirror, root, "2wiki-aliases", "--force"), capsys)
    assert rc != 0 and "first fetch recorded" in err and "changed the file" in err
    assert (root / "2wiki" / "id_aliases.json").read_bytes() == first   # the old copy kept


def test_a_server_silent_after_its_headers_ends_at_the_timeout(mirror, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fetch, "RETRIES", 1)
    url = load_manifest(mirror.manifest)["datasets"]["wikidata5m-slice"]["files"][0]["url"]
    mirror.state.silent.add(mirror.path_of(url))
    rc, out, err = _fetch(_args(mirror, tmp_path / "root", "wikidata5m-slice", "--timeout", "0.5"), capsys)
    assert rc != 0
    assert "stayed silent for 0.5 s" in out + err and "--timeout SECONDS" in err
    assert not (tmp_path / "root" / "wikidata5m" / "libkge_test.txt").exists()


@pytest.mark.parametrize("argv, says", [(["--timeout", "0"], "--timeout"), (["--mirror", "ftp://x"], "--mirror")])
def test_a_bad_timeout_or_mirror_is_refused(mirror, tmp_path, capsys, argv, says):
    rc, _, err = _fetch(["hotpotqa", "--root", str(tmp_path / "r"), "--manifest", str(mirror.manifest), *argv], capsys)
    assert rc == 2 and says in err and mirror.state.requests == []


def test_study_and_run_name_the_exact_fetch_command_when_data_is_missing(tmp_path, capsys, monkeypatch):
    root = tmp_path / "empty"
    root.mkdir()
    monkeypatch.setenv("KGRAG_DATA_ROOT", str(root))
    from kgrag_lib.errors import MissingDataError
    from kgrag_lib.studies.data_needs import ensure_data

    with pytest.raises(MissingDataError, match=re.escape(f"kgrag data fetch --profile cpu-smoke --root {root}")):
        ensure_data("cpu-smoke")
    rc = cli.main(["study", "--profile", "cpu-smoke", "--out", str(tmp_path / "study")])
    out, err = capsys.readouterr()
    assert rc != 0 and "Traceback" not in err and f"kgrag data fetch --profile cpu-smoke --root {root}" in err
    assert not (tmp_path / "study").exists()   # refused before the first notebook
    rc = cli.main(["run", "--method", "llm-kg", "--dataset", "metaqa-1hop", "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert rc != 0 and "Traceback" not in err
    assert f"kgrag data fetch metaqa --root {root}" in err
    assert not (tmp_path / "o").exists()


def test_the_per_user_folder_is_the_root_of_last_resort(tmp_path, monkeypatch):
    from kgrag_lib import paths

    monkeypatch.delenv("KGRAG_DATA_ROOT", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(paths, "shared_data_dir", lambda: None)   # a clone with no ../shared beside it
    assert paths.data_root() == (tmp_path / "xdg" / "kgrag" / "data").resolve()
    assert paths.data_root_origin() == "the per-user data folder"
    assert paths.data_root(tmp_path / "given") == (tmp_path / "given").resolve()


def test_the_study_fetches_into_the_per_user_folder_only(mirror, tmp_path, monkeypatch, capsys):
    """With no root chosen and no ../shared, the study fetches before its first notebook and says where;
    the same call with a root someone chose only names the command (tested above)."""
    from kgrag_lib import paths
    from kgrag_lib.data import fetch as fetch_mod
    from kgrag_lib.studies import data_needs

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(paths, "shared_data_dir", lambda: None)
    monkeypatch.setattr(fetch_mod, "MANIFEST_PATH", mirror.manifest)
    monkeypatch.setattr("kgrag_lib.data.manifest.MANIFEST_PATH", mirror.manifest)
    said: list[str] = []
    root = data_needs.ensure_data("cpu-smoke", say=said.append, mirror=mirror.url)
    assert root == (tmp_path / "xdg" / "kgrag" / "data").resolve()
    assert said[0].startswith("kgrag: the data profile cpu-smoke reads is not here; fetching")
    assert said[-1] == f"kgrag: the data of profile cpu-smoke is in {root}"
    assert (root / "metaqa" / "kb.txt").read_text() == source_mirror.KB


REAL = data_root()


@pytest.mark.skipif(not (REAL / "metaqa" / "kb.txt").is_file(), reason=f"real data root not found at {REAL}")
def test_the_profile_list_covers_what_cpu_smoke_notebooks_read(tmp_path, monkeypatch):
    """A root holding only the entries `profile_data` lists (links to the real files) serves every read that
    cpu-smoke's notebooks make through their settings: each dataset and split they sample, each corpus, the
    KGs that need no LLM (notebook 20 also builds the oracle one), the MetaQA KB, the Wikidata5M slice and
    notebook 26's question pool. An entry missing from the list fails here with the loader's MissingDataError."""
    import dataclasses

    from kgrag_lib.config import fill_run_n, profile_section
    from kgrag_lib.kg.sources import SOURCES, load_kg
    from kgrag_lib.methods.registry import available_methods
    from kgrag_lib.studies import NOTEBOOKS, load_profile, notebook_settings

    root = tmp_path / "root"
    manifest = load_manifest()["datasets"]
    for name in CPU_SMOKE:
        for spec in manifest[name]["files"]:
            if (REAL / spec["path"]).is_file():
                (root / spec["path"]).parent.mkdir(parents=True, exist_ok=True)
                (root / spec["path"]).symlink_to(REAL / spec["path"])
    assert not (root / "bamboogle").exists() and not (root / "strategyqa").exists()   # the root is restricted
    monkeypatch.setenv("KGRAG_DATA_ROOT", str(root))
    cache = tmp_path / "cache"

    prof = load_profile("cpu-smoke")
    prof = fill_run_n(prof, profile_section(prof, "run").get("n"), "cpu-smoke")
    datasets, kgs = set(), {"2wiki-evidence-oracle"}   # notebook 20 names the oracle KG in its code
    values = [dataclasses.asdict(notebook_settings(nb, prof)) for nb in NOTEBOOKS]
    values += [dataclasses.asdict(spec.check_config(profile_section(prof, "methods", m), where="cpu-smoke"))
               for m, spec in available_methods().items()]
    for settings in values:
        for key, value in settings.items():
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, str) and v in DATASETS:
                    datasets.add(v)
                if key.endswith("kg") and isinstance(v, str) and v in SOURCES and not SOURCES[v].needs_llm:
                    kgs.add(v)
    assert {"metaqa-1hop", "hotpotqa", "2wiki", "musique"} <= datasets and "2wiki-evidence-heldout" in kgs
    for name in sorted(datasets):
        for split in DATASETS[name].splits:
            assert load_questions(name, split=split, n=2, seed=0)
        load_corpus(name)
    for spec in sorted(kgs):
        assert load_kg(spec, cache_dir=cache).store.num_triples > 0
    assert metaqa_kb_path().is_file()
    settings20 = notebook_settings("20_kg_preprocessing", prof)
    assert all((root / f).is_file() for f in settings20.slice_files)


@pytest.mark.skipif(not (REAL / "metaqa" / "kb.txt").is_file(), reason=f"real data root not found at {REAL}")
def test_the_shipped_manifest_installs_the_real_bytes(tmp_path, capsys, monkeypatch):
    """The shipped manifest end to end: a mirror serving the real files (read from ../shared/data) at its
    URLs; `data fetch --profile gpu-paper` installs every required file with its sha256 verified, the
    derived ones made by their steps, and `data check` finds them all present."""
    monkeypatch.setattr(fetch, "RETRY_BACKOFF_S", 0.0)
    monkeypatch.setattr(fetch, "RETRIES", 0)
    manifest = load_manifest()["datasets"]
    served = {}
    names = profile_data("gpu-paper")
    for name in names:
        for spec in manifest[name]["files"]:
            if spec.get("url") and not spec.get("unpack"):
                served[source_mirror._served_at(spec["url"])] = (REAL / spec["path"]).read_bytes()
    root = tmp_path / "root"
    with source_mirror.Mirror() as m:
        m.serve(served)
        rc, out, err = _fetch(["--profile", "gpu-paper", "--root", str(root), "--mirror", m.url], capsys)
    assert rc == 0, out + err
    assert "2wiki-aliases (optional): not fetched" in out   # its zip is not in ../shared/data
    assert out.count("sha256 verified") == sum(len(manifest[n]["files"]) for n in names if n != "2wiki-aliases")
    assert "not verified" not in out
    statuses = [s for s in check_data(root) if s.dataset in names and s.dataset != "2wiki-aliases"]
    assert statuses and {s.status for s in statuses} == {PRESENT}


def test_a_hand_made_root_holding_part_of_an_entry_gets_one_line_not_a_refusal(metaqa_root):
    """`--only 00` reads MetaQA alone; a root with its KB and one QA file is warned about, not refused."""
    from kgrag_lib.studies.data_needs import ensure_data, profile_data

    assert profile_data("cpu-smoke", ["00_quickstart"]) == ["metaqa"]
    said: list[str] = []
    assert ensure_data("cpu-smoke", ["00_quickstart"], say=said.append) == metaqa_root.resolve()
    assert len(said) == 1 and "lacks files profile cpu-smoke may read: metaqa (" in said[0]
    assert f"kgrag data fetch --profile cpu-smoke --root {metaqa_root.resolve()}" in said[0]
    assert not any(p.name.startswith(".kgrag-fetch") for p in metaqa_root.iterdir())   # nothing written there
