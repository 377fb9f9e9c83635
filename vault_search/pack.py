"""A context pack: a search's hits as the passages that fit a budget of tokens.

An agent asks for what fits its window instead of ten snippets and ten
``get`` calls: the hits' passages, in rank order, each a whole section of its
note (the lines under one heading) when that fits, else the hit's own chunk
(a section, or a run of whole paragraphs of a long one: never cut
mid-sentence), as the file's own lines with ``path:start-end``. Passages that
overlap one already packed (two hits in one section) are left out. Tokens are
counted with the embedding model's tokenizer (``token_counter``), else with
``indexer.chunk.estimate_tokens``, a deliberately pessimistic estimate; the
total never exceeds the budget: a passage that does not fit is left out and a
later, smaller one may still fit. Then the room still left goes to the best
hit left out: its chunk's first whole lines that fit, up to the end of a
sentence or a block (a paragraph's when that keeps at least half of them),
marked ``trimmed``, in its rank's place (``trimmed_lines``). Each note is read (and checked against the
index) once per pack, and a passage far larger than the room left is refused
from its first lines (``tokens_within``): a 9.5 MB section took 1.1 s to
count whole, for a budget of a few hundred tokens.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.chunk import estimate_tokens
from indexer.errors import VaultSearchError

from .results import SearchResult
from .snippet import has_words

if TYPE_CHECKING:
    from .reader import Reader

ESTIMATE = "estimate"   # the counter's name when the index has no model
MIN_ROOM = 8            # tokens left below which no passage can fit
# A passage's first lines never count more tokens than the whole of it: one
# longer than this many characters per token of room is first counted on
# about that many characters, and refused when they alone exceed the room
# (else counted whole). Tokens average 3-5 characters (e5-xlmr: 136,000
# characters of English, 26,000 tokens), so such a passage seldom fits.
PROBE_CHARS_PER_TOKEN = 16
# A trimmed passage ends where a sentence or a block does, never inside a
# hard-wrapped sentence: before a blank line, before a line that starts a
# block (a heading, a list item, a quote, a table row, a fence), or after a
# line that closes a sentence. It ends at a paragraph's end (a blank line
# after it) rather than at another such line when that keeps at least
# PARAGRAPH_SHARE of the lines that fit. Never inside a code fence (a passage
# an agent pastes must not swallow what follows into code), nor between a
# table's header row and the row of dashes under it.
PARAGRAPH_SHARE = 0.5
FENCE_RE = re.compile(r"\s*(?:```|~~~)")
TABLE_RULE_RE = re.compile(r"\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
BLOCK_START_RE = re.compile(r"\s*(?:#{1,6}(?:\s|$)|[-*+]\s|\d{1,9}[.)]\s|>|\||```|~~~)")
SENTENCE_END = tuple(".。!?！？…:：;；)）」』”\"'`|*")


@dataclass
class Pack:
    results: list[SearchResult]
    tokens: int
    counter: str
    left_out: int        # hits whose passage did not fit
    changed: list[str]   # notes edited since they were indexed: their lines may have moved, so left out
    trimmed: str | None = None   # the passage trimmed to fit, "path:start-end of start-END" (END: its chunk's)


def note_bytes(reader: Reader, path: str) -> bytes:
    """The note's bytes as the indexer reads them (at most max_file_bytes + 1)."""
    from .files import resolve_path

    with open(resolve_path(reader.config, path), "rb") as fh:
        return fh.read(reader.config.max_file_bytes + 1)


def indexed_lines(reader: Reader, path: str) -> list[str] | None:
    """The note's lines when the file is still what the index read (its line
    ranges still hold); None when it changed or is gone."""
    import hashlib

    from indexer.parse import BinaryNoteError, decode_note, split_lines
    from indexer.sync import PLAIN_MARK

    row = reader.conn.execute("SELECT hash FROM notes WHERE path = ?", (path,)).fetchone()
    if row is None:
        return None
    try:
        data = note_bytes(reader, path)
        # A note indexed as plain text carries a mark on its stored hash (indexer.sync.PLAIN_MARK).
        if hashlib.blake2b(data, digest_size=16).hexdigest() != row[0].partition(PLAIN_MARK)[0]:
            return None
        text = decode_note(data)[0]
        if "\r" in text:
            return split_lines(text)
        lines = text.split("\n")   # split_lines' answer without \r, five times faster (80 ms for 9.5 MB)
        if lines[-1] == "":
            lines.pop()
        return lines
    except (OSError, VaultSearchError, BinaryNoteError):
        return None


def counter(reader: Reader) -> tuple[str, Callable[[str], int]]:
    """The embedding model's token count when the index has a model, else the estimate."""
    try:
        embedder = reader.writer.embedder
        model = embedder.token_counter() if embedder is not None else None
    except Exception:   # a model that cannot load still gets an answer, by estimate
        model = None
    if model is None:
        return ESTIMATE, estimate_tokens
    return model.name, model


def note_chunks(conn: sqlite3.Connection, path: str) -> list[tuple[str, int, int]]:
    """(heading, start_line, end_line) of each of the note's chunks, in line order."""
    return conn.execute("SELECT c.heading, c.start_line, c.end_line FROM chunks c JOIN notes n ON n.id = c.note_id "
                        "WHERE n.path = ? ORDER BY c.start_line", (path,)).fetchall()


def section(rows: list[tuple[str, int, int]], start: int, end: int) -> tuple[int, int]:
    """The lines of the section around a hit: the run of the note's chunks
    (``note_chunks``) that share the heading of the chunk at its first line,
    through the run that shares the heading of the chunk at its last (a
    stub's hit runs into the chunk after it: search/rows.py)."""
    at = next((i for i, (_, s, e) in enumerate(rows) if s <= start <= e), None)
    if at is None:
        return start, end
    to = max((i for i, (_, s, _) in enumerate(rows) if s <= end), default=at)
    first, last = at, max(at, to)
    while first > 0 and rows[first - 1][0] == rows[at][0]:
        first -= 1
    while last + 1 < len(rows) and rows[last + 1][0] == rows[last][0]:
        last += 1
    return min(rows[first][1], start), max(rows[last][2], end)


def tokens_within(lines: list[str], room: int, count: Callable[[str], int]) -> int | None:
    """The tokens of ``lines`` (joined) when they are at most ``room``, else None;
    a passage much longer than the room is refused on its first lines alone."""
    probe, size = (room + 1) * PROBE_CHARS_PER_TOKEN, 0
    for i, line in enumerate(lines):
        size += len(line) + 1
        if size > probe:
            if count("\n".join(lines[:i + 1])) > room:
                return None
            break
    tokens = count("\n".join(lines))
    return tokens if tokens <= room else None


def trimmed_lines(lines: list[str], room: int, count: Callable[[str], int]) -> tuple[int, int] | None:
    """(how many of ``lines`` to keep, their tokens): the most whole lines
    from the first that fit in ``room`` tokens and end a sentence or a block,
    cut back to a paragraph's end when that keeps ``PARAGRAPH_SHARE`` of them
    (see ``PARAGRAPH_SHARE``); None when no such lines say anything past a
    heading (a heading alone is no passage)."""
    low, high = 0, len(lines)   # lines[:low] fit; lines[:high + 1] do not
    while low < high:
        mid = (low + high + 1) // 2
        if tokens_within(lines[:mid], room, count) is None:
            high = mid - 1
        else:
            low = mid
    if low == len(lines):
        return low, count("\n".join(lines))
    fenced, inside = [False], False      # fenced[k]: lines[:k] leave a fence open
    for line in lines[:low]:
        inside ^= bool(FENCE_RE.match(line))
        fenced.append(inside)
    cuttable = [not fenced[k] and not TABLE_RULE_RE.match(lines[k]) for k in range(low + 1)]
    paragraphs = [k for k in range(1, low + 1) if cuttable[k] and not lines[k].strip() and lines[k - 1].strip()]
    ends = [k for k in range(1, low + 1) if cuttable[k] and lines[k - 1].strip() and (
        not lines[k].strip() or BLOCK_START_RE.match(lines[k]) or lines[k - 1].rstrip().endswith(SENTENCE_END))]
    for keep in ([paragraphs[-1]] if paragraphs and paragraphs[-1] >= PARAGRAPH_SHARE * low else []) + ends[::-1]:
        if has_words("\n".join(lines[:keep])):
            return keep, count("\n".join(lines[:keep]))
    return None


def pack(reader: Reader, results: list[SearchResult], budget: int) -> Pack:
    """The hits' passages within ``budget`` tokens, in rank order (see the module)."""
    name, count = counter(reader)
    packed: list[tuple[int, SearchResult]] = []   # (rank, hit)
    misfits: list[tuple[int, SearchResult]] = []  # hits left out for their size, the trimmed passage's candidates
    spans: dict[str, list[tuple[int, int]]] = {}
    used = left_out = 0
    changed: list[str] = []
    # Within one pack each note is read and its chunks looked up once, however
    # many hits share them.
    notes: dict[str, list[str] | None] = {}
    chunks: dict[str, list[tuple[str, int, int]]] = {}
    for rank, r in enumerate(results):
        if budget - used < MIN_ROOM:
            left_out += 1
            continue
        if r.path not in notes:
            notes[r.path] = indexed_lines(reader, r.path)
            if notes[r.path] is None:
                changed.append(r.path)
        lines = notes[r.path]
        if lines is None:
            continue
        if r.path not in chunks:
            chunks[r.path] = note_chunks(reader.conn, r.path)
        choice: str | tuple[int, int, int] | None = None
        for start, end in dict.fromkeys([section(chunks[r.path], r.start_line, r.end_line),
                                         (r.start_line, r.end_line)]):
            if any(s <= end and start <= e for s, e in spans.get(r.path, ())):
                choice = "overlap"
                break
            tokens = tokens_within(lines[start - 1:end], budget - used, count)
            if tokens is not None:
                choice = (start, end, tokens)
                break
        if not isinstance(choice, tuple):
            if choice != "overlap":
                left_out += 1
                misfits.append((rank, r))
            continue
        start, end, tokens = choice
        r.start_line, r.end_line, r.text, r.trimmed = start, end, "\n".join(lines[start - 1:end]), False
        spans.setdefault(r.path, []).append((start, end))
        packed.append((rank, r))
        used += tokens
    trimmed = trim_one(misfits, notes, spans, budget - used, count) if budget - used >= MIN_ROOM else None
    if trimmed:
        packed.append(trimmed[:2])
        used += trimmed[2]
        left_out -= 1
    return Pack([r for _, r in sorted(packed, key=lambda p: p[0])], used, name, left_out, changed,
                trimmed[3] if trimmed else None)


def trim_one(misfits: list[tuple[int, SearchResult]], notes: dict[str, list[str] | None],
             spans: dict[str, list[tuple[int, int]]], room: int,
             count: Callable[[str], int]) -> tuple[int, SearchResult, int, str] | None:
    """The best hit left out for its size (``misfits``, in rank order) whose
    chunk's first lines fit in ``room`` (``trimmed_lines``), trimmed to them:
    (its rank, the hit, its tokens, "path:start-end of start-END"); None when
    none does."""
    for rank, r in misfits:
        lines = notes[r.path]
        assert lines is not None   # a note that changed was never tried
        if any(s <= r.end_line and r.start_line <= e for s, e in spans.get(r.path, ())):
            continue   # a passage packed after it took its lines
        cut = trimmed_lines(lines[r.start_line - 1:r.end_line], room, count)
        if cut is None:
            continue
        keep, tokens = cut
        where = f"{r.path}:{r.start_line}-{r.start_line + keep - 1} of {r.start_line}-{r.end_line}"
        r.end_line = r.start_line + keep - 1
        r.text, r.trimmed = "\n".join(lines[r.start_line - 1:r.end_line]), True
        return rank, r, tokens, where
    return None
