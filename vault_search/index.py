"""``Index``: one object that owns a vault's index and answers queries.

    with Index.open("~/notes") as idx:
        idx.sync()
        for r in idx.search("数据库 索引").results:
            print(r.path, r.start_line, r.snippet)
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

import indexer
from indexer.config import VaultConfig, load_config
from indexer.errors import (IndexCorruptError, NoteNotFoundError, PathOutsideVaultError,
                            VaultSearchError)
from indexer.parse import BinaryNoteError, decode_note
from indexer.scan import is_markdown
from indexer.store import DB_NAME, SCHEMA_VERSION, check_schema, connect, db_path, get_meta, migrate
from indexer.sync import Progress, SyncReport, load_segmenter, sync_vault

from .filters import SearchFilters
from .keyword import CHUNKS_PER_RESULT, MIN_CHUNK_DEPTH, best_per_note, keyword_hits
from .query import fts_query
from .results import IndexStatus, NoteText, Scores, SearchResponse, SearchResult
from .snippet import make_snippet

MODES = ("hybrid", "fts", "vector")
MAX_LIMIT = 1000


class UnsupportedModeError(VaultSearchError):
    """A search mode this index cannot serve."""


class Index:
    def __init__(self, config: VaultConfig, conn: sqlite3.Connection):
        self.config = config
        self.conn = conn
        self._segmenter = None

    # -- lifecycle ---------------------------------------------------------
    @classmethod
    def open(cls, vault: str | os.PathLike | None = None, index_dir: str | os.PathLike | None = None, *,
             config: VaultConfig | None = None, create: bool = False, rebuild: bool = False) -> "Index":
        """Open the index of ``vault``; ``create`` for writers, ``rebuild`` to start afresh."""
        config = config or load_config(vault, index_dir)
        path = db_path(config.index_dir)
        if rebuild:
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.remove(f"{path}{suffix}")
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise VaultSearchError(f"cannot remove {path}{suffix}: {exc.strerror}") from None
        conn = connect(path, create=create or rebuild)
        idx = cls(config, conn)
        if not (create or rebuild):
            try:
                check_schema(conn)
            except BaseException:
                conn.close()
                raise
        return idx

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def segmenter(self):
        if self._segmenter is None:
            self._segmenter = load_segmenter(self.conn)
        return self._segmenter

    # -- writing -----------------------------------------------------------
    def sync(self, progress: Progress | None = None, force: bool = False) -> SyncReport:
        """Bring the index up to date with the vault (incremental)."""
        try:
            migrate(self.conn)
            report = sync_vault(self.conn, self.config, self.segmenter, progress=progress, force=force)
        except sqlite3.DatabaseError as exc:
            raise _db_error(exc, self.config) from None
        return report

    # -- reading -----------------------------------------------------------
    def search(self, query: str, *, mode: str | None = None, limit: int = 10, tags=(), path: str | None = None,
               after: str | None = None, before: str | None = None, explain: bool = False) -> SearchResponse:
        t0 = time.perf_counter()
        query = query or ""
        mode = mode or "fts"  # hybrid becomes the default once vectors exist
        if mode not in MODES:
            raise UnsupportedModeError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if mode != "fts":
            raise UnsupportedModeError(
                f"--mode {mode} needs embeddings, which this index does not have; use --mode fts")
        limit = max(1, min(int(limit), MAX_LIMIT))
        filters = SearchFilters.build(tags, path, after, before)
        fq = fts_query(query, self.segmenter)
        depth = max(MIN_CHUNK_DEPTH, limit * CHUNKS_PER_RESULT)
        try:
            hits = best_per_note(keyword_hits(self.conn, fq.match, filters, depth), limit)
            results = self._results(hits, fq.terms)
        except sqlite3.DatabaseError as exc:
            raise _db_error(exc, self.config) from None
        response = SearchResponse(query=query, mode=mode, took_ms=0.0, warnings=list(fq.warnings),
                                  results=results, terms=fq.terms)
        if explain:
            response.explain = {
                "fts_match": fq.match,
                "terms": fq.terms,
                "filters": filters.sql()[0] if filters else None,
                "ranks": [{"path": r.path, "fts_rank": h.rank, "fts_score": round(h.score, 4)}
                          for r, h in zip(results, hits)],
            }
        response.took_ms = round((time.perf_counter() - t0) * 1000, 2)
        return response

    def _results(self, hits, terms) -> list[SearchResult]:
        if not hits:
            return []
        ids = [h.chunk_id for h in hits]
        marks = ",".join("?" * len(ids))
        rows = {r[0]: r[1:] for r in self.conn.execute(
            f"""SELECT c.id, n.path, n.title, n.tags, c.heading, c.start_line, c.end_line, c.text
                FROM chunks c JOIN notes n ON n.id = c.note_id WHERE c.id IN ({marks})""", ids)}
        results = []
        for hit in hits:
            path, title, tags, heading, start, end, text = rows[hit.chunk_id]
            score = round(hit.score, 4)
            results.append(SearchResult(
                path=path, title=title, heading=heading, start_line=start, end_line=end,
                snippet=make_snippet(_without_heading_line(text), terms), score=score, scores=Scores(fts=score),
                tags=json.loads(tags), stale=False, uri=self.obsidian_uri(path)))
        return results

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
        lines = text.splitlines()
        total = len(lines)
        first = 1 if start is None else start
        if first < 1 or (end is not None and end < first):
            raise VaultSearchError(f"bad line range {first}-{end}; lines are numbered from 1 and END >= START")
        if first > max(total, 1):
            raise VaultSearchError(f"{path} has {total} lines; line {first} is past the end")
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
            raise VaultSearchError(f"{path}: not a Markdown note; only .md files can be read")
        return real

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
                warnings=warnings[:warnings_limit])
        except sqlite3.DatabaseError as exc:
            raise _db_error(exc, self.config) from None
        return status


def _without_heading_line(text: str) -> str:
    """The heading is its own field; the snippet shows what is under it."""
    if text.startswith("#"):
        first, _, rest = text.partition("\n")
        if rest.strip() and first.lstrip("#").startswith((" ", "\t")):
            return rest
    return text


def _db_error(exc: sqlite3.DatabaseError, config: VaultConfig) -> VaultSearchError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return VaultSearchError(f"the index is busy ({text}); another process is writing, try again")
    if "readonly" in text or "read-only" in text:
        return VaultSearchError(f"the index folder {config.index_dir} is read-only; "
                                "choose a writable one with --index-dir")
    if "disk" in text and "full" in text or "database or disk is full" in text:
        return VaultSearchError(f"disk full while writing the index in {config.index_dir}; free space and rerun")
    return IndexCorruptError(f"the index database is damaged ({text}); run `vault-search index --rebuild`")
