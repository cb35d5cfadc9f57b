"""GGUF models in-process through llama-cpp-python (the CPU default; GPU offload if built so)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ...errors import BackendUnavailableError, ConfigError
from ..base import (LLM, Completion, Messages, PromptTooLongError, SamplingParams, TokenLogprob,
                    flatten_messages, truncate_at_stop)
from . import grammar_first


def default_threads() -> int:
    """$KGRAG_LLM_THREADS, else the physical core count (llama.cpp runs slower on
    hyper-threads, and far slower when its threads compete with other busy processes:
    on a shared machine set KGRAG_LLM_THREADS=1)."""
    env = os.environ.get("KGRAG_LLM_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ConfigError(f"KGRAG_LLM_THREADS: expected a positive integer, got {env!r}")
        return int(env)
    return physical_cores()


def physical_cores() -> int:
    """Physical core count."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except ImportError:  # pragma: no cover
        n = None
    return max(1, n or os.cpu_count() or 1)


def _import_llama_cpp():
    try:
        import llama_cpp
    except ImportError as e:
        raise BackendUnavailableError(
            f"llama-cpp-python is not importable ({e}); install it with "
            "`pip install llama-cpp-python==0.3.36` (builds from source, ~5 min)"
        ) from None
    return llama_cpp


class LlamaCppLLM(LLM):
    """A GGUF file run by llama.cpp, prompted through the chat template stored in the file.

    `chat=False` sends the turns as one plain prompt (for base models such as Gemma 3 270M).
    By default every call evaluates its prompt from scratch (`reuse_prefix=False`): reusing
    the KV cache of the previous prompt is faster but can change the low bits of the logits,
    so the same request could decode differently depending on what ran before it.
    A `json_schema` in the sampling parameters constrains decoding to it: through
    `response_format` in chat mode, through a grammar compiled from the schema otherwise; a
    GBNF `grammar` is applied as it is in both modes.
    Token log-probabilities (`SamplingParams.logprobs`) are read in raw-prompt mode
    (`chat=False`) from the logits llama.cpp computed for each sampled token, so the model
    needs no `logits_all` buffer (n_ctx x vocabulary floats).
    """

    backend = "llamacpp"

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        sha256: str,
        name: str | None = None,
        cache=None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        n_gpu_layers: int = 0,
        chat: bool = True,
        chat_format: str | None = None,
        fold_system_prompt: bool = False,
        reuse_prefix: bool = False,
        default_params: SamplingParams | None = None,
        verbose: bool = False,
    ) -> None:
        llama_cpp = _import_llama_cpp()
        self.model_path = Path(model_path)
        self.sha256 = sha256
        self.chat = chat
        self.reuse_prefix = reuse_prefix
        identity = f"gguf-sha256:{sha256}"
        if not chat:
            identity += ";raw-prompt"
        if chat_format:
            identity += f";chat_format={chat_format}"
        super().__init__(
            name or self.model_path.name, identity, cache=cache, default_params=default_params,
            fold_system_prompt=fold_system_prompt, n_ctx=n_ctx,
        )
        if n_gpu_layers and not llama_cpp.llama_supports_gpu_offload():
            n_gpu_layers = 0  # CPU build: offload request is a no-op, not an error
        threads = n_threads or default_threads()
        # llama.cpp pads the context to a multiple of 256; asking for that size up front keeps
        # llama-cpp-python's own length check and token buffer consistent with it.
        n_ctx = max(256, -(-int(n_ctx) // 256) * 256)
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(self.model_path), n_ctx=n_ctx, n_threads=threads,
                n_threads_batch=threads, n_batch=n_batch, n_gpu_layers=n_gpu_layers,
                chat_format=chat_format, verbose=verbose,
            )
        except (ValueError, RuntimeError) as e:
            raise BackendUnavailableError(f"llama.cpp could not load {self.model_path}: {e}") from e
        self.n_threads = threads
        self.n_ctx = self._llm.n_ctx()
        # greedy decoding under a grammar checks the best token first (byte-identical, ~4x faster here)
        if hasattr(self._llm, "_init_sampler"):
            self._llm._library_init_sampler = self._llm._init_sampler
            grammar_first.install(self._llm)
        self._grammars: dict[str, Any] = {}

    def count_tokens(self, text: str) -> int:
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF header's key/value metadata (architecture, quantization, template...)."""
        return dict(self._llm.metadata)

    def _kwargs(self, params: SamplingParams) -> dict[str, Any]:
        return dict(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            min_p=params.min_p,
            repeat_penalty=params.repeat_penalty,
            stop=list(params.stop) or None,
            seed=params.seed,
        )

    def _grammar(self, schema: str, gbnf: bool = False) -> Any:
        """The grammar for a JSON schema (raw-prompt mode) or a GBNF text, compiled once each."""
        key = ("gbnf:" if gbnf else "schema:") + schema
        if key not in self._grammars:
            from llama_cpp import LlamaGrammar

            self._grammars[key] = (LlamaGrammar.from_string(schema, verbose=False) if gbnf else
                                   LlamaGrammar.from_json_schema(schema, verbose=False))
        return self._grammars[key]

    def missing_tokens(self, tokens) -> list[str]:
        """Tokens that the vocabulary does not hold as one entry (special tokens parsed)."""
        return [t for t in tokens
                if len(self._llm.tokenize(t.encode("utf-8"), add_bos=False, special=True)) != 1]

    def _complete(self, messages: Messages, params: SamplingParams) -> Completion:
        if params.logprobs:
            return self._complete_logprobs(messages, params)
        if not self.reuse_prefix:
            self._llm.reset()
        start = time.perf_counter()
        kwargs = self._kwargs(params)
        if params.grammar:
            kwargs["grammar"] = self._grammar(params.grammar, gbnf=True)
        try:
            if self.chat:
                if params.json_schema:
                    kwargs["response_format"] = {"type": "json_object", "schema": json.loads(params.json_schema)}
                out = self._llm.create_chat_completion(messages=messages, **kwargs)
                text = out["choices"][0]["message"].get("content") or ""
            else:
                if params.json_schema:
                    kwargs["grammar"] = self._grammar(params.json_schema)
                out = self._llm.create_completion(prompt=flatten_messages(messages), **kwargs)
                text = out["choices"][0].get("text") or ""
        except ValueError as e:
            if "exceed context window" in str(e):
                raise PromptTooLongError(
                    f"{self.name}: {e}; shorten the prompt or load with a larger n_ctx"
                ) from e
            raise
        usage = out.get("usage") or {}
        return Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            seconds=time.perf_counter() - start,
            finish_reason=out["choices"][0].get("finish_reason") or "",
        )

    def _complete_logprobs(self, messages: Messages, params: SamplingParams) -> Completion:
        """Sample token by token through `Llama.generate` and read, after each token, the
        logits it was drawn from (the last row llama.cpp decoded); their log-softmax gives the
        token's log-probability and the top alternatives. Special tokens are rendered as text
        (`special=True`): a Self-RAG model's reflection tokens are special tokens."""
        import numpy as np

        if self.chat:
            raise ConfigError(
                f"{self.name}: token log-probabilities are read in raw-prompt mode only; load the "
                "model with chat=False and send the rendered prompt (kgrag_lib.llm.base.raw_prompt)")
        if params.grammar or params.json_schema:
            raise ConfigError(f"{self.name}: logprobs cannot be combined with a grammar or json_schema here")
        llama_cpp = _import_llama_cpp()
        llm = self._llm
        start = time.perf_counter()
        prompt_tokens = llm.tokenize(flatten_messages(messages).encode("utf-8"), add_bos=True, special=True)
        room = self.n_ctx - len(prompt_tokens)
        if room < 1:
            raise PromptTooLongError(
                f"{self.name}: the prompt has {len(prompt_tokens)} tokens, the context window "
                f"{self.n_ctx}; shorten the prompt or load with a larger n_ctx")
        max_tokens = min(params.max_tokens, room)
        llm.reset()
        llm.set_seed(params.seed)
        n_vocab = llm.n_vocab()
        vocab = llm._model.vocab
        k = params.logprobs
        ids: list[int] = []
        steps: list[TokenLogprob] = []
        finish = "length"
        text = ""

        def piece(toks: list[int]) -> str:
            return llm.detokenize(toks, special=True).decode("utf-8", errors="ignore")

        for token in llm.generate(prompt_tokens, top_k=params.top_k, top_p=params.top_p, min_p=params.min_p,
                                  temp=params.temperature, repeat_penalty=params.repeat_penalty, reset=True):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).astype(np.float64)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                finish = "stop"
                break
            steps.append(_token_logprob(logits, int(token), k, lambda t: piece([t])))
            ids.append(int(token))
            text = piece(ids)
            if params.stop and truncate_at_stop(text, params.stop) != text:
                finish = "stop"
                break
            if len(ids) >= max_tokens:
                break
        return Completion(text=text, prompt_tokens=len(prompt_tokens), completion_tokens=len(ids),
                          seconds=time.perf_counter() - start, finish_reason=finish, logprobs=steps)

    def close(self) -> None:
        llm = getattr(self, "_llm", None)
        if llm is not None:
            llm.close()
            self._llm = None


def _token_logprob(logits, token: int, k: int, render) -> TokenLogprob:
    """Log-softmax of one row of logits: the chosen token's entry and the top `k` entries,
    each token id rendered to text by `render`."""
    import numpy as np

    shifted = logits - logits.max()
    logp = shifted - np.log(np.exp(shifted).sum())
    k = min(k, logp.shape[0])
    best = np.argpartition(-logp, k - 1)[:k]
    best = best[np.argsort(-logp[best], kind="stable")]
    return TokenLogprob(render(token), float(logp[token]),
                        tuple((render(int(i)), float(logp[i])) for i in best))
