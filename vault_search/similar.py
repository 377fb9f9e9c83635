"""``similar NOTE`` and ``similar --text DRAFT``: the notes most like a note,
or like a text about to be written.

An agent checks before writing a memory whether one already says it (read
before write); a person sees related notes the way Smart Connections shows
them. Two lists, fused by reciprocal rank like a search:

- meaning: the source as a passage vector (a note: the mean of its chunks'
  vectors; a draft: embedded as a passage) against every chunk, each note by
  its nearest chunk. ``similarity`` is that cosine: the same scale for every
  source, so it says how close (with the default model, unrelated notes of the
  sample vault sit at 0.75-0.87, a restatement of the same content above 0.93);
- words: the source's most distinctive words (the highest tf x idf, up to
  ``KEY_TERMS``) as a keyword query. ``overlap`` is the IDF-weighted share
  of those words the note holds, ``shared`` which ones.

``near_duplicate`` marks a note that is very likely the same content:
similarity >= ``NEAR_DUPLICATE_COSINE`` and overlap >= ``NEAR_DUPLICATE_OVERLAP``
(on a keyword-only index, overlap >= ``NEAR_DUPLICATE_OVERLAP_ALONE``).
The source note itself is never listed, and neither is padding: a note is
listed when it holds at least ``MIN_OVERLAP`` of the key words or its
closest chunk stands ``MIN_Z`` standard deviations above the source's
typical chunk; when none does, the ``WEAK_GUESSES`` closest are listed with
a warning that they are weak.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from indexer.errors import UsageValueError
from indexer.plain import reading_text

from .files import indexed_path
from .filters import SearchFilters
from .fusion import rrf
from .keyword import best_per_note, document_frequencies, idf, keyword_hits
from .query import STOP_WORDS, quote_term
from .search import weights as ranking
from .snippet import make_snippet

if TYPE_CHECKING:
    from .reader import Reader

KEY_TERMS = 16             # the source's words searched for
CANDIDATE_TERMS = 80       # its most frequent words weighed by idf to choose them
SOURCE_CHARS = 20_000      # of a long note or draft, the part read
EMBED_CHARS = 2_000        # of a draft, the part embedded
DEPTH = 200                # chunks each list looks at
NEAR_DUPLICATE_COSINE = 0.93
NEAR_DUPLICATE_OVERLAP = 0.5
NEAR_DUPLICATE_OVERLAP_ALONE = 0.8
MAX_LIMIT = 100
MIN_OVERLAP = 0.05
MIN_Z = 2.5
WEAK_GUESSES = 3


@dataclass
class SimilarNote:
    path: str
    title: str
    heading: str
    start_line: int            # the closest chunk's lines
    end_line: int
    snippet: str
    score: float               # the fused rank score: orders this list only
    similarity: float | None   # cosine of the closest chunk (None: no vectors)
    overlap: float             # IDF-weighted share of the source's key words the note holds, 0-1
    shared: list[str]          # ... which ones
    near_duplicate: bool


@dataclass
class SimilarResponse:
    source: str                # the note's path, or "text"
    mode: str                  # "hybrid" or "fts" (a keyword-only index)
    terms: list[str]           # the source's key words
    took_ms: float
    warnings: list[str] = field(default_factory=list)
    results: list[SimilarNote] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class Source(NamedTuple):
    """What ``similar`` compares against."""
    path: str                    # the note's path, or "text" for a draft
    note_id: int | None          # the note, never listed (None: a draft)
    chunk_ids: tuple[int, ...]   # the note's chunks
    text: str


def similar(reader: Reader, note: str | None = None, text: str | None = None, limit: int = 10) -> SimilarResponse:
    if (note is None) == (text is None):
        raise UsageValueError("similar needs a note or a text (--text), not both")
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageValueError(f"limit must be between 1 and {MAX_LIMIT}")
    t0 = time.perf_counter()
    conn = reader.conn
    path, source_id, chunk_ids, text = read_source(reader, note, text)
    warnings: list[str] = []
    terms, weights = key_terms(reader, text)
    lists = {}
    if terms:
        hits = keyword_hits(conn, " OR ".join(quote_term(t) for t in terms), SearchFilters(), DEPTH)
        lists["fts"] = best_per_note([h for h in hits if h.note_id != source_id], DEPTH)
    mode = "fts"
    if reader.has_vectors():
        mode = "hybrid"
        vector = source_vector(reader, list(chunk_ids), text)
        if vector is None:
            warnings.append("the note has no vectors yet (it waits for embedding): words only")
        else:
            from .vector import nearest_notes

            hits = nearest_notes(reader.vectors(), reader.chunk_notes(), vector, DEPTH, DEPTH)
            lists["vector"] = [h for h in hits if h.note_id != source_id]
    fused = rrf(lists, {}, ranking.MODEL.rrf_k)[:max(limit, WEAK_GUESSES) * 3]
    owned = note_terms(conn, [f.note_id for f in fused], terms)
    total = sum(weights.values()) or 1.0
    z_of = {h.note_id: h.z for h in lists.get("vector", [])}
    results: list[SimilarNote] = []
    weak: list[SimilarNote] = []
    for f in fused:
        row = conn.execute("SELECT n.path, n.title, c.heading, c.start_line, c.end_line, c.text FROM chunks c "
                           "JOIN notes n ON n.id = c.note_id WHERE c.id = ?", (f.chunk_id,)).fetchone()
        shared = [t for t in terms if f.note_id in owned.get(t, ())]
        overlap = round(sum(weights[t] for t in shared) / total, 3)
        cosine = f.scores.get("vector")
        if cosine is None and "vector" in lists:
            cosine = nearest_chunk(reader, vector, f.note_id) if vector is not None else None
        near = (cosine is not None and cosine >= NEAR_DUPLICATE_COSINE and overlap >= NEAR_DUPLICATE_OVERLAP) or \
            ("vector" not in lists and overlap >= NEAR_DUPLICATE_OVERLAP_ALONE)
        found = SimilarNote(row[0], row[1], row[2], row[3], row[4],
                            make_snippet(" ".join(reading_text(row[5]).split()), shared),
                            round(f.score, 6), None if cosine is None else round(float(cosine), 4), overlap,
                            shared, near)
        strong = overlap >= MIN_OVERLAP or (z_of.get(f.note_id) or 0.0) >= MIN_Z
        (results if strong else weak).append(found)
    results = results[:limit]
    if not results and weak:
        results = weak[:min(WEAK_GUESSES, limit)]
        warnings.append(f"nothing clearly like it: the {len(results)} closest notes, all weak matches")
    return SimilarResponse(path, mode, terms, round((time.perf_counter() - t0) * 1000, 2), warnings, results)


def read_source(reader: Reader, note: str | None, text: str | None) -> Source:
    """The note's (or the draft's) text, its first SOURCE_CHARS."""
    source_id = None
    if note is not None:
        path = indexed_path(reader.conn, reader.config, note)
        source_id = reader.conn.execute("SELECT id FROM notes WHERE path = ?", (path,)).fetchone()[0]
        rows = reader.conn.execute("SELECT id, text FROM chunks WHERE note_id = ? ORDER BY start_line",
                                   (source_id,)).fetchall()
        chunk_ids: tuple[int, ...] = tuple(cid for cid, _ in rows)
        text = "\n".join(t for _, t in rows)
    else:
        path, chunk_ids = "text", ()
    text = (text or "")[:SOURCE_CHARS]
    if not text.strip() and not chunk_ids:
        raise UsageValueError("nothing to compare: the text is empty")
    return Source(path, source_id, chunk_ids, text)


def key_terms(reader: Reader, text: str) -> tuple[list[str], dict[str, float]]:
    """The source's most distinctive words (tf x idf) and each one's idf."""
    reader.segmenter.prepare([text])
    counts = Counter(t for t in reader.segmenter.segment(text) if t not in STOP_WORDS and len(t) > 1)
    candidates = [t for t, _ in counts.most_common(CANDIDATE_TERMS)]
    freqs = document_frequencies(reader.conn, candidates)
    scored = {t: counts[t] * idf(freqs.df.get(t, 0), freqs.chunks) for t in candidates if freqs.df.get(t)}
    terms = sorted(scored, key=lambda t: -scored[t])[:KEY_TERMS]
    return terms, {t: idf(freqs.df[t], freqs.chunks) for t in terms}


def note_terms(conn, note_ids: list[int], terms: list[str]) -> dict[str, set[int]]:
    """term -> the notes (of ``note_ids``) that hold it anywhere."""
    if not note_ids:
        return {}
    marks = ",".join("?" * len(note_ids))
    return {t: {n for (n,) in conn.execute(
        f"SELECT DISTINCT c.note_id FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
        f"WHERE chunks_fts MATCH ? AND c.note_id IN ({marks})", [quote_term(t), *note_ids])} for t in terms}


def source_vector(reader: Reader, chunk_ids: list[int], text: str) -> np.ndarray | None:
    """A note: the normalised mean of its chunks' vectors (None when none has
    one yet); a draft: its first ``EMBED_CHARS`` embedded as a passage."""
    if not chunk_ids:
        return reader.embedder.embed_passages([text[:EMBED_CHARS]])[0]
    vectors = reader.vectors()
    rows = np.flatnonzero(np.isin(vectors.ids, np.asarray(chunk_ids, dtype=np.int64)))
    if len(rows) == 0:
        return None
    mean = vectors.matrix[rows].mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 and math.isfinite(norm) else None


def nearest_chunk(reader: Reader, vector: np.ndarray, note_id: int) -> float | None:
    """The cosine of a note's nearest chunk (a note the vector list did not reach)."""
    ids = [cid for (cid,) in reader.conn.execute("SELECT id FROM chunks WHERE note_id = ?", (note_id,))]
    vectors = reader.vectors()
    rows = np.flatnonzero(np.isin(vectors.ids, np.asarray(ids, dtype=np.int64)))
    return float((vectors.matrix[rows] @ vector).max()) if len(rows) else None
