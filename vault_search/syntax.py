"""The few operators a query may hold, taken out of its text.

    "a phrase"        every result holds these words in this order
    -word, -"a b"     no result holds the word (or the phrase)
    path:Folder/sub   only notes in that folder (path:"My Folder" for spaces)
    tag:x, tag:#x     only notes with that tag (or one nested under it)

An operator starts a word: after whitespace or at the start of the query.
Everything else is text, as before: a hyphenated word (``e-mail``, ``a-b``)
is a word, ``-5`` is a number, ``C++``, ``AND``, ``*`` and a lone or
unclosed quote are text, and an operator with nothing to search for
(``-``, ``""``, ``tag:``, ``-+``) is text too, as is a query of exclusions
only (``-x``: nothing is left to search for), so no string is refused.
What is left once the operators are out (phrases without their quotes) is
the query the lists rank and the vector list embeds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# One operator at the start of a word; each alternative names its parts.
OPERATOR_RE = re.compile(
    r'(?P<neg>-)?"(?P<phrase>[^"]*)"'                                  # "a phrase", -"a phrase"
    r'|(?P<field>(?i:path|tag)):(?:"(?P<quoted>[^"]*)"|(?P<value>[^\s"]\S*))'   # path:x, tag:x, path:"a b"
    r'|-(?P<word>[^\s"\-\d]\S*)')                                      # -word (not --x, not -5)
WORD_RE = re.compile(r"\S+")


@dataclass(frozen=True)
class QuerySyntax:
    """A query's operators, and the text that is left to rank."""
    text: str                          # the query without its operators, phrases unquoted
    phrases: tuple[str, ...] = ()      # every result holds each
    excluded: tuple[str, ...] = ()     # no result holds any (words or phrases)
    paths: tuple[str, ...] = ()        # folders, as typed
    tags: tuple[str, ...] = ()         # tags, '#' and all

    def __bool__(self) -> bool:
        return bool(self.phrases or self.excluded or self.paths or self.tags)

    def to_dict(self) -> dict:
        """What ``--explain`` shows of it."""
        return {"text": self.text, "phrases": list(self.phrases), "excluded": list(self.excluded),
                "paths": list(self.paths), "tags": list(self.tags)}


def parse_query(query: str, searchable: Callable[[str], bool]) -> QuerySyntax:
    """``query``'s operators and the text left (see the module).
    ``searchable(text)``: whether ``text`` holds a word keyword search can
    match; a phrase or exclusion without one stays text."""
    text: list[str] = []
    phrases: list[str] = []
    excluded: list[str] = []
    paths: list[str] = []
    tags: list[str] = []
    pos = 0
    while (start := _next_word(query, pos)) is not None:
        m = OPERATOR_RE.match(query, start)
        if m is None or not _taken(m, searchable, phrases, excluded, paths, tags, text):
            m = WORD_RE.match(query, start)
            assert m is not None    # _next_word stops where a word starts
            text.append(m.group(0))
        pos = m.end()
    if not (phrases or excluded or paths or tags) or not (text or paths or tags):
        # As typed, to the character: a query without operators ranks as it
        # did, and one of exclusions only ("-x") has nothing else to search for.
        return QuerySyntax(query)
    return QuerySyntax(" ".join(text), tuple(phrases), tuple(excluded), tuple(paths), tuple(tags))


def _next_word(query: str, pos: int) -> int | None:
    while pos < len(query) and query[pos].isspace():
        pos += 1
    return pos if pos < len(query) else None


def _taken(m: re.Match, searchable: Callable[[str], bool], phrases: list[str], excluded: list[str],
           paths: list[str], tags: list[str], text: list[str]) -> bool:
    """Whether the operator ``m`` means something (then it is recorded where it belongs)."""
    if m.group("field"):
        value = (m.group("quoted") if m.group("quoted") is not None else m.group("value")).strip()
        if m.group("field").casefold() == "tag":
            value = value.lstrip("#")
            if value.strip("#/ "):
                tags.append(value)
                return True
        elif value.strip("/. "):
            paths.append(value)
            return True
        return False
    words = m.group("phrase") if m.group("phrase") is not None else m.group("word")
    if not searchable(words):
        return False
    if m.group("phrase") is not None and not m.group("neg"):
        phrases.append(words)
        text.append(words)   # a phrase's words rank too
    else:
        excluded.append(words)
    return True
