"""Vector retrieval: exact top-k by dot product over the chunk matrix."""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.store import vectors_state
from indexer.vectors import check_files, load_files, matrix_from_db

from .keyword import ChunkHit

# Hubness (CSLS, Conneau et al. 2018, "Word translation without parallel
# data"): some chunks (tables, lists of links, boilerplate) lie near almost
# every query, and crowd the vector list of a question asked in the notes'
# other language, whose true match is only a little nearer. CSLS ranks by
# 2 cos(q, c) - r(q) - r(c), where r is the mean cosine to the
# HUB_NEIGHBOURS nearest rows; r(q) is the same for every chunk of one query,
# so the ranking is cos(q, c) - r(c) / 2 (CSLS_WEIGHT, CSLS's own, not tuned).
HUB_NEIGHBOURS = 10
HUB_REFERENCE = 8192   # rows a chunk is compared with: all up to this many, else a fixed sample
# ... of at most this many multiply-adds for the whole matrix (about 1 s on one
# core of this project's machine; 100k chunks get a sample of 1,024), and at least 1,024.
HUB_WORK = 4e10
CSLS_WEIGHT = 0.5


@dataclass
class VectorTop:
    """The nearest chunks of one query, and how the query's similarities to
    the whole matrix are spread (for a calibrated score, ``evidence``)."""
    pairs: list[tuple[int, float]]   # (chunk id, cosine), best first
    mean: float                      # the query's mean cosine over the rows searched
    std: float                       # ... and its standard deviation

    def z(self, i: int) -> float:
        """How many standard deviations pair ``i`` stands above the query's typical chunk."""
        return (self.pairs[i][1] - self.mean) / self.std if self.std > 0 else 0.0


class VectorIndex:
    """The chunk matrix in memory, checked against the db before use."""

    def __init__(self, ids: np.ndarray, matrix: np.ndarray, fingerprint: str, problem: str | None = None):
        self.ids = ids
        self.matrix = matrix
        self.fingerprint = fingerprint
        #: why the file was not used (the matrix then came from the db)
        self.problem = problem
        #: (sorted chunk ids, their hubness) of the matrix this one replaced, reused by id
        self.previous_hubness: tuple[np.ndarray, np.ndarray] | None = None
        self._hubness: np.ndarray | None = None
        self._hubness_lock = threading.Lock()

    def hubness(self) -> np.ndarray:
        """Each row's r (see CSLS_WEIGHT), computed on first use; rows of the
        matrix this one replaced keep theirs (the same chunk id is the same text)."""
        with self._hubness_lock:
            if self._hubness is None:
                self._hubness = hubness(self.matrix, self.ids, self.previous_hubness)
                self.previous_hubness = None
            return self._hubness

    def hubness_by_id(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(sorted chunk ids, hubness) when computed, for the next matrix."""
        if self._hubness is None:
            return None
        order = np.argsort(self.ids, kind="stable")
        return self.ids[order], self._hubness[order]

    @classmethod
    def load(cls, conn: sqlite3.Connection, index_dir: Path, fingerprint: str, dim: int) -> "VectorIndex":
        state = vectors_state(conn)
        problem = None
        if state and state.get("fingerprint") != fingerprint:
            problem = "vectors file was built by another model"
        else:
            try:
                loaded = load_files(index_dir)
            except (OSError, ValueError, EOFError) as exc:
                loaded, problem = None, f"vectors file unreadable or missing ({exc.__class__.__name__})"
            if loaded is not None:
                problem = check_files(index_dir, state, loaded)
                if problem is None:
                    return cls(loaded[0], loaded[1], fingerprint)
        # Never serve a file that disagrees with the db: use the db's copy.
        ids, matrix = matrix_from_db(conn, fingerprint, dim)
        return cls(ids, matrix, fingerprint, problem)

    def __len__(self) -> int:
        return len(self.ids)

    def top_chunks(self, query: np.ndarray, depth: int, allowed: np.ndarray | None = None) -> VectorTop:
        """The ``depth`` rows nearest ``query`` (cosine), and the spread of its similarities."""
        if len(self.ids) == 0:
            return VectorTop([], 0.0, 0.0)
        scores = self.matrix @ np.asarray(query, dtype=np.float32)
        # The spread over the whole matrix, filters or not: a filter that leaves
        # a dozen chunks must not make its best one look typical.
        mean, std = float(scores.mean()), float(scores.std())
        if allowed is not None:
            scores = np.where(np.isin(self.ids, allowed), scores, -np.inf)
        depth = min(depth, len(scores))
        top = np.argpartition(-scores, depth - 1)[:depth]
        top = top[np.argsort(-scores[top], kind="stable")]
        return VectorTop([(int(self.ids[i]), float(scores[i])) for i in top if np.isfinite(scores[i])], mean, std)


def hubness(matrix: np.ndarray, ids: np.ndarray,
            previous: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Each row's mean cosine to its HUB_NEIGHBOURS nearest other rows. Past
    HUB_REFERENCE rows they are sought in a fixed sample (HUB_WORK bounds its
    size), and the neighbours counted shrink in proportion (the 10 nearest of
    100k rows are about the nearest 1 of a sample of 8k). Rows found in ``previous`` (sorted
    ids, values) keep their value when at least half of the rows do."""
    n = len(matrix)
    out = np.full(n, np.nan, dtype=np.float32)
    if n < 2:
        return np.zeros(n, dtype=np.float32)
    if previous is not None and len(previous[0]):
        known_ids, known = previous
        at = np.minimum(np.searchsorted(known_ids, ids), len(known_ids) - 1)
        same = known_ids[at] == ids
        if same.mean() >= 0.5:
            out[same] = known[at[same]]
    todo = np.flatnonzero(np.isnan(out))
    if n - 1 <= HUB_REFERENCE:
        reference, k = np.arange(n), min(HUB_NEIGHBOURS, n - 1)
    else:
        size = int(min(HUB_REFERENCE, max(1024, HUB_WORK / (n * matrix.shape[1]))))
        reference = np.sort(np.random.default_rng(0).choice(n, size, replace=False))
        k = max(1, round(HUB_NEIGHBOURS * size / n))
    ref = matrix[reference]
    for start in range(0, len(todo), 1024):
        rows = todo[start:start + 1024]
        sims = matrix[rows] @ ref.T
        at = np.minimum(np.searchsorted(reference, rows), len(reference) - 1)
        own = reference[at] == rows   # a row is not its own neighbour
        sims[np.flatnonzero(own), at[own]] = -np.inf
        out[rows] = np.partition(sims, -k, axis=1)[:, -k:].mean(axis=1)
    return out


class ChunkNotes:
    """Every chunk's note, as two arrays sorted by chunk id: the vector list
    names the notes of a query's nearest chunks by array lookup instead of
    asking SQLite for 2,000 rows each query (``Index.chunk_notes`` keeps one
    per committed state of the index). A chunk id missing here has been
    deleted since the matrix was written: its row is dropped."""

    def __init__(self, chunk_ids: np.ndarray, note_ids: np.ndarray):
        self.chunk_ids = chunk_ids
        self.note_ids = note_ids

    @classmethod
    def load(cls, conn: sqlite3.Connection) -> "ChunkNotes":
        rows = conn.execute("SELECT id, note_id FROM chunks ORDER BY id").fetchall()
        pairs = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return cls(np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1]))

    def notes_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """The note of each chunk id, -1 for a chunk that is gone."""
        if len(self.chunk_ids) == 0:
            return np.full(len(chunk_ids), -1, dtype=np.int64)
        at = np.searchsorted(self.chunk_ids, chunk_ids)
        at = np.minimum(at, len(self.chunk_ids) - 1)
        return np.where(self.chunk_ids[at] == chunk_ids, self.note_ids[at], -1)


def vector_hits(chunk_notes: ChunkNotes, top: VectorTop) -> list[ChunkHit]:
    """Chunk hits with their note ids and z; rows whose chunk is gone are dropped."""
    if not top.pairs:
        return []
    ids = np.fromiter((cid for cid, _ in top.pairs), dtype=np.int64, count=len(top.pairs))
    notes = chunk_notes.notes_of(ids)
    hits, rank = [], 0
    for i, (cid, score) in enumerate(top.pairs):
        if notes[i] >= 0:
            rank += 1
            hits.append(ChunkHit(cid, int(notes[i]), score, rank, z=top.z(i)))
    return hits


def nearest_notes(vectors: VectorIndex, chunk_notes: ChunkNotes, query: np.ndarray, chunk_depth: int,
                  note_depth: int, allowed: np.ndarray | None = None, csls: bool = False) -> list[ChunkHit]:
    """The ``note_depth`` notes whose chunks are nearest ``query``, each by its
    best chunk among the ``chunk_depth`` nearest: what ``best_per_note`` of
    ``vector_hits`` gives (same ranks and z), computed on arrays so that a
    query builds a hit for the notes it returns only. ``csls``: rank by
    cosine less half the chunk's hubness (CSLS_WEIGHT); scores and z stay cosines."""
    ids = vectors.ids
    if len(ids) == 0 or note_depth <= 0:
        return []
    scores = vectors.matrix @ np.asarray(query, dtype=np.float32)
    mean, std = float(scores.mean()), float(scores.std())
    order = scores - CSLS_WEIGHT * vectors.hubness() if csls else scores
    if allowed is not None:
        order = np.where(np.isin(ids, allowed), order, -np.inf)
    depth = min(chunk_depth, len(order))
    top = np.argpartition(-order, depth - 1)[:depth]
    top = top[np.argsort(-order[top], kind="stable")]
    top = top[np.isfinite(order[top])]
    notes = chunk_notes.notes_of(ids[top])
    kept = notes >= 0
    ranks = np.cumsum(kept)          # rank among the chunks that still exist
    where = np.flatnonzero(kept)
    _, first = np.unique(notes[where], return_index=True)
    chosen = where[np.sort(first)][:note_depth]
    z = (scores[top[chosen]].astype(np.float64) - mean) / std if std > 0 else np.zeros(len(chosen))
    return [ChunkHit(int(ids[top[i]]), int(notes[i]), float(scores[top[i]]), int(ranks[i]), z=float(zi))
            for i, zi in zip(chosen, z)]


def allowed_chunk_ids(conn: sqlite3.Connection, where: str, params: list) -> np.ndarray:
    rows = conn.execute(f"SELECT c.id FROM chunks c JOIN notes n ON n.id = c.note_id WHERE {where}",
                        params).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
