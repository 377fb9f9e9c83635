"""``similar NOTE`` and ``similar --text DRAFT``: the notes most like a note,
or like a text about to be written, each with a verdict.

An agent checks before writing a memory whether one already says it (read
before write); a person sees related notes the way Smart Connections shows
them. Two lists, fused by reciprocal rank like a search, order the notes:

- meaning: the source as a passage vector (a note: the mean of its chunks'
  vectors; a draft: embedded as a passage) against every chunk, each note by
  its nearest chunk;
- words: the source's most distinctive words (the highest tf x idf, up to
  ``KEY_TERMS``) as a keyword query. ``overlap`` is the IDF-weighted share
  of those words the note holds, ``shared`` which ones.

``similarity`` is how much of the source a note says: for each of the
source's chunks (a draft: its one vector) the cosine of the note's closest
chunk, averaged (``Yardstick.coverage``). Whether that is close is judged
against the vault itself, not a fixed number: the ``Yardstick`` measures the
same thing between each note (a sample of ``YARDSTICK_NOTES``) and its
nearest other note. With D = 1 - similarity (a distance) and D_vault the
median note's distance to its nearest neighbour, each note gets a verdict:

- ``near-duplicate`` (update that note instead of writing another): at most
  D_vault / ``GAP`` from the source, and standing out from the source's other
  neighbours: the notes this close to the source (there may be several
  copies) are each at most 1 / ``GAP`` as far as the next note that is not;
- ``related`` (link it): at least as close as ``RELATED_PERCENTILE`` percent
  of the vault's notes are to their own nearest neighbour, and as far above
  the source's median note as that level is above the vault's (a short
  Chinese draft stands close to every Chinese note: its kin must stand out);
- ``none``: neither. When no note is near-duplicate or related, the
  ``WEAK_GUESSES`` closest are listed with the warning "nothing clearly like
  it".

On a keyword-only index (no vectors) the verdicts come from the words alone:
near-duplicate with an overlap of at least ``NEAR_DUPLICATE_OVERLAP_ALONE``,
related from ``MIN_OVERLAP`` (benchmarks/README.md, "similar", has the
measurements behind every constant here). The source note itself is never listed.
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
    from .vector import ChunkNotes, VectorIndex

KEY_TERMS = 16             # the source's words searched for
CANDIDATE_TERMS = 80       # its most frequent words weighed by idf to choose them
SOURCE_CHARS = 20_000      # of a long note or draft, the part read
EMBED_CHARS = 2_000        # of a draft, the part embedded
DEPTH = 200                # chunks each list looks at
MAX_LIMIT = 100
WEAK_GUESSES = 3
SOURCE_ROWS = 64           # of a long note's chunks, the ones (evenly spaced) compared
# The notes whose nearest neighbour makes the vault's scale: on oldwinter-garden-zh (3,139
# notes) the median of 400 evenly spaced notes is within 0.001 of all notes'; measuring them takes 0.3 s.
YARDSTICK_NOTES = 400
# "Twice as close": made copies stand at most 0.49 of the next note's distance from their
# source and at most 0.42 of the vault's median nearest distance; the closest different notes on
# close topics (Minimal and Things Theme, Custom Statuses and Statuses) at 0.52 and 0.78 of the
# next's: a thin margin either side (benchmarks/README.md, "similar").
GAP = 2.0
# Related: as close as 90% of the notes are to their nearest neighbour. On both shared vaults
# every labelled close-topic pair but one passes, and the closest note to most unrelated texts does not.
RELATED_PERCENTILE = 10
# A keyword-only index has no vectors to measure the vault by: the words alone, hand-set on
# the sample vault (its near-duplicate pair holds 0.8 of the words, unrelated notes under 0.05).
NEAR_DUPLICATE_OVERLAP_ALONE = 0.8
MIN_OVERLAP = 0.05
VERDICTS = ("near-duplicate", "related", "none")


@dataclass
class SimilarNote:
    path: str
    title: str
    heading: str
    start_line: int            # the closest chunk's lines
    end_line: int
    snippet: str
    score: float               # the fused rank score: orders this list only
    similarity: float | None   # how much of the source the note says, 0-1 (None: no vectors)
    overlap: float             # IDF-weighted share of the source's key words the note holds, 0-1
    shared: list[str]          # ... which ones
    near_duplicate: bool       # verdict == "near-duplicate"
    verdict: str               # "near-duplicate" (update it), "related" (link it) or "none"


@dataclass
class SimilarResponse:
    source: str                # the note's path, or "text"
    mode: str                  # "hybrid" or "fts" (a keyword-only index)
    terms: list[str]           # the source's key words
    took_ms: float
    warnings: list[str] = field(default_factory=list)
    results: list[SimilarNote] = field(default_factory=list)
    verdict: str = "none"      # the best of the results' verdicts: "none" says nothing clearly like it
    # The similarity a verdict needs on this vault (null: a keyword-only index, or too few notes
    # to measure the vault by, where word overlap decides): near_duplicate
    # (the floor; a note must also stand out from the source's other neighbours) and related.
    levels: dict[str, float] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class Source(NamedTuple):
    """What ``similar`` compares against."""
    path: str                    # the note's path, or "text" for a draft
    note_id: int | None          # the note, never listed (None: a draft)
    chunk_ids: tuple[int, ...]   # the note's chunks
    text: str


class Measured(NamedTuple):
    """The vector side of a call: each note's similarity and verdict."""
    similarity: dict[int, float]   # note id -> similarity to the source
    verdicts: dict[int, str]       # note id -> "near-duplicate" or "related" (the others: "none")
    levels: dict[str, float]


def similar(reader: Reader, note: str | None = None, text: str | None = None, limit: int = 10) -> SimilarResponse:
    if (note is None) == (text is None):
        raise UsageValueError("similar needs a note or a text (--text), not both")
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageValueError(f"limit must be between 1 and {MAX_LIMIT}")
    t0 = time.perf_counter()
    conn = reader.conn
    source = read_source(reader, note, text)
    warnings: list[str] = []
    terms, weights = key_terms(reader, source.text)
    lists = {}
    if terms:
        hits = keyword_hits(conn, " OR ".join(quote_term(t) for t in terms), SearchFilters(), DEPTH)
        lists["fts"] = best_per_note([h for h in hits if h.note_id != source.note_id], DEPTH)
    measured, vector = None, None
    if reader.has_vectors():
        vector = source_vector(reader, list(source.chunk_ids), source.text)
        if vector is None:
            warnings.append("the note has no vectors yet (it waits for embedding): words only")
        else:
            from .vector import nearest_notes

            hits = nearest_notes(reader.vectors(), reader.chunk_notes(), vector, DEPTH, DEPTH)
            lists["vector"] = [h for h in hits if h.note_id != source.note_id]
            measured = measure(reader, source, vector)
    fused = rrf(lists, {}, ranking.MODEL.rrf_k)[:max(limit, WEAK_GUESSES) * 3]
    chunk_of = {f.note_id: f.chunk_id for f in fused}
    if measured and vector is not None:
        for note_id in measured.verdicts:   # a near-duplicate neither list reached
            chunk_of.setdefault(note_id, closest_chunk(reader, vector, note_id))
    owned = note_terms(conn, list(chunk_of), terms)
    total = sum(weights.values()) or 1.0
    found: list[SimilarNote] = []
    for note_id, chunk_id in chunk_of.items():
        shared = [t for t in terms if note_id in owned.get(t, ())]
        overlap = round(sum(weights[t] for t in shared) / total, 3)
        if measured is not None:
            cosine = measured.similarity.get(note_id)
            verdict = measured.verdicts.get(note_id, "none")
        else:
            cosine = None
            verdict = "near-duplicate" if overlap >= NEAR_DUPLICATE_OVERLAP_ALONE else \
                "related" if overlap >= MIN_OVERLAP else "none"
        score = next((f.score for f in fused if f.note_id == note_id), 0.0)
        found.append(similar_note(conn, chunk_id, score, cosine, overlap, shared, verdict))
    found.sort(key=lambda r: (VERDICTS.index(r.verdict), -r.score))
    results = [r for r in found if r.verdict != "none"][:limit]
    if not results:
        results = found[:min(WEAK_GUESSES, limit)]
        if results:
            warnings.append(f"nothing clearly like it: the {len(results)} closest notes, all weak matches")
    verdict = results[0].verdict if results else "none"
    return SimilarResponse(source.path, "hybrid" if reader.has_vectors() else "fts", terms,
                           round((time.perf_counter() - t0) * 1000, 2), warnings, results, verdict,
                           measured.levels if measured else None)


def similar_note(conn, chunk_id: int, score: float, cosine: float | None, overlap: float, shared: list[str],
                 verdict: str) -> SimilarNote:
    row = conn.execute("SELECT n.path, n.title, c.heading, c.start_line, c.end_line, c.text FROM chunks c "
                       "JOIN notes n ON n.id = c.note_id WHERE c.id = ?", (chunk_id,)).fetchone()
    return SimilarNote(row[0], row[1], row[2], row[3], row[4],
                       make_snippet(" ".join(reading_text(row[5]).split()), shared), round(score, 6),
                       None if cosine is None else round(float(cosine), 4), overlap, shared,
                       verdict == "near-duplicate", verdict)


def measure(reader: Reader, source: Source, vector: np.ndarray) -> Measured | None:
    """Every note's similarity to the source and, judged by the vault's
    yardstick, the verdict of those that have one (see the module); None
    when the vault has too few notes with vectors to measure it by."""
    yard = yardstick(reader)
    if len(yard.nearest) == 0:
        return None
    rows = yard.rows_of(source.note_id) if source.note_id is not None else vector[None, :]
    closeness = yard.coverage(rows if len(rows) else vector[None, :])
    keep = yard.note_ids != (source.note_id if source.note_id is not None else -1)
    note_ids, closeness = yard.note_ids[keep], closeness[keep]
    typical = 1.0 - yard.level(50)                      # the median note's distance to its nearest
    # Related stands as far above the source's bulk as the vault's related level stands above
    # the vault's: a short Chinese draft is close to every Chinese note, and its kin must be closer.
    related = yard.level(RELATED_PERCENTILE)
    related = max(related, float(np.median(closeness)) + related - yard.bulk)
    levels = {"near_duplicate": round(1.0 - typical / GAP, 4), "related": round(related, 4)}
    order = np.argsort(-closeness, kind="stable")
    distance = 1.0 - closeness[order]
    close = int(np.searchsorted(distance, typical / GAP, side="right"))
    copies = 0   # the most notes within the floor that all stand GAP times closer than the next
    for k in range(1, close + 1):
        if k == len(distance) or distance[k - 1] * GAP <= distance[k]:
            copies = k
    verdicts = {int(n): "near-duplicate" for n in note_ids[order[:copies]]}
    for i in order[copies:]:
        if closeness[i] < related:
            break
        verdicts[int(note_ids[i])] = "related"
    similarity = {int(n): float(c) for n, c in zip(note_ids, closeness)}
    return Measured(similarity, verdicts, levels)


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


def closest_chunk(reader: Reader, vector: np.ndarray, note_id: int) -> int:
    """The id of a note's chunk closest to the source's vector."""
    ids = np.asarray([cid for (cid,) in reader.conn.execute("SELECT id FROM chunks WHERE note_id = ?",
                                                               (note_id,))], dtype=np.int64)
    vectors = reader.vectors()
    rows = np.flatnonzero(np.isin(vectors.ids, ids))
    return int(vectors.ids[rows[np.argmax(vectors.matrix[rows] @ vector)]]) if len(rows) else int(ids[0])


class Yardstick:
    """What ``similar`` measures closeness by on this vault, per state of the
    vectors and chunks (``Reader.yardsticks``): the chunk matrix sorted by note,
    and ``nearest``, the closeness (``coverage``) of a sample of notes to their
    nearest other note, sorted: the vault's own scale of "as close as notes get"."""

    def __init__(self, vectors: VectorIndex, chunk_notes: ChunkNotes):
        self.vectors, self.chunk_notes = vectors, chunk_notes   # held: the cache key is their identity
        notes = chunk_notes.notes_of(vectors.ids)
        order = np.argsort(notes, kind="stable")
        order = order[notes[order] >= 0]                        # rows of chunks deleted since the matrix
        self.row_notes = notes
        self.matrix = vectors.matrix[order]
        self.note_ids, self.starts = np.unique(notes[order], return_index=True)
        self.nearest = self._nearest()

    def coverage(self, rows: np.ndarray) -> np.ndarray:
        """For vectors ``rows`` of a source (its chunks, or a draft): per note
        (``note_ids``), the mean over the rows of each row's closest chunk of that note."""
        if len(self.note_ids) == 0:
            return np.zeros(0, dtype=np.float32)
        rows = rows[np.linspace(0, len(rows) - 1, min(len(rows), SOURCE_ROWS)).astype(int)]
        return np.maximum.reduceat(rows @ self.matrix.T, self.starts, axis=1).mean(axis=0)

    def rows_of(self, note_id: int) -> np.ndarray:
        return self.vectors.matrix[self.row_notes == note_id]

    def _nearest(self) -> np.ndarray:
        """Up to ``YARDSTICK_NOTES`` notes, evenly spaced by id: each one's
        coverage by its nearest other note, sorted (``bulk``: the median of
        each one's median coverage, how close notes that are not kin stand)."""
        picked = np.linspace(0, len(self.note_ids) - 1, min(len(self.note_ids), YARDSTICK_NOTES)).astype(int)
        self.bulk = 0.0
        if len(self.note_ids) < 2:
            return np.zeros(0)
        out, medians = [], []
        for i in np.unique(picked):
            closeness = self.coverage(self.rows_of(int(self.note_ids[i])))
            closeness[i] = -np.inf
            out.append(float(closeness.max()))
            medians.append(float(np.median(closeness)))
        self.bulk = float(np.median(medians))
        return np.sort(np.asarray(out))

    def level(self, percentile: float) -> float:
        return float(np.percentile(self.nearest, percentile)) if len(self.nearest) else math.inf


def yardstick(reader: Reader) -> Yardstick:
    vectors, notes = reader.vectors(), reader.chunk_notes()
    return reader.yardsticks.get((id(vectors), id(notes)), lambda: Yardstick(vectors, notes))
