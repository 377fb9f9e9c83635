"""``Index``: one object that owns a vault's index and answers queries.

    with Index.open("~/notes") as idx:
        idx.sync()
        for r in idx.search("数据库 索引").results:
            print(r.path, r.start_line, r.snippet)
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, Any

from indexer.config import VaultConfig, load_config
from indexer.errors import IndexVersionError
from indexer.segment import Segmenter
from indexer.store import get_meta, vectors_state
from indexer.sync import Progress, SyncReport
from indexer.writer import IndexWriter

from . import files, graph, search, status
from .options import SearchOptions, UnsupportedModeError
from .results import FolderListing, IndexStatus, NoteLinks, NoteText, NoteTexts, SearchResponse, TagCounts, Timeline

if TYPE_CHECKING:
    from .querylog import QueryLog
    from .rerank import RerankSettings
    from .similar import SimilarResponse
    from .vector import ChunkNotes


class Index:
    """A vault's index: the writer's connection and lazy models, and the
    query side over them (``with Index.open(vault) as idx: idx.search(...)``)."""

    def __init__(self, config: VaultConfig, conn: sqlite3.Connection | None, embedder=None, *,
                 writer: IndexWriter | None = None):
        self.writer = writer if writer is not None else IndexWriter(config, conn, embedder)
        self._vectors = None
        self._vectors_key: tuple | None = None
        self._latent = None
        self._latent_key: tuple | None = None
        self._chunk_notes: ChunkNotes | None = None
        self._chunk_notes_key: tuple | None = None
        self._han_share: float | None = None
        self._han_share_key: tuple[int, int] | None = None

    # -- lifecycle and writing: indexer/writer.py -------------------------
    @classmethod
    def open(cls, vault: str | os.PathLike | None = None, index_dir: str | os.PathLike | None = None, *,
             config: VaultConfig | None = None, create: bool = False, rebuild: bool = False,
             embedder=None) -> Index:
        """Open the index of ``vault``; ``create`` for writers, ``rebuild`` to start afresh.

        ``embedder``: an ``indexer.embed.Embedder`` to use instead of the
        index's recorded model (tests pass a deterministic one).
        """
        config = config or load_config(vault, index_dir)
        writer = IndexWriter.open(config, create=create, rebuild=rebuild, embedder=embedder)
        return cls(config, writer.conn, writer=writer)

    @property
    def config(self) -> VaultConfig:
        return self.writer.config

    @property
    def conn(self) -> sqlite3.Connection:
        return self.writer.conn

    @property
    def segmenter(self) -> Segmenter:
        return self.writer.segmenter

    def sync(self, progress: Progress | None = None, force: bool = False, *, embed: bool = True,
             model: str | None = None, embed_progress: Progress | None = None,
             embed_limit: int | None = None, paths: list[str] | None = None) -> SyncReport:
        """Bring the index up to date with the vault (``IndexWriter.sync``)."""
        return self.writer.sync(progress, force, embed=embed, model=model, embed_progress=embed_progress,
                                embed_limit=embed_limit, paths=paths)

    def refresh(self) -> None:
        """For long-lived readers (the server): follow what writers did (``IndexWriter.refresh``)."""
        self.writer.refresh()

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reading: vault_search/search.py, graph.py, files.py, status.py -------
    def search(self, query: str, options: SearchOptions | None = None, *,
               rerank_settings: RerankSettings | None = None, log: bool = True, **fields: Any) -> SearchResponse:
        """Search the vault (``search.run``): ``options``, or its fields as keywords.
        With ``log_queries`` set, the search goes into the query log (``querylog``) unless ``log`` is False
        (the server's warm-up, the search page's searches as you type)."""
        response = search.run(self, query, SearchOptions.of(options, **fields), rerank_settings)
        if self.config.log_queries and log:
            from . import querylog

            querylog.record(self.config.index_dir, response)
        return response

    def query_log(self, limit: int = 20, misses: bool = False) -> QueryLog:
        """The last searches, newest first; ``misses``: those that found nothing, only weak matches, or
        were never followed by a get (``querylog.read``)."""
        from . import querylog

        return querylog.read(self.config.index_dir, self.config.log_queries, limit, misses)

    def _followed(self, paths: list[str]) -> None:
        if self.config.log_queries and paths:
            from . import querylog

            querylog.followed(self.config.index_dir, paths)

    def links(self, path: str) -> NoteLinks:
        """A note's links and backlinks (``graph.note_links``)."""
        return graph.note_links(self.conn, self.config, path)

    def tags(self, limit: int | None = None) -> TagCounts:
        """Every tag with its note count, most used first (``graph.tag_counts``)."""
        return graph.tag_counts(self.conn, limit)

    def multi_get(self, patterns: list[str], max_bytes: int | None = None,
                  max_lines: int | None = None, follow: bool = True) -> NoteTexts:
        """Several notes at once, by glob, folder, path or name, within a size cap (``browse.multi_get``);
        ``follow``: mark the searches that listed them followed in the query log."""
        from . import browse

        texts = browse.multi_get(self.conn, self.config, patterns, max_bytes or browse.DEFAULT_MAX_BYTES, max_lines)
        if follow:
            self._followed([n.path for n in texts.notes])
        return texts

    def ls(self, folder: str | None = None) -> FolderListing:
        """A folder's sub-folders (with counts) and notes (``browse.list_folder``)."""
        from . import browse

        return browse.list_folder(self.conn, folder)

    def similar(self, note: str | None = None, text: str | None = None, limit: int = 10) -> SimilarResponse:
        """The notes most like a note or a draft (``similar.similar``)."""
        from .similar import similar

        return similar(self, note, text, limit)

    def timeline(self, folder: str | None = None, after: str | None = None, before: str | None = None) -> Timeline:
        """A folder's daily-log entries by time (``browse.timeline``)."""
        from . import browse

        return browse.timeline(self.conn, folder, after, before)

    # -- vectors -----------------------------------------------------------
    @property
    def model_spec(self) -> str | None:
        """The embedding model this index was built with (None: keyword only)."""
        return self.writer.model_spec

    @property
    def embedder(self):
        """The embedder for queries: the one passed to ``open``, else the index's model."""
        embedder = self.writer.embedder
        if embedder is None:
            raise UnsupportedModeError("this index has no embeddings; run `vault-search index`")
        return embedder

    def has_vectors(self) -> bool:
        if not self.model_spec:
            return False
        state = vectors_state(self.conn)
        return state is not None and state.get("rows", 0) > 0

    def vectors(self):
        """The chunk matrix, reloaded whenever an ``index`` run has replaced it."""
        from .vector import VectorIndex

        key = (self.writer.generation, vectors_state(self.conn))
        if self._vectors is None or self._vectors_key != key or self._vectors.problem:
            embedder = self.embedder
            recorded = get_meta(self.conn, "embed_fingerprint")
            if recorded and recorded != embedder.fingerprint:
                raise IndexVersionError(
                    f"the index's vectors were made by {recorded.split('|')[0]} ({recorded}), but this "
                    f"vault-search embeds queries with {embedder.fingerprint}; run `vault-search index` "
                    "to re-embed, or `vault-search index --rebuild --model MODEL`")
            self._vectors = VectorIndex.load(self.conn, self.config.index_dir, embedder.fingerprint, embedder.dim)
            self._vectors_key = key
        return self._vectors

    def latent(self):
        """Every embedded chunk's latent terms (``vector.LatentIndex``; empty
        unless the model has them), read again whenever the matrix is."""
        from .vector import LatentIndex

        key = (self.writer.generation, vectors_state(self.conn))
        if self._latent is None or self._latent_key != key:
            embedder = self.embedder
            self._latent = LatentIndex.load(self.conn, embedder.fingerprint) if embedder.latent else None
            self._latent_key = key
        return self._latent

    def han_share(self) -> float | None:
        """How much of the notes' prose is Chinese (``search.sample_han_share``; None:
        no words at all). Read again when the index is rebuilt or its chunk
        count has moved by more than a tenth since: an edited note does not
        change a vault's language, and a reading costs 20 ms at 100k chunks."""
        generation, _, count = self._chunks_key()
        known = self._han_share_key
        if known is None or known[0] != generation or abs(count - known[1]) > search.HAN_SHARE_DRIFT * max(known[1], 1):
            self._han_share = search.sample_han_share(self.conn)
            self._han_share_key = (generation, count)
        return self._han_share

    def chunk_notes(self) -> ChunkNotes:
        """Each chunk's note (``vector.ChunkNotes``), read again whenever the
        chunks have changed (``_chunks_key``)."""
        from .vector import ChunkNotes

        notes = self.current_chunk_notes()
        if notes is None:
            notes = self._chunk_notes = ChunkNotes.load(self.conn)
            self._chunk_notes_key = self._chunks_key()
        return notes

    def current_chunk_notes(self) -> ChunkNotes | None:
        """``chunk_notes`` when they have been read and the chunks have not
        changed since, else None: a keyword search uses only arrays a vector
        search has paid for (reading them costs 15 ms at 21k chunks, 100+ at 100k)."""
        if self._chunk_notes is None or self._chunk_notes_key != self._chunks_key():
            return None
        return self._chunk_notes

    def _chunks_key(self) -> tuple:
        """Changes whenever the chunks do. Chunk ids are AUTOINCREMENT (never
        reused) and a chunk row is never updated, only inserted or deleted,
        so the last id given and the row count say whether the rows are the
        ones read before. Keying on every commit instead (``PRAGMA
        data_version``) read them again after a no-op sync's or a rerank
        cache's write."""
        try:
            row = self.conn.execute("SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'chunks'), "
                                    "(SELECT count(*) FROM chunks)").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            row = (None, 0)   # nothing indexed yet: no chunks table, or no sqlite_sequence
        return (self.writer.generation, row[0], row[1])

    def obsidian_uri(self, path: str) -> str:
        return search.obsidian_uri(self.config.vault_name, path)

    def get(self, path: str, start: int | None = None, end: int | None = None, follow: bool = True) -> NoteText:
        """Lines ``start``..``end`` (1-based, inclusive) of a note inside the
        vault (``files.read_note``). ``path`` may be a note's name or alias,
        and may carry the range as ``PATH:START-END`` when start and end are
        not given. ``follow``: mark the searches that listed it followed."""
        if start is None and end is None:
            path, start, end = files.parse_location(self.config, path)
        note = files.read_note(self.config, path, start, end, self.conn)
        if follow:
            self._followed([note.path])
        return note

    def resolve_path(self, path: str) -> str:
        """The real file behind a vault path; refuses anything outside the vault."""
        return files.resolve_path(self.config, path)

    def status(self, warnings_limit: int = 50) -> IndexStatus:
        return status.index_status(self.conn, self.config, warnings_limit)

