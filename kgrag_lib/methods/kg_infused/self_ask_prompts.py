"""Prompt of the Self-Ask plug-in baseline (KG-Infused RAG, Appendix D.3 Table 18), in our own words.

The paper's prompt carries an instruction block (one new follow-up per step, each built on
the answers so far, no repeated follow-up, stop once the answers suffice), a format template
and four few-shot demonstrations, then the question. We keep that structure and the output
labels Self-Ask is parsed by ("Follow up:", "Intermediate answer:", "So the final answer
is:"), with our own instruction wording and our own demonstrations.

The rendered text has no run-dependent parts: the same question and the same reasoning so
far always give byte-identical requests, so reruns and sweeps are served by the LLM cache.
"""

from __future__ import annotations

from typing import Sequence

FOLLOW_UP = "Follow up:"
INTERMEDIATE = "Intermediate answer:"
FINAL = "So the final answer is:"
NEEDED = "Are follow up questions needed here:"

INSTRUCTIONS = f"""Work out the answer to the question by asking and answering simpler questions, one at a time.
Rules:
1. Each step asks exactly one new follow-up question.
2. Every follow-up builds on what the earlier intermediate answers found.
3. Never ask a follow-up that was already asked, not even in other words.
4. As soon as the intermediate answers are enough, give the final answer.

Write each step as two lines:
{FOLLOW_UP} <one specific question that uses the latest answer>
{INTERMEDIATE} <the short fact that answers it>
Repeat such steps as needed, then end with:
{FINAL} <the answer to the original question alone, with no other words>"""

# Our own multi-hop demonstrations: a bridge question, a comparison and a yes/no comparison
# that needs four follow-ups (2WikiMultiHopQA's common shapes).
DEMONSTRATIONS = (
    ("In which city was the composer of the opera Carmen born?", (
        ("Who composed the opera Carmen?", "Carmen was composed by Georges Bizet."),
        ("In which city was Georges Bizet born?", "Georges Bizet was born in Paris."),
    ), "Paris"),
    ("Who was born first, Marie Curie or Albert Einstein?", (
        ("When was Marie Curie born?", "Marie Curie was born on 7 November 1867."),
        ("When was Albert Einstein born?", "Albert Einstein was born on 14 March 1879."),
    ), "Marie Curie"),
    ("Did the director of Rashomon and the director of Psycho come from the same country?", (
        ("Who directed Rashomon?", "Rashomon was directed by Akira Kurosawa."),
        ("Which country was Akira Kurosawa from?", "Japan."),
        ("Who directed Psycho?", "Psycho was directed by Alfred Hitchcock."),
        ("Which country was Alfred Hitchcock from?", "England, United Kingdom."),
    ), "No"),
)

SEPARATOR = "-----"


def render_steps(steps: Sequence[tuple[str, str]]) -> str:
    """The reasoning so far, one `Follow up:` / `Intermediate answer:` pair per step."""
    return "".join(f"{FOLLOW_UP} {q}\n{INTERMEDIATE} {a}\n" for q, a in steps)


def render_demo(question: str, steps: Sequence[tuple[str, str]], final: str) -> str:
    return f"Question: {question}\n{NEEDED} Yes.\n{render_steps(steps)}{FINAL} {final}"


DEMO_BLOCK = "\n\n".join(render_demo(q, s, a) for q, s, a in DEMONSTRATIONS)


def transcript(question: str, steps: Sequence[tuple[str, str]]) -> str:
    """The question and the reasoning so far, as the model continues it (no demonstrations)."""
    head = f"Question: {question}\n{NEEDED}"
    return head if not steps else f"{head} Yes.\n{render_steps(steps)}"


def self_ask_prompt(question: str, steps: Sequence[tuple[str, str]], force_final: bool = False) -> str:
    """The whole prompt: instructions, demonstrations, the question and the steps so far; with
    `force_final` it ends with the final-answer label so the model can only write the answer."""
    text = f"{INSTRUCTIONS}\n\n{SEPARATOR}\n\n{DEMO_BLOCK}\n\n{SEPARATOR}\n\n{transcript(question, steps)}"
    if force_final:
        text += FINAL if steps else f" Yes.\n{FINAL}"
    return text
