"""The vault's files as the faces read them: a path checked to stay inside the
vault and to name a note vault-search serves, and lines of it (``get``).
Needs no index: ``vault-search get`` reads a file without opening one."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from indexer.config import VaultConfig
from indexer.errors import NoteNotFoundError, PathOutsideVaultError, UsageValueError, VaultSearchError
from indexer.parse import BinaryNoteError, decode_note, split_lines
from indexer.scan import IgnoreRules, is_markdown

from .results import NoteText


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
        raise PathOutsideVaultError(f"{path}: outside the vault {vault}; refusing to read it")
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


def read_note(config: VaultConfig, path: str, start: int | None = None, end: int | None = None) -> NoteText:
    """Lines ``start``..``end`` (1-based, inclusive) of a file inside the vault."""
    full = resolve_path(config, path)
    try:
        with open(full, "rb") as fh:
            data = fh.read(config.max_file_bytes + 1)
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
    rel = Path(full).relative_to(config.vault).as_posix()
    return NoteText(rel, first, last, total, "\n".join(lines[first - 1:last]))


def indexed_path(conn: sqlite3.Connection, config: VaultConfig, path: str) -> str:
    """The vault path of an indexed note named by ``path`` (vault-relative,
    with or without .md, or absolute inside the vault)."""
    given = path.replace("\\", "/").strip()
    while given.startswith("./"):
        given = given[2:]
    for candidate in (given, given + ".md"):
        if conn.execute("SELECT 1 FROM notes WHERE path = ?", (candidate,)).fetchone():
            return candidate
    real = resolve_path(config, path)  # absolute paths; refuses anything outside the vault
    rel = os.path.relpath(real, os.path.realpath(config.vault)).replace(os.sep, "/")
    if not conn.execute("SELECT 1 FROM notes WHERE path = ?", (rel,)).fetchone():
        raise NoteNotFoundError(f"{path}: not an indexed note (run `vault-search index`?)")
    return rel
