"""Reading the vault by folder and by many names at once: ``ls`` and ``multi-get``.

Both read the index's list of notes (what a search can return), so a folder
vault-search skips is never listed and a glob never reaches outside the vault.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time

from indexer.config import VaultConfig
from indexer.errors import NoteNotFoundError, UsageValueError

from .files import note_by_name, read_note
from .results import CutNote, FolderEntry, FolderListing, NoteEntry, NoteText, NoteTexts

# What an agent's context takes at once by default: about 25k tokens.
DEFAULT_MAX_BYTES = 100_000
MAX_NOTES = 1000
GLOB_CHARS = frozenset("*?[")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A vault glob as a regex over note paths: ``*`` and ``?`` stay inside one
    folder, ``**`` crosses folders (``memory/**`` and ``**/Dates.md``),
    ``[abc]`` is a set; case-insensitive, as Obsidian's names are."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] in "*?":
            out.append("[^/]*" if pattern[i] == "*" else "[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1:end].replace("\\", "\\\\").replace("^", "\\^")
            out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.IGNORECASE)


def _paths(conn: sqlite3.Connection) -> list[str]:
    return [p for (p,) in conn.execute("SELECT path FROM notes ORDER BY path")]


def _folder(folder: str | None) -> str:
    """"" for the vault root, else "a/b/" (no leading slash, one trailing)."""
    folder = (folder or "").replace("\\", "/").strip().strip("/")
    if folder in ("", "."):
        return ""
    if ".." in folder.split("/"):
        raise UsageValueError(f"{folder}: outside the vault")
    return folder + "/"


def expand(conn: sqlite3.Connection, patterns: list[str]) -> list[str]:
    """The indexed notes ``patterns`` name, in order, each once: a glob
    (``memory/*.md``, ``**/Dates.md``), a folder (all notes under it), a path,
    or a note's name or alias. A pattern that names nothing is an error."""
    if not patterns:
        raise UsageValueError("multi-get needs a glob, a folder, or one or more paths or names")
    paths = _paths(conn)
    out: dict[str, None] = {}
    for pattern in patterns:
        pattern = pattern.strip()
        if not pattern:
            continue
        if GLOB_CHARS & set(pattern):
            rx = glob_regex(pattern.lstrip("/"))
            found = [p for p in paths if rx.fullmatch(p)]
            if not found:
                raise NoteNotFoundError(f"{pattern}: no indexed note matches this glob")
        else:
            prefix = _folder(pattern).casefold()
            found = [p for p in paths if p.casefold().startswith(prefix)]
            if not found:
                found = [note_by_name(conn, pattern)]
        out.update(dict.fromkeys(found))
        if len(out) > MAX_NOTES:
            raise UsageValueError(f"{len(out)} notes match; multi-get reads at most {MAX_NOTES} at once: "
                                  "narrow the glob or folder")
    return list(out)


def multi_get(conn: sqlite3.Connection, config: VaultConfig, patterns: list[str],
              max_bytes: int = DEFAULT_MAX_BYTES, max_lines: int | None = None) -> NoteTexts:
    """The notes ``patterns`` name (``expand``), whole or their first
    ``max_lines`` lines, in the order named, until ``max_bytes`` (UTF-8, all
    notes together) is reached: the first note that does not fit is cut at a
    line to fill the rest when it is the first, else left out like every
    note after it. ``cut`` says what was left out or cut short."""
    if max_bytes < 1 or (max_lines is not None and max_lines < 1):
        raise UsageValueError("max_bytes and max_lines must be 1 or more")
    result = NoteTexts(max_bytes=max_bytes)
    for path in expand(conn, patterns):
        try:
            note = read_note(config, path, 1, max_lines)
        except (NoteNotFoundError, UsageValueError):   # deleted since it was indexed, or empty
            note = NoteText(path, 1, 0, 0, "")
        size = len(note.text.encode("utf-8", "surrogateescape"))
        if note.end_line < note.total_lines:
            result.cut.append(CutNote(path, size, f"cut at max_lines ({max_lines})"))
        room = max_bytes - result.bytes
        if size > room:
            if result.notes or room <= 0:
                result.cut.append(CutNote(path, size, f"over max_bytes ({max_bytes})"))
                continue
            note = _first_lines(note, room)
            result.cut.append(CutNote(path, size, f"cut at max_bytes ({max_bytes})"))
            size = len(note.text.encode("utf-8", "surrogateescape"))
        result.notes.append(note)
        result.bytes += size
    return result


def _first_lines(note: NoteText, room: int) -> NoteText:
    """The note's whole lines that fit in ``room`` bytes (at least one line, cut at a character)."""
    kept: list[str] = []
    used = 0
    for line in note.text.split("\n"):
        size = len(line.encode("utf-8", "surrogateescape")) + (1 if kept else 0)
        if used + size > room:
            if not kept:
                kept.append(line.encode("utf-8", "surrogateescape")[:room].decode("utf-8", "ignore"))
            break
        kept.append(line)
        used += size
    return NoteText(note.path, note.start_line, note.start_line + len(kept) - 1, note.total_lines, "\n".join(kept))


def list_folder(conn: sqlite3.Connection, folder: str | None = None) -> FolderListing:
    """A folder of the vault as the index knows it: its sub-folders, each with
    how many notes lie under it and their newest date, then its own notes
    with title, date, modification time and tags."""
    prefix = _folder(folder)
    folders: dict[str, list] = {}
    notes = []
    rows = conn.execute("SELECT path, title, date, mtime_ns, tags, size FROM notes WHERE path LIKE ? ESCAPE '\\' "
                        "ORDER BY path", (prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                                          + "%",))
    for path, title, date, mtime_ns, tags, size in rows:
        if not path.startswith(prefix):   # LIKE ignores ASCII case; a folder's name does not
            continue
        rest = path[len(prefix):]
        modified = time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime_ns / 1e9))
        day = (date or modified)[:10]
        if "/" in rest:
            entry = folders.setdefault(prefix + rest.split("/", 1)[0] + "/", [0, None])
            entry[0] += 1
            entry[1] = max(filter(None, (entry[1], day)), default=None)
        else:
            notes.append(NoteEntry(path, title, date, modified, json.loads(tags or "[]"), size))
    if prefix and not folders and not notes:
        raise NoteNotFoundError(f"{prefix}: no indexed notes in this folder")
    return FolderListing(prefix or "/", [FolderEntry(p, n, d) for p, (n, d) in folders.items()], notes)

