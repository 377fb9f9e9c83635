"""An opt-in log of searches (``log_queries = true`` in ``.vault-search.toml``).

Each search (every face: CLI, thin client, HTTP, MCP, Python API) adds its
query, mode, took_ms, how many results, the best relevance, and its top hits
with how each matched; a ``get`` (or ``multi-get``) of one of those notes
within ``FOLLOW_WINDOW_S`` marks the last search that listed it as followed. ``vault-search log``
lists recent searches; ``log --misses`` the ones that found nothing, found
only weak matches (best relevance under ``WEAK``), or were never followed by
a ``get``: what a person or an agent reads to see what its memory fails to
answer.

The log lives in the index folder (``queries.db``, readable by its owner
only: queries say what a person looks for), never in the vault, and keeps the
last ``MAX_ENTRIES`` searches within ``MAX_LOG_BYTES``. Writing it never fails
a search: a log that cannot be written is left out with a warning in the
server's log, and a damaged one is set aside (``queries.db.corrupt-<time>``)
with one warning, and a new one started.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.store import transaction

if TYPE_CHECKING:
    from .results import SearchResponse

log = logging.getLogger("vault_search.querylog")

LOG_FILE = "queries.db"
MAX_ENTRIES = 10_000
TOP_HITS = 5
FOLLOW_WINDOW_S = 30 * 60
WEAK = 0.4
MAX_QUERY_CHARS = 1000   # of a query, what is logged
# A search's hits kept for ``followed``: a get follows one of the first few
# results. Every hit of a ``limit=1000`` search cost ~58 KB an entry, 578 MB
# at MAX_ENTRIES; 50 of them, under 10 KB with long paths.
LOGGED_HITS = 50
# Whatever the queries and paths, the log stays under this (checked every
# PRUNE_EVERY searches; past it, the oldest entries go).
MAX_LOG_BYTES = 32 << 20
PRUNE_EVERY = 100

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
    followed: bool           # a get of one of its first LOGGED_HITS hits followed it
    why_missed: str | None = None   # with --misses: "no results", "weak matches" or "not followed"


@dataclass
class QueryLog:
    path: str
    enabled: bool
    entries: list[LoggedSearch] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)   # a damaged log set aside, or one that could not be read

    def to_dict(self) -> dict:
        return asdict(self)


def _connect(index_dir: str | Path) -> sqlite3.Connection:
    path = Path(index_dir) / LOG_FILE
    _private(path)
    conn = sqlite3.connect(path, timeout=2, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(SCHEMA)
    except BaseException:
        conn.close()
        raise
    return conn


def _private(path: Path) -> None:
    """The log, created readable by its owner only (an older one made so):
    SQLite gives its -wal and -shm files the same mode."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        loose = os.fstat(fd).st_mode & 0o077
    finally:
        os.close(fd)
    if loose:
        for name in (str(path), f"{path}-wal", f"{path}-shm"):
            try:
                os.chmod(name, 0o600)
            except FileNotFoundError:
                pass


def _damaged(exc: Exception) -> bool:
    """Whether an SQLite error says the file is no query log (damaged, not a
    database, another schema), rather than that it could not be reached
    just now (busy, a full disk, read-only): only such a file is set aside."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    return (name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text
            or "not a database" in text or "no such column" in text or "has no column named" in text)


def _set_aside(index_dir: str | Path, exc: Exception) -> str:
    """Move a damaged log out of the way (the next write starts a new one); the warning."""
    path = Path(index_dir) / LOG_FILE
    aside = path.with_name(f"{LOG_FILE}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{LOG_FILE}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        n += 1
    try:
        os.replace(path, aside)
    except FileNotFoundError:   # another process set it aside first
        return f"the query log {path} was damaged ({exc}); another process set it aside"
    except OSError as err:      # a read-only folder: say so, and leave it
        message = f"the query log {path} is damaged ({exc}) and cannot be set aside ({err.strerror}); remove it"
        log.warning(message)
        return message
    for extra in ("-wal", "-shm"):
        try:
            Path(f"{path}{extra}").unlink(missing_ok=True)
        except OSError:
            pass   # stale: SQLite ignores a -wal that does not match its db
    message = f"the query log {path} was damaged ({exc}); set aside as {aside.name}, a new one started"
    log.warning(message)
    return message


def record(index_dir: str | Path, response: SearchResponse) -> None:
    """Add a search to the log; any failure is logged and forgotten (a
    damaged log is set aside first, and the search written to a new one)."""
    for attempt in (1, 2):
        try:
            _record(index_dir, response)
            return
        except Exception as exc:   # whatever it is, the search has its answer
            if attempt == 1 and _damaged(exc):
                _set_aside(index_dir, exc)
                continue
            log.warning("query log not written (%s)", exc)
            return


def _record(index_dir: str | Path, response: SearchResponse) -> None:
    hits = [r for r in response.results if not r.related]
    relevances = [r.relevance for r in hits if r.relevance is not None]
    top = [{"path": r.path, "match": r.match, "relevance": r.relevance} for r in hits[:TOP_HITS]]
    with closing(_connect(index_dir)) as conn, transaction(conn, "query-log"):
        cur = conn.execute(
            "INSERT INTO searches (at, query, mode, took_ms, results, best_relevance, top) VALUES (?,?,?,?,?,?,?)",
            (time.time(), _storable(response.query[:MAX_QUERY_CHARS]), response.mode, response.took_ms, len(hits),
             max(relevances) if relevances else None, _storable(json.dumps(top, ensure_ascii=False))))
        conn.executemany("INSERT INTO hits VALUES (?, ?)",
                         [(cur.lastrowid, _storable(r.path)) for r in hits[:LOGGED_HITS]])
        if (cur.lastrowid and cur.lastrowid % PRUNE_EVERY == 0) or _used_bytes(conn) > MAX_LOG_BYTES:
            _prune(conn)   # bounded: the oldest go (two PRAGMAs a search keep big entries from overshooting)


def _prune(conn: sqlite3.Connection) -> None:
    """Keep the last MAX_ENTRIES searches, and the log under MAX_LOG_BYTES:
    past it, as many of the newest as fill three quarters of it (the pages
    freed are reused: the file stops growing)."""
    keep = MAX_ENTRIES
    used = _used_bytes(conn)
    if used > MAX_LOG_BYTES:
        count = conn.execute("SELECT count(*) FROM searches").fetchone()[0]
        keep = min(keep, count * MAX_LOG_BYTES * 3 // (4 * used))
    oldest = conn.execute("SELECT id FROM searches ORDER BY id DESC LIMIT 1 OFFSET ?", (keep,)).fetchone()
    if oldest:
        conn.execute("DELETE FROM hits WHERE search_id <= ?", oldest)
        conn.execute("DELETE FROM searches WHERE id <= ?", oldest)


def _used_bytes(conn: sqlite3.Connection) -> int:
    """The log's size less its free pages (which new entries reuse)."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    return page_size * (conn.execute("PRAGMA page_count").fetchone()[0]
                        - conn.execute("PRAGMA freelist_count").fetchone()[0])


def _storable(text: str) -> str:
    """Text SQLite can store: a lone surrogate (a file name or argument that
    was not UTF-8) becomes U+FFFD rather than failing the write."""
    return text.encode("utf-8", "replace").decode("utf-8")


def followed(index_dir: str | Path, paths: list[str]) -> None:
    """Mark as followed by a get, for each of ``paths``, the one search that
    listed it last (within ``FOLLOW_WINDOW_S``): the search the get answers.
    Older searches that listed it stay as they were, so one get never hides
    several misses."""
    if not paths:
        return
    try:
        with closing(_connect(index_dir)) as conn:
            marks = ",".join("?" * len(paths))
            conn.execute(f"UPDATE searches SET followed = 1 WHERE id IN (SELECT max(h.search_id) FROM hits h "
                         f"JOIN searches s ON s.id = h.search_id WHERE s.at >= ? AND h.path IN ({marks}) "
                         "GROUP BY h.path)",
                         [time.time() - FOLLOW_WINDOW_S, *[_storable(p) for p in paths]])
    except Exception as exc:   # a get has its note whatever happens here
        if _damaged(exc):
            _set_aside(index_dir, exc)   # nothing in a new log to mark
        else:
            log.warning("query log not written (%s)", exc)


def read(index_dir: str | Path, enabled: bool, limit: int = 20, misses: bool = False) -> QueryLog:
    """The last ``limit`` searches, newest first (``misses``: only those that
    missed). A damaged log is set aside and reads as empty, with a warning."""
    path = Path(index_dir) / LOG_FILE
    out = QueryLog(str(path), enabled)
    if not path.exists():
        return out
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2)) as conn:
            rows = conn.execute("SELECT at, query, mode, took_ms, results, best_relevance, top, followed "
                                "FROM searches ORDER BY id DESC").fetchall()
    except sqlite3.Error as exc:
        if _damaged(exc):
            out.warnings.append(_set_aside(index_dir, exc))
        else:
            out.warnings.append(f"the query log {path} could not be read ({exc}); try again")
            log.warning(out.warnings[-1])
        return out
    for at, query, mode, took, results, best, top, was_followed in rows:
        why = ("no results" if not results else "weak matches" if best is not None and best < WEAK
               else None if was_followed else "not followed")
        if misses and why is None:
            continue
        out.entries.append(LoggedSearch(at, query, mode, took, results, best, _top(top), bool(was_followed),
                                        why if misses else None))
        if len(out.entries) >= limit:
            break
    return out


def _top(raw: object) -> list[dict]:
    """An entry's stored top hits; a row damaged in place reads as none."""
    try:
        top = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:
        return []
    return top if isinstance(top, list) else []
