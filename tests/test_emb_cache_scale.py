"""The embedding cache at scale (`retrieval.emb_cache`): caller keys and streamed text sources,
per-block crc records checked by sample on open, shards merged into the one final file, and
resuming a killed shard. Synthetic sizes; BLOCK and CHUNK are shrunk so there are many blocks."""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import numpy as np
import pytest

from fakes import BagOfWordsEmbedder
from kgrag_lib.errors import CacheDamagedError, ConfigError, DataFormatError
from kgrag_lib.retrieval import ShardResult, cache_path, embed_cached, embed_shard, shard_path
from kgrag_lib.retrieval import emb_cache
from kgrag_lib.retrieval.embedder import resolve_precision

N = 1000
TEXTS = [f"passage {i} about river {i % 13} and film {i % 7}" for i in range(N)]
KEY = "test-corpus:v1"


class Source:
    """A block text source (no list of all texts): records the ranges asked for."""

    def __init__(self, texts):
        self.texts, self.asked = texts, []

    def __len__(self):
        return len(self.texts)

    def iter_texts(self, block=1024, start=0, stop=None):
        stop = len(self.texts) if stop is None else stop
        self.asked.append((start, stop))
        for a in range(start, stop, block):
            yield self.texts[a:min(a + block, stop)]


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(emb_cache, "BLOCK", 40)   # 25 blocks of N rows
    monkeypatch.setattr(emb_cache, "CHUNK", 20)


def _one_shot(tmp_path):
    return np.array(embed_cached(BagOfWordsEmbedder(), TEXTS, cache_dir=tmp_path / "one-shot", show_progress=False))


def test_a_keyed_block_source_gives_the_list_paths_array(tmp_path):
    src = Source(TEXTS)
    emb = BagOfWordsEmbedder()
    keyed = embed_cached(emb, src, key=KEY, cache_dir=tmp_path, name="corpus-x", show_progress=False)
    np.testing.assert_array_equal(np.asarray(keyed), _one_shot(tmp_path))
    path = cache_path(emb, src, key=KEY, cache_dir=tmp_path, name="corpus-x")
    assert path.exists() and path.name.startswith("corpus-x-")
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["key"] == KEY and "texts_sha256" not in meta and meta["blocks"]["block_rows"] == 40
    assert len(meta["blocks"]["crc32"]) == 25
    # a hit opens the file without asking the source for a single text
    asked, calls = list(src.asked), emb.calls
    again = embed_cached(emb, src, key=KEY, cache_dir=tmp_path, name="corpus-x", show_progress=False)
    assert src.asked == asked and emb.calls == calls and again.shape == (N, 256)
    # the key (not the texts) names the file; the row count is part of it; the list path differs
    assert cache_path(emb, Source(TEXTS[::-1]), key=KEY, cache_dir=tmp_path, name="corpus-x") == path
    assert cache_path(emb, Source(TEXTS[:-1]), key=KEY, cache_dir=tmp_path, name="corpus-x") != path
    assert cache_path(emb, TEXTS, cache_dir=tmp_path, name="corpus-x") != path
    assert cache_path(emb, src, key=KEY + "2", cache_dir=tmp_path, name="corpus-x") != path


def test_a_block_source_without_key_is_hashed_like_its_list(tmp_path):
    emb = BagOfWordsEmbedder()
    assert cache_path(emb, Source(TEXTS), cache_dir=tmp_path) == cache_path(emb, TEXTS, cache_dir=tmp_path)


def _flip(path, row: int, dim: int = 256) -> None:
    """Flip one byte of `row` in the stored array."""
    data = bytearray(path.read_bytes())
    start = len(data) - N * dim * 4
    data[start + row * dim * 4 + 5] ^= 0x40
    path.write_bytes(bytes(data))


HEADER = 128            # the .npy header of these arrays; rows are 1 KiB, 64 to a 64 KiB block


def _block_of(row: int) -> int:
    return (HEADER + row * 1024 + 5) // emb_cache.BLOCK_BYTES


def test_a_flipped_byte_in_a_sampled_block_is_caught_and_recomputed(tmp_path, monkeypatch, caplog):
    emb = BagOfWordsEmbedder()
    good = np.array(embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False))
    path = cache_path(emb, TEXTS, cache_dir=tmp_path)
    monkeypatch.setattr(emb_cache, "FULL_CHECK_BYTES", 0)   # checked as a large file is: by sample
    monkeypatch.setattr(emb_cache, "VERIFY_SEED", 7)
    monkeypatch.setattr(emb_cache, "SAMPLE_BLOCKS", 4)
    sampled = emb_cache._sample_blocks(16)
    assert 0 in sampled and 15 in sampled and len(sampled) == 6
    middle = next(b for b in sampled if 0 < b < 15)
    _flip(path, middle * 64)
    assert _block_of(middle * 64) == middle
    calls = emb.calls
    with caplog.at_level(logging.WARNING, logger="kgrag_lib.retrieval.emb_cache"):
        again = embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False)
    assert emb.calls > calls
    np.testing.assert_array_equal(np.asarray(again), good)
    [record] = caplog.records
    assert f"{path} is damaged (block {middle} (bytes {middle * 65536}-{middle * 65536 + 65535}) as written" \
        in record.getMessage() and "changed since written); recomputing it" in record.getMessage()


def test_a_flip_outside_the_sample_is_refused_by_the_first_read_that_touches_it(tmp_path, monkeypatch):
    """A large array is opened on a sample; each other block is checked the first time a row read
    (a slice, a row, a re-ranking's scattered rows) touches it, and a changed one is refused in one
    line naming the file, the block and what to do. `verify="full"` checks every block on open."""
    emb = BagOfWordsEmbedder()
    good = np.array(embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False))
    path = cache_path(emb, TEXTS, cache_dir=tmp_path)
    monkeypatch.setattr(emb_cache, "FULL_CHECK_BYTES", 0)
    monkeypatch.setattr(emb_cache, "VERIFY_SEED", 7)
    monkeypatch.setattr(emb_cache, "SAMPLE_BLOCKS", 4)
    unsampled = next(b for b in range(1, 15) if b not in emb_cache._sample_blocks(16))
    row = unsampled * 64 + 10
    assert _block_of(row) == unsampled
    _flip(path, row)
    calls = emb.calls
    hit = embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False)    # the sample misses it
    assert emb.calls == calls and isinstance(hit, emb_cache.CheckedRows)
    np.testing.assert_array_equal(hit[:unsampled * 64 - 64], good[:unsampled * 64 - 64])   # other blocks read fine
    np.testing.assert_array_equal(hit[[3, -1]], good[[3, -1]])
    want = f"{path}: malformed input; expected block {unsampled} (bytes {unsampled * 65536}-"
    for read in (lambda a: a[row], lambda a: a[row - 5:row + 5], lambda a: a[np.array([1, row, 900])],
                 lambda a: a[row, 3], lambda a: a[..., 0]):
        fresh = embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False)
        with pytest.raises(DataFormatError) as err:
            read(fresh)
        assert str(err.value).startswith(want) and "delete it and its .json, and run again" in str(err.value)
    assert type(hit[2:4]) is np.memmap   # views are plain memory maps
    embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False, verify="full")
    assert emb.calls > calls   # every block checked on open: found and recomputed
    with pytest.raises(ConfigError, match="verify='some'"):
        embed_cached(emb, TEXTS, cache_dir=tmp_path, verify="some")


def test_a_small_file_is_checked_whole_on_open(tmp_path, monkeypatch):
    """Under FULL_CHECK_BYTES (callers read such arrays whole, past any lazy check) every block is
    checked on open: a flip outside any sample is recomputed."""
    emb = BagOfWordsEmbedder()
    good = np.array(embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False))
    path = cache_path(emb, TEXTS, cache_dir=tmp_path)
    monkeypatch.setattr(emb_cache, "VERIFY_SEED", 7)
    monkeypatch.setattr(emb_cache, "SAMPLE_BLOCKS", 4)
    unsampled = next(b for b in range(1, 15) if b not in emb_cache._sample_blocks(16))
    _flip(path, unsampled * 64 + 10)
    calls = emb.calls
    np.testing.assert_array_equal(np.asarray(embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False)), good)
    assert emb.calls > calls


def test_an_older_row_record_is_checked_in_full_and_no_record_is_refused(tmp_path, caplog):
    """A file recorded only by row blocks (before byte records) is checked against them once and
    gets the byte record; one with no record at all cannot be checked, so it is recomputed (the
    other stores refuse theirs likewise)."""
    emb = BagOfWordsEmbedder()
    good = np.array(embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False))
    path = cache_path(emb, TEXTS, cache_dir=tmp_path)
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    record = meta.pop("file_blocks")
    meta_path.write_text(json.dumps(meta))   # as written before byte records
    calls = emb.calls
    np.testing.assert_array_equal(np.asarray(embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False)), good)
    assert emb.calls == calls and json.loads(meta_path.read_text())["file_blocks"] == record
    meta_path.write_text(json.dumps(meta))   # an old file changed in its last row: its row record finds it
    _flip(path, N - 1)
    np.testing.assert_array_equal(np.asarray(embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False)), good)
    assert emb.calls > calls
    calls = emb.calls
    del meta["blocks"]
    meta_path.write_text(json.dumps(meta))   # no record at all
    with caplog.at_level(logging.WARNING, logger="kgrag_lib.retrieval.emb_cache"):
        np.testing.assert_array_equal(np.asarray(embed_cached(emb, TEXTS, cache_dir=tmp_path, show_progress=False)),
                                      good)
    assert emb.calls > calls and "no block checksum record" in caplog.text


def test_two_shards_merge_into_the_unsharded_array(tmp_path, caplog):
    src = Source(TEXTS)
    kw = dict(key=KEY, cache_dir=tmp_path, name="corpus-x", show_progress=False)
    final = cache_path(BagOfWordsEmbedder(), src, **{k: kw[k] for k in ("key", "cache_dir", "name")})
    with caplog.at_level(logging.INFO, logger="kgrag_lib.retrieval.emb_cache"):
        first = embed_shard(BagOfWordsEmbedder(), src, (1, 2), **kw)
    assert first == ShardResult(shard_path(final, 1, 2), (500, 1000), [0], None)
    assert src.asked == [(a, min(a + 40, N)) for a in range(500, N, 40)]   # only its rows were read
    assert "shards 0 of 2 still missing" in caplog.text and not final.exists()
    assert np.load(first.path).shape == (500, 256)
    emb = BagOfWordsEmbedder()
    merged = embed_cached(emb, src, shard=(0, 2), **kw)
    assert emb.texts_seen == 500 and merged.shape == (N, 256) and final.exists()
    np.testing.assert_array_equal(np.asarray(merged), _one_shot(tmp_path))
    left = sorted(p.name for p in final.parent.iterdir() if not p.name.endswith(".lock"))
    assert left == sorted([final.name, final.with_suffix(".json").name])
    meta = json.loads(final.with_suffix(".json").read_text())
    assert meta["merged_shards"] == 2 and len(meta["blocks"]["crc32"]) == 25
    # a later shard call (or a plain one) is a hit
    calls = emb.calls
    assert embed_shard(emb, src, (1, 2), **kw).merged == final and emb.calls == calls


def test_an_unsharded_call_merges_a_complete_set_without_encoding(tmp_path, monkeypatch):
    """The last shard died before merging (or shards ran on machines sharing the cache folder):
    the plain call finds the complete set and merges it, encoding nothing."""
    kw = dict(key=KEY, cache_dir=tmp_path, show_progress=False)
    final = cache_path(BagOfWordsEmbedder(), Source(TEXTS), key=KEY, cache_dir=tmp_path)
    for i in (0, 1):
        assert embed_shard(BagOfWordsEmbedder(), Source(TEXTS), (i, 3), **kw).merged is None
    monkeypatch.setattr(emb_cache, "_build_final", lambda job: None)   # shard 2 dies before merging
    embed_shard(BagOfWordsEmbedder(), Source(TEXTS), (2, 3), **kw)
    monkeypatch.undo()
    monkeypatch.setattr(emb_cache, "BLOCK", 40)
    monkeypatch.setattr(emb_cache, "CHUNK", 20)
    assert not final.exists() and all(shard_path(final, i, 3).exists() for i in range(3))
    emb = BagOfWordsEmbedder()
    out = embed_cached(emb, Source(TEXTS), **kw)
    assert emb.calls == 0 and not any(shard_path(final, i, 3).exists() for i in range(3))
    np.testing.assert_array_equal(np.asarray(out), _one_shot(tmp_path))


def test_a_damaged_shard_is_deleted_at_merge_naming_the_shard_to_rerun(tmp_path):
    kw = dict(key=KEY, cache_dir=tmp_path, show_progress=False)
    final = cache_path(BagOfWordsEmbedder(), Source(TEXTS), key=KEY, cache_dir=tmp_path)
    for i in (0, 1):
        embed_shard(BagOfWordsEmbedder(), Source(TEXTS), (i, 3), **kw)
    s1 = shard_path(final, 1, 3)
    data = bytearray(s1.read_bytes())
    data[-1] ^= 1
    s1.write_bytes(bytes(data))
    with pytest.raises(CacheDamagedError, match=rf"shard file {s1} fails its crc32 check; it was deleted: "
                                                r"run shard 1/3 again"):
        embed_shard(BagOfWordsEmbedder(), Source(TEXTS), (2, 3), **kw)
    assert not s1.exists() and not final.exists()
    assert embed_shard(BagOfWordsEmbedder(), Source(TEXTS), (2, 3), **kw).missing == [1]
    res = embed_shard(BagOfWordsEmbedder(), Source(TEXTS), (1, 3), **kw)
    assert res.merged == final
    np.testing.assert_array_equal(np.load(final), _one_shot(tmp_path))


def test_bad_shard_arguments(tmp_path):
    for bad in [(2, 2), (-1, 2), (0, 0), "0/2"]:
        with pytest.raises(ConfigError, match="shard="):
            embed_cached(BagOfWordsEmbedder(), TEXTS, cache_dir=tmp_path, shard=bad)


class _Slow(BagOfWordsEmbedder):
    def encode(self, texts, **kw):
        time.sleep(0.05)
        return super().encode(texts, **kw)


def _shard_in_child(cache_dir: str) -> None:
    embed_cached(_Slow(), Source(TEXTS), key=KEY, cache_dir=cache_dir, shard=(1, 2), show_progress=False)


def test_a_killed_shard_resumes_at_its_last_finished_block(tmp_path):
    import multiprocessing as mp

    final = cache_path(BagOfWordsEmbedder(), Source(TEXTS), key=KEY, cache_dir=tmp_path)
    spath = shard_path(final, 1, 2)
    progress = spath.with_suffix(".partial.json")
    proc = mp.get_context("fork").Process(target=_shard_in_child, args=(str(tmp_path),))
    proc.start()
    deadline = time.time() + 60
    while time.time() < deadline and (not progress.exists() or json.loads(progress.read_text())["rows"] < 120):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    rec = json.loads(progress.read_text())
    done = rec["rows"]
    assert 120 <= done < 500 and done % 40 == 0 and rec["start"] == 500 and len(rec["crc32"]) == done // 40
    assert not spath.exists()
    counting = BagOfWordsEmbedder()
    res = embed_shard(counting, Source(TEXTS), (1, 2), key=KEY, cache_dir=tmp_path, show_progress=False)
    assert counting.texts_seen == 500 - done and res.missing == [0]
    embed_shard(BagOfWordsEmbedder(), Source(TEXTS), (0, 2), key=KEY, cache_dir=tmp_path, show_progress=False)
    np.testing.assert_array_equal(np.load(final), _one_shot(tmp_path))


def test_a_partial_record_without_crcs_resumes_after_a_scan(tmp_path, monkeypatch):
    """A partial file left by the former code (its record has no crcs) still resumes."""
    emb = BagOfWordsEmbedder()
    final = cache_path(emb, TEXTS, cache_dir=tmp_path)
    final.parent.mkdir(parents=True)
    part, progress = final.with_suffix(".partial.npy"), final.with_suffix(".partial.json")
    arr = np.lib.format.open_memmap(part, mode="w+", dtype=np.float32, shape=(N, 256))
    arr[:200] = emb.encode(TEXTS[:200])
    arr.flush()
    del arr
    progress.write_text(json.dumps({"rows": 200, "n": N, "dim": 256}))
    counting = BagOfWordsEmbedder()
    out = embed_cached(counting, TEXTS, cache_dir=tmp_path, show_progress=False)
    assert counting.texts_seen == N - 200
    np.testing.assert_array_equal(np.asarray(out), _one_shot(tmp_path))


def test_a_source_whose_length_lies_is_one_error(tmp_path):
    class Short(Source):
        def __len__(self):
            return len(self.texts) + 5

    with pytest.raises(ValueError, match=r"yielded 0 texts for rows 1000-1004; expected 5"):
        embed_cached(BagOfWordsEmbedder(), Short(TEXTS), key=KEY, cache_dir=tmp_path, show_progress=False)


def test_precision_is_fp32_on_cpu_and_half_only_on_cuda(monkeypatch):
    monkeypatch.delenv("KGRAG_EMBEDDER_DTYPE", raising=False)
    assert resolve_precision(None, "cuda") == "fp32"
    assert resolve_precision("fp16", "cuda") == "fp16" and resolve_precision("bfloat16", "cuda:1") == "bf16"
    assert resolve_precision("fp16", "cpu") == "fp32"
    monkeypatch.setenv("KGRAG_EMBEDDER_DTYPE", "half")
    assert resolve_precision(None, "cuda") == "fp16" and resolve_precision(None, "cpu") == "fp32"
    with pytest.raises(ConfigError, match="embedder dtype 'fp8'"):
        resolve_precision("fp8", "cuda")


def test_a_run_in_another_dtype_than_the_stored_vectors_stops_unless_told(tmp_path, monkeypatch):
    """Issue 57: `kgrag data embed --dtype fp16`, then a run without $KGRAG_EMBEDDER_DTYPE, re-embedded
    Wikipedia's 21M passages in fp32 (~3.8 h) without a word. Embeddings record their dtype; a run that
    would encode them again in another one says so and stops, unless the dtype was chosen explicitly."""
    monkeypatch.delenv("KGRAG_EMBEDDER_DTYPE", raising=False)
    half = BagOfWordsEmbedder(identity="hf:org/retriever@abc+fp16")
    half.precision, half.precision_given = "fp16", True      # `kgrag data embed --dtype fp16`
    embed_cached(half, Source(TEXTS), key=KEY, cache_dir=tmp_path, name="wikipedia", show_progress=False)
    meta = json.loads(cache_path(half, Source(TEXTS), key=KEY, cache_dir=tmp_path, name="wikipedia")
                      .with_suffix(".json").read_text())
    assert meta["dtype"] == "fp16"
    full = BagOfWordsEmbedder(identity="hf:org/retriever@abc")   # the run: fp32 by default, nobody chose it
    with pytest.raises(ConfigError, match=r"stored from hf:org/retriever@abc in fp16 .*this run encodes in fp32: "
                                          r"it would embed all 1,000 texts again\. Set KGRAG_EMBEDDER_DTYPE=fp16"):
        embed_cached(full, Source(TEXTS), key=KEY, cache_dir=tmp_path, name="wikipedia", show_progress=False)
    with pytest.raises(ConfigError, match="in fp16"):
        embed_shard(full, Source(TEXTS), (0, 2), key=KEY, cache_dir=tmp_path, name="wikipedia", show_progress=False)
    assert full.calls == 0                                     # refused before encoding a row
    other_texts = embed_cached(full, Source(TEXTS[:500]), key="another:v1", cache_dir=tmp_path, name="wikipedia",
                               show_progress=False)            # other texts: nothing to re-embed, no refusal
    assert other_texts.shape == (500, 256)
    monkeypatch.setenv("KGRAG_EMBEDDER_DTYPE", "fp32")          # told: embed again in fp32 on purpose
    again = embed_cached(full, Source(TEXTS), key=KEY, cache_dir=tmp_path, name="wikipedia", show_progress=False)
    assert again.shape == (N, 256)
