"""Each study family's paper, and the model and retriever that paper used: what the report names
a family's rows by (`cross_method.paper_of`) and what it states a run's deviations against
(`study.setup_deviations`)."""

from __future__ import annotations

from typing import Any

# Each study family's model and retriever in its paper, and the specs that are the paper's own choice
# (lower case). A run with anything else gets a deviation line naming what it used (`setup_deviations`).
PAPER_SETUP: dict[str, dict[str, Any]] = {
    "metaqa": {"paper": "KG-RAG on MetaQA", "model": "4-bit Mistral-7B-Instruct-v0.2 (GGUF, llama.cpp)",
               "models": {"mistral-7b-instruct-v0.2"},
               "quantized_alike": {"mistral-7b-instruct-v0.2-hf", "hf:mistralai/mistral-7b-instruct-v0.2",
                                   "vllm:mistralai/mistral-7b-instruct-v0.2"},
               "retriever": "multi-qa-mpnet-base-dot-v1",
               "embedders": {"multi-qa-mpnet-dot", "sentence-transformers/multi-qa-mpnet-base-dot-v1"}},
    "kg-infused": {"paper": "KG-Infused RAG", "model": "Qwen2.5-7B-Instruct / Llama-3.1-8B-Instruct",
                   "models": {"qwen2.5-7b-instruct", "llama-3.1-8b-instruct", "hf:qwen/qwen2.5-7b-instruct",
                              "vllm:qwen/qwen2.5-7b-instruct", "hf:meta-llama/llama-3.1-8b-instruct"},
                   "retriever": "Contriever-MS MARCO",
                   "embedders": {"contriever-msmarco", "facebook/contriever-msmarco"}},
    "sa-rag": {"paper": "SA-RAG", "model": "phi4 / gemma3 (Ollama)", "models": set(),
               "retriever": "bge-large-en-v1.5", "embedders": {"bge-large", "baai/bge-large-en-v1.5"}},
    "tcr-qf": {"paper": "TCR-QF", "model": "gpt-4o-mini", "models": set(),
               "retriever": "OpenAI text-embedding-small", "embedders": set()},
}
