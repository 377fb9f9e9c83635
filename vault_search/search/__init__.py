"""The query path: one search, top to bottom.

    response = run(index, "数据库 索引", SearchOptions(limit=5))

``run`` calls these stages in this order, one module each; every stage is a
function of the ``QueryPlan`` (what stage 2 decided about the query) and
the previous stage's record, and can be called (and tested) alone. Stages
2-8 read one snapshot of the index (``Reader.snapshot``), whatever a writer
commits meanwhile.

1. prepare     plan.py          clean the text, check the options, build the
                                filters, load the judge when one is asked for
2. plan        plan.py          mode, the query's words and their document
                                frequencies, coverage, a question in the
                                notes' other script?, its translation
                                (crosslingual.py) or its Chinese phrases
3. lists       lists.py         keyword, translated, vector, latent
                                and title lists
4. weights     weights.py       the ranking model: each list's weight and the
                                rank constant; then reciprocal-rank fusion
                                (fusion.py)
5. names       boosts.py        a query that is a note's name ranks it first
6. relevance   relevance.py     each note's evidence, and the cut
7. boosts      boosts.py        recency (a half-life) and frontmatter priors,
                                when asked for
8. rows        rows.py          each note's chunk as a ``SearchResult``
9. rerank      rows.py          an LLM judges the head, when asked for
10. page       rows.py          the page, and the notes one link away, whole
                                notes or the passages that fit a token budget
11. explain    explain.py       each result's ranks, scores and evidence, when
                                asked for
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..fusion import rrf
from ..options import SearchOptions
from ..results import SearchResponse
from .boosts import NameMatch, apply_boosts, name_matches, names_first
from .explain import Trace, explain
from .lists import retriever_lists
from .plan import plan_query, prepare
from .relevance import assess, evidence
from .rows import make_page, rerank, rerank_candidates, result_rows
from .weights import QueryFeatures, fusion_weights

if TYPE_CHECKING:
    from ..hits import ChunkHit
    from ..reader import Reader
    from ..rerank import RerankSettings

__all__ = ["run", "fusion_inputs"]


def run(reader: Reader, query: str, options: SearchOptions | None = None,
        rerank_settings: RerankSettings | None = None, *, now: dt.datetime | None = None) -> SearchResponse:
    """Search ``reader``'s index (an ``Index``; the stages above).
    ``rerank_settings``: the judge's endpoint (default: the environment's);
    ``now``: the time recency is measured at (default: when it is measured)."""
    started = time.perf_counter()
    request = prepare(query, options or SearchOptions(), reader.config, rerank_settings)        # 1
    with reader.snapshot():
        plan = plan_query(reader, request)                                                    # 2
        found = retriever_lists(reader, plan)                                                 # 3
        weights = fusion_weights(plan.features(found.lists), plan.options)                    # 4
        fused = rrf(found.lists, weights.lists, weights.k, weights.score_share)
        fused, named = names_first(reader.conn, plan, fused)                                  # 5
        assessed = assess(reader.conn, plan, found.lists, fused, reader.segmenter)            # 6
        boosted = apply_boosts(reader, plan, assessed.fused, now)                             # 7
        rows = result_rows(reader, plan, boosted.fused[:plan.keep])                           # 8
        candidates = rerank_candidates(reader.conn, rows[:plan.judge.top_n]) if plan.judge else []
        trace = Trace(found, weights, named, assessed, boosted,
                      reader.han_share() if plan.options.explain and plan.mode == "hybrid" else None)
    rows, problems = rerank(plan, rows, candidates, reader.conn)                              # 9
    rows = rows[:plan.limit]
    page = make_page(reader, plan, rows)                                                      # 10
    return SearchResponse(
        query=request.text, mode=plan.mode, took_ms=round((time.perf_counter() - started) * 1000, 2),
        warnings=[*plan.fq.warnings, *found.warnings, *assessed.warnings, *boosted.warnings, *problems,
                  *page.warnings],
        results=page.results, explain=explain(plan, trace, rows) if plan.options.explain else None,   # 11
        terms=plan.fq.terms, corrections={c.word: c.to for c in plan.corrections},
        tokens=page.tokens, token_budget=page.token_budget, token_counter=page.token_counter,
        guesses=assessed.guesses and bool(page.results))


@dataclass(frozen=True)
class FusionInputs:
    """What the ranking model decides on, for one query: its features, the
    lists that voted, the notes its name is (stages 2, 3 and 5's names) and
    each listed note's relevance (stage 6's evidence, which no weight moves)."""
    features: QueryFeatures
    lists: dict[str, list[ChunkHit]]
    named: list[NameMatch]
    relevance: dict[int, float]


def fusion_inputs(reader: Reader, query: str, options: SearchOptions | None = None) -> FusionInputs:
    """Stages 1-3 as ``run`` runs them, and the notes stage 5 puts first: a
    fit of the ranking model (benchmarks/fit.py) re-fuses these under other
    parameters without searching again. ``rrf`` of the lists with
    ``fusion_weights(features, options)``, then ``boosts.put_first`` of the
    named notes, then ``relevance.relevant`` of its head, is ``run``'s order."""
    request = prepare(query, options or SearchOptions(), reader.config)
    with reader.snapshot():
        plan = plan_query(reader, request)
        found = retriever_lists(reader, plan)
        every = rrf(found.lists, {}, 1.0)
        proofs = evidence(reader.conn, plan, every, found.lists, reader.segmenter)
        return FusionInputs(plan.features(found.lists), found.lists, name_matches(reader.conn, plan),
                            {note: proof.answers for note, proof in proofs.items()})   # what the cut weighs
