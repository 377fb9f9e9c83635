"""Stage 6: how much of the query each note answers, and the cut.

Unlike BM25 or RRF scores, a note's ``relevance`` (0-1) means the same for
every query: the largest of its ``Evidence`` (the IDF-weighted share of the
query's words its matched chunks hold, and whether they hold them together,
the same counting translations, the calibrated vector evidence, how alike its
name is). ``--min-score`` cuts on
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
from ..keyword import chunks_containing, chunks_matching, document_frequencies, idf, term_share
from ..options import SearchOptions
from ..query import quote_term

if TYPE_CHECKING:
    from indexer.segment import Segmenter

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
    guesses: bool = False               # the default cut kept only best guesses: no note answers clearly


def assess(conn: sqlite3.Connection, plan: QueryPlan, lists: dict[str, list[ChunkHit]],
           fused: list[Fused], segmenter: Segmenter | None = None) -> Assessment:
    """Stage 6: the head's evidence (``evidence_head``, ``evidence``), and the
    cut (``cut``)."""
    head = evidence_head(plan, fused)
    return cut(plan, head, evidence(conn, plan, head, lists, segmenter))


def evidence_head(plan: QueryPlan, fused: list[Fused]) -> list[Fused]:
    """The notes whose relevance is weighed: a note past EVIDENCE_DEPTH x the
    rows kept would need most of the head cut to show, and each one costs lookups."""
    return fused[:max(EVIDENCE_DEPTH * plan.keep, MIN_EVIDENCE_NOTES)]


def cut(plan: QueryPlan, head: list[Fused], proofs: dict[int, Evidence]) -> Assessment:
    """Each note's relevance set, and the notes below the plan's cut
    (``min_score``) left out, with the warning of a weak default cut."""
    floor = min_score(plan.options, plan.mode)
    kept = relevant(head, proofs, floor)
    guesses = floor is None and bool(kept) and not answered(head, proofs)
    weak = weak_warning(kept, floor, plan.limit, bool(head), guesses)
    return Assessment(kept, proofs, [weak] if weak else [], guesses)


@dataclass(frozen=True)
class Evidence:
    """How much of the query a note answers, on scales that mean the same for
    every query (unlike BM25 or RRF scores): ``relevance`` is the largest."""
    keyword: float = 0.0      # IDF-weighted share of the query's words in the note's matched chunks
    translated: float = 0.0   # share of the query's words found as themselves or as a translation
    vector: float = 0.0       # 0 at Z_NOISE standard deviations above the query's typical chunk, 1 at Z_SURE
    name: float = 0.0         # how alike the query and the note's name are (title list, Dice)
    together: float | None = None   # ``keyword`` counting the words together as one unit more (keyword_evidence)

    @property
    def relevance(self) -> float:
        """The result's ``relevance``: what ``--min-score`` cuts on."""
        keyword = self.keyword if self.together is None else self.together
        return max(keyword, TRANSLATED_TRUST * self.translated, self.vector, self.name)

    @property
    def answers(self) -> float:
        """What the hybrid's default cut weighs: the same, the words counted
        apart (that a note holds the query's words, not how close: the cut
        decides whether the vault answers at all)."""
        return max(self.keyword, TRANSLATED_TRUST * self.translated, self.vector, self.name)


def evidence(conn: sqlite3.Connection, plan: QueryPlan, fused: list[Fused],
             lists: dict[str, list[ChunkHit]], segmenter: Segmenter | None = None) -> dict[int, Evidence]:
    """note id -> its ``Evidence`` (from each chunk a retriever matched).
    A query of function words only ("how to", "的的") has no keyword evidence.
    Without a ``segmenter`` the words' closeness is not read (all apart)."""
    if not fused:
        return {}
    fq, translation, freqs = plan.fq, plan.translation, plan.freqs
    chunk_ids = sorted({c for f in fused for c in (f.chunk_id, *f.chunks.values())})
    keyword, together = {}, None
    if fq.terms and not fq.only_stop_words:
        keyword = term_share(conn, fq.terms, chunk_ids, freqs)
        near = together_match(plan.text, fq.terms, segmenter) if segmenter else None
        if near:
            together = keyword_evidence(keyword, len(fq.terms), chunks_matching(conn, near, chunk_ids))
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
                                  alike.get(f.note_id, 0.0),
                                  None if together is None else max(together.get(c, 0.0) for c in chunks))
    return out


def together_match(text: str, terms: list[str], segmenter: Segmenter) -> str | None:
    """The query's words as close together as the query has them: an FTS5
    ``NEAR`` of its distinct words within as many tokens as its own text has
    between its first word and its last ("how do I postpone a task":
    postpone and task with at most one token between). None for a query of
    fewer than two words."""
    wanted = set(terms)
    tokens = segmenter.segment(text)
    at = [i for i, token in enumerate(tokens) if token in wanted]
    words = list(dict.fromkeys(tokens[i] for i in at))
    if len(words) < 2:
        return None
    return f"NEAR({' '.join(quote_term(w) for w in words)}, {at[-1] - at[0] - 1})"


def keyword_evidence(share: dict[int, float], terms: int, together: set[int]) -> dict[int, float]:
    """chunk id -> its keyword evidence: the query's ``terms`` words and,
    when it has two or more, one unit more for holding them together
    (``together``: the chunks that do, ``together_match``), weighed as their
    mean word. So holding every word scores terms / (terms + 1) (two words:
    0.67), and only a chunk that also holds them as close as the query does
    scores 1: relevance does not saturate wherever a note has every word."""
    return {chunk: (terms * s + (chunk in together)) / (terms + 1) for chunk, s in share.items()}


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
    another subject) gets a few guesses, not a page of neighbours (when none of
    them holds a word of the query or is near it in meaning, the best that
    do), and one nothing in the notes speaks to gets none."""
    scored = [replace(f, relevance=1.0 if f.name_match else proofs[f.note_id].relevance
                      if f.note_id in proofs else 0.0) for f in fused]
    if floor is not None:
        return [f for f in scored if (f.relevance or 0.0) >= floor]
    if not answered(fused, proofs):
        guesses = scored[:WEAK_LIMIT]
        if any(answer(f, proofs) for f in guesses):
            return guesses
        return [f for f in scored if answer(f, proofs)][:WEAK_LIMIT]   # the best with some evidence
    return [f for f in scored if answer(f, proofs) >= DEFAULT_MIN_RELEVANCE]


def answer(f: Fused, proofs: dict[int, Evidence]) -> float:
    """What the default cut weighs of ``f`` (``Evidence.answers``; 1.0 for a name match)."""
    return 1.0 if f.name_match else proofs[f.note_id].answers if f.note_id in proofs else 0.0


def answered(fused: list[Fused], proofs: dict[int, Evidence]) -> bool:
    """Whether some note answers the query well (``answer`` >= STRONG_RELEVANCE)."""
    return any(answer(f, proofs) >= STRONG_RELEVANCE for f in fused)


def weak_warning(fused: list[Fused], floor: float | None, limit: int, found: bool, guesses: bool) -> str | None:
    """The warning of a default hybrid search that no note answers clearly
    (``fused``: what the cut kept; ``found``: whether the lists found any
    note; ``guesses``: the cut kept only best guesses)."""
    if floor is not None:
        return None
    if not fused:
        return ("no note answers this: none holds its words or is near its meaning; "
                "--min-score 0 shows the nearest notes") if found else None
    if limit <= WEAK_LIMIT or not guesses:
        return None
    return (f"no note answers this clearly (best relevance {max(f.relevance or 0.0 for f in fused):.2f}): "
            f"only the {WEAK_LIMIT} best guesses are shown; --min-score 0 shows more")
