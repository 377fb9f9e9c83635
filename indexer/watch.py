"""Keep an index current: a watchdog observer plus a periodic full rescan.

The observer only marks vault-relative paths as changed; a writer thread
waits for about a second of quiet, then syncs the marked paths in one batch
(keyword index first, so they are searchable at once, then embeddings in
slices). A full rescan (mtime/size/hash) runs at start-up and every
``interval`` seconds as the source of truth: a missed event, an inotify
queue overflow or an edit made while nothing was running is picked up there.

Editor save patterns all end up as "this path changed": write-temp-then-
rename is a move whose destination is the note; vim's backup-move-create-
delete is a move, a create and a delete of the same names. A burst larger
than ``max_pending`` paths (a sync tool dropping thousands of files) turns
into one full rescan, so memory stays bounded and writes stay batched.

Events can be lost: the kernel's inotify queue overflows under a storm of
writes (watchdog then logs "queue overflowed"), and a burst of hundreds of
paths is as likely to have lost some. Either is followed by a full rescan
once the vault is calm (a second or so), so after a storm the index equals
the disk within seconds, not at the next scheduled rescan.

An `index --rebuild` beside the watcher replaces the db file with one built
from its own, older scan of the vault: what the watcher synced meanwhile
went into the old file. The writer thread looks at the file every
``REPLACED_CHECK_S`` and, when it is another one, rescans at once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from .config import VaultConfig
from .scan import IgnoreRules, is_markdown
from .store import db_path

if TYPE_CHECKING:
    from .sync import SyncReport
    from .writer import IndexWriter

log = logging.getLogger("vault_search.watch")

DEBOUNCE_S = 1.0            # quiet time before a batch is applied
MAX_DELAY_S = 5.0           # a note saved every half second is still synced this often
RESCAN_INTERVAL_S = 300.0   # full rescan every 5 minutes
MAX_PENDING = 5000          # more changed paths than this: one full rescan instead
STORM_PATHS = 200           # a batch this large may have lost events: a full rescan follows it
RETRY_MAX_S = 60.0          # a sync that keeps failing is retried at most this far apart
EMBED_SLICE = 64            # passages embedded between checks for new changes
IGNORED_EVENTS = {"opened", "closed_no_write"}
# How often the writer thread checks whether `index --rebuild` swapped in a new
# db file (one stat): notes saved during the rebuild are back within this.
REPLACED_CHECK_S = 1.0


class ChangeSet:
    """Changed paths waiting to be synced, debounced and bounded."""

    def __init__(self, max_pending: int = MAX_PENDING):
        self.max_pending = max_pending
        self._paths: set[str] = set()
        self._overflow = False
        self._first = 0.0   # when the oldest pending change arrived
        self._last = 0.0
        self._cond = threading.Condition()

    def add(self, rel: str) -> None:
        with self._cond:
            if not (self._paths or self._overflow):
                self._first = time.monotonic()
            if len(self._paths) >= self.max_pending:
                self._overflow, self._paths = True, set()
            elif not self._overflow:  # after an overflow, a full rescan covers every path
                self._paths.add(rel)
            self._last = time.monotonic()
            self._cond.notify_all()

    def request_full(self) -> None:
        with self._cond:
            now = time.monotonic()
            if not (self._paths or self._overflow):
                self._first = now   # as in add(): a storm of requests still syncs every MAX_DELAY_S
            self._overflow, self._paths = True, set()
            self._last = now
            self._cond.notify_all()

    def put_back(self, paths: list[str] | None) -> None:
        """Changes a failed sync did not apply: retry them later."""
        if paths is None:
            self.request_full()
        else:
            for rel in paths:
                self.add(rel)

    def take(self, quiet: float, timeout: float, max_delay: float = MAX_DELAY_S) -> tuple[list[str] | None, bool]:
        """Wait up to ``timeout`` s for changes followed by ``quiet`` s of calm
        (or pending for ``max_delay`` s, so a note saved non-stop is synced too).

        Returns (paths, full): ``full`` means rescan everything.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                if self._paths or self._overflow:
                    calm_at = min(self._last + quiet, self._first + max(max_delay, quiet))
                    if now >= calm_at:
                        paths, full = sorted(self._paths), self._overflow
                        self._paths, self._overflow = set(), False
                        return paths, full
                    self._cond.wait(min(calm_at - now, max(deadline - now, 0.01)))
                    continue
                if now >= deadline:
                    return [], False
                self._cond.wait(deadline - now)

    def __len__(self) -> int:
        with self._cond:
            return len(self._paths)


def _event_handler(config: VaultConfig, changes: ChangeSet):
    from watchdog.events import FileSystemEventHandler

    rules = IgnoreRules(config.ignore, config.include_dot)
    root = str(config.vault)

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event):
            if event.event_type in IGNORED_EVENTS:
                return
            for path in (event.src_path, getattr(event, "dest_path", "")):
                if not path:
                    continue
                path = os.fsdecode(path)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                if rel == "." or rel.startswith("../"):
                    continue
                if rules.skips_path(rel, event.is_directory):
                    continue
                if event.is_directory or is_markdown(rel):
                    changes.add(rel)

    return Handler()


def _changes_only() -> list:
    """The events that say a note changed. Opens and reads are left out, so
    the kernel never queues them: a rescan opens every folder, and on a large
    vault those events alone would overflow the queue and ask for another
    rescan, round and round."""
    from watchdog import events as e

    return [e.FileCreatedEvent, e.DirCreatedEvent, e.FileDeletedEvent, e.DirDeletedEvent, e.FileModifiedEvent,
            e.FileMovedEvent, e.DirMovedEvent, e.FileClosedEvent]


class _LostEvents(logging.Handler):
    """Hears watchdog's "queue overflowed; events were lost" and asks for a rescan."""

    def __init__(self, watcher: "Watcher"):
        super().__init__(logging.WARNING)
        self.watcher = watcher

    def emit(self, record: logging.LogRecord) -> None:
        # watchdog logs two lines per overflow; this one once.
        if "events were lost" in record.getMessage():
            self.watcher.events_lost()


WATCHDOG_LOGGER = "watchdog.observers"


class Watcher:
    """Runs the observer and the writer thread for one index.

    ``writer`` is the index's ``IndexWriter`` (a ``vault_search.Index``,
    whose ``sync`` is the writer's, works too).
    """

    def __init__(self, writer: IndexWriter, config: VaultConfig, interval: float = RESCAN_INTERVAL_S,
                 debounce: float = DEBOUNCE_S, embed: bool = True,
                 on_sync: Callable[[SyncReport, list[str] | None], None] | None = None):
        self.writer = writer
        self.config = config
        self.interval = interval
        self.debounce = debounce
        self.embed = embed
        self.on_sync = on_sync
        self.changes = ChangeSet()
        self.syncs = 0
        self.overflows = 0        # times the event queue overflowed (events lost)
        self.storm_rescans = 0    # full rescans made because events may have been lost
        self.last_error: str | None = None
        self._failures = 0
        self._lost = _LostEvents(self)
        self._stop = threading.Event()
        self._observer: Any = None   # a watchdog Observer, once started
        self._thread: threading.Thread | None = None
        self._embedding_waits = embed
        self._synced_file: tuple[int, int] | None = None   # the db file the last sync began on

    def events_lost(self) -> None:
        """Events were dropped (the kernel queue overflowed): rescan everything once calm."""
        self.overflows += 1
        log.warning("file events were lost (queue overflow); a full rescan follows")
        self.changes.request_full()

    def start(self, initial_rescan: bool = True) -> "Watcher":
        watchdog_log = logging.getLogger(WATCHDOG_LOGGER)
        watchdog_log.addHandler(self._lost)
        if watchdog_log.getEffectiveLevel() > logging.WARNING:
            watchdog_log.setLevel(logging.WARNING)   # the overflow report must reach the handler
        try:
            from watchdog.observers import Observer

            observer = Observer()
            observer.schedule(_event_handler(self.config, self.changes), str(self.config.vault), recursive=True,
                              event_filter=_changes_only())
            observer.daemon = True
            observer.start()
            self._observer = observer
        except Exception as exc:  # inotify limits, unsupported file system
            log.warning("file watching unavailable (%s); relying on the rescan every %.0f s", exc, self.interval)
        self._synced_file = self._db_file()
        self._thread = threading.Thread(target=self._run, args=(initial_rescan,), name="vault-search-writer",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        logging.getLogger(WATCHDOG_LOGGER).removeHandler(self._lost)
        self.changes.request_full()  # wake the writer
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, initial_rescan: bool) -> None:
        next_full = time.monotonic() if initial_rescan else time.monotonic() + self.interval
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_full:
                self._sync(None)
                next_full = time.monotonic() + self.interval
                continue
            # While vectors are waiting, look for changes without blocking long.
            wait = 0.0 if self._embedding_waits else min(next_full - now, REPLACED_CHECK_S)
            paths, full = self.changes.take(self.debounce, wait)
            if self._stop.is_set():
                break
            if full or self._replaced():
                self._sync(None)
                next_full = time.monotonic() + self.interval
            elif paths:
                self._sync(paths)
                if len(paths) >= STORM_PATHS:
                    self.storm_rescans += 1
                    self.changes.request_full()   # a storm this large may have lost events
            elif self._embedding_waits:
                self._sync([])

    def _db_file(self) -> tuple[int, int] | None:
        try:
            st = os.stat(db_path(self.config.index_dir))
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _replaced(self) -> bool:
        """Whether the db file is another one than the last sync began on: an
        `index --rebuild` swapped in its index, built from a scan older than
        what this watcher synced since. (The writer follows the new file on
        its next sync, but nothing may be pending to make one.)"""
        now = self._db_file()
        if now is None or now == self._synced_file:
            return False
        log.info("the index was replaced (`index --rebuild`); a full rescan follows")
        return True

    def _sync(self, paths: list[str] | None) -> None:
        """Keyword-sync ``paths`` (None: everything, []: nothing), then embed a slice."""
        # Taken before the sync: a file swapped in during it is rescanned once more, never missed.
        file = self._db_file()
        try:
            report = self.writer.sync(paths=paths, embed=self.embed, embed_limit=EMBED_SLICE)
        except Exception as exc:  # never let one bad batch stop the watcher
            self.last_error = f"{exc.__class__.__name__}: {exc}"
            self._failures += 1
            delay = min(max(self.debounce, 1.0) * 5 * 2 ** (self._failures - 1), RETRY_MAX_S)
            log.error("sync failed (will retry in %.0f s): %s", delay, self.last_error)
            if paths is None or paths:
                self.changes.put_back(paths)   # a failed full rescan is retried too
            self._stop.wait(delay)
            return
        self.syncs += 1
        self._synced_file = file
        self._failures = 0
        self.last_error = None
        self._embedding_waits = bool(report.embedding and report.embedding.waiting)
        if self.on_sync:
            self.on_sync(report, paths)
