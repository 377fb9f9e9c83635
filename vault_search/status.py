"""What an index holds and how healthy it is (``vault-search status``)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import indexer
from indexer.config import VaultConfig
from indexer.locate import CONFIG_FILE
from indexer.store import DB_NAME, SCHEMA_VERSION, describe_db_error, embedding_run, get_meta, vectors_state

from .results import IndexStatus


def index_status(conn: sqlite3.Connection, config: VaultConfig, warnings_limit: int = 50) -> IndexStatus:
    """Counts, versions, the last sync, the vectors' health and up to
    ``warnings_limit`` per-file warnings."""
    q = conn.execute
    try:
        last_sync = get_meta(conn, "last_sync")
        warn_rows = q("SELECT path, warnings FROM notes WHERE warnings != '[]' ORDER BY path").fetchall()
        skipped = q("SELECT path, reason FROM skipped ORDER BY path").fetchall()
        warnings = [{"path": p, "message": m} for p, ws in warn_rows for m in json.loads(ws)]
        warnings += [{"path": p, "message": f"not indexed: {r}"} for p, r in skipped]
        return IndexStatus(
            vault=str(config.vault), index_dir=str(config.index_dir),
            settings_file=str(config.vault / CONFIG_FILE) if (config.vault / CONFIG_FILE).is_file() else None,
            notes=q("SELECT count(*) FROM notes").fetchone()[0],
            chunks=q("SELECT count(*) FROM chunks").fetchone()[0],
            empty_notes=q("SELECT count(*) FROM notes n WHERE NOT EXISTS "
                          "(SELECT 1 FROM chunks c WHERE c.note_id = n.id)").fetchone()[0],
            notes_with_warnings=len(warn_rows), skipped_files=len(skipped),
            tags=q("SELECT count(DISTINCT tag) FROM note_tags").fetchone()[0],
            dictionary_words=q("SELECT count(*) FROM dictionary").fetchone()[0],
            db_bytes=sum(os.path.getsize(p) for p in Path(config.index_dir).glob(DB_NAME + "*")),
            last_sync=json.loads(last_sync) if last_sync else None,
            schema_version=SCHEMA_VERSION,
            segmenter_version=get_meta(conn, "segmenter_version"),
            tool_version=indexer.__version__,
            warnings=warnings[:warnings_limit],
            links=q("SELECT count(*) FROM links WHERE kind = 'note'").fetchone()[0],
            unresolved_links=q("SELECT count(*) FROM links WHERE kind = 'note' AND target_id IS NULL")
            .fetchone()[0],
            **vector_status(conn, config.index_dir))
    except sqlite3.DatabaseError as exc:
        raise describe_db_error(exc, config.index_dir) from None


def vector_status(conn: sqlite3.Connection, index_dir: str | os.PathLike) -> dict:
    """The model; the chunks vector search sees (``vectors.searchable``: the
    rows of the published matrix, or of the db's copy when the files cannot
    be used, as a search would) and those waiting; whether an embedding pass
    runs now; and the vectors file's state ("ok (N rows)" or what is wrong)."""
    fingerprint = get_meta(conn, "embed_fingerprint")
    out: dict[str, Any] = {"model": get_meta(conn, "embed_model"), "embedded_chunks": 0, "waiting_chunks": 0,
                           "vectors": None, "embedding_now": False}
    if not fingerprint:
        return out
    from indexer.embed import LATENT_SUFFIX
    from indexer.vectors import IDS_FILE, count_waiting, searchable

    raw = get_meta(conn, "vectors")
    state = vectors_state(conn)
    problem = _checked_files(index_dir, raw, state)
    if problem is None and state is not None:   # (no recorded state is a problem of check_files)
        problem = "vectors file was built by another model" if state["fingerprint"] != fingerprint else None
        out["vectors"] = problem or f"ok ({state['rows']} rows)"
    else:
        out["vectors"] = problem
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    # The db's own count of chunks without a vector: behind the published one
    # while a pass runs; ahead of it only for a vector whose latent terms are
    # missing (a bug's trace), which the next pass redoes.
    waiting = count_waiting(conn, fingerprint, (out["model"] or "").endswith(LATENT_SUFFIX))
    if problem is None:
        import numpy as np

        chunk_ids = np.fromiter((r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id")), dtype=np.int64)
        seen = searchable(np.load(Path(index_dir) / IDS_FILE, allow_pickle=False), chunk_ids)
        waiting = max(waiting, chunks - seen)
    elif state is None and raw is None:
        waiting = chunks   # nothing published: vector search sees none (otherwise it uses the db's copy)
    out["embedded_chunks"], out["waiting_chunks"] = chunks - waiting, waiting
    out["embedding_now"] = embedding_run(conn, index_dir) is not None
    return out


_files_checked: dict[str, tuple[tuple, str | None]] = {}


def _checked_files(index_dir: str | os.PathLike, raw_state: str | None, state: dict | None) -> str | None:
    """``check_files`` (which hashes the whole matrix: 0.45 s at 50k chunks),
    remembered until the recorded state or either file's size, mtime or inode
    changes, so a server's /status does not re-hash it on every call."""
    from indexer.vectors import IDS_FILE, VECTORS_FILE, check_files

    stamp: list[Any] = [raw_state]
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
    problem = check_files(Path(index_dir), state)
    _files_checked[key] = (tuple(stamp), problem)
    return problem
