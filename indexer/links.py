"""Resolve ``[[wikilinks]]`` and Markdown links to notes the way Obsidian does.

A Markdown link (``[t](../Folder/Bob%20Smith.md)``) arrives here URL-decoded
by the parser and is resolved exactly like a wikilink with that path.
A link path is matched case-insensitively, with or without ``.md``:
1. as a path from the vault root (``[[Folder/Note]]``);
2. as a path relative to the linking note's folder (``[[../Other]]``);
3. by file name, or by the end of a path (``[[Sub/Note]]`` finds
   ``Area/Sub/Note.md``): when several notes share it, the one in the
   linking note's own folder wins, then the shortest path, then the first in
   alphabetical order (Obsidian writes the shortest path that is unique, so
   a bare name that several notes share means the one nearest the root);
4. by an alias from a note's frontmatter.
A link that resolves to no note but names a file (``![[diagram.png]]``,
``[[board.canvas]]``) is an attachment, never counted as unresolved.
"""

from __future__ import annotations

import json
import posixpath
import sqlite3
from dataclasses import dataclass

NOTE_SUFFIX = ".md"


def _key(path: str) -> str:
    key = path.strip().replace("\\", "/").casefold()
    return key[:-len(NOTE_SUFFIX)] if key.endswith(NOTE_SUFFIX) else key


def is_attachment(target: str) -> bool:
    """Whether a link that resolves to no note names a file (``diagram.png``,
    ``board.canvas``) rather than a missing note."""
    name = target.rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].casefold() if "." in name else ""
    return bool(ext) and ext != "md" and len(ext) <= 10 and ext.isalnum() and not ext.isdigit()


@dataclass
class Resolver:
    by_path: dict[str, int]             # "folder/note" -> id
    by_name: dict[str, list[tuple[str, int]]]   # "note" -> [(path, id)]
    by_alias: dict[str, list[tuple[str, int]]]  # alias -> [(path, id)]

    @classmethod
    def load(cls, conn: sqlite3.Connection) -> "Resolver":
        by_path: dict[str, int] = {}
        by_name: dict[str, list[tuple[str, int]]] = {}
        by_alias: dict[str, list[tuple[str, int]]] = {}
        for note_id, path, aliases in conn.execute("SELECT id, path, aliases FROM notes"):
            if not path.casefold().endswith(NOTE_SUFFIX):
                continue
            key = _key(path)
            by_path[key] = note_id
            by_name.setdefault(key.rsplit("/", 1)[-1], []).append((path, note_id))
            for alias in json.loads(aliases or "[]"):
                if isinstance(alias, str) and alias.strip():
                    by_alias.setdefault(_key(alias), []).append((path, note_id))
        return cls(by_path, by_name, by_alias)

    def resolve(self, target: str, source_path: str) -> int | None:
        if not target.strip() or is_attachment(target):
            return None
        key = _key(target).lstrip("/")
        folder = posixpath.dirname(source_path).casefold()
        if key in self.by_path:
            return self.by_path[key]
        if "/" in key or key.startswith("."):
            relative = posixpath.normpath(posixpath.join(folder, key))
            if relative in self.by_path:
                return self.by_path[relative]
        name = key.rsplit("/", 1)[-1]
        candidates = [(p, i) for p, i in self.by_name.get(name, ())
                      if "/" not in key or _key(p).endswith("/" + key)]
        if not candidates:
            candidates = self.by_alias.get(key, [])
        return _nearest(candidates, folder)


def _nearest(candidates: list[tuple[str, int]], folder: str) -> int | None:
    if not candidates:
        return None
    return min(candidates, key=lambda c: (posixpath.dirname(c[0]).casefold() != folder,
                                          c[0].count("/"), len(c[0]), c[0]))[1]


def resolve_links(conn: sqlite3.Connection, sources: set[int] | None = None) -> int:
    """Point every link (or only the links of the notes ``sources``: when a
    sync added, deleted and re-aliased no note, nothing else can resolve
    differently) at the note it resolves to now, inside the caller's
    transaction; returns how many links changed."""
    if sources is not None and not sources:
        return 0
    resolver = Resolver.load(conn)
    paths = dict(conn.execute("SELECT id, path FROM notes"))
    changes = []
    if sources is None:
        rows = conn.execute("SELECT id, source_id, target, target_id, kind FROM links")
    else:
        marks = ",".join("?" * len(sources))
        rows = conn.execute(f"SELECT id, source_id, target, target_id, kind FROM links WHERE source_id IN ({marks})",
                            sorted(sources))
    for link_id, source_id, target, old, old_kind in rows:
        if not target:
            continue  # [[#Heading]]: a place in the same note
        new = resolver.resolve(target, paths.get(source_id, ""))
        kind = "note" if new is not None or not is_attachment(target) else "attachment"
        if new != old or kind != old_kind:
            changes.append((new, kind, link_id))
    conn.executemany("UPDATE links SET target_id = ?, kind = ? WHERE id = ?", changes)
    return len(changes)
