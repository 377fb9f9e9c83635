"""Ranking metrics over lists of document ids (binary or graded relevance).

Relevance grades come from qrels; a grade of 0 (or absence) is not relevant.
A query with no relevant document scores 0 on every metric (trec_eval leaves
such queries out instead: ``load_beir`` already drops them).
"""

from __future__ import annotations

import math


def order_run(scored: list[tuple[str, float]]) -> list[str]:
    """Doc ids ranked the way trec_eval ranks a run: by score, highest first,
    ties broken by doc id in descending order (so a tie never depends on the
    order the retriever happened to list them in)."""
    return [d for d, _ in sorted(scored, key=lambda pair: (pair[1], pair[0]), reverse=True)]


def ndcg_at_k(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    """Graded nDCG (gain = grade, discount log2(rank + 1)), as BEIR computes it."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at_k(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    wanted = {d for d, g in relevant.items() if g > 0}
    if not wanted:
        return 0.0
    return len(set(ranked[:k]) & wanted) / len(wanted)


def hit_at_k(ranked: list[str], relevant: dict[str, int], k: int) -> bool:
    """Whether any relevant document is in the top ``k``."""
    return any(relevant.get(d, 0) > 0 for d in ranked[:k])


def mrr_at_k(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    for i, d in enumerate(ranked[:k]):
        if relevant.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default method)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
