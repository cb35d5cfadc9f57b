"""Text-to-KG indexing (`kg.extraction`, `kg.text_kg`, SA-RAG's `methods.sa_rag.extraction`, the `text:` KG source, `kgrag kg build --from-corpus`) with a
scripted LLM: chunking, the exact KG a scripted extraction gives, resolution through aliases, the
one repair request, failures recorded, dropped relations counted, resume after a kill, reruns
served by the call cache, and the build folder keyed by prompt version and model. One real-model
test (marked `model`) indexes the paragraphs of 2 real MuSiQue questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_kg_cli import run as run_cli

from kgrag_lib.commands import kg as kg_cmd
from kgrag_lib.errors import ConfigError, DataFormatError
from kgrag_lib.kg.extraction import ExtractionJournal as Journal
from kgrag_lib.kg.extraction import chunk_passages, chunk_words
from kgrag_lib.kg.sources import load_kg, shared_kg
from kgrag_lib.kg.text_kg import RelationMention, TextKG
from kgrag_lib.methods.sa_rag import extraction as text_extraction
from kgrag_lib.methods.sa_rag.extraction import build_text_kg, parse_entities
from kgrag_lib.methods.sa_rag.prompts import ENTITY_SCHEMA, RELATION_SCHEMA
from kgrag_lib.llm import LLMCache, ScriptedLLM
from kgrag_lib.methods.base import RunContext
from kgrag_lib.paths import data_root
from kgrag_lib.records import Passage

TAXI = Passage("p1", "Taxi! is a 1932 film directed by Roy Del Ruth and starring James Cagney.", "Taxi!")
ROY = Passage("p2", "Del Ruth married the actress Winnie Lightner in 1948.", "Roy Del Ruth")


def ents(*rows: tuple[str, str, list[str], str]) -> str:
    return json.dumps({"entities": [{"name": n, "type": t, "aliases": a, "description": d} for n, t, a, d in rows]})


def rels(*rows: tuple[str, str, str, str]) -> str:
    return json.dumps({"relations": [{"source": s, "relation": r, "target": t, "description": d}
                                     for s, r, t, d in rows]})


OUTPUTS = {
    ("Taxi!", "entities"): ents(("Taxi!", "MISC", [], "A 1932 American film."),
                                ("Roy Del Ruth", "PERSON", ["Del Ruth"], "The director of Taxi!."),
                                ("James Cagney", "PERSON", [], "An actor who starred in Taxi!.")),
    ("Taxi!", "relations"): rels(("Taxi!", "directed by", "Roy Del Ruth", "Taxi! was directed by Roy Del Ruth."),
                                 ("Taxi!", "stars", "James Cagney", "James Cagney starred in Taxi!."),
                                 ("Taxi!", "produced by", "Warner Bros.", "Warner Bros. made Taxi!.")),
    ("Roy Del Ruth", "entities"): ents(
        ("Del Ruth", "PERSON", ["Roy Del Ruth"], "A director who married Winnie Lightner."),
        ("Winnie Lightner", "person", ["Lightner"], "An actress.")),
    ("Roy Del Ruth", "relations"): rels(("del ruth", "spouse", "Lightner", "Del Ruth married Winnie Lightner in 1948."),
                                        ("Winnie Lightner", "same as", "Lightner", "")),
}


OUTPUTS_ROY = {"name": "Roy Del Ruth", "type": "PERSON", "aliases": [], "description": "The director of Taxi!."}


def kind_of(messages) -> str:
    prompt = messages[-1]["content"]
    if "should have been one JSON object" in prompt:
        return "repair"
    return "relations" if "Entities found in this text" in prompt else "entities"


def scripted(outputs: dict, repairs: dict[str, str] | None = None, *, fail_on: str = "", identity: str = "scripted:tkg",
             cache: LLMCache | None = None) -> ScriptedLLM:
    """Answers `outputs[(title, kind)]` (title = the chunk's first line); a repair request gets
    `repairs[bad output]`; a chunk whose title is `fail_on` raises, as a killed process would stop."""

    def answer(messages, params) -> str:
        kind, prompt = kind_of(messages), messages[-1]["content"]
        if kind == "repair":
            return next(fixed for bad, fixed in (repairs or {}).items() if bad in prompt)
        title = prompt.rsplit("<<<\n", 1)[1].split("\n", 1)[0]
        if title == fail_on:
            raise RuntimeError("killed")
        return outputs[(title, kind)]

    return ScriptedLLM(answer, identity=identity, cache=cache)


def prompts_of(llm: ScriptedLLM) -> list[tuple[str, str]]:
    """(kind, chunk title) of every request that reached the backend."""
    out = []
    for r in llm.requests:
        kind = kind_of(r.messages)
        out.append((kind, "" if kind == "repair" else r.messages[-1]["content"].rsplit("<<<\n", 1)[1].split("\n", 1)[0]))
    return out


# ---- chunking --------------------------------------------------------------------------------------
def test_chunk_words_boundaries_and_overlap():
    words = [f"w{i}" for i in range(10)]
    assert chunk_words(" ".join(words), 4, 2) == [" ".join(words[a:a + 4]) for a in (0, 2, 4, 6)]
    assert chunk_words(" ".join(words), 4, 0) == [" ".join(words[a:a + 4]) for a in (0, 4, 8)]
    assert chunk_words(" ".join(words), 10, 3) == [" ".join(words)]  # exactly one window: no tail chunk
    assert chunk_words("  \n ") == []
    long = [str(i) for i in range(800)]  # the paper's 500/200: windows start every 300 words
    chunks = chunk_words("\n".join(long))
    assert [c.split()[0] for c in chunks] == ["0", "300"] and chunks[1].split()[-1] == "799"
    assert chunks[0].split()[300:] == chunks[1].split()[:200]  # 200 words shared
    assert len(chunk_words(" ".join(long), 500, 100)) == 2  # the Naive RAG setting: starts 0, 400
    for size, overlap, match in [(0, 0, "chunk size"), (5, 5, "chunk overlap"), (5, -1, "chunk overlap")]:
        with pytest.raises(ConfigError, match=match):
            chunk_words("a b", size, overlap)


def test_chunks_keep_the_title_and_are_named_by_passage():
    chunks = chunk_passages([Passage("a", "one two three", "Title A"), Passage("b", "", "Empty")], size=2, overlap=1)
    assert [c.cid for c in chunks] == ["doc:a/chunk:0", "doc:a/chunk:1"]
    assert [c.as_text() for c in chunks] == ["Title A\none two", "Title A\ntwo three"]


# ---- the KG from a scripted extraction --------------------------------------------------------------
def test_scripted_extraction_gives_the_exact_kg(tmp_path):
    llm = scripted(OUTPUTS)
    store, stats, kg = build_text_kg([TAXI, ROY], llm, tmp_path / "j.jsonl", show_progress=False)
    c1, c2 = "doc:p1/chunk:0", "doc:p2/chunk:0"
    triples = {store.triple(i): store.provenance_of_triple(i) for i in range(store.num_triples)}
    assert {(t.s, t.r, t.o): p for t, p in triples.items()} == {
        (c1, "describes", "Taxi!"): [c1], (f"{c1}/description:0", "describes", "Taxi!"): [c1],
        (c1, "describes", "Roy Del Ruth"): [c1], (f"{c1}/description:1", "describes", "Roy Del Ruth"): [c1],
        (c1, "describes", "James Cagney"): [c1], (f"{c1}/description:2", "describes", "James Cagney"): [c1],
        ("Taxi!", "related_to", "Roy Del Ruth"): [c1], ("Taxi!", "related_to", "James Cagney"): [c1],
        # chunk 2's "Del Ruth" is chunk 1's "Roy Del Ruth" (alias overlap): one node
        (c2, "describes", "Roy Del Ruth"): [c2], (f"{c2}/description:0", "describes", "Roy Del Ruth"): [c2],
        (c2, "describes", "Winnie Lightner"): [c2], (f"{c2}/description:1", "describes", "Winnie Lightner"): [c2],
        ("Roy Del Ruth", "related_to", "Winnie Lightner"): [c2],
    }
    roy, winnie = store.entity_id("Roy Del Ruth"), store.entity_id("Winnie Lightner")
    assert store.aliases(roy) == ["Del Ruth"] and store.aliases(winnie) == ["Lightner"]
    assert store.find_entity("del ruth") == roy
    assert {store.entity_name(i): t for i, t in kg.entity_types.items()} == {
        "Taxi!": "MISC", "Roy Del Ruth": "PERSON", "James Cagney": "PERSON", "Winnie Lightner": "PERSON"}
    assert store.description(roy) == "The director of Taxi!."  # the first one; every one is a node
    assert sorted(store.description(d) for d, e in kg.description_entity.items() if e == roy) == [
        "A director who married Winnie Lightner.", "The director of Taxi!."]
    assert sorted(store.entity_name(i) for i in kg.ids("chunk")) == [c1, c2]
    assert store.description(store.entity_id(c1)) == "Taxi!\n" + TAXI.text
    assert kg.chunks[store.entity_id(c2)].cid == c2 and kg.chunks[store.entity_id(c2)].title == "Roy Del Ruth"
    assert (len(kg.ids("entity")), len(kg.ids("description")), len(kg.ids("chunk"))) == (4, 5, 2)
    texts = {store.verbalize([t])[0]: ms for t, ms in kg.relations.items()}
    assert texts == {
        "<Taxi! | related_to | Roy Del Ruth>": [
            RelationMention("directed by", "Taxi! was directed by Roy Del Ruth.", c1)],
        "<Taxi! | related_to | James Cagney>": [RelationMention("stars", "James Cagney starred in Taxi!.", c1)],
        "<Roy Del Ruth | related_to | Winnie Lightner>": [
            RelationMention("spouse", "Del Ruth married Winnie Lightner in 1948.", c2)],
    }
    assert stats["dropped_relations"] == 2  # Warner Bros. was not extracted; Winnie Lightner -> herself
    keys = ("chunks", "entity_mentions", "entity_nodes", "description_nodes", "chunk_nodes", "relation_mentions",
            "related_to_triples", "entities_per_chunk", "relations_per_chunk", "chunks_with_zero_entities", "outputs",
            "unparsable_outputs", "repairs_attempted", "entity_types_coerced", "llm_requests", "llm_calls", "triples")
    assert {k: stats[k] for k in keys} == {
        "chunks": 2, "entity_mentions": 5, "entity_nodes": 4, "description_nodes": 5, "chunk_nodes": 2,
        "relation_mentions": 3, "related_to_triples": 3, "entities_per_chunk": 2.5, "relations_per_chunk": 1.5,
        "chunks_with_zero_entities": 0, "outputs": 4, "unparsable_outputs": 0, "repairs_attempted": 0,
        "entity_types_coerced": 0, "llm_requests": 4, "llm_calls": 4, "triples": 13}
    assert stats["prompt_tokens"] == sum(len(m["content"].split()) for r in llm.requests for m in r.messages)
    # the requests: the chunk text with its title, the schema, and the entity names for the relation call
    first = llm.requests[0]
    assert "<<<\nTaxi!\n" + TAXI.text + "\n>>>" in first.prompt and first.params.json_schema == ENTITY_SCHEMA
    assert llm.requests[1].params.json_schema == RELATION_SCHEMA
    assert "- Taxi!\n- Roy Del Ruth\n- James Cagney\n" in llm.requests[1].prompt


def test_saved_side_tables_round_trip(tmp_path):
    _, _, kg = build_text_kg([TAXI, ROY], scripted(OUTPUTS), tmp_path / "j.jsonl", show_progress=False)
    kg.save(tmp_path)
    assert TextKG.load(tmp_path) == kg
    (tmp_path / "text_kg.json").write_text("{}", encoding="utf-8")
    with pytest.raises(DataFormatError, match="text_kg.json"):
        TextKG.load(tmp_path)


# ---- strict parsing, the repair request, failures ------------------------------------------------------
def test_broken_json_is_repaired_by_one_request(tmp_path):
    broken = '```json\n{"entities": [{"name": "Taxi!", "type": "MISC", "aliases": [], "description": "A film."},]}\n```'
    fixed = ents(("Taxi!", "MISC", [], "A film."))
    llm = scripted({("Taxi!", "entities"): broken}, {broken: fixed})
    store, stats, _ = build_text_kg([TAXI], llm, tmp_path / "j.jsonl", show_progress=False)
    assert prompts_of(llm) == [("entities", "Taxi!"), ("repair", "")]  # one entity: no relation call
    repair = llm.requests[1]
    assert broken in repair.prompt and "not valid JSON" in repair.prompt and ENTITY_SCHEMA in repair.prompt
    assert repair.params.json_schema == ENTITY_SCHEMA
    assert store.verbalize(range(store.num_triples)) == [
        "<doc:p1/chunk:0 | describes | Taxi!>", "<doc:p1/chunk:0/description:0 | describes | Taxi!>"]
    assert (stats["repairs_attempted"], stats["repairs_succeeded"], stats["unparsable_outputs"]) == (1, 1, 0)


def test_an_output_cut_off_by_max_tokens_keeps_its_complete_items_without_a_repair(tmp_path):
    """The 0.5B model under the grammar repeats an entity until max_tokens: the cut-off list keeps
    its complete items once each, no repair request is sent, and the salvage is counted."""
    item = {"name": "Taxi!", "type": "MISC", "aliases": ["Taxi"], "description": "A film."}
    looping = '{"entities": [' + ", ".join(json.dumps(i) for i in [item, OUTPUTS_ROY, item, item]) + ', {"name": "Ta'
    llm = scripted({("Taxi!", "entities"): looping, ("Taxi!", "relations"): rels()})
    store, stats, kg = build_text_kg([TAXI], llm, tmp_path / "j.jsonl", show_progress=False)
    assert prompts_of(llm) == [("entities", "Taxi!"), ("relations", "Taxi!")]
    assert [store.entity_name(int(i)) for i in kg.ids("entity")] == ["Taxi!", "Roy Del Ruth"]
    assert (stats["cut_off_outputs_salvaged"], stats["repairs_attempted"], stats["unparsable_outputs"]) == (1, 0, 0)


def test_complete_items_only_takes_a_list_that_was_cut_off():
    from kgrag_lib.methods.sa_rag.extraction import complete_items

    a, b = {"name": "A"}, {"name": "B"}
    assert json.loads(complete_items('{"entities": [%s, %s, %s, {"na' % (json.dumps(a), json.dumps(b), json.dumps(a)),
                                     "entities")) == {"entities": [a, b]}
    assert json.loads(complete_items('{"entities": [%s, ' % json.dumps(a), "entities")) == {"entities": [a]}
    assert complete_items('{"entities": [%s,]}' % json.dumps(a), "entities") is None  # closed: a syntax error
    assert complete_items('{"entities": [{"na', "entities") is None  # nothing complete
    assert complete_items('{"relations": [%s' % json.dumps(a), "entities") is None  # another list


def test_schemas_bound_every_list_and_string():
    """Bounds are what stops a looping small model under a grammar; every array and string has one."""
    def unbounded(node, path="$"):
        if isinstance(node, dict):
            if node.get("type") == "array" and "maxItems" not in node:
                yield path
            if node.get("type") == "string" and "maxLength" not in node and "enum" not in node:
                yield path
            for k, v in node.items():
                yield from unbounded(v, f"{path}.{k}")
    for schema in (ENTITY_SCHEMA, RELATION_SCHEMA):
        assert list(unbounded(json.loads(schema))) == []


def test_still_broken_chunk_is_recorded_and_indexing_goes_on(tmp_path):
    wrong_shape = json.dumps({"entities": [{"type": "PERSON"}]})
    outputs = {**OUTPUTS, ("Taxi!", "entities"): wrong_shape}
    llm = scripted(outputs, {wrong_shape: "Sorry, I cannot produce JSON."})
    store, stats, kg = build_text_kg([TAXI, ROY], llm, tmp_path / "j.jsonl", show_progress=False)
    assert prompts_of(llm) == [("entities", "Taxi!"), ("repair", ""), ("entities", "Roy Del Ruth"),
                               ("relations", "Roy Del Ruth")]
    assert 'entities[0] has no \\"name\\"' in json.dumps(llm.requests[1].prompt)
    assert kg.unparsable == [{"chunk": "doc:p1/chunk:0", "stage": "entities",
                              "reason": 'no JSON object in the output (after one repair; first error: '
                                        'entities[0] has no "name")',
                              "output": "Sorry, I cannot produce JSON."}]
    assert {k: stats[k] for k in ("unparsable_outputs", "unparsable_entity_outputs", "unparsable_relation_outputs",
                                  "unparsable_rate", "repairs_attempted", "repairs_succeeded",
                                  "chunks_with_zero_entities", "outputs", "chunk_nodes")} == {
        "unparsable_outputs": 1, "unparsable_entity_outputs": 1, "unparsable_relation_outputs": 0,
        "unparsable_rate": round(1 / 3, 4), "repairs_attempted": 1, "repairs_succeeded": 0,
        "chunks_with_zero_entities": 1, "outputs": 3, "chunk_nodes": 1}
    assert store.find_entity("Taxi!") is None and store.find_entity("Winnie Lightner") is not None


def test_parse_entities_is_strict_about_shape_and_lenient_about_type():
    items, coerced = parse_entities('Here: [{"name": " Roy  Del Ruth ", "type": "LOCATION", '
                                    '"aliases": ["", "Del Ruth"]}]')
    assert items == [{"name": "Roy Del Ruth", "type": "MISC", "aliases": ["Del Ruth"], "description": ""}]
    assert coerced == 1
    for bad, reason in [('{"entities": [1]}', r"entities\[0\] is not a JSON object"),
                        ('{"entities": [{"name": "A", "aliases": "B"}]}', "not a list of strings"),
                        ('{"items": []}', "expected a JSON object"),
                        ('{"entities": [{"name": "A"}', "not valid JSON")]:
        with pytest.raises(ValueError, match=reason):
            parse_entities(bad)


# ---- resume and the call cache ---------------------------------------------------------------------
def test_resume_after_a_kill_extracts_only_the_rest(tmp_path):
    passages = [TAXI, ROY, Passage("p3", "A third text.", "Third"), Passage("p4", "A fourth text.", "Fourth")]
    outputs = {**OUTPUTS, **{(t, "entities"): ents() for t in ("Third", "Fourth")}}
    journal = tmp_path / "j.jsonl"
    with pytest.raises(RuntimeError, match="killed"):
        build_text_kg(passages, scripted(outputs, fail_on="Third"), journal, show_progress=False)
    lines = journal.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["chunk"] for x in lines] == ["doc:p1/chunk:0", "doc:p2/chunk:0"]
    journal.write_text(lines[0] + "\n" + lines[1][:40], encoding="utf-8")  # as if killed writing chunk 2's line
    llm = scripted(outputs)
    store, stats, _ = build_text_kg(passages, llm, journal, show_progress=False)
    assert prompts_of(llm) == [("entities", "Roy Del Ruth"), ("relations", "Roy Del Ruth"),
                               ("entities", "Third"), ("entities", "Fourth")]
    assert stats["chunks_extracted_this_build"] == 3 and stats["chunks"] == 4 and stats["related_to_triples"] == 3
    assert len(journal.read_text(encoding="utf-8").splitlines()) == 4
    journal.write_text("not json\n" + journal.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"j\.jsonl:1"):  # damage before the end is not a kill
        Journal(journal).read()


def test_rerun_with_the_same_call_cache_sends_no_call(tmp_path):
    cache = LLMCache(tmp_path / "calls.sqlite")
    first = scripted(OUTPUTS, cache=cache)
    store, stats, kg = build_text_kg([TAXI, ROY], first, tmp_path / "a.jsonl", show_progress=False)
    again = scripted(OUTPUTS, cache=cache)
    store2, stats2, kg2 = build_text_kg([TAXI, ROY], again, tmp_path / "b.jsonl", show_progress=False)
    assert again.requests == [] and stats2["llm_calls_this_build"] == 0 and stats2["llm_calls"] == 0
    assert stats2["llm_requests"] == stats["llm_requests"] == 4 and stats2["prompt_tokens"] == stats["prompt_tokens"]
    assert store2.verbalize(range(store2.num_triples)) == store.verbalize(range(store.num_triples)) and kg2 == kg


# ---- the text: source -----------------------------------------------------------------------------
def musique_root(root: Path, passages: list[list[Passage]]) -> Path:
    """A data root with a MuSiQue dev200 file: one question per group of paragraphs."""
    rows = [{"id": f"2hop__{i}", "question": f"Q{i}?", "answer": "A",
             "paragraphs": [{"idx": k, "title": p.title, "paragraph_text": p.text, "is_supporting": k == 0}
                            for k, p in enumerate(group)]} for i, group in enumerate(passages)]
    path = root / "musique" / "MIGRES_200_musique_ans.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def test_text_source_builds_once_into_a_folder_keyed_by_model_and_prompt(tmp_path, monkeypatch):
    root, cache = musique_root(tmp_path / "data", [[TAXI], [ROY, TAXI]]), tmp_path / "cache"
    with pytest.raises(ConfigError, match="kg='text:musique'.*pass llm="):
        load_kg("text:musique", data_root=root, cache_dir=cache)
    llm = scripted(OUTPUTS)
    kg = load_kg("text:musique", data_root=root, cache_dir=cache, llm=llm)
    assert kg.name == f"text-musique-default-{text_extraction.EXTRACTION_PROMPT_VERSION}" and len(llm.requests) == 4
    assert isinstance(kg.extra["text"], TextKG) and kg.stats["related_to_triples"] == 3
    assert kg.stats["corpus"] == "pooled paragraphs of every musique question of the split, titles kept"
    assert kg.stats["model_identity"] == "scripted:tkg" and kg.stats["passages"] == 2  # TAXI pooled once
    folder, = (cache / "kg").glob("text-musique-*/")
    assert {p.name for p in folder.iterdir()} >= {"header.json", "journal.jsonl", "stats.json", "text_kg.json"}
    assert not list((cache / "kg").glob("*.journal.jsonl"))  # moved into the folder when done
    again = scripted(OUTPUTS)
    reloaded = load_kg("text:musique", data_root=root, cache_dir=cache, llm=again)
    assert again.requests == [] and reloaded.stats == kg.stats and reloaded.extra["text"] == kg.extra["text"]
    load_kg("text:musique", data_root=root, cache_dir=cache, llm=scripted(OUTPUTS, identity="scripted:other"))
    monkeypatch.setattr(text_extraction, "EXTRACTION_PROMPT_VERSION", "tkg-test")
    changed = load_kg("text:musique", data_root=root, cache_dir=cache, llm=scripted(OUTPUTS))
    assert changed.name == "text-musique-default-tkg-test" and changed.stats["prompt_version"] == "tkg-test"
    assert len([p for p in (cache / "kg").iterdir() if p.is_dir()]) == 3
    copied = load_kg(str(folder), cache_dir=cache)  # a build folder loads as a saved store, tables and all
    assert copied.extra["text"] == kg.extra["text"] and copied.stats == kg.stats


def test_a_damaged_text_kg_build_is_rebuilt_from_its_journal_without_a_call(tmp_path, caplog):
    """Issue 59: a build folder refused on load (here a byte changed in a name, caught by the block
    checksums; the same for a store written before them) is rebuilt; the extraction's journal is kept
    and replayed, so the LLM's work is not lost and no request is sent."""
    root, cache = musique_root(tmp_path / "data", [[TAXI], [ROY, TAXI]]), tmp_path / "cache"
    kg = load_kg("text:musique", data_root=root, cache_dir=cache, llm=scripted(OUTPUTS))
    folder, = (cache / "kg").glob("text-musique-*/")
    blob = folder / "entities.blob.npy"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0x01
    blob.write_bytes(bytes(data))
    again = scripted(OUTPUTS)
    with caplog.at_level("WARNING"):
        rebuilt = load_kg("text:musique", data_root=root, cache_dir=cache, llm=again)
    assert again.requests == [] and f"built KG {folder} is damaged" in caplog.text and "crc32" in caplog.text
    assert (rebuilt.store.num_triples, rebuilt.store.num_entities) == (kg.store.num_triples, kg.store.num_entities)
    assert (folder / "journal.jsonl").is_file() and not list((cache / "kg").glob("*.journal.jsonl"))


def test_text_source_sample_of_questions_and_shared_kg(tmp_path):
    root = musique_root(tmp_path / "data", [[TAXI], [ROY]])
    ctx = RunContext(data_root=str(root), cache_dir=str(tmp_path / "cache"), llm=scripted(OUTPUTS))
    kg = shared_kg(ctx, "text:musique:dev200:n=1:seed=3")
    assert shared_kg(ctx, "text:musique:dev200:n=1:seed=3") is kg and kg.name.startswith("text-musique-dev200-n1s3-")
    assert kg.stats["questions"] == 1 and kg.stats["seed"] == 3 and kg.stats["passages"] == 1
    assert kg.stats["corpus"] == "pooled paragraphs of 1 sampled musique questions (seed 3), titles kept"


def test_text_spec_sets_extraction_caps_and_names_the_build_by_them(tmp_path):
    """A cap in the spec reaches the schema sent and the parser; a cap at its default changes nothing."""
    root, cache = musique_root(tmp_path / "data", [[TAXI], [ROY]]), tmp_path / "cache"
    default = load_kg("text:musique", data_root=root, cache_dir=cache, llm=scripted(OUTPUTS))
    same = scripted(OUTPUTS)
    assert load_kg("text:musique:max_relations=30", data_root=root, cache_dir=cache, llm=same).name == default.name
    assert same.requests == []   # the default cap spelt out is the same build
    llm = scripted(OUTPUTS)
    capped = load_kg("text:musique:max_relations=1:max_aliases=0", data_root=root, cache_dir=cache, llm=llm)
    assert capped.name == f"{default.name}-max_aliases0-max_relations1" and len(llm.requests) == 4
    assert capped.stats["caps"]["max_relations"] == 1 and capped.stats["caps"]["max_aliases"] == 0
    assert capped.stats["relations_over_cap"] == 3 and capped.stats["relation_outputs_at_cap"] == 2
    assert capped.stats["aliases_over_cap"] == 3 and default.stats["relations_over_cap"] == 0
    sent = [r.params for r in llm.requests if "Entities found in this text" in r.prompt]
    assert sent and all(json.loads(p.json_schema)["properties"]["relations"]["maxItems"] == 1 for p in sent)
    assert capped.stats["triples"] < default.stats["triples"]
    from kgrag_lib.methods.sa_rag.corpus import selection_of

    assert selection_of("text:musique:dev200:n=1:seed=3:max_relations=1") == selection_of("text:musique:dev200:n=1:seed=3")


@pytest.mark.parametrize("spec,match", [
    ("text:musique:max_relation=3", r"'max_relation=3': unknown extraction cap; expected one of max_tokens=<N>"),
    ("text:musique:max_relations=x", "max_relations: expected a non-negative integer, got 'x'"),
    ("text:musique:max_relations=2:max_relations=3", "max_relations: given twice"),
    ("text:musique:max_entities=0", "parameter 'max_entities' must be an integer >= 1, got 0"),
    ("text:", "expected text:<dataset>"),
    ("text:nope", "unknown dataset 'nope'"),
    ("text:musique:test", r"'test': expected a split of musique \(dev200, dev2417\)"),
    ("text:musique:n=0", "n='0': expected a positive integer"),
    ("text:musique:k=2", "'k=2': expected a split"),
    ("text:metaqa-1hop", "ships no passages"),
    ("text:2wiki:dev200", "one file whatever the split"),
])
def test_bad_text_specs_are_config_errors(spec, match, tmp_path):
    with pytest.raises(ConfigError, match=match):
        load_kg(spec, data_root=tmp_path, cache_dir=tmp_path / "cache", llm=scripted(OUTPUTS))


# ---- kgrag kg build --from-corpus ----------------------------------------------------------------------
def test_cli_build_from_corpus(tmp_path, capsys, monkeypatch):
    import kgrag_lib.llm as llm_mod

    root = musique_root(tmp_path / "data", [[TAXI], [ROY]])
    monkeypatch.setenv("KGRAG_DATA_ROOT", str(root))
    monkeypatch.setenv("KGRAG_CACHE_DIR", str(tmp_path / "cache"))
    asked = []
    monkeypatch.setattr(llm_mod, "load_llm", lambda spec="default", **kw: asked.append(spec) or scripted(OUTPUTS))
    rc, out = run_cli(["kg", "build", "--from-corpus", "musique", "--n", "2", "--seed", "1", "--model", "m",
                       "--out", str(tmp_path / "out")], capsys)
    shown = json.loads(out)
    assert rc == 0 and asked == ["m"] and shown["spec"] == "text:musique:n=2:seed=1" and shown["chunks"] == 2
    copy = load_kg(str(tmp_path / "out"))
    assert copy.stats["related_to_triples"] == 3 and isinstance(copy.extra["text"], TextKG)
    assert kg_cmd.corpus_spec("2wiki", None, None, None) == "text:2wiki"
    for argv, match in [(["--from-corpus", "musique", "--seed", "1"], "--seed: only used with --n"),
                        (["--from-corpus", "musique", "--n", "0"], "--n: expected a positive"),
                        (["--from-corpus", "musique", "--split", "test"], "expected a split of musique"),
                        (["--kg", "metaqa", "--n", "3", "--out", "x"], "--n: only used with --from-corpus"),
                        (["--kg", "metaqa"], "--out: required")]:
        with pytest.raises(ConfigError, match=match):
            run_cli(["kg", "build", *argv], capsys)
    assert asked == ["m"]  # no model loaded for a bad command


# ---- the real model ----------------------------------------------------------------------------
# the extraction caps of test_sa_rag's real-model tests: each call short on CPU (a small model under a grammar)
CAPS = "max_tokens=192:max_entities=6:max_aliases=1:max_relations=8:max_description_chars=80"
KEEP_PARAGRAPHS = 2   # the question's supporting paragraphs first, then distractors, up to this many


@pytest.mark.model
def test_real_model_indexes_a_musique_question(tmp_path, request):
    """The embedded model extracts a KG from the paragraphs of one real MuSiQue question (the seed-0 draw),
    cut to KEEP_PARAGRAPHS, its supporting ones first (2 chunks, each call capped: the 2 uncapped questions'
    40 chunks were about 1,700 s of CI, 4 capped chunks 116 s here), through the same `text:` spec and build a run uses."""
    from kgrag_lib.data.registry import load_questions

    musique = data_root() / "musique" / "MIGRES_200_musique_ans.jsonl"
    if not musique.is_file():
        pytest.skip(f"real MuSiQue file not found at {musique}")
    qid = load_questions("musique", split="dev200", n=1, seed=0)[0].qid
    record = next(r for r in map(json.loads, musique.read_text(encoding="utf-8").splitlines()) if r["id"] == qid)
    paragraphs = sorted(record["paragraphs"], key=lambda p: not p["is_supporting"])[:KEEP_PARAGRAPHS]
    root = tmp_path / "data"
    (root / "musique").mkdir(parents=True)
    (root / "musique" / musique.name).write_text(json.dumps({**record, "paragraphs": paragraphs}) + "\n",
                                                 encoding="utf-8")
    llm = request.getfixturevalue("shared_llm")   # the session's one load (conftest.py), after the data check
    kg = load_kg(f"text:musique:dev200:n=1:seed=0:{CAPS}", data_root=root, cache_dir=tmp_path / "cache", llm=llm)
    st, tables = kg.stats, kg.extra["text"]
    assert st["questions"] == 1 and st["chunks"] >= len(paragraphs) and st["llm_requests"] >= st["chunks"]
    # llm_calls counts only requests the cache could not answer: another real-model test may have filled it
    assert 0 <= st["llm_calls"] <= st["llm_requests"]
    assert st["entity_nodes"] > 0 and 0 < st["chunk_nodes"] <= st["chunks"]
    assert len(tables.ids("entity")) == st["entity_nodes"]
    assert st["unparsable_rate"] < 0.5  # schema-constrained decoding keeps most outputs parseable
    for t in range(kg.store.num_triples):
        assert kg.store.provenance_of_triple(t)[0].startswith("doc:")
