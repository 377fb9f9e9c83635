"""Stages 5 and 7: what moves a note besides the lists' votes.

5. names first   ``names_first``: a query that is exactly a note's title,
                 alias or file name ranks that note first (``put_first``).
7. boosts        ``apply_boosts``: with ``--recency-half-life``, each score
                 times 0.5 ** (age / half-life), the age taken at ``now``
                 (``recency``); with ``--boost FIELD`` (or the vault's
                 ``boost`` setting), times 0.5 + 0.5 x the note's
                 frontmatter FIELD (``prior_boost``).

Priors: typed memories keep a number in [0, 1] that says how much a note
matters (``importance``, ``quality_score``). An unimportant note (0) keeps
half its score, an important one (1) all of it, a note without the field
counts as 0.5 (x0.75). A value outside [0, 1] is clamped, with a warning
naming the note; a value that is not a number, or none a float can hold
(NaN, an infinity, a 400-digit integer), counts as missing, also with a
warning. Boosts come after the relevance cut and before the page is cut to
its limit: they reorder results, never change ``relevance``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sqlite3
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from indexer.config import VaultConfig
from indexer.errors import UsageValueError
from indexer.store import name_key

from ..filters import CHUNK_DATE_SQL, MODIFIED_SQL
from ..fusion import Fused
from ..options import SearchOptions
from .lists import first_chunks

if TYPE_CHECKING:
    from ..reader import Reader
    from .plan import QueryPlan

MAX_NAME_QUERY_CHARS = 200   # longer queries are sentences, never a note's name
MAX_NAME_MATCHES = 5
MISSING = 0.5                # a --boost field a note does not have counts as this
OFF = ("", "none", "off")    # --boost none: no boost, whatever the settings file says
MAX_NAMED = 3                # notes named in a warning


@dataclass(frozen=True)
class NameMatch:
    """A note whose name is exactly the query."""
    note_id: int
    kind: str    # "title", "alias" or "file"
    path: str


@dataclass(frozen=True)
class Age:
    """How recency weighed a note."""
    date: str | None         # the date its age counts from (a daily-log entry's, the note's) ...
    factor: float            # 0.5 ** (age / half-life)
    modified: str | None = None   # ... else its file's modification time (a note without a date)


@dataclass(frozen=True)
class Prior:
    """How a --boost field weighed a note."""
    value: float | None   # the field's value used (clamped; None: missing, counted as MISSING)
    factor: float         # 0.5 + 0.5 x the value


@dataclass
class Boosted:
    """Stage 7's answer."""
    fused: list[Fused]                                        # re-sorted by the boosted scores
    ages: dict[int, Age] = field(default_factory=dict)        # note id -> its age, with --recency-half-life
    priors: dict[int, Prior] = field(default_factory=dict)    # note id -> its prior, with --boost
    warnings: list[str] = field(default_factory=list)
    half_life: float | None = None                            # the half-life recency aged the notes by

    def explain_fields(self) -> dict[str, float | None]:
        """What ``Explain`` says of the boosts beside each row's factors."""
        return {"recency_half_life": self.half_life}


def names_first(conn: sqlite3.Connection, plan: QueryPlan, fused: list[Fused]) -> tuple[list[Fused], list[NameMatch]]:
    """Stage 5: the notes named by the query (``name_matches``) put first, and who they are."""
    named = name_matches(conn, plan)
    return put_first(fused, named, first_chunks(conn, [m.note_id for m in named], plan.filters)), named


def name_matches(conn: sqlite3.Connection, plan: QueryPlan) -> list[NameMatch]:
    """The notes whose name is exactly the query: title matches first, then
    aliases, then file names; only notes passing the filters."""
    key = name_key(plan.text)
    if not key or len(key) > MAX_NAME_QUERY_CHARS:
        return []
    where, params = plan.filters.sql()
    rows = conn.execute(
        f"""SELECT DISTINCT nm.note_id, nm.kind, n.path FROM names nm JOIN notes n ON n.id = nm.note_id
            JOIN chunks c ON c.note_id = n.id
            WHERE nm.key = ? AND {where}""", [key, *params]).fetchall()
    order = {"title": 0, "alias": 1, "file": 2}
    best: dict[int, NameMatch] = {}
    for note_id, kind, path in rows:
        if note_id not in best or order[kind] < order[best[note_id].kind]:
            best[note_id] = NameMatch(note_id, kind, path)
    return sorted(best.values(), key=lambda m: (order[m.kind], m.note_id))[:MAX_NAME_MATCHES]


def put_first(fused: list[Fused], named: list[NameMatch], first_chunks: dict[int, int]) -> list[Fused]:
    """``fused`` with the notes named by the query moved (or added) to the
    front, scored as the best result, so scores still descend. A note found
    by its name is shown by its opening chunk: the query named the note, not
    a passage in it (Home's alias used to show "Daily logs live in memory/")."""
    if not named:
        return fused
    by_note = {f.note_id: f for f in fused}
    top_score = fused[0].score if fused else 1.0
    front = []
    for note_id, kind in ((m.note_id, m.kind) for m in named):
        f = by_note.pop(note_id, None)
        if f is None:
            if note_id not in first_chunks:
                continue  # an empty note: nothing to show
            f = Fused(note_id, 0.0, first_chunks[note_id])
        front.append(replace(f, score=max(f.score, top_score), name_match=kind,
                             chunk_id=first_chunks.get(note_id, f.chunk_id)))
    return front + [f for f in fused if f.note_id in by_note]


def apply_boosts(reader: Reader, plan: QueryPlan, fused: list[Fused], now: dt.datetime | None) -> Boosted:
    """Stage 7: recency and the frontmatter prior, each when asked for (see the module)."""
    out = Boosted(fused)
    if half_life := plan.options.recency_half_life:
        out.fused, out.ages = recency(out.fused, chunk_dates(reader.conn, out.fused), half_life,
                                      now or dt.datetime.now())
        out.half_life = half_life
    if name := boost_field(plan.options, reader.config):
        values, note_paths = field_values(reader.conn, out.fused, name)
        out.fused, out.priors, out.warnings = prior_boost(out.fused, values, name, note_paths)
    return out


def chunk_dates(conn: sqlite3.Connection, fused: list[Fused]) -> dict[int, tuple[str | None, str]]:
    """chunk id -> (its date: a daily-log entry's time, else the note's
    frontmatter or file-name date, else None; its file's mtime)."""
    ids = [f.chunk_id for f in fused]
    if not ids:
        return {}
    return {chunk: (date, modified) for chunk, date, modified in conn.execute(
        f"SELECT c.id, {CHUNK_DATE_SQL}, {MODIFIED_SQL} FROM chunks c JOIN notes n ON n.id = c.note_id "
        f"WHERE c.id IN ({','.join('?' * len(ids))})", ids)}


def recency(fused: list[Fused], dates: dict[int, tuple[str | None, str]], half_life: float,
            now: dt.datetime) -> tuple[list[Fused], dict[int, Age]]:
    """Each score times 0.5 ** (age in days at ``now`` / ``half_life``),
    re-sorted (name matches stay first); and note id -> its ``Age``. A note
    without a date is aged by its file's mtime: unlike a filter, recency
    only reorders, and leaving undated notes unaged would put every one of
    them above every dated note."""
    out, factors = [], {}
    for f in fused:
        date, modified = dates.get(f.chunk_id, (None, None))
        stamp = date or modified
        when = _parsed_date(stamp) if stamp else None
        if when is None:
            out.append(f)
            continue
        age_days = max((now - when).total_seconds() / 86400, 0.0)
        factor = 0.5 ** (age_days / half_life)
        out.append(replace(f, score=f.score * factor))
        factors[f.note_id] = Age(date, factor, None if date else modified)
    return sorted(out, key=lambda f: (f.name_match is None, -f.score)), factors


def _parsed_date(date: str) -> dt.datetime | None:
    """A date (noon that day) or date and time; None when it is neither."""
    try:
        return dt.datetime.fromisoformat(date if "T" in date else date + "T12:00")
    except ValueError:
        return None


def boost_field(options: SearchOptions, config: VaultConfig) -> str | None:
    """The field to boost by: the option, else the vault's ``boost`` setting; None: no boost."""
    name = options.boost if options.boost is not None else config.boost
    if name is None or name.strip().casefold() in OFF:
        return None
    if '"' in name or "\x00" in name:
        raise UsageValueError(f"--boost: a field name cannot contain quotes or NUL: {name!r}")
    return name.strip()


def field_values(conn: sqlite3.Connection, fused: list[Fused],
                 name: str) -> tuple[dict[int, object], dict[int, str]]:
    """(note id -> the raw frontmatter value of the field ``name``, absent when the
    note has none; note id -> path) of the notes in ``fused``."""
    ids = sorted({f.note_id for f in fused})
    if not ids:
        return {}, {}
    # Parsed here, not by json_extract: a YAML .nan or .inf is stored as bare NaN or Infinity, which
    # SQLite's JSON functions refuse for the whole query (Python's json reads them).
    rows = conn.execute(f"SELECT id, path, metadata FROM notes WHERE id IN ({','.join('?' * len(ids))})",
                        ids).fetchall()
    values = {}
    for note_id, _, metadata in rows:
        try:
            data = json.loads(metadata or "{}")
        except ValueError:
            continue
        if isinstance(data, dict) and data.get(name) is not None:
            values[note_id] = data[name]
    return values, {i: path for i, path, _ in rows}


def prior_boost(fused: list[Fused], values: dict[int, object], name: str,
                paths: dict[int, str]) -> tuple[list[Fused], dict[int, Prior], list[str]]:
    """Each score times 0.5 + 0.5 x the note's frontmatter field ``name`` (clamped to [0, 1];
    missing: 0.5), re-sorted (name matches stay first); note id -> its
    ``Prior``; warnings for clamped or unreadable values."""
    out, factors = [], {}
    clamped: list[str] = []
    unreadable: list[str] = []
    for f in fused:
        raw = values.get(f.note_id)
        value = _number(raw)
        if value is None and raw is not None:
            unreadable.append(paths.get(f.note_id, "?"))
        if value is not None and not 0.0 <= value <= 1.0:
            clamped.append(f"{paths.get(f.note_id, '?')} ({value:g})")
            value = min(max(value, 0.0), 1.0)
        factor = 0.5 + 0.5 * (MISSING if value is None else value)
        out.append(replace(f, score=f.score * factor))
        factors[f.note_id] = Prior(value, factor)
    warnings = []
    if fused and not values:
        warnings.append(f"--boost {name}: no result has this frontmatter field (every one counted as 0.5)")
    if clamped:
        warnings.append(f"--boost {name}: outside 0..1, clamped: " + _some(clamped))
    if unreadable:
        warnings.append(f"--boost {name}: not a number, counted as 0.5: " + _some(unreadable))
    return sorted(out, key=lambda f: (f.name_match is None, -f.score)), factors, warnings


def _number(raw: object) -> float | None:
    """``raw`` as a finite float; None when it is no number, or none a float
    can hold: NaN, an infinity, or an integer past 1.8e308 (YAML reads 400
    digits as an int, which ``float`` refuses with OverflowError)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)) or (isinstance(raw, str) and not raw.strip()):
        return None
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _some(items: list[str]) -> str:
    return ", ".join(items[:MAX_NAMED]) + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")
