"""Snippets around the matched words, cut from the note's own text.

FTS5's ``snippet()`` would show the segmented tokens (spaces between Chinese
words, stems); users and agents need the note's real text, so the window is
chosen here over the raw chunk. Matching folds case, width (ＡＢＣ) and
accents (café) the way the index does, and accepts other endings of an
English word, since the index matched it through a stemmer.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

SNIPPET_CHARS = 220
MAX_MATCHES = 400
_SUFFIXES = ("ies", "ing", "ed", "es", "ly", "er", "s")
_WS_RE = re.compile(r"\s+")
_BOUNDARY_RE = re.compile(r"[\s。，、；：！？,;:]+")
# A stub is a chunk with no word at all past its heading line, its tags and
# markup (``has_words``): a note's "# Title" and tag line (38 of the 118
# opening chunks of the Tasks docs), a heading over a picture alone. No word,
# not "a few": on the two shared vaults the chunks with the fewest words that
# are not stubs are answers and pointers ("Currently, no.", "See priority.",
# "See About Editing."), so any higher floor would hide text a reader asked for.
WORD_RE = re.compile(r"[^\W_]")   # a letter or digit, of any script


def _prefixes(term: str) -> set[str]:
    """Prefixes that cover the forms a stemmer merges (studies/study, running/run)."""
    out = {term}
    for suffix in _SUFFIXES:
        if term.endswith(suffix) and len(term) - len(suffix) >= 3:
            stem = term[: -len(suffix)]
            out.add(stem)
            if len(stem) > 3 and stem[-1] == stem[-2]:
                out.add(stem[:-1])            # running -> runn -> run
            if suffix == "ies":
                out.add(stem + "y")
            break
    if len(term) >= 5 and term[-1] in "ey":
        out.add(term[:-1])                    # study -> stud(ies), make -> mak(ing)
    return out


def term_pattern(terms: list[str]) -> re.Pattern | None:
    """One regex (over folded text) for all query terms."""
    alts = set()
    for term in set(terms):
        if term.isascii() and term.isalpha():
            alts |= {rf"(?<![^\W_]){re.escape(p)}[^\W_]*" for p in _prefixes(term)}
        elif term.isascii():
            alts.add(rf"(?<![^\W_]){re.escape(term)}(?![^\W_])")
        elif term:
            alts.add(re.escape(term))
    if not alts:
        return None
    return re.compile("|".join(sorted(alts, key=len, reverse=True)))


@lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    folded = unicodedata.normalize("NFKC", ch)
    folded = "".join(c for c in unicodedata.normalize("NFD", folded) if not unicodedata.combining(c))
    return folded.lower() or ch


def fold(text: str) -> tuple[str, list[int] | None]:
    """Text folded as the index folds it, and the raw index of each folded
    character (None when folding kept every position)."""
    if text.isascii():
        return text.lower(), None
    table = {ord(c): _fold_char(c) for c in set(text) if not c.isascii()}
    if all(len(v) == 1 for v in table.values()):
        # Every character folds to one: positions are unchanged (fast path).
        return text.translate(table).lower(), None
    out, index = [], []
    for i, ch in enumerate(text):
        f = ch.lower() if ch.isascii() else _fold_char(ch)
        out.append(f)
        index.extend([i] * len(f))
    return "".join(out), index


def find_terms(text: str, terms: list[str]) -> list[tuple[int, int, str]]:
    """(start, end, folded match) of each term occurrence, in raw offsets."""
    pattern = term_pattern(terms)
    if pattern is None:
        return []
    folded, index = fold(text)
    out = []
    for m in pattern.finditer(folded):
        if index is None:
            out.append((m.start(), m.end(), m.group(0)))
        else:
            out.append((index[m.start()], index[m.end() - 1] + 1, m.group(0)))
        if len(out) >= MAX_MATCHES:
            break
    return out


def make_snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    """The window of ``text`` that shows the most distinct query terms."""
    matches = find_terms(text, terms)
    if not matches:
        return _clip(text, 0, width)
    best_start, best_count = matches[0][0], 0
    for i, (start, _, _) in enumerate(matches):
        seen = set()
        for other_start, other_end, word in matches[i:]:
            if other_end - start > width:
                break
            seen.add(word)
        if len(seen) > best_count:
            best_start, best_count = start, len(seen)
    # Start a little before the first match, at a word or clause boundary.
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
    return [(s, e) for s, e, _ in find_terms(snippet, terms)]


def under_heading(text: str) -> str:
    """A chunk's text past its heading line ("" for a heading alone); the text
    itself when it does not open with a heading."""
    if text.startswith("#"):
        first, _, rest = text.partition("\n")
        if first.lstrip("#").startswith((" ", "\t")):
            return rest
    return text


def says_something(reading: str) -> bool:
    """Whether text as the reading view shows it (``plain.reading_text``) has
    a word past its tags (``WORD_RE``)."""
    # Here, not at the top: the thin client renders with this module and never parses a note.
    from indexer.parse import INLINE_TAG_RE

    return bool(WORD_RE.search(INLINE_TAG_RE.sub(" ", reading)))


def has_words(text: str) -> bool:
    """Whether a chunk's text says anything past its heading line, its tags
    and its markup, as the reading view shows it (else a stub)."""
    from indexer.plain import reading_text

    under = under_heading(text)
    return bool(under.strip()) and says_something(reading_text(under))
