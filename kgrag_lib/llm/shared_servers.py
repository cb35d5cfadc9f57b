"""Servers a parent process started for its children: one vLLM for a whole study, not one per notebook.

`kgrag study --model vllm-serve:<model>` runs ~20 notebooks, each in its own kernel; started by
each, vLLM would load and compile the model 20 times (2-3 minutes each on a CPU, more with a 7B
model on a GPU). The study starts each server spec once (`shared(...)`) and lists it in
$KGRAG_SHARED_SERVERS for the kernels it starts; `load_llm` of the same spec in a kernel then
connects to it with the same cache identity, prompt options and request timeout, so the run folders
and the LLM cache are what they would be with a server per notebook.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable, Iterable, Iterator

SHARED_SERVERS_ENV = "KGRAG_SHARED_SERVERS"


def lookup(spec: str) -> dict[str, Any] | None:
    """What a parent recorded for `spec` (base_url, alias, weights, flavor and client options), or None."""
    raw = os.environ.get(SHARED_SERVERS_ENV)
    if not raw:
        return None
    try:
        table = json.loads(raw)
    except ValueError:
        return None
    entry = table.get(spec.strip()) if isinstance(table, dict) else None
    return entry if isinstance(entry, dict) else None


def describe(llm: Any) -> dict[str, Any]:
    """The entry of a started server's client (`OpenAICompatLLM` with `managed`)."""
    return {"base_url": llm.base_url, "alias": llm.model, "weights": llm.identity.split("|weights=", 1)[1],
            "flavor": llm.flavor, "timeout": llm.timeout, "chat": llm.chat,
            "fold_system_prompt": llm.fold_system_prompt}


@contextlib.contextmanager
def shared(specs: Iterable[str], start: Callable[[str], Any]) -> Iterator[dict[str, Any]]:
    """Start each spec once with `start` (a managed spec's loader: the caller filters the specs, so this
    module needs nothing from `kgrag_lib.llm`), list them in $KGRAG_SHARED_SERVERS while the block runs,
    then stop them."""
    started: dict[str, Any] = {}
    old = os.environ.get(SHARED_SERVERS_ENV)
    try:
        for spec in dict.fromkeys(s for s in specs if s):
            if lookup(spec) is None:   # a grandparent's server is used as it is
                print(f"starting {spec} once for every notebook of this study", flush=True)
                started[spec] = start(spec)
        if started:
            table = json.loads(old) if old else {}
            table.update({spec: describe(llm) for spec, llm in started.items()})
            os.environ[SHARED_SERVERS_ENV] = json.dumps(table)
        yield started
    finally:
        if old is None:
            os.environ.pop(SHARED_SERVERS_ENV, None)
        else:
            os.environ[SHARED_SERVERS_ENV] = old
        for llm in started.values():
            llm.close()
