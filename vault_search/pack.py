"""A context pack: ``search --budget-tokens N``.

An agent asks for what fits its window instead of ten snippets and ten
``get`` calls: the hits' passages, in rank order, each a whole section of its
note (the lines under one heading) when that fits, else the hit's own chunk
(a section, or a run of whole paragraphs of a long one: never cut
mid-sentence), as the file's own lines with ``path:start-end``. Passages that
overlap one already packed (two hits in one section) are left out. Tokens are
counted with the embedding model's tokenizer (``token_counter``), else with
``indexer.chunk.estimate_tokens``, a deliberately pessimistic estimate; the
total never exceeds the budget: a passage that does not fit is left out and a
later, smaller one may still fit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.chunk import estimate_tokens
from indexer.errors import VaultSearchError

from .results import SearchResult

if TYPE_CHECKING:
    from .index import Index

ESTIMATE = "estimate"   # the counter's name when the index has no model
MIN_ROOM = 8            # tokens left below which no passage can fit


@dataclass
class Pack:
    results: list[SearchResult]
    tokens: int
    counter: str
    left_out: int        # hits whose passage did not fit
    changed: list[str]   # notes edited since they were indexed: their lines may have moved, so left out


def indexed_lines(index: Index, path: str) -> list[str] | None:
    """The note's lines, read once, when the file is still what the index
    read (its line ranges still hold); None when it changed or is gone."""
    import hashlib

    from indexer.parse import BinaryNoteError, decode_note, split_lines

    from .files import resolve_path

    row = index.conn.execute("SELECT hash FROM notes WHERE path = ?", (path,)).fetchone()
    try:
        with open(resolve_path(index.config, path), "rb") as fh:
            data = fh.read(index.config.max_file_bytes + 1)
        if row is None or hashlib.blake2b(data, digest_size=16).hexdigest() != row[0]:
            return None
        return split_lines(decode_note(data)[0])
    except (OSError, VaultSearchError, BinaryNoteError):
        return None


def counter(index: Index) -> tuple[str, Callable[[str], int]]:
    """The embedding model's token count when the index has a model, else the estimate."""
    try:
        embedder = index.writer.embedder
        model = embedder.token_counter() if embedder is not None else None
    except Exception:   # a model that cannot load still gets an answer, by estimate
        model = None
    if model is None:
        return ESTIMATE, estimate_tokens
    return model.name, model


def section(conn: sqlite3.Connection, path: str, start: int, end: int) -> tuple[int, int]:
    """The lines of the section around a chunk: the run of the note's chunks that share its heading."""
    rows = conn.execute("SELECT c.heading, c.start_line, c.end_line FROM chunks c JOIN notes n ON n.id = c.note_id "
                        "WHERE n.path = ? ORDER BY c.start_line", (path,)).fetchall()
    at = next((i for i, (_, s, e) in enumerate(rows) if s <= start <= e), None)
    if at is None:
        return start, end
    heading = rows[at][0]
    first = last = at
    while first > 0 and rows[first - 1][0] == heading:
        first -= 1
    while last + 1 < len(rows) and rows[last + 1][0] == heading:
        last += 1
    return min(rows[first][1], start), max(rows[last][2], end)


def pack(index: Index, results: list[SearchResult], budget: int) -> Pack:
    """The hits' passages within ``budget`` tokens, in rank order (see the module)."""
    name, count = counter(index)
    packed: list[SearchResult] = []
    spans: dict[str, list[tuple[int, int]]] = {}
    used = left_out = 0
    changed: list[str] = []
    for r in results:
        if budget - used < MIN_ROOM:
            left_out += 1
            continue
        lines = indexed_lines(index, r.path)
        if lines is None:
            changed.append(r.path)
            continue
        choice: str | tuple[int, int, str, int] | None = None
        for start, end in dict.fromkeys([section(index.conn, r.path, r.start_line, r.end_line),
                                         (r.start_line, r.end_line)]):
            if any(s <= end and start <= e for s, e in spans.get(r.path, ())):
                choice = "overlap"
                break
            text = "\n".join(lines[start - 1:end])
            tokens = count(text)
            if used + tokens <= budget:
                choice = (start, end, text, tokens)
                break
        if not isinstance(choice, tuple):
            left_out += choice != "overlap"
            continue
        start, end, text, tokens = choice
        r.start_line, r.end_line, r.text = start, end, text
        spans.setdefault(r.path, []).append((start, end))
        packed.append(r)
        used += tokens
    return Pack(packed, used, name, left_out, changed)
