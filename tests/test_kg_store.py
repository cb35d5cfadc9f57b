"""KGStore: neighbourhoods (hand-checked and against a naive BFS), lookup, growth, persistence, real MetaQA."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import numpy as np
import pytest

from kgrag_lib.errors import DataFormatError, KgragError
from kgrag_lib.kg import KGStore, UnknownEntityError
from kgrag_lib.kg import store as store_mod
from kgrag_lib.kg.strings import StringTable, hash_strings
from kgrag_lib.paths import data_root
from kgrag_lib.records import Triple

# A hand-built graph: cycle A->B->C->A, self loops on D and on the isolated G, fan-in to D and E.
HAND = [("A", "r1", "B"), ("B", "r1", "C"), ("C", "r1", "A"), ("C", "r2", "D"), ("D", "r2", "D"),
        ("E", "r1", "D"), ("F", "r3", "E"), ("G", "r3", "G"), ("B", "r2", "E")]


def edges(*names: str) -> set[tuple[str, str, str]]:
    """'AB' -> the hand triple from A to B."""
    by_pair = {s + o: (s, r, o) for s, r, o in HAND}
    return {by_pair[n] for n in names}


# Expected sets worked out by hand from the picture above (start, direction, hops) -> triples.
HAND_EXPECTED = {
    ("A", "out", 1): edges("AB"),
    ("A", "out", 2): edges("AB", "BC", "BE"),
    ("A", "out", 3): edges("AB", "BC", "BE", "CA", "CD", "ED"),
    ("A", "in", 1): edges("CA"),
    ("A", "in", 2): edges("CA", "BC"),
    ("A", "in", 3): edges("CA", "BC", "AB"),
    ("A", "both", 1): edges("AB", "CA"),
    ("A", "both", 2): edges("AB", "BC", "CA", "CD", "BE"),
    ("A", "both", 3): edges("AB", "BC", "CA", "CD", "BE", "DD", "ED", "FE"),
    ("D", "out", 1): edges("DD"),
    ("D", "out", 2): edges("DD"),
    ("D", "out", 3): edges("DD"),
    ("D", "in", 1): edges("CD", "DD", "ED"),
    ("D", "in", 2): edges("CD", "DD", "ED", "BC", "BE", "FE"),
    ("D", "in", 3): edges("CD", "DD", "ED", "BC", "BE", "FE", "AB"),
    ("D", "both", 1): edges("CD", "DD", "ED"),
    ("D", "both", 2): edges("CD", "DD", "ED", "BC", "CA", "BE", "FE"),
    ("D", "both", 3): edges("AB", "BC", "CA", "CD", "DD", "ED", "FE", "BE"),
}


def as_set(kg: KGStore, ids: np.ndarray) -> set[tuple[str, str, str]]:
    return {(t.s, t.r, t.o) for t in (kg.triple(i) for i in ids)}


@pytest.fixture()
def hand() -> KGStore:
    return KGStore.from_triples([Triple(*t) for t in HAND])


@pytest.mark.parametrize("vectorized", [False, True])
@pytest.mark.parametrize("key", sorted(HAND_EXPECTED))
def test_hand_neighbourhoods(hand: KGStore, key, vectorized: bool, monkeypatch) -> None:
    if vectorized:  # tiny graphs take the scalar path by default; check the numpy path too
        monkeypatch.setattr(store_mod, "_SMALL_FRONTIER", 0)
    start, direction, hops = key
    ids = hand.neighborhood(hand.entity_id(start), hops, direction)
    assert np.issubdtype(ids.dtype, np.integer) and np.all(np.diff(ids) > 0)  # sorted, unique
    assert as_set(hand, ids) == HAND_EXPECTED[key]


def test_hand_edge_cases(hand: KGStore) -> None:
    g = hand.entity_id("G")
    for direction in ("out", "in", "both"):
        for hops in (1, 2, 3):
            assert as_set(hand, hand.neighborhood(g, hops, direction)) == {("G", "r3", "G")}
    a = hand.entity_id("A")
    assert as_set(hand, hand.neighborhood([a, g, a], 1, "out")) == edges("AB", "GG")
    assert hand.neighborhood(a, 0, "both").size == 0
    assert hand.neighborhood([], 2, "both").size == 0
    with pytest.raises(ValueError, match="direction"):
        hand.neighborhood(a, 1, "sideways")
    with pytest.raises(ValueError, match="hops"):
        hand.neighborhood(a, -1)
    with pytest.raises(IndexError, match="out of range"):
        hand.neighborhood(99, 1)
    with pytest.raises(KeyError, match="a name find_entity did not find"):   # find_entity("nobody") is None
        hand.neighborhood(hand.find_entity("nobody"), 1)
    assert as_set(hand, hand.out_triples(hand.entity_id("C"))) == edges("CA", "CD")
    assert as_set(hand, hand.in_triples(hand.entity_id("E"))) == edges("BE", "FE")
    assert sorted(hand.entity_name(i) for i in hand.neighbor_entities(a, "both")) == ["B", "C"]
    assert hand.verbalize(hand.out_triples(a)) == ["<A | r1 | B>"]


def reference_neighbourhood(h: np.ndarray, t: np.ndarray, start, hops: int, direction: str) -> set[int]:
    """Plain-Python BFS: the definition, written as simply as possible."""
    out_adj: dict[int, list[int]] = {}
    in_adj: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(zip(h.tolist(), t.tolist())):
        out_adj.setdefault(a, []).append(i)
        in_adj.setdefault(b, []).append(i)
    seen = set(start)
    frontier = set(start)
    result: set[int] = set()
    for level in range(hops):
        nxt: set[int] = set()
        for e in frontier:
            if direction in ("out", "both"):
                for i in out_adj.get(e, []):
                    result.add(i)
                    nxt.add(int(t[i]))
            if direction in ("in", "both"):
                for i in in_adj.get(e, []):
                    result.add(i)
                    nxt.add(int(h[i]))
        frontier = nxt - seen
        seen |= frontier
    return result


def random_triples(rng: np.random.Generator, n: int, num_e: int, num_r: int) -> list[Triple]:
    # skewed ends so that hubs, duplicates and self loops all occur
    h = np.minimum(rng.zipf(1.6, n) - 1, num_e - 1)
    t = rng.integers(0, num_e, n)
    r = rng.integers(0, num_r, n)
    return [Triple(f"e{a}", f"r{b}", f"e{c}") for a, b, c in zip(h, r, t)]


def check_against_reference(kg: KGStore, rng: np.random.Generator, n_starts: int = 12) -> None:
    h, t = np.asarray(kg.heads), np.asarray(kg.tails)
    for _ in range(n_starts):
        start = rng.choice(kg.num_entities, size=int(rng.integers(1, 4)), replace=False).tolist()
        for direction in ("out", "in", "both"):
            for hops in (1, 2, 3):
                got = kg.neighborhood(start, hops, direction)
                assert set(got.tolist()) == reference_neighbourhood(h, t, start, hops, direction), \
                    (start, direction, hops)


@pytest.mark.parametrize("path", ["mixed", "vectorized", "scalar"])
def test_random_graph_matches_reference_bfs_through_growth_and_reload(tmp_path: Path, monkeypatch, path) -> None:
    # "mixed": the default size thresholds; the others force one of the two BFS implementations
    if path == "vectorized":
        monkeypatch.setattr(store_mod, "_SMALL_FRONTIER", 0)
    elif path == "scalar":
        monkeypatch.setattr(store_mod, "_SMALL_TRIPLES", 10**9)
        monkeypatch.setattr(store_mod, "_SMALL_FRONTIER", 10**9)
    rng = np.random.default_rng(7)
    triples = random_triples(rng, 600, 150, 5)
    kg = KGStore.from_triples(triples)
    assert kg.num_triples == len(set(triples))
    check_against_reference(kg, rng)
    # a few additions stay in the delta index ...
    added = kg.add_triples(random_triples(rng, 40, 200, 7))
    assert kg._n_indexed < kg.num_triples and added.size > 0
    check_against_reference(kg, rng)
    # ... many additions trigger a full rebuild (threshold lowered so a small graph reaches it)
    monkeypatch.setattr(store_mod, "_MERGE_MIN", 8)
    kg.add_triples(random_triples(rng, 300, 260, 7))
    kg.neighborhood(0, 1)
    assert kg._n_indexed == kg.num_triples and kg._out.perm is not None
    check_against_reference(kg, rng)
    kg.add_triples(random_triples(rng, 5, 300, 7))
    kg.save(tmp_path / "g")
    again = KGStore.load(tmp_path / "g")
    assert np.array_equal(again.heads, kg.heads) and np.array_equal(again.tails, kg.tails)
    check_against_reference(again, rng, n_starts=4)


def test_from_triples_dedupes_and_numbers_by_first_appearance() -> None:
    kg = KGStore.from_triples([("x", "p", "y"), ("y", "q", "z"), ("x", "p", "y"), Triple("z", "p", "x")])
    assert (kg.num_entities, kg.num_relations, kg.num_triples) == (3, 2, 3)
    assert [kg.entity_name(i) for i in range(3)] == ["x", "y", "z"]
    assert [kg.relation_name(i) for i in range(2)] == ["p", "q"]
    assert kg.relation_id("q") == 1
    for arr in (kg.heads, kg.rels, kg.tails):
        assert arr.dtype == np.int32 and not arr.flags.writeable
    assert [kg.triple(i).verbalize() for i in range(3)] == ["<x | p | y>", "<y | q | z>", "<z | p | x>"]
    empty = KGStore.from_triples([])
    assert (empty.num_entities, empty.num_triples) == (0, 0)


def test_lookup_exact_case_alias_and_suggestions() -> None:
    kg = KGStore.from_triples([("The Matrix", "directed_by", "Lana Wachowski"),
                               ("the matrix", "has_tags", "cyberpunk"), ("Émile Zola", "wrote", "Nana")])
    assert kg.find_entity("The Matrix") == 0
    assert kg.find_entity("the matrix") == kg.entity_id("the matrix")  # exact beats case-insensitive
    assert kg.find_entity("THE MATRIX") == 0  # case-insensitive: lowest id
    assert kg.find_entity("  Nana ") == kg.entity_id("Nana")
    assert kg.find_entity("ÉMILE ZOLA") == kg.entity_id("Émile Zola")  # non-ASCII case folding
    assert kg.find_entity("Zola") is None
    kg.set_aliases({"Émile Zola": ["Zola", "Émile Édouard Charles Antoine Zola"]})
    assert kg.find_entity("Zola") == kg.entity_id("Émile Zola")
    assert kg.find_entity("zola") == kg.entity_id("Émile Zola")
    assert kg.aliases(kg.entity_id("Émile Zola"))[0] == "Zola" and kg.aliases(0) == []
    kg.set_descriptions({0: "1999 film"})
    assert kg.description(0) == "1999 film" and kg.description(1) == ""
    with pytest.raises(UnknownEntityError) as err:
        kg.entity_id("The Matrixx")
    assert isinstance(err.value, KeyError) and "'The Matrix'" in str(err.value)
    with pytest.raises(KeyError, match="directed_by"):
        kg.relation_id("directed by")


def test_string_table_hash_lookup_compact_and_take() -> None:
    words = [f"name {i}" for i in range(3000)] + ["Ünïcödé", "", "dup", "dup", "DUP"]
    table = StringTable.from_strings(words)
    assert table.find("name 2999") == [2999] and table.find("name 3000") == []
    assert table.find("dup") == [3002, 3003] and table.find_folded("dup") == [3002, 3003, 3004]
    assert table.find("") == [3001] and table.find_folded("üNÏCÖDÉ") == [3000]
    assert len(set(hash_strings(["a", "b", "ab", "ba", "", " "]).tolist())) == 6
    assert len(set(hash_strings(words).tolist())) == 3004  # distinct strings, distinct hashes
    table.append("late")
    table.set(0, "first")
    assert table.find("late") == [3005] and table.find("first") == [0] and table.find("name 0") == []
    table.compact()
    assert table.is_compact and table[0] == "first" and table[3005] == "late" and table.find("late") == [3005]
    assert [table.take(np.array([3000, 0]))[i] for i in range(2)] == ["Ünïcödé", "first"]
    table.pad(3010)
    assert len(table) == 3010 and table[3009] == ""


def test_add_triples_new_ids_duplicates_provenance() -> None:
    kg = KGStore.from_triples(HAND, provenance=["p0", None, ["p1", "p2"], "p0", "p3", "p3", None, None, "p4"])
    n0, e0, r0 = kg.num_triples, kg.num_entities, kg.num_relations
    a, d = kg.entity_id("A"), kg.entity_id("D")
    assert kg.provenance_of_triple(kg.out_triples(a)[0]) == ["p0"]
    assert kg.provenance_of_entity(a) == ["p0", "p1", "p2"]
    new = kg.add_triples([("A", "r1", "B"), ("A", "r9", "H"), ("H", "r1", "A"), ("A", "r9", "H"), ("D", "r2", "D")],
                         provenance=["p9", "p5", None, "p6", "p7"])
    assert new.tolist() == [n0, n0 + 1]
    assert (kg.num_triples, kg.num_entities, kg.num_relations) == (n0 + 2, e0 + 1, r0 + 1)
    h = kg.entity_id("H")
    assert h == e0 and kg.relation_id("r9") == r0
    assert as_set(kg, kg.neighborhood(a, 1, "both")) == edges("AB", "CA") | {("A", "r9", "H"), ("H", "r1", "A")}
    assert as_set(kg, kg.neighborhood(h, 2, "out")) == {("H", "r1", "A"), ("A", "r1", "B"), ("A", "r9", "H")}
    assert kg.provenance_of_triple(new[0]) == ["p5", "p6"]  # in-batch duplicate adds its passage
    assert kg.provenance_of_triple(kg.out_triples(a)[0]) == ["p0", "p9"]  # existing triple gains one
    assert kg.provenance_of_triple(kg.out_triples(d)[0]) == ["p3", "p7"]
    assert kg.add_triples([("A", "r9", "H")]).size == 0  # duplicate of a delta triple
    again = kg.add_triples([("H", "r1", "A"), ("G", "r3", "H")])
    assert again.tolist() == [n0 + 2]
    with pytest.raises(ValueError, match="provenance"):
        kg.add_triples([("A", "r1", "Z")], provenance=["p1", "p2"])


def test_from_id_arrays_validation_aliases_descriptions(tmp_path: Path) -> None:
    h, r, t = np.array([2, 0, 2, 1]), np.array([0, 1, 0, 1]), np.array([0, 2, 0, 0])
    kg = KGStore.from_id_arrays(h, r, t, ["Q1", "Q2", "Q3"], ["P1", "P2"],
                                aliases=[["one", "uno"], [], ["three"]], descriptions={1: "second entity"})
    assert kg.num_triples == 3 and kg.heads.tolist() == [0, 1, 2]  # sorted by head, duplicate dropped
    assert kg.find_entity("UNO") == 0 and kg.aliases(2) == ["three"] and kg.description(1) == "second entity"
    with pytest.raises(ValueError, match=r"tails: ids must lie in \[0, 3\)"):
        KGStore.from_id_arrays(h, r, np.array([0, 1, 2, 3]), ["a", "b", "c"], ["p", "q"])
    with pytest.raises(ValueError, match="lengths differ"):
        KGStore.from_id_arrays(h, r[:2], t, ["a", "b", "c"], ["p", "q"])
    kg.set_aliases({1: ["deux"], 0: ["eins"]})
    kg.add_triples([("Q4", "P1", "Q1")])
    kg.save(tmp_path / "s")
    back = KGStore.load(tmp_path / "s")
    assert [back.aliases(i) for i in range(4)] == [["eins"], ["deux"], ["three"], []]
    assert back.find_entity("deux") == 1 and back.find_entity("uno") is None
    assert [back.description(i) for i in range(4)] == ["", "second entity", "", ""]


def test_save_load_mmap_copy_on_write(tmp_path: Path, hand: KGStore) -> None:
    hand.set_descriptions({"A": "first letter"})
    hand.set_aliases({"B": ["bee"]})
    path = hand.save(tmp_path / "kg")
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in path.iterdir()}
    for mmap in (True, False):
        kg = KGStore.load(path, mmap=mmap)
        assert isinstance(kg._h, np.memmap) == mmap
        for name in ("heads", "rels", "tails"):
            assert np.array_equal(getattr(kg, name), getattr(hand, name))
        assert [kg.entity_name(i) for i in range(kg.num_entities)] == \
            [hand.entity_name(i) for i in range(hand.num_entities)]
        assert kg.description(kg.entity_id("A")) == "first letter" and kg.find_entity("Bee") == kg.entity_id("B")
        for key in HAND_EXPECTED:
            assert as_set(kg, kg.neighborhood(kg.entity_id(key[0]), key[2], key[1])) == HAND_EXPECTED[key]
        kg.add_triples([("A", "r4", "G")])
        assert ("A", "r4", "G") in as_set(kg, kg.neighborhood(kg.entity_id("G"), 1, "in"))
    assert digest == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in path.iterdir()}
    kg.save(path)  # overwrite the directory this store was loaded from
    back = KGStore.load(path)
    assert back.num_triples == len(HAND) + 1 and ("A", "r4", "G") in as_set(back, back.out_triples(back.entity_id("A")))
    back.add_triples([("Newcomer", "r1", "A")])  # a new entity: alias/description tables only grow
    again = KGStore.load(back.save(tmp_path / "kg2"))
    new = again.entity_id("Newcomer")
    assert again.aliases(new) == [] and again.description(new) == ""
    assert again.find_entity("BEE") == again.entity_id("B")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not a store")
    with pytest.raises(KgragError, match="refusing"):
        back.save(tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").is_file()
    (path / "header.json").write_text('{"format": "other"}')
    with pytest.raises(DataFormatError, match="kgrag-kgstore"):
        KGStore.load(path)
    with pytest.raises(DataFormatError, match="header.json"):
        KGStore.load(tmp_path / "nowhere")


def _rewrite(folder: Path, name: str, change) -> None:
    a = np.array(np.load(folder / f"{name}.npy"))
    np.save(folder / f"{name}.npy", change(a), allow_pickle=False)


def _set(i: int, value: int):
    def change(a: np.ndarray) -> np.ndarray:
        a[i] = value
        return a
    return change


# hand: entities A..G are ids 0..6, relations r1..r3 are 0..2, 9 triples sorted by head
STORE_DAMAGE = {
    "a head past the entities": ("heads", _set(0, 7), r"ids in \[0, 7\).*range \[1, 7\]"),
    "a negative tail": ("tails", _set(-1, -1), r"ids in \[0, 7\)"),
    "a relation past the relations": ("rels", _set(0, 3), r"ids in \[0, 3\)"),
    "in-range garbage in the tails": ("tails", _set(0, 6), r"in_indptr\.npy.*count of triples in tails\.npy"),
    "heads out of order": ("heads", lambda a: a[::-1].copy(), r"heads\.npy.*in order of their head"),
    "offsets not rising": ("out_indptr", _set(2, 0), r"offsets rising from 0 to the triple count 9"),
    "offsets past the triple count": ("in_indptr", _set(-1, 10), r"in_indptr\.npy.*triple count 9"),
    "a repeated id in the permutation": ("in_perm", _set(1, 3), r"in_perm\.npy.*permutation of the 9"),
    "float ids": ("heads", lambda a: a.astype(np.float64), r"1-d integer array"),
}


@pytest.mark.parametrize("kind", list(STORE_DAMAGE))
def test_a_damaged_saved_store_is_refused_in_one_line_naming_the_file(tmp_path: Path, hand: KGStore, kind) -> None:
    folder = hand.save(tmp_path / "kg")
    name, change, match = STORE_DAMAGE[kind]
    _rewrite(folder, name, change)
    with pytest.raises(DataFormatError, match=match) as err:
        KGStore.load(folder)
    msg = str(err.value)
    assert msg.startswith(f"{folder}/") and f"{name}.npy" in msg and "\n" not in msg


def test_a_saved_store_whose_npy_file_is_not_one_is_refused(tmp_path: Path, hand: KGStore) -> None:
    folder = hand.save(tmp_path / "kg")
    (folder / "tails.npy").write_bytes(b"not an array")
    with pytest.raises(DataFormatError, match=r"tails\.npy: malformed input; expected a \.npy array"):
        KGStore.load(folder)


def test_a_grown_and_saved_store_passes_the_load_checks(tmp_path: Path, hand: KGStore) -> None:
    """After growth the heads are no longer sorted: the out index is a permutation, checked as such."""
    hand.add_triples([("A", "r9", "Z"), ("Z", "r1", "A")])
    back = KGStore.load(hand.save(tmp_path / "kg"))
    assert (tmp_path / "kg" / "out_perm.npy").exists()
    assert as_set(back, back.out_triples(back.entity_id("Z"))) == {("Z", "r1", "A")}
    KGStore.from_triples([]).save(tmp_path / "empty")
    assert KGStore.load(tmp_path / "empty").num_triples == 0


def _record_again(folder: Path) -> None:
    """Record the block checksums of the folder's files as they are now (a store saved with that content)."""
    import json

    from kgrag_lib.blocksums import FULL_BLOCK_BYTES, record_file

    header = json.loads((folder / "header.json").read_text())
    header["blocks"] = {f: record_file(folder / f, FULL_BLOCK_BYTES) for f in header["files"]}
    (folder / "header.json").write_text(json.dumps(header))


def _swap_relation(a: np.ndarray) -> np.ndarray:
    """Triple 0's relation r1 -> r3: still a valid id, degrees and the head order unchanged."""
    assert a[0] == 0
    a[0] = 2
    return a


@pytest.mark.parametrize("name, change", [("rels", _swap_relation), ("entities.blob", None)])
def test_a_change_that_keeps_every_id_valid_is_refused_by_the_block_checksums(tmp_path: Path, hand: KGStore,
                                                                               name, change) -> None:
    """Issue 59: `check_arrays` cannot see a relation id changed to another valid one, or a letter of a
    name changed to another letter: the store loaded and printed wrong triples. The header's crc32 of
    every block of every file refuses both, naming the file, the block and how to rebuild."""
    folder = hand.save(tmp_path / "kg")
    if change is not None:
        _rewrite(folder, name, change)
    else:
        data = bytearray((folder / f"{name}.npy").read_bytes())
        at = data.index(b"C", 128)   # a name's letter, in the array's data
        data[at] = ord("X")
        (folder / f"{name}.npy").write_bytes(bytes(data))
    with pytest.raises(DataFormatError) as err:
        KGStore.load(folder)
    msg = str(err.value)
    assert msg.startswith(f"{folder}/{name}.npy: malformed input; expected block 0 (bytes 0-") and "\n" not in msg
    assert "changed since written" in msg and f"rebuild it: delete {folder} and rerun" in msg
    assert f"--out {folder} --overwrite" in msg


def test_a_store_written_before_block_checksums_is_refused_with_the_rebuild_command(tmp_path: Path,
                                                                                    hand: KGStore) -> None:
    import json

    folder = hand.save(tmp_path / "kg")
    header = json.loads((folder / "header.json").read_text())
    header["version"] = 1
    del header["blocks"]
    (folder / "header.json").write_text(json.dumps(header))
    with pytest.raises(DataFormatError, match=r"version 2 \(version 1 was written before block checksums: rebuild "
                                              r"it: delete .*kgrag kg build"):
        KGStore.load(folder)
    header["version"] = 2   # a version 2 header that lost its records
    (folder / "header.json").write_text(json.dumps(header))
    with pytest.raises(DataFormatError, match=r"header\.json: malformed input; expected a block checksum record"):
        KGStore.load(folder)
    (folder / "header.json").write_bytes(b'{"format": "\xff"}')
    with pytest.raises(DataFormatError, match=r"header\.json: malformed input; expected a UTF-8 JSON header"):
        KGStore.load(folder)


def test_a_non_utf8_byte_in_a_string_table_names_the_file_row_and_offset(tmp_path: Path, hand: KGStore,
                                                                         capsys, monkeypatch) -> None:
    """Issue 59: a non-UTF-8 byte in a KG store's name blob ended in a UnicodeDecodeError traceback
    ("a bug of kgrag", exit 3). With checksums that match (a store saved so, or one whose record was
    rewritten with it) reading the name is a one-line error naming the file, the row and the offset."""
    from kgrag_lib import cli

    folder = hand.save(tmp_path / "kg")
    blob = folder / "entities.blob.npy"
    data = bytearray(blob.read_bytes())
    at = data.index(b"B", 128)
    data[at] = 0xFF
    blob.write_bytes(bytes(data))
    _record_again(folder)
    kg = KGStore.load(folder)
    row, offset = 1, at - np.load(blob, mmap_mode="r").offset
    says = rf"{blob}: malformed input; expected UTF-8 text in every row .*got 'row {row}: byte 0xff at blob offset {offset} is not UTF-8'"
    with pytest.raises(DataFormatError, match=says):
        kg.entity_name(row)
    monkeypatch.delenv("KGRAG_DEBUG", raising=False)
    capsys.readouterr()
    rc = cli.main(["kg", "neighbors", "--store", str(folder), "--entity", "A"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith(f"kgrag: error: {blob}: malformed input") and f"row {row}" in err


# ---------------------------------------------------------------------------------- real MetaQA
KB = data_root() / "metaqa" / "kb.txt"
needs_kb = pytest.mark.skipif(not KB.is_file(), reason=f"real MetaQA KB not found at {KB}")


@pytest.fixture(scope="module")
def metaqa():
    from kgrag_lib.data.triples import read_triples
    import pandas as pd

    df = pd.read_csv(KB, sep="|", header=None, names=["s", "r", "o"], dtype=str, keep_default_na=False,
                     quoting=csv.QUOTE_NONE)
    return KGStore.from_triples(read_triples(KB, "metaqa")), df


def frame_set(df) -> set[tuple[str, str, str]]:
    return set(map(tuple, df[["s", "r", "o"]].itertuples(index=False, name=None)))


@needs_kb
def test_metaqa_counts_and_size(metaqa) -> None:
    kg, df = metaqa
    # README: 133,582 unique triples, 9 relations, 43,234 entities in entities.dict. The distinct
    # subjects and objects of kb.txt are exactly those 43,234 names (checked against
    # src_keallm/entity2text.txt: no name missing either way), so there is no difference to explain.
    assert (kg.num_triples, kg.num_relations, kg.num_entities) == (133_582, 9, 43_234)
    assert kg.num_entities == len(set(df.s) | set(df.o))
    usage = kg.memory_usage()
    assert (usage["triples"] + usage["index"]) / kg.num_triples < 24


@needs_kb
def test_metaqa_neighbourhoods_match_pandas(metaqa) -> None:
    kg, df = metaqa
    # 1 and 2 hops around a film, out and both; around a director, in
    film = "Kismet"
    one_out = df[df.s == film]
    assert as_set(kg, kg.neighborhood(kg.entity_id(film), 1, "out")) == frame_set(one_out)
    reached = {film} | set(one_out.o)
    assert as_set(kg, kg.neighborhood(kg.entity_id(film), 2, "out")) == frame_set(df[df.s.isin(reached)])
    inc = df[(df.s == film) | (df.o == film)]
    assert as_set(kg, kg.neighborhood(kg.entity_id(film), 1, "both")) == frame_set(inc)
    reached = {film} | set(inc.s) | set(inc.o)
    two_both = df[df.s.isin(reached) | df.o.isin(reached)]
    got = kg.neighborhood(kg.entity_id(film), 2, "both")
    assert got.size == len(two_both) > 1000 and as_set(kg, got) == frame_set(two_both)
    person = "William Dieterle"
    one_in = df[df.o == person]
    reached = {person} | set(one_in.s)
    assert as_set(kg, kg.neighborhood(kg.entity_id(person), 2, "in")) == frame_set(df[df.o.isin(reached)])


@needs_kb
def test_metaqa_save_mmap_load_add_and_provenance(metaqa, tmp_path: Path) -> None:
    kg, _ = metaqa
    kg.save(tmp_path / "metaqa")
    back = KGStore.load(tmp_path / "metaqa", mmap=True)
    assert isinstance(back._h, np.memmap) and isinstance(back._names._blob, np.memmap)
    assert (back.num_triples, back.num_entities, back.num_relations) == (133_582, 43_234, 9)
    e = back.entity_id("William Dieterle")
    assert np.array_equal(back.neighborhood(e, 2, "both"), kg.neighborhood(e, 2, "both"))
    assert back.find_entity("william dieterle") != e  # a lower-case tag entity of its own
    assert back.find_entity("WILLIAM DIETERLE") == e  # case-insensitive: the lowest id
    film = back.entity_id("Kismet")
    new = back.add_triples([("Kismet", "directed_by", "William Dieterle"),  # already there
                            ("Kismet", "filmed_in", "Hollywood")], provenance=["doc-1", "doc-2"])
    assert new.size == 1 and back.num_relations == 10 and back.num_entities == 43_235
    assert back.verbalize(new) == ["<Kismet | filmed_in | Hollywood>"]
    assert new[0] in back.neighborhood(film, 1, "out")
    assert back.provenance_of_entity(film) == ["doc-1", "doc-2"]
    assert back.provenance_of_entity(back.entity_id("Hollywood")) == ["doc-2"]
    back.save(tmp_path / "metaqa2")
    again = KGStore.load(tmp_path / "metaqa2")
    assert again.num_triples == 133_583 and again.provenance_of_triple(int(new[0])) == ["doc-2"]


def test_suggestions_on_a_large_name_table(monkeypatch) -> None:
    # above the size where every name is compared: candidates are prefiltered by first letter and length
    monkeypatch.setattr(store_mod, "_FUZZY_ALL_LIMIT", 1000)
    monkeypatch.setattr(store_mod, "_FUZZY_CANDIDATES", 2000)
    names = [f"film {i}" for i in range(20_000)] + ["Casablanca"]
    kg = KGStore.from_id_arrays(np.array([0]), np.array([0]), np.array([20_000]), names, ["rel"])
    assert "Casablanca" in kg.suggest_entities("casablanka")
    assert kg.suggest_entities("filmm 12345")[0] == "film 12345"
    kg.add_triples([("Casablanca", "rel", "Rick Blaine")])
    assert kg.suggest_entities("Rick Blain") == ["Rick Blaine"]
