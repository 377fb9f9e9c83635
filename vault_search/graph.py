"""How notes connect and group: a note's links and backlinks, and the tags."""

from __future__ import annotations

import sqlite3

from indexer.config import VaultConfig

from .files import indexed_path
from .results import Backlink, NoteLinks, Outlink, TagCount, TagCounts


def note_links(conn: sqlite3.Connection, config: VaultConfig, path: str) -> NoteLinks:
    """A note's outgoing links (resolved or not) and its backlinks."""
    rel = indexed_path(conn, config, path)
    note_id = conn.execute("SELECT id FROM notes WHERE path = ?", (rel,)).fetchone()[0]
    out = [Outlink(line, target, subpath, alias, bool(embed), kind, target_path)
           for line, target, subpath, alias, embed, kind, target_path in conn.execute(
               """SELECT l.line, l.target, l.subpath, l.alias, l.embed, l.kind, t.path
                  FROM links l LEFT JOIN notes t ON t.id = l.target_id
                  WHERE l.source_id = ? ORDER BY l.line, l.id""", (note_id,))]
    back = [Backlink(source, line, target, subpath, alias, bool(embed))
            for source, line, target, subpath, alias, embed in conn.execute(
                """SELECT s.path, l.line, l.target, l.subpath, l.alias, l.embed
                   FROM links l JOIN notes s ON s.id = l.source_id
                   WHERE l.target_id = ? AND l.source_id != ? ORDER BY s.path, l.line""", (note_id, note_id))]
    return NoteLinks(rel, out, back)


def tag_counts(conn: sqlite3.Connection, limit: int | None = None) -> TagCounts:
    """Every tag with how many notes carry it (nested tags count for their
    parents too: "project" counts notes tagged "project/alpha"), most used
    first; ``limit``: only that many."""
    counts: dict[str, set[int]] = {}
    for note_id, tag in conn.execute("SELECT note_id, tag FROM note_tags"):
        parts = tag.split("/")
        for i in range(1, len(parts) + 1):
            counts.setdefault("/".join(parts[:i]), set()).add(note_id)
    ranked = sorted(((t, len(ids)) for t, ids in counts.items()), key=lambda item: (-item[1], item[0]))
    return TagCounts([TagCount(t, n) for t, n in ranked[:limit]])
