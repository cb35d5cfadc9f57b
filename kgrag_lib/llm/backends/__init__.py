"""Backends: llama.cpp (GGUF), transformers (HF), OpenAI-compatible servers. Imported lazily."""
