"""The GPU profiles resolve on a stock GPU machine (issue 27), checked as configuration only: no
model is loaded. gpu-paper names every model by HF id (or a preset that is one) and each paper's
own retriever per study family; gpu-smoke runs every notebook on 2 questions with a small HF
instruct model and a hub embedder; `kgrag study --model/--embedder` replace them for every notebook."""

from __future__ import annotations

import pytest

from kgrag_lib.errors import ConfigError
from kgrag_lib.experiment import resolve_embedder, resolve_model, resolve_run
from kgrag_lib.llm import PRESETS, load_llm, prompt_options
from kgrag_lib.notebooks import effective_profile
from kgrag_lib.retrieval import RECIPES, parse_embedder_spec
from kgrag_lib.studies import NOTEBOOKS, load_profile, notebook_settings, setup
from kgrag_lib.train.dpo_train import dpo_config

# What runs on a GPU machine with `pip install -e ".[gpu,notebooks]"` and the hub (or a server the user starts).
HUB_PREFIXES = ("hf:", "vllm:", "openai:", "vllm-serve:")


def _resolves_on_stock_gpu(spec: str) -> bool:
    if spec in PRESETS:
        return PRESETS[spec].backend == "hf"      # llama.cpp presets need a GGUF file and a CUDA llama-cpp build
    return spec.startswith(HUB_PREFIXES) and not spec.lower().endswith(".gguf")


def _families() -> set[str]:
    return {cls.family for cls in NOTEBOOKS.values() if cls.family}


@pytest.mark.parametrize("profile", ["gpu-paper", "gpu-smoke"])
def test_every_notebook_model_and_embedder_resolves_by_hub_id(profile):
    prof = load_profile(profile)
    assert _resolves_on_stock_gpu(prof["run"]["model"])
    for name, cls in NOTEBOOKS.items():
        settings = notebook_settings(name, prof)
        if not cls.family:
            continue
        model = resolve_model(prof, cls.family, getattr(settings, "model", None))
        assert _resolves_on_stock_gpu(model), (name, model)
        spec = parse_embedder_spec(resolve_embedder(prof, cls.family))
        assert spec.kind == "hub", (name, spec)   # never the PyPI-shipped CPU copies


def test_gpu_paper_uses_each_papers_retriever():
    prof = load_profile("gpu-paper")
    want = {"metaqa": "sentence-transformers/multi-qa-mpnet-base-dot-v1", "kg-infused": "facebook/contriever-msmarco",
            "sa-rag": "BAAI/bge-large-en-v1.5"}
    for family, repo in want.items():
        assert parse_embedder_spec(resolve_embedder(prof, family)).target == repo
    r = resolve_run("kg-rag", "metaqa-2hop", "o", "gpu-paper")
    assert (r.run.model, r.run.embedder) == ("mistral-7b-instruct-v0.2-hf", "multi-qa-mpnet-dot")
    assert PRESETS[r.run.model].model == "mistralai/Mistral-7B-Instruct-v0.2"
    assert resolve_run("kg-infused", "2wiki", "o", "gpu-paper").run.embedder == "contriever-msmarco"
    assert resolve_run("kg-infused", "2wiki", "o", "gpu-paper", embedder="minilm").run.embedder == "minilm"
    nb = setup("31_sa_rag_main", profile="gpu-paper", out_dir="/tmp/kgrag-test-nb31")
    assert nb.ctx.embedder_spec == "bge-large" and RECIPES["bge-large"].query_prompt


def test_gpu_smoke_is_two_questions_per_notebook_on_a_small_hf_model():
    prof = load_profile("gpu-smoke")
    assert prof["run"]["model"] == "hf:Qwen/Qwen2.5-0.5B-Instruct" and prof["run"]["n"] == 2
    for name in NOTEBOOKS:
        s = notebook_settings(name, prof)
        if hasattr(s, "n"):
            assert s.n == 2, name
        if hasattr(s, "n_questions"):   # DPO data: 8 training questions (2 gave no pair: every decoding agreed)
            assert s.n_questions == (8 if name == "26_dpo_data" else 2), name
    # the SA-RAG / TCR-QF KGs name the run's n (each notebook pools its own sample): 2 at this profile's n
    assert resolve_run("sa-rag", "musique", "o", prof).method_config.kg == "text:{dataset}:n=2:seed={seed}"
    assert resolve_run("tcr-qf", "musique", "o", prof).method_config.kg == "tcr:{dataset}:n=2:seed={seed}"
    dpo = notebook_settings("27_dpo_training", prof)
    cfg = dpo_config(dpo.training, **dpo.training_overrides)
    assert cfg.base_model == "hf:Qwen/Qwen2.5-0.5B-Instruct" and cfg.lora and cfg.bf16
    assert notebook_settings("28_plugins", prof).tables == ["21"]   # no 7B Self-RAG model in a smoke run


def test_study_model_and_embedder_replace_every_family(tmp_path):
    """What `kgrag study --profile gpu-paper --model ... --embedder ... --concurrency 8` hands the notebooks."""
    path = effective_profile("gpu-paper", {"model": "vllm:Qwen/Qwen2.5-7B-Instruct", "embedder": "bge-large",
                                           "concurrency": 8}, tmp_path / "profile.yaml")
    prof = load_profile(path)
    assert "models" not in prof and "embedders" not in prof and prof["run"]["concurrency"] == 8
    for family in _families():
        assert resolve_model(prof, family) == "vllm:Qwen/Qwen2.5-7B-Instruct"
        assert resolve_embedder(prof, family) == "bge-large"
    # only --model: the per-family retrievers stay
    kept = load_profile(effective_profile("gpu-paper", {"model": "hf:x/y"}, tmp_path / "m.yaml"))
    assert resolve_embedder(kept, "kg-infused") == "contriever-msmarco"


def test_study_overrides_are_refused_before_any_notebook(tmp_path):
    with pytest.raises(ConfigError, match="run.embedder.*embedder spec"):
        effective_profile("gpu-smoke", {"embedder": "not a model"}, tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match="KGRAG_OPENAI_API_KEY"):
        effective_profile("gpu-smoke", {"model": "openai:http://h:8000/v1?api_key=SECRET#m"}, tmp_path / "tok.yaml")
    assert not (tmp_path / "bad.yaml").exists() and not (tmp_path / "tok.yaml").exists()


@pytest.mark.parametrize("text, match", [
    ("embedders:\n  metaqaa: minilm\n", r"section embedders: unknown study family"),
    ("embedders:\n  metaqa: [1]\n", r"embedders.metaqa: expected a model spec string"),
    ("embedders:\n  metaqa: minilim\n", r"embedders.metaqa: embedder spec 'minilim'"),
])
def test_embedders_section_mistakes(tmp_path, text, match):
    p = tmp_path / "p.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        load_profile(p)


def test_mistral_by_hub_id_keeps_its_prompting_through_any_backend():
    """Mistral-7B-Instruct-v0.2's template refuses a system turn: the preset folds it into the user
    turn, and so does the same model named by hub id for transformers or a vLLM server."""
    assert prompt_options("mistralai/Mistral-7B-Instruct-v0.2") == {"fold_system_prompt": True}
    assert prompt_options("Qwen/Qwen2.5-7B-Instruct") == {}
    with pytest.warns(UserWarning):
        llm = load_llm("vllm:mistralai/Mistral-7B-Instruct-v0.2", cache=False, probe=False)
    assert llm.fold_system_prompt
    msgs = llm._prepare([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert [m["role"] for m in msgs] == ["user"] and "Be brief." in msgs[0]["content"]



def test_report_states_the_model_and_retriever_deviations_of_what_ran():
    """The 4-bit quantization of the MetaQA paper is a stated deviation where the runs used the same
    model in bf16 (by HF id), and each family's retriever is compared with its paper's."""
    import pandas as pd

    from kgrag_lib.report.study import setup_deviations

    runs = pd.DataFrame([
        {"method": "kg-rag", "model": "mistral-7b-instruct-v0.2-hf", "embedder": "multi-qa-mpnet-dot"},
        {"method": "kg-infused", "model": "qwen2.5-7b-instruct", "embedder": "contriever-msmarco"},
        {"method": "sa-rag", "model": "qwen2.5-7b-instruct", "embedder": "minilm"},
    ])
    lines = setup_deviations(runs)
    assert any(line.startswith("KG-RAG on MetaQA: generated with mistral-7b-instruct-v0.2-hf")
               and "without its 4-bit quantization" in line for line in lines)
    assert not any(line.startswith("KG-Infused RAG") for line in lines)       # the paper's model and retriever
    assert any("SA-RAG: retrieved with minilm, not the paper's bge-large-en-v1.5" in line for line in lines)
    assert any(line.startswith("SA-RAG: generated with qwen2.5-7b-instruct: not the paper's model") for line in lines)
    paper = pd.DataFrame([{"method": "llm-kg", "model": "mistral-7b-instruct-v0.2", "embedder": "multi-qa-mpnet-dot"}])
    assert setup_deviations(paper) == []
