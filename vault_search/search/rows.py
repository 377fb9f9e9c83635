"""Stages 8-10: the ranked notes as results.

8. rows     ``result_rows``: each note's chunk (``ChunkRow``) as a
            ``SearchResult``, with its snippet and scores (``Ranked``: a
            result and how it was ranked). A stub (a chunk with no word
            past its heading line and tags: a note's ``# Title`` and tag
            line) is shown stretched to the first chunk after it that has
            words (``with_content``).
9. rerank   ``rerank``: an LLM judges the head (``--rerank``), outside the
            snapshot since it may take seconds (the judge's view of the head,
            ``rerank_candidates``, is read inside); any failure keeps the
            fused order and adds a warning.
10. page    ``make_page``: the page, with the notes one link away from its
            top hits (``--related``), each note's whole text (``--full``) or
            the passages that fit a token budget (``--budget-tokens``, pack.py).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from indexer.config import VaultConfig
from indexer.errors import VaultSearchError
from indexer.plain import reading_text

from ..filters import CHUNK_DATE_SQL, Staleness
from ..fusion import Fused
from ..results import Scores, SearchResult
from ..snippet import has_words, make_snippet, says_something, under_heading

if TYPE_CHECKING:
    from ..reader import Reader
    from ..rerank import Candidate
    from .plan import QueryPlan

RELATED_FROM = 3     # --related follows the links of this many top hits
RELATED_LIMIT = 5    # ... and adds at most this many notes
# A stub (``snippet.has_words``: no word past its heading line and tags) is
# shown stretched to the first chunk after it with words (``with_content``);
# searching, not chunking, reads stubs so: a rule in the chunker would change
# every chunk's hash and re-embed every index.
CONTENT_AHEAD = 8    # chunks looked at past a stub for one with words (stubs seldom come in runs)


@dataclass(frozen=True)
class ChunkRow:
    """A chunk and its note, as a result shows them (``chunk_rows``)."""
    path: str
    title: str
    tags: str            # the note's tags, JSON
    heading: str
    start_line: int
    end_line: int
    text: str
    stale: bool
    date: str | None     # the daily-log entry's time, else the note's date
    stub: bool = False   # no word past its heading and tags, and none after it to show (``with_content``)

    @cached_property
    def reading(self) -> str:
        """What is under its heading as the reading view shows it (the snippet's text)."""
        return reading_text(without_heading_line(self.text))

    @property
    def has_words(self) -> bool:
        """``snippet.has_words`` of its text, from the reading text the snippet reads too."""
        return bool(under_heading(self.text).strip()) and says_something(self.reading)

    def result(self, terms: list[str], config: VaultConfig, score: float, scores: Scores, **extra: Any) -> SearchResult:
        """This chunk as a result: its snippet shows ``terms``; a stub's is
        empty (its tags were its only text, and a result shows them already)."""
        snippet = "" if self.stub else make_snippet(self.reading, terms)
        return SearchResult(
            path=self.path, title=self.title, heading=self.heading, start_line=self.start_line,
            end_line=self.end_line, snippet=snippet,
            score=score, scores=scores, tags=json.loads(self.tags), stale=bool(self.stale),
            uri=obsidian_uri(config.vault_name, self.path), date=self.date, context=config.context_of(self.path),
            **extra)


@dataclass(frozen=True)
class Ranked:
    """A result, and how it was ranked."""
    fused: Fused
    result: SearchResult


@dataclass
class Neighbour:
    """A note one link away from the top hits (``related``)."""
    first: int    # the index of the first hit it links to or from
    links: int    # how many of the top hits it links to or from
    hit: str      # the first such hit's path


@dataclass
class Page:
    """Stage 10's answer: the results as the response lists them."""
    results: list[SearchResult]
    warnings: list[str] = field(default_factory=list)
    # With --budget-tokens: the passages' tokens, the budget, and what counted them.
    tokens: int | None = None
    token_budget: int | None = None
    token_counter: str | None = None


def chunk_rows(conn: sqlite3.Connection, config: VaultConfig, ids: list[int]) -> dict[int, ChunkRow]:
    """chunk id -> its ``ChunkRow``: a stub's stretched to the content after it (``with_content``)."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    stale_sql, stale_params = Staleness.from_config(config).sql()
    rows = {r[0]: ChunkRow(*r[1:]) for r in conn.execute(
        f"""SELECT c.id, n.path, n.title, n.tags, c.heading, c.start_line, c.end_line, c.text,
                   coalesce({stale_sql}, 0), {CHUNK_DATE_SQL}
            FROM chunks c JOIN notes n ON n.id = c.note_id WHERE c.id IN ({marks})""", [*stale_params, *ids])}
    return {chunk_id: row if row.has_words else with_content(conn, chunk_id, row)
            for chunk_id, row in rows.items()}


def with_content(conn: sqlite3.Connection, chunk_id: int, row: ChunkRow) -> ChunkRow:
    """A stub's row (``has_words``) stretched to the first chunk after it with
    words: lines from the stub's first (the heading, the matched title) to
    that chunk's last, that chunk's heading and snippet. Only within the
    stub's section (its heading's sub-headings), or the whole note for its
    first chunk (which stands for the note: a name match, ``--related``), and
    never into another daily-log entry (which has its own date). A stub with
    no such chunk is kept, marked ``stub``."""
    note_id, seq, at, first = conn.execute(
        "SELECT note_id, seq, at, seq = (SELECT min(seq) FROM chunks WHERE note_id = c.note_id) "
        "FROM chunks c WHERE id = ?", (chunk_id,)).fetchone()
    for heading, end_line, text, its_at in conn.execute(
            "SELECT heading, end_line, text, at FROM chunks WHERE note_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (note_id, seq, CONTENT_AHEAD)):
        continues = heading == row.heading and under_heading(text) == text   # not a sibling of the same name
        if its_at != at or not (first or continues or heading.startswith(row.heading + " > ")):
            break
        if has_words(text):
            return replace(row, heading=heading, end_line=max(end_line, row.end_line), text=text)
    return replace(row, stub=True)


def result_rows(reader: Reader, plan: QueryPlan, fused: list[Fused]) -> list[Ranked]:
    """Stage 8: each fused note as a result (its chunk, snippet and scores)."""
    rows = chunk_rows(reader.conn, reader.config, [f.chunk_id for f in fused])
    out = []
    for f in fused:
        if f.chunk_id not in rows:
            continue  # cannot happen inside one snapshot; never fail a search over it
        scores = Scores(fts=sig6_or_none(f.scores.get("fts")), vector=sig6_or_none(f.scores.get("vector")))
        # A name match outranks the list it was put on top of: its own
        # retriever score may be lower than the next result's.
        score = {"fts": scores.fts, "vector": scores.vector}.get(plan.mode)
        if score is None:
            score = sig6(f.score)
        out.append(Ranked(f, rows[f.chunk_id].result(plan.fq.terms, reader.config, score, scores,
                                                     match=how_matched(f), relevance=round3(f.relevance))))
    return out


def how_matched(f: Fused) -> str:
    """``SearchResult.match``: which evidence put the note in the results."""
    if f.name_match:
        return "name"
    keyword = bool({"fts", "translated", "title"} & set(f.ranks))
    vector = bool({"vector", "latent"} & set(f.ranks))   # latent terms are the model's, as its vectors are
    return "both" if keyword and vector else "vector" if vector else "keyword"


def without_heading_line(text: str) -> str:
    """The heading is its own field; the snippet shows what is under it (as
    the reading view shows it: ``plain.reading_text``)."""
    under = under_heading(text)
    return under if under.strip() else text


def obsidian_uri(vault_name: str, path: str) -> str:
    return f"obsidian://open?vault={quote(vault_name, safe='')}&file={quote(path, safe='')}"


def sig6(value: float) -> float:
    """Six significant digits: BM25 scores of very common words are tiny
    (FTS5 floors their IDF), and rounding to decimals would show 0."""
    return float(f"{value:.6g}")


def sig6_or_none(value: float | None) -> float | None:
    return None if value is None else sig6(value)


def round3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def rerank_candidates(conn: sqlite3.Connection, rows: list[Ranked]) -> list[Candidate]:
    """The judge's view of the head: each chunk's title, heading and text (ids c1, c2, ...)."""
    from ..rerank import Candidate

    ids = [r.fused.chunk_id for r in rows]
    texts = {t[0]: t[1:] for t in conn.execute(
        f"SELECT c.id, c.hash, n.title, c.heading, c.text FROM chunks c JOIN notes n ON n.id = c.note_id "
        f"WHERE c.id IN ({','.join('?' * len(ids))})", ids)}
    return [Candidate(f"c{i}", *texts[r.fused.chunk_id]) for i, r in enumerate(rows, 1) if r.fused.chunk_id in texts]


def rerank(plan: QueryPlan, rows: list[Ranked], candidates: list[Candidate],
           conn: sqlite3.Connection) -> tuple[list[Ranked], list[str]]:
    """Stage 9: the judged head of ``rows`` reordered by the blend of fused
    position and judge (``conn``: the judge's score cache), and why not, on a
    failure; ``rows`` as they are without ``--rerank``."""
    from ..rerank import Reranker, blend

    top = rows[:plan.judge.top_n] if plan.judge else []
    if not top or plan.judge is None:
        return rows, []
    scores, problem = Reranker(plan.judge, conn).judge(plan.text, candidates)
    if problem or scores is None:
        return rows, [problem] if problem else []
    judged: list[tuple[float, Ranked]] = []
    for i, row in enumerate(top, 1):
        score = scores.get(f"c{i}")
        blended = blend(i, len(top), score if score is not None else 0.0)
        rescored = replace(row.result.scores, rerank=None if score is None else sig6(score / 10))
        judged.append((blended, Ranked(replace(row.fused, rerank=score, blended=blended),
                                       replace(row.result, score=sig6(blended), scores=rescored))))
    ordered = [row for _, row in sorted(judged, key=lambda item: -item[0])]   # stable on ties
    return ordered + rows[len(top):], []


def make_page(reader: Reader, plan: QueryPlan, rows: list[Ranked]) -> Page:
    """Stage 10: the results of ``rows`` (the page), then what the options add (see the module)."""
    page = Page([r.result for r in rows])
    if plan.options.related and page.results:
        page.results += related(reader, plan, page.results)
    if plan.options.full:
        page.warnings += whole_notes(reader.config, page.results)
    if budget := plan.options.budget_tokens:
        from ..pack import pack

        packed = pack(reader, page.results, budget)
        page.results, page.tokens, page.token_budget, page.token_counter = (packed.results, packed.tokens, budget,
                                                                            packed.counter)
        if packed.left_out:
            page.warnings.append(f"{packed.left_out} more hits did not fit in {budget} tokens")
        if packed.trimmed:
            page.warnings.append(f"trimmed to fit {budget} tokens: {packed.trimmed}")
        if packed.changed:
            page.warnings.append(f"left out, edited since they were indexed (run `vault-search index`): "
                                 f"{', '.join(packed.changed[:3])}")
    return page


def related(reader: Reader, plan: QueryPlan, hits: list[SearchResult]) -> list[SearchResult]:
    """Notes one link away (out or back) from the top hits, not hits
    themselves, in the order of the hit they connect to, then by how many
    of the top hits they connect to; marked ``related``."""
    conn = reader.conn
    top = [h.path for h in hits[:RELATED_FROM]]
    seen = {h.path for h in hits}
    ids = {p: i for i, p in conn.execute(
        f"SELECT id, path FROM notes WHERE path IN ({','.join('?' * len(top))})", top)}
    found: dict[int, Neighbour] = {}
    for i, path in enumerate(top):
        hit_id = ids.get(path)
        if hit_id is None:
            continue
        for (other,) in conn.execute(
                "SELECT target_id FROM links WHERE source_id = ? AND target_id IS NOT NULL "
                "UNION SELECT source_id FROM links WHERE target_id = ?", (hit_id, hit_id)):
            if other == hit_id:
                continue
            found.setdefault(other, Neighbour(i, 0, path)).links += 1
    if not found:
        return []
    where, params = plan.filters.sql()
    marks = ",".join("?" * len(found))
    first = dict(conn.execute(
        f"""SELECT n.id, min(c.id) FROM notes n JOIN chunks c ON c.note_id = n.id
            WHERE n.id IN ({marks}) AND {where} GROUP BY n.id""", [*found, *params]))
    rows = chunk_rows(conn, reader.config, list(first.values()))
    out = []
    for note_id in sorted(first, key=lambda n: (found[n].first, -found[n].links, n)):
        row = rows.get(first[note_id])
        if row is None or row.path in seen:
            continue
        out.append(row.result(plan.fq.terms, reader.config, 0.0, Scores(), related=True,
                              related_to=found[note_id].hit))
        if len(out) == RELATED_LIMIT:
            break
    return out


def whole_notes(config: VaultConfig, results: list[SearchResult]) -> list[str]:
    """``--full``: each result's whole note as its ``text``; a warning for a
    note that cannot be read now (deleted since the index saw it)."""
    from ..files import read_note

    problems = []
    for r in results:
        try:
            r.text = read_note(config, r.path).text
        except VaultSearchError as exc:
            problems.append(f"--full: {exc}")
    return problems
