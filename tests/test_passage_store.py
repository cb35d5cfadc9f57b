"""The memory-mapped psgs_w100 passage store (`data.passage_store`): built once per input
fingerprint, reopened without reading the TSV, never left half-built under its final name; and
the `wikipedia:<tsv>` corpus that uses it."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from fakes import BagOfWordsEmbedder
from kgrag_lib.data import passage_store as ps
from kgrag_lib.data.passage_store import PassageStore, open_passage_store, source_fingerprint
from kgrag_lib.data.wikipedia import iter_passages
from kgrag_lib.errors import DataFormatError
from kgrag_lib.methods.kg_infused import stages
from kgrag_lib.methods.kg_infused.corpus import build_corpus_index, corpus_cache_path, load_passages
from kgrag_lib.records import Passage
from kgrag_lib.retrieval import embed_cached

WORDS = ["alpha", "béta", "Γάμμα", "naïve", "日本語", 'quo"ted', "river", "film", "🙂", "x", "tab"]
TITLES = ["Plain title", 'Title with "quotes"', "Tab\there", "Ünïcode", "", "Comma, title", "A 'single' one"]


def write_psgs(path, n: int, seed: int = 0) -> list[Passage]:
    """A psgs_w100.tsv in DPR's exact form: header `id<TAB>text<TAB>title`, the text always in
    double quotes with inner quotes doubled, the title quoted only when it has a tab or a quote."""
    rng = random.Random(seed)
    rows = []
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("id\ttext\ttitle\n")
        for i in range(1, n + 1):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
            title = f"{rng.choice(TITLES)} {i % 97}".strip()
            quoted = '"' + title.replace('"', '""') + '"' if any(c in title for c in '\t"') else title
            f.write(f'{i}\t"{text.replace(chr(34), chr(34) * 2)}"\t{quoted}\n')
            rows.append(Passage(pid=str(i), text=text, title=title))
    return rows


@pytest.fixture
def tsv(tmp_path):
    path = tmp_path / "psgs_w100.tsv"
    return path, write_psgs(path, 3000)


def test_rows_equal_iter_passages_and_texts_stream_in_blocks(tsv, tmp_path):
    path, rows = tsv
    store = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    parsed = list(iter_passages(path))
    assert parsed == rows and len(store) == len(rows)
    for i in random.Random(1).sample(range(len(rows)), 200) + [0, len(rows) - 1]:
        assert store[i] == parsed[i]
    assert store[-1] == parsed[-1] and store[5:9] == parsed[5:9] and store[::500] == parsed[::500]
    assert store.take(np.array([7, 3, 7])) == [parsed[7], parsed[3], parsed[7]]
    with pytest.raises(IndexError, match="out of range"):
        store[len(rows)]
    assert [t for b in store.iter_texts(block=257) for t in b] == [p.as_text() for p in parsed]
    assert [t for b in store.iter_texts(block=100, start=2990, stop=5000) for t in b] == \
        [p.as_text() for p in parsed[2990:]]
    meta = store.meta
    assert meta["rows"] == 3000 and meta["fingerprint"] == source_fingerprint(path)
    assert meta["source"] == str(path.resolve()) and meta["build_seconds"] >= 0 and meta["version"] == ps.FORMAT_VERSION
    assert store.folder.name == f"psgs_w100-{meta['fingerprint'][:16]}"
    assert sorted(p.name for p in store.folder.iterdir()) == sorted(
        ["meta.json"] + [f"{c}.{s}" for c in ps.COLUMNS for s in ("bin", "offsets.npy")])


def test_a_second_open_does_not_read_the_tsv(tsv, tmp_path, monkeypatch):
    path, _ = tsv
    first = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    mtime = (first.folder / "meta.json").stat().st_mtime_ns

    def no_parse(*a, **kw):
        raise AssertionError("the TSV was parsed again")

    monkeypatch.setattr(ps, "iter_passages", no_parse)
    again = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    assert again.folder == first.folder and len(again) == len(first) and again[17] == first[17]
    assert (again.folder / "meta.json").stat().st_mtime_ns == mtime


def test_a_build_killed_midway_leaves_nothing_under_the_final_name(tsv, tmp_path, monkeypatch):
    path, rows = tsv
    real = ps.iter_passages
    monkeypatch.setattr(ps, "BUILD_BLOCK", 500)   # some blocks are on disk when it dies

    def dies(source):
        for k, p in enumerate(real(source)):
            if k == 1700:
                raise KeyboardInterrupt
            yield p

    monkeypatch.setattr(ps, "iter_passages", dies)
    with pytest.raises(KeyboardInterrupt):
        open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    parent = tmp_path / "cache" / "passages"
    assert [p.name for p in parent.iterdir() if not p.name.endswith(".lock")] == []
    monkeypatch.setattr(ps, "iter_passages", real)
    store = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    assert len(store) == len(rows) and store[1699] == rows[1699]


def test_a_changed_tsv_gets_a_new_store(tsv, tmp_path):
    path, _ = tsv
    first = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    rows = write_psgs(path, 2999, seed=5)
    second = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    assert second.folder != first.folder and second.fingerprint != first.fingerprint
    assert len(second) == 2999 and second[10] == rows[10]
    assert first[10] != second[10]   # the old store still reads its own rows


def test_a_damaged_store_is_named_and_rebuilt(tsv, tmp_path, caplog):
    path, rows = tsv
    store = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    blob = store.folder / "texts.bin"
    blob.write_bytes(blob.read_bytes()[:-10])
    with pytest.raises(DataFormatError, match=r"texts\.bin: malformed input; expected \d+ bytes"):
        PassageStore.open(store.folder)
    again = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    assert again[len(rows) - 1] == rows[-1]
    assert any("is damaged" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("at, value", [(2, "offsets[0]"), (1500, "offsets[1499] - 1"), (2999, "offsets[2998] // 2")])
def test_offsets_damaged_inside_their_range_are_refused_when_opened(tsv, tmp_path, caplog, at, value):
    """Issue 59: only the first and last offsets were checked, so an offset damaged inside the range
    opened (and embedded) passage 2 as empty text. Offsets must never go down."""
    path, rows = tsv
    store = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    offsets_path = store.folder / "texts.offsets.npy"
    offsets = np.load(offsets_path)
    offsets[at] = eval(value, {"offsets": offsets})   # still between the first and the last offset
    assert offsets[0] <= offsets[at] <= offsets[-1]
    np.save(offsets_path, offsets)
    with pytest.raises(DataFormatError, match=rf"texts\.offsets\.npy: malformed input; expected non-decreasing row "
                                              rf"offsets; got 'offset {at} \(\d+\) below offset {at - 1} \(\d+\)'"):
        PassageStore.open(store.folder)
    again = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)   # the cached store: rebuilt
    assert again[at] == rows[at] and again[at - 1] == rows[at - 1]


def test_wikipedia_corpus_is_the_store_and_its_embeddings_are_keyed_by_its_fingerprint(tsv, tmp_path):
    path, rows = tsv
    cache = tmp_path / "cache"
    corpus = build_corpus_index(f"wikipedia:{path}", BagOfWordsEmbedder(), tmp_path, cache, show_progress=False)
    assert isinstance(corpus.passages, PassageStore) and len(corpus) == len(rows)
    listed = embed_cached(BagOfWordsEmbedder(), [p.as_text() for p in rows], cache_dir=tmp_path / "other",
                          show_progress=False)
    target = corpus_cache_path(f"wikipedia:{path}", BagOfWordsEmbedder(), tmp_path, cache)
    assert target.name.startswith("corpus-wikipedia-")
    np.testing.assert_array_equal(np.load(target), np.asarray(listed))
    qvec = BagOfWordsEmbedder().encode([rows[123].as_text()])
    got = stages.retrieve_single(corpus.passages, corpus.index, qvec, 3)
    assert got.passages[0] == rows[123]
    assert isinstance(load_passages(f"wikipedia:{path}", tmp_path, cache), PassageStore)


def test_a_second_run_loads_the_saved_corpus_index_instead_of_building_it(tsv, tmp_path, caplog, monkeypatch):
    """Issue 43: the index of a passage store is built once; a later process memory-maps it (one
    log line says so) and finds the same passages. A small in-memory corpus saves nothing."""
    import logging

    from kgrag_lib.retrieval import index_store

    path, rows = tsv
    cache = tmp_path / "cache"
    first = build_corpus_index(f"wikipedia:{path}", BagOfWordsEmbedder(), tmp_path, cache, show_progress=False,
                               index="IVF{nlist},SQ8")
    [saved] = (cache / "indexes").glob("corpus-wikipedia-*.faiss")
    monkeypatch.setattr(index_store, "_build_and_save", lambda *a, **k: pytest.fail("rebuilt the saved index"))
    with caplog.at_level(logging.INFO):
        again = build_corpus_index(f"wikipedia:{path}", BagOfWordsEmbedder(), tmp_path, cache, show_progress=False,
                                   index="IVF{nlist},SQ8")
    assert any("loaded saved index" in r.getMessage() and saved.name in r.getMessage() for r in caplog.records)
    qvecs = BagOfWordsEmbedder().encode([rows[i].as_text() for i in (5, 77, 310)])
    np.testing.assert_array_equal(first.index.search(qvecs, 4)[1], again.index.search(qvecs, 4)[1])
    assert [again.passages[int(i)] for i in again.index.search(qvecs, 1)[1][:, 0]] == [rows[5], rows[77], rows[310]]


def test_empty_title_and_a_store_of_one_row(tmp_path):
    path = tmp_path / "one.tsv"
    path.write_text('id\ttext\ttitle\n9\t"only ""this"""\t\n', encoding="utf-8")
    store = open_passage_store(path, cache_dir=tmp_path / "c", show_progress=False)
    assert store[0] == Passage(pid="9", text='only "this"', title="")
    assert list(store.iter_texts()) == [['only "this"']]
    assert os.stat(store.folder / "titles.bin").st_size == 0


def _data_cli(argv: list[str]) -> int:
    import argparse

    from kgrag_lib.commands import data as data_cmd

    parser = argparse.ArgumentParser(prog="kgrag")
    data_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_data_embed_shards_fill_the_cache_a_run_opens(tsv, tmp_path, monkeypatch, capsys):
    """Issue 43: `kgrag data embed --shard i/N` (one process per GPU) writes the array the run's
    `build_corpus_index` then opens without encoding anything; the last shard merges."""
    from kgrag_lib.retrieval import embedder as embedder_mod

    path, rows = tsv
    cache = tmp_path / "cache"
    made: list[BagOfWordsEmbedder] = []
    monkeypatch.setattr(embedder_mod, "load_embedder", lambda *a, **k: made.append(BagOfWordsEmbedder()) or made[-1])
    base = ["data", "embed", "--corpus", f"wikipedia:{path}", "--cache-dir", str(cache), "--root", str(tmp_path)]
    assert _data_cli(base + ["--shard", "1/3"]) == 0
    assert "shards 0, 2 still to run" in capsys.readouterr().out
    assert _data_cli(base + ["--shard", "0/3"]) == 0 and _data_cli(base + ["--shard", "2/3"]) == 0
    assert [e.texts_seen for e in made] == [1000, 1000, 1000]
    target = corpus_cache_path(f"wikipedia:{path}", BagOfWordsEmbedder(), tmp_path, cache)
    assert target.is_file() and not list(target.parent.glob("*.shard-*.npy"))
    run_embedder = BagOfWordsEmbedder()
    build_corpus_index(f"wikipedia:{path}", run_embedder, tmp_path, cache, show_progress=False)
    assert run_embedder.texts_seen == 0
    assert _data_cli(base) == 0 and "found done" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--shard", "3/3"], "expected I/N with 0 <= I < N"),
    (["--shard", "1"], "expected I/N"),
    (["--shard", "\u00b2/3"], "expected I/N"),                 # issue 59: '²'.isdigit() is True
    (["--batch-size", "0"], "--batch-size 0: expected a number of texts >= 1"),
    (["--batch-size", "-1"], "--batch-size -1: expected a number of texts >= 1"),
    (["--device", "bogus"], "--device 'bogus': expected cpu, cuda, cuda:N or mps"),
    (["--device", "cuda:999"], "--device cuda:999: torch sees \\d+ CUDA device"),
    ([], "name exactly one of --corpus"),
])
def test_data_embed_refuses_bad_arguments(argv, message, tmp_path):
    from kgrag_lib.errors import ConfigError

    corpus = [] if argv == [] else ["--corpus", "wikipedia:/nonexistent.tsv"]
    with pytest.raises(ConfigError, match=message):
        _data_cli(["data", "embed", *corpus, *argv, "--cache-dir", str(tmp_path)])


def test_a_non_utf8_byte_in_a_stored_blob_names_the_file_and_the_row(tmp_path, capsys, monkeypatch):
    """Issue 59: a non-UTF-8 byte in a passage store's blob (damaged or edited; the build writes UTF-8
    only) ended in a UnicodeDecodeError traceback, at access or in `data embed`. Now a DataFormatError
    naming the blob, the row and the byte, and `data embed` refuses in one line (exit 2)."""
    from kgrag_lib import cli
    from kgrag_lib.retrieval import embedder as embedder_mod

    path = tmp_path / "psgs_w100.tsv"
    rows = write_psgs(path, 40)
    store = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    blob = store.folder / "texts.bin"
    at = int(np.load(store.folder / "texts.offsets.npy")[7])   # the first byte of row 7's text
    data = bytearray(blob.read_bytes())
    data[at] = 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match=rf"{blob}: malformed input; expected block 0 \(bytes 0-"):
        PassageStore.open(store.folder)[7]   # the block checksum sees the edit first
    _record_again(store.folder)   # as if the build had written that byte: the decode still refuses it
    store = PassageStore.open(store.folder)   # opens: sizes and offsets are as built
    assert store[6] == rows[6]
    says = rf"{blob}: malformed input; expected UTF-8 text .*got 'row 7: byte 0xff at blob offset {at} is not UTF-8'"
    with pytest.raises(DataFormatError, match=says):
        store[7]
    with pytest.raises(DataFormatError, match=says):
        list(store.iter_texts(block=16))

    monkeypatch.setattr(embedder_mod, "load_embedder", lambda *a, **k: BagOfWordsEmbedder())
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    capsys.readouterr()
    rc = cli.main(["data", "embed", "--corpus", f"wikipedia:{path}", "--cache-dir", str(tmp_path / "cache"),
                   "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    [line] = [ln for ln in err.splitlines() if "error" in ln]   # beside kgrag's INFO line "opened passage store"
    assert line.startswith(f"kgrag: error: {blob}: malformed input") and "row 7" in line


def _record_again(folder) -> None:
    """Record the block checksums of the store's files as they are now (a store built with that content)."""
    from kgrag_lib.blocksums import record_file

    meta = json.loads((folder / ps.META).read_text())
    for c in ps.COLUMNS:
        meta["columns"][c]["checksums"] = {"blob": record_file(folder / f"{c}.bin"),
                                           "offsets": record_file(folder / f"{c}.offsets.npy")}
    (folder / ps.META).write_text(json.dumps(meta))


def _change_byte(path, at: int, value: int) -> None:
    data = bytearray(path.read_bytes())
    assert data[at] != value
    data[at] = value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("file, where", [("texts.bin", "middle"), ("pids.bin", "middle"),
                                         ("titles.offsets.npy", "offset")])
def test_a_byte_changed_anywhere_is_refused_when_its_block_is_read(tsv, tmp_path, file, where):
    """Issue 59: a byte changed inside a blob (still UTF-8) or an offset moved between its neighbours
    was read back as another passage, with no error. Every file's 64 KiB blocks carry a crc32 from
    the build; the first read of a block checks it, and the error names the file, the block and the
    remedy (delete the folder, rerun: the store is rebuilt from its TSV)."""
    path, rows = tsv
    store = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    target = store.folder / file
    if where == "offset":   # moved by one byte, still between its neighbours: passes the order check
        offsets = np.load(target, mmap_mode="r")
        row = next(i for i in range(1500, len(rows)) if offsets[i + 1] - offsets[i] > 1)
        at, value = offsets.offset + 8 * row, int(offsets[row]) + 1
        del offsets
        data = bytearray(target.read_bytes())
        data[at:at + 8] = value.to_bytes(8, "little")
        target.write_bytes(bytes(data))
    else:
        at = target.stat().st_size // 2
        old = target.read_bytes()[at]
        _change_byte(target, at, ord("7") if old != ord("7") else ord("8"))
        row = int(np.searchsorted(np.load(store.folder / file.replace(".bin", ".offsets.npy")), at, side="right")) - 1
    block = at // (1 << 16)
    opened = PassageStore.open(store.folder)   # sizes as built: it opens, the damage is met on reading
    if block:
        assert opened[0] == rows[0]   # rows in other blocks still read
    says = (rf"^{target}: malformed input; expected block {block} \(bytes {block << 16}-\d+\) as written, crc32 "
            rf"[0-9a-f]{{8}} \(the store is damaged: delete {store.folder} and rerun; the store is built again "
            rf"from {path}\); got 'crc32 [0-9a-f]{{8}}: changed since written'$")
    with pytest.raises(DataFormatError, match=says):
        opened[row]
    with pytest.raises(DataFormatError, match=says):
        [(p.pid, p.title, p.text) for p in PassageStore.open(store.folder)]


def test_a_store_written_before_block_checksums_is_refused_and_rebuilt(tsv, tmp_path, caplog):
    """Version 1 stores carry no checksums, so damage inside them cannot be seen: refused, naming the
    folder to delete; `open_passage_store` (every run) rebuilds it from the TSV."""
    path, rows = tsv
    store = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    meta = json.loads((store.folder / ps.META).read_text())
    meta["version"] = 1
    for c in ps.COLUMNS:
        del meta["columns"][c]["checksums"]
    (store.folder / ps.META).write_text(json.dumps(meta))
    with pytest.raises(DataFormatError, match=rf"version 2 \(version 1 was written before block checksums: delete "
                                              rf"{store.folder} and rerun.*got \"'kgrag-passage-store' version 1\""):
        PassageStore.open(store.folder)
    again = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    assert again.meta["version"] == 2 and again[2999] == rows[2999]
    assert any("rebuilding it" in r.getMessage() for r in caplog.records)


def test_a_source_path_with_a_non_utf8_byte_builds_and_reopens(tmp_path):
    """A TSV whose name holds a non-UTF-8 byte (str keeps it as a surrogate) failed in the fingerprint
    with a UnicodeEncodeError traceback; its bytes are hashed as the file system gives them."""
    path = tmp_path / os.fsdecode(b"psgs-\xff.tsv")
    rows = write_psgs(path, 20)
    store = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    assert list(store) == rows and store.folder.name.startswith("psgs-_-")
    again = open_passage_store(path, cache_dir=tmp_path / "cache", show_progress=False)
    assert again.folder == store.folder and again.fingerprint == source_fingerprint(path)
    plain = tmp_path / "plain.tsv"
    write_psgs(plain, 3)   # an ordinary name hashes as before (str.encode and os.fsencode agree)
    st = plain.stat()
    import hashlib

    h = hashlib.sha256(f"{plain.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    h.update(plain.read_bytes())
    assert source_fingerprint(plain) == h.hexdigest()
