"""TCR-QF's record grammar on an in-process transformers (`hf:`) model: constrained or free decoding.

    .venv/bin/python bench/hf_grammar_bench.py [--spec hf:<folder|gguf|hub id>] [--max-tokens 160]

The same greedy extraction requests (TCR-QF's EID-record prompt over short passages) are sent
twice, uncached and one at a time: first without a constraint (the naive baseline: what `hf:` did
before it enforced grammars), then under `prompts.GRAMMAR` through llguidance. Prints generated
tokens per second of each, the time the mask adds per token, and how many outputs the strict record
parser reads at least one entity from. Default model: the embedded Qwen2.5-Coder-0.5B GGUF,
dequantized by transformers. Run nothing else on the CPU meanwhile.
"""

from __future__ import annotations

import argparse
import time

from hf_batch_bench import add_model_args, load_model   # bench/ is the script's folder
from kgrag_lib.methods.tcr_qf.prompts import GRAMMAR, extraction_messages
from kgrag_lib.methods.tcr_qf.records import parse_records

PASSAGES = [
    "Lake Baikal\nLake Baikal is a rift lake in Siberia, Russia. It is the deepest lake in the world and holds "
    "about a fifth of the world's unfrozen fresh water.",
    "The Old Man and the Sea\nThe Old Man and the Sea is a novella by Ernest Hemingway, published in 1952. "
    "It won the Pulitzer Prize for Fiction in 1953.",
    "Marie Curie\nMarie Curie was a Polish-born physicist and chemist who worked in Paris. She was married to "
    "Pierre Curie and won the Nobel Prize in Physics in 1903.",
    "Sydney Opera House\nThe Sydney Opera House is a performing arts centre in Sydney, Australia. It was "
    "designed by the Danish architect Jorn Utzon and opened in 1973.",
]


def _run(llm, params) -> tuple[float, int, int]:
    before = llm.usage.snapshot()
    t = time.perf_counter()
    outs = [llm.generate(extraction_messages(p), params) for p in PASSAGES]
    secs = time.perf_counter() - t
    parsed = sum(bool(parse_records(o).entities) for o in outs)
    return secs, llm.usage.since(before).completion_tokens, parsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(ap)
    ap.add_argument("--max-tokens", type=int, default=160)
    args = ap.parse_args()
    llm = load_model(args)
    free = llm.default_params.replace(max_tokens=args.max_tokens, temperature=0.0)
    t = time.perf_counter()
    llm.generate(extraction_messages(PASSAGES[0]), free.replace(grammar=GRAMMAR, max_tokens=1))
    print(f"first constrained request (llguidance reads the tokenizer, compiles the grammar): "
          f"{time.perf_counter() - t:.1f} s")
    rows = [("free decoding (baseline)", *_run(llm, free)),
            ("under the record grammar", *_run(llm, free.replace(grammar=GRAMMAR)))]
    print(f"{len(PASSAGES)} extraction requests, greedy, at most {args.max_tokens} new tokens, one at a time")
    for label, secs, tokens, parsed in rows:
        print(f"  {label:26s} {secs:7.1f} s  {tokens:5d} tokens  {tokens / secs:6.2f} tok/s  "
              f"{1000 * secs / max(tokens, 1):6.1f} ms/token  outputs with an entity record: {parsed} of {len(PASSAGES)}")
    (_, s0, t0, _), (_, s1, t1, _) = rows
    print(f"  the mask adds {1000 * (s1 / max(t1, 1) - s0 / max(t0, 1)):+.1f} ms per token")


if __name__ == "__main__":
    main()
