"""faiss factory indexes, memory-mapped loads, the build-once index cache, recall and GPU placement.

Clustered synthetic unit vectors (a gaussian mixture) of at most 2e4 rows; PQ codes of 4 bits
(16 centroids per sub-quantizer) keep training under a second on 2 busy cores.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.retrieval import DenseIndex, Placement, cached_index, decide_placement, exact_search, gpu_available, \
    recall_at_k
from kgrag_lib.retrieval import index_store
from kgrag_lib.retrieval.gpu_placement import DEFAULT_GPU_BUDGET_BYTES, estimate_gpu_bytes, resolve_placement
from kgrag_lib.retrieval.index import default_nlist, expand_factory

faiss = pytest.importorskip("faiss")
no_gpu = pytest.mark.skipif(gpu_available(), reason="checks the error raised when no GPU is visible")


@pytest.fixture(autouse=True)
def _one_faiss_thread():
    """faiss's OpenMP barriers crawl when the 2 cores are shared with other jobs (k-means 7x slower)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def _clustered(n: int, d: int, seed: int, centers: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centers, d)).astype(np.float32)
    x = c[rng.integers(0, centers, n)] + 0.35 * rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


X = _clustered(4000, 32, 0)
Q = _clustered(64, 32, 1)


# ----------------------------------------------------------------------------- factory strings

@pytest.mark.parametrize("factory", ["Flat", "IVF{nlist},Flat", "IVF32,SQ8", "IVF32,PQ8x4", "HNSW16,SQ8", "PQ8x4"])
def test_factory_strings_build_and_search(factory):
    idx = DenseIndex.build(X, kind=factory)
    assert len(idx) == 4000 and idx.dim == 32 and idx.kind == expand_factory(factory, 4000)
    scores, ids = idx.search(Q, 6)
    assert ids.shape == scores.shape == (64, 6) and (ids >= 0).all()
    flat = DenseIndex.build(X)
    rec = recall_at_k(idx, flat, Q, 6)
    assert 0 < rec <= 1
    if "PQ" not in factory:
        assert rec >= 0.8, (factory, rec)


def test_flat_factory_equals_the_flat_kind():
    a, b = DenseIndex.build(X, kind="Flat"), DenseIndex.build(X)
    np.testing.assert_array_equal(a.search(Q, 10)[1], b.search(Q, 10)[1])


def test_factory_defaults_and_expansion():
    assert default_nlist(1_000_000) == 4000 and default_nlist(100) == 2 and default_nlist(10) == 1
    assert expand_factory("IVF{nlist},SQ8", 100_000) == "IVF1265,SQ8"
    assert expand_factory("IVF{nlist},SQ8", 10_000) == "IVF256,SQ8"   # at least 39 training rows per list
    ivf = DenseIndex.build(X, kind="IVF32,SQ8")
    assert ivf.params == {"nprobe": 16}
    hnsw = DenseIndex.build(X, kind="HNSW16,SQ8", ef_search=40)
    assert hnsw.params == {"efSearch": 40}
    tuned = DenseIndex.build(X, kind="IVF32,SQ8", search_params={"nprobe": 3})
    assert tuned.params == {"nprobe": 3} and faiss.extract_index_ivf(tuned.index).nprobe == 3
    assert DenseIndex.build(X, kind="IVF32,SQ8", nprobe=5).params == {"nprobe": 5}
    tuned.set_search_params({"nprobe": 32})
    assert faiss.extract_index_ivf(tuned.index).nprobe == 32 and tuned.params["nprobe"] == 32


def test_bad_factory_and_search_params_name_the_setting():
    with pytest.raises(ConfigError, match=r"factory 'IVF32,PQ7'.*'IVF65536,PQ64'.*'HNSW32,SQ8'"):
        DenseIndex.build(X, kind="IVF32,PQ7")     # 7 does not divide 32
    with pytest.raises(ConfigError, match=r"factory 'NOPE'.*expected one of \('flat', 'ivf', 'hnsw'\)"):
        DenseIndex.build(X, kind="NOPE")
    with pytest.raises(ConfigError, match=r"search_params: unknown parameter 'probes'.*nprobe"):
        DenseIndex.build(X, kind="IVF32,SQ8", search_params={"probes": 4})
    with pytest.raises(ConfigError, match=r"search_params\['nprobe'\] must be an integer >= 1"):
        DenseIndex.build(X, kind="IVF32,SQ8", search_params={"nprobe": 0})
    with pytest.raises(ConfigError, match=r"search_params\['nprobe'\] applies to IVF indexes"):
        DenseIndex.build(X, kind="HNSW16,SQ8", search_params={"nprobe": 4})
    with pytest.raises(ConfigError, match=r"search_params\['efSearch'\] applies to HNSW"):
        DenseIndex.build(X, kind="IVF32,SQ8", search_params={"efSearch": 4})
    with pytest.raises(ConfigError, match="contradicts"):
        DenseIndex.build(X, kind="IVF32,SQ8", nprobe=4, search_params={"nprobe": 5})
    with pytest.raises(ConfigError, match="train_size"):
        DenseIndex.build(X, kind="IVF32,SQ8", train_size=0)
    with pytest.raises(ConfigError, match="add_block"):
        DenseIndex.build(X, kind="IVF32,SQ8", add_block=0)


def test_block_add_from_a_memmap_equals_adding_the_whole_array(tmp_path):
    x = _clustered(20_000, 32, 2)
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    for factory in ("IVF64,PQ8x4", "IVF64,SQ8", "Flat"):
        blocks = DenseIndex.build(mm, kind=factory, add_block=3_000, train_size=5_000)
        whole = DenseIndex.build(x, kind=factory, add_block=10**9, train_size=5_000)
        s1, i1 = blocks.search(Q, 10)
        s2, i2 = whole.search(Q, 10)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(s1, s2)


def test_many_queries_at_once_equal_one_at_a_time():
    idx = DenseIndex.build(X, kind="IVF32,SQ8")
    s, ids = idx.search(Q, 6)
    for r in range(0, 64, 9):
        s1, i1 = idx.search(Q[r], 6)
        np.testing.assert_array_equal(i1[0], ids[r])
        np.testing.assert_allclose(s1[0], s[r], rtol=1e-6)


# ----------------------------------------------------------------------------- save / load, recall

@pytest.mark.parametrize("factory", ["Flat", "IVF32,SQ8", "IVF32,PQ8x4", "HNSW16,SQ8"])
def test_save_then_memory_mapped_load_gives_identical_results(tmp_path, factory):
    idx = DenseIndex.build(X, kind=factory)
    idx.save(tmp_path / "i.faiss")
    back = DenseIndex.load(tmp_path / "i.faiss", mmap=True)
    plain = DenseIndex.load(tmp_path / "i.faiss", mmap=False)
    assert back.mmapped and not plain.mmapped
    assert back.params == idx.params
    for other in (back, plain):
        s, i = other.search(Q, 6)
        np.testing.assert_array_equal(i, idx.search(Q, 6)[1])
        np.testing.assert_array_equal(s, idx.search(Q, 6)[0])


def test_a_mapped_index_survives_its_file_being_replaced(tmp_path):
    idx = DenseIndex.build(X, kind="IVF32,SQ8")
    idx.save(tmp_path / "i.faiss")
    back = DenseIndex.load(tmp_path / "i.faiss")
    DenseIndex.build(_clustered(500, 32, 9), kind="Flat").save(tmp_path / "i.faiss")  # atomic rename
    np.testing.assert_array_equal(back.search(Q, 6)[1], idx.search(Q, 6)[1])


def test_recall_at_k_and_exact_search():
    flat = DenseIndex.build(X)
    assert recall_at_k(flat, flat, Q, 6) == 1.0
    s, ids = exact_search(X, Q, 6, block_rows=700)
    np.testing.assert_array_equal(ids, np.argsort(-(Q @ X.T), axis=1, kind="stable")[:, :6])
    np.testing.assert_allclose(s, np.take_along_axis(Q @ X.T, ids, axis=1), rtol=1e-5)
    assert recall_at_k(flat, ids, Q, 6) == 1.0
    pq = DenseIndex.build(X, kind="IVF32,PQ4x4")
    assert 0 < recall_at_k(pq, ids, Q, 6) < 1
    _, l2 = exact_search(X, Q, 5, metric="l2", block_rows=999)
    d2 = ((Q[:, None, :] - X[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(l2, np.argsort(d2, axis=1, kind="stable")[:, :5])


# ----------------------------------------------------------------------------- cached_index

class _CountBuilds:
    def __init__(self, monkeypatch):
        self.calls = 0
        real = DenseIndex.build.__func__

        def counted(cls, *a, **kw):
            self.calls += 1
            return real(cls, *a, **kw)

        monkeypatch.setattr(DenseIndex, "build", classmethod(counted))


def _saved(tmp_path):
    return sorted((tmp_path / "indexes").glob("*.faiss"))


def test_cached_index_builds_once_then_loads_memory_mapped(tmp_path, monkeypatch, caplog):
    builds = _CountBuilds(monkeypatch)
    caplog.set_level(logging.INFO, logger="kgrag_lib.retrieval")
    first = cached_index(X, "vecs-v1", "IVF32,PQ8x4", cache_dir=tmp_path, recall_k=6, recall_queries=200)
    assert builds.calls == 1 and first.mmapped and first.kind == "IVF32,PQ8x4"
    [path] = _saved(tmp_path)
    meta = index_store.saved_meta(path)
    assert meta["n"] == 4000 and meta["d"] == 32 and meta["factory"] == "IVF32,PQ8x4" and meta["vectors_key"] == "vecs-v1"
    assert meta["bytes"] == path.stat().st_size and meta["faiss"] == faiss.__version__
    assert meta["recall"]["k"] == 6 and meta["recall"]["queries"] == 200 and 0 < meta["recall"]["value"] <= 1
    assert meta["params"]["search"] == first.params and meta["build_seconds"] >= 0
    assert set(meta["recall"]["nprobe_tried"]) <= {"16", "32"}   # 4-bit PQ limits recall: doubling stops
    caplog.clear()
    second = cached_index(X, "vecs-v1", "IVF32,PQ8x4", cache_dir=tmp_path, recall_k=6, recall_queries=200)
    assert builds.calls == 1
    loaded = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loaded saved index")]
    assert len(loaded) == 1 and f"{path} (4000 vectors, IVF32,PQ8x4) in " in loaded[0] and loaded[0].endswith(" s")
    np.testing.assert_array_equal(first.search(Q, 6)[1], second.search(Q, 6)[1])
    third = cached_index(X, "vecs-v1", "IVF32,PQ8x4", cache_dir=tmp_path, search_params={"nprobe": 2})
    assert builds.calls == 1 and third.params["nprobe"] == 2   # search parameters apply at load, no rebuild


def test_cached_index_rebuilds_a_truncated_or_overwritten_file(tmp_path, monkeypatch, caplog):
    builds = _CountBuilds(monkeypatch)
    first = cached_index(X, "k", "IVF32,SQ8", cache_dir=tmp_path, recall_queries=50)
    want = first.search(Q, 6)[1]
    del first
    [path] = _saved(tmp_path)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    with caplog.at_level(logging.WARNING):
        again = cached_index(X, "k", "IVF32,SQ8", cache_dir=tmp_path, recall_queries=50)
    assert builds.calls == 2 and "stale or damaged" in caplog.text and "truncated" in caplog.text
    np.testing.assert_array_equal(again.search(Q, 6)[1], want)
    del again
    # same size, other bytes at the end: the edge digest catches it
    path.write_bytes(good[:-16] + bytes(16))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        cached_index(X, "k", "IVF32,SQ8", cache_dir=tmp_path, recall_queries=50)
    assert builds.calls == 3 and "overwritten" in caplog.text
    # a meta file that lost its index's key
    meta_path = path.with_name(path.name.replace(".faiss", ".meta.json"))
    meta_path.write_text(meta_path.read_text().replace('"vectors_key": "k"', '"vectors_key": "other"', 1))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        cached_index(X, "k", "IVF32,SQ8", cache_dir=tmp_path, recall_queries=50)
    assert builds.calls == 4 and "another key" in caplog.text
    assert len(_saved(tmp_path)) == 1


def test_cached_index_rebuilds_a_file_changed_in_its_middle_or_without_block_checksums(tmp_path, monkeypatch, caplog):
    """Issue 59: only the first and last MiB were hashed, so a byte changed in the middle of a saved
    index (here a stored vector of a 4 MiB flat index) was loaded and searched. Every MiB's crc32 is
    now checked at load; a meta written before block checksums is rebuilt too."""
    builds = _CountBuilds(monkeypatch)
    big = _clustered(4096, 256, 2)
    first = cached_index(big, "big", "flat", cache_dir=tmp_path, recall_queries=0)
    want = first.search(big[:8], 5)[1]
    del first
    [path] = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    assert len(data) > 3 << 20 and 1 << 20 < middle < len(data) - (1 << 20)
    data[middle:middle + 4] = np.float32(100.0).tobytes()   # one coordinate of one stored vector
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        again = cached_index(big, "big", "flat", cache_dir=tmp_path, recall_queries=0)
    block = middle >> 20
    assert builds.calls == 2 and f"block {block} (bytes {block << 20}-" in caplog.text and "crc32" in caplog.text
    np.testing.assert_array_equal(again.search(big[:8], 5)[1], want)
    meta_path = path.with_name(path.name.replace(".faiss", ".meta.json"))
    meta = index_store.saved_meta(path)
    del meta["blocks"]
    meta_path.write_text(__import__("json").dumps(meta))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        cached_index(big, "big", "flat", cache_dir=tmp_path, recall_queries=0)
    assert builds.calls == 3 and "written before block checksums" in caplog.text
    assert "blocks" in index_store.saved_meta(path)


def test_cached_index_another_factory_or_key_builds_another_file(tmp_path, monkeypatch):
    builds = _CountBuilds(monkeypatch)
    cached_index(X, "k1", "IVF32,SQ8", cache_dir=tmp_path, recall_queries=0)
    cached_index(X, "k1", "Flat", cache_dir=tmp_path, recall_queries=0)
    cached_index(X, "k2", "IVF32,SQ8", cache_dir=tmp_path, recall_queries=0)
    cached_index(X, "k1", "IVF32,SQ8", cache_dir=tmp_path, recall_queries=0, seed=1)
    cached_index(X, "k1", "IVF32,SQ8", cache_dir=tmp_path, recall_queries=0, metric="l2")
    assert builds.calls == 5 and len(_saved(tmp_path)) == 5
    cached_index(X, "k1", "Flat", cache_dir=tmp_path, recall_queries=0)
    assert builds.calls == 5
    flat = cached_index(X, "k1", "Flat", cache_dir=tmp_path, label="corpus/wiki 2018", recall_queries=Q, recall_k=6)
    path = [p for p in _saved(tmp_path) if p.name.startswith("corpus_wiki_2018-")]
    assert builds.calls == 6 and len(path) == 1 and index_store.saved_meta(path[0])["recall"]["source"] == "given queries"
    assert index_store.saved_meta(path[0])["recall"]["value"] == 1.0 and len(flat) == 4000


def test_cached_index_input_errors(tmp_path):
    with pytest.raises(ConfigError, match="key"):
        cached_index(X, "", "Flat", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="metric"):
        cached_index(X, "k", "Flat", cache_dir=tmp_path, metric="cos")
    with pytest.raises(ConfigError, match="factory 'IVF32,PQ7'"):
        cached_index(X, "k", "IVF32,PQ7", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="train_size"):
        cached_index(X, "k", "IVF32,SQ8", cache_dir=tmp_path, train_size=-5)
    with pytest.raises(ConfigError, match="search_params"):
        cached_index(X, "k", "HNSW16,SQ8", cache_dir=tmp_path, search_params={"nprobe": 3})
    assert not list((tmp_path / "indexes").glob("*.faiss")) if (tmp_path / "indexes").exists() else True
    with pytest.raises(ConfigError, match="recall_queries"):
        cached_index(X, "k", "Flat", cache_dir=tmp_path, recall_queries=np.ones((3, 5)))


# ----------------------------------------------------------------------------- GPU placement

@no_gpu
def test_asking_for_a_gpu_without_one_fails_clearly(tmp_path):
    for call in (lambda: DenseIndex.build(X, kind="IVF32,SQ8", placement="gpu"),
                 lambda: DenseIndex.build(X, placement=Placement("gpu", fp16=True)),
                 lambda: DenseIndex.build(X, use_gpu=True),
                 lambda: cached_index(X, "k", "IVF32,SQ8", cache_dir=tmp_path, placement="gpu", recall_queries=0)):
        with pytest.raises(BackendUnavailableError, match=r"placement='gpu'.*sees no GPU.*faiss-gpu"):
            call()
    assert not (tmp_path / "indexes").exists()   # refused before building, not after
    with pytest.raises(BackendUnavailableError, match="train_on_gpu"):
        DenseIndex.build(X, kind="IVF32,SQ8", train_on_gpu=True)
    assert not DenseIndex.build(X, kind="IVF32,SQ8", placement="auto").on_gpu
    # HNSW has no GPU version: it stays on the CPU whatever is asked (as kind="hnsw" always did)
    assert not DenseIndex.build(X, kind="HNSW16,SQ8", placement="gpu").on_gpu


def test_auto_placement_decision_on_given_sizes():
    gib = 1 << 30
    assert decide_placement("auto", gpu_bytes=gib // 2, n_gpus=1, gpu_capable=True)[0] == "gpu"
    where, why = decide_placement("auto", gpu_bytes=int(16.3 * gib), n_gpus=1, gpu_capable=True)
    assert where == "cpu" and "exceeds the GPU budget" in why and "gpu_budget_bytes" in why
    assert decide_placement("auto", gpu_bytes=16 * gib, n_gpus=1, gpu_capable=True, budget_bytes=20 * gib)[0] == "gpu"
    # sharding multiplies the budget by the GPU count
    assert decide_placement("auto", gpu_bytes=3 * gib, n_gpus=4, gpu_capable=True, shard=True)[0] == "gpu"
    assert decide_placement("auto", gpu_bytes=3 * gib, n_gpus=4, gpu_capable=True, shard=False)[0] == "cpu"
    assert decide_placement("auto", gpu_bytes=1, n_gpus=0, gpu_capable=True) == ("cpu", "no GPU visible to faiss")
    assert decide_placement("auto", gpu_bytes=1, n_gpus=2, gpu_capable=False)[0] == "cpu"
    assert decide_placement("gpu", gpu_bytes=100 * gib, n_gpus=1, gpu_capable=True)[0] == "gpu"  # forced
    assert decide_placement("cpu", gpu_bytes=1, n_gpus=8, gpu_capable=True)[0] == "cpu"
    with pytest.raises(BackendUnavailableError):
        decide_placement("gpu", gpu_bytes=1, n_gpus=0, gpu_capable=True)
    with pytest.raises(ConfigError, match="placement"):
        decide_placement("tpu", gpu_bytes=1, n_gpus=1, gpu_capable=True)
    assert DEFAULT_GPU_BUDGET_BYTES == gib


def test_gpu_size_estimates():
    flat = DenseIndex.build(X, placement="cpu")
    assert estimate_gpu_bytes(flat.index) == 4000 * 32 * 4
    assert estimate_gpu_bytes(flat.index, fp16=True) == 4000 * 32 * 2
    pq = DenseIndex.build(X, kind="IVF32,PQ8", placement="cpu")
    assert estimate_gpu_bytes(pq.index) == 4000 * (8 + 8) + 32 * 32 * 4
    sq = DenseIndex.build(X, kind="IVF32,SQ8", placement="cpu")
    assert estimate_gpu_bytes(sq.index) == 4000 * (32 + 8) + 32 * 32 * 4


def test_placement_settings_are_validated():
    assert resolve_placement(None) == Placement("auto")
    assert resolve_placement(None, use_gpu=False).where == "cpu"
    p = Placement.from_settings({"placement": "gpu", "gpu_fp16": True, "gpu_shard": True,
                                 "gpu_temp_memory": 1 << 29, "gpu_budget_bytes": 8 << 30})
    assert (p.where, p.fp16, p.shard, p.temp_memory, p.budget_bytes) == ("gpu", True, True, 1 << 29, 8 << 30)
    with pytest.raises(ConfigError, match=r"placement must be one of \('cpu', 'gpu', 'auto'\)"):
        Placement("GPU0")
    with pytest.raises(ConfigError, match="gpu_budget_bytes must be a number of bytes"):
        Placement(budget_bytes=-1)
    with pytest.raises(ConfigError, match="gpu_temp_memory"):
        Placement(temp_memory="512MB")
    with pytest.raises(ConfigError, match="gpu_fp16"):
        Placement(fp16="yes")
    with pytest.raises(ConfigError, match=r"unknown index placement setting\(s\) \['gpu_memory'\]"):
        Placement.from_settings({"gpu_memory": 1})
    with pytest.raises(ConfigError, match="contradicts"):
        resolve_placement("cpu", use_gpu=True)


def test_nprobe_is_raised_at_build_until_the_sample_recall_reaches_the_target(tmp_path):
    """On vectors without cluster structure the default nprobe (1/64 of the lists) finds few true
    neighbours (real MiniLM embeddings of MetaQA's triples: 0.69); the build doubles it until the
    sample's recall reaches TARGET_RECALL, records each try, and a later load keeps the nprobe chosen.
    An nprobe the caller sets is left alone."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8000, 48)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    built = cached_index(x, "iid", "IVF256,Flat", cache_dir=tmp_path, recall_queries=200, recall_k=6)
    meta = index_store.saved_meta(next((tmp_path / "indexes").glob("*.faiss")))
    tried = meta["recall"]["nprobe_tried"]
    assert list(tried)[0] == "16" and len(tried) > 1 and tried[list(tried)[-1]] >= index_store.TARGET_RECALL
    assert all(tried[a] < index_store.TARGET_RECALL for a in list(tried)[:-1])
    assert built.params["nprobe"] == int(list(tried)[-1]) == meta["params"]["search"]["nprobe"]
    assert cached_index(x, "iid", "IVF256,Flat", cache_dir=tmp_path).params["nprobe"] == built.params["nprobe"]
    fixed = cached_index(x, "iid", "IVF256,Flat", cache_dir=tmp_path / "fixed", search_params={"nprobe": 2},
                         recall_queries=200)
    fixed_meta = index_store.saved_meta(next((tmp_path / "fixed" / "indexes").glob("*.faiss")))
    assert fixed.params["nprobe"] == 2 and "nprobe_tried" not in fixed_meta["recall"]


# ----------------------------------------------------------------------------- exact re-scoring

def test_rescoring_a_pq_index_recovers_exact_recall_from_the_stored_vectors(tmp_path):
    """Issue 43: `<factory>+rescore<N>` ranks the compressed index's top k x N by exact inner
    products with the vectors it was built from: PQ's codes, exact search's neighbours."""
    from kgrag_lib.retrieval.rescored import RescoredIndex

    _, truth = exact_search(X, Q, 6)
    pq = DenseIndex.build(X, kind="IVF32,PQ8x4", search_params={"nprobe": 32})   # all lists: PQ is the only loss
    base = recall_at_k(pq, truth, Q, 6)
    mapped = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=X.shape)
    mapped[:] = X
    mapped.flush()
    rescored = RescoredIndex(pq, np.load(tmp_path / "x.npy", mmap_mode="r"), depth=20)
    assert base < 0.6 and recall_at_k(rescored, truth, Q, 6) >= 0.95, base
    scores, ids = rescored.search(Q, 6)
    np.testing.assert_allclose(scores, np.take_along_axis(Q @ X.T, ids, axis=1), rtol=1e-5)   # exact scores
    assert (np.diff(scores, axis=1) <= 0).all() and rescored.kind == pq.kind + "+rescore20" and len(rescored) == len(X)
    found = index_store.source_index(X, key=None, label="t", cache_dir=tmp_path, setting="IVF32,PQ8x4+rescore20")
    assert isinstance(found, RescoredIndex) and found.depth == 20


@pytest.mark.parametrize("setting, message", [
    ("IVF32,PQ4x4+rescore1", "re-scores nothing"),
    ("IVF32,PQ4x4+rescore", "expected <factory>\\+rescore<N>"),
    ("+rescore10", "expected <factory>\\+rescore<N>"),
])
def test_a_bad_rescore_suffix_names_the_setting(setting, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        index_store.source_index(X, key=None, label="t", cache_dir=tmp_path, setting=setting)


def test_rescoring_refuses_vectors_that_are_not_the_index_s():
    from kgrag_lib.retrieval.rescored import RescoredIndex

    with pytest.raises(ConfigError, match="3999 vectors for an index of 4000"):
        RescoredIndex(DenseIndex.build(X), X[:-1], depth=4)
