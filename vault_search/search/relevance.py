"""Stage 6: how much of the query each note answers, and the cut.

Unlike BM25 or RRF scores, a note's ``relevance`` (0-1) means the same for
every query: the largest of its ``Evidence`` (the IDF-weighted share of the
query's words its matched chunks hold, the same counting translations, the
calibrated vector evidence, how alike its name is). ``--min-score`` cuts on
it; by default the hybrid keeps what answers the query well, or only a few
best guesses when nothing does (``relevant``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from indexer.errors import UsageValueError

from ..fusion import Fused
from ..hits import ChunkHit
from ..keyword import chunks_containing, document_frequencies, idf, term_share
from ..options import SearchOptions

if TYPE_CHECKING:
    from .plan import QueryPlan

# Calibrated vector evidence: a chunk this many standard deviations above the
# query's typical chunk is no evidence (off-topic questions reach 3-4.5 on a
# vault that cannot answer them), and this many is full evidence.
Z_NOISE, Z_SURE = 3.5, 6.5
# A translated word is weaker evidence than the query's own word.
TRANSLATED_TRUST = 0.8
# The hybrid's default --min-score: below it a note is a neighbour, not an answer.
DEFAULT_MIN_RELEVANCE = 0.15
EVIDENCE_DEPTH = 4        # notes weighed per result asked for ...
MIN_EVIDENCE_NOTES = 40   # ... and at least this many
# ... when some note's relevance reaches STRONG_RELEVANCE; otherwise the
# query gets only its WEAK_LIMIT best notes.
STRONG_RELEVANCE = 0.4
WEAK_LIMIT = 3


@dataclass
class Assessment:
    """Stage 6's answer."""
    fused: list[Fused]                  # the notes kept, each with its relevance
    proofs: dict[int, Evidence]         # note id -> its evidence (the head weighed)
    warnings: list[str] = field(default_factory=list)


def assess(conn: sqlite3.Connection, plan: QueryPlan, lists: dict[str, list[ChunkHit]],
           fused: list[Fused]) -> Assessment:
    """Stage 6: the head's evidence (``evidence_head``, ``evidence``), and the
    cut (``cut``)."""
    head = evidence_head(plan, fused)
    return cut(plan, head, evidence(conn, plan, head, lists))


def evidence_head(plan: QueryPlan, fused: list[Fused]) -> list[Fused]:
    """The notes whose relevance is weighed: a note past EVIDENCE_DEPTH x the
    rows kept would need most of the head cut to show, and each one costs lookups."""
    return fused[:max(EVIDENCE_DEPTH * plan.keep, MIN_EVIDENCE_NOTES)]


def cut(plan: QueryPlan, head: list[Fused], proofs: dict[int, Evidence]) -> Assessment:
    """Each note's relevance set, and the notes below the plan's cut
    (``min_score``) left out, with the warning of a weak default cut."""
    floor = min_score(plan.options, plan.mode)
    kept = relevant(head, proofs, floor)
    weak = weak_warning(kept, floor, plan.limit)
    return Assessment(kept, proofs, [weak] if weak else [])


@dataclass(frozen=True)
class Evidence:
    """How much of the query a note answers, on scales that mean the same for
    every query (unlike BM25 or RRF scores): ``relevance`` is the largest."""
    keyword: float = 0.0      # IDF-weighted share of the query's words in the note's matched chunks
    translated: float = 0.0   # share of the query's words found as themselves or as a translation
    vector: float = 0.0       # 0 at Z_NOISE standard deviations above the query's typical chunk, 1 at Z_SURE
    name: float = 0.0         # how alike the query and the note's name are (title list, Dice)

    @property
    def relevance(self) -> float:
        return max(self.keyword, TRANSLATED_TRUST * self.translated, self.vector, self.name)


def evidence(conn: sqlite3.Connection, plan: QueryPlan, fused: list[Fused],
             lists: dict[str, list[ChunkHit]]) -> dict[int, Evidence]:
    """note id -> its ``Evidence`` (from each chunk a retriever matched).
    A query of function words only ("how to", "的的") has no keyword evidence."""
    if not fused:
        return {}
    fq, translation, freqs = plan.fq, plan.translation, plan.freqs
    chunk_ids = sorted({c for f in fused for c in (f.chunk_id, *f.chunks.values())})
    keyword = term_share(conn, fq.terms, chunk_ids, freqs) if fq.terms and not fq.only_stop_words else {}
    found: dict[str, set[int]] = {}
    specific: dict[str, float] = {}
    if translation is not None:
        words = list(dict.fromkeys([*fq.terms, *(w for ws in translation.sources.values() for w in ws)]))
        # The query's own words were counted in stage 2 and the translations' chunks
        # read when they were chosen (``ChunkSets``): only the rest is looked up.
        held = translation.chunks
        known = {**(freqs.df if freqs else {}), **{w: len(c) for w, c in held.items()}}
        counted = document_frequencies(conn, [w for w in words if w not in known])
        df = {**known, **counted.df}
        found = chunks_containing(conn, [w for w in words if w not in held], chunk_ids, df)
        wanted = set(chunk_ids)
        found.update({w: set(c & wanted) for w, c in held.items()})
        specific = {w: idf(n, counted.chunks) / idf(0, counted.chunks) for w, n in df.items()}

    def credit(term: str, chunk: int) -> float:
        """How well ``chunk`` answers one query word: the most specific of the
        word and its translations that it contains (IDF over the IDF of a word
        no chunk has), so "use" or "type" vouch for little."""
        options = [term, *translation.sources.get(term, ())] if translation else [term]
        return max((specific.get(w, 0.0) for w in options if chunk in found.get(w, ())), default=0.0)

    z = {h.note_id: h.z for h in lists.get("vector", []) if h.z is not None}
    alike = {h.note_id: h.score for h in lists.get("title", [])}
    out = {}
    for f in fused:
        chunks = {f.chunk_id, *f.chunks.values()}
        translated = 0.0
        if translation is not None and fq.terms:
            translated = max(sum(credit(t, c) for t in fq.terms) for c in chunks) / len(fq.terms)
        vector = 0.0
        if f.note_id in z:
            vector = min(max((z[f.note_id] - Z_NOISE) / (Z_SURE - Z_NOISE), 0.0), 1.0)
        out[f.note_id] = Evidence(max((keyword.get(c, 0.0) for c in chunks), default=0.0), translated, vector,
                                  alike.get(f.note_id, 0.0))
    return out


def min_score(options: SearchOptions, mode: str) -> float | None:
    """The relevance a result needs: ``options.min_score``; else, in the hybrid
    (which would otherwise fill every page with vector neighbours), None: the
    default cut of ``relevant``; else 0."""
    if options.min_score is not None:
        if not 0 <= options.min_score <= 1:
            raise UsageValueError(f"min_score must be between 0 and 1, got {options.min_score}")
        return options.min_score
    return None if mode == "hybrid" else 0.0


def relevant(fused: list[Fused], proofs: dict[int, Evidence], floor: float | None) -> list[Fused]:
    """Each note's relevance set (1.0 for a name match), and the
    notes below ``floor`` left out. ``floor`` None is the hybrid's default:
    DEFAULT_MIN_RELEVANCE when some note answers the query well (relevance
    >= STRONG_RELEVANCE), else only the WEAK_LIMIT best notes, whatever their
    relevance: a query the vault cannot clearly answer (another language,
    another subject) gets a few guesses, not a page of neighbours."""
    scored = [replace(f, relevance=1.0 if f.name_match else proofs[f.note_id].relevance
                      if f.note_id in proofs else 0.0) for f in fused]
    if floor is None:
        if max((f.relevance or 0.0 for f in scored), default=0.0) < STRONG_RELEVANCE:
            return scored[:WEAK_LIMIT]
        floor = DEFAULT_MIN_RELEVANCE
    return [f for f in scored if (f.relevance or 0.0) >= floor]


def weak_warning(fused: list[Fused], floor: float | None, limit: int) -> str | None:
    """The warning of a default hybrid search that no note answers clearly."""
    if floor is not None or not fused or limit <= WEAK_LIMIT:
        return None
    if max(f.relevance or 0.0 for f in fused) >= STRONG_RELEVANCE:
        return None
    return (f"no note answers this clearly (best relevance {max(f.relevance or 0.0 for f in fused):.2f}): "
            f"only the {WEAK_LIMIT} best guesses are shown; --min-score 0 shows more")
