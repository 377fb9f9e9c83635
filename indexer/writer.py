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
             one committed batch at a time, newest notes first.
4. publish   the same pass writes the matrix files and records them, as it
             goes (``vectors.Publisher``) and at its end; a
             completed rebuild is swapped in for the live index, a failed
             one is discarded. The rebuild then syncs the live index once
             more: its own scan is as old as the rebuild, and a note saved
             since (which a watcher beside it may have taken into the old
             index) must not wait for the next full rescan.

Readers hold an ``IndexWriter`` too, for what it has of an
``IndexConnection``: the connection, and following what writers did
(``refresh``); they never call ``sync``. The rebuild's own steps (claim,
swap in, set aside) are ``indexer.rebuild``'s; who keeps an index current
(``serve``, ``watch``, ``mcp``) is ``indexer.resident``'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from . import faults
from .config import VaultConfig
from .errors import VaultSearchError
from .rebuild import Rebuild, build_dir, merged
from .resident import SessionLock as SessionLock  # vault_search.cli imports it from here
from .resident import mismatch
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
    from .embed import Embedder, TokenCounter

log = logging.getLogger("vault_search.writer")

Identity = tuple[int, int]   # (st_dev, st_ino) of the db file: a rebuild replaces the file
_Open = TypeVar("_Open", bound="IndexConnection")


class IndexConnection:
    """One open index database: its connection, model and segmenter, kept
    following what writers do (``refresh``). Readers hold one (as an
    ``IndexWriter``, which adds everything that changes the index).

    ``generation`` grows whenever the data behind the connection may have
    been replaced wholesale (another db file, a new matrix), so caches over
    it (the query side's matrix) know to reload.
    """

    def __init__(self, config: VaultConfig, conn: sqlite3.Connection | None, embedder: Embedder | None = None):
        self.config = config
        # None only for an ``Index`` that reads vault files and never the db.
        self.conn = cast(sqlite3.Connection, conn)
        self.generation = 0
        self._embedder = embedder
        self._embedder_given = embedder is not None
        self._segmenter: Segmenter | None = None
        self._dictionary_size = 0
        self._identity: Identity | None = None

    def check_vault(self) -> None:
        """An index serves the vault it was built from, never another one."""
        try:
            recorded = get_meta(self.conn, "vault")
        except sqlite3.OperationalError:  # a new, empty db
            return
        if recorded and recorded != str(self.config.vault):
            raise mismatch(Path(self.config.index_dir), recorded, self.config.vault)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self: _Open) -> _Open:
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


def _of_another_model(embedder: Embedder | None, conn: sqlite3.Connection) -> bool:
    """A given embedder (a resident's, shared by its reader) of another model
    than the index now records: it would embed queries the vectors cannot match."""
    recorded = get_meta(conn, "embed_model")
    return embedder is not None and recorded is not None and embedder.spec != recorded


class IndexWriter(IndexConnection):
    """An open index database, and everything that changes it."""

    def __init__(self, config: VaultConfig, conn: sqlite3.Connection | None, embedder: Embedder | None = None):
        super().__init__(config, conn, embedder)
        self.created = False   # this open made the db file: a new index
        self._rebuild: Rebuild | None = None   # set while this is a rebuild of another folder's index

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
        """A new index built beside the live one (``indexer.rebuild``), which
        the first sync that completes swaps in. Without a ``model`` the
        rebuild keeps the old index's model."""
        rebuild, conn = Rebuild.begin(Path(config.index_dir), config.vault)
        writer = cls(replace(config, index_dir=build_dir(rebuild.live)), conn, embedder)
        writer._rebuild = rebuild
        writer._identity = _identity_of(writer.config.index_dir)
        return writer

    def close(self) -> None:
        super().close()
        if self._rebuild is not None:
            self._rebuild.release()

    def embeds_by_default(self) -> bool:
        """Whether a resident writer (``watch``, ``serve``) embeds: a new index
        gets the default model, as `index` would give it; an index built with
        --no-embed stays keyword-only."""
        return self.model_spec is not None or self._embedder_given or self.created

    # -- 2. sync -------------------------------------------------------------
    def sync(self, progress: Progress | None = None, force: bool = False, *, embed: bool = True,
             model: str | None = None, embed_progress: Progress | None = None,
             embed_limit: int | None = None, paths: list[str] | None = None,
             embed_later: bool = False) -> SyncReport:
        """Bring the index up to date with the vault (incremental).

        Keyword search sees the changes as soon as the FTS batches commit;
        then, unless ``embed`` is false, chunks without a vector are embedded
        (``model`` on a new index, else the index's own) and the matrix file
        is rewritten. ``embed_limit`` stops after that many passages.
        ``paths`` limits the keyword sync to those vault-relative files or
        folders (a watcher's batch; ``[]``: embed only). ``embed_later``
        (with ``embed`` false): a resident writer's first sync, whose chunks
        are sized for the model that will embed them (``embeds_by_default``).
        """
        try:
            with writer_lock(self.config.index_dir):
                report = self._sync(progress, force, embed, model, embed_progress, embed_limit, paths, embed_later)
            if self._rebuild is not None:
                self._swap_in(self._rebuild)
                report = self._catch_up(report, embed, model, embed_limit)
            return report
        except sqlite3.DatabaseError as exc:
            error = describe_db_error(exc, self.config.index_dir)
            if self._rebuild is not None:
                self._discard_rebuild(self._rebuild)
            raise error from None
        except BaseException:
            if self._rebuild is not None:
                self._discard_rebuild(self._rebuild)
            raise

    def _sync(self, progress: Progress | None, force: bool, embed: bool, model: str | None,
              embed_progress: Progress | None, embed_limit: int | None, paths: list[str] | None,
              embed_later: bool = False) -> SyncReport:
        if self._follow_writers():
            paths = None  # everything, into the new file
        migrate(self.conn)
        self.check_vault()  # another writer may have rebuilt it for another vault meanwhile
        if embed or not embed_later or not self.embeds_by_default():
            embedder = self._embedder_for_sync(embed, model)
            counter = embedder.token_counter() if embedder else None
        else:
            embedder, counter = None, self._counter_for_later(model)
        if embed:
            from .vectors import embedding_pass, record_run

            record_run(self.conn, True)   # until the pass ends (a failed sync: the lock's release)
        try:
            if paths is not None and not paths:
                report = SyncReport()
            else:
                report = sync_vault(self.conn, self.config, self.segmenter, progress=progress, force=force,
                                    paths=paths, token_counter=counter)
        except BaseException:
            if embed:   # no pass follows: a later writer's lock must not vouch for this record
                with contextlib.suppress(Exception):
                    record_run(self.conn, False)
            raise
        if embed:
            # `embed` always chose an embedder (_embedder_for_sync).
            # A rebuild takes the live index's vectors of unchanged text first.
            donor = db_path(self._rebuild.live) if self._rebuild is not None else None
            report.embedding = embedding_pass(self.conn, self.config.index_dir, cast("Embedder", embedder),
                                              embed_progress, embed_limit, donor=donor)
            self.generation += 1
        return report

    def _embedder_for_sync(self, embed: bool, model: str | None) -> Embedder | None:
        """The embedder that sizes the chunks and, with ``embed``, embeds them."""
        model = model or (self._rebuild.previous_model if self._rebuild is not None else None)
        if embed or model:
            # `index --no-embed --model X` on a new index records X: the
            # chunks are sized for it and the next `index` embeds with it.
            return self.embedder_for_writing(model)
        if self.model_spec:
            return self.embedder  # chunks stay sized for the index's model
        return None

    def _counter_for_later(self, model: str | None) -> TokenCounter | None:
        """The token counter of the model that will embed this index (a
        resident writer's first, keyword-only sync: ``embed_later``), so
        that its chunks are the ones `index` makes. A model that cannot
        load is the embedding pass's to report: the keyword index comes
        first, its chunks sized by the estimate."""
        from .embed import EmbedderError

        try:
            embedder = self._embedder_for_sync(True, model)
            return embedder.token_counter() if embedder is not None else None
        except EmbedderError as exc:
            log.warning("chunks sized by an estimate, not the model's tokenizer: %s", exc)
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
    def _swap_in(self, rebuild: Rebuild) -> None:
        """Replace the live index with the completed rebuild, and go on with the live one."""
        build = Path(self.config.index_dir)
        rebuild.swap_in(self.conn, build, self.config.vault)
        self._rebuild = None
        try:
            self._reopen(rebuild.live)
            shutil.rmtree(build, ignore_errors=True)
        finally:
            rebuild.release()   # whatever reopening does: the rebuild is over

    def _catch_up(self, report: SyncReport, embed: bool, model: str | None, embed_limit: int | None) -> SyncReport:
        """Sync the swapped-in index once more: the rebuild's scan is as old as
        the rebuild, and what was saved since may be only in the old index."""
        faults.point("swapped")
        with writer_lock(self.config.index_dir):
            later = self._sync(None, False, embed, model, None, embed_limit, None)
        return merged(report, later)

    def _discard_rebuild(self, rebuild: Rebuild) -> None:
        """A failed or interrupted rebuild leaves nothing behind but the old index."""
        self.conn.close()
        shutil.rmtree(Path(self.config.index_dir), ignore_errors=True)
        self._reopen(rebuild.live, create=True)
        self._rebuild = None
        rebuild.release()

    def _reopen(self, live: Path, create: bool = False) -> None:
        """Go on with the live index (the rebuild's connection is closed)."""
        self.config = replace(self.config, index_dir=live)
        self.conn = connect(db_path(live), create=create)
        self._identity = _identity_of(self.config.index_dir)
        self.generation += 1



def _identity_of(index_dir: str | os.PathLike) -> Identity | None:
    try:
        st = os.stat(db_path(Path(index_dir)))
        return st.st_dev, st.st_ino
    except OSError:
        return None
