"""Stages 1 and 2: what was asked, and what the query is.

1. ``prepare``     before the index is read: the text made printable, the
                   options checked, the filters built, the judge's endpoint
                   loaded when a judge is asked for. A ``Request``.
2. ``plan_query``  inside the read snapshot: the mode, the query's words as
                   the notes were segmented, how many chunks hold each, how
                   much of the query the index knows (coverage), whether it is
                   a question in the script the notes mostly are not, how deep
                   each list looks, how much of the index has vectors, and
                   its translation when it needs one (crosslingual.py).
                   A ``QueryPlan``: what every later stage reads.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from indexer.config import VaultConfig
from indexer.store import vectors_state

from ..filters import SearchFilters, clean_text
from ..keyword import Frequencies, document_frequencies, term_coverage
from ..options import MAX_LIMIT, MODES, SearchOptions, UnsupportedModeError
from ..query import FtsQuery, fts_query, phrase_match, with_words_replaced
from ..spelling import Correction, correct_words
from ..syntax import QuerySyntax, parse_query
from .crosslingual import (
    Translation,
    foreign_query,
    needs_translation,
    translated_query,
    with_blend,
    with_untranslated,
)
from .weights import FUSION_DEPTH, QueryFeatures

if TYPE_CHECKING:
    from ..reader import Reader
    from ..rerank import RerankSettings


@dataclass(frozen=True)
class Request:
    """Stage 1: a search as asked, checked."""
    text: str                        # the query made printable
    options: SearchOptions
    limit: int                       # results asked for, within 1..MAX_LIMIT
    filters: SearchFilters
    judge: RerankSettings | None     # the judge's endpoint, when a judge is asked for

    @property
    def keep(self) -> int:
        """The rows a search builds: the page, or the judge's head when that is larger."""
        return max(self.limit, self.judge.top_n) if self.judge else self.limit


@dataclass(frozen=True)
class QueryPlan(Request):
    """Stage 2: the request and what was decided about its query."""
    mode: str                        # "hybrid", "fts" or "vector"
    fq: FtsQuery                     # the query's words, OR-ed
    freqs: Frequencies               # the chunks holding each word
    coverage: float | None           # a search that may translate: the IDF-weighted share of its words the index knows
    foreign: bool                    # ... and whether it is a question in a script the notes mostly are not
    depth: int                       # notes each list contributes
    embedded: int                    # chunks vector search can see ...
    chunks: int                      # ... of all chunks (both 0 for a keyword-only index)
    embedding_now: bool              # an embedding pass runs now: ``embedded`` grows as it publishes
    translation: Translation | None = None   # side query: the query's words in the notes' other language
    syntax: QuerySyntax | None = None        # the query's operators ("a phrase", -word, path:, tag:)
    corrections: tuple[Correction, ...] = ()  # unknown words searched as indexed ones (spelling.py)

    @property
    def embedded_share(self) -> float:
        return self.embedded / self.chunks if self.chunks else 1.0

    def features(self, lists: dict) -> QueryFeatures:
        """What the ranking model reads of this query, given the lists that voted."""
        untranslated = self.translation.untranslated if self.translation is not None else None
        return QueryFeatures(self.mode, tuple(lists), self.coverage, untranslated, self.foreign, self.embedded_share)


def prepare(query: str, options: SearchOptions, config: VaultConfig,
            rerank_settings: RerankSettings | None = None) -> Request:
    """Stage 1: the query text made printable, the limit within 1..MAX_LIMIT, the
    filters, and the judge when one is asked for (``rerank_settings``, else the
    environment's); a bad mode, filter or number is a ``UsageValueError``."""
    query = clean_text(query or "")
    if options.mode is not None and options.mode not in MODES:
        raise UnsupportedModeError(f"unknown mode {options.mode!r}; use one of {', '.join(MODES)}")
    limit = max(1, min(int(options.limit), MAX_LIMIT))
    filters = SearchFilters.of(options, config)
    options.check()
    judge = None
    if options.rerank:
        from ..rerank import RerankSettings

        judge = rerank_settings or RerankSettings.load()
    return Request(query, options, limit, filters, judge)


def plan_query(reader: Reader, request: Request) -> QueryPlan:
    """Stage 2 (see the module)."""
    embedding_now = reader.embedding_now()
    mode = resolve_mode(request.options.mode, reader.has_vectors(), embedding_now)
    # A process's first query loads only the dictionary parts its
    # words need, not all of jieba's (0.3 s): a one-shot CLI search.
    reader.segmenter.prepare([request.text])
    syntax = parse_query(request.text, lambda text: bool(reader.segmenter.segment(text)))
    fq = fts_query(syntax.text, reader.segmenter)
    if syntax and not fq.terms:
        fq.warnings[:] = ["the query has only filters (path:, tag:) and exclusions: add a word to search for"]
    freqs = document_frequencies(reader.conn, fq.terms)
    translates = may_translate(mode, request.options.mode, reader.has_vectors())
    foreign = translates and foreign_query(reader, fq)
    corrections: tuple[Correction, ...] = ()
    known = any(freqs.df.get(term) for term in fq.terms)
    if corrects_unknown_words(mode, foreign, known) and not fq.only_stop_words:
        corrections = tuple(correct_words(reader.conn, fq.terms, freqs.df))
        if corrections:
            fq = with_words_replaced(fq, {c.word: c.to for c in corrections})
            freqs = document_frequencies(reader.conn, fq.terms)
    # A corrected word counts as the word it was searched as: "sortng" is
    # weighed as "sorting" would be; counted as unknown, its keyword list would
    # weigh nothing in the hybrid and the notes it found would fall to the end.
    coverage = term_coverage(reader.conn, fq.terms, freqs) if translates else None
    embedded, chunks = (reader.vector_coverage() if mode != "fts"
                        else vector_coverage(reader.conn, reader.model_spec))
    filters = with_syntax(request.filters, syntax, reader, fq.warnings) if syntax else request.filters
    plan = QueryPlan(**{**vars(request), "text": syntax.text, "filters": filters}, mode=mode, fq=fq, freqs=freqs,
                     coverage=coverage, foreign=foreign, depth=note_depth(mode, request.limit, request.options.depth),
                     embedded=embedded, chunks=chunks, embedding_now=embedding_now,
                     syntax=syntax if syntax else None, corrections=corrections)
    return side_queries(reader, plan)


def corrects_unknown_words(mode: str, foreign: bool, known: bool) -> bool:
    """THE condition for searching a word no chunk holds as the indexed word it
    most likely is (spelling.py): in keyword search; in the hybrid only when no
    chunk holds any word of the query (``known`` false: "grou", "sortng"),
    where the keyword list would otherwise find nothing, and never for a query
    in the script the notes mostly are not (its words are missing for their
    language, not their spelling). Correcting the unknown words of a query
    whose other words are there cost the development pool MRR@10 0.0014
    (95% interval [0.0003, 0.0026]): the vector list already reads them."""
    return mode == "fts" or (mode == "hybrid" and not foreign and not known)


# Operators of one kind a query may hold: each is a condition of the SQL (and
# a phrase one lookup more); a thousand would pass SQLite's expression depth.
MAX_OPERATORS = 16


def with_syntax(filters: SearchFilters, syntax: QuerySyntax, reader: Reader, warnings: list[str]) -> SearchFilters:
    """``filters`` and the query's own: its tags, folders, phrases and
    exclusions. A phrase no note holds is searched as its words (with a
    warning in ``warnings``): a question quoting a title the notes never
    wrote ("the song \"The Four Seasons\"") is still answered; held as a
    filter, such phrases cost the development pool MRR@10 0.0011."""
    kinds = {"phrases": syntax.phrases, "exclusions": syntax.excluded, "path: filters": syntax.paths,
             "tag: filters": syntax.tags}
    for kind, given in kinds.items():
        if len(given) > MAX_OPERATORS:
            warnings.append(f"only the first {MAX_OPERATORS} {kind} of the query are used ({len(given)} given)")
    syntax = replace(syntax, phrases=syntax.phrases[:MAX_OPERATORS], excluded=syntax.excluded[:MAX_OPERATORS],
                     paths=syntax.paths[:MAX_OPERATORS], tags=syntax.tags[:MAX_OPERATORS])
    phrases = []
    for phrase in syntax.phrases:
        match = phrase_match(phrase, reader.segmenter)
        if reader.conn.execute("SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 1", (match,)).fetchone():
            phrases.append(match)
        else:
            warnings.append(f"no note holds the phrase \"{phrase}\": searched its words")
    excluded = " OR ".join(phrase_match(x, reader.segmenter) for x in syntax.excluded) or None
    return filters.narrowed(syntax.tags, syntax.paths, phrases, excluded)


def resolve_mode(mode: str | None, has_vectors: bool, embedding_now: bool = False) -> str:
    """The mode asked for, else hybrid when the index has vectors, else fts."""
    mode = mode or ("hybrid" if has_vectors else "fts")
    if mode != "fts" and not has_vectors:
        if embedding_now:
            raise UnsupportedModeError(
                f"--mode {mode} needs vectors, and the index is being embedded now: none published yet, the "
                "first within seconds; try again then, or use --mode fts")
        raise UnsupportedModeError(
            f"--mode {mode} needs embeddings, which this index does not have; "
            "run `vault-search index` (without --no-embed), or use --mode fts")
    return mode


def may_translate(mode: str, asked: str | None, has_vectors: bool) -> bool:
    """Whether a question in the notes' other language may be translated: in
    the hybrid, and in a default search of a keyword-only index (translation
    needs no vectors); an explicit ``--mode fts`` searches the words as typed."""
    return mode == "hybrid" or (asked is None and not has_vectors)


def note_depth(mode: str, limit: int, depth: int | None = None) -> int:
    """Notes each retriever lists: the hybrid fuses deeper lists than the page."""
    return max(limit, depth or FUSION_DEPTH) if mode == "hybrid" else limit


def vector_coverage(conn: sqlite3.Connection, model: str | None) -> tuple[int, int]:
    """(chunks vector search can see, all chunks), as the recorded matrix
    says, without reading it (a keyword search's: ``Reader.vector_coverage``
    counts exactly); both 0 for a keyword-only index."""
    if not model:
        return 0, 0
    state = vectors_state(conn)
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return min(int(state.get("rows", 0)) if state else 0, chunks), chunks


def side_queries(reader: Reader, plan: QueryPlan) -> QueryPlan:
    """Stage 2b: the query's translation when it needs one
    (``crosslingual.needs_translation``)."""
    translation = None
    if needs_translation(plan.fq, plan.coverage, plan.foreign):
        han = frozenset(w for run in reader.segmenter.han_words(plan.text) for w in run)
        translation = translated_query(reader.conn, plan.fq, han)
    if translation is not None and not plan.foreign:
        return replace(plan, translation=with_blend(translation, plan.coverage))
    if translation is not None:
        return replace(plan, translation=with_untranslated(reader.conn, translation, plan.fq, plan.freqs))
    return plan
