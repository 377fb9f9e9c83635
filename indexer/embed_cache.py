"""The embedding cache that outlives an index.

Vectors keyed by (model fingerprint, SHA-256 of the exact text embedded), in
one SQLite file in ``$XDG_CACHE_HOME/vault-search/`` (``$VAULT_SEARCH_CACHE_DIR``
overrides the folder): a second index of the same vault, a model switched
back, or a note copied into another vault embeds nothing it has embedded
before (`index --rebuild` takes the replaced index's vectors first:
``vectors.donated``). The file is bounded (``$VAULT_SEARCH_CACHE_MB``, default
DEFAULT_MAX_MB): past the bound the least recently used vectors go.

A cache is only ever a shortcut, never a source of truth: each row carries a
CRC-32 of its vector and the vector's dimension, a row that fails either (or
is not a unit vector) is dropped and embedded again, a file that is not a
database is set aside and started afresh, and any error of the cache itself
(a locked, full or read-only disk) turns the cache off for the run with a
warning: the index is built as if there were none.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import sqlite3
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .segment import default_cache_dir
from .store import transaction

log = logging.getLogger("vault_search.cache")

CACHE_DIR_ENV = "VAULT_SEARCH_CACHE_DIR"
CACHE_MB_ENV = "VAULT_SEARCH_CACHE_MB"
CACHE_FILE = "vectors.db"
# The first format, a WITHOUT ROWID table: a 1.6 KB row spilled to an
# overflow page, 4.8 KB a vector on disk. Its rows are moved into
# CACHE_FILE once (``_migrate``) and the file is deleted.
OLD_CACHE_FILE = "embeddings.db"
# 1.7 KB a vector of 384 dimensions with 8 KB pages (2.1 KB with 4 KB ones),
# measured on 20,000 vectors: the 1 GB default holds about 630k of them.
PAGE_SIZE = 8192
DEFAULT_MAX_MB = 1024.0
TRIM_TO = 0.9             # past the bound, trim to this share of it
SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE  -- the embedder's cache key (fingerprint)
);
CREATE TABLE IF NOT EXISTS vectors (
    id     INTEGER PRIMARY KEY,
    model  INTEGER NOT NULL,   -- models.id
    digest BLOB NOT NULL,      -- SHA-256 of the embedded text
    dim    INTEGER NOT NULL,
    vector BLOB NOT NULL,      -- float32, dim values
    crc    INTEGER NOT NULL,   -- zlib.crc32 of vector
    used   INTEGER NOT NULL    -- unix time of the last store or hit
);
CREATE UNIQUE INDEX IF NOT EXISTS vectors_key ON vectors (model, digest);
CREATE INDEX IF NOT EXISTS vectors_used ON vectors (used);
"""


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def cache_dir() -> Path:
    given = os.environ.get(CACHE_DIR_ENV)
    return Path(given).expanduser() if given else default_cache_dir()


def max_bytes() -> int:
    raw = os.environ.get(CACHE_MB_ENV, "")
    try:
        mb = float(raw) if raw else DEFAULT_MAX_MB
        if not math.isfinite(mb) or mb > 1e9:
            raise ValueError(raw)
    except ValueError:
        log.warning("%s=%r is not a number of MB; using %g", CACHE_MB_ENV, raw, DEFAULT_MAX_MB)
        mb = DEFAULT_MAX_MB
    return max(0, int(mb * 1024 * 1024))


@dataclass
class CacheStats:
    path: str
    entries: int = 0
    bytes: int = 0            # the file's live pages
    max_bytes: int = 0
    models: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "entries": self.entries, "bytes": self.bytes, "max_bytes": self.max_bytes,
                "models": self.models, "error": self.error}


class EmbeddingCache:
    """One user's cache file; every method is safe to call after a failure
    (it then does nothing: ``broken`` says why)."""

    def __init__(self, path: Path | None = None, limit: int | None = None):
        self.broken: str | None = None
        self.conn: sqlite3.Connection | None = None
        self._models: dict[str, int] = {}
        self.limit = max_bytes() if limit is None else limit
        try:
            self.path = Path(path) if path else cache_dir() / CACHE_FILE
        except (RuntimeError, KeyError) as exc:   # no home folder
            self.path = Path(CACHE_FILE)
            self._fail(exc)
            return
        if self.limit == 0:
            self.broken = f"off ({CACHE_MB_ENV}=0)"
            return
        try:
            self.conn = self._connect()
            self._migrate(self.conn)
        except (sqlite3.DatabaseError, OSError) as exc:
            self._fail(exc)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for attempt in (1, 2):
            conn = sqlite3.connect(self.path, timeout=5, isolation_level=None, check_same_thread=False)
            try:
                conn.execute(f"PRAGMA page_size={PAGE_SIZE}")   # a new file's; an old one keeps its own
                conn.execute("PRAGMA journal_mode=WAL")
                # A commit waits for no fsync (WAL syncs at checkpoints): a
                # power cut may lose the last vectors, never the file.
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(SCHEMA)
                return conn
            except sqlite3.DatabaseError as exc:
                conn.close()
                if attempt == 2 or "locked" in str(exc) or "busy" in str(exc):
                    raise
                self._set_aside(exc)   # not a database, or damaged: start afresh
        raise AssertionError("unreachable")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Move the vectors of a cache in the first format (OLD_CACHE_FILE,
        beside this one) into this one, then delete it. An old file that
        cannot be read to the end is deleted after what could be read (the
        cache is only ever a shortcut); an error writing this one keeps it
        for the next run (INSERT OR IGNORE: moving twice is harmless)."""
        old = self.path.with_name(OLD_CACHE_FILE)
        if old == self.path or not old.exists():
            return
        moved, damaged = 0, None
        src = sqlite3.connect(old, timeout=5)
        try:
            try:
                rows = src.execute("SELECT model, digest, dim, vector, crc, used FROM vectors")
                batch = rows.fetchmany(1000)
            except sqlite3.DatabaseError as exc:
                batch, damaged = [], exc
            while batch:
                try:
                    with transaction(conn, "cache-migrate"):   # an error here keeps the old file
                        conn.executemany(
                            "INSERT OR IGNORE INTO vectors (model, digest, dim, vector, crc, used) "
                            "VALUES (?, ?, ?, ?, ?, ?)", [(self._model_id(model), *rest) for model, *rest in batch])
                except BaseException:
                    self._models.clear()   # ids seen inside the rolled-back batch
                    raise
                moved += len(batch)
                try:
                    batch = rows.fetchmany(1000)
                except sqlite3.DatabaseError as exc:
                    batch, damaged = [], exc
        finally:
            src.close()
        if damaged is not None and ("locked" in str(damaged) or "busy" in str(damaged)):
            raise damaged   # the old file in use (an older release writing it): moved on a later run
        if damaged is not None:
            log.warning("embedding cache: %s could not be read to the end (%s); %d vectors kept",
                        old.name, damaged, moved)
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{old}{suffix}")
            except FileNotFoundError:
                pass
        log.info("embedding cache: %d vectors moved from %s into %s", moved, old.name, self.path.name)
        self.trim()

    def _model_id(self, name: str, create: bool = True) -> int | None:
        """The id the cache files ``name``'s vectors under (made when
        ``create``; called inside a transaction then)."""
        assert self.conn is not None
        found = self._models.get(name)
        if found is None:
            row = self.conn.execute("SELECT id FROM models WHERE name = ?", (name,)).fetchone()
            if row is None:
                # Not remembered: the transaction may yet roll back.
                return self.conn.execute("INSERT INTO models (name) VALUES (?)", (name,)).lastrowid if create else None
            found = self._models[name] = row[0]
        return found

    def _set_aside(self, exc: Exception) -> None:
        aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
        log.warning("embedding cache %s is damaged (%s); set aside as %s, starting a new one",
                    self.path, exc, aside.name)
        os.replace(self.path, aside)
        for suffix in ("-wal", "-shm"):
            try:
                os.unlink(f"{self.path}{suffix}")
            except FileNotFoundError:
                pass

    def _fail(self, exc: Exception) -> None:
        self.broken = f"{exc.__class__.__name__}: {exc}"
        log.warning("embedding cache %s not used: %s", self.path, self.broken)
        if self.conn is not None:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass
        self.conn = None

    def get(self, model: str, dim: int, digests: list[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors among ``digests`` that pass their checks."""
        if self.conn is None or not digests:
            return {}
        found: dict[bytes, np.ndarray] = {}
        bad: list[bytes] = []
        try:
            key = self._model_id(model, create=False)
            if key is None:
                return {}
            for start in range(0, len(digests), 500):
                part = digests[start:start + 500]
                rows = self.conn.execute(
                    f"SELECT digest, dim, vector, crc FROM vectors WHERE model = ? AND digest IN "
                    f"({','.join('?' * len(part))})", (key, *part)).fetchall()
                for digest, row_dim, blob, crc in rows:
                    vector = _checked(blob, row_dim, crc, dim)
                    if vector is None:
                        bad.append(digest)
                    else:
                        found[digest] = vector
            now = int(time.time())
            if bad or found:
                with transaction(self.conn, "cache-get"):
                    if bad:
                        self.conn.executemany("DELETE FROM vectors WHERE model = ? AND digest = ?",
                                              [(key, d) for d in bad])
                    self.conn.executemany("UPDATE vectors SET used = ? WHERE model = ? AND digest = ?",
                                          [(now, key, d) for d in found])
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
            return {}
        if bad:
            log.warning("embedding cache: %d damaged vectors ignored (embedded again)", len(bad))
        return found

    def put(self, model: str, items: list[tuple[bytes, np.ndarray]]) -> None:
        if self.conn is None or not items:
            return
        now = int(time.time())
        rows = []
        for digest, vector in items:
            blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
            rows.append((digest, int(vector.shape[0]), blob, zlib.crc32(blob), now))
        try:
            with transaction(self.conn, "cache-put"):
                key = self._model_id(model)
                self.conn.executemany("INSERT OR REPLACE INTO vectors (model, digest, dim, vector, crc, used) "
                                      "VALUES (?, ?, ?, ?, ?, ?)", [(key, *row) for row in rows])
        except BaseException as exc:
            self._models.clear()   # an id made or seen in the rolled-back transaction
            if not isinstance(exc, (sqlite3.Error, OSError)):
                raise
            self._fail(exc)

    def live_bytes(self) -> int:
        assert self.conn is not None
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return (pages - free) * self.conn.execute("PRAGMA page_size").fetchone()[0]

    def trim(self) -> int:
        """Drop the least recently used vectors while the file is past its
        bound; how many went."""
        if self.conn is None:
            return 0
        dropped = 0
        try:
            # Rows are not all of one size, nor pages all full: the share to
            # drop is estimated from the live pages, then measured again. When
            # the least recently used rows lay scattered over pages that stay
            # in use (a page holds 4), the first round frees too little: the
            # file is compacted once (VACUUM) before any more rows go.
            compacted = False
            for _ in range(8):
                size = self.live_bytes()
                count = self.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
                if size <= self.limit or not count:
                    break
                if dropped and not compacted:
                    self.conn.execute("VACUUM")
                    compacted = True
                    continue
                drop = max(count - int(count * TRIM_TO * self.limit / size), 1)
                with transaction(self.conn, "cache-trim"):
                    self.conn.execute("DELETE FROM vectors WHERE id IN (SELECT id FROM vectors ORDER BY used LIMIT ?)",
                                      (drop,))
                dropped += min(drop, count)
            return dropped
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
            return dropped

    def stats(self) -> CacheStats:
        out = CacheStats(path=str(self.path), max_bytes=self.limit, error=self.broken)
        if self.conn is None:
            return out
        try:
            out.models = dict(self.conn.execute(
                "SELECT m.name, count(*) FROM vectors v JOIN models m ON m.id = v.model GROUP BY m.name").fetchall())
            out.entries = sum(out.models.values())
            out.bytes = self.live_bytes()
        except (sqlite3.Error, OSError) as exc:
            out.error = str(exc)
        return out

    def clear(self) -> int:
        """Forget every vector; how many there were."""
        if self.conn is None:
            return 0
        with transaction(self.conn, "cache-clear"):
            n = self.conn.execute("DELETE FROM vectors").rowcount
        self.conn.execute("VACUUM")
        return n

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _checked(blob: bytes, row_dim: int, crc: int, dim: int) -> np.ndarray | None:
    """The row's vector when it is whole: the dimension asked for, its CRC,
    finite and of unit length (every embedder normalises)."""
    if row_dim != dim or zlib.crc32(blob) != crc:
        return None
    return unit_vector(blob, dim)


def unit_vector(blob: bytes, dim: int) -> np.ndarray | None:
    """A stored float32 vector when it is whole: ``dim`` values, finite and
    of unit length (every embedder normalises)."""
    if len(blob) != 4 * dim:
        return None
    vector = np.frombuffer(blob, dtype=np.float32)
    norm = float(np.linalg.norm(vector)) if np.isfinite(vector).all() else 0.0
    return vector if abs(norm - 1.0) < 1e-3 else None
