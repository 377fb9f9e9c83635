"""Keyword retrieval: FTS5 BM25 over chunks, with column weights."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .filters import SearchFilters
from .hits import ChunkHit
from .query import quote_term

if TYPE_CHECKING:
    from .vector import ChunkNotes

# BM25 column weights, in FTS column order (title, aliases, tags, headings,
# body). A word in the title or an alias says more about what a note is than
# the same word in its body; see docs/ranking-log.md (2026-11-30) for the measurements.
COLUMN_WEIGHTS = (4.0, 4.0, 2.0, 2.0, 1.0)
# Chunks fetched per requested note: notes have several chunks each, and the
# best chunk of each note is what is kept.
CHUNKS_PER_RESULT = 20
MIN_CHUNK_DEPTH = 200


def keyword_notes(conn: sqlite3.Connection, match: str, filters: SearchFilters, chunk_depth: int,
                  note_depth: int, chunk_notes: ChunkNotes | None = None) -> list[ChunkHit]:
    """The ``note_depth`` best notes among the ``chunk_depth`` best chunks,
    each by its best chunk: ``best_per_note`` of ``keyword_hits`` (none for a
    ``note_depth`` of 0). Without filters, ``chunk_notes`` (the same
    snapshot's chunk -> note arrays) names each chunk's note instead of a
    join, and only the notes kept become hits: looking up 2,000 chunk rows
    cost as much as the MATCH itself (10k-note growth vault: 3.6 ms -> 1.6 ms).
    A chunk missing from the arrays (an FTS row without its chunk: a damaged
    index) is dropped after the LIMIT, so it leaves the window one short
    where the join would have filled it; ranks are the same."""
    if note_depth <= 0:
        return []
    if chunk_notes is None or filters or not match:
        return best_per_note(keyword_hits(conn, match, filters, chunk_depth), note_depth)
    weights = ", ".join(str(w) for w in COLUMN_WEIGHTS)
    rows = conn.execute(
        f"SELECT rowid, bm25(chunks_fts, {weights}) AS bm FROM chunks_fts WHERE chunks_fts MATCH ? "
        "ORDER BY bm LIMIT ?", (match, chunk_depth)).fetchall()
    if not rows:
        return []
    import numpy as np

    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    chosen, notes, ranks = chunk_notes.first_per_note(ids, note_depth)
    return [ChunkHit(rows[i][0], n, -rows[i][1], rank)
            for i, n, rank in zip(chosen.tolist(), notes.tolist(), ranks.tolist())]


def keyword_hits(conn: sqlite3.Connection, match: str, filters: SearchFilters, depth: int) -> list[ChunkHit]:
    """The ``depth`` best chunks for an FTS5 MATCH expression."""
    if not match:
        return []
    weights = ", ".join(str(w) for w in COLUMN_WEIGHTS)
    where, params = filters.sql()
    rows = conn.execute(
        f"""SELECT c.id, c.note_id, bm25(chunks_fts, {weights}) AS bm
            FROM chunks_fts
            JOIN chunks c ON c.id = chunks_fts.rowid
            JOIN notes n ON n.id = c.note_id
            WHERE chunks_fts MATCH ? AND {where}
            ORDER BY bm LIMIT ?""",
        [match, *params, depth]).fetchall()
    return [ChunkHit(cid, nid, -bm, i + 1) for i, (cid, nid, bm) in enumerate(rows)]


def term_coverage(conn: sqlite3.Connection, terms: list[str], freqs: Frequencies | None = None,
                  uncounted: Collection[str] = ()) -> float:
    """The share of the query's words that occur anywhere in the index, each
    word weighted by its IDF (a word found in every note says little); the
    words in ``uncounted`` count as not found.

    Low when the query is in another language than the notes (an English
    question over Chinese notes matches only names and digits): the hybrid
    then trusts the keyword list less. IDF weighting keeps a stray common
    word ("app", "2") from vouching for a foreign query.
    """
    if not terms:
        return 0.0
    freqs = freqs or document_frequencies(conn, terms)
    weights = term_weights(freqs)
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if freqs.df[t] and t not in uncounted) / total if total else 0.0


def term_weights(freqs: Frequencies) -> dict[str, float]:
    """Each term's IDF. A term no chunk contains weighs as a word one chunk has:
    a typo or a word the notes never use ("obsidain") says no more than the
    rarest word, and at the IDF of df = 0 it would outweigh every word that is
    there. When the index knows none of the words (a question in another
    language), all weigh the same."""
    if not any(freqs.df.values()):
        return dict.fromkeys(freqs.df, 1.0)
    return {t: idf(max(df, 1), freqs.chunks) for t, df in freqs.df.items()}


@dataclass
class Frequencies:
    chunks: int              # chunks in the index
    df: dict[str, int]       # term -> chunks containing it


def document_frequencies(conn: sqlite3.Connection, terms: list[str]) -> Frequencies:
    """How many chunks contain each term (as the FTS index matches it)."""
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    df = {t: conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (quote_term(t),)).fetchone()[0]
          for t in dict.fromkeys(terms)}
    return Frequencies(chunks, df)


def idf(df: int, n: int) -> float:
    """BM25's IDF (Robertson-Sparck Jones, +1 so it is never negative)."""
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)


def best_per_note(hits: list[ChunkHit], limit: int) -> list[ChunkHit]:
    """The first (best) chunk of each note, in rank order."""
    seen, out = set(), []
    for hit in hits:
        if hit.note_id not in seen:
            seen.add(hit.note_id)
            out.append(hit)
            if len(out) == limit:
                break
    return out


def term_share(conn: sqlite3.Connection, terms: list[str], chunk_ids: list[int],
               freqs: Frequencies | None = None) -> dict[int, float]:
    """chunk id -> the IDF-weighted share of ``terms`` the chunk contains (in any
    column: title, aliases, tags, headings or body). 1.0: every word of the
    query is there; a chunk that holds only its commonest word scores near 0.
    Unlike BM25, comparable from one query to the next."""
    if not terms or not chunk_ids:
        return {}
    freqs = freqs or document_frequencies(conn, terms)
    weights = term_weights(freqs)
    total = sum(weights.values())
    share = dict.fromkeys(chunk_ids, 0.0)
    wanted = set(chunk_ids)
    for term, weight in weights.items():
        if not freqs.df.get(term):
            continue
        for cid in _containing(conn, term, wanted, freqs.df[term]):
            share[cid] += weight / total
    return share


def chunks_containing(conn: sqlite3.Connection, terms: list[str], chunk_ids: list[int],
                      df: dict[str, int]) -> dict[str, set[int]]:
    """term -> the chunks among ``chunk_ids`` that contain it (``df``: how
    many chunks of the index contain each term, ``document_frequencies``)."""
    if not chunk_ids:
        return {}
    wanted = set(chunk_ids)
    return {term: _containing(conn, term, wanted, df[term]) for term in dict.fromkeys(terms)}


def chunks_matching(conn: sqlite3.Connection, match: str, chunk_ids: list[int]) -> set[int]:
    """The chunks among ``chunk_ids`` that an FTS5 ``match`` finds."""
    if not chunk_ids:
        return set()
    return {cid for (cid,) in conn.execute(
        f"SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({','.join('?' * len(chunk_ids))})",
        [match, *chunk_ids])}


# A term whose chunks number at most this many times the candidates is read
# within the candidates' id range and filtered here; a commoner one is
# looked up by ``rowid IN (...)``.
RANGE_READ_FACTOR = 10


def _containing(conn: sqlite3.Connection, term: str, wanted: set[int], df: int) -> set[int]:
    """The chunks among ``wanted`` (not empty) that contain ``term`` (in ``df``
    chunks of the index). FTS5 does not use
    ``rowid IN (...)`` to skip through a term's chunks: it costs about the same
    for any term (10k-note growth vault: 3.5 ms a term for 120 ids), while
    reading the term's chunks in the ids' range costs what the term has
    there (0.2 ms) and grows with it (30 ms for a term in all of 100k
    chunks). So: the range for a term in at most RANGE_READ_FACTOR x as many
    chunks as are wanted, the list for a commoner one."""
    quoted = quote_term(term)
    if df > RANGE_READ_FACTOR * len(wanted):
        ids = sorted(wanted)
        return {cid for (cid,) in conn.execute(
            f"SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({','.join('?' * len(ids))})",
            [quoted, *ids])}
    rows = conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid BETWEEN ? AND ?",
                        (quoted, min(wanted), max(wanted)))
    return {cid for (cid,) in rows if cid in wanted}
