"""The vault's files as the faces read them: a path checked to stay inside the
vault and to name a note vault-search serves, and lines of it (``get``).
Needs no index: ``vault-search get`` reads a file without opening one."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

from indexer.config import VaultConfig
from indexer.errors import NoteNotFoundError, PathOutsideVaultError, UsageValueError, VaultSearchError
from indexer.parse import BINARY_SNIFF_BYTES, BinaryNoteError, decode_note, split_lines
from indexer.scan import IgnoreRules, is_markdown
from indexer.store import name_key

from .results import NoteText

# PATH:START or PATH:START-END, as the text output prints a hit's place.
LOCATION_RE = re.compile(r"^(?P<path>.*?):(?P<start>\d+)(?:-(?P<end>\d+))?$")
# Candidates named in an ambiguous-name error.
MAX_CANDIDATES = 8
# A note over max_file_mb is counted and searched for its lines in blocks of
# this size, never held whole.
BLOCK_BYTES = 1 << 20
# split_lines' line breaks, as bytes: no character of UTF-8 or GB18030 holds
# either byte, so a file is counted and cut at them without decoding it.
LINE_BREAK_BYTES = re.compile(rb"\r\n|\r|\n")


class BadLocationError(UsageValueError):
    """``PATH:abc``: a line range that is not numbers."""


class AmbiguousNameError(VaultSearchError):
    """A name or alias that several notes carry (a one-line error, exit 1; HTTP 400)."""


def parse_location(config: VaultConfig, location: str) -> tuple[str, int | None, int | None]:
    """``PATH``, ``PATH:START`` or ``PATH:START-END`` (or a note's name in
    place of PATH) → (path, start, end); a file whose name ends in ``:12`` is
    read whole."""
    if _note_file(config, location):
        return location, None, None
    m = LOCATION_RE.match(location)
    if m:
        return m.group("path"), int(m.group("start")), int(m.group("end")) if m.group("end") else None
    head, _, spec = location.rpartition(":")
    if head and (is_markdown(head) or _note_file(config, head) or _note_file(config, head + ".md")):
        raise BadLocationError(f"bad line range {spec!r} in {location!r}: use PATH, PATH:START or "
                               "PATH:START-END (lines are numbered from 1)")
    return location, None, None


def _note_file(config: VaultConfig, path: str) -> bool:
    """Whether ``path`` is a file inside the vault (never a probe of what lies outside it)."""
    vault = os.path.realpath(config.vault)
    real = os.path.realpath(os.path.join(vault, path))
    return "\x00" not in path and real.startswith(vault + os.sep) and os.path.isfile(real)


def note_by_name(conn: sqlite3.Connection, name: str) -> str:
    """The indexed note that ``name`` names, read the way Obsidian reads a
    wikilink (case-insensitive, ``.md`` optional): the path from the vault
    root, else the end of a path (``Dates``, ``Getting Started/Dates``), else
    a frontmatter alias, else a title. Several notes at the first level that
    matches: ``AmbiguousNameError`` listing them (a link would pick the one
    nearest the root; a command asked for one note should not guess)."""
    key = name.replace("\\", "/").strip().strip("/")
    stem = os.path.splitext(key)[0] if is_markdown(key) else key
    if not stem:
        raise NoteNotFoundError(f"{name!r}: no such note in the vault")
    folded = name_key(stem)
    stems = [(p, name_key(os.path.splitext(p)[0])) for (p,) in conn.execute("SELECT path FROM notes ORDER BY path")]
    levels = [[p for p, s in stems if s == folded], [p for p, s in stems if s.endswith("/" + folded)]]
    for kind in ("alias", "title"):
        levels.append([p for (p,) in conn.execute(
            "SELECT DISTINCT n.path FROM names nm JOIN notes n ON n.id = nm.note_id WHERE nm.key = ? AND nm.kind = ? "
            "ORDER BY n.path", (folded, kind))])
    for found in levels:
        if len(found) == 1:
            return found[0]
        if found:
            shown = ", ".join(found[:MAX_CANDIDATES]) + (f", ... ({len(found)} in all)"
                                                         if len(found) > MAX_CANDIDATES else "")
            raise AmbiguousNameError(f"{name!r} names {len(found)} notes: {shown}; give the path")
    raise NoteNotFoundError(f"{name}: no note has this path, name or alias{did_you_mean(conn, stem)}")


# How alike (difflib's ratio) a note's name must be to a name that names no
# note to be suggested; at 0.6 "Custom Grupping" suggests "Custom Grouping"
# and "zebra" suggests nothing in a vault without one.
SUGGEST_SIMILARITY = 0.6
MAX_SUGGESTIONS = 3


def did_you_mean(conn: sqlite3.Connection, name: str) -> str:
    """"; did you mean: X, Y" for the notes whose path, file name, title or
    alias is most like ``name``; "" when none is close."""
    import difflib

    wanted = name_key(name)
    names: dict[str, str] = {}   # a name's key -> the note's path
    for (path,) in conn.execute("SELECT path FROM notes"):
        stem = os.path.splitext(path)[0]
        names.setdefault(name_key(stem), path)
        names.setdefault(name_key(stem.rsplit("/", 1)[-1]), path)
    for key, path in conn.execute("SELECT nm.key, n.path FROM names nm JOIN notes n ON n.id = nm.note_id"):
        names.setdefault(key, path)
    close = difflib.get_close_matches(wanted, list(names), n=MAX_SUGGESTIONS * 3, cutoff=SUGGEST_SIMILARITY)
    paths = list(dict.fromkeys(names[key] for key in close))[:MAX_SUGGESTIONS]
    return "; did you mean: " + ", ".join(paths) if paths else ""


def resolve_path(config: VaultConfig, path: str) -> str:
    """The real file behind a vault path; refuses anything outside the vault."""
    if "\x00" in path:
        raise PathOutsideVaultError("path contains a NUL byte")
    vault = os.path.realpath(config.vault)
    candidate = path if os.path.isabs(path) else os.path.join(vault, path)
    real = os.path.realpath(candidate)
    if not os.path.isfile(real) and not is_markdown(path):
        alt = os.path.realpath(candidate + ".md")
        if os.path.isfile(alt):
            real = alt
    if real != vault and not real.startswith(vault + os.sep):
        raise PathOutsideVaultError(f"{path}: outside the vault ({vault}); refusing to read it")
    if not os.path.isfile(real):
        raise NoteNotFoundError(f"{path}: no such note in the vault")
    if not is_markdown(real):
        # Like any other path that is not a note: a 404 that says nothing
        # about whether some other file exists there.
        raise NoteNotFoundError(f"{path}: no such note in the vault")
    rel = os.path.relpath(real, vault).replace(os.sep, "/")
    if IgnoreRules(config.ignore, config.include_dot).skips_path(rel):
        raise NoteNotFoundError(f"{path}: in a folder vault-search skips ({rel}); it is not served")
    return real


def _named(conn: sqlite3.Connection, name: str, missing: NoteNotFoundError) -> str:
    """``note_by_name``; when no note has the name either, the path's own error."""
    try:
        return note_by_name(conn, name)
    except NoteNotFoundError:
        if "no such note" in str(missing):
            raise NoteNotFoundError(f"{name}: no note has this path, name or alias"
                                    f"{did_you_mean(conn, os.path.splitext(name)[0])}") from None
        raise missing from None


def read_note(config: VaultConfig, path: str, start: int | None = None, end: int | None = None,
              conn: sqlite3.Connection | None = None) -> NoteText:
    """Lines ``start``..``end`` (1-based, inclusive) of a file inside the
    vault; with the index's ``conn``, ``path`` may also be a note's name or
    alias (``note_by_name``)."""
    try:
        full = resolve_path(config, path)
    except NoteNotFoundError as missing:
        if conn is None:
            raise
        full = resolve_path(config, _named(conn, path, missing))
    first = 1 if start is None else start
    if first < 1 or (end is not None and end < first):
        shown = f"{first}-{end}" if end is not None else str(first)
        raise UsageValueError(f"bad line range {shown}: lines are numbered from 1, and END must be >= START")
    rel = Path(full).relative_to(config.vault).as_posix()
    try:
        with open(full, "rb") as fh:
            # Not much more than the file holds: read(n) sets n bytes aside first, and max_file_mb may be large.
            size = max(os.fstat(fh.fileno()).st_size, BLOCK_BYTES)
            data = fh.read(min(config.max_file_bytes, size) + 1)
            if len(data) > config.max_file_bytes:
                if b"\x00" in data[:BINARY_SNIFF_BYTES]:
                    decode_note(data[:BINARY_SNIFF_BYTES])   # raises: binary, as a smaller one would
                return _large_note(fh, config.max_file_bytes, path, rel, first, end)
        text, _ = decode_note(data)
    except BinaryNoteError as exc:
        raise VaultSearchError(f"{path}: {exc}") from None
    except OSError as exc:
        raise NoteNotFoundError(f"{path}: cannot read ({exc.strerror})") from None
    lines = split_lines(text)
    total = len(lines)
    if first > max(total, 1):
        raise UsageValueError(f"{path} has {total} lines; line {first} is past the end")
    last = total if end is None else min(end, total)
    return NoteText(rel, first, last, total, "\n".join(lines[first - 1:last]))


def _large_note(fh, limit: int, path: str, rel: str, first: int, end: int | None) -> NoteText:
    """Lines ``first``..``end`` of a note over ``limit`` bytes (max_file_mb):
    as many whole lines as fit in ``limit`` bytes, ``truncated`` with a
    warning saying where to read on when that is fewer than were asked for;
    ``total_lines`` is the file's, counted without holding it."""
    offset, total = _find_line(fh, first)
    if offset is None or first > max(total, 1):
        raise UsageValueError(f"{path} has {total} lines; line {first} is past the end")
    fh.seek(offset)
    window = fh.read(limit + 1)
    partial = False
    if len(window) > limit:
        window = window[:limit]
        cut = max(window.rfind(b"\n"), window.rfind(b"\r"))
        if cut >= 0:
            window = window[:cut + 1]
        else:   # one line longer than the limit: its first bytes, ending on a whole character
            partial = True
            window = _whole_chars(window)
    text, _ = decode_note(window)
    lines = split_lines(text) or [""]
    wanted = total if end is None else min(end, total)
    last = min(wanted, first + len(lines) - 1)
    out = NoteText(rel, first, last, total, "\n".join(lines[:last - first + 1]))
    why = f"{rel} is over the {limit / 1048576:g} MB that one get returns (max_file_mb in .vault-search.toml)"
    if partial:
        out.truncated = True
        out.warnings.append(f"line {first} cut after {len(window)} bytes: {why}; raise max_file_mb to read it whole")
    elif last < wanted:
        out.truncated = True
        out.warnings.append(f"cut at line {last} of {total}: {why}; read on from line {last + 1}")
    return out


def _find_line(fh, first: int) -> tuple[int | None, int]:
    """(the byte offset at which line ``first`` starts, None past the end; the
    file's line count, as ``split_lines`` counts them)."""
    fh.seek(0)
    offset = 0 if first == 1 else None
    breaks = 0
    pos = 0
    tail = b""
    while block := fh.read(BLOCK_BYTES):
        while block.endswith(b"\r"):   # a \r\n is one break: never split it between blocks
            more = fh.read(1)
            if not more:
                break
            block += more
        n = _count_breaks(block)
        if offset is None and breaks + n >= first - 1:
            for m in LINE_BREAK_BYTES.finditer(block):
                breaks += 1
                n -= 1
                if breaks == first - 1:
                    offset = pos + m.end()
                    break
        breaks += n
        pos += len(block)
        tail = block[-1:]
    return offset, breaks + (1 if tail not in (b"", b"\n", b"\r") else 0)


def _count_breaks(data: bytes) -> int:
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


def _whole_chars(data: bytes) -> bytes:
    """``data`` without the UTF-8 character cut at its end, if one is."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:   # the last character's first byte: is the rest of it there?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


def indexed_path(conn: sqlite3.Connection, config: VaultConfig, path: str) -> str:
    """The vault path of an indexed note named by ``path`` (vault-relative,
    with or without .md, or absolute inside the vault)."""
    given = path.replace("\\", "/").strip()
    while given.startswith("./"):
        given = given[2:]
    for candidate in (given, given + ".md"):
        if conn.execute("SELECT 1 FROM notes WHERE path = ?", (candidate,)).fetchone():
            return candidate
    try:
        real = resolve_path(config, path)  # absolute paths; refuses anything outside the vault
    except NoteNotFoundError as missing:
        return _named(conn, path, missing)
    rel = os.path.relpath(real, os.path.realpath(config.vault)).replace(os.sep, "/")
    if not conn.execute("SELECT 1 FROM notes WHERE path = ?", (rel,)).fetchone():
        raise NoteNotFoundError(f"{path}: not an indexed note (run `vault-search index`?)")
    return rel
