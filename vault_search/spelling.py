"""A query word no chunk holds, searched as the indexed word it most likely is.

Typed half-way (the page searches as you type: ``grou``) or mistyped
(``sortng``, ``dependecies``), a word finds nothing by keyword. For each
Latin word of the query that no chunk holds:

1. a prefix: the commonest indexed word it begins (``grou`` -> ``group``),
   for a word of at least MIN_PREFIX_CHARS letters;
2. else a typo: the indexed word within a Damerau-Levenshtein distance of 1
   (a word of 4-7 letters) or 2 (8 or more), the closest first, then the
   commonest; none for a shorter word, and the first two letters are taken
   as typed (they bound the words compared: a few hundred, not the vocabulary).

A word the index knows is never rewritten; Chinese words are left alone
(jieba cuts them from what is there; they have no typos of this kind).
The index holds porter stems (``sort`` for sorting, sorted, sorts), so a
typo is compared with each stem's common inflections (SUFFIXES).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from .query import quote_term

MIN_PREFIX_CHARS = 3
MIN_TYPO_CHARS = 4
LONG_WORD_CHARS = 8      # from this length a word may hold two typos
MAX_VOCABULARY_READ = 20_000   # indexed words compared with one typo, at most
LATIN_WORD_RE = re.compile(r"[a-z]+")
# What porter strips, so "sort" is compared as sorting, sorted, sorts, ...
SUFFIXES = ("", "s", "e", "es", "ed", "er", "ers", "ing", "ings", "ion", "ions", "ation", "ations", "ment",
            "ments", "ness", "ly", "al", "ally", "ity", "ities", "y", "ies", "ied", "ence", "ences", "ency",
            "encies", "ance", "ances", "ancy", "ive", "able", "ize", "ized", "izes", "izing", "ise", "ised",
            "ising", "ful", "ous", "ent", "ant", "ic", "ical", "ism", "ist", "ists", "or", "ors", "ate", "ated",
            "ates", "ating")
VOCABULARY_TABLE = "temp.vs_vocabulary"


@dataclass(frozen=True)
class Correction:
    """One query word searched as another."""
    word: str      # as the query had it (segmented: lower case)
    to: str        # the indexed word searched instead
    kind: str      # "prefix" or "typo"


def correct_words(conn: sqlite3.Connection, words: list[str], df: dict[str, int]) -> list[Correction]:
    """A ``Correction`` for each of ``words`` that no chunk holds (``df`` 0)
    and that begins or nearly is an indexed word (see the module)."""
    unknown = [w for w in words if not df.get(w) and LATIN_WORD_RE.fullmatch(w) and len(w) >= MIN_PREFIX_CHARS]
    if not unknown:
        return []
    vocabulary_table(conn)
    out = []
    for word in unknown:
        to = completion(conn, word)
        kind = "prefix"
        if to is None:
            to, kind = closest_word(conn, word), "typo"
        if to is not None:
            out.append(Correction(word, to, kind))
    return out


def vocabulary_table(conn: sqlite3.Connection) -> None:
    """The index's words with the chunks holding each (an fts5vocab table;
    a temp one: this connection's own, and nothing is written to the index)."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {VOCABULARY_TABLE} USING fts5vocab(main, chunks_fts, row)")


def words_from(conn: sqlite3.Connection, prefix: str) -> list[tuple[str, int]]:
    """(indexed word, chunks holding it) for the Latin words beginning ``prefix``, commonest first."""
    rows = conn.execute(f"SELECT term, doc FROM {VOCABULARY_TABLE} WHERE term >= ? AND term < ? LIMIT ?",
                        (prefix, prefix + "\U0010ffff", MAX_VOCABULARY_READ)).fetchall()
    return sorted(((t, n) for t, n in rows if LATIN_WORD_RE.fullmatch(t)), key=lambda r: (-r[1], r[0]))


def completion(conn: sqlite3.Connection, word: str) -> str | None:
    """The commonest indexed word that begins with ``word`` (and is longer)."""
    for term, _ in words_from(conn, word):
        # A stem ending in i (porter's ceremoni) is shown as the word it was (ceremony).
        spelled = term[:-1] + "y" if term.endswith("i") and len(term) > len(word) else term
        if spelled != word and holds(conn, spelled):
            return spelled
    return None


def closest_word(conn: sqlite3.Connection, word: str) -> str | None:
    """The indexed word nearest ``word`` by Damerau-Levenshtein distance
    (within 1, or 2 for a long word; the commonest of the nearest), spelled as
    a stem's inflection when that is nearer than the stem."""
    if len(word) < MIN_TYPO_CHARS:
        return None
    most = 2 if len(word) >= LONG_WORD_CHARS else 1
    found: list[tuple[int, int, str]] = []
    letters = frozenset(word)
    for stem, chunks in words_from(conn, word[:2]):
        root = stem[:-1] if stem.endswith("i") else stem   # ceremoni was ceremony: its i may be a y
        if len(root) > len(word) + most or sum(c not in letters for c in root) > most \
                or min(edit_distances(root, word, most)) > most:
            continue   # no inflection of it can be near: the stem is far from every start of the word
        near = [w for w in inflections(stem) if abs(len(w) - len(word)) <= most]
        distance, spelled = min(((edit_distances(w, word, most)[-1], w) for w in near), default=(most + 1, ""))
        if distance <= most:
            found.append((distance, -chunks, spelled))
    for _, _, spelled in sorted(found):
        if holds(conn, spelled):
            return spelled
    return None


def inflections(stem: str) -> list[str]:
    """The words porter may have cut to ``stem`` (a stem ending in i was a y:
    happi, happy; a stem's final e goes before a vowel: note, noting)."""
    drops_e = stem.endswith("e") and len(stem) > 2
    words = [stem[:-1] + s if drops_e and s[:1] in "aeiouy" and s else stem + s for s in SUFFIXES]
    if stem.endswith("i"):
        words += [stem[:-1] + "y", stem[:-1] + "ies", stem[:-1] + "ied"]
    return words


def holds(conn: sqlite3.Connection, word: str) -> bool:
    """Whether some chunk matches ``word`` as a query word."""
    return conn.execute("SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 1", (quote_term(word),)).fetchone() \
        is not None


def edit_distances(a: str, b: str, bound: int | None = None) -> list[int]:
    """The optimal-string-alignment distance (Damerau-Levenshtein with
    adjacent transpositions) from ``a`` to each prefix of ``b``: the last is
    the distance to ``b``, the least how near ``a`` is to some start of ``b``.
    With ``bound``: once every distance is past it, a row of bound + 1 (the
    stems compared with a typo are mostly far from it)."""
    before: list[int] = []
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        now = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            best = min(row[j] + 1, now[j - 1] + 1, row[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                best = min(best, before[j - 2] + 1)
            now[j] = best
        if bound is not None and i > 1 and min(now) > bound and min(row) > bound:
            return [bound + 1] * (len(b) + 1)   # a transposition reaches back one row only
        before, row = row, now
    return row
