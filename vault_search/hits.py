"""``ChunkHit``: one note in one retriever's list, the currency every list
(keyword, vector, latent, title) hands the fusion. A module of its own so
that the retrievers (keyword.py, vector.py) and the fusion (fusion.py)
share it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ChunkHit:
    chunk_id: int
    note_id: int
    score: float   # -bm25 or cosine: higher is better
    rank: int      # 1-based rank among chunks
    z: float | None = None   # vector hits: standard deviations above the query's typical chunk
    stand_in: bool = False   # holds a waiting note's place in the vector list (search.lists.completed_vector_list)
