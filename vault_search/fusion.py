"""Reciprocal-rank fusion of per-note ranked lists: the pure function. What
weight each list gets, and the rank constant, are the ranking model's
(``search.weights``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .hits import ChunkHit

TIE_DIGITS = 12   # fused scores that agree to this many decimals are tied


@dataclass
class Fused:
    note_id: int
    score: float
    chunk_id: int                       # the chunk that represents the note
    ranks: dict[str, int] = field(default_factory=dict)      # retriever -> 1-based note rank
    scores: dict[str, float] = field(default_factory=dict)   # retriever -> its own score
    chunks: dict[str, int] = field(default_factory=dict)     # retriever -> its best chunk
    rerank: float | None = None         # the LLM judge's score, 0-10, when reranked
    blended: float | None = None        # position-aware blend of fused order and judge
    name_match: str | None = None       # "title", "alias" or "file": the query is this note's name
    relevance: float | None = None      # search.relevance.Evidence.relevance, 1.0 for a name match


def rrf(lists: dict[str, list[ChunkHit]], weights: dict[str, float], k: float,
        score_share: float = 0.0) -> list[Fused]:
    """Fuse per-note lists (each note once, best first) by weighted RRF,
    plus ``score_share`` of each list's own scores.

    score(note) = Σ weight_r × (1 / (k + rank_r(note)) + score_share ×
    scaled_r(note)), where scaled_r is list r's score of the note min-max
    scaled over the list (0 for its last note and for a note it lacks): a
    share of the score tells a clear first from a close one, which ranks
    alone cannot (Bruch et al., "An Analysis of Fusion Functions for Hybrid
    Retrieval", TOIS 2023). The representative chunk
    is the one the best-ranking retriever chose (ties go to the first list,
    so keyword hits keep the snippet that shows the query's words).
    """
    order = {name: i for i, name in enumerate(lists)}
    fused: dict[int, Fused] = {}
    for name, hits in lists.items():
        w = weights.get(name, 1.0)
        # Scaled over the list's own hits: a stand-in carries another list's score.
        own = [h.score for h in hits if not h.stand_in]
        lo = min(own, default=0.0)
        span = max(own, default=0.0) - lo or 1.0
        for rank, hit in enumerate(hits, 1):
            f = fused.get(hit.note_id)
            if f is None:
                f = fused[hit.note_id] = Fused(hit.note_id, 0.0, hit.chunk_id)
            f.score += w / (k + rank)
            if hit.stand_in:
                continue   # a place held for a note the list cannot see: it adds to its rank vote only
            if score_share:
                f.score += w * score_share * (hit.score - lo) / span
            f.ranks[name] = rank
            f.scores[name] = hit.score
            f.chunks[name] = hit.chunk_id
    for f in fused.values():
        best = min(f.ranks, key=lambda name: (f.ranks[name], order[name]))
        f.chunk_id = f.chunks[best]
    # Scores equal but for float rounding (1/14 + 1/35 against 1/10) are a tie,
    # broken by the best rank in any list, then by the order the notes came.
    return sorted(fused.values(), key=lambda f: (-round(f.score, TIE_DIGITS), min(f.ranks.values())))
