"""``Index``: one object that owns a vault's index and answers queries.

    with Index.open("~/notes") as idx:
        idx.sync()
        for r in idx.search("数据库 索引").results:
            print(r.path, r.start_line, r.snippet)
"""

from __future__ import annotations

import json
import os
import shutil
from collections import OrderedDict
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import indexer
from indexer.config import VaultConfig, load_config
from indexer.errors import (IndexCorruptError, IndexVersionError, NoteNotFoundError,
                            PathOutsideVaultError, UsageValueError, VaultSearchError)
from indexer.parse import BinaryNoteError, decode_note, split_lines
from indexer.scan import IgnoreRules, is_markdown
from indexer.store import DB_NAME, writer_lock, SCHEMA_VERSION, check_schema, connect, db_path, get_meta, migrate, set_meta, transaction
from indexer.sync import Progress, SyncReport, load_segmenter, sync_vault
from indexer import faults

from .filters import CHUNK_DATE_SQL, SearchFilters, Staleness, clean_text
from .fusion import FUSION_DEPTH, KEYWORD_BASE_WEIGHT, RRF_K, Fused, keyword_weight, rrf
from .keyword import CHUNKS_PER_RESULT, MIN_CHUNK_DEPTH, ChunkHit, best_per_note, keyword_hits, term_coverage
from .query import MAX_QUERY_CHARS, fts_query
from .results import IndexStatus, NoteText, Scores, SearchResponse, SearchResult
from .snippet import make_snippet

MODES = ("hybrid", "fts", "vector")
QUERY_VECTOR_CACHE = 256   # distinct recent queries whose embedding is kept
REBUILD_DIR = "rebuild"   # `index --rebuild` builds here, beside the live index, and swaps in when done
MAX_LIMIT = 1000
MAX_NAME_QUERY_CHARS = 200   # longer queries are sentences, never a note's name
MAX_NAME_MATCHES = 5
RELATED_FROM = 3     # --related follows the links of this many top hits
RELATED_LIMIT = 5    # ... and adds at most this many notes
# Base weights of the two lists in the hybrid; the keyword weight is further
# scaled by query-word coverage (fusion.keyword_weight).
DEFAULT_WEIGHTS = {"fts": KEYWORD_BASE_WEIGHT, "vector": 1.0}


class UnsupportedModeError(UsageValueError):
    """A search mode this index cannot serve."""


class VaultMismatchError(VaultSearchError):
    """The index was built for another vault."""



class Index:
    def __init__(self, config: VaultConfig, conn: sqlite3.Connection, embedder=None):
        self.config = config
        self.conn = conn
        self._segmenter = None
        self._embedder = embedder
        self._vectors = None
        self._vectors_state = None
        self._db_identity = None
        self._dictionary_size = 0
        self._embedder_given = embedder is not None
        self._query_vectors: OrderedDict = OrderedDict()
        self._rebuild_of: Path | None = None   # set while this index is a rebuild of that folder's index
        self._previous_model: str | None = None

    # -- lifecycle ---------------------------------------------------------
    @classmethod
    def open(cls, vault: str | os.PathLike | None = None, index_dir: str | os.PathLike | None = None, *,
             config: VaultConfig | None = None, create: bool = False, rebuild: bool = False,
             embedder=None) -> "Index":
        """Open the index of ``vault``; ``create`` for writers, ``rebuild`` to start afresh.

        ``embedder``: an ``indexer.embed.Embedder`` to use instead of the
        index's recorded model (tests pass a deterministic one).
        """
        config = config or load_config(vault, index_dir)
        if rebuild:
            return cls._open_rebuild(config, embedder)
        conn = connect(db_path(config.index_dir), create=create)
        idx = cls(config, conn, embedder)
        idx._db_identity = idx._file_identity()
        try:
            if not (create or rebuild):
                check_schema(conn)
            idx._check_vault()
        except BaseException:
            conn.close()
            raise
        return idx

    @classmethod
    def _open_rebuild(cls, config: VaultConfig, embedder) -> "Index":
        """A new index built beside the live one (in ``rebuild/``), which the
        first sync that completes swaps in: until then, and whenever the
        rebuild fails or is interrupted, the old index keeps answering.
        Without a ``model`` the rebuild keeps the old index's model."""
        build = Path(config.index_dir) / REBUILD_DIR
        with writer_lock(build):   # never under another rebuild's sync
            _remove_index_files(build)
        idx = cls(replace(config, index_dir=build), connect(db_path(build), create=True), embedder)
        idx._rebuild_of = Path(config.index_dir)
        idx._previous_model = _recorded_model(config.index_dir)
        idx._db_identity = idx._file_identity()
        return idx

    def _swap_in(self) -> None:
        """Replace the live index with the completed rebuild: its db first
        (fully checkpointed, so no WAL travels with it; the old WAL and
        shared-memory files go before it arrives, so they are never applied to
        it), then the matrix files, which the db's digests check anyway."""
        from indexer.vectors import IDS_FILE, VECTORS_FILE

        live, build = self._rebuild_of, Path(self.config.index_dir)
        faults.point("swap")
        with writer_lock(live):
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.close()
            target = db_path(live)
            for suffix in ("-wal", "-shm"):
                _remove(f"{target}{suffix}")
            os.replace(db_path(build), target)
            for name in (IDS_FILE, VECTORS_FILE):
                if (build / name).exists():
                    os.replace(build / name, live / name)
                else:
                    _remove(live / name)
        self._rebuild_of = None
        self.config = replace(self.config, index_dir=live)
        self.conn = connect(target)
        self._db_identity = self._file_identity()
        self._vectors = None
        shutil.rmtree(build, ignore_errors=True)

    def _discard_rebuild(self) -> None:
        """A failed or interrupted rebuild leaves nothing behind but the old index."""
        self.conn.close()
        build = Path(self.config.index_dir)
        shutil.rmtree(build, ignore_errors=True)
        self.config = replace(self.config, index_dir=self._rebuild_of)
        self.conn = connect(db_path(self._rebuild_of), create=True)
        self._rebuild_of = None
        self._db_identity = self._file_identity()

    def _check_vault(self) -> None:
        """An index serves the vault it was built from, never another one."""
        try:
            recorded = get_meta(self.conn, "vault")
        except sqlite3.OperationalError:  # a new, empty db
            return
        if recorded and recorded != str(self.config.vault):
            raise VaultMismatchError(
                f"the index at {self.config.index_dir} belongs to the vault {recorded}, not {self.config.vault}; "
                "use another --index-dir (or unset VAULT_SEARCH_INDEX_DIR), or `vault-search index --rebuild`")

    def close(self) -> None:
        self.conn.close()

    def _file_identity(self):
        try:
            st = os.stat(db_path(self.config.index_dir))
            return st.st_dev, st.st_ino
        except OSError:
            return None

    def _switch_to(self, conn: sqlite3.Connection, identity) -> None:
        self.conn.close()
        self.conn = conn
        self._db_identity = identity
        self._segmenter = None
        self._vectors = None
        if not self._embedder_given:
            self._embedder = None  # a rebuild may have chosen another model

    def refresh(self) -> None:
        """For long-lived readers (the server): follow what writers did.

        Reopens the database if ``index --rebuild`` replaced the file, and
        teaches the query segmenter the vault names a sync added to the
        dictionary, so queries keep segmenting like the documents.
        """
        identity = self._file_identity()
        if self._db_identity is None:
            self._db_identity = identity
        elif identity is not None and identity != self._db_identity:
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
            known = self._dictionary_size
            count = self.conn.execute("SELECT count(*) FROM dictionary").fetchone()[0]
            if count != known:
                words = dict(self.conn.execute("SELECT word, freq FROM dictionary"))
                self._segmenter.learn(words)
                self._dictionary_size = count

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def segmenter(self):
        if self._segmenter is None:
            self._segmenter = load_segmenter(self.conn)
            self._dictionary_size = len(self._segmenter.known_words())
        return self._segmenter

    # -- writing -----------------------------------------------------------
    def sync(self, progress: Progress | None = None, force: bool = False, *, embed: bool = True,
             model: str | None = None, embed_progress: Progress | None = None,
             embed_limit: int | None = None, paths: list[str] | None = None) -> SyncReport:
        """Bring the index up to date with the vault (incremental).

        Keyword search sees the changes as soon as the FTS batches commit;
        then, unless ``embed`` is false, chunks without a vector are embedded
        (``model`` on a new index, else the index's own) and the matrix file
        is rewritten. ``embed_limit`` stops after that many passages.
        ``paths`` limits the keyword sync to those vault-relative files or
        folders (a watcher's batch; ``[]``: embed only).
        """
        try:
            with writer_lock(self.config.index_dir):
                report = self._sync(progress, force, embed, model, embed_progress, embed_limit, paths)
            if self._rebuild_of is not None:
                self._swap_in()
            return report
        except sqlite3.DatabaseError as exc:
            error = _db_error(exc, self.config)
            if self._rebuild_of is not None:
                self._discard_rebuild()
            raise error from None
        except BaseException:
            if self._rebuild_of is not None:
                self._discard_rebuild()
            raise

    def _sync(self, progress, force, embed, model, embed_progress, embed_limit, paths) -> SyncReport:
        # A long-lived writer (the watcher) follows an `index --rebuild` made
        # by another process instead of writing into the deleted file.
        identity = self._file_identity()
        if self._db_identity is None:
            self._db_identity = identity
        elif identity != self._db_identity:
            self._switch_to(connect(db_path(self.config.index_dir), create=True), self._file_identity())
            paths = None  # everything, into the new file
        migrate(self.conn)
        self._check_vault()  # another writer may have rebuilt it for another vault meanwhile
        embedder = None
        model = model or (self._previous_model if self._rebuild_of is not None else None)
        if embed or model:
            # `index --no-embed --model X` on a new index records X: the
            # chunks are sized for it and the next `index` embeds with it.
            embedder = self._embedder_for_writing(model)
        elif self.model_spec:
            embedder = self.embedder  # chunks stay sized for the index's model
        if paths is not None and not paths:
            report = SyncReport()
        else:
            report = sync_vault(self.conn, self.config, self.segmenter, progress=progress, force=force,
                                paths=paths, token_counter=embedder.token_counter() if embedder else None)
        if embed:
            from indexer.vectors import embedding_pass

            report.embedding = embedding_pass(self.conn, self.config.index_dir, embedder,
                                              embed_progress, embed_limit)
            self._vectors = None
        return report

    def _embedder_for_writing(self, model: str | None):
        from indexer.embed import DEFAULT_MODEL, EmbedderError, get_embedder

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

    # -- reading -----------------------------------------------------------
    def search(self, query: str, *, mode: str | None = None, limit: int = 10, tags=(), path: str | None = None,
               after: str | None = None, before: str | None = None, explain: bool = False,
               weights: dict[str, float] | None = None, rrf_k: float | None = None,
               depth: int | None = None, rerank: bool = False, rerank_settings=None, where=(),
               exclude_stale: bool = False, recency_half_life: float | None = None,
               related: bool = False) -> SearchResponse:
        """Search the vault.

        ``mode``: ``fts`` (BM25), ``vector`` (embeddings) or ``hybrid`` (both,
        fused by reciprocal rank); default hybrid when the index has vectors.
        ``weights``, ``rrf_k`` and ``depth`` tune the fusion (see ``fusion.py``).
        ``rerank``: let an LLM judge the top candidates (``rerank.py``;
        ``rerank_settings`` or the environment say which endpoint); any
        failure leaves the fused order and adds a warning.
        ``where``: frontmatter conditions (``"type=feedback"``, ``"due<2026-12-01"``);
        ``exclude_stale``: leave out stale notes (``Staleness``);
        ``recency_half_life``: days after which a note's score halves (off by default);
        ``related``: append notes one link away from the top hits, marked ``related``.
        A query that is exactly a note's title, alias or file name ranks that note first.
        """
        t0 = time.perf_counter()
        query = clean_text(query or "")
        if mode is not None and mode not in MODES:
            raise UnsupportedModeError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        limit = max(1, min(int(limit), MAX_LIMIT))
        filters = SearchFilters.build(tags, path, after, before, where,
                                      Staleness.from_config(self.config) if exclude_stale else None)
        if recency_half_life is not None and not recency_half_life > 0:
            raise UsageValueError(f"--recency-half-life must be a positive number of days, got {recency_half_life}")
        settings = None
        if rerank:
            from .rerank import RerankSettings

            settings = rerank_settings or RerankSettings.load()
        try:
            # One read transaction: every query below sees the same committed
            # state, however a writer changes the index meanwhile.
            self.conn.execute("BEGIN")
            try:
                mode, fq, warnings, fused, used_weights, coverage = self._retrieve(
                    query, mode, limit, filters, weights, rrf_k, depth)
                named = self._name_matches(query, filters)
                fused = _put_first(fused, named, self._first_chunks([n for n, _ in named]))
                recency = self._apply_recency(fused, recency_half_life) if recency_half_life else {}
                keep = max(limit, settings.top_n) if settings else limit
                pairs = self._results(fused[:keep], fq.terms, mode)
                candidates = self._candidates(pairs[:settings.top_n]) if settings else []
            finally:
                self.conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise _db_error(exc, self.config) from None
        if settings:
            pairs = self._rerank(query, pairs, candidates, settings, warnings)
        pairs = pairs[:limit]
        results = [r for _, r in pairs]
        if related and results:
            results += self._related(results, filters, fq.terms)
        response = SearchResponse(query=query, mode=mode, took_ms=0.0, warnings=warnings,
                                  results=results, terms=fq.terms)
        if explain:
            response.explain = {
                "fts_match": fq.match,
                "terms": fq.terms,
                "filters": filters.sql()[0] if filters else None,
                "rrf_k": rrf_k or RRF_K,
                "weights": {k: round(v, 4) for k, v in used_weights.items()},
                "term_coverage": None if coverage is None else round(coverage, 4),
                "name_matches": {self._path_of(n): kind for n, kind in named},
                "recency_half_life": recency_half_life,
                "ranks": [{"path": r.path,
                           "fts_rank": f.ranks.get("fts"), "fts_score": _round(f.scores.get("fts")),
                           "vector_rank": f.ranks.get("vector"), "vector_score": _round(f.scores.get("vector")),
                           "fused_score": _round(f.score),
                           "rerank_score": f.rerank, "blended_score": _round(f.blended),
                           **({"name_match": f.name_match} if f.name_match else {}),
                           **({"date": recency[f.note_id][0], "recency_factor": _round(recency[f.note_id][1])}
                              if f.note_id in recency else {})}
                          for f, r in pairs],
            }
        response.took_ms = round((time.perf_counter() - t0) * 1000, 2)
        return response

    def _retrieve(self, query, mode, limit, filters, weights, rrf_k, depth):
        has_vectors = self.has_vectors()
        mode = mode or ("hybrid" if has_vectors else "fts")
        if mode != "fts" and not has_vectors:
            raise UnsupportedModeError(
                f"--mode {mode} needs embeddings, which this index does not have; "
                "run `vault-search index` (without --no-embed), or use --mode fts")
        fq = fts_query(query, self.segmenter)
        warnings = list(fq.warnings)
        note_depth = max(limit, depth or FUSION_DEPTH) if mode == "hybrid" else limit
        chunk_depth = max(MIN_CHUNK_DEPTH, note_depth * CHUNKS_PER_RESULT)
        lists: dict[str, list[ChunkHit]] = {}
        if mode in ("fts", "hybrid"):
            lists["fts"] = best_per_note(keyword_hits(self.conn, fq.match, filters, chunk_depth), note_depth)
        if mode in ("vector", "hybrid") and fq.terms:
            lists["vector"] = self._vector_list(query, filters, chunk_depth, note_depth, warnings)
        used_weights = {**DEFAULT_WEIGHTS, **(weights or {})}
        coverage = None
        if mode == "hybrid" and not (weights and "fts" in weights):
            coverage = term_coverage(self.conn, fq.terms)
            used_weights["fts"] = keyword_weight(coverage, used_weights["fts"])
        fused = rrf(lists, used_weights, rrf_k or RRF_K)
        return mode, fq, warnings, fused, used_weights, coverage

    def _candidates(self, pairs):
        from .rerank import Candidate

        ids = [f.chunk_id for f, _ in pairs]
        rows = {r[0]: r[1:] for r in self.conn.execute(
            f"SELECT c.id, c.hash, n.title, c.heading, c.text FROM chunks c JOIN notes n ON n.id = c.note_id "
            f"WHERE c.id IN ({','.join('?' * len(ids))})", ids)}
        return [Candidate(f"c{i}", *rows[f.chunk_id]) for i, (f, _) in enumerate(pairs, 1) if f.chunk_id in rows]

    def _rerank(self, query, pairs, candidates, settings, warnings):
        """Reorder the judged head of ``pairs`` (outside any read transaction:
        the judge may take seconds)."""
        from .rerank import Reranker, blend

        top = pairs[:settings.top_n]
        if not top:
            return pairs
        scores, problem = Reranker(settings, self.conn).judge(query, candidates)
        if problem:
            warnings.append(problem)
            return pairs
        for i, (f, result) in enumerate(top, 1):
            f.rerank = scores.get(f"c{i}")
            f.blended = blend(i, len(top), f.rerank if f.rerank is not None else 0.0)
            result.scores.rerank = None if f.rerank is None else _round(f.rerank / 10)
            result.score = _round(f.blended)
        return sorted(top, key=lambda pair: -pair[0].blended) + pairs[len(top):]   # stable on ties

    def _vector_list(self, query, filters, chunk_depth, note_depth, warnings) -> list[ChunkHit]:
        from .vector import allowed_chunk_ids, vector_hits

        vectors = self.vectors()
        if vectors.problem:
            warnings.append(f"{vectors.problem}; searched the database copy (run `vault-search index` to repair)")
        allowed = None
        if filters:
            where, params = filters.sql()
            allowed = allowed_chunk_ids(self.conn, where, params)
        qvec = self._query_vector(query[:MAX_QUERY_CHARS])
        pairs = vectors.top_chunks(qvec, chunk_depth, allowed)
        return best_per_note(vector_hits(self.conn, pairs), note_depth)

    def _query_vector(self, text: str):
        """The query's embedding, remembered for the last few distinct queries:
        an agent or a page repeats queries, and a benchmark asks the same one
        in vector and hybrid mode; the model costs most of a warm query."""
        embedder = self.embedder
        key = (embedder.fingerprint, text)
        cache = self._query_vectors
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        vector = embedder.embed_query(text)
        cache[key] = vector
        if len(cache) > QUERY_VECTOR_CACHE:
            cache.popitem(last=False)
        return vector

    def _results(self, fused: list[Fused], terms: list[str], mode: str) -> list[tuple[Fused, SearchResult]]:
        rows = self._chunk_rows([f.chunk_id for f in fused])
        out = []
        for f in fused:
            if f.chunk_id not in rows:
                continue  # cannot happen inside one snapshot; never fail a search over it
            scores = Scores(fts=_round(f.scores.get("fts")), vector=_round(f.scores.get("vector")))
            # A name match outranks the list it was put on top of: its own
            # retriever score may be lower than the next result's.
            score = {"fts": scores.fts, "vector": scores.vector}.get(mode)
            if score is None:
                score = _round(f.score)
            out.append((f, self._result(rows[f.chunk_id], terms, score, scores)))
        return out

    def _chunk_rows(self, ids: list[int]) -> dict[int, tuple]:
        """chunk id -> (path, title, tags, heading, start, end, text, stale, date)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        stale_sql, stale_params = Staleness.from_config(self.config).sql()
        return {r[0]: r[1:] for r in self.conn.execute(
            f"""SELECT c.id, n.path, n.title, n.tags, c.heading, c.start_line, c.end_line, c.text,
                       coalesce({stale_sql}, 0), coalesce(c.at, n.date)
                FROM chunks c JOIN notes n ON n.id = c.note_id WHERE c.id IN ({marks})""", [*stale_params, *ids])}

    def _result(self, row: tuple, terms: list[str], score, scores: Scores, **extra) -> SearchResult:
        path, title, tags, heading, start, end, text, stale, date = row
        return SearchResult(
            path=path, title=title, heading=heading, start_line=start, end_line=end,
            snippet=make_snippet(_without_heading_line(text), terms), score=score, scores=scores,
            tags=json.loads(tags), stale=bool(stale), uri=self.obsidian_uri(path), date=date, **extra)

    def links(self, path: str) -> dict:
        """A note's outgoing links (resolved or not), its backlinks, and
        which of its links resolve to no note."""
        rel = self._note_path(path)
        note_id = self.conn.execute("SELECT id FROM notes WHERE path = ?", (rel,)).fetchone()[0]
        out = [{"line": line, "target": target, "subpath": subpath, "alias": alias, "embed": bool(embed),
                "kind": kind, "path": target_path}
               for line, target, subpath, alias, embed, kind, target_path in self.conn.execute(
                   """SELECT l.line, l.target, l.subpath, l.alias, l.embed, l.kind, t.path
                      FROM links l LEFT JOIN notes t ON t.id = l.target_id
                      WHERE l.source_id = ? ORDER BY l.line, l.id""", (note_id,))]
        back = [{"path": source, "line": line, "target": target, "subpath": subpath, "alias": alias,
                 "embed": bool(embed)}
                for source, line, target, subpath, alias, embed in self.conn.execute(
                    """SELECT s.path, l.line, l.target, l.subpath, l.alias, l.embed
                       FROM links l JOIN notes s ON s.id = l.source_id
                       WHERE l.target_id = ? AND l.source_id != ? ORDER BY s.path, l.line""", (note_id, note_id))]
        return {"path": rel, "outlinks": out, "backlinks": back,
                "unresolved": [link for link in out if link["kind"] == "note" and link["path"] is None]}

    def tags(self) -> list[tuple[str, int]]:
        """Every tag with how many notes carry it (nested tags count for
        their parents too: "project" counts notes tagged "project/alpha"),
        most used first."""
        counts: dict[str, set[int]] = {}
        for note_id, tag in self.conn.execute("SELECT note_id, tag FROM note_tags"):
            parts = tag.split("/")
            for i in range(1, len(parts) + 1):
                counts.setdefault("/".join(parts[:i]), set()).add(note_id)
        return sorted(((t, len(ids)) for t, ids in counts.items()), key=lambda item: (-item[1], item[0]))

    def _note_path(self, path: str) -> str:
        """The vault path of an indexed note named by ``path`` (vault-relative,
        with or without .md, or absolute inside the vault)."""
        given = path.replace("\\", "/").strip()
        while given.startswith("./"):
            given = given[2:]
        for candidate in (given, given + ".md"):
            if self.conn.execute("SELECT 1 FROM notes WHERE path = ?", (candidate,)).fetchone():
                return candidate
        real = self.resolve_path(path)  # absolute paths; refuses anything outside the vault
        rel = os.path.relpath(real, os.path.realpath(self.config.vault)).replace(os.sep, "/")
        if not self.conn.execute("SELECT 1 FROM notes WHERE path = ?", (rel,)).fetchone():
            raise NoteNotFoundError(f"{path}: not an indexed note (run `vault-search index`?)")
        return rel

    def _path_of(self, note_id: int) -> str | None:
        row = self.conn.execute("SELECT path FROM notes WHERE id = ?", (note_id,)).fetchone()
        return row[0] if row else None

    def _first_chunks(self, note_ids: list[int]) -> dict[int, int]:
        """note id -> its first chunk's id."""
        if not note_ids:
            return {}
        marks = ",".join("?" * len(note_ids))
        return dict(self.conn.execute(
            f"SELECT note_id, min(id) FROM chunks WHERE note_id IN ({marks}) GROUP BY note_id", note_ids))

    def _name_matches(self, query: str, filters: SearchFilters) -> list[tuple[int, str]]:
        """Notes whose title, alias or file name is exactly the query (title
        matches first, then aliases, then file names; those passing the filters)."""
        from indexer.store import name_key

        key = name_key(query)
        if not key or len(key) > MAX_NAME_QUERY_CHARS:
            return []
        where, params = filters.sql()
        rows = self.conn.execute(
            f"""SELECT DISTINCT nm.note_id, nm.kind FROM names nm JOIN notes n ON n.id = nm.note_id
                JOIN chunks c ON c.note_id = n.id
                WHERE nm.key = ? AND {where}""", [key, *params]).fetchall()
        order = {"title": 0, "alias": 1, "file": 2}
        best: dict[int, str] = {}
        for note_id, kind in rows:
            if note_id not in best or order[kind] < order[best[note_id]]:
                best[note_id] = kind
        return sorted(best.items(), key=lambda item: (order[item[1]], item[0]))[:MAX_NAME_MATCHES]

    def _apply_recency(self, fused: list[Fused], half_life: float) -> dict[int, tuple[str, float]]:
        """Multiply each fused score by 0.5 ** (age in days / half_life), the
        age taken from the result chunk's date (a daily-log entry's time,
        else the note's frontmatter date, else its file's mtime); re-sorts
        ``fused`` in place (name matches stay first). Returns note id ->
        (date, factor)."""
        import datetime as dt

        ids = [f.chunk_id for f in fused]
        dates = dict(self.conn.execute(
            f"SELECT c.id, {CHUNK_DATE_SQL} FROM chunks c JOIN notes n ON n.id = c.note_id "
            f"WHERE c.id IN ({','.join('?' * len(ids))})", ids)) if ids else {}
        now = dt.datetime.now()
        out = {}
        for f in fused:
            date = dates.get(f.chunk_id)
            if not date:
                continue
            try:
                when = dt.datetime.fromisoformat(date if "T" in date else date + "T12:00")
            except ValueError:
                continue
            age_days = max((now - when).total_seconds() / 86400, 0.0)
            factor = 0.5 ** (age_days / half_life)
            f.score *= factor
            out[f.note_id] = (date, factor)
        fused.sort(key=lambda f: (f.name_match is None, -f.score))
        return out

    def _related(self, hits: list[SearchResult], filters: SearchFilters, terms: list[str]) -> list[SearchResult]:
        """Notes one link away (out or back) from the top hits, not hits
        themselves, in the order of the hit they connect to, then by how many
        of the top hits they connect to."""
        top = [h.path for h in hits[:RELATED_FROM]]
        seen = {h.path for h in hits}
        ids = {p: i for i, p in self.conn.execute(
            f"SELECT id, path FROM notes WHERE path IN ({','.join('?' * len(top))})", top)}
        found: dict[int, list] = {}   # note id -> [first hit index, connections, hit path]
        for i, path in enumerate(top):
            hit_id = ids.get(path)
            if hit_id is None:
                continue
            for (other,) in self.conn.execute(
                    "SELECT target_id FROM links WHERE source_id = ? AND target_id IS NOT NULL "
                    "UNION SELECT source_id FROM links WHERE target_id = ?", (hit_id, hit_id)):
                if other == hit_id:
                    continue
                entry = found.setdefault(other, [i, 0, path])
                entry[1] += 1
        if not found:
            return []
        where, params = filters.sql()
        marks = ",".join("?" * len(found))
        first = dict(self.conn.execute(
            f"""SELECT n.id, min(c.id) FROM notes n JOIN chunks c ON c.note_id = n.id
                WHERE n.id IN ({marks}) AND {where} GROUP BY n.id""", [*found, *params]))
        rows = self._chunk_rows(list(first.values()))
        order = sorted(first, key=lambda n: (found[n][0], -found[n][1], n))
        out = []
        for note_id in order:
            row = rows.get(first[note_id])
            if row is None or row[0] in seen:
                continue
            out.append(self._result(row, terms, 0.0, Scores(), related=True,
                                    related_to=found[note_id][2]))
            if len(out) == RELATED_LIMIT:
                break
        return out

    # -- vectors -----------------------------------------------------------
    @property
    def model_spec(self) -> str | None:
        """The embedding model this index was built with (None: keyword only)."""
        return get_meta(self.conn, "embed_model")

    @property
    def embedder(self):
        """The embedder for queries: the one passed to ``open``, else the index's model."""
        if self._embedder is None:
            from indexer.embed import get_embedder

            spec = self.model_spec
            if spec is None:
                raise UnsupportedModeError("this index has no embeddings; run `vault-search index`")
            self._embedder = get_embedder(spec)
        return self._embedder

    def has_vectors(self) -> bool:
        if not self.model_spec:
            return False
        state = get_meta(self.conn, "vectors")
        return bool(state) and json.loads(state).get("rows", 0) > 0

    def vectors(self):
        """The chunk matrix, reloaded whenever an ``index`` run has replaced it."""
        from .vector import VectorIndex

        state = get_meta(self.conn, "vectors")
        if self._vectors is None or self._vectors_state != state or self._vectors.problem:
            embedder = self.embedder
            recorded = get_meta(self.conn, "embed_fingerprint")
            if recorded and recorded != embedder.fingerprint:
                raise IndexVersionError(
                    f"the index's vectors were made by {recorded.split('|')[0]} ({recorded}), but this "
                    f"vault-search embeds queries with {embedder.fingerprint}; run `vault-search index` "
                    "to re-embed, or `vault-search index --rebuild --model MODEL`")
            self._vectors = VectorIndex.load(self.conn, self.config.index_dir, embedder.fingerprint, embedder.dim)
            self._vectors_state = state
        return self._vectors

    def obsidian_uri(self, path: str) -> str:
        return (f"obsidian://open?vault={quote(self.config.vault_name, safe='')}"
                f"&file={quote(path, safe='')}")

    def get(self, path: str, start: int | None = None, end: int | None = None) -> NoteText:
        """Lines ``start``..``end`` (1-based, inclusive) of a file inside the vault."""
        full = self.resolve_path(path)
        try:
            with open(full, "rb") as fh:
                data = fh.read(self.config.max_file_bytes + 1)
            text, _ = decode_note(data)
        except BinaryNoteError as exc:
            raise VaultSearchError(f"{path}: {exc}") from None
        except OSError as exc:
            raise NoteNotFoundError(f"{path}: cannot read ({exc.strerror})") from None
        lines = split_lines(text)
        total = len(lines)
        first = 1 if start is None else start
        if first < 1 or (end is not None and end < first):
            shown = f"{first}-{end}" if end is not None else str(first)
            raise UsageValueError(f"bad line range {shown}: lines are numbered from 1, and END must be >= START")
        if first > max(total, 1):
            raise UsageValueError(f"{path} has {total} lines; line {first} is past the end")
        last = total if end is None else min(end, total)
        rel = Path(full).relative_to(self.config.vault).as_posix()
        return NoteText(rel, first, last, total, "\n".join(lines[first - 1:last]))

    def resolve_path(self, path: str) -> str:
        """The real file behind a vault path; refuses anything outside the vault."""
        if "\x00" in path:
            raise PathOutsideVaultError("path contains a NUL byte")
        vault = os.path.realpath(self.config.vault)
        candidate = path if os.path.isabs(path) else os.path.join(vault, path)
        real = os.path.realpath(candidate)
        if not os.path.isfile(real) and not is_markdown(path):
            alt = os.path.realpath(candidate + ".md")
            if os.path.isfile(alt):
                real = alt
        if real != vault and not real.startswith(vault + os.sep):
            raise PathOutsideVaultError(f"{path}: outside the vault {vault}; refusing to read it")
        if not os.path.isfile(real):
            raise NoteNotFoundError(f"{path}: no such note in the vault")
        if not is_markdown(real):
            # Like any other path that is not a note: a 404 that says nothing
            # about whether some other file exists there.
            raise NoteNotFoundError(f"{path}: no such note in the vault")
        rel = os.path.relpath(real, vault).replace(os.sep, "/")
        if IgnoreRules(self.config.ignore, self.config.include_dot).skips_path(rel):
            raise NoteNotFoundError(f"{path}: in a folder vault-search skips ({rel}); it is not served")
        return real

    def _vector_status(self) -> dict:
        return _vector_status_fields(self.conn, self.config.index_dir)

    def status(self, warnings_limit: int = 50) -> IndexStatus:
        q = self.conn.execute
        try:
            last_sync = get_meta(self.conn, "last_sync")
            warn_rows = q("SELECT path, warnings FROM notes WHERE warnings != '[]' ORDER BY path").fetchall()
            skipped = q("SELECT path, reason FROM skipped ORDER BY path").fetchall()
            warnings = [{"path": p, "message": m} for p, ws in warn_rows for m in json.loads(ws)]
            warnings += [{"path": p, "message": f"not indexed: {r}"} for p, r in skipped]
            status = IndexStatus(
                vault=str(self.config.vault), index_dir=str(self.config.index_dir),
                notes=q("SELECT count(*) FROM notes").fetchone()[0],
                chunks=q("SELECT count(*) FROM chunks").fetchone()[0],
                empty_notes=q("SELECT count(*) FROM notes n WHERE NOT EXISTS "
                              "(SELECT 1 FROM chunks c WHERE c.note_id = n.id)").fetchone()[0],
                notes_with_warnings=len(warn_rows), skipped_files=len(skipped),
                tags=q("SELECT count(DISTINCT tag) FROM note_tags").fetchone()[0],
                dictionary_words=q("SELECT count(*) FROM dictionary").fetchone()[0],
                db_bytes=sum(os.path.getsize(p) for p in Path(self.config.index_dir).glob(DB_NAME + "*")),
                last_sync=json.loads(last_sync) if last_sync else None,
                schema_version=SCHEMA_VERSION,
                segmenter_version=get_meta(self.conn, "segmenter_version"),
                tool_version=indexer.__version__,
                warnings=warnings[:warnings_limit],
                links=q("SELECT count(*) FROM links WHERE kind = 'note'").fetchone()[0],
                unresolved_links=q("SELECT count(*) FROM links WHERE kind = 'note' AND target_id IS NULL")
                .fetchone()[0],
                **self._vector_status())
        except sqlite3.DatabaseError as exc:
            raise _db_error(exc, self.config) from None
        return status


def _remove(path) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise VaultSearchError(f"cannot remove {path}: {exc.strerror}") from None


def _remove_index_files(folder: Path) -> None:
    from indexer.vectors import IDS_FILE, VECTORS_FILE

    path = db_path(folder)
    for name in (f"{path}", f"{path}-wal", f"{path}-shm", folder / IDS_FILE, folder / VECTORS_FILE):
        _remove(name)


def _recorded_model(index_dir) -> str | None:
    """The model an existing (maybe damaged) index was built with, if it can be read."""
    path = db_path(index_dir)
    if not path.exists():
        return None
    try:
        conn = connect(path, readonly=True)
        try:
            return get_meta(conn, "embed_model")
        finally:
            conn.close()
    except (VaultSearchError, sqlite3.DatabaseError):
        return None


_files_checked: dict[str, tuple[tuple, str | None]] = {}


def _checked_files(index_dir, raw_state: str | None, state: dict | None) -> str | None:
    """``check_files`` (which hashes the whole matrix: 0.45 s at 50k chunks),
    remembered until the recorded state or either file's size, mtime or inode
    changes, so a server's /status does not re-hash it on every call."""
    from indexer.vectors import IDS_FILE, VECTORS_FILE, check_files

    stamp = [raw_state]
    for name in (IDS_FILE, VECTORS_FILE):
        try:
            st = os.stat(Path(index_dir) / name)
            stamp.append((st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            stamp.append(None)
    key = str(index_dir)
    cached = _files_checked.get(key)
    if cached is not None and cached[0] == tuple(stamp):
        return cached[1]
    problem = check_files(index_dir, state)
    _files_checked[key] = (tuple(stamp), problem)
    return problem


def _vector_status_fields(conn, index_dir) -> dict:
    fingerprint = get_meta(conn, "embed_fingerprint")
    out = {"model": get_meta(conn, "embed_model"), "embedded_chunks": 0, "waiting_chunks": 0, "vectors": None}
    if not fingerprint:
        return out
    from indexer.vectors import count_waiting

    out["waiting_chunks"] = count_waiting(conn, fingerprint)
    out["embedded_chunks"] = conn.execute("SELECT count(*) FROM chunks").fetchone()[0] - out["waiting_chunks"]
    raw = get_meta(conn, "vectors")
    state = json.loads(raw) if raw else None
    problem = _checked_files(index_dir, raw, state)
    if problem is None and state["fingerprint"] != fingerprint:
        problem = "vectors file was built by another model"
    out["vectors"] = problem or f"ok ({state['rows']} rows)"
    return out


def _round(value: float | None) -> float | None:
    """Six significant digits: BM25 scores of very common words are tiny
    (FTS5 floors their IDF), and rounding to decimals would show 0."""
    return None if value is None else float(f"{value:.6g}")


def _put_first(fused: list[Fused], named: list[tuple[int, str]], first_chunks: dict[int, int]) -> list[Fused]:
    """``fused`` with the notes named by the query moved (or added) to the
    front, scored as the best result, so scores still descend."""
    if not named:
        return fused
    by_note = {f.note_id: f for f in fused}
    top_score = fused[0].score if fused else 1.0
    front = []
    for note_id, kind in named:
        f = by_note.pop(note_id, None)
        if f is None:
            if note_id not in first_chunks:
                continue  # an empty note: nothing to show
            f = Fused(note_id, 0.0, first_chunks[note_id])
        f.score = max(f.score, top_score)
        f.name_match = kind
        front.append(f)
    return front + [f for f in fused if f.note_id in by_note]


def _without_heading_line(text: str) -> str:
    """The heading is its own field; the snippet shows what is under it."""
    if text.startswith("#"):
        first, _, rest = text.partition("\n")
        if rest.strip() and first.lstrip("#").startswith((" ", "\t")):
            return rest
    return text


def _db_error(exc: sqlite3.DatabaseError, config: VaultConfig) -> VaultSearchError:
    text = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        return VaultSearchError(f"the index changed under this run ({text}); run `vault-search index` again")
    if "locked" in text or "busy" in text:
        return VaultSearchError(f"the index is busy ({text}); another process is writing, try again")
    if "readonly" in text or "read-only" in text:
        return VaultSearchError(f"the index folder {config.index_dir} is read-only; "
                                "choose a writable one with --index-dir")
    name = getattr(exc, "sqlite_errorname", "") or ""
    if "full" in text or name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk I/O error" in text:
        # Nothing committed is lost: SQLite rolled the failed transaction back.
        return VaultSearchError(f"could not write the index in {config.index_dir} ({text}: disk full, a file-size "
                                "limit or a failing disk); free space and run `vault-search index` again")
    return IndexCorruptError(f"the index database is damaged ({text}); run `vault-search index --rebuild`")
