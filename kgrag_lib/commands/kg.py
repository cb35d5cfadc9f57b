"""`kgrag kg`: inspect a knowledge graph (counts, N-hop neighbourhoods) and save it as a fast binary store.

The graph is a triple file (read as it is, any of three formats), a saved store, or a KG the
methods use, named by its `load_kg` spec (`metaqa`, `2wiki-evidence-heldout`, `wikidata5m`, ...: built
once into the KG cache, see `kgrag_lib.kg.sources`). `kg build --from-corpus` extracts a KG from a
dataset's passages with an LLM (the `text:` source, resumable: rerun it after a kill).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

FORMATS = ("metaqa", "wikidata5m", "tsv")
KG_HELP = ("a KG by its spec, e.g. metaqa, metaqa:<kb.txt>, 2wiki-evidence-heldout, 2wiki-evidence-oracle, "
           "2wiki-evidence-full, wikidata5m[:<folder>] "
           "(data under $KGRAG_DATA_ROOT, built once into $KGRAG_CACHE_DIR or .cache/)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kg", help="inspect a KG file or a saved KG store", description=__doc__)
    kg_sub = p.add_subparsers(dest="kg_command", metavar="KG_COMMAND", required=True)

    def source(q: argparse.ArgumentParser) -> None:
        g = q.add_mutually_exclusive_group(required=True)
        g.add_argument("--triples", help="triple file (MetaQA kb.txt 's|r|o', Wikidata5M or TSV 's<TAB>r<TAB>o')")
        g.add_argument("--store", help="a directory written by `kgrag kg build` / KGStore.save")
        g.add_argument("--kg", help=KG_HELP)
        q.add_argument("--format", choices=FORMATS, default=None,
                       help="triple file format (default: inferred from the file name and first line)")

    q = kg_sub.add_parser("stats", help="print {entities, relations, triples} as JSON (triples de-duplicated)")
    source(q)
    q.set_defaults(func=handle_stats)

    q = kg_sub.add_parser("coverage", help="how much of the evaluated 2Wiki questions' evidence each 2Wiki KG holds, "
                                           "beside the paper's Wikidata5M-KG (computed from its size)")
    q.add_argument("--kg", nargs="+", default=None, metavar="SPEC",
                   help="2Wiki KG specs (default: 2wiki-evidence-heldout 2wiki-evidence-oracle 2wiki-evidence-full)")
    q.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    q.set_defaults(func=handle_coverage)

    q = kg_sub.add_parser("neighbors", help="print the N-hop neighbourhood of an entity as <s | r | o> lines")
    source(q)
    q.add_argument("--entity", required=True, help="entity name (exact, else case-insensitive, else alias)")
    q.add_argument("--hops", type=int, default=1,
                   help="triples incident to entities fewer than N hops away (default 1)")
    q.add_argument("--direction", choices=("out", "in", "both"), default="out",
                   help="out: head->tail, in: tail->head, both: either (default out)")
    q.set_defaults(func=handle_neighbors)

    q = kg_sub.add_parser("build", help="read a triple file (or a KG spec) and save it as a memory-mappable KG store, "
                                        "or extract a KG from a dataset's passages with an LLM (--from-corpus)")
    g = q.add_mutually_exclusive_group(required=True)
    g.add_argument("--triples", help="triple file")
    g.add_argument("--kg", help=KG_HELP)
    g.add_argument("--from-corpus", metavar="DATASET",
                   help="extract a KG from DATASET's passages (musique, hotpotqa, 2wiki, ...) into the KG cache")
    q.add_argument("--format", choices=FORMATS, default=None, help="triple file format (default: inferred)")
    q.add_argument("--split", help="--from-corpus: the question file (default: the dataset's default split)")
    q.add_argument("--n", type=int, help="--from-corpus: index the pooled paragraphs of N sampled questions "
                                         "(default: the whole corpus)")
    q.add_argument("--seed", type=int, help="--from-corpus: the question sample's seed (default 0)")
    q.add_argument("--model", help="--from-corpus: the extraction LLM spec (default: load_llm's default)")
    q.add_argument("--out", help="output directory (required unless --from-corpus, which builds into the KG cache "
                                 "and copies the store, its side tables and stats here when given)")
    q.add_argument("--overwrite", action="store_true", help="replace --out if it already holds something")
    q.set_defaults(func=handle_build)


def _check_out(args: argparse.Namespace) -> None:
    """Nothing existing is replaced without --overwrite (a store folder may hold side tables and files of others)."""
    from ..errors import ConfigError

    if not args.out:
        return
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file; name a folder for the store")
    if out.is_dir() and any(out.iterdir()) and not getattr(args, "overwrite", False):
        raise ConfigError(f"--out {out}: exists and is not empty; nothing was changed. Name another folder, or pass "
                          f"--overwrite to replace it")


def infer_format(path: str | Path) -> str:
    """kb.txt or '|'-separated -> metaqa; a name mentioning wikidata5m -> wikidata5m; else tsv."""
    path = Path(path)
    name = path.name.lower()
    if name == "kb.txt":
        return "metaqa"
    if "wikidata5m" in name:
        return "wikidata5m"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:  # reading errors are reported by the reader
            first = next((line for line in f if line.strip()), "")
    except OSError:
        return "tsv"
    return "metaqa" if "|" in first and "\t" not in first else "tsv"


def _open(args: argparse.Namespace):
    from ..errors import MissingDataError
    from ..kg import KGStore
    from ..kg.sources import load_kg

    if args.kg is not None:
        if not args.kg.strip():
            from ..errors import ConfigError

            raise ConfigError(f"--kg is empty; expected {KG_HELP}")
        _provide_paper_sources()
        return load_kg(args.kg).store
    if getattr(args, "store", None):
        if not Path(args.store).is_dir():
            raise MissingDataError(f"--store {args.store}: no such directory (create one with `kgrag kg build`)")
        return KGStore.load(args.store)
    if not getattr(args, "triples", None):
        raise MissingDataError("--triples: empty; name a triple file")
    return _read(args.triples, args.format)


def _read(path: str, fmt: str | None):
    from ..data.triples import FORMS, read_triples
    from ..errors import MissingDataError
    from ..kg import KGStore
    from ..kg.sources import EmptyKGError

    if not Path(path).exists():
        raise MissingDataError(f"--triples {path}: no such file")
    fmt = fmt or infer_format(path)
    store = KGStore.from_triples(read_triples(path, fmt))
    if store.num_triples == 0:
        raise EmptyKGError(f"--triples {path}: no triples in the file; expected one per line: {FORMS[fmt]}")
    return store


def handle_stats(args: argparse.Namespace) -> int:
    kg = _open(args)
    print(json.dumps({"entities": kg.num_entities, "relations": kg.num_relations, "triples": kg.num_triples}))
    return 0


def handle_coverage(args: argparse.Namespace) -> int:
    """`kg coverage`: `kg.sources.evidence_table` as a table (or JSON rows)."""
    from ..errors import ConfigError
    from ..kg.sources import EVIDENCE_KGS, evidence_table

    specs = [s.strip() for s in args.kg] if args.kg else list(EVIDENCE_KGS)
    twice = sorted({s for s in specs if specs.count(s) > 1})
    if twice:   # before any KG is built: a second row of the same KG only looks like a comparison
        raise ConfigError(f"--kg {' '.join(args.kg)}: {', '.join(twice)} named twice; name each KG once")
    rows = evidence_table(specs=specs)
    if args.json:
        print(json.dumps(rows))
        return 0
    cols = list(rows[0])
    shown = [[("–" if r[c] is None else str(r[c])) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in shown)) for i, c in enumerate(cols)]
    for line in [cols, *shown]:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip())
    return 0


def handle_neighbors(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..kg import UnknownEntityError

    if args.hops < 1:
        raise ConfigError(f"--hops: expected an integer >= 1, got {args.hops}")
    kg = _open(args)
    e = kg.find_entity(args.entity)
    if e is None:
        raise UnknownEntityError(args.entity, kg.suggest_entities(args.entity))
    for line in sorted(kg.verbalize(kg.neighborhood(e, args.hops, args.direction))):
        print(line)
    return 0


def corpus_spec(dataset: str, split: str | None, n: int | None, seed: int | None) -> str:
    """The `text:` KG spec for `kg build --from-corpus`."""
    from ..errors import ConfigError

    if n is not None and n < 1:
        raise ConfigError(f"--n: expected a positive number of questions, got {n}")
    if seed is not None and n is None:
        raise ConfigError("--seed: only used with --n (it seeds the question sample)")
    if seed is not None and seed < 0:
        raise ConfigError(f"--seed: expected an integer >= 0, got {seed}")
    parts = [dataset] + ([split] if split else []) + ([f"n={n}", f"seed={seed or 0}"] if n is not None else [])
    return "text:" + ":".join(parts)


def handle_build(args: argparse.Namespace) -> int:
    from ..errors import ConfigError

    _check_out(args)
    if args.from_corpus:
        return _build_from_corpus(args)
    given = [f"--{k}" for k in ("split", "n", "seed", "model") if getattr(args, k) is not None]
    if given:
        raise ConfigError(f"{', '.join(given)}: only used with --from-corpus")
    if not args.out:
        raise ConfigError("--out: required with --triples or --kg (the directory to save the store in)")
    kg = _open(args)
    out = kg.save(args.out)
    print(json.dumps({"store": str(out), "entities": kg.num_entities, "relations": kg.num_relations,
                      "triples": kg.num_triples}))
    return 0


def _provide_paper_sources() -> None:
    """Import every paper's package, so the KGs they extract (`text:`, `tcr:`) can be named."""
    from ..methods.registry import available_methods

    available_methods()


def _build_from_corpus(args: argparse.Namespace) -> int:
    from ..data.selection import CorpusSelection
    from ..jsonl import atomic_text
    from ..kg.sources import STATS_FILE, load_kg, record_side_files
    from ..llm import load_llm
    from ..paths import data_root

    _provide_paper_sources()

    spec = corpus_spec(args.from_corpus, args.split, args.n, args.seed)
    CorpusSelection.parse(spec.removeprefix("text:")).input_files(data_root())  # bad input fails before the model loads
    llm = load_llm(args.model) if args.model else load_llm()
    try:
        kg = load_kg(spec, llm=llm)
    finally:
        llm.close()
    shown = {"spec": spec, "name": kg.name, **kg.stats}
    if args.out:
        out = kg.store.save(args.out)
        for tables in kg.extra.values():
            tables.save(out)
        stats_text = json.dumps(kg.stats, indent=1)
        record_side_files(out, stats_text)   # what loading the folder checks its side files against
        atomic_text(out / STATS_FILE, stats_text)
        shown["store"] = str(out)
    print(json.dumps(shown))
    return 0
