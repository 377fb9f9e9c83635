"""Reciprocal-rank fusion of per-note ranked lists."""

from __future__ import annotations

from dataclasses import dataclass, field

from .keyword import ChunkHit

# Defaults chosen with benchmarks/tune_fusion.py: the best mean nDCG@10 over
# five runs on the shared sets (scifact; xquad zh, en, en->zh, zh->en) among
# k 5-20, depth 50/100, keyword base weight 1-2 (README "Hybrid").
# Rank constant (Cormack, Clarke & Büttcher, SIGIR 2009, use 60); larger
# values flatten the difference between top ranks; 60 measured 0.01 worse.
RRF_K = 10
# Notes each retriever contributes to the fusion.
FUSION_DEPTH = 100
# The keyword list's base weight (the vector list's is 1): BM25 is the
# better half on scifact and xquad alike, and 1.5 beat 1.0 on the mean.
KEYWORD_BASE_WEIGHT = 1.5


# Coverage (IDF-weighted share of the query's words the index has) from
# which the keyword list keeps its full weight in the hybrid.
FULL_COVERAGE = 0.8


def keyword_weight(coverage: float, base: float = 1.0) -> float:
    """The keyword list's RRF weight: its base weight times the square of the
    share of query words found in the index, counted as full from
    FULL_COVERAGE up. Same-language queries keep 1 (a scientific claim or a
    question with a rare word or a typo the notes lack is still in their
    language); a question in another language than the notes (coverage
    0.03-0.3) leaves ranking to the vectors. The square was measured against
    fixed weights 0.3-1.0 with benchmarks/tune_fusion.py (the only setting
    better than both halves on all four xquad runs); FULL_COVERAGE against the
    plain square on SciFact (0.711 -> 0.716) and the dev set (unchanged)."""
    return base * min(1.0, coverage / FULL_COVERAGE) ** 2


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
    relevance: float | None = None      # search.Evidence.relevance, 1.0 for a name match


def rrf(lists: dict[str, list[ChunkHit]], weights: dict[str, float] | None = None, k: float = RRF_K) -> list[Fused]:
    """Fuse per-note lists (each note once, best first) by weighted RRF.

    score(note) = Σ weight_r / (k + rank_r(note)). The representative chunk
    is the one the best-ranking retriever chose (ties go to the first list,
    so keyword hits keep the snippet that shows the query's words).
    """
    weights = weights or {}
    order = {name: i for i, name in enumerate(lists)}
    fused: dict[int, Fused] = {}
    for name, hits in lists.items():
        w = weights.get(name, 1.0)
        for rank, hit in enumerate(hits, 1):
            f = fused.get(hit.note_id)
            if f is None:
                f = fused[hit.note_id] = Fused(hit.note_id, 0.0, hit.chunk_id)
            f.score += w / (k + rank)
            if hit.stand_in:
                continue   # a place held for a note the list cannot see: it adds to the score only
            f.ranks[name] = rank
            f.scores[name] = hit.score
            f.chunks[name] = hit.chunk_id
    for f in fused.values():
        best = min(f.ranks, key=lambda name: (f.ranks[name], order[name]))
        f.chunk_id = f.chunks[best]
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values())))
