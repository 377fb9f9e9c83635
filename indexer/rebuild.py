"""`index --rebuild`: a new index built beside the live one (in
``rebuild/``), which the first sync that completes swaps in. Until then, and
whenever the rebuild fails or is interrupted, the old index keeps answering.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import IO

from . import faults
from .errors import VaultMismatchError, VaultSearchError
from .resident import resident, who
from .store import connect, db_path, get_meta, writer_lock
from .sync import SyncReport

REBUILD_DIR = "rebuild"   # `index --rebuild` builds here, beside the live index, and swaps in when done
REBUILD_LOCK = "rebuild.lock"   # held by the one rebuild running
QUERY_LOG = "queries.db"   # vault_search/querylog.py LOG_FILE


class Rebuild:
    """One rebuild under way: the live index it replaces, the rebuild lock
    it holds until it is swapped in or thrown away, and the model the live
    index was built with (a rebuild without ``--model`` keeps it)."""

    def __init__(self, live: Path, lock: IO[str], previous_model: str | None):
        self.live = live
        self.previous_model = previous_model
        self._lock: IO[str] | None = lock

    @classmethod
    def begin(cls, live: Path, vault: Path) -> tuple[Rebuild, sqlite3.Connection]:
        """Claim the rebuild of ``live`` and open a new, empty db in its
        ``rebuild/`` folder (``build_dir``)."""
        # One rebuild at a time, held until it is swapped in or thrown away: a
        # second one would delete the first's files, or have them swapped in half-built.
        lock = _claim_rebuild(live)
        try:
            _refuse_foreign_rebuild(live, vault)
            with writer_lock(build_dir(live)):
                _remove_index_files(build_dir(live))
            conn = connect(db_path(build_dir(live)), create=True)
        except BaseException:
            lock.close()
            raise
        return cls(live, lock, _recorded_meta(live, "embed_model")), conn

    def swap_in(self, conn: sqlite3.Connection, build: Path, vault: Path) -> None:
        """Move the completed rebuild's files over the live index's
        (``_move_over``, which closes ``conn``), under the live index's writer lock."""
        faults.point("swap")
        with writer_lock(self.live):
            _refuse_foreign_rebuild(self.live, vault)   # a `serve` of the old vault started meanwhile?
            recorded = _recorded_meta(self.live, "vault")
            if recorded and recorded != str(vault):
                _set_aside_query_log(self.live)   # first: a failure here leaves the old index as it was
            _move_over(conn, build, self.live)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()   # closing the file releases its flock
            self._lock = None


def build_dir(live: Path) -> Path:
    """Where a rebuild of the index in ``live`` is built."""
    return Path(live) / REBUILD_DIR


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


def merged(rebuild: SyncReport, later: SyncReport) -> SyncReport:
    """A rebuild's report with its catch-up sync's changes: what was done to
    reach the vault as it is when the rebuild reports done."""
    embedding = rebuild.embedding
    if embedding is not None and later.embedding is not None:
        embedding = replace(later.embedding, embedded=embedding.embedded + later.embedding.embedded,
                            cached=embedding.cached + later.embedding.cached,
                            reused=embedding.reused + later.embedding.reused,
                            latent=embedding.latent + later.embedding.latent,
                            seconds=embedding.seconds + later.embedding.seconds,
                            matrix_written=embedding.matrix_written or later.embedding.matrix_written)
    return replace(rebuild, scanned=later.scanned, added=rebuild.added + later.added,
                   updated=rebuild.updated + later.updated, deleted=rebuild.deleted + later.deleted,
                   skipped=later.skipped, touched=rebuild.touched + later.touched,
                   chunks_written=rebuild.chunks_written + later.chunks_written,
                   seconds=rebuild.seconds + later.seconds, embedding=embedding,
                   warnings=rebuild.warnings + [w for w in later.warnings if w not in rebuild.warnings])


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
            f"the index at {live} is in use by {who(holder)} for the vault {recorded}; a rebuild for {vault} "
            "would replace that vault's index: stop it first, or use another --index-dir")


def _set_aside_query_log(live: Path) -> None:
    """The index is about to hold another vault: the old vault's query log
    (its searches, the paths they hit) must not show in this vault's `log`.
    It is set aside as ``queries.db.other-vault-<time>``, which nothing reads."""
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
