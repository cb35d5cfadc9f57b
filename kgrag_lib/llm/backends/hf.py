"""Hugging Face transformers models: a local folder, a hub id (GPU runs of the papers' models)
or a GGUF file that transformers dequantizes. torch/transformers are imported only here."""

from __future__ import annotations

import copy
import functools
import hashlib
import time
from pathlib import Path
from typing import Any

from ...concurrency import check_workers
from ...errors import BackendUnavailableError
from ...hub import hub_offline, snapshot  # noqa: F401  (hub_offline: the user's setting, read per call)
from ..assets import file_sha256
from . import hf_grammar
from ..base import LLM, Completion, Messages, PromptTooLongError, SamplingParams, TokenLogprob, flatten_messages

# Files whose bytes decide what a local model folder generates. Weights are pinned through
# their index when sharded (the index lists every tensor's file) and by content otherwise.
_FINGERPRINT_FILES = (
    "config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
    "special_tokens_map.json", "chat_template.jinja", "chat_template.json",
    "model.safetensors.index.json", "pytorch_model.bin.index.json",
)
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
# Older repos ship only PyTorch pickles (selfrag/selfrag_llama2_7b); fetched only where no safetensors
# came, since many repos carry both (Mistral-7B-Instruct-v0.2: 14 GB each).
_HUB_BIN = ["pytorch_model*.bin"]


def fetch_weights(repo: str, revision: str | None = None, local_only: bool | None = None) -> Path:
    """The snapshot folder of a hub model with what generation needs (downloaded unless offline):
    its safetensors, or where the repo has none its PyTorch pickles."""
    folder = snapshot(repo, _HUB_PATTERNS, revision=revision, local_only=local_only, what="model")
    if not any(folder.glob("*.safetensors")):
        folder = snapshot(repo, _HUB_PATTERNS + _HUB_BIN, revision=folder.name, local_only=local_only, what="model")
    return folder


def dir_fingerprint(folder: Path) -> str:
    """sha256 over the config, tokenizer and weight-index files of a model folder (plus the
    full content hash of unsharded weight files, remembered per path/size/mtime)."""
    h = hashlib.sha256()
    found = False
    for name in _FINGERPRINT_FILES:
        p = folder / name
        if p.is_file():
            found = True
            h.update(name.encode() + b"\0" + p.read_bytes() + b"\0")
    if not (folder / "model.safetensors.index.json").is_file() and not (
        folder / "pytorch_model.bin.index.json"
    ).is_file():
        for p in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("pytorch_model*.bin")):
            h.update(p.name.encode() + b"\0" + file_sha256(p).encode() + b"\0")
    if not found:
        raise BackendUnavailableError(f"{folder} has no config.json: not a transformers model folder")
    return h.hexdigest()


def _import_torch_transformers():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise BackendUnavailableError(
            f"the hf backend needs torch and transformers ({e}); `pip install -e '.[gpu,notebooks]'`"
        ) from None
    return torch, transformers


class HFLLM(LLM):
    """A causal LM through transformers with its own chat template; batches on the GPU.

    Requests arrive in batches from the methods that make them together (Self-RAG's
    candidates) and from threads: with questions in flight (`--concurrency N`) or a step's
    requests fanned out (`max_in_flight`: a text KG's chunks, DPO's decodings), concurrent
    requests with equal sampling parameters are joined into batches of up to `batch_size`
    (`LLM.coalesce_size`). A prompt's greedy answer can then differ from its answer alone in
    the last digits of a logit, and so, rarely, in a token (docs/GPU.md). A batch the GPU has no
    memory for is computed in halves, down to one prompt, which then fails alone with
    `PromptTooLongError`, as does a prompt longer than the context window, refused before it joins a
    batch (SA-RAG and TCR-QF record it per question; elsewhere the run stops there, resumable);
    `repeat_penalty` counts each row's own tokens, never the batch's left padding.

    `model` is a local folder, a hub repo id (resolved to the exact commit; with
    HF_HUB_OFFLINE=1 only the local HF cache is used) or a `.gguf` file. `needs_gpu`
    presets refuse to load without CUDA unless `allow_cpu=True`. A `json_schema` or GBNF
    `grammar` in the sampling parameters constrains decoding through llguidance (`hf_grammar`),
    as llama.cpp's and vLLM's engines do; such requests are keyed apart from the answers this
    backend gave them before it enforced them (`key_identity`).
    Token log-probabilities (`SamplingParams.logprobs`) are the log-softmax of the raw logits
    of each generation step; with them the text keeps special tokens (Self-RAG's reflection
    tokens are special tokens), cut at the first end token as always.
    """

    backend = "hf"

    def __init__(
        self,
        model: str,
        *,
        name: str | None = None,
        cache=None,
        revision: str | None = None,
        device_map: str | dict | None = "auto",
        dtype: str = "auto",
        needs_gpu: bool = False,
        allow_cpu: bool = False,
        trust_remote_code: bool = False,
        batch_size: int = 8,
        max_in_flight: int = 1,
        chat: bool = True,
        fold_system_prompt: bool = False,
        local_files_only: bool | None = None,
        default_params: SamplingParams | None = None,
    ) -> None:
        torch, transformers = _import_torch_transformers()
        self._torch = torch
        cuda = torch.cuda.is_available()
        label = name or model
        if needs_gpu and not cuda and not allow_cpu:
            raise BackendUnavailableError(
                f"{label} is a GPU model but no CUDA GPU is visible (torch.cuda.is_available() "
                "is False). Run it on a GPU machine, serve it with vLLM and use "
                "'vllm:<model>', use the CPU preset 'qwen2.5-coder-0.5b-q4', or pass "
                "allow_cpu=True to force a (very slow) CPU load."
            )
        folder, gguf_file, identity = self._resolve_model(model, revision, local_files_only)
        if dtype != "auto":   # the same weights in another precision answer differently (as vllm-serve: keys it)
            identity += f"#dtype={dtype}"
        super().__init__(label, identity, cache=cache, default_params=default_params,
                         fold_system_prompt=fold_system_prompt)
        self.batch_size = max(1, int(batch_size))
        self.coalesce_size = self.batch_size
        self.max_in_flight = check_workers(max_in_flight, "max_in_flight")   # `concurrency.fan_out`
        load_kw: dict[str, Any] = {"trust_remote_code": trust_remote_code}
        if gguf_file:
            load_kw["gguf_file"] = gguf_file
        try:
            tok = transformers.AutoTokenizer.from_pretrained(str(folder), **load_kw)
            model_kw = dict(load_kw)
            model_kw[_dtype_kwarg(transformers)] = dtype
            if cuda and device_map is not None:
                try:
                    import accelerate  # noqa: F401  (device_map needs it)
                    model_kw["device_map"] = device_map
                except ImportError:
                    pass
            lm = transformers.AutoModelForCausalLM.from_pretrained(str(folder), **model_kw)
        except (OSError, ValueError, ImportError) as e:
            raise BackendUnavailableError(f"transformers could not load {model}: {e}") from e
        if cuda and "device_map" not in model_kw:
            lm = lm.to("cuda")
        lm.eval()
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        self.tokenizer, self.model = tok, lm
        self.chat = chat and getattr(tok, "chat_template", None) is not None
        gc = lm.generation_config
        eos = gc.eos_token_id if gc.eos_token_id is not None else tok.eos_token_id
        self._eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        self.n_ctx = getattr(lm.config, "max_position_embeddings", None)
        self._vocab = max(int(getattr(lm.config, "vocab_size", 0) or 0), len(tok))   # llguidance: every token id
        self._grammars: Any = None   # hf_grammar.Grammars, built at the first constrained request

    def key_identity(self, params: SamplingParams) -> str:
        # until this backend enforced grammars, their requests were answered unconstrained: never reuse those
        return f"{self.identity}#constrained={hf_grammar.ENGINE}" if hf_grammar.constrained(params) else self.identity

    # ---- model resolution -------------------------------------------------------------
    @staticmethod
    def _resolve_model(model: str, revision: str | None, local_only: bool | None) -> tuple[Path, str | None, str]:
        p = Path(model).expanduser()
        if p.is_file() and p.suffix == ".gguf":
            return p.parent, p.name, f"hf-gguf-sha256:{file_sha256(p)}"
        if p.is_dir():
            return p.resolve(), None, f"hf-dir:{dir_fingerprint(p)}"
        if model.startswith((".", "/", "~")):
            raise BackendUnavailableError(f"model folder {model!r} does not exist")
        folder = fetch_weights(model, revision, local_only)
        # snapshot folders are named by the resolved commit hash
        return folder, None, f"hf:{model}@{folder.name}"

    # ---- generation -------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def missing_tokens(self, tokens) -> list[str]:
        """Tokens that the tokenizer does not encode as exactly one id."""
        return [t for t in tokens if len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) != 1]

    def _render(self, messages: Messages) -> str:
        if self.chat:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return flatten_messages(messages)

    def _generation_config(self, params: SamplingParams):
        from transformers import GenerationConfig

        if params.repeat_penalty != 1.0 and not getattr(self, "_said_penalty", False):
            self._said_penalty = True
            import warnings

            warnings.warn(f"{self.name}: repeat_penalty={params.repeat_penalty}: transformers' repetition_penalty counts "
                          "every prompt and output token, llama.cpp's (the MetaQA paper's engine) only the last 64 "
                          "tokens; answers differ from a llama.cpp run with the same setting", stacklevel=3)

        kw: dict[str, Any] = dict(
            max_new_tokens=params.max_tokens,
            do_sample=not params.greedy,
            repetition_penalty=1.0,   # applied by `_penalty` (it must skip each row's left padding)
            eos_token_id=sorted(self._eos_ids) or None,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        if not params.greedy and hf_grammar.constrained(params):
            kw.update(do_sample=True, **hf_grammar.neutral_sampling())   # the real warpers run after the mask
        elif not params.greedy:
            kw.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
            if params.min_p > 0:
                kw["min_p"] = params.min_p
        if params.stop:
            kw["stop_strings"] = list(params.stop)
        # in the config (transformers 5 deprecates them as generate() keywords beside it), and always said:
        # a model whose generation_config sets return_dict_in_generate would otherwise change what returns
        kw.update(output_logits=params.logprobs > 0, return_dict_in_generate=params.logprobs > 0)
        # A fresh config, so the model's shipped sampling defaults (Qwen ships
        # temperature 0.7, repetition_penalty 1.05) never leak into our requests.
        return GenerationConfig(**kw)

    def check_fits(self, messages: Messages, params: SamplingParams) -> None:
        """Refuse a prompt the context window cannot hold before it joins a batch (it alone fails,
        as a recorded `PromptTooLongError`, not the requests batched with it)."""
        if not self.n_ctx:
            return
        n = len(self.tokenizer(self._render(messages), add_special_tokens=not self.chat)["input_ids"])
        if n >= self.n_ctx:
            raise PromptTooLongError(f"{self.name}: the prompt has {n} tokens, the context window {self.n_ctx}; "
                                     "shorten the prompt")

    def _complete(self, messages: Messages, params: SamplingParams) -> Completion:
        return self._complete_batch([messages], params)[0]

    def _complete_batch(self, batch: list[Messages], params: SamplingParams) -> list[Completion]:
        gen_config = self._generation_config(params)
        size = self.batch_size if params.repeat_penalty == 1.0 or _penalty_skips_padding() else 1
        out: list[Completion] = []
        for lo in range(0, len(batch), size):
            # each chunk its own seed: rows i and i + batch_size of one request never draw alike
            out += self._generate_or_split([self._render(m) for m in batch[lo: lo + size]],
                                           params, gen_config, params.seed + lo)
        return out

    def _generate_or_split(self, texts: list[str], params: SamplingParams, gen_config: Any,
                           seed: int) -> list[Completion]:
        """One batch; on a GPU out of memory, the two halves one after the other, down to one prompt
        (then `PromptTooLongError`, a recorded failure of that question, never the run's end)."""
        torch = self._torch
        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        try:
            return self._generate(texts, params, gen_config, seed)
        except oom:
            pass   # leave the except block first: its traceback holds the batch's GPU tensors
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if len(texts) == 1:
            raise PromptTooLongError(f"{self.name}: one prompt with max_tokens={params.max_tokens} does not fit "
                                     "in the GPU's free memory; lower max_tokens or free the GPU")
        half = len(texts) // 2
        return (self._generate_or_split(texts[:half], params, gen_config, seed)
                + self._generate_or_split(texts[half:], params, gen_config, seed + half))

    def _processors(self, enc: Any, params: SamplingParams) -> Any:
        """transformers' repetition penalty over each row's prompt and output tokens, without the left
        padding a batch adds (counted, a pad that is also an end token would be penalised in the
        shorter rows only, so they would stop later than alone); then the request's grammar."""
        from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

        procs: list[Any] = []
        if params.repeat_penalty != 1.0:
            pads = (enc["attention_mask"] == 0).sum(dim=1)
            procs.append(RepetitionPenaltyLogitsProcessor(
                params.repeat_penalty, prompt_ignore_length=pads if int(pads.max()) > 0 else None))
        if hf_grammar.constrained(params):
            if self._grammars is None:
                self._grammars = hf_grammar.Grammars(self.tokenizer, self._vocab, self._eos_ids)
            procs += self._grammars.processors(params)
        return LogitsProcessorList(procs) if procs else None

    def _generate(self, texts: list[str], params: SamplingParams, gen_config: Any, seed: int) -> list[Completion]:
        torch = self._torch
        out: list[Completion] = []
        enc = self.tokenizer(texts, return_tensors="pt", padding=True,
                             add_special_tokens=not self.chat).to(self.model.device)
        limit = params.max_tokens
        if self.n_ctx and self.n_ctx - enc["input_ids"].shape[1] < limit:
            # never past the context window (llama.cpp caps max_tokens at the room left the same way)
            limit = max(1, self.n_ctx - enc["input_ids"].shape[1])
            gen_config = copy.copy(gen_config)
            gen_config.max_new_tokens = limit
        torch.manual_seed(seed)
        start = time.perf_counter()
        want_lp = params.logprobs > 0
        with torch.inference_mode():
            gen = self.model.generate(**enc, generation_config=gen_config, tokenizer=self.tokenizer,
                                      logits_processor=self._processors(enc, params))
            seqs = gen.sequences if want_lp else gen
            if want_lp:  # one (batch, vocab) row of log-probabilities per generated position
                steps = [torch.log_softmax(s.float(), dim=-1) for s in gen.logits]
            del gen   # with logprobs it carries the KV cache: not alive into the next batch
        secs = (time.perf_counter() - start) / len(texts)
        new = seqs[:, enc["input_ids"].shape[1]:].tolist()
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        # Finished rows are padded (pad is often eos): cut each at its first end token.
        ends = self._eos_ids | {self.tokenizer.pad_token_id}
        for row, (ids, plen) in enumerate(zip(new, prompt_lens)):
            n = next((k for k, t in enumerate(ids) if t in ends), len(ids))
            stopped = n < len(ids) or n < limit
            ids = ids[:n]
            logprobs = None
            if want_lp:
                logprobs = [self._token_logprob(steps[j][row], t, params.logprobs) for j, t in enumerate(ids)]
            out.append(Completion(
                text=self.tokenizer.decode(ids, skip_special_tokens=not want_lp),
                prompt_tokens=int(plen), completion_tokens=len(ids), seconds=secs,
                finish_reason="stop" if stopped else "length", logprobs=logprobs,
            ))
        return out

    def _token_logprob(self, logp, token: int, k: int) -> TokenLogprob:
        values, idx = self._torch.topk(logp, min(k, logp.shape[-1]))
        render = lambda i: self.tokenizer.decode([int(i)], skip_special_tokens=False)  # noqa: E731
        return TokenLogprob(render(token), float(logp[token]),
                            tuple((render(i), float(v)) for v, i in zip(values.tolist(), idx.tolist())))

    def close(self) -> None:
        self.model = None
        if self._torch.cuda.is_available():
            self._torch.cuda.empty_cache()


@functools.cache
def _penalty_skips_padding() -> bool:
    """Whether this transformers' repetition penalty can skip a per-row prefix (`prompt_ignore_length`);
    without it a penalised batch runs one prompt at a time (the same answers, slower)."""
    import inspect

    from transformers import RepetitionPenaltyLogitsProcessor

    return "prompt_ignore_length" in inspect.signature(RepetitionPenaltyLogitsProcessor.__init__).parameters


def _dtype_kwarg(transformers) -> str:
    """transformers >= 4.56 calls it `dtype`; older releases `torch_dtype`."""
    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:
        return "dtype"
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
