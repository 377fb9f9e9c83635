"""The write path: how a saved note reaches the index.

1. open      ``IndexWriter.open``: connect (create on a writer's first run),
             check the schema and that the index serves this vault; with
             ``rebuild``, a new index beside the live one, in ``rebuild/``.
2. sync      ``IndexWriter.sync``: under the writer lock, follow an
             ``index --rebuild`` another process made, migrate, choose the
             embedder (``embedder_for_writing``: the model recorded in the
             index, never another one), then ``indexer.sync.sync_vault``
             writes the keyword index (scan, read and parse, dictionary, note
             batches, finish).
3. embed     ``indexer.vectors.embedding_pass``: embed the chunks that wait,
             one committed batch at a time.
4. publish   the same pass writes the matrix files and records them; a
             completed rebuild is swapped in for the live index, a failed
             one is discarded. The rebuild then syncs the live index once
             more: its own scan is as old as the rebuild, and a note saved
             since (which a watcher beside it may have taken into the old
             index) must not wait for the next full rescan.

Readers hold an ``IndexWriter`` too, for its connection and to follow what
writers did (``refresh``); they never call ``sync``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from . import faults
from .config import VaultConfig
from .errors import VaultMismatchError, VaultSearchError
from .segment import Segmenter
from .store import (
    check_schema,
    connect,
    db_path,
    describe_db_error,
    get_meta,
    migrate,
    set_meta,
    transaction,
    writer_lock,
)
from .sync import Progress, SyncReport, load_segmenter, sync_vault

if TYPE_CHECKING:
    from .embed import Embedder

REBUILD_DIR = "rebuild"   # `index --rebuild` builds here, beside the live index, and swaps in when done
REBUILD_LOCK = "rebuild.lock"   # held by the one rebuild running
# The resident process of an index: `serve` or `watch` holds RESIDENT_LOCK for
# its life, and `serve` writes SERVER_FILE (vault_search/server.py LOCK_FILE,
# SERVER_FILE: the same names, which this package cannot import).
RESIDENT_LOCK = "serve.lock"
SERVER_FILE = "server.json"
QUERY_LOG = "queries.db"   # vault_search/querylog.py LOG_FILE
# Each `mcp` session (several may share an index, beside a `serve`) holds its
# own MCP_LOCK % pid for its life: it keeps the index current as they do.
MCP_LOCK = "mcp.%d.lock"
Identity = tuple[int, int]   # (st_dev, st_ino) of the db file: a rebuild replaces the file


class IndexWriter:
    """One open index database, and everything that changes it.

    ``generation`` grows whenever the data behind the connection may have
    been replaced wholesale (another db file, a new matrix), so caches over
    it (the query side's matrix) know to reload.
    """

    def __init__(self, config: VaultConfig, conn: sqlite3.Connection | None, embedder: Embedder | None = None):
        self.config = config
        # None only for an ``Index`` that reads vault files and never the db.
        self.conn = cast(sqlite3.Connection, conn)
        self.generation = 0
        self.created = False   # this open made the db file: a new index
        self._embedder = embedder
        self._embedder_given = embedder is not None
        self._segmenter: Segmenter | None = None
        self._dictionary_size = 0
        self._identity: Identity | None = None
        self._rebuild_of: Path | None = None   # set while this is a rebuild of that folder's index
        self._rebuild_lock = None   # the open rebuild.lock while this writer is a rebuild
        self._previous_model: str | None = None

    # -- 1. open -------------------------------------------------------------
    @classmethod
    def open(cls, config: VaultConfig, *, create: bool = False, rebuild: bool = False,
             embedder: Embedder | None = None) -> IndexWriter:
        """Open the index of ``config``; ``create`` for writers, ``rebuild`` to start afresh.

        ``embedder``: used instead of the index's recorded model (tests pass a
        deterministic one).
        """
        if rebuild:
            return cls._open_rebuild(config, embedder)
        created = not db_path(config.index_dir).exists()
        conn = connect(db_path(config.index_dir), create=create)
        writer = cls(config, conn, embedder)
        writer.created = created
        writer._identity = _identity_of(writer.config.index_dir)
        try:
            if not create:
                check_schema(conn)
            writer.check_vault()
        except BaseException:
            conn.close()
            raise
        return writer

    @classmethod
    def _open_rebuild(cls, config: VaultConfig, embedder: Embedder | None) -> IndexWriter:
        """A new index built beside the live one (in ``rebuild/``), which the
        first sync that completes swaps in: until then, and whenever the
        rebuild fails or is interrupted, the old index keeps answering.
        Without a ``model`` the rebuild keeps the old index's model."""
        build = Path(config.index_dir) / REBUILD_DIR
        # One rebuild at a time, held until it is swapped in or thrown away: a
        # second one would delete the first's files, or have them swapped in half-built.
        lock = _claim_rebuild(Path(config.index_dir))
        try:
            _refuse_foreign_rebuild(Path(config.index_dir), config.vault)
            with writer_lock(build):
                _remove_index_files(build)
            writer = cls(replace(config, index_dir=build), connect(db_path(build), create=True), embedder)
        except BaseException:
            lock.close()
            raise
        writer._rebuild_lock = lock
        writer._rebuild_of = Path(config.index_dir)
        writer._previous_model = _recorded_model(config.index_dir)
        writer._identity = _identity_of(writer.config.index_dir)
        return writer

    def check_vault(self) -> None:
        """An index serves the vault it was built from, never another one."""
        try:
            recorded = get_meta(self.conn, "vault")
        except sqlite3.OperationalError:  # a new, empty db
            return
        if recorded and recorded != str(self.config.vault):
            raise _mismatch(Path(self.config.index_dir), recorded, self.config.vault)

    def close(self) -> None:
        self.conn.close()
        self._release_rebuild()

    def _release_rebuild(self) -> None:
        if self._rebuild_lock is not None:
            self._rebuild_lock.close()   # closing the file releases its flock
            self._rebuild_lock = None

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def model_spec(self) -> str | None:
        """The embedding model this index was built with (None: keyword only)."""
        return get_meta(self.conn, "embed_model")

    @property
    def embedder(self) -> Embedder | None:
        """The embedder passed to ``open``, else the index's model (loaded on
        first use); None for a keyword-only index."""
        if self._embedder is None:
            spec = self.model_spec
            if spec is None:
                return None
            from .embed import get_embedder

            self._embedder = get_embedder(spec)
        return self._embedder

    @property
    def segmenter(self) -> Segmenter:
        """The segmenter with this index's dictionary (documents and queries alike)."""
        if self._segmenter is None:
            self._segmenter = load_segmenter(self.conn)
            self._dictionary_size = len(self._segmenter.known_words())
        return self._segmenter

    def embeds_by_default(self) -> bool:
        """Whether a resident writer (``watch``, ``serve``) embeds: a new index
        gets the default model, as `index` would give it; an index built with
        --no-embed stays keyword-only."""
        return self.model_spec is not None or self._embedder_given or self.created

    # -- 2. sync -------------------------------------------------------------
    def sync(self, progress: Progress | None = None, force: bool = False, *, embed: bool = True,
             model: str | None = None, embed_progress: Progress | None = None,
             embed_limit: int | None = None, paths: list[str] | None = None) -> SyncReport:
        """Bring the index up to date with the vault (incremental).

        Keyword search sees the changes as soon as the FTS batches commit;
        then, unless ``embed`` is false, chunks without a vector are embedded
        (``model`` on a new index, else the index's own) and the matrix file
        is rewritten. ``embed_limit`` stops after that many passages.
        ``paths`` limits the keyword sync to those vault-relative files or
        folders (a watcher's batch; ``[]``: embed only).
        """
        try:
            with writer_lock(self.config.index_dir):
                report = self._sync(progress, force, embed, model, embed_progress, embed_limit, paths)
            if self._rebuild_of is not None:
                self._swap_in()
                report = self._catch_up(report, embed, model, embed_limit)
            return report
        except sqlite3.DatabaseError as exc:
            error = describe_db_error(exc, self.config.index_dir)
            if self._rebuild_of is not None:
                self._discard_rebuild()
            raise error from None
        except BaseException:
            if self._rebuild_of is not None:
                self._discard_rebuild()
            raise

    def _sync(self, progress: Progress | None, force: bool, embed: bool, model: str | None,
              embed_progress: Progress | None, embed_limit: int | None, paths: list[str] | None) -> SyncReport:
        if self._follow_writers():
            paths = None  # everything, into the new file
        migrate(self.conn)
        self.check_vault()  # another writer may have rebuilt it for another vault meanwhile
        embedder = self._embedder_for_sync(embed, model)
        if paths is not None and not paths:
            report = SyncReport()
        else:
            report = sync_vault(self.conn, self.config, self.segmenter, progress=progress, force=force,
                                paths=paths, token_counter=embedder.token_counter() if embedder else None)
        if embed:
            from .vectors import embedding_pass

            # `embed` always chose an embedder (_embedder_for_sync).
            report.embedding = embedding_pass(self.conn, self.config.index_dir, cast("Embedder", embedder),
                                              embed_progress, embed_limit)
            self.generation += 1
        return report

    def _follow_writers(self) -> bool:
        """A long-lived writer (the watcher) follows an `index --rebuild` made
        by another process instead of writing into the deleted file; True
        when it switched to the new file."""
        identity = _identity_of(self.config.index_dir)
        if self._identity is None:
            self._identity = identity
            return False
        if identity == self._identity:
            return False
        self._switch_to(connect(db_path(self.config.index_dir), create=True), _identity_of(self.config.index_dir))
        return True

    def _embedder_for_sync(self, embed: bool, model: str | None) -> Embedder | None:
        """The embedder that sizes the chunks and, with ``embed``, embeds them."""
        model = model or (self._previous_model if self._rebuild_of is not None else None)
        if embed or model:
            # `index --no-embed --model X` on a new index records X: the
            # chunks are sized for it and the next `index` embeds with it.
            return self.embedder_for_writing(model)
        if self.model_spec:
            return self.embedder  # chunks stay sized for the index's model
        return None

    def embedder_for_writing(self, model: str | None) -> Embedder:
        """The index's recorded model (refusing another one, with the rebuild
        hint), else ``model``, else the default; recorded in the index."""
        from .embed import DEFAULT_MODEL, EmbedderError, get_embedder

        recorded = self.model_spec
        requested = model or (self._embedder.spec if self._embedder is not None else None)
        if recorded and requested and requested != recorded:
            raise EmbedderError(f"this index was built with --model {recorded}; to switch models run "
                                f"`vault-search index --rebuild --model {requested}`")
        spec = recorded or requested or DEFAULT_MODEL
        if self._embedder is None or self._embedder.spec != spec:
            self._embedder = get_embedder(spec)
        with transaction(self.conn, "model"):
            set_meta(self.conn, "embed_model", spec)
            set_meta(self.conn, "embed_fingerprint", self._embedder.fingerprint)
        return self._embedder

    # -- 4. publish a rebuild ------------------------------------------------
    def _swap_in(self) -> None:
        """Replace the live index with the completed rebuild (``_move_over``)."""
        live, build = cast(Path, self._rebuild_of), Path(self.config.index_dir)
        faults.point("swap")
        with writer_lock(live):
            _refuse_foreign_rebuild(live, self.config.vault)   # a `serve` of the old vault started meanwhile?
            recorded = _recorded_meta(live, "vault")
            _move_over(self.conn, build, live)
            if recorded and recorded != str(self.config.vault):
                _set_aside_query_log(live)
        self._rebuild_of = None
        self.config = replace(self.config, index_dir=live)
        self.conn = connect(db_path(live))
        self._identity = _identity_of(self.config.index_dir)
        self.generation += 1
        shutil.rmtree(build, ignore_errors=True)
        self._release_rebuild()

    def _catch_up(self, report: SyncReport, embed: bool, model: str | None, embed_limit: int | None) -> SyncReport:
        """Sync the swapped-in index once more: the rebuild's scan is as old as
        the rebuild, and what was saved since may be only in the old index."""
        faults.point("swapped")
        with writer_lock(self.config.index_dir):
            later = self._sync(None, False, embed, model, None, embed_limit, None)
        return _merged(report, later)

    def _discard_rebuild(self) -> None:
        """A failed or interrupted rebuild leaves nothing behind but the old index."""
        live = cast(Path, self._rebuild_of)
        self.conn.close()
        shutil.rmtree(Path(self.config.index_dir), ignore_errors=True)
        self.config = replace(self.config, index_dir=live)
        self.conn = connect(db_path(live), create=True)
        self._rebuild_of = None
        self._identity = _identity_of(self.config.index_dir)
        self.generation += 1
        self._release_rebuild()

    # -- readers: follow what writers did ------------------------------------
    def refresh(self) -> None:
        """For long-lived readers (the server): follow what writers did.

        Reopens the database if ``index --rebuild`` replaced the file, and
        teaches the query segmenter the vault names a sync added to the
        dictionary, so queries keep segmenting like the documents.
        """
        identity = _identity_of(self.config.index_dir)
        if self._identity is None:
            self._identity = identity
        elif identity is not None and identity != self._identity:
            # `index --rebuild` made a new file: switch once its first sync
            # has committed; until then the old file (still open) answers.
            try:
                fresh = connect(db_path(self.config.index_dir))
                check_schema(fresh)
                ready = get_meta(fresh, "last_sync") is not None
            except (VaultSearchError, sqlite3.DatabaseError):
                return
            if not ready:
                fresh.close()
                return
            self._switch_to(fresh, identity)
            return
        if self._segmenter is not None:
            count = self.conn.execute("SELECT count(*) FROM dictionary").fetchone()[0]
            if count != self._dictionary_size:
                words = dict(self.conn.execute("SELECT word, freq FROM dictionary"))
                self._segmenter.learn(words)
                self._dictionary_size = count

    def _switch_to(self, conn: sqlite3.Connection, identity: Identity | None) -> None:
        self.conn.close()
        self.conn = conn
        self._identity = identity
        self._segmenter = None
        self.generation += 1
        if not self._embedder_given or _of_another_model(self._embedder, conn):
            self._embedder, self._embedder_given = None, False   # a rebuild may have chosen another model


def _of_another_model(embedder: Embedder | None, conn: sqlite3.Connection) -> bool:
    """A given embedder (a resident's, shared by its reader) of another model
    than the index now records: it would embed queries the vectors cannot match."""
    recorded = get_meta(conn, "embed_model")
    return embedder is not None and recorded is not None and embedder.spec != recorded


def _identity_of(index_dir: str | os.PathLike) -> Identity | None:
    try:
        st = os.stat(db_path(Path(index_dir)))
        return st.st_dev, st.st_ino
    except OSError:
        return None


def _move_over(conn: sqlite3.Connection, build: Path, live: Path) -> None:
    """Move a completed rebuild's files over the live index's, closing
    ``conn`` (the rebuild's): the db first (fully checkpointed, so no WAL
    travels with it; the old WAL and shared-memory files go before it
    arrives, so they are never applied to it), then the matrix files, which
    the db's digests check anyway."""
    from .vectors import IDS_FILE, VECTORS_FILE

    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    target = db_path(live)
    for suffix in ("-wal", "-shm"):
        _remove(f"{target}{suffix}")
    os.replace(db_path(build), target)
    for name in (IDS_FILE, VECTORS_FILE):
        if (build / name).exists():
            os.replace(build / name, live / name)
        else:
            _remove(live / name)


def _merged(rebuild: SyncReport, later: SyncReport) -> SyncReport:
    """A rebuild's report with its catch-up sync's changes: what was done to
    reach the vault as it is when the rebuild reports done."""
    embedding = rebuild.embedding
    if embedding is not None and later.embedding is not None:
        embedding = replace(later.embedding, embedded=embedding.embedded + later.embedding.embedded,
                            cached=embedding.cached + later.embedding.cached,
                            latent=embedding.latent + later.embedding.latent,
                            seconds=embedding.seconds + later.embedding.seconds,
                            matrix_written=embedding.matrix_written or later.embedding.matrix_written)
    return replace(rebuild, scanned=later.scanned, added=rebuild.added + later.added,
                   updated=rebuild.updated + later.updated, deleted=rebuild.deleted + later.deleted,
                   skipped=later.skipped, touched=rebuild.touched + later.touched,
                   chunks_written=rebuild.chunks_written + later.chunks_written,
                   seconds=rebuild.seconds + later.seconds, embedding=embedding,
                   warnings=rebuild.warnings + [w for w in later.warnings if w not in rebuild.warnings])


def resident(index_dir: str | os.PathLike) -> tuple[int, str] | None:
    """The `serve`, `watch` or `mcp` that keeps this index current, as (pid, command), else None.

    It holds ``serve.lock`` (an `mcp` session its own ``mcp.PID.lock``) for
    its life (the kernel lets go however it ends), so a lock held is a live
    one; a server from before that lock existed shows only in
    ``server.json``, with a live pid.
    """
    import fcntl

    path = Path(index_dir) / RESIDENT_LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return _server_from_before_the_lock(Path(index_dir)) or _mcp_session(Path(index_dir))
    except OSError:
        return _mcp_session(Path(index_dir))
    try:
        # Probed, never waited for: a shared lock for an instant, released at once by the close.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return _mcp_session(Path(index_dir))
    except BlockingIOError:
        holder = _json_object(os.pread(fd, 4096, 0))
        pid = holder.get("pid")
        return (pid if isinstance(pid, int) else 0), str(holder.get("command") or "serve")
    except OSError:   # a file system without locks
        return _server_from_before_the_lock(Path(index_dir))
    finally:
        os.close(fd)


def _mcp_session(index_dir: Path) -> tuple[int, str] | None:
    """A live `mcp` session of this index, as (pid, "mcp"), else None. A
    lock file left by a killed session is free, so it counts for nothing."""
    import fcntl

    for path in sorted(index_dir.glob(MCP_LOCK.replace("%d", "*"))):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)   # probed, released at once by the close
        except BlockingIOError:
            pid = path.name.split(".")[1]
            return (int(pid) if pid.isdigit() else 0), "mcp"
        except OSError:
            continue
        finally:
            os.close(fd)
    return None


class SessionLock:
    """What an `mcp` session holds for its life, so a rebuild for another
    vault is refused under it (``resident``) as under `serve` and `watch`."""

    def __init__(self, index_dir: str | os.PathLike):
        import fcntl

        self.path = Path(index_dir) / (MCP_LOCK % os.getpid())
        self.fd: int | None = None
        try:
            Path(index_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)   # this session's own file: never waits
        except OSError:   # a read-only index folder, or no locks: unguarded, as `serve` there
            self.release()

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.remove(self.path)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "SessionLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _mismatch(index_dir: Path, recorded: str, vault: Path) -> VaultMismatchError:
    """The refusal of an index built for another vault. It names --rebuild
    only with what that replaces, and never while a `serve` or `watch` keeps
    that index (another process: a resident finding its own index taken over
    may be told how to take it back)."""
    mismatch = f"the index at {index_dir} belongs to the vault {recorded}, not {vault}"
    separate = "use another --index-dir (or unset VAULT_SEARCH_INDEX_DIR) for a separate index of this vault"
    holder = resident(index_dir)
    if holder is not None and holder[0] != os.getpid():
        return VaultMismatchError(f"{mismatch}, and {_who(holder)} uses it; {separate}")
    return VaultMismatchError(f"{mismatch}; {separate}, or `vault-search index --rebuild` to replace the index "
                              f"of {recorded} with this vault's")


def _who(holder: tuple[int, str]) -> str:
    pid, command = holder
    return f"`vault-search {command}`" + (f" (pid {pid})" if pid else "")


def _server_from_before_the_lock(index_dir: Path) -> tuple[int, str] | None:
    """A `serve` that holds no ``serve.lock`` (from before it existed): its
    ``server.json`` names a live pid and a port that takes a connection. Both,
    so a stale file whose pid was reused never refuses a rebuild for good."""
    import socket

    try:
        info = _json_object((index_dir / SERVER_FILE).read_bytes())
    except OSError:
        return None
    pid, host, port = info.get("pid"), info.get("host"), info.get("port")
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except PermissionError:
        pass   # another user's process: alive
    except OSError:
        return None
    if not isinstance(host, str) or not isinstance(port, int) or not 0 < port < 65536:
        return None
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError:
        return None
    return pid, "serve"


def _json_object(data: bytes) -> dict:
    try:
        value = json.loads(data or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _refuse_foreign_rebuild(live: Path, vault: Path) -> None:
    """A rebuild for another vault replaces that vault's index: never under a
    `serve` or `watch` that keeps it (it would serve this vault's notes as its
    own, and its watcher would stop at the mismatch)."""
    recorded = _recorded_meta(live, "vault")
    if not recorded or recorded == str(vault):
        return
    holder = resident(live)
    if holder is not None and holder[0] != os.getpid():
        raise VaultMismatchError(
            f"the index at {live} is in use by {_who(holder)} for the vault {recorded}; a rebuild for {vault} "
            "would replace that vault's index: stop it first, or use another --index-dir")


def _set_aside_query_log(live: Path) -> None:
    """The index now holds another vault: the old vault's query log (its
    searches, the paths they hit) must not show in this vault's `log`. It is
    set aside as ``queries.db.other-vault-<time>``, which nothing reads."""
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S")
    for suffix in ("", "-wal", "-shm"):
        try:
            os.replace(live / (QUERY_LOG + suffix), live / f"{QUERY_LOG}.other-vault-{stamp}{suffix}")
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise VaultSearchError(f"cannot set aside the other vault's query log {live / QUERY_LOG}: "
                                   f"{exc.strerror}") from None


def _claim_rebuild(live: Path):
    """``rebuild.lock`` of the live index, locked, or a one-line refusal."""
    import fcntl

    live.mkdir(parents=True, exist_ok=True, mode=0o700)
    fh = os.fdopen(os.open(live / REBUILD_LOCK, os.O_RDWR | os.O_CREAT, 0o600), "r+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "?"
        fh.close()
        raise VaultSearchError(f"a rebuild of this index is already running (pid {holder}); "
                               "wait for it to finish, or stop it") from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def _remove(path: str | os.PathLike) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise VaultSearchError(f"cannot remove {path}: {exc.strerror}") from None


def _remove_index_files(folder: Path) -> None:
    from .vectors import IDS_FILE, VECTORS_FILE

    path = db_path(folder)
    for name in (f"{path}", f"{path}-wal", f"{path}-shm", folder / IDS_FILE, folder / VECTORS_FILE):
        _remove(name)


def _recorded_model(index_dir: str | os.PathLike) -> str | None:
    """The model an existing (maybe damaged) index was built with, if it can be read."""
    return _recorded_meta(index_dir, "embed_model")


def _recorded_meta(index_dir: str | os.PathLike, key: str) -> str | None:
    """A meta value of an existing (maybe damaged) index, if it can be read."""
    path = db_path(Path(index_dir))
    if not path.exists():
        return None
    try:
        conn = connect(path, readonly=True)
        try:
            return get_meta(conn, key)
        finally:
            conn.close()
    except (VaultSearchError, sqlite3.DatabaseError):
        return None
