"""Keyword retrieval: FTS5 BM25 over chunks, with column weights."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from .filters import SearchFilters
from .query import quote_term

# BM25 column weights, in FTS column order (title, aliases, tags, headings,
# body). A word in the title or an alias says more about what a note is than
# the same word in its body; see README "Ranking" for the measurements.
COLUMN_WEIGHTS = (4.0, 4.0, 2.0, 2.0, 1.0)
# Chunks fetched per requested note: notes have several chunks each, and the
# best chunk of each note is what is kept.
CHUNKS_PER_RESULT = 20
MIN_CHUNK_DEPTH = 200


@dataclass
class ChunkHit:
    chunk_id: int
    note_id: int
    score: float   # -bm25: higher is better
    rank: int      # 1-based rank among chunks


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


def term_coverage(conn: sqlite3.Connection, terms: list[str]) -> float:
    """The share of the query's words that occur anywhere in the index.

    Low when the query is in another language than the notes (an English
    question over Chinese notes matches only names and digits): the hybrid
    then trusts the keyword list less.
    """
    if not terms:
        return 0.0
    found = sum(1 for t in terms if conn.execute(
        "SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 1", (quote_term(t),)).fetchone())
    return found / len(terms)


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
