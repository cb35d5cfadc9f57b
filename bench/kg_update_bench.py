"""Benchmark adding triples to a KGStore one at a time while querying it, against rebuilding it.

TCR-QF (§3.4) adds the triples it extracts to its KG while it reasons, querying the KG between
additions; the goal is that `KGStore.add_triples` makes each addition visible to the next query
without rebuilding the store. This inserts triples one by one into a store of TCR-QF size, runs
one 1-hop query after each, and compares with the naive way (`KGStore.from_triples` of all
triples so far after each insert), then checks that the grown store answers 1- and 2-hop
queries exactly like a store built from scratch on the same triples.

    .venv/bin/python bench/kg_update_bench.py
    .venv/bin/python bench/kg_update_bench.py --triples 20000 --entities 20000 --inserts 2000 --baseline-inserts 50
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kgrag_lib.kg import KGStore  # noqa: E402

NamedTriple = tuple[str, str, str]


def zipf_ids(rng: np.random.Generator, n_items: int, size: int, exponent: float) -> np.ndarray:
    """`size` draws of item ids with P(rank k) ~ k**-exponent; ranks shuffled over ids."""
    cdf = np.cumsum(np.arange(1, n_items + 1, dtype=np.float64) ** -exponent)
    cdf /= cdf[-1]
    rank_to_id = rng.permutation(n_items).astype(np.int64)
    return rank_to_id[np.minimum(np.searchsorted(cdf, rng.random(size)), n_items - 1)]


def synthetic_kg(rng: np.random.Generator, num_triples: int, num_entities: int, num_relations: int,
                 cover: bool = True):
    """Id arrays with power-law degrees (heads Zipf s=0.6, tails s=1.0, relations s=1.1); with
    `cover`, every entity occurs at least once (entities never drawn take random slots of repeated ones)."""
    heads = zipf_ids(rng, num_entities, num_triples, 0.6)
    tails = zipf_ids(rng, num_entities, num_triples, 1.0)
    rels = zipf_ids(rng, num_relations, num_triples, 1.1)
    slots = np.concatenate([heads, tails])
    missing = np.setdiff1d(np.arange(num_entities), slots) if cover else slots[:0]
    if missing.size:  # spare slots: every occurrence of an entity but its first
        spare = np.setdiff1d(np.arange(slots.size), np.unique(slots, return_index=True)[1])
        where = spare[rng.choice(spare.size, size=min(missing.size, spare.size), replace=False)]
        slots[where] = missing[: where.size]
        heads, tails = slots[:num_triples], slots[num_triples:]
    return heads, rels, tails


def named(heads: np.ndarray, rels: np.ndarray, tails: np.ndarray) -> list[NamedTriple]:
    return [(f"e{h}", f"r{r}", f"e{t}") for h, r, t in zip(heads.tolist(), rels.tolist(), tails.tolist())]


def make_inserts(rng: np.random.Generator, base: list[NamedTriple], args) -> tuple[list[NamedTriple], dict[str, int]]:
    """Triples to insert: mostly new ones among known entities (same degree law as the base), some
    duplicates of base triples, some repeats of earlier inserts, some with a brand-new entity
    (head or tail) or relation; new entities are drawn from a pool so many get several edges."""
    n = args.inserts
    heads, rels, tails = synthetic_kg(rng, n, args.entities, args.relations, cover=False) if n else ([], [], [])
    out = named(np.asarray(heads), np.asarray(rels), np.asarray(tails))
    kind = rng.choice(5, size=n, p=[1 - args.dup_fraction - args.repeat_fraction - args.new_entity_fraction
                                     - args.new_relation_fraction, args.dup_fraction, args.repeat_fraction,
                                     args.new_entity_fraction, args.new_relation_fraction])
    pool = max(1, int(n * args.new_entity_fraction / 2))
    counts = {"new among known entities": 0, "duplicate of a base triple": 0, "repeat of an earlier insert": 0,
              "with a new entity": 0, "with a new relation": 0}
    labels = list(counts)
    for i in range(n):
        k = int(kind[i])
        if k == 2 and i == 0:
            k = 1
        s, r, o = out[i]
        if k == 1:
            out[i] = base[int(rng.integers(len(base)))]
        elif k == 2:
            out[i] = out[int(rng.integers(i))]
        elif k == 3:
            new = f"new{int(rng.integers(pool))}"
            out[i] = (new, r, o) if rng.random() < 0.5 else (s, r, new)
        elif k == 4:
            out[i] = (s, f"rnew{int(rng.integers(max(1, pool // 10)))}", o)
        counts[labels[k]] += 1
    return out, counts


def triple_names(store: KGStore, ids: np.ndarray, ent: list[str], rel: list[str]) -> set[NamedTriple]:
    ids = np.asarray(ids, dtype=np.intp)
    h, r, t = store.heads[ids].tolist(), store.rels[ids].tolist(), store.tails[ids].tolist()
    return {(ent[a], rel[b], ent[c]) for a, b, c in zip(h, r, t)}


def stats_us(times: list[float]) -> tuple[float, float, float]:
    us = np.asarray(times) * 1e6
    return float(np.median(us)), float(np.percentile(us, 95)), float(us.max())


def run_ours(base: list[NamedTriple], inserts: list[NamedTriple]):
    """Insert one at a time with add_triples, a 1-hop query after each; CPU time per step."""
    store = KGStore.from_triples(base)
    store.entity_id(base[0][0])  # builds the name lookup index once, outside the timed loop
    clock = time.thread_time
    add_t, query_t, sizes, visible, rebuilds = [], [], [], 0, 0
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        wall = time.perf_counter()
        for i, t in enumerate(inserts):
            indexed = store._n_indexed
            c0 = clock()
            store.add_triples([t], provenance=[f"passage{i}"])
            c1 = clock()
            res = store.neighborhood(store.entity_id(t[0]), 1, "both")
            c2 = clock()
            add_t.append(c1 - c0)
            query_t.append(c2 - c1)
            # outside the timer: is the inserted triple among the query's results?
            ids = res.astype(np.intp)
            r_id = store.relation_id(t[1])
            t_id = store.entity_id(t[2])
            visible += bool(np.any((store.rels[ids] == r_id) & (store.tails[ids] == t_id)))
            sizes.append(int(res.size))
            rebuilds += store._n_indexed != indexed
        wall = time.perf_counter() - wall
    finally:
        gc.enable()
        gc.unfreeze()
    return store, add_t, query_t, sizes, visible, rebuilds, wall


def run_baseline(base: list[NamedTriple], inserts: list[NamedTriple], count: int):
    """Rebuild with from_triples(all triples so far) after each insert, then the same query."""
    so_far = list(base)
    clock = time.thread_time
    build_t, query_t, sizes = [], [], []
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        wall = time.perf_counter()
        for t in inserts[:count]:
            so_far.append(t)
            c0 = clock()
            store = KGStore.from_triples(so_far)
            c1 = clock()
            res = store.neighborhood(store.entity_id(t[0]), 1, "both")
            c2 = clock()
            build_t.append(c1 - c0)
            query_t.append(c2 - c1)
            sizes.append(int(res.size))
            del store, res
        wall = time.perf_counter() - wall
    finally:
        gc.enable()
        gc.unfreeze()
    return build_t, query_t, sizes, wall


def check(ours: KGStore, fresh: KGStore, inserts: list[NamedTriple], n_check: int, rng: np.random.Generator):
    """Entities by name (half from inserted triples, half from all names): same 1- and 2-hop "both"
    neighbourhoods, as sets of named triples, in the grown store and the freshly built one."""
    ours_ent = [ours.entity_name(i) for i in range(ours.num_entities)]
    ours_rel = [ours.relation_name(i) for i in range(ours.num_relations)]
    fresh_ent = [fresh.entity_name(i) for i in range(fresh.num_entities)]
    fresh_rel = [fresh.relation_name(i) for i in range(fresh.num_relations)]
    touched = sorted({x for s, _, o in inserts for x in (s, o)})
    picks = [touched[i] for i in rng.choice(len(touched), size=min(n_check // 2, len(touched)), replace=False)] \
        if touched else []
    rest = sorted(set(fresh_ent) - set(picks))
    picks += [rest[i] for i in rng.choice(len(rest), size=min(n_check - len(picks), len(rest)), replace=False)]
    same, bad = 0, []
    for name in picks:
        a, b = ours.entity_id(name), fresh.entity_id(name)
        ok = all(triple_names(ours, ours.neighborhood(a, hops, "both"), ours_ent, ours_rel)
                 == triple_names(fresh, fresh.neighborhood(b, hops, "both"), fresh_ent, fresh_rel)
                 for hops in (1, 2))
        same += ok
        if not ok:
            bad.append(name)
    return same, len(picks), bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--triples", type=int, default=75_000, help="triples drawn for the base KG")
    p.add_argument("--entities", type=int, default=75_000, help="entities of the base KG (each occurs at least once)")
    p.add_argument("--relations", type=int, default=300, help="relation labels drawn from")
    p.add_argument("--inserts", type=int, default=10_000, help="triples inserted one at a time")
    p.add_argument("--baseline-inserts", type=int, default=200,
                   help="inserts over which the rebuild-per-insert baseline is timed (then extrapolated)")
    p.add_argument("--dup-fraction", type=float, default=0.05, help="inserts that duplicate a base triple")
    p.add_argument("--repeat-fraction", type=float, default=0.02, help="inserts that repeat an earlier insert")
    p.add_argument("--new-entity-fraction", type=float, default=0.10, help="inserts with a brand-new head or tail")
    p.add_argument("--new-relation-fraction", type=float, default=0.01, help="inserts with a brand-new relation")
    p.add_argument("--check", type=int, default=300, help="entities whose neighbourhoods are compared")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if min(args.triples, args.entities, args.relations) < 1 or args.entities > 2 * args.triples:
        p.error("need triples, entities, relations >= 1 and entities <= 2 * triples")

    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    base = named(*synthetic_kg(rng, args.triples, args.entities, args.relations))
    inserts, kinds = make_inserts(rng, base, args)
    gen_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    base_store = KGStore.from_triples(base)
    build_s = time.perf_counter() - t0
    out_deg = np.bincount(base_store.heads, minlength=base_store.num_entities)
    in_deg = np.bincount(base_store.tails, minlength=base_store.num_entities)
    base_n, base_e, base_r = base_store.num_triples, base_store.num_entities, base_store.num_relations
    del base_store
    print(f"generated in {gen_s:.1f} s; base store built in {build_s * 1e3:.0f} ms", flush=True)

    store, add_t, q_t, our_sizes, visible, rebuilds, our_wall = run_ours(base, inserts)
    ours_step = [a + b for a, b in zip(add_t, q_t)]
    ours_total = float(np.sum(ours_step))
    print(f"ours done: {ours_total:.2f} s CPU", flush=True)

    nb = min(args.baseline_inserts, args.inserts)
    b_build, b_q, b_sizes, b_wall = run_baseline(base, inserts, nb)
    base_step = [a + b for a, b in zip(b_build, b_q)]
    print(f"baseline done: {float(np.sum(base_step)):.2f} s CPU over {nb} inserts", flush=True)
    # rebuild cost grows with the store: scale the measured cost per triple to every insert's size
    per_triple = float(np.mean([s / (len(base) + i + 1) for i, s in enumerate(base_step)])) if nb else float("nan")
    base_extrap = per_triple * sum(len(base) + i + 1 for i in range(args.inserts))
    sizes_equal = sum(a == b for a, b in zip(our_sizes, b_sizes))

    t0 = time.perf_counter()
    fresh = KGStore.from_triples(base + inserts)
    same, total, bad = check(store, fresh, inserts, args.check, np.random.default_rng(args.seed + 1))
    counts_equal = (store.num_triples, store.num_entities, store.num_relations) == \
        (fresh.num_triples, fresh.num_entities, fresh.num_relations)
    # provenance of the inserts: each insert's passage is among its head entity's passages
    sample = range(0, len(inserts), max(1, len(inserts) // 300))
    prov_ok = sum(f"passage{i}" in store.provenance_of_entity(store.entity_id(inserts[i][0])) for i in sample)
    prov_n = len(sample)
    check_s = time.perf_counter() - t0

    o_med, o_p95, o_max = stats_us(ours_step)
    o_add, o_q = stats_us(add_t)[0], stats_us(q_t)[0]
    o_med_nb = stats_us(ours_step[:nb])[0] if nb else float("nan")
    b_med, b_p95, b_max = stats_us(base_step) if nb else (float("nan"),) * 3
    b_bld = stats_us(b_build)[0] if nb else float("nan")
    new_triples = store.num_triples - base_n
    ok = same == total and counts_equal and visible == len(inserts) and prov_ok == prov_n

    print()
    print("=== kg_update_bench summary ===")
    print(f"base KG: {base_n:,} triples after de-duplication ({args.triples:,} drawn), {base_e:,} entities, "
          f"{base_r} relations; max out-degree {out_deg.max():,}, max in-degree {in_deg.max():,}, median degree "
          f"{int(np.median(out_deg + in_deg))} (seed {args.seed})")
    print(f"inserts: {args.inserts:,} one at a time = "
          + ", ".join(f"{v:,} {k}" for k, v in kinds.items())
          + f"; {new_triples:,} new triples, {store.num_entities - base_e:,} new entities, "
          f"{store.num_relations - base_r} new relations")
    print(f"ours (add_triples([t], provenance) + neighborhood(head, 1, 'both')): total {ours_total:.2f} s CPU "
          f"({our_wall:.2f} s wall incl. checks); per insert+query median {o_med:.0f} us, p95 {o_p95:.0f} us, "
          f"max {o_max / 1e3:.1f} ms (median add {o_add:.0f} us + query {o_q:.0f} us); "
          f"CSR rebuilds during the run: {rebuilds}")
    print(f"baseline (from_triples(all so far) + same query), first {nb} inserts: per insert median "
          f"{b_med / 1e3:.1f} ms, p95 {b_p95 / 1e3:.1f} ms (median rebuild {b_bld / 1e3:.1f} ms); "
          f"{float(np.sum(base_step)):.1f} s CPU ({b_wall:.1f} s wall); extrapolated total for {args.inserts:,} "
          f"inserts {base_extrap:.0f} s (scaled with store size)")
    print(f"speed-up (baseline / ours per insert): median {b_med / o_med:,.0f}x, p95 {b_p95 / o_p95:,.0f}x; "
          f"vs ours over the same first {nb} inserts (median {o_med_nb:.0f} us) {b_med / o_med_nb:,.0f}x; "
          f"total {base_extrap / ours_total:,.0f}x")
    print(f"check: inserted triple in the next query's result {visible:,}/{len(inserts):,}; 1-hop result sizes "
          f"ours = rebuild {sizes_equal}/{nb}; store sizes equal to a fresh build: {counts_equal}; "
          f"insert passage in provenance_of_entity(head) {prov_ok}/{prov_n}; ({check_s:.1f} s)")
    print(f"identical neighbourhoods: {same}/{total} (entities by name, 1-hop and 2-hop 'both', "
          f"grown store vs from_triples(base + inserted))")
    if bad:
        print(f"differing entities (first 10): {bad[:10]}")
    if not ok:
        print("FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
