"""The cross-lingual rules: when a query is a question in the notes' other
language, and its translation (stage 2b, ``plan.side_queries``).

A query is translated when the index knows less than TRANSLATE_BELOW of its
words, or when it is written in the script the notes mostly are not
(``foreign_query``). Its translation (``translated_query``) is a third
keyword list, steers the vector list (``Translation.text``, ``blend``), and
for a foreign question says how much of it the keyword list can still
answer (``with_untranslated``); the weights each of these gets are the
ranking model's (weights.py).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import TYPE_CHECKING

from indexer.segment import has_han

from ..keyword import Frequencies, term_coverage
from ..query import MAX_QUERY_TERMS, STOP_WORDS, FtsQuery, quote_term
from ..reader import LATIN_WORD_RE

if TYPE_CHECKING:
    from ..reader import Reader

# Query translation runs when less than this share of the query's words
# (IDF-weighted) occurs in the index: a question in the other language.
TRANSLATE_BELOW = 0.5
MOSTLY_HAN = 0.5    # notes whose words are mostly Han (Reader.han_share) ...
HARDLY_HAN = 0.05   # ... and notes with next to none
FOREIGN_MIN_TERMS = 4   # fewer words are a name or a command, not a question


@dataclass(frozen=True)
class Translation:
    """The query's words in the notes' other language (stage 2b)."""
    query: FtsQuery                 # the translated words, OR-ed
    sources: dict[str, list[str]]   # a query word -> its translations
    chunks: dict[str, frozenset[int]] = field(default_factory=dict)   # the chunks holding each translation
    text: str = ""                  # the query word by word: each word's translations, or the word itself
    blend: float = 1.0              # the weight of ``text``'s embedding beside the query's (lists.vector_list)
    # A foreign question: the coverage of its words left as they are (no translation), for the weights.
    untranslated: float | None = None


class ChunkSets:
    """word -> the ids of the chunks whose text holds it (FTS5), each read once
    per query: translation asks of a word whether the vault has it, and how
    often it shares a chunk with the query's other words."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.sets: dict[str, frozenset[int]] = {}

    def __call__(self, word: str) -> frozenset[int]:
        found = self.sets.get(word)
        if found is None:
            rows = self.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (quote_term(word),))
            found = self.sets[word] = frozenset(chain.from_iterable(rows))
        return found

    def has(self, word: str) -> bool:
        return bool(self(word))


def translated_query(conn: sqlite3.Connection, fq: FtsQuery,
                     han_words: frozenset[str] | None = None) -> Translation | None:
    """Stage 2b: the query's words in the notes' other language (translate.py:
    Chinese words through CC-CEDICT's English senses, English words to the
    Chinese headwords the index contains), each word's candidates narrowed to
    the few the vault uses together with the rest of the query
    (``translate.choose``), as an OR query; None when there is nothing to
    translate or no dictionary. ``han_words``: the query's Chinese words as
    cut without the pieces the segmenter adds (``Segmenter.han_words``), for
    the text embedded beside the query (``whole_words``)."""
    from .. import translate

    if not translate.available():
        return None
    chunks = ChunkSets(conn)
    candidates: dict[str, list[tuple[str, float]]] = {}
    # A hyphenated English word ("plug-in") is translated whole when the
    # dictionary has it, and then its parts ("plug", "in") are not (the terms
    # are distinct: a part also written alone is skipped too).
    translated_whole: set[str] = set()
    for term in fq.terms:
        if has_han(term):
            pairs = translate.zh_to_en([term])
        elif term.replace("-", "").isalpha() and not any(term in w.split("-") for w in translated_whole):
            pairs = translate.en_to_zh([term], chunks.has)
        else:
            continue
        # A translation the question also writes as is stays ("filter" for 过滤
        # in "用 filter by function 写自定义过滤条件"): the keyword list that
        # holds the question's own words weighs next to nothing for a foreign one.
        words = [(w, weight) for w, weight in pairs if weight >= translate.min_weight(term)
                 and w not in STOP_WORDS]
        if words:
            candidates[term] = words
            if "-" in term:
                translated_whole.add(term)
    # The context is the query's other words; one that is also a candidate of
    # another word would count as "beside the query" wherever it stands alone.
    offered = {w for words in candidates.values() for w, _ in words}
    context = [t for t in fq.terms if t not in candidates and t not in offered and t not in STOP_WORDS
               and chunks.has(t)]
    sources = translate.choose(candidates, chunks, context)
    terms = list(dict.fromkeys(w for words in sources.values() for w in words))[:MAX_QUERY_TERMS]
    if not terms:
        return None
    text = " ".join(dict.fromkeys(chain.from_iterable(
        sources.get(t, [t]) for t in whole_words(fq.terms, sources, han_words))))
    return Translation(FtsQuery(" OR ".join(quote_term(t) for t in terms), terms), sources,
                       {t: chunks(t) for t in terms}, text)


def parts_translated_whole(sources: dict[str, list[str]]) -> set[str]:
    """The parts of the hyphenated words translated whole ("plug-in": plug,
    in): each stands with its word, translated with it."""
    return {part for word in sources if "-" in word for part in word.split("-")}


def whole_words(terms: list[str], sources: dict[str, list[str]],
                han_words: frozenset[str] | None = None) -> list[str]:
    """What of the query ``translated_query`` embeds, in order (each word then
    stands for its translations): its words but the stop words, the pieces
    the segmenter also gives of a longer Chinese word (数据库: 数据, 据库; a
    Chinese term is kept when it is one of ``han_words``, the query's words
    as cut without pieces, or without those, when no longer translated term
    holds it), a hyphenated word left untranslated (its parts follow it) and
    the parts of one translated whole ("plug-in": plug, in)."""
    out = []
    for t in terms:
        if t in STOP_WORDS or ("-" in t and t not in sources):
            continue
        if has_han(t) and (t not in han_words if han_words is not None else any(
                t != longer and t in longer and longer in sources for longer in terms if has_han(longer))):
            continue
        if t in parts_translated_whole(sources):
            continue
        out.append(t)
    return out


def needs_translation(fq: FtsQuery, coverage: float | None, foreign: bool = False) -> bool:
    """A query is translated when less than TRANSLATE_BELOW of its words
    (IDF-weighted) occur in the index, or when it is ``foreign``: written in a
    script the notes mostly are not (``foreign_query``). Either way, a question
    in the notes' other language. ``coverage`` is None where the search may not
    translate (``plan.may_translate``)."""
    if not fq.terms or coverage is None:
        return False
    return foreign or coverage < TRANSLATE_BELOW


def foreign_query(reader: Reader, fq: FtsQuery) -> bool:
    """The query is a question written in a script the notes mostly are not:
    at least FOREIGN_MIN_TERMS words, Latin letters and no Han over notes
    mostly in Han (``Reader.han_share`` at least MOSTLY_HAN), or Han over notes
    with next to none (under HARDLY_HAN). Its words then match the notes'
    stray fragments (names, loanwords: an English question over oldwinter's
    Chinese notes finds 60-70 % of its words somewhere), so word coverage
    alone overstates what the keyword list can do. A few words ("kubectl
    apply", "docker compose") are a name or a command the notes use, not a
    question: translating them ("apply" -> 应用, 使用) only adds noise. Read
    from the query's terms, which are folded (full-width letters as ASCII)."""
    if len(fq.terms) < FOREIGN_MIN_TERMS:
        return False
    share = reader.han_share()
    if share is None:
        return False
    text = " ".join(fq.terms)
    if has_han(text):
        return share < HARDLY_HAN
    return share >= MOSTLY_HAN and LATIN_WORD_RE.search(text) is not None


def with_blend(translation: Translation, coverage: float | None) -> Translation:
    """A query translated for its unknown words only: the translation stands
    in for them, in the vectors as in the keyword lists (1 - coverage)."""
    return replace(translation, blend=1.0 - (coverage or 0.0))


def with_untranslated(conn: sqlite3.Connection, translation: Translation, fq: FtsQuery,
                      freqs: Frequencies) -> Translation:
    """A foreign question: the coverage of its words that have no translation
    (names, numbers, jargon the notes write as the query does), what its
    keyword list weighs by; its other words are the translated list's."""
    covered = {*translation.sources, *parts_translated_whole(translation.sources)}
    return replace(translation, untranslated=term_coverage(conn, fq.terms, freqs, covered))
