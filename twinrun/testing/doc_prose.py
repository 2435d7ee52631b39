"""The prose of a docs page, sentence by sentence (issue 52: no sentence in README or docs over ~60 words).

`prose_sentences` drops what is not prose (fenced code, tables, headings, HTML comments, generated blocks between
``<!-- NAME:start ... -->`` and ``<!-- NAME:end -->``), joins each paragraph or list item onto one line, replaces
inline code spans and link targets by one word each, and splits at a full stop, question or exclamation mark
followed by a space and a letter, an opening mark or a number (never after "e.g.", "i.e." or
"vs."). A semicolon does not end a sentence: a list of clauses is one sentence to a reader.
"""

from __future__ import annotations

import re

MAX_WORDS = 60
_GENERATED = re.compile(r"<!--\s*([\w-]+):start.*?-->.*?<!--\s*\1:end\s*-->", re.S)
_ABBREV = ("e.g.", "i.e.", "vs.", "cf.", "etc.", "approx.", "no.", "Fig.")


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, the paragraph on one line) for every prose paragraph and list item."""
    text = _GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out: list[tuple[int, str]] = []
    cur: list[str] = []
    start = 0
    fenced = False

    def flush() -> None:
        if cur:
            out.append((start, " ".join(cur)))
            cur.clear()

    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("```"):
            fenced = not fenced
            flush()
            continue
        if fenced or not line or line.startswith(("|", "#", "<")) or raw.startswith("    ") and not cur:
            flush()
            continue
        if re.match(r"([-*+]|\d+\.)\s", line):  # a list item starts its own paragraph
            flush()
            line = re.sub(r"^([-*+]|\d+\.)\s+", "", line)
        if not cur:
            start = i
        cur.append(line)
    flush()
    return out


def _plain(paragraph: str) -> str:
    p = re.sub(r"`[^`]*`", "CODE", paragraph)
    p = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", p)  # a link reads as its text
    return re.sub(r"\*\*?|__", "", p)


def sentences(paragraph: str) -> list[str]:
    """One paragraph's sentences (see the module docstring for the rule)."""
    p = _plain(paragraph)
    for i, ab in enumerate(_ABBREV):
        p = p.replace(ab + " ", f"\x00{i}\x00 ")
    parts = re.split(r"(?<=[.!?])[)\"']?\s+(?=[A-Za-z0-9(\"'])", p)
    out = []
    for s in parts:
        s = re.sub(r"\x00(\d+)\x00", lambda m: _ABBREV[int(m.group(1))], s)
        if s.strip():
            out.append(s.strip())
    return out


def long_sentences(text: str, max_words: int = MAX_WORDS) -> list[tuple[int, int, str]]:
    """(line of its paragraph, words, the sentence's start) for every prose sentence over `max_words` words."""
    found = []
    for line, para in _paragraphs(text):
        for s in sentences(para):
            n = len(s.split())
            if n > max_words:
                found.append((line, n, " ".join(s.split()[:12]) + " ..."))
    return found
