"""Grammar- and JSON-schema-constrained decoding for the transformers backend, through llguidance.

llama.cpp and vLLM decode TCR-QF's record grammar and SA-RAG's JSON schemas under a constraint;
transformers has none of its own, and without one a small model writes records the parsers reject
(the gpu-smoke rehearsal's 0.5B model gave TCR-QF's extraction no entity record at all). llguidance
(the engine vLLM also ships) turns a GBNF grammar or a JSON schema into a token mask per step; this
module applies it to each row of a batch as a transformers logits processor.

Sampled requests need the mask before temperature and top-k/top-p (a filter that left only
forbidden tokens would leave nothing to draw), but transformers runs a caller's processors after
its own warpers; `processors` therefore returns the warpers too, in that order, and the generation
config of a constrained request carries neutral ones (`neutral_sampling`).
"""

from __future__ import annotations

import functools
from typing import Any

from ..base import SamplingParams
from ...errors import BackendUnavailableError, ConfigError

ENGINE = "llguidance"


def _llguidance():
    try:
        import llguidance
        import llguidance.hf  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailableError(
            "a request with a grammar or JSON schema needs llguidance for the hf backend (it constrains "
            "decoding as llama.cpp and vLLM do); install it with `pip install \"llguidance>=1.0,<2\"` "
            f"(the cpu and gpu extras hold it): {exc}") from None
    return llguidance


def constrained(params: SamplingParams) -> bool:
    return bool(params.grammar or params.json_schema)


class Grammars:
    """One model's tokenizer as llguidance sees it (built once: about a second for a 150k vocabulary),
    and the compiled grammar text of each distinct constraint."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_ids: set[int]) -> None:
        llg = _llguidance()
        self._llg = llg
        self.tokenizer = llg.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=sorted(eos_ids))
        self.eos = sorted(eos_ids)
        self.grammar = functools.lru_cache(maxsize=32)(self._grammar)

    def matcher(self, grammar: str) -> Any:
        """A fresh matcher for compiled `grammar` (text from `Grammars.grammar`, so already validated)."""
        return self._llg.LLMatcher(self.tokenizer, grammar)

    def _grammar(self, gbnf: str, schema: str) -> str:
        llg, field = self._llg, "grammar" if gbnf else "json_schema"
        try:
            text = llg.grammar_from("gbnf", gbnf) if gbnf else llg.grammar_from("json_schema", schema)
        except ValueError as exc:
            raise ConfigError(f"SamplingParams.{field}: llguidance cannot read it: {exc}") from None
        error = llg.LLMatcher.validate_grammar(text, self.tokenizer)
        if error:
            raise ConfigError(f"SamplingParams.{field}: llguidance refuses it: {error}")
        return text

    def processors(self, params: SamplingParams) -> list[Any]:
        """The mask for `params`' constraint, then (sampling) the warpers it must come before."""
        procs: list[Any] = [GrammarMask(self, self.grammar(params.grammar, "" if params.grammar else params.json_schema))]
        if not params.greedy:
            from transformers import MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

            procs.append(TemperatureLogitsWarper(params.temperature))
            if params.top_k > 0:
                procs.append(TopKLogitsWarper(params.top_k))
            if params.top_p < 1.0:
                procs.append(TopPLogitsWarper(params.top_p))
            if params.min_p > 0:
                procs.append(MinPLogitsWarper(params.min_p))
        return procs


def neutral_sampling() -> dict[str, Any]:
    """Generation-config warpers that do nothing: `Grammars.processors` applies the real ones after the mask."""
    return {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


class GrammarMask:
    """A transformers logits processor: every row of one `generate` call decodes under one grammar.

    Each call first feeds each row's matcher the token chosen at the previous step, then forbids
    what its grammar cannot take next. A row whose grammar is complete may only end; a matcher in
    error (which the mask should make impossible) also ends its row, and the caller's parser
    judges the text."""

    def __init__(self, grammars: Grammars, grammar: str) -> None:
        self._eos = grammars.eos
        self._proto = grammars.matcher(grammar)
        self._rows: list[Any] | None = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np
        import torch

        n, width = scores.shape
        if self._rows is None:
            self._rows = [self._proto.deep_copy() for _ in range(n)]
        else:
            for m, tok in zip(self._rows, input_ids[:, -1].tolist()):
                if not (m.is_stopped() or m.is_error()):
                    m.consume_token(int(tok))
        allowed = np.zeros((n, width), dtype=bool)
        for i, m in enumerate(self._rows):
            if m.is_stopped() or m.is_error():
                allowed[i, self._eos] = True
            else:   # one bit per token, lowest bit first; llguidance may count a few tokens past the logits
                mask = np.unpackbits(np.frombuffer(m.compute_bitmask(), dtype=np.uint8), bitorder="little")
                allowed[i, :min(width, mask.size)] = mask[:width].astype(bool)
        return scores.masked_fill(~torch.from_numpy(allowed).to(scores.device), float("-inf"))
