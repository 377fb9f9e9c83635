"""One vault kept current and warm, for the resident faces (HTTP, MCP).

A writer ``Index`` driven by the watcher (its own connection, its own
embedder) and a reader ``Index`` that answers queries, so a query never
waits for an embedding batch: readers see the last committed state (WAL).
One lock guards the reader; a reranked search lets go of it while the LLM
judges, so plain searches never wait behind a judge.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from indexer.config import VaultConfig, load_config
from indexer.errors import UsageValueError
from indexer.store import db_path
from indexer.watch import DEBOUNCE_S, RESCAN_INTERVAL_S, Watcher

from .index import MAX_LIMIT, Index
from .results import NoteText, SearchResponse

log = logging.getLogger("vault_search.service")

LIMIT_ERROR = f"limit must be between 1 and {MAX_LIMIT}"   # the CLI's -n range, in words


def check_limit(limit) -> int:
    """The one limit rule of the resident faces (HTTP, MCP): 1..MAX_LIMIT or refused."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise UsageValueError(LIMIT_ERROR)
    return limit


class SearchService:
    def __init__(self, vault=None, index_dir=None, *, config: VaultConfig | None = None,
                 interval: float = RESCAN_INTERVAL_S, debounce: float = DEBOUNCE_S, watch: bool = True,
                 embedder=None):
        self.config = config or load_config(vault, index_dir)
        self.started = time.time()
        new_index = not db_path(self.config.index_dir).exists()
        self.writer = Index.open(config=self.config, create=True, embedder=embedder)
        # Keyword index first and at once, so queries work from the start;
        # embeddings follow in the watcher's thread.
        first = self.writer.sync(embed=False)
        log.info("index ready: %d notes (%d changed) in %.2f s", first.scanned, first.changed, first.seconds)
        self.reader = Index.open(config=self.config, embedder=embedder)
        self._lock = threading.Lock()
        self.watcher = None
        if watch:
            # A new index gets the default model, as `index` would give it; an
            # index built with --no-embed stays keyword-only.
            embed = self.writer.model_spec is not None or embedder is not None or new_index
            self.watcher = Watcher(self.writer, self.config, interval=interval, debounce=debounce, embed=embed,
                                   on_sync=self._logged)
            self.watcher.start(initial_rescan=False)

    def _logged(self, report, paths) -> None:
        what = "full rescan" if paths is None else (f"{len(paths)} changed paths" if paths else "embedding")
        emb = getattr(report, "embedding", None)
        if report.changed or (emb and emb.embedded):
            log.info("%s: +%d ~%d -%d notes%s", what, report.added, report.updated, report.deleted,
                     f", {emb.embedded} chunks embedded, {emb.waiting} waiting" if emb else "")

    def search(self, query: str, **options) -> SearchResponse:
        check_limit(options.get("limit", 10))
        if options.get("rerank"):
            from .rerank import RerankSettings

            settings = options.get("rerank_settings") or RerankSettings.load()
            options["rerank_settings"] = dataclasses.replace(settings, while_waiting=self._lock_released)
        with self._lock:
            self.reader.refresh()
            return self.reader.search(query, **options)

    @contextmanager
    def _lock_released(self) -> Iterator[None]:
        """Inside a search that holds the lock: let other queries use the reader
        while the judge's requests are out (they touch no connection)."""
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()

    def get(self, path: str, start: int | None = None, end: int | None = None) -> NoteText:
        with self._lock:
            return self.reader.get(path, start, end)

    def links(self, path: str) -> dict:
        with self._lock:
            self.reader.refresh()
            return self.reader.links(path)

    def tags(self) -> list[tuple[str, int]]:
        with self._lock:
            self.reader.refresh()
            return self.reader.tags()

    def status(self) -> dict:
        with self._lock:
            self.reader.refresh()
            data = self.reader.status().to_dict()
        data["server"] = {
            "started": self.started,
            "watching": self.watcher is not None,
            "syncs": self.watcher.syncs if self.watcher else 0,
            "pending_changes": len(self.watcher.changes) if self.watcher else 0,
            "last_error": self.watcher.last_error if self.watcher else None,
        }
        return data

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        self.reader.close()
        self.writer.close()
