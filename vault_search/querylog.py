"""An opt-in log of searches (``log_queries = true`` in ``.vault-search.toml``).

Each search (every face: CLI, thin client, HTTP, MCP, Python API) adds its
query, mode, took_ms, how many results, the best relevance, and its top hits
with how each matched; a ``get`` (or ``multi-get``) of one of those notes
within ``FOLLOW_WINDOW_S`` marks the search as followed. ``vault-search log``
lists recent searches; ``log --misses`` the ones that found nothing, found
only weak matches (best relevance under ``WEAK``), or were never followed by
a ``get``: what a person or an agent reads to see what its memory fails to
answer.

The log lives in the index folder (``queries.db``), never in the vault, and
keeps the last ``MAX_ENTRIES`` searches. Writing it never fails a search: a
log that cannot be written is left out with a warning in the server's log.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from indexer import faults

if TYPE_CHECKING:
    from .results import SearchResponse

log = logging.getLogger("vault_search.querylog")

LOG_FILE = "queries.db"
MAX_ENTRIES = 10_000
TOP_HITS = 5
FOLLOW_WINDOW_S = 30 * 60
WEAK = 0.4
MAX_QUERY_CHARS = 1000   # of a query, what is logged

SCHEMA = """
CREATE TABLE IF NOT EXISTS searches (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, query TEXT NOT NULL, mode TEXT NOT NULL, took_ms REAL NOT NULL,
    results INTEGER NOT NULL, best_relevance REAL, top TEXT NOT NULL, followed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS hits (search_id INTEGER NOT NULL, path TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS hits_path ON hits (path);
CREATE INDEX IF NOT EXISTS searches_at ON searches (at);
"""


@dataclass
class LoggedSearch:
    at: float
    query: str
    mode: str
    took_ms: float
    results: int
    best_relevance: float | None
    top: list[dict]          # [{path, match, relevance}] of the first hits
    followed: bool           # a get of one of its hits followed it
    why_missed: str | None = None   # with --misses: "no results", "weak matches" or "not followed"


@dataclass
class QueryLog:
    path: str
    enabled: bool
    entries: list[LoggedSearch] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _connect(index_dir: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(Path(index_dir) / LOG_FILE, timeout=2, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(SCHEMA)
    return conn


def record(index_dir: str | Path, response: SearchResponse) -> None:
    """Add a search to the log; any failure is logged and forgotten."""
    hits = [r for r in response.results if not r.related]
    relevances = [r.relevance for r in hits if r.relevance is not None]
    top = [{"path": r.path, "match": r.match, "relevance": r.relevance} for r in hits[:TOP_HITS]]
    try:
        with closing(_connect(index_dir)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            cur = conn.execute(
                "INSERT INTO searches (at, query, mode, took_ms, results, best_relevance, top) VALUES (?,?,?,?,?,?,?)",
                (time.time(), response.query[:MAX_QUERY_CHARS], response.mode, response.took_ms, len(hits),
                 max(relevances) if relevances else None, json.dumps(top, ensure_ascii=False)))
            conn.executemany("INSERT INTO hits VALUES (?, ?)", [(cur.lastrowid, r.path) for r in hits])
            faults.point("query-log")
            if cur.lastrowid and cur.lastrowid % 100 == 0:   # bounded: the oldest go
                oldest = conn.execute("SELECT id FROM searches ORDER BY id DESC LIMIT 1 OFFSET ?",
                                      (MAX_ENTRIES,)).fetchone()
                if oldest:
                    conn.execute("DELETE FROM hits WHERE search_id <= ?", oldest)
                    conn.execute("DELETE FROM searches WHERE id <= ?", oldest)
            conn.execute("COMMIT")
    except (sqlite3.Error, OSError) as exc:
        log.warning("query log not written (%s)", exc)


def followed(index_dir: str | Path, paths: list[str]) -> None:
    """Mark the recent searches that listed one of ``paths`` as followed by a get."""
    if not paths:
        return
    try:
        with closing(_connect(index_dir)) as conn:
            marks = ",".join("?" * len(paths))
            conn.execute(f"UPDATE searches SET followed = 1 WHERE at >= ? AND followed = 0 AND id IN "
                         f"(SELECT search_id FROM hits WHERE path IN ({marks}))",
                         [time.time() - FOLLOW_WINDOW_S, *paths])
    except (sqlite3.Error, OSError) as exc:
        log.warning("query log not written (%s)", exc)


def read(index_dir: str | Path, enabled: bool, limit: int = 20, misses: bool = False) -> QueryLog:
    """The last ``limit`` searches, newest first (``misses``: only those that missed)."""
    path = Path(index_dir) / LOG_FILE
    out = QueryLog(str(path), enabled)
    if not path.exists():
        return out
    with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2)) as conn:
        rows = conn.execute("SELECT at, query, mode, took_ms, results, best_relevance, top, followed FROM searches "
                            "ORDER BY id DESC").fetchall()
    for at, query, mode, took, results, best, top, was_followed in rows:
        why = ("no results" if not results else "weak matches" if best is not None and best < WEAK
               else None if was_followed else "not followed")
        if misses and why is None:
            continue
        out.entries.append(LoggedSearch(at, query, mode, took, results, best, json.loads(top), bool(was_followed),
                                        why if misses else None))
        if len(out.entries) >= limit:
            break
    return out
