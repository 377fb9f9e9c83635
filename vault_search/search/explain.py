"""Stage 11: the trace of a search (``--explain``): its FTS query, filters,
the lists that voted and the weight each got, the side queries, name
matches, and for each result its rank and score in every list that voted
for it, its fused, judged and boosted scores, and its evidence."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..results import Explain, ExplainRank
from .boosts import Boosted, NameMatch
from .lists import Found
from .plan import QueryPlan
from .relevance import Assessment
from .rows import Ranked, round3, sig6, sig6_or_none
from .weights import Weights


@dataclass(frozen=True)
class Trace:
    """What the stages inside the snapshot leave for the explanation."""
    found: Found
    weights: Weights
    named: list[NameMatch]
    assessed: Assessment
    boosted: Boosted
    han_share: float | None    # hybrid: the notes' share of Han (Reader.han_share)


def explain(plan: QueryPlan, trace: Trace, rows: list[Ranked]) -> Explain:
    """Stage 11: the trace of a search that ranked ``rows`` (see the module)."""
    translation = plan.translation
    return Explain(
        fts_match=plan.fq.match, terms=plan.fq.terms, filters=plan.filters.sql()[0] if plan.filters else None,
        rrf_k=trace.weights.k, weights={name: round(w, 4) for name, w in trace.weights.lists.items()},
        term_coverage=None if plan.coverage is None else round(plan.coverage, 4),
        untranslated_coverage=None if translation is None or translation.untranslated is None
        else round(translation.untranslated, 4),
        name_matches={m.path: m.kind for m in trace.named}, ranks=[explain_row(trace, row) for row in rows],
        translated_match=translation.query.match if translation else None,
        translated_text=translation.text if translation and translation.blend > 0 else None,
        foreign_query=plan.foreign, notes_han_share=None if trace.han_share is None else round(trace.han_share, 3),
        boost_settings=trace.boosted.explain_fields(), syntax=plan.syntax.to_dict() if plan.syntax else None,
        corrections={c.word: f"{c.kind}: {c.to}" for c in plan.corrections})


def explain_row(trace: Trace, row: Ranked) -> ExplainRank:
    """One result's way to its place."""
    f, note = row.fused, row.fused.note_id
    age, prior, proof = trace.boosted.ages.get(note), trace.boosted.priors.get(note), trace.assessed.proofs.get(note)
    return ExplainRank(
        path=row.result.path, ranks=dict(f.ranks), scores={name: sig6(s) for name, s in f.scores.items()},
        fused_score=sig6(f.score), rerank_score=f.rerank, blended_score=sig6_or_none(f.blended),
        name_match=f.name_match, date=age.date if age else None, modified=age.modified if age else None,
        recency_factor=sig6(age.factor) if age else None, relevance=round3(f.relevance),
        boost_value=prior.value if prior else None, boost_factor=sig6(prior.factor) if prior else None,
        evidence={k: round(v, 3) for k, v in asdict(proof).items() if v is not None} if proof else None)
