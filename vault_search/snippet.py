"""Snippets around the matched words, cut from the note's own text.

FTS5's ``snippet()`` would show the segmented tokens (spaces between Chinese
words, stems); users and agents need the note's real text, so the window is
chosen here over the raw chunk.
"""

from __future__ import annotations

import re

SNIPPET_CHARS = 220
MAX_MATCHES = 400
_SUFFIXES = ("ing", "ed", "es", "ly", "s")
_WS_RE = re.compile(r"\s+")
_BOUNDARY_RE = re.compile(r"[\s。，、；：！？,;:]+")


def term_pattern(terms: list[str]) -> re.Pattern | None:
    """One regex for all query terms; Latin words match any ending (stems)."""
    alts = []
    for term in sorted(set(terms), key=len, reverse=True):
        if term.isascii() and term.isalpha():
            stem = term
            for suffix in _SUFFIXES:
                if len(term) - len(suffix) >= 3 and term.endswith(suffix):
                    stem = term[: -len(suffix)]
                    break
            alts.append(rf"(?<![^\W_]){re.escape(stem)}[^\W_]*")
        elif term.isascii():
            alts.append(rf"(?<![^\W_]){re.escape(term)}(?![^\W_])")
        else:
            alts.append(re.escape(term))
    if not alts:
        return None
    return re.compile("|".join(alts), re.IGNORECASE)


def make_snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    """The window of ``text`` that shows the most distinct query terms."""
    pattern = term_pattern(terms)
    matches = list(pattern.finditer(text)) if pattern else []
    matches = matches[:MAX_MATCHES]
    if not matches:
        return _clip(text, 0, width)
    best_start, best_count = matches[0].start(), 0
    for i, m in enumerate(matches):
        seen = set()
        for other in matches[i:]:
            if other.end() - m.start() > width:
                break
            seen.add(other.group(0).lower())
        if len(seen) > best_count:
            best_start, best_count = m.start(), len(seen)
    # Start a little before the first match, at a word or line boundary.
    start = max(0, best_start - width // 5)
    if start > 0:
        boundary = _BOUNDARY_RE.search(text, start, best_start)
        start = boundary.end() if boundary else start
    return _clip(text, start, width)


def _clip(text: str, start: int, width: int) -> str:
    end = min(len(text), start + width)
    if end < len(text):
        space = text.rfind(" ", start + width * 2 // 3, end)
        end = space if space > 0 else end
    piece = _WS_RE.sub(" ", text[start:end]).strip()
    return ("…" if start > 0 else "") + piece + ("…" if end < len(text) else "")


def highlight_spans(snippet: str, terms: list[str]) -> list[tuple[int, int]]:
    pattern = term_pattern(terms)
    return [m.span() for m in pattern.finditer(snippet)] if pattern else []
