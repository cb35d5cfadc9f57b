"""Which study notebooks must finish before another starts: the graph an executor follows.

The local executor runs the notebooks in their numbered order, which satisfies every edge;
the Ray executor starts each one as soon as the ones it needs are done. The edges:

- within a paper's block of ten, the block's first notebook (x0) prepares what the others load:
  10 the MetaQA KB, 20 the Wikidata5M KG, 30 SA-RAG's indexes, 40 TCR-QF's constructed KG; its
  siblings come after it, so no two tasks build the same cached KG or index at once;
- a notebook that reads another's output folder, or loads the KG another builds, comes after it
  (`READS`);
- the report (9x) reads every other notebook's folder, so it comes after all of them.

A notebook left out of the selection (`kgrag study --only`) is taken as done, as before.
"""

from __future__ import annotations

# notebook prefix -> prefixes whose output folders it reads
READS: dict[str, tuple[str, ...]] = {
    "23": ("21", "22"),   # 23_activation_rounds compares its request counts with 21's and 22's summaries
    "27": ("26",),        # 27_dpo_training trains on 26_dpo_data's pairs.jsonl
    # 50_cross_method loads 20's Wikidata KG and the LLM-built KGs of 30 and 40 (text:, tcr:) from the KG cache:
    # started beside them (Ray), it would build the same KGs again at the same time
    "50": ("20", "30", "40"),
}
REPORT_BLOCK = "9"


def study_graph(stems: list[str]) -> dict[str, tuple[str, ...]]:
    """For each notebook stem (e.g. "21_kg_infused_main", in numbered order), the stems among
    `stems` that must finish before it (see the module docstring)."""
    by_prefix = {s[:2]: s for s in stems}
    out: dict[str, tuple[str, ...]] = {}
    for s in stems:
        prefix, block = s[:2], s[0]
        need: list[str] = []
        if block == REPORT_BLOCK:
            need = [t for t in stems if t[0] != REPORT_BLOCK]
        elif prefix[1] != "0" and f"{block}0" in by_prefix and block != "0":
            need.append(by_prefix[f"{block}0"])
        need += [by_prefix[p] for p in READS.get(prefix, ()) if p in by_prefix]
        out[s] = tuple(sorted(set(need), key=stems.index))
    return out
