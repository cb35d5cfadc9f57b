"""Hand-written helpers against the kept libraries that could replace them, on our sizes.

Four places where a library does the same job: the bootstrap interval of a mean
(`scipy.stats.bootstrap`, which `kgrag_lib.eval.bootstrap` now uses), markdown tables
(`pandas.DataFrame.to_markdown`, used by `kgrag_lib.report.tables`), Personalized PageRank
(`networkx.pagerank` against `kgrag_lib.methods.sa_rag.ppr`) and the repair of damaged JSON
(`json_repair.loads` against `kgrag_lib.llm.parsing.parse_json`, also compared value by value on
every cached model answer of the committed reference, which the reference must parse the same).
Each line prints the median time of one call and the ratio.

    .venv/bin/python bench/library_bench.py
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(fn: Callable[[], Any], repeat: int = 7) -> float:
    """Median seconds of one call."""
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def line(what: str, ours: float, lib: float, lib_name: str) -> None:
    print(f"  {what:<44} hand-written {1e3 * ours:9.2f} ms   {lib_name} {1e3 * lib:9.2f} ms   ratio {lib / ours:6.1f}x")


def percentile_interval(v: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap the project used before `scipy.stats.bootstrap`."""
    idx = np.random.default_rng(seed).integers(0, v.size, size=(n_boot, v.size))
    lo, hi = np.quantile(v[idx].mean(axis=1), [0.025, 0.975])
    return float(lo), float(hi)


def bench_bootstrap() -> None:
    from kgrag_lib.eval.bootstrap import bootstrap_ci

    print("bootstrap 95% interval of a mean (0/1 scores)")
    rng = np.random.default_rng(0)
    for n, n_boot in ((10, 1000), (100, 1000), (100, 10_000), (1000, 1000)):
        v = (rng.random(n) < 0.4).astype(float)
        line(f"n={n}, {n_boot} resamples", timed(lambda: percentile_interval(v, n_boot)),
             timed(lambda: bootstrap_ci(v, n_boot=n_boot)), "scipy BCa")


def old_markdown(df: Any, digits: int = 1) -> str:
    """The pipe table the project wrote by hand before `DataFrame.to_markdown`."""
    def cell(x: Any) -> str:
        if x is None or (isinstance(x, float) and np.isnan(x)):
            return "–"
        return f"{x:.{digits}f}" if isinstance(x, (float, np.floating)) else str(x)
    rows = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    rows += ["| " + " | ".join(cell(x) for x in rec) + " |" for rec in df.itertuples(index=False)]
    return "\n".join(rows) + "\n"


def bench_markdown() -> None:
    import pandas as pd

    from kgrag_lib.report.tables import to_markdown

    print("markdown table (REPORT.md's largest: about 130 rows x 20 columns)")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({f"c{i}": rng.random(130) * 100 if i % 2 else [f"name {j}" for j in range(130)]
                       for i in range(20)})
    line("130 x 20", timed(lambda: old_markdown(df)), timed(lambda: to_markdown(df)), "to_markdown")


def bench_ppr() -> None:
    import networkx as nx

    from kgrag_lib.methods.sa_rag.ppr import personalized_pagerank, undirected_matrix

    print("Personalized PageRank, one query (damping 0.5), graph built once")
    rng = np.random.default_rng(0)
    # 550 nodes / 730 edges: the cpu-reference SA-RAG index (347 entities + 196 chunks, musique);
    # 20k / 60k: a paper-sized corpus
    for n, m in ((550, 730), (20_000, 60_000)):
        h, t = rng.integers(0, n, m), rng.integers(0, n, m)
        keep = h != t
        h, t = h[keep], t[keep]
        adj = undirected_matrix(n, h, t)
        g = nx.Graph()
        g.add_nodes_from(range(n))
        for a, b in zip(h.tolist(), t.tolist()):
            g.add_edge(a, b, weight=g.get_edge_data(a, b, {"weight": 0.0})["weight"] + 1.0)
        reset = np.zeros(n)
        reset[rng.choice(n, 5, replace=False)] = rng.random(5)
        reset += 0.05 * rng.random(n)
        pers = dict(enumerate(reset.tolist()))
        ours = personalized_pagerank(adj, reset)
        ref = nx.pagerank(g, alpha=0.5, personalization=pers, weight="weight", tol=1e-10, max_iter=10_000)
        err = float(np.abs(ours - np.array([ref[i] for i in range(n)])).max())
        line(f"{n} nodes, {m} edges (max |diff| {err:.1e})", timed(lambda: personalized_pagerank(adj, reset)),
             timed(lambda: nx.pagerank(g, alpha=0.5, personalization=pers, weight="weight", tol=1e-10,
                                       max_iter=10_000), repeat=3), "networkx")


def bench_json() -> None:
    try:
        import json_repair
    except ImportError:
        print("JSON repair: json_repair is not installed (pip install json-repair) — skipped")
        return
    from kgrag_lib.llm.parsing import _SMART, parse_json, strip_think

    texts = [json.loads(x)["response"] for p in sorted((ROOT / "results/reference/llm-cache").glob("*.jsonl.gz"))
             for x in gzip.open(p, "rt", encoding="utf-8")]

    def lib(t: str) -> Any:
        v = json_repair.loads(strip_think(t).translate(_SMART))
        return v if isinstance(v, (dict, list)) and v else None

    differ = sum(parse_json(t) != lib(t) for t in texts)
    print(f"JSON repair over the {len(texts)} cached model answers of results/reference "
          f"(json_repair gives another value on {differ} of them)")
    line(f"all {len(texts)} answers", timed(lambda: [parse_json(t) for t in texts], repeat=3),
         timed(lambda: [lib(t) for t in texts], repeat=3), "json_repair")


if __name__ == "__main__":
    bench_bootstrap()
    bench_markdown()
    bench_ppr()
    bench_json()
