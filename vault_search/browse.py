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
from indexer.errors import NoteNotFoundError, UsageValueError, VaultSearchError
from indexer.parse import split_frontmatter

from .files import note_by_name, read_note
from .results import (
    CutNote,
    FolderEntry,
    FolderListing,
    MissingNote,
    NoteEntry,
    NoteText,
    NoteTexts,
    Timeline,
    TimelineEntry,
)

# What an agent's context takes at once by default: about 25k tokens.
DEFAULT_MAX_BYTES = 100_000
MAX_NOTES = 1000
GLOB_CHARS = frozenset("*?[")
# "09:30 — " before a daily-log entry's title
ENTRY_PREFIX_RE = re.compile(r"^\s*\d{1,2}:\d{2}\s*[-—–:|]*\s*")


class Glob:
    """A vault glob, matched against note paths without backtracking blow-ups.

    A ``**`` segment matches any number of folders (``memory/**``,
    ``**/Dates.md``); inside a segment ``*`` is any run of characters, ``?``
    one, ``[abc]``, ``[a-z]`` and ``[!abc]`` one of (or none of) a set; a
    ``[`` without its ``]`` is itself. Case is ignored, as in Obsidian's
    names. Each segment is matched by the greedy two-pointer method (time
    linear in practice, quadratic at worst), and segments by a small table,
    so no pattern can make matching slow (a regex of several ``.*`` can take
    minutes on a long name)."""

    def __init__(self, pattern: str):
        self.segments = [seg if seg == "**" else self._tokens(seg.casefold())
                         for seg in pattern.strip("/").split("/")]

    @staticmethod
    def _tokens(segment: str) -> list:
        tokens: list = []
        i = 0
        while i < len(segment):
            c = segment[i]
            end = segment.find("]", i + 2) if c == "[" else -1
            if c == "*":
                if not tokens or tokens[-1] != "*":
                    tokens.append("*")
            elif c == "?":
                tokens.append(("any",))
            elif end != -1:
                body = segment[i + 1:end]
                negate = body[:1] in ("!", "^")
                tokens.append(("set", negate, _char_set(body[1:] if negate else body)))
                i = end
            else:
                tokens.append(("lit", c))
            i += 1
        return tokens

    def match(self, path: str) -> bool:
        parts = path.casefold().split("/")
        segs = self.segments
        # reach[j]: the pattern's first i segments match the path's first j parts.
        reach = [True] + [False] * len(parts)
        for seg in segs:
            nxt = [False] * (len(parts) + 1)
            if seg == "**":
                seen = False
                for j in range(len(parts) + 1):
                    seen = seen or reach[j]
                    nxt[j] = seen
            else:
                for j in range(len(parts)):
                    if reach[j] and _segment_match(seg, parts[j]):   # type: ignore[arg-type]
                        nxt[j + 1] = True
            reach = nxt
        return reach[len(parts)]


def _char_set(body: str) -> tuple[frozenset[str], tuple[tuple[str, str], ...]]:
    """The characters of ``[...]``: single ones and ``a-z`` ranges (an
    empty range, ``z-a``, matches nothing)."""
    chars: set[str] = set()
    ranges = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            ranges.append((body[i], body[i + 2]))
            i += 3
        else:
            chars.add(body[i])
            i += 1
    return (frozenset(chars), tuple(ranges))


def _one(token, c: str) -> bool:
    if token[0] == "lit":
        return token[1] == c
    if token[0] == "any":
        return True
    _, negate, (chars, ranges) = token
    inside = c in chars or any(lo <= c <= hi for lo, hi in ranges)
    return inside != negate


def _segment_match(tokens: list, text: str) -> bool:
    """Wildcard matching with one remembered star (the classic greedy method)."""
    t = s = 0
    star_t, star_s = -1, 0
    while s < len(text):
        if t < len(tokens) and tokens[t] != "*" and _one(tokens[t], text[s]):
            t += 1
            s += 1
        elif t < len(tokens) and tokens[t] == "*":
            star_t, star_s = t, s
            t += 1
        elif star_t != -1:
            t = star_t + 1
            star_s += 1
            s = star_s
        else:
            return False
    while t < len(tokens) and tokens[t] == "*":
        t += 1
    return t == len(tokens)


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


def expand(conn: sqlite3.Connection, patterns: list[str]) -> tuple[list[str], list[MissingNote]]:
    """The indexed notes ``patterns`` name, in order, each once: a glob
    (``memory/*.md``, ``**/Dates.md``), a folder (all notes under it), a path,
    or a note's name or alias; and each pattern that names no note (or
    several by one name), with why. When no pattern names a note, the first
    one's error is raised, naming every pattern's: there is nothing to read."""
    if not patterns:
        raise UsageValueError("multi-get needs a glob, a folder, or one or more paths or names")
    paths = _paths(conn)
    out: dict[str, None] = {}
    missing: list[tuple[MissingNote, VaultSearchError]] = []
    for pattern in patterns:
        pattern = pattern.strip()
        if not pattern:
            continue
        try:
            out.update(dict.fromkeys(_named(conn, paths, pattern)))
        except VaultSearchError as exc:   # not found, ambiguous, outside the vault: this name only
            missing.append((MissingNote(pattern, str(exc)), exc))
        if len(out) > MAX_NOTES:
            raise UsageValueError(f"{len(out)} notes match; multi-get reads at most {MAX_NOTES} at once: "
                                  "narrow the glob or folder")
    if not out and missing:
        first = missing[0][1]
        if len(missing) > 1:
            errors = "; ".join(str(exc) if m.pattern in str(exc) else f"{m.pattern}: {exc}" for m, exc in missing)
            raise type(first)(errors) from first
        raise first
    return list(out), [m for m, _ in missing]


def _named(conn: sqlite3.Connection, paths: list[str], pattern: str) -> list[str]:
    """The notes one pattern of ``expand`` names; an error when none."""
    if GLOB_CHARS & set(pattern):
        glob = Glob(pattern)
        found = [p for p in paths if glob.match(p)]
        if not found:
            raise NoteNotFoundError(f"{pattern}: no indexed note matches this glob")
        return found
    prefix = _folder(pattern)   # a folder's case counts, as in ls and --path
    return [p for p in paths if p.startswith(prefix)] or [note_by_name(conn, pattern)]


def multi_get(conn: sqlite3.Connection, config: VaultConfig, patterns: list[str],
              max_bytes: int = DEFAULT_MAX_BYTES, max_lines: int | None = None) -> NoteTexts:
    """The notes ``patterns`` name (``expand``), whole or their frontmatter
    and the first ``max_lines`` lines after it (the frontmatter does not
    count: it is the note's metadata, and a long one left a note cut short
    with none of its text), in the order named, within ``max_bytes`` (UTF-8,
    all notes together): a note that does not fit in what is left is left
    out (a later, smaller one may still fit), except the first, which is cut
    at a line. ``cut`` lists each note left out or cut short with its whole
    size, and each one gone since it was indexed."""
    if max_bytes < 1 or (max_lines is not None and max_lines < 1):
        raise UsageValueError("max_bytes and max_lines must be 1 or more")
    paths, missing = expand(conn, patterns)
    result = NoteTexts(max_bytes=max_bytes, missing=missing)
    for path in paths:
        try:
            whole = read_note(config, path)
        except (NoteNotFoundError, UsageValueError, VaultSearchError) as exc:   # deleted or unreadable since
            result.cut.append(CutNote(path, 0, f"not read: {exc}"))
            continue
        full_size = len(whole.text.encode("utf-8", "surrogateescape"))
        note = whole
        last = None   # the last line --max-lines keeps
        if max_lines is not None:
            lines = whole.text.split("\n")
            last = split_frontmatter(lines)[1] - 1 + max_lines
            if last < whole.end_line:
                note = NoteText(whole.path, 1, last, whole.total_lines, "\n".join(lines[:last]))
        size = len(note.text.encode("utf-8", "surrogateescape"))
        room = max_bytes - result.bytes
        if size > room:
            if result.notes or room <= 0:
                result.cut.append(CutNote(path, full_size, f"left out: over max_bytes ({max_bytes})"))
                continue
            note = _first_lines(note, room)
            size = len(note.text.encode("utf-8", "surrogateescape"))
        if note is whole and whole.truncated:   # over max_file_mb: read_note cut it already
            why_cut = whole.warnings[0] if whole.warnings else "cut: over max_file_mb"
            result.cut.append(CutNote(path, full_size, why_cut))
        if note is not whole:
            why = f"max_lines ({max_lines})" if note.end_line == last and size <= room else \
                f"max_bytes ({max_bytes})"
            result.cut.append(CutNote(path, full_size, f"cut at line {note.end_line} of {note.total_lines}: {why}"))
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
        raise _no_folder(conn, prefix)
    return FolderListing(prefix or "/", [FolderEntry(p, n, d) for p, (n, d) in folders.items()], notes)



def _no_folder(conn: sqlite3.Connection, prefix: str) -> NoteNotFoundError:
    """The error for a folder the index lacks, naming the one it likely means (a folder's case counts)."""
    from .filters import closest_folder

    close = closest_folder(conn, prefix)
    return NoteNotFoundError(f"{prefix}: no indexed notes in this folder"
                             + (f" (did you mean {close}/?)" if close else ""))


def timeline(conn: sqlite3.Connection, folder: str | None = None, after: str | None = None,
             before: str | None = None) -> Timeline:
    """The daily-log entries (``### HH:MM - Title`` under a dated note) of a
    folder, oldest first, within ``after``/``before`` (the dates of ``search``:
    2026-11-01, 2026-11, 7d, yesterday; inclusive at the precision given)."""
    from .filters import SearchFilters

    prefix = _folder(folder)
    dates = SearchFilters.build(after=after, before=before)
    if prefix and not conn.execute("SELECT 1 FROM notes WHERE substr(path, 1, ?) = ? LIMIT 1",
                                   (len(prefix), prefix)).fetchone():
        raise _no_folder(conn, prefix)
    rows = conn.execute(
        "SELECT c.at, c.heading, n.path, c.start_line, c.end_line FROM chunks c JOIN notes n ON n.id = c.note_id "
        "WHERE c.at IS NOT NULL AND substr(n.path, 1, ?) = ? "
        + (f"AND {dates.sql()[0]} " if dates else "") + "ORDER BY c.at, n.path, c.start_line",
        [len(prefix), prefix, *(dates.sql()[1] if dates else [])]).fetchall()
    entries: dict[tuple[str, str, str], TimelineEntry] = {}   # an entry split into chunks is one entry
    for at, heading, path, start, end in rows:
        entry = entries.get((path, at, heading))
        if entry is None:
            title = ENTRY_PREFIX_RE.sub("", heading.rsplit(" > ", 1)[-1] if heading else "")
            entries[(path, at, heading)] = TimelineEntry(at, title, path, start, end)
        else:
            entry.start_line, entry.end_line = min(entry.start_line, start), max(entry.end_line, end)
    return Timeline(prefix or "/", list(entries.values()))
