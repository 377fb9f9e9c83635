"""``Index``: one object that owns a vault's index and answers queries.

    with Index.open("~/notes") as idx:
        idx.sync()
        for r in idx.search("数据库 索引").results:
            print(r.path, r.start_line, r.snippet)

A facade: writing is ``IndexWriter``'s (indexer/writer.py), the query side's
state is ``Reader``'s (reader.py), and each call below is one line into the
module that does the work.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from indexer.config import VaultConfig, load_config
from indexer.sync import Progress, SyncReport
from indexer.writer import IndexWriter

from . import files, graph, search, status
from .options import SearchOptions
from .reader import Reader
from .results import FolderListing, IndexStatus, NoteLinks, NoteText, NoteTexts, SearchResponse, TagCounts, Timeline

if TYPE_CHECKING:
    from .querylog import QueryLog
    from .rerank import RerankSettings
    from .similar import SimilarResponse


class Index(Reader):
    """A vault's index: the writer's connection and lazy models, and the
    query side over them (``with Index.open(vault) as idx: idx.search(...)``)."""

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
        return cls(IndexWriter.open(config, create=create, rebuild=rebuild, embedder=embedder))

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

    # -- reading: vault_search/search/, graph.py, files.py, status.py -------
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

    def status(self, warnings_limit: int = 50) -> IndexStatus:
        return status.index_status(self.conn, self.config, warnings_limit)

