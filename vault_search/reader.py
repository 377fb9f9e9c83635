"""``Reader``: the query side of an index, and what it keeps from query to query.

``Index`` (the Python API) is a Reader with the writer's calls and the
faces' conveniences on top; the query path (``vault_search.search``),
``similar`` and ``pack`` take a Reader and never import ``index.py``.

What a Reader keeps, each read again when what it was read from changes:

- the chunk matrix (``vectors``) and the latent-term postings (``latent``),
  per published matrix;
- each chunk's note (``chunk_notes``) and how much of the notes' prose is
  Chinese (``han_share``), per state of the chunks;
- ``similar``'s yardstick (each note's nearest neighbour), per state of
  the vectors and the chunks;
- the last few distinct queries' embeddings and latent terms
  (``query_vector``, ``query_latent``) and the character n-grams of the
  names the title list compares (``name_grams``), per model.

No module keeps any of it: two Readers of two vaults in one process (a
server of several vaults) share nothing.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from indexer.config import VaultConfig
from indexer.errors import IndexVersionError
from indexer.segment import HAN_RUN_RE, Segmenter
from indexer.store import describe_db_error, embedding_run, get_meta, snapshot, vectors_state
from indexer.writer import IndexWriter

from .options import UnsupportedModeError

if TYPE_CHECKING:
    from indexer.embed import Embedder, LatentTerms

    from .vector import ChunkNotes, LatentIndex, VectorIndex

QUERY_VECTOR_CACHE = 256   # distinct recent queries whose embedding (and latent terms) are kept
# Names whose n-grams are remembered: the notes a title list looks at recur
# from query to query (the same neighbourhoods, an agent's retries; 20 queries
# on the 10k-note growth vault look at 4,700 names): 20-40 MB when full.
NAME_GRAMS_CACHE = 8192
HAN_SAMPLE_CHUNKS = 400   # chunks read to tell the notes' language ...
HAN_SAMPLE_CHARS = 400    # ... and characters of each
HAN_SHARE_DRIFT = 0.1     # han_share is read again past this change in the chunk count
# A Chinese word is one to two characters: two Han characters weigh as one
# Latin word. Code, inline code, link targets and URLs are not prose: a
# Chinese note with a YAML block would otherwise look mostly English.
HAN_CHARS_PER_WORD = 2
LATIN_WORD_RE = re.compile(r"[A-Za-z]+")
_NOT_PROSE_RE = re.compile(r"```.*?(?:```|$)|~~~.*?(?:~~~|$)|`[^`\n]*`|\]\([^)]*\)|https?://\S+",
                           re.DOTALL)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Remembered(Generic[K, V]):
    """The last ``size`` values asked for, least recently used dropped first;
    safe to share between threads (a value is made outside the lock: two
    threads may both make one, and either is right)."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
            if len(self._values) > self.size:
                self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


class Reader:
    """An index as the query path reads it: the writer's connection and
    models, and the state derived from them (see the module)."""

    def __init__(self, writer: IndexWriter):
        self.writer = writer
        self._vectors: VectorIndex | None = None
        self._vectors_key: tuple | None = None
        self._latent: LatentIndex | None = None
        self._latent_key: tuple | None = None
        self._chunk_notes: ChunkNotes | None = None
        self._chunk_notes_key: tuple | None = None
        self._coverage: tuple[tuple[int, int], tuple[int, int]] | None = None
        self._han_share: float | None = None
        self._han_share_key: tuple[int, int] | None = None
        self._queries: Remembered[tuple[str, str], Any] = Remembered(QUERY_VECTOR_CACHE)
        self.name_grams: Remembered[str, frozenset[str]] = Remembered(NAME_GRAMS_CACHE)
        # What ``similar`` measures a vault by (``similar.Yardstick``), by state of the vectors and chunks.
        self.yardsticks: Remembered[tuple, Any] = Remembered(2)

    @property
    def config(self) -> VaultConfig:
        return self.writer.config

    @property
    def conn(self) -> sqlite3.Connection:
        return self.writer.conn

    @property
    def segmenter(self) -> Segmenter:
        return self.writer.segmenter

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same committed
        state of the index, whatever a writer commits meanwhile; an SQLite
        error becomes the one-line ``describe_db_error``."""
        try:
            with snapshot(self.conn) as conn:
                yield conn
        except sqlite3.DatabaseError as exc:
            raise describe_db_error(exc, self.config.index_dir) from None

    # -- the model and its vectors -------------------------------------------
    @property
    def model_spec(self) -> str | None:
        """The embedding model this index was built with (None: keyword only)."""
        return self.writer.model_spec

    @property
    def embedder(self) -> Embedder:
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

    def vectors(self) -> VectorIndex:
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

    def vector_coverage(self) -> tuple[int, int]:
        """(chunks vector search sees, all chunks), counted as `status` counts
        them (``indexer.vectors.searchable``) over the matrix and the chunks."""
        from indexer.vectors import searchable

        vectors, notes = self.vectors(), self.chunk_notes()
        key = (id(vectors), id(notes))
        if self._coverage is None or self._coverage[0] != key:
            self._coverage = (key, (searchable(vectors.ids, notes.chunk_ids), len(notes.chunk_ids)))
        return self._coverage[1]

    def embedding_now(self) -> bool:
        """Whether an embedding pass runs on this index now (``store.embedding_run``)."""
        return self.model_spec is not None and embedding_run(self.conn, self.config.index_dir) is not None

    def latent(self) -> LatentIndex | None:
        """Every embedded chunk's latent terms (``vector.LatentIndex``; empty
        unless the model has them), read again whenever the matrix is."""
        from .vector import LatentIndex

        key = (self.writer.generation, vectors_state(self.conn))
        if self._latent is None or self._latent_key != key:
            embedder = self.embedder
            self._latent = LatentIndex.load(self.conn, embedder.fingerprint) if embedder.latent else None
            self._latent_key = key
        return self._latent

    def query_vector(self, text: str) -> Any:
        """The query's embedding, remembered (by model) for the last few
        distinct queries: an agent or a page repeats queries, and a benchmark
        asks the same one in vector and hybrid mode; the model costs most of a
        warm query."""
        embedder = self.embedder
        return self._queries.get((embedder.fingerprint, text), lambda: embedded_query(embedder, text))

    def query_latent(self, text: str) -> LatentTerms:
        """The query's latent terms, remembered beside its embedding."""
        embedder = self.embedder
        return self._queries.get((embedder.fingerprint + "|latent", text), lambda: embedder.latent_query(text))

    def forget_queries(self) -> None:
        """Drop the remembered query embeddings and name n-grams (a benchmark's cold start)."""
        self._queries.clear()
        self.name_grams.clear()

    # -- the chunks ------------------------------------------------------------
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

    def han_share(self) -> float | None:
        """How much of the notes' prose is Chinese (``sample_han_share``; None:
        no words at all). Read again when the index is rebuilt or its chunk
        count has moved by more than a tenth since: an edited note does not
        change a vault's language, and a reading costs 20 ms at 100k chunks."""
        generation, _, count = self._chunks_key()
        known = self._han_share_key
        if known is None or known[0] != generation or abs(count - known[1]) > HAN_SHARE_DRIFT * max(known[1], 1):
            self._han_share = sample_han_share(self.conn)
            self._han_share_key = (generation, count)
        return self._han_share

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


def embedded_query(embedder: Embedder, text: str) -> Any:
    """A query's embedding as its model gives it (``Reader.query_vector`` remembers it)."""
    return embedder.embed_query(text)


def sample_han_share(conn: sqlite3.Connection) -> float | None:
    """``Reader.han_share`` read from the database: the share of Han among
    the words of the opening characters of up to HAN_SAMPLE_CHUNKS chunks at
    evenly spaced ids (old notes and new alike, not the index's head; each
    found through the primary key), code, link targets and URLs left out."""
    try:
        low, high = conn.execute("SELECT min(id), max(id) FROM chunks").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return None   # nothing indexed yet
    if low is None:
        return None
    step = max(1.0, (high - low + 1) / HAN_SAMPLE_CHUNKS)
    seen: set[int] = set()
    han = words = 0.0
    for i in range(HAN_SAMPLE_CHUNKS):
        at = low + int(i * step)
        if at > high:
            break
        row = conn.execute("SELECT id, substr(text, 1, ?) FROM chunks WHERE id >= ? ORDER BY id LIMIT 1",
                           (HAN_SAMPLE_CHARS, at)).fetchone()
        if row is None or row[0] in seen:
            continue
        seen.add(row[0])
        prose = _NOT_PROSE_RE.sub(" ", row[1])
        han += sum(map(len, HAN_RUN_RE.findall(prose))) / HAN_CHARS_PER_WORD
        words += len(LATIN_WORD_RE.findall(prose))
    return han / (han + words) if han + words else None
