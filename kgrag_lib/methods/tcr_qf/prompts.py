"""TCR-QF's prompts in our own words: the reasoning prompt and the missing-knowledge prompt of the
paper's appendix, the ToG beam-search prompts its retrieval builds on (Sun et al.: relation
pruning, entity scoring, a sufficiency check), and the LLM-only and CoT baselines.

Inputs and output formats follow the papers: triples written `<h | r | t>`, restored sentences
under "Related Text", a reasoning section then a line "Final Answer: <short phrase>", missing
knowledge as one atomic question per line. The ToG stages answer in JSON constrained to a
schema whose enums are the candidates, so a small model can only pick what exists; as in ToG,
they ask for scores that add up to 1 over the candidates (`search` normalises what comes back).

Missing knowledge (§3.4, appendix "Missing Knowledge Identification Prompt"): the paper's inputs
(the contextual information, Triples and Related Text, and the question in quotes), its
instructions (ask only for what the context lacks; besides the facts asked for, also the
background, definitions, conditions or clarifications that make the answer complete; one
atomic question each; no repeats), three worked examples of the same kinds as the paper's three (a prize,
an orbit, a founding) on our own subjects (Photo 51, Mount Everest, the Eiffel Tower)
and its output (questions, one per line, nothing else). Two differences, both stated in
DEVIATIONS: a model that finds nothing missing may write NONE (the paper stops when ΔK = ∅ but
its prompt gives no way to say so, and a small model never writes an empty answer), and the
questions kept per round are capped when parsed (`max_missing`; the paper sets no cap). §3.4's
formula also lists the current answer among IdentifyMissing's inputs; the appendix prompt has
no slot for it, and we follow the prompt.

KG enrichment (§3.4, appendix "Knowledge Graph Enrichment Prompt"): Existing Triples, the
Sub-questions and the Related Sentences in, EID records out, with the paper's rules (new facts
only, each backed by the text, no inference, no repeated relation, existing entities may be
listed again) and a worked example of the paper's kind (a shared prize) on our own subject (Alexander Fleming). The paper fills
Existing Triples from the same contextual information the missing-knowledge step saw; ours are
the triples of the round's retrieved subgraph, at most `MAX_EXISTING_TRIPLES` (30) of them in
search order: the paper sets no cap, and ToG keeps at most width x depth triples (9 at its
defaults), so the cap binds only for a wider or deeper search, where it bounds the prompt.
One call per missing question (§3.4's ExtractTriples(k_q, D_relevant)), so Sub-questions holds
one question.

KG extraction (§3.1, appendix "Triples Extraction Prompt"; read by `records.parse_records`):
bracketed records, entities first, then relations between registered entity ids, each relation
with a quote. The rules are our own wording of the appendix's (sequential EIDs from E1, exact
names, no pronouns as entities, specific natural types, relations only between listed EIDs,
each backed by an exact quote). The same rules serve the feedback extraction of §3.4 and
TCR-AF's answer extraction. `GRAMMAR` constrains decoding to the format where the backend can
(llama.cpp); its bounds stop a small model's loops. Any change to the bytes of the chunk
extraction (`_RECORDS_SYSTEM`, `_RULES`, `_EXTRACT_TASK`, `GRAMMAR`) must bump
`RECORDS_PROMPT_VERSION`, which names the KG build folder.
"""

from __future__ import annotations

import json
import re
from typing import Sequence

from ...llm.base import Messages

PROMPT_VERSION = "tcrq2"
# "Final Answer: X", also as small models write it ("the final answer is: X"): the line the prompt asks
# for, in other words; an output with neither still fails the parse (and says so in its issues).
FINAL = re.compile(r"final answer(?:\s+is)?\s*[:：]\s*(.+)", re.IGNORECASE)
# When that line is missing, two weaker forms the 0.5B model writes instead (113 and 31 of the 327
# committed TCR-QF-family answer outputs): a closing sentence "the answer (to the question "...") is
# [:] X", and a reply that opens with a bare yes or no ("No, the directors ..."). `read_answer` tries
# them in this order and names the form it read, so a run counts how often each was needed.
ANSWER_SENTENCE = re.compile(
    r"\banswer(?:\s+to\s+(?:the|this|your)\s+question(?:\s*(?:\"[^\"\n]*\"|\u201c[^\u201d\n]*\u201d))?)?"
    r"\s*,?\s+(?:is|would be|will be)\s*[:：]?\s*(.+)", re.IGNORECASE)
LEADING_YES_NO = re.compile(r"^[\s*_\"']*(yes|no)\b(?=[\s*_\"']*(?:[,.;:!]|$))", re.IGNORECASE)
# The answer line's own placeholder, which a small model sometimes copies instead of answering.
PLACEHOLDER = "a short phrase"
FORMS = ("Final Answer line", "'the answer is' sentence", "leading yes/no")

_SYSTEM = "You answer questions by careful reasoning over the information you are given."

_REASON = """Answer the question by reasoning step by step over the contextual information below.
Use the contextual information first; if it is not enough, you may use what you know yourself,
and say so in that step. Write:

Reasoning Process:
- one short numbered step per line, each saying whether it uses the context or your own knowledge

Final Answer: a short phrase (a name, a date, a number, yes or no), without explanation

Contextual Information:
{context}

Question: {question}

Output:"""

_DIRECT = """Answer the question with a short phrase (a name, a date, a number, yes or no), without
explanation, on one line that starts with "Final Answer:".

Question: {question}"""

_COT = """Think about the question step by step, one short step per line, then write the answer as a
short phrase (a name, a date, a number, yes or no) on a last line that starts with "Final Answer:".

Question: {question}

Reasoning Process:"""

_MISSING = """Read the contextual information and the question below. Work out which pieces of
information are still missing but needed, or useful, to answer the question fully, correctly
and in context, and write each one as a separate, self-contained question.

- Go through the Triples and the Related Text first, and ask only about what they do not
  already state.
- Besides the facts the question asks for directly, think of what would make the answer more
  complete: related details, background, definitions, conditions, how something came about,
  clarifications.
- Each question asks about exactly one fact, attribute or relation, and can be understood on
  its own; split a need for several facts into several questions.
- Do not repeat a question, and do not ask about anything the contextual information gives.
- Write only the questions, one per line: no numbering, no explanation, nothing else. If
  nothing at all is missing, write only: NONE

Example 1
Contextual Information:
Triples:
<Rosalind Franklin | born in | London>
<Rosalind Franklin | worked at | King's College London>
<Rosalind Franklin | field | X-ray crystallography>
<Photo 51 | taken by | Raymond Gosling>

Question: "What did Photo 51 reveal, and what was Rosalind Franklin's part in it?"

Output:
What structure did Photo 51 reveal?
Who supervised the work that produced Photo 51?
When was Photo 51 taken?
How was Photo 51 used by other researchers of DNA's structure?

Example 2
Contextual Information:
Triples:
<Mount Everest | located in | Himalayas>
<Himalayas | spans | Nepal>

Question: "How high is Mount Everest, and who first reached its summit?"

Output:
What is the elevation of Mount Everest above sea level?
Who were the first climbers to reach the summit of Mount Everest?
In what year was the summit of Mount Everest first reached?
By which route was the summit of Mount Everest first reached?

Example 3
Contextual Information:
Triples:
<Eiffel Tower | located in | Paris>
<Eiffel Tower | named after | Gustave Eiffel>

Question: "When was the Eiffel Tower built, and who designed it?"

Output:
In what years was the Eiffel Tower built?
Who drew the first design of the Eiffel Tower?
For what event was the Eiffel Tower built?
What company built the Eiffel Tower?

Now the real data.
Contextual Information:
{context}

Question: "{question}"

Output:"""

_RELATIONS = """We are exploring a knowledge graph to answer a question. We are at the entity
"{entity}". Choose at most {width} of its relations below that are most likely to lead to the
answer, and give each a score between 0 and 1 (higher = more useful), the scores of the
relations you choose adding up to 1.

Question: {question}

Relations of "{entity}":
{relations}

Answer with JSON: {{"relations": [{{"relation": "...", "score": 0.5}}]}}"""

_ENTITIES = """We are exploring a knowledge graph to answer a question. Following the relation
"{relation}" from "{entity}" leads to the entities below. Give each a score between 0 and 1 for
how likely it helps answer the question, the scores of all the entities adding up to 1.

Question: {question}

Entities:
{entities}

Answer with JSON: {{"entities": [{{"entity": "...", "score": 0.5}}]}}"""

_ENOUGH = """Here are facts from a knowledge graph. Are they enough to answer the question? Answer
with JSON: {{"enough": true}} or {{"enough": false}}.

Facts:
{facts}

Question: {question}"""

ENOUGH_SCHEMA = json.dumps({"type": "object", "properties": {"enough": {"type": "boolean"}}, "required": ["enough"]},
                           separators=(",", ":"))


def choice_schema(key: str, item: str, options: list[str], max_items: int) -> str:
    """A JSON schema: a list of at most `max_items` {item: one of options, score: number}."""
    return json.dumps({"type": "object", "properties": {key: {
        "type": "array", "maxItems": max_items, "items": {
            "type": "object", "properties": {item: {"type": "string", "enum": options}, "score": {"type": "number"}},
            "required": [item, "score"]}}}, "required": [key]}, separators=(",", ":"))


def format_context(triples: list[tuple[str, str, str]], sentences: list[str], passages: list[str] = ()) -> str:
    """The paper's contextual information: "Triples:" then "Related Text:" (restored sentences, or
    retrieved passages for text baselines)."""
    parts = []
    if triples:
        parts.append("Triples:\n" + "\n".join(f"<{h} | {r} | {t}>" for h, r, t in triples))
    text = [s for s in dict.fromkeys(sentences) if s] + list(passages)
    if text:
        parts.append("Related Text:\n" + "\n".join(text))
    return "\n\n".join(parts) if parts else "(none)"


def _chat(text: str) -> Messages:
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": text}]


def reasoning_messages(question: str, context: str) -> Messages:
    return _chat(_REASON.format(context=context, question=question))


def direct_messages(question: str) -> Messages:
    return _chat(_DIRECT.format(question=question))


def cot_messages(question: str) -> Messages:
    return _chat(_COT.format(question=question))


def missing_messages(question: str, context: str) -> Messages:
    """IdentifyMissing (§3.4): the contextual information and the question, as the appendix's
    prompt takes them (see the module doc)."""
    return _chat(_MISSING.format(question=question, context=context))


def relation_messages(question: str, entity: str, relations: list[str], width: int) -> Messages:
    return _chat(_RELATIONS.format(question=question, entity=entity, width=width,
                                   relations="\n".join(f"- {r}" for r in relations)))


def entity_messages(question: str, entity: str, relation: str, entities: list[str]) -> Messages:
    return _chat(_ENTITIES.format(question=question, entity=entity, relation=relation,
                                  entities="\n".join(f"- {e}" for e in entities)))


def enough_messages(question: str, facts: list[tuple[str, str, str]]) -> Messages:
    return _chat(_ENOUGH.format(question=question, facts="\n".join(f"<{h} | {r} | {t}>" for h, r, t in facts)))


def _clean(found: str) -> str | None:
    ans = found.strip(" *_").rstrip(".").strip(" *_\"'")
    return None if not ans or ans.lower().startswith(PLACEHOLDER) else ans


def final_answer(text: str) -> str | None:
    """The phrase after the last "Final Answer:" (None when the output has none)."""
    found = FINAL.findall(text or "")
    return _clean(found[-1]) if found else None


def read_answer(text: str) -> tuple[str | None, str | None]:
    """(answer, form): the answer line the prompt asks for, else the last "the answer ... is X"
    sentence, else a leading yes/no, with which of `FORMS` it came from; (None, None) when the
    output has none of them (a reasoning cut off by the token budget, usually)."""
    ans = final_answer(text)
    if ans is not None:
        return ans, FORMS[0]
    found = ANSWER_SENTENCE.findall(text or "")
    if found and (ans := _clean(found[-1])) is not None:
        return ans, FORMS[1]
    first = next((line for line in (text or "").splitlines() if line.strip()), "")
    if m := LEADING_YES_NO.match(first):
        return m.group(1).lower(), FORMS[2]
    return None, None


def missing_questions(text: str, limit: int) -> list[str]:
    """The missing-knowledge questions of an output: one per line, NONE -> []; bullets and numbers
    stripped, lines without a question mark or shorter than three words dropped, repeats kept once."""
    out: list[str] = []
    for line in (text or "").splitlines():
        q = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip()
        if not q or q.upper().startswith("NONE"):
            continue
        if "?" in q and len(q.split()) >= 3 and q not in out:
            out.append(q)
    return out[:limit]


# Existing Triples shown to one KG-enrichment call at most (see the module doc).
MAX_EXISTING_TRIPLES = 30

# ---- KG extraction records (§3.1, §3.4) ------------------------------------------------------
RECORDS_PROMPT_VERSION = "tcr2"
MAX_RECORD_ENTITIES, MAX_RECORD_RELATIONS = 12, 15

# GBNF: at least one entity, then relations; every field bounded (names 60, descriptions 120,
# relation labels 40, quotes 160 characters), so a looping model ends with valid records. Tight on
# purpose: the 0.5B model fills every list to its bound, and grammar sampling over Qwen's 151k-token
# vocabulary runs at about 11 tokens/s on 2 cores (a 1,024-token output took ~95 s).
GRAMMAR = r'''
root ::= entity{1,%d} relation{0,%d}
entity ::= "[entity | E" num " | " type " | \"" name "\" | " desc "]\n"
relation ::= "[relation | E" num " | " label " | E" num " | \"" quote "\"]\n"
num ::= [1-9] [0-9]{0,1}
type ::= [A-Za-z] [A-Za-z ]{0,29}
name ::= [^"\n|\]\[]{1,60}
desc ::= [^\n|\]\[]{1,120}
label ::= [^\n|\]\["]{1,40}
quote ::= [^"\n\]\[]{1,160}
''' % (MAX_RECORD_ENTITIES, MAX_RECORD_RELATIONS)

_RECORDS_SYSTEM = ("You build knowledge graphs from text. You copy names exactly as the text writes them, invent "
           "nothing, and answer only with records in the format you are given.")

_RULES = """Write the entities first, one record per line:
[entity | EID | Type | "Entity Name" | Description]
- number the entities E1, E2, E3, ... in order, with no gaps and no repeats
- copy each name exactly as the text writes it (same capitals); when the text refers to one
  entity in several ways, write one record for it; never use a pronoun or a phrase like
  "the film" as a name
- Type is a specific, natural category (for example Person, Film, City, Football Club,
  Political Party, Year, Award), not a code like PRODUCT
- Description says in a few words what the entity is and what role it plays in the text

Then the relations, one record per line:
[relation | SourceEID | relation type | TargetEID | "exact quote"]
- SourceEID and TargetEID must be EIDs you listed above; never make up a new EID here
- the relation type is a short phrase such as "directed by" or "born in"
- the quote is the exact words of the text that state the relation
- write only relations the text states directly

Write nothing but these records."""

_EXTRACT_TASK = """{rules}

Text:
\"{text}\"

Records:"""

_FEEDBACK_TASK = """Add to a knowledge graph the facts it still lacks. You are given the triples it
already holds (Existing Triples), the questions whose answers are missing (Sub-questions) and
passages that may hold those answers (Related Sentences). Extract, as records, every fact of
the Related Sentences that answers a Sub-question or gives useful context for it, and that
the Existing Triples do not already hold.

- read the Sub-questions first: what do they ask, and what would help answer them?
- take facts only from the Related Sentences, each backed by words of the text; do not infer,
  widen or combine facts beyond what the text states or plainly implies
- leave out a fact the Existing Triples already hold, and never write the same relation twice
- an entity may be listed again (also one of the Existing Triples) when a new relation needs it
- a sentence that gives several useful facts gives one relation per fact

{rules}

Example
Existing Triples:
<Alexander Fleming | discovered | penicillin>
<Alexander Fleming | won Nobel Prize in | 1945>

Sub-questions:
For which discovery did Alexander Fleming win his Nobel Prize?
With whom did Alexander Fleming share the 1945 Nobel Prize in Physiology or Medicine?

Related Sentences:
[1] Penicillin
Alexander Fleming shared the 1945 Nobel Prize in Physiology or Medicine with Howard Florey and Ernst Chain.

Records:
[entity | E1 | Person | "Alexander Fleming" | bacteriologist]
[entity | E2 | Person | "Howard Florey" | pharmacologist]
[entity | E3 | Person | "Ernst Chain" | biochemist]
[relation | E1 | was co-laureate of | E2 | "shared the 1945 Nobel Prize in Physiology or Medicine with Howard Florey"]
[relation | E1 | was co-laureate of | E3 | "shared the 1945 Nobel Prize in Physiology or Medicine with Howard Florey and Ernst Chain"]

Now the real data.
Existing Triples:
{existing}

Sub-questions:
{need}

Related Sentences:
{passages}

Records:"""

_ANSWER_TASK = """Below is an answer a model wrote to the question "{question}". Extract, as records,
the entities and relations the answer states (whether or not they are true).

{rules}

Answer:
\"{answer}\"

Records:"""


def extraction_messages(text: str) -> Messages:
    """ExtractTriples(C_i): the records of one chunk (§3.1)."""
    return [{"role": "system", "content": _RECORDS_SYSTEM},
            {"role": "user", "content": _EXTRACT_TASK.format(rules=_RULES, text=text)}]


def feedback_messages(need: str, passages: list[str], existing: Sequence[tuple[str, str, str]] = (),
                      max_existing: int | None = None) -> Messages:
    """ExtractTriples(k_q, D_relevant) (§3.4): records that answer one missing-knowledge question,
    given the triples already known: the first `max_existing` (default `MAX_EXISTING_TRIPLES`) of
    `existing`, in their order; "(none)" when there are none."""
    shown = "\n\n".join(f"[{i}] {p}" for i, p in enumerate(passages, 1))
    cap = MAX_EXISTING_TRIPLES if max_existing is None else max(0, int(max_existing))
    known = "\n".join(f"<{h} | {r} | {t}>" for h, r, t in list(existing)[:cap]) or "(none)"
    return [{"role": "system", "content": _RECORDS_SYSTEM},
            {"role": "user", "content": _FEEDBACK_TASK.format(need=need, rules=_RULES, passages=shown,
                                                             existing=known)}]


def answer_messages(question: str, answer: str) -> Messages:
    """TCR-AF's extraction: records stated by the model's own answer (§4.2, answer-driven feedback)."""
    return [{"role": "system", "content": _RECORDS_SYSTEM},
            {"role": "user", "content": _ANSWER_TASK.format(question=question, answer=answer, rules=_RULES)}]
