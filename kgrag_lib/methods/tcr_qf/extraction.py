"""TCR-QF's KG extraction (§3.1): passages cut into token chunks, one EID-record call per chunk
(`prompts.extraction_messages`, constrained by `prompts.GRAMMAR` where the backend can),
parsed by `records.parse_records`, assembled into the unified KG of `kg.tcr_kg`.

`tcr_source` plans the `tcr:` KG of `kg.sources` (provided to it when this package is imported);
the build is cached and resumable like SA-RAG's text KG: one fsynced journal line per chunk
(`kg.extraction.extract_journaled`), a rerun sends no LLM call for journaled chunks.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ...concurrency import fan_out
from ...data.selection import CorpusSelection
from ...errors import ConfigError
from ...kg.extraction import Chunk, extract_journaled, load_tokenizer, metered, request_ids, token_chunks
from ...kg.sources import SourcePlan, provide, tcr_tables
from ...kg.store import KGStore
from ...kg.tcr_kg import TcrKG, assemble, build_stats
from ...llm.base import PromptTooLongError
from ...records import Passage
from .prompts import GRAMMAR, RECORDS_PROMPT_VERSION, extraction_messages
from .records import parse_records

if TYPE_CHECKING:  # pragma: no cover
    from ...llm.base import LLM

MAX_LEN, OVERLAP = 512, 64


@dataclass(frozen=True)
class BuildConfig:
    """What changes the extracted KG besides the model and the prompt version."""

    tokenizer: str = "minilm"
    chunk_size: int = MAX_LEN
    overlap: int = OVERLAP
    max_tokens: int = 768

    def key(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


def extract_chunk(llm: "LLM", chunk: Chunk, max_tokens: int) -> dict[str, Any]:
    """One chunk's journal record: the parsed records (with rejections), failure, usage."""
    return metered(llm, lambda: _extract_chunk(llm, chunk, max_tokens))


def _extract_chunk(llm: "LLM", chunk: Chunk, max_tokens: int) -> dict[str, Any]:
    params = llm.default_params.replace(max_tokens=max_tokens, grammar=GRAMMAR)
    rec: dict[str, Any] = {"chunk": chunk.cid, "failure": ""}
    try:
        out = llm.generate(extraction_messages(chunk.as_text()), params)
    except PromptTooLongError as exc:
        out, rec["failure"] = "", f"prompt too long: {exc}"
    ext = parse_records(out)
    if not rec["failure"] and not ext.entities:
        rec["failure"] = "no valid entity record in the output"
        rec["output"] = out[:300]
    rec.update(ext.to_dict())
    return rec


def build_tcr_kg(passages: Sequence[Passage], llm: "LLM", journal: Path, *, config: BuildConfig = BuildConfig(),
                 show_progress: bool = True, about: dict[str, Any] | None = None
                 ) -> tuple[KGStore, dict[str, Any], TcrKG]:
    """Extract and assemble the KG of `passages`, resuming from `journal` (one line per chunk)."""
    start = time.perf_counter()
    chunks = token_chunks(passages, load_tokenizer(config.tokenizer), config.chunk_size, config.overlap)
    with llm.meter() as meter:
        recs, extracted = extract_journaled(chunks, journal, lambda c: extract_chunk(llm, c, config.max_tokens),
                                            desc="TCR-QF extraction", show_progress=show_progress,
                                            workers=fan_out(llm))
    store, kg, counts = assemble(chunks, recs)
    stats = {"kg": "tcr", **(about or {}), "model": llm.name, "model_identity": llm.identity,
             "prompt_version": RECORDS_PROMPT_VERSION, "tokenizer": config.tokenizer, "chunk_size": config.chunk_size,
             "chunk_overlap": config.overlap, "max_tokens": config.max_tokens, "passages": len(passages),
             **build_stats(chunks, recs, counts),
             "chunks_extracted_this_build": extracted, "llm_calls_this_build": meter.usage.calls,
             "seconds_this_build": round(time.perf_counter() - start, 3), "request_ids": request_ids(recs)}
    return store, stats, kg



# ---- the tcr: KG source ----------------------------------------------------------------------------
def tcr_source(arg: str, data_root: Path, llm: "LLM | None") -> SourcePlan:
    """TCR-QF's KG (`kg.tcr_kg`) of the passages `arg` selects (`CorpusSelection`), resumable;
    `BuiltKG.extra["tcr_folder"]` is the folder `TcrKG.load` reads a private copy from."""
    selection = CorpusSelection.parse(arg)
    if llm is None:
        raise ConfigError("a TCR-QF KG is extracted by an LLM: pass llm= to load_kg/shared_kg")
    config = BuildConfig()
    base = llm.default_params.to_dict()
    model = llm.key_identity(llm.default_params.replace(grammar=GRAMMAR))   # as its grammar requests are keyed
    identity = "\0".join([RECORDS_PROMPT_VERSION, llm.backend, model, config.key(), json.dumps(base, sort_keys=True),
                          str(selection)])

    def build(journal: Path) -> tuple[KGStore, dict[str, Any], Any]:
        passages, about = selection.passages(data_root)
        return build_tcr_kg(passages, llm, journal, config=config, about=about)

    return SourcePlan(f"tcr-{selection.name[len('text-'):]}-{RECORDS_PROMPT_VERSION}", selection.input_files(data_root),
                      build, identity=identity, resumable=True, load_extra=tcr_tables)


provide("tcr", tcr_source)
