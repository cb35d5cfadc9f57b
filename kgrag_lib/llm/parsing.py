"""Tolerant readers for what small models actually write.

A 0.5B model asked for JSON wraps it in code fences, adds trailing commas, uses single
quotes or Python literals, or runs out of tokens half-way. These helpers recover the
structure when it is there and return None / [] when it is not, so a method can record a
parse failure (`LLMParseError`) instead of crashing.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from ..errors import KgragError
from ..records import Triple


class LLMParseError(KgragError, ValueError):
    """Model output a method could not use; carries the raw text for the trace."""

    def __init__(self, message: str, text: str = ""):
        self.text = text
        shown = text if len(text) <= 200 else text[:197] + "..."
        super().__init__(f"{message}; model output: {shown!r}" if text else message)


_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)(```|$)", re.S)
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def strip_think(text: str) -> str:
    """Drop `<think>...</think>` reasoning blocks (reasoning models)."""
    return _THINK.sub("", text or "")


def _fenced_blocks(text: str) -> list[str]:
    return [m.group(2) for m in _FENCE.finditer(text) if m.group(2).strip()]


# ---- JSON ---------------------------------------------------------------------------
def parse_json(text: str) -> Any | None:
    """The first JSON object or array in `text` (as dict/list), repairing common damage:
    code fences, prose around it, trailing commas, single quotes, Python True/False/None,
    unquoted keys, smart quotes and truncation (open brackets are closed). None if nothing
    usable is found. Bare scalars are not returned: callers ask for structure.

    Kept instead of `json_repair.loads` (bench/library_bench.py): on the 8,318 cached model
    answers of results/reference it gives another value for 177 (it keeps a key cut off before
    its value as "", reads "[1] ..." citation markers in prose as a list), which would change the
    KGs and answers the reference replays; and it is 3x slower (537 ms against 178 ms for all)."""
    text = strip_think(text).translate(_SMART)
    for candidate in _fenced_blocks(text) + [text]:
        stripped = candidate.strip()
        try:
            value = json.loads(stripped, strict=False)
            if isinstance(value, (dict, list)):
                return value
        except ValueError:
            pass
        starts = [i for i, c in enumerate(stripped) if c in "{["][:20]
        for start in starts:
            value = _parse_from(stripped, start)
            if value is not None:
                return value
    return None


def _parse_from(s: str, start: int) -> dict | list | None:
    normalized, complete = _normalize(s, start)
    attempts = [normalized] if complete else [_close(normalized), _close(_drop_partial(normalized))]
    for attempt in attempts:
        try:
            value = json.loads(attempt, strict=False)
        except ValueError:
            continue
        if isinstance(value, (dict, list)) and (complete or value):
            return value  # a truncated value must have kept at least one element
    if complete:
        try:  # Python-literal syntax the normalizer could not fix (e.g. tuples)
            value = ast.literal_eval(s[start: start + _span_len(s, start)])
            if isinstance(value, (dict, list)):
                return value
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return None


_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}


def _normalize(s: str, start: int) -> tuple[str, bool]:
    """Rewrite the bracketed value starting at `start` into strict JSON, one token at a time.
    Returns (text, complete) where complete means the outer bracket was closed."""
    out: list[str] = []
    stack: list[str] = []
    i, n = start, len(s)
    while i < n:
        c = s[i]
        if c in "\"'":
            j, buf = i + 1, []
            while j < n and s[j] != c:
                if s[j] == "\\" and j + 1 < n:
                    esc = s[j + 1]
                    buf.append("'" if esc == "'" else s[j: j + 2])
                    j += 2
                    continue
                buf.append('\\"' if (s[j] == '"' and c == "'") else s[j])
                j += 1
            out.append('"' + "".join(buf) + ('"' if j < n else ""))
            if j >= n:
                return "".join(out), False
            i = j + 1
            continue
        if c in "{[":
            stack.append("}" if c == "{" else "]")
            out.append(c)
        elif c in "}]":
            while out and out[-1].strip() == "":
                out.pop()
            if out and out[-1] == ",":
                out.pop()  # trailing comma
            if stack:
                stack.pop()
            out.append(c)
            if not stack:
                return "".join(out), True
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (s[j].isalnum() or s[j] in "_-"):
                j += 1
            word = s[i:j]
            k = j
            while k < n and s[k] in " \t":
                k += 1
            if stack and stack[-1] == "}" and k < n and s[k] == ":":
                out.append(json.dumps(word))  # unquoted key
            else:
                out.append(_PY_LITERALS.get(word, word))
            i = j
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out), False


def _drop_partial(s: str) -> str:
    """Cut a truncated value back to its last complete element."""
    cut = s.rfind(",")
    return s[:cut] if cut > 0 else s


def _close(s: str) -> str:
    """Close an open string and every open bracket of (already normalized) JSON text."""
    stack: list[str] = []
    in_str = esc = False
    for c in s:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]" and stack:
            stack.pop()
    s = s + ('"' if in_str else "")
    s = re.sub(r"[,:\s]+$", "", s)
    if stack and stack[-1] == "}":
        # A key left without its value (`{"a": 1, "b"`): drop it.
        cut = max(s.rfind("{"), s.rfind(","))
        tail = s[cut + 1:]
        if ":" not in tail and tail.strip().startswith('"'):
            s = s[:cut] if s[cut] == "," else s[: cut + 1]
    return s + "".join(reversed(stack))


def _span_len(s: str, start: int) -> int:
    depth = 0
    quote = ""
    for k in range(start, len(s)):
        c = s[k]
        if quote:
            if c == "\\":
                continue
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
            if depth == 0:
                return k - start + 1
    return len(s) - start


# ---- lists --------------------------------------------------------------------------
_BULLET = re.compile(r"^\s*(?:[-*\u2022\u00b7+>]|\(?\d{1,3}[.):]|\(?[a-zA-Z][.)](?=\s)|step\s*\d+[.:)])\s*", re.I)
_EDGE_PUNCT = " \t\"'`*_,;"


def _clean_item(item: str) -> str:
    item = item.strip().strip(_EDGE_PUNCT).strip()
    if item.endswith(".") and not re.search(r"\b[A-Z]\.$|\.\.\.$", item):
        item = item[:-1].rstrip()
    return item.strip(_EDGE_PUNCT).strip()


def parse_list(text: str) -> list[str]:
    """Items of a JSON array, a numbered or bulleted list, one item per line, or a single
    comma/semicolon separated line. Preamble lines ending in ':' and prose around a bulleted
    list are dropped. Order is kept; duplicates are kept."""
    text = strip_think(text).translate(_SMART)
    body = _fenced_blocks(text)
    core = (body[0] if body else text).strip()
    if core.startswith("[") or core.startswith("{"):
        value = parse_json(core)
        if isinstance(value, dict) and len(value) == 1:
            value = next(iter(value.values()))
        if isinstance(value, list):
            items = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value]
            return [c for c in (_clean_item(x) for x in items) if c]
    lines = [ln for ln in core.splitlines() if ln.strip() and not ln.strip().startswith("```")]
    bulleted = [ln for ln in lines if _BULLET.match(ln)]
    if bulleted:
        items = [_BULLET.sub("", ln, count=1) for ln in bulleted]
    else:
        items = [ln for ln in lines if not ln.rstrip().endswith(":")]
        if len(items) == 1:
            one = items[0]
            if ":" in one and not one.rstrip().endswith(":"):
                head, tail = one.split(":", 1)
                if len(head.split()) <= 4 and ("," in tail or ";" in tail):
                    one = tail  # "Entities: a, b, c"
            sep = ";" if ";" in one else ","
            items = one.split(sep) if sep in one else [one]
    return [c for c in (_clean_item(x) for x in items) if c]


# ---- triples ------------------------------------------------------------------------
_ANGLE = re.compile(r"<\s*([^<>|\n]+?)\s*\|\s*([^<>|\n]+?)\s*\|\s*([^<>\n]+?)\s*>")
_PAREN = re.compile(r"[(\[]([^()\[\]\n]+)[)\]]")
_HEADER = {"subject", "relation", "object", "head", "tail", "predicate", "entity", "s", "r", "o"}


def _split_fields(body: str, sep: str) -> list[str]:
    quoted = re.findall(r'"([^"]*)"|\'([^\']*)\'', body)
    if len(quoted) == 3 and sep == ",":
        return [a or b for a, b in quoted]
    return [p for p in body.split(sep)]


def _make_triple(parts: list[str]) -> Triple | None:
    parts = [_clean_item(_BULLET.sub("", p, count=1) if k == 0 else p) for k, p in enumerate(parts)]
    if len(parts) != 3 or not all(parts):
        return None
    if all(p.lower() in _HEADER for p in parts):
        return None
    return Triple(*parts)


def parse_triples(text: str) -> list[Triple]:
    """Triples written as `<s | r | o>`, `(s, r, o)`, `[s, r, o]`, `s | r | o` lines,
    `s -> r -> o` lines, or a JSON list of 3-lists / {subject, relation, object} dicts.
    Markdown table header rows are skipped. Duplicates are removed, order kept."""
    text = strip_think(text).translate(_SMART)
    found: list[Triple] = []
    value = parse_json(text)
    if isinstance(value, dict):
        value = next((v for v in value.values() if isinstance(v, list)), None)
    if isinstance(value, list) and value and all(isinstance(v, (list, dict)) for v in value):
        for v in value:
            if isinstance(v, dict):
                low = {str(k).lower(): v[k] for k in v}
                parts = [low.get(a) or low.get(b) for a, b in
                         (("subject", "head"), ("relation", "predicate"), ("object", "tail"))]
            else:
                parts = v
            if isinstance(parts, list) and len(parts) == 3 and all(p is not None for p in parts):
                t = _make_triple([str(p) for p in parts])
                if t:
                    found.append(t)
    if not found:
        for line in text.splitlines():
            angles = _ANGLE.findall(line)
            if angles:
                found.extend(t for t in (_make_triple(list(a)) for a in angles) if t)
                continue
            parens = [_make_triple(_split_fields(m, ",")) for m in _PAREN.findall(line)]
            parens = [t for t in parens if t]
            if parens:
                found.extend(parens)
                continue
            stripped = line.strip().strip("|")
            for sep in ("|", "->", "\u2192", "\t"):
                if stripped.count(sep) == 2:
                    t = _make_triple(stripped.split(sep))
                    if t and not set(t.s + t.r + t.o) <= set("-: "):
                        found.append(t)
                    break
    return list(dict.fromkeys(found))


# ---- short answers ------------------------------------------------------------------
_YES_NO = re.compile(r"\b(yes|no|true|false)\b", re.I)


def parse_yes_no(text: str) -> str | None:
    """'yes' or 'no' from the first yes/no/true/false word, else None."""
    m = _YES_NO.search(strip_think(text))
    if not m:
        return None
    return "yes" if m.group(1).lower() in ("yes", "true") else "no"


_ANSWER_PREFIX = re.compile(r"^\s*(?:final\s+answer|short\s+answer|answer)\s*(?:is)?\s*[:\-]\s*", re.I)
_REPLY_LABEL = re.compile(r"^\s*[*#]*\s*(final\s+answer|answer|sub-?answer(\s*\d+)?|rewritten\s+question|"
                          r"reformulated\s+question|question)\s*[*]*\s*:\s*[*]*\s*", re.I)


def drop_label(text: str) -> str:
    """`text` without one leading label such as 'Final answer:', '**Sub-answer 2:**' or
    'Rewritten question:' (the label a model echoes from a multi-step prompt)."""
    return _REPLY_LABEL.sub("", text, count=1)


def clean_answer(text: str, *, keep_lines: bool = False, yes_no: bool = False) -> str:
    """The answer in a chatty reply, without `<think>` blocks.

    Default: a short answer, the text after 'Answer:' if present, else the first non-empty
    line, without surrounding quotes, markdown emphasis or final period.
    `keep_lines`: every non-blank line, only one leading label dropped (`drop_label`), as
    written otherwise: MetaQA pastes sub-answers whole into its later prompts.
    `yes_no`: 'yes' or 'no' when the reply has a yes/no/true/false word (`parse_yes_no`),
    else as above.
    """
    if yes_no:
        yn = parse_yes_no(text)
        if yn is not None:
            return yn
    if keep_lines:
        body = drop_label(strip_think(text).strip()).strip()
        return "\n".join(ln.rstrip() for ln in body.splitlines() if ln.strip()).strip()
    text = strip_think(text).translate(_SMART).strip()
    m = re.search(r"(?:final\s+answer|answer)\s*(?:is)?\s*[:\-]\s*(.+)", text, re.I)
    line = m.group(1) if m else next((ln for ln in text.splitlines() if ln.strip()), "")
    line = _ANSWER_PREFIX.sub("", line.strip())
    return _clean_item(line)
