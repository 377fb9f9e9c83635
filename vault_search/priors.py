"""Priors from a note's frontmatter: ``--boost FIELD``.

Typed memories keep a number in [0, 1] that says how much a note matters
(``importance``, ``quality_score``). A boost multiplies a result's score by
``0.5 + 0.5 * value``: an unimportant note (0) keeps half its score, an
important one (1) all of it, a note without the field counts as 0.5 (x0.75).
A value outside [0, 1] is clamped, with a warning naming the note; a value
that is not a number, or none a float can hold (NaN, an infinity, a
400-digit integer), counts as missing, also with a warning.

Where it sits (README "How a score is shaped"): after the relevance cut and
after recency, before the page is cut to ``limit``; it reorders results, it
never changes ``relevance``.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING

from indexer.config import VaultConfig
from indexer.errors import UsageValueError

if TYPE_CHECKING:
    from .fusion import Fused
    from .options import SearchOptions

MISSING = 0.5
OFF = ("", "none", "off")    # --boost none: no boost, whatever the settings file says
MAX_NAMED = 3                # notes named in a warning


def boost_field(options: SearchOptions, config: VaultConfig) -> str | None:
    """The field to boost by: the option, else the vault's ``boost`` setting; None: no boost."""
    field = options.boost if options.boost is not None else config.boost
    if field is None or field.strip().casefold() in OFF:
        return None
    if '"' in field or "\x00" in field:
        raise UsageValueError(f"--boost: a field name cannot contain quotes or NUL: {field!r}")
    return field.strip()


def field_values(conn: sqlite3.Connection, fused: list[Fused],
                 field: str) -> tuple[dict[int, object], dict[int, str]]:
    """(note id -> the raw frontmatter value of ``field``, absent when the
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
        if isinstance(data, dict) and data.get(field) is not None:
            values[note_id] = data[field]
    return values, {i: path for i, path, _ in rows}


def boost(fused: list[Fused], values: dict[int, object], field: str,
          paths: dict[int, str]) -> tuple[list[Fused], dict[int, tuple[float | None, float]], list[str]]:
    """Each score times 0.5 + 0.5 x the note's ``field`` (clamped to [0, 1];
    missing: 0.5), re-sorted (name matches stay first); note id -> (the value
    used, None when missing; the factor); warnings for clamped or unreadable values."""
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
        factors[f.note_id] = (value, factor)
    warnings = []
    if fused and not values:
        warnings.append(f"--boost {field}: no result has this frontmatter field (every one counted as 0.5)")
    if clamped:
        warnings.append(f"--boost {field}: outside 0..1, clamped: " + _some(clamped))
    if unreadable:
        warnings.append(f"--boost {field}: not a number, counted as 0.5: " + _some(unreadable))
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
