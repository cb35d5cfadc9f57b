"""What a method is, and what it runs with.

A method is a `Method`: `answer(question) -> Prediction`, the `config` it was built from and
an optional `resume`. Its `MethodSpec` names it, lists the datasets it supports, its config
dataclass, and the factory that builds it from a `RunContext` (shared, lazily loaded parts: LLM,
embedder, KGs), its typed config (the profile section merged with overrides, checked once by
`MethodSpec.check_config`) and the run seed; so the same method runs from the CLI, a notebook or
a test. The table of all methods is `methods.registry`.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Generic, Iterator, Mapping, Sequence, TypeVar

from ..config import make_config
from ..data.registry import PARTS, DatasetSpec
from ..llm import DEFAULT_SPEC
from ..paths import cache_dir as _cache_dir
from ..paths import cache_dir_scope as _cache_dir_scope
from ..paths import data_root as _data_root
from ..records import Prediction, Question
from ..redact import redact


class Method:
    """What the runner uses of a method; every method subclasses it and implements `answer`.

    `config` is the config dataclass the method was built from: the run manifest records it,
    so it decides the run's identity. `resume` is called before the first question with the
    rows a killed run already wrote, in order; a method whose state grows over questions
    (TCR-QF's KG) rebuilds it there, the others have nothing to rebuild.

    Questions are independent by default, so the runner answers several at once. A method whose
    state grows question by question sets `parallel_safe` False (answered one at a time); one
    whose state grows over the whole sample in rounds sets `answers_sample` and implements
    `answer_sample`, which takes the sample and yields each question as it closes.
    """

    name: str = "method"
    config: Any = None
    parallel_safe: bool = True
    answers_sample: bool = False

    def answer(self, question: Question) -> Prediction:
        raise NotImplementedError(f"{type(self).__name__} does not implement answer()")

    def resume(self, done: list[dict[str, Any]]) -> None:
        """Rebuild the state the answered rows `done` left (default: none)."""

    def answer_sample(self, questions: Sequence[Question], skip: Collection[str] = (),
                      workers: int = 1) -> Iterator[tuple[Question, Prediction, Any]]:
        """(question, prediction, LLM meter) for every question not in `skip`, as each closes,
        with up to `workers` requests in flight (only for `answers_sample` methods)."""
        raise NotImplementedError(f"{type(self).__name__} answers question by question (answers_sample is False)")


ConfigT = TypeVar("ConfigT")
# (ctx, the method's typed config as `MethodSpec.check_config` made it, run seed) -> the method
Factory = Callable[["RunContext", ConfigT, int], Method]


# The signals that say a method's mechanism ran on a question (`MethodSpec.mechanism`, read by report.mechanism)
MECHANISMS = {
    "final-answer": "the answer was read from a 'Final Answer:' line (TCR-QF's prompt and parser)",
    "decomposition": "the question decomposition parsed (no fall-back to the original question)",
    "kg-subgraph": "the KG gave a non-empty subgraph (KG-Infused RAG's spreading activation)",
    "activation": "spreading activation reached beyond its seed entities (SA-RAG)",
}


@dataclass(frozen=True)
class MethodSpec(Generic[ConfigT]):
    name: str
    factory: Factory[ConfigT]      # (ctx, typed config, run seed) -> Method
    config: type[ConfigT]          # the config dataclass: `check_config` makes it from a settings dict
    datasets: tuple[str, ...]      # datasets the method can run on (others are refused)
    summary: str
    family: str                    # study (and profile `models:` entry) the method belongs to
    # prompt modules the method sends prompts from, e.g. ("kg_infused.prompts",); empty: every prompt
    # module of its paper package. Their wording is part of a run's identity (`prompt_digest`).
    prompts: tuple[str, ...] = ()
    # what shows its mechanism ran, a key of MECHANISMS (report.mechanism reads each run's health by it); "": none
    mechanism: str = ""
    # needs a model of its own that a CPU profile does not serve (Self-RAG's reflection-token generator):
    # the CPU cross-method notebook leaves it out
    needs_gpu: bool = False
    # the PARTS (`data.registry`) it reads of a dataset in kgrag's own question format: it runs on any such
    # dataset that provides them, beyond `datasets`; None: only on `datasets` (a method tied to their layout)
    needs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.mechanism and self.mechanism not in MECHANISMS:
            raise ValueError(f"method {self.name!r}: mechanism {self.mechanism!r}; expected one of "
                             f"{', '.join(MECHANISMS)} or empty")
        unknown = sorted(set(self.needs or ()) - set(PARTS))
        if unknown:
            raise ValueError(f"method {self.name!r}: needs {', '.join(unknown)}; expected parts among "
                             f"{', '.join(PARTS)}")

    def refusal(self, dataset: DatasetSpec) -> str:
        """Why the method cannot run on `dataset` ("" when it can): one of its `datasets`, or a generic
        dataset that provides every part it `needs`."""
        if dataset.name in self.datasets:
            return ""
        named = f"it supports {', '.join(self.datasets)}"
        if self.needs is None:
            return f"method {self.name!r} does not run on dataset {dataset.name!r}; {named}"
        generic = (f"and on a dataset in kgrag's question format (kgrag_lib/data/generic.py) that provides "
                   f"{', '.join(self.needs) or 'questions with answers'}")
        if not dataset.generic:
            return f"method {self.name!r} does not run on dataset {dataset.name!r}; {named}, {generic}"
        lacking = [p for p in self.needs if p not in dataset.provides]
        if lacking:
            return (f"method {self.name!r} reads {', '.join(f'{p} ({PARTS[p]})' for p in lacking)}, which dataset "
                    f"{dataset.name!r} does not provide (corpus {dataset.corpus!r} in its registry row); {named}, "
                    f"{generic}")
        return ""

    def check_config(self, section: dict[str, Any], where: str) -> ConfigT:
        """The method's config from a settings dict; unknown keys and bad values refused."""
        return make_config(self.config, section, where=where)


def method_specs(build: Callable[..., Method], summaries: Mapping[str, str], config: type | Mapping[str, type],
                 datasets: Sequence[str], family: str, prompts: tuple[str, ...] = (), *,
                 mechanism: str | Mapping[str, str] = "", needs_gpu: bool = False,
                 needs: tuple[str, ...] | None = None) -> tuple[MethodSpec, ...]:
    """A paper's table rows for methods one builder makes by name, `build(name, ctx, config, seed)` (its
    `make_method`): one `MethodSpec` per `summaries` entry, in order. `config` is the config dataclass of
    all of them, or one per name; `mechanism` the signal of all of them, or one per name (absent: none).
    `needs` the parts a generic dataset must provide for all of them to run on it (see `MethodSpec.needs`).
    Each factory takes its typed config and refuses anything else (a settings dict goes through
    `check_config` first, so a config is checked once)."""
    def spec(name: str, summary: str) -> MethodSpec:
        cls = config[name] if isinstance(config, Mapping) else config
        signal = mechanism.get(name, "") if isinstance(mechanism, Mapping) else mechanism
        return MethodSpec(name, functools.partial(_build_typed, build, name, cls), cls, tuple(datasets), summary,
                          family, prompts, mechanism=signal, needs_gpu=needs_gpu, needs=needs)

    return tuple(spec(name, summary) for name, summary in summaries.items())


def _build_typed(build: Callable[..., Method], name: str, cls: type, ctx: "RunContext", cfg: Any, seed: int) -> Method:
    if not isinstance(cfg, cls):
        raise TypeError(f"method {name!r}: its factory takes a {cls.__name__} (MethodSpec.check_config makes one from "
                        f"a settings dict), got {type(cfg).__name__}")
    return build(name, ctx, cfg, seed)


class RunContext:
    """Shared parts of a run, loaded on first use so a method only pays for what it needs.

    `model` and `embedder_spec` say what to load; `llm` and `embedder` give already loaded
    ones instead (a test double, a notebook's model); `data_root` and `cache_dir` default as
    `paths` says. The context can be shared by several runs (see `experiment.check_context`).
    """

    def __init__(self, model: str = DEFAULT_SPEC, embedder_spec: str = "minilm", *, data_root: str | None = None,
                 cache_dir: str | None = None, llm: Any = None, embedder: Any = None,
                 server_options: dict[str, Any] | None = None, server: Any = None) -> None:
        self.model = model
        # a server model's request timeout, retries and requests in flight (`RunConfig`); of these an
        # in-process transformers model takes only max_in_flight (it joins concurrent requests into batches)
        self.server_options = {k: v for k, v in (server_options or {}).items() if v is not None}
        # how a server kgrag starts for the run is started (the profile's `server` section, a ServerConfig)
        self.server = server
        self.embedder_spec = embedder_spec
        self._data_root = data_root
        self._cache_dir = cache_dir
        self._llm = llm
        self._embedder = embedder
        self.shared: dict[str, Any] = {}

    def __repr__(self) -> str:
        return (f"RunContext(model={redact(self.model)!r}, embedder_spec={self.embedder_spec!r}, "
                f"data_root={self._data_root!r}, cache_dir={self._cache_dir!r})")

    @property
    def data_root(self) -> Path:
        return _data_root(self._data_root)

    @property
    def cache_dir(self) -> Path:
        return _cache_dir(self._cache_dir)

    @property
    def llm_cache_path(self) -> Path:
        """The LLM call cache: `<cache_dir>/llm_cache.sqlite` when the context was given a cache
        folder, else $KGRAG_LLM_CACHE when set (a Ray task points it at its own scratch copy,
        see `executors.ray_executor`), else `<cache_dir>/llm_cache.sqlite` as `paths` resolves it."""
        import os

        env = os.environ.get("KGRAG_LLM_CACHE")
        if self._cache_dir is None and env:
            return Path(env).expanduser()
        return self.cache_dir / "llm_cache.sqlite"

    @property
    def llm(self) -> Any:
        """The run's LLM, loaded (with the call cache of `cache_dir`) on first use."""
        if self._llm is None:
            from ..llm import is_managed_spec, is_server_spec, load_llm

            options = dict(self.server_options) if is_server_spec(self.model) else {}
            if self.server is not None and is_managed_spec(self.model):
                options["server"] = self.server
            with _cache_dir_scope(self._cache_dir):  # the model assembly goes there too
                self._llm = load_llm(self.model, cache_path=self.llm_cache_path, **options)
            if getattr(self._llm, "coalesce_size", 0) > 1 and self.server_options.get("max_in_flight"):
                self._llm.max_in_flight = self.server_options["max_in_flight"]
        return self._llm

    @llm.setter
    def llm(self, llm: Any) -> None:
        self._llm = llm

    @property
    def loaded_llm(self) -> Any:
        """The LLM if it is loaded already, else None (never loads it)."""
        return self._llm

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from ..retrieval import load_embedder

            with _cache_dir_scope(self._cache_dir):
                self._embedder = load_embedder(self.embedder_spec)
        return self._embedder

    @embedder.setter
    def embedder(self, embedder: Any) -> None:
        self._embedder = embedder

    def memo(self, key: str, build: Callable[[], Any]) -> Any:
        """Build a heavy shared object (a KG store, an index) once per context, however many
        questions in flight ask for it (one lock per key; builds of other keys may nest)."""
        if key in self.shared:
            return self.shared[key]
        with _MEMO_LOCK:
            lock = _MEMO_KEY_LOCKS.setdefault((id(self), key), threading.Lock())
        with lock:
            if key not in self.shared:
                self.shared[key] = build()
        return self.shared[key]


_MEMO_LOCK = threading.Lock()
_MEMO_KEY_LOCKS: dict[tuple[int, str], threading.Lock] = {}
