"""SA-RAG's extraction prompts against the paper's Listings 4 and 5 (per-type description rules,
one-shot demonstrations, in our words), the parser on outputs in the demonstrated format (whole
and cut off), and the extraction caps of `ExtractionConfig` enforced and counted, with the
scripted LLM of `test_text_index` (no model)."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from test_text_index import OUTPUTS, TAXI, ents, rels, scripted

from kgrag_lib.errors import ConfigError
from kgrag_lib.kg.extraction import normalize
from kgrag_lib.methods.sa_rag import prompts
from kgrag_lib.methods.sa_rag.extraction import (ExtractionConfig, build_text_kg, cap_entities, complete_items,
                                                 parse_entities, parse_relations)
from kgrag_lib.methods.sa_rag.prompts import (DEMO_ENTITIES, DEMO_FORBIDDEN, DEMO_RELATIONS, DEMO_TEXT,
                                              ENTITY_SCHEMA, RELATION_SCHEMA, entity_messages, relation_messages,
                                              render_items)
from kgrag_lib.records import Passage

ADA = Passage("ada", DEMO_TEXT.split("\n", 1)[1], "Ada Lovelace")


def _user(messages) -> str:
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


def _demo_answer(prompt: str) -> str:
    """The demonstration's answer as the prompt shows it: after the example's "Answer:" line."""
    return prompt.split("Answer:\n", 1)[1].split("\n\n", 1)[0]


# ---- the prompts ----------------------------------------------------------------------------------
def test_entity_prompt_renders_the_type_rules_and_its_demonstration_before_the_chunk():
    prompt = _user(entity_messages("Taxi!\n" + TAXI.text))
    for rule in ("- PERSON: a person.", "- ORGANIZATION: a company", "- GPE: a country, city", "- MISC: any other",
                 '"name" is the fullest official name', '"aliases" lists every other name',
                 "- PERSON: dates and places of birth and death, nationality, occupation, titles, achievements.",
                 "- ORGANIZATION: when it was founded and by whom, where its headquarters are",
                 "- GPE: what kind of place it is", "(\"birthplace of ...\", \"where ... died\"",
                 "- MISC: when it happened or was made, its size or scale",
                 "Use only what the text says"):
        assert rule in prompt, rule
    demo = "Example\nText:\n<<<\n" + DEMO_TEXT + "\n>>>\n\nAnswer:\n" + render_items("entities", DEMO_ENTITIES)
    assert demo in prompt and json.dumps(DEMO_FORBIDDEN) in prompt
    assert prompt.endswith("Now the real text.\nText:\n<<<\nTaxi!\n" + TAXI.text + "\n>>>\n\nAnswer:")
    assert prompt.index(demo) < prompt.index("Now the real text.")
    assert "Entities found in this text" not in prompt  # what tells a relation request apart


def test_relation_prompt_renders_its_rules_and_demonstration_before_the_chunk():
    prompt = _user(relation_messages("Taxi!\n" + TAXI.text, ["Taxi!", "Roy Del Ruth"]))
    for rule in ("Use only entities of the list, and write each name exactly as the list writes it",
                 "Use only relationships the text states", "Resolve pronouns", '"relation" a short label',
                 '"description" one sentence'):
        assert rule in prompt, rule
    listed = "\n".join(f"- {e['name']}" for e in DEMO_ENTITIES)
    demo = ("Example\nText:\n<<<\n" + DEMO_TEXT + "\n>>>\n\nEntities found in this text:\n" + listed
            + "\n\nAnswer:\n" + render_items("relations", DEMO_RELATIONS))
    assert demo in prompt
    assert prompt.endswith("Now the real text.\nText:\n<<<\nTaxi!\n" + TAXI.text
                           + "\n>>>\n\nEntities found in this text:\n- Taxi!\n- Roy Del Ruth\n\nAnswer:")


def test_prompts_hold_no_run_dependent_part():
    """Two chunks give requests that differ only in the chunk (and its entity list): the rules and the
    demonstration are constant bytes, so equal chunks give byte-identical, cacheable requests."""
    a, b = "Taxi!\n" + TAXI.text, "Other\nSomething else {with braces}."
    for make in (lambda t: entity_messages(t), lambda t: relation_messages(t, ["X", "Y"])):
        pa, pb = _user(make(a)), _user(make(b))
        head = pa[:pa.index("Now the real text.")]
        assert pb.startswith(head) and make(a) == make(a) and "{with braces}" in pb
        assert "{text}" not in pa and "{entities}" not in pa and "{{" not in pa
    assert entity_messages(a)[0] == relation_messages(a, ["X"])[0]  # one system turn


def test_demonstrations_are_our_own_passage_not_the_papers():
    for text in (_user(entity_messages("T\nx")), _user(relation_messages("T\nx", ["A", "B"]))):
        for paper_word in ("Tesla", "Westinghouse", "Smiljan", "Jack Parsons", "Pasadena", "Jet Propulsion"):
            assert paper_word not in text


# ---- the demonstrations follow their own rules, fit the caps, and parse ---------------------------------
def test_demonstrated_outputs_parse_validate_and_fit_the_caps():
    jsonschema = pytest.importorskip("jsonschema")
    entity_answer = _demo_answer(_user(entity_messages("T\nx")))
    relation_answer = _demo_answer(_user(relation_messages("T\nx", ["A", "B"])))
    jsonschema.validate(json.loads(entity_answer), json.loads(ENTITY_SCHEMA))
    jsonschema.validate(json.loads(relation_answer), json.loads(RELATION_SCHEMA))
    assert parse_entities(entity_answer) == (DEMO_ENTITIES, 0)
    assert parse_relations(relation_answer) == (DEMO_RELATIONS, 0)
    assert {e["type"] for e in DEMO_ENTITIES} == set(prompts.ENTITY_TYPES)  # every type shown
    assert cap_entities(DEMO_ENTITIES, ExtractionConfig(), DEMO_TEXT) == (DEMO_ENTITIES, dict.fromkeys(
        ("entities", "aliases", "relations", "strings"), 0), 0)
    names = {e["name"] for e in DEMO_ENTITIES}
    assert all(r["source"] in names and r["target"] in names for r in DEMO_RELATIONS)
    text = normalize(DEMO_TEXT)
    assert all(normalize(f) in text for e in DEMO_ENTITIES for f in (e["name"], *e["aliases"]))
    # the GPE rule: places described in general terms; the forbidden example breaks it
    people = [e["name"] for e in DEMO_ENTITIES if e["type"] == "PERSON"] + ["Ada Lovelace"]
    places = [e for e in DEMO_ENTITIES if e["type"] == "GPE"]
    assert places and not any(p in e["description"] for e in places for p in people)
    assert DEMO_FORBIDDEN["type"] == "GPE" and "Ada Lovelace" in DEMO_FORBIDDEN["description"]
    # pronoun resolution is demonstrated: "names its Lovelace Medal after her" -> Ada by name
    assert "after her" in DEMO_TEXT and any(r["relation"] == "named after" and r["target"] == DEMO_ENTITIES[0]["name"]
                                            for r in DEMO_RELATIONS)


def test_a_cut_off_output_in_the_demonstrated_format_keeps_its_complete_items(tmp_path):
    """One item per line, as demonstrated, cut inside the fifth: the first four are kept, without a
    repair request; the relation call then runs on them."""
    full = render_items("entities", DEMO_ENTITIES)
    cut = full[:full.index('{"name": "Analytical Engine"') + 20]
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_entities(cut)
    assert parse_entities(complete_items(cut, "entities"))[0] == DEMO_ENTITIES[:4]
    rel_full = render_items("relations", DEMO_RELATIONS[:3])
    rel_cut = rel_full[:-10]
    assert parse_relations(complete_items(rel_cut, "relations"))[0] == DEMO_RELATIONS[:2]
    llm = scripted({("Ada Lovelace", "entities"): cut, ("Ada Lovelace", "relations"): rel_cut})
    store, stats, kg = build_text_kg([ADA], llm, tmp_path / "j.jsonl", show_progress=False)
    assert [r.messages[-1]["content"].count("Entities found in this text") for r in llm.requests] == [0, 2]
    assert "- London\n- England\n- Lord Byron\n\nAnswer:" in llm.requests[1].prompt
    assert (stats["cut_off_outputs_salvaged"], stats["repairs_attempted"], stats["unparsable_outputs"]) == (2, 0, 0)
    assert sorted(store.entity_name(int(i)) for i in kg.ids("entity")) == sorted(
        e["name"] for e in DEMO_ENTITIES[:4])
    assert stats["related_to_triples"] == 2 and stats["dropped_relations"] == 0
    assert len(stats["request_ids"]) == stats["llm_requests"] == 2   # entities then relations: their ids price the build


# ---- the caps ---------------------------------------------------------------------------------------
def test_every_extraction_setting_has_a_help_string_and_is_checked():
    for f in fields(ExtractionConfig):
        assert f.metadata.get("help"), f.name
    assert set(ExtractionConfig().caps()) == {"max_tokens", "max_entities", "max_aliases", "max_relations",
                                              "max_name_chars", "max_label_chars", "max_description_chars"}
    cfg = ExtractionConfig()
    assert cfg.entity_schema() == ENTITY_SCHEMA and cfg.relation_schema() == RELATION_SCHEMA
    for bad, match in [({"max_entities": 0}, "max_entities"), ({"max_name_chars": 0}, "max_name_chars"),
                       ({"overlap": 500}, "overlap.*chunk_size=500"), ({"max_relations": -1}, "max_relations")]:
        with pytest.raises(ConfigError, match=match):
            ExtractionConfig(**bad)


def test_caps_are_sent_as_the_schema_enforced_on_an_unconstrained_output_and_counted(tmp_path):
    """A backend without constrained decoding can answer past the caps: the parser keeps what the
    schema would have allowed (list items in order, strings cut) and counts what it dropped; the
    requests carry the caps in their schema, the stats the caps themselves."""
    cfg = ExtractionConfig(max_entities=3, max_aliases=1, max_relations=2, max_name_chars=12, max_label_chars=6,
                           max_description_chars=20)
    outputs = {
        ("Taxi!", "entities"): ents(("Taxi!", "MISC", ["Taxi", "Taxi film", "T!"], "A 1932 American film by Roy Del Ruth."),
                                    ("Roy Del Ruth", "PERSON", [], "Director."),
                                    ("James Cagney", "PERSON", ["Cagney"], "Actor."),
                                    ("Warner Bros.", "ORGANIZATION", [], "Studio."),
                                    ("1932", "MISC", [], "A year.")),
        ("Taxi!", "relations"): rels(("Taxi!", "directed by", "Roy Del Ruth", "Taxi! was directed by Roy Del Ruth."),
                                     ("Taxi!", "stars", "James Cagney", "Cagney stars."),
                                     ("Roy Del Ruth", "directed", "James Cagney", "He directed him.")),
    }
    llm = scripted(outputs)
    store, stats, kg = build_text_kg([TAXI], llm, tmp_path / "j.jsonl", config=cfg, show_progress=False)
    entity_schema = json.loads(llm.requests[0].params.json_schema)["properties"]["entities"]
    assert entity_schema["maxItems"] == 3 and entity_schema["items"]["properties"]["aliases"]["maxItems"] == 1
    assert entity_schema["items"]["properties"]["description"]["maxLength"] == 20
    relation_schema = json.loads(llm.requests[1].params.json_schema)["properties"]["relations"]
    assert relation_schema["maxItems"] == 2 and relation_schema["items"]["properties"]["relation"]["maxLength"] == 6
    assert "- Taxi!\n- Roy Del Ruth\n- James Cagney\n\nAnswer:" in llm.requests[1].prompt  # 3 of 5 entities asked
    record = json.loads((tmp_path / "j.jsonl").read_text(encoding="utf-8"))
    assert record["entities"][0] == {"name": "Taxi!", "type": "MISC", "aliases": ["Taxi"],
                                     "description": "A 1932 American film"}
    assert [r["relation"] for r in record["relations"]] == ["direct", "stars"]  # "directed by" cut at 6
    assert record["relations"][0]["description"] == "Taxi! was directed b"
    assert {k: stats[k] for k in ("entities_over_cap", "aliases_over_cap", "relations_over_cap", "strings_cut",
                                  "entity_outputs_at_cap", "relation_outputs_at_cap", "demo_entities_dropped")} == {
        "entities_over_cap": 2, "aliases_over_cap": 2, "relations_over_cap": 1,
        "strings_cut": 3,  # the Taxi! description, relation 1's label and description
        "entity_outputs_at_cap": 1, "relation_outputs_at_cap": 1, "demo_entities_dropped": 0}
    assert stats["caps"] == cfg.caps() and stats["related_to_triples"] == 2
    assert store.find_entity("Warner Bros.") is None


def test_within_the_caps_nothing_is_counted(tmp_path):
    _, stats, _ = build_text_kg([TAXI], scripted(OUTPUTS), tmp_path / "j.jsonl", show_progress=False)
    assert stats["caps"] == ExtractionConfig().caps()
    assert all(stats[k] == 0 for k in ("entities_over_cap", "aliases_over_cap", "relations_over_cap", "strings_cut",
                                       "entity_outputs_at_cap", "relation_outputs_at_cap", "demo_entities_dropped"))


def test_an_entity_copied_from_the_demonstration_is_dropped_and_counted(tmp_path):
    """A small model may repeat the demonstration's entities: a demonstration name the chunk does not
    contain is dropped (counted); the same name in a chunk that has it is kept."""
    london = Passage("ldn", "Taxi! was shown in London in 1932.", "Taxi! abroad")
    outputs = {("Taxi!", "entities"): ents(("Taxi!", "MISC", [], "A film."),
                                           ("Charles Babbage", "PERSON", [], "Person who proposed the Analytical Engine."),
                                           ("Ada", "PERSON", ["Ada Lovelace"], "Mathematician.")),
               ("Taxi!", "relations"): rels(),
               ("Taxi! abroad", "entities"): ents(("London", "GPE", [], "City in England."),
                                                  ("Taxi!", "MISC", [], "A film.")),
               ("Taxi! abroad", "relations"): rels(("Taxi!", "shown in", "London", "Taxi! was shown in London."))}
    llm = scripted(outputs)
    store, stats, _ = build_text_kg([TAXI, london], llm, tmp_path / "j.jsonl", show_progress=False)
    assert stats["demo_entities_dropped"] == 1  # Babbage; "Ada" is no demonstration name and stays
    assert store.find_entity("Charles Babbage") is None and store.find_entity("London") is not None
    assert store.find_entity("Ada") is not None
