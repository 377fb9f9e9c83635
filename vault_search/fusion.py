"""Reciprocal-rank fusion of per-note ranked lists."""

from __future__ import annotations

from dataclasses import dataclass, field

from .keyword import ChunkHit

# Rank constant of Cormack, Clarke & Büttcher (SIGIR 2009); larger values
# flatten the difference between top ranks. See README "Hybrid" for the
# measurements behind the defaults used by ``Index.search``.
RRF_K = 60


@dataclass
class Fused:
    note_id: int
    score: float
    chunk_id: int                       # the chunk that represents the note
    ranks: dict[str, int] = field(default_factory=dict)      # retriever -> 1-based note rank
    scores: dict[str, float] = field(default_factory=dict)   # retriever -> its own score
    chunks: dict[str, int] = field(default_factory=dict)     # retriever -> its best chunk


def rrf(lists: dict[str, list[ChunkHit]], weights: dict[str, float] | None = None, k: float = RRF_K) -> list[Fused]:
    """Fuse per-note lists (each note once, best first) by weighted RRF.

    score(note) = Σ weight_r / (k + rank_r(note)). The representative chunk
    is the one the best-ranking retriever chose (ties go to the first list,
    so keyword hits keep the snippet that shows the query's words).
    """
    weights = weights or {}
    fused: dict[int, Fused] = {}
    for name, hits in lists.items():
        w = weights.get(name, 1.0)
        for rank, hit in enumerate(hits, 1):
            f = fused.get(hit.note_id)
            if f is None:
                f = fused[hit.note_id] = Fused(hit.note_id, 0.0, hit.chunk_id)
            f.score += w / (k + rank)
            f.ranks[name] = rank
            f.scores[name] = hit.score
            f.chunks[name] = hit.chunk_id
    for f in fused.values():
        best = min(f.ranks, key=lambda name: (f.ranks[name], list(lists).index(name)))
        f.chunk_id = f.chunks[best]
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values())))
