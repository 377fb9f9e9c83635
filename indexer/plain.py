"""Markdown as Obsidian's reading view shows it, as plain text.

    reading_text("> [!tip] Use **dates**\\n> See [[Dates|due dates]] <!-- x -->")
    -> "Use dates\\nSee due dates"

One function for two readers: the embedder (markup is noise to a model: a
table of ``| `x` | Idea |`` rows sat near every query) and the snippet a
person or agent reads. The output keeps one line per input line, so a line
range still points at the note; what the reading view hides (comments, tag
markup, link targets, heading hashes, callout and table syntax, emphasis
marks, footnote references, block ids) is gone; what it shows stays, tags
included (``#tag``), since a tag is text a reader sees. Code (spans and
fenced blocks) is shown as it is written: no rule here reads inside it.
Any string is safe: the rules run in time about linear in the text, however
hostile (a line of a million unmatched ``*_[`` marks).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

# Comments: HTML's and Obsidian's (``%% ... %%``). Either may span lines, and
# one left open hides the rest of the note, as in Obsidian; inside code they
# are text.
COMMENT_RE = re.compile(r"<!--|%%")
COMMENT_END = {"<!--": "-->", "%%": "%%"}
BACKTICKS_RE = re.compile(r"`+")
# A fence is closed by a run of the same mark at least as long, and nothing
# after it; a backtick fence's info string holds no backtick.
FENCE_RE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
FENCE_CLOSE_RE = re.compile(r"^\s*(`{3,}|~{3,})\s*$")
# Raw HTML as CommonMark reads it (so ``a < b`` and ``x <3`` stay text). The
# alternatives never overlap, so no input makes these backtrack for long.
_ATTRIBUTE = r"""\s+[A-Za-z_:][\w.:-]*(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
HTML_TAG_RE = re.compile(rf"<(?:([A-Za-z][A-Za-z0-9-]*)(?:{_ATTRIBUTE})*\s*/?|/([A-Za-z][A-Za-z0-9-]*)\s*)>")
HTML_TAG_START_RE = re.compile(r"<[A-Za-z][A-Za-z0-9-]*(?:\s[^<>`]*)?$")
TAG_LINES = 8          # a tag whose attributes go on past this many lines is left as text
# Tags that sit inside a word (``wo<b>rd</b>``) go without a trace; others
# (``<br>``, ``<div>``, ``<td>``) part words.
INLINE_TAGS = frozenset("a abbr b bdi bdo cite code data del dfn em font i ins kbd mark q s samp small span strong "
                        "sub sup time u var".split())
HEADING_RE = re.compile(r"^\s{0,3}#{1,6}(?:\s+|$)")
CALLOUT_RE = re.compile(r"^\[!([^\]]+)\][+-]?\s*")
QUOTE_RE = re.compile(r"^(?:\s{0,3}>\s?)+")
LIST_RE = re.compile(r"^(\s*)(?:[-*+]|\d{1,9}[.)])(?:\s+|$)(?:\[[^\]]\](?:\s+|$))?")
RULE_RE = re.compile(r"^\s{0,3}(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,})$")
SETEXT_RE = re.compile(r"^\s{0,3}=+\s*$")
TABLE_SEPARATOR_RE = re.compile(r"^\s*(?:\|\s*)?:?-+:?\s*(?:\|\s*:?-+:?\s*)*(?:\|\s*)?$")
TABLE_PIPE_RE = re.compile(r"(?<!\\)\|")
FOOTNOTE_DEF_RE = re.compile(r"^\[\^[^\]\s]+\]:\s*")
# ``[label]: url "title"``: defines a link target; the reading view shows nothing.
REF_DEF_RE = re.compile(r"""^\[(?!\^)[^\[\]]+\]:\s*<?\S+>?(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?\s*$""")
EMBED_RE = re.compile(r"!\[\[([^\[\]|#^\n]*)(#[^\[\]|\n]*)?(?:\|([^\[\]\n]*))?\]\]")
WIKILINK_RE = re.compile(r"\[\[([^\[\]|#^\n]*)(#[^\[\]|\n]*)?(?:\|([^\[\]\n]*))?\]\]")
IMAGE_RE = re.compile(r"!\[([^\[\]\n]*)\]\([^()\n]*(?:\([^()\n]*\)[^()\n]*)*\)")
MD_LINK_RE = re.compile(r"\[([^\[\]\n]+)\]\([^()\n]*(?:\([^()\n]*\)[^()\n]*)*\)")
REF_LINK_RE = re.compile(r"\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")
AUTOLINK_RE = re.compile(r"<((?:https?|mailto|obsidian):[^<>\s]+|[\w.+-]+@[A-Za-z0-9.-]+)>")
BARE_URL_RE = re.compile(r"\b(?:https?|obsidian)://[^\s<>()\[\]]+")
FOOTNOTE_REF_RE = re.compile(r"\[\^[^\]\s\[]+\]")   # no "[" in a label: a run of "[^" is linear
BLOCK_ID_RE = re.compile(r"(?:^|\s)\^[A-Za-z0-9-]+\s*$")
# Backslash escapes (every ASCII punctuation mark but ``|``, which tables and
# wikilinks read first).
ESCAPE_RE = re.compile(r"\\([!-/:-@\[-`{~}])")
ENTITY_RE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# Text set aside (code, escaped marks, URLs) while the rules below run; the
# input's NULs are replaced first, so no note can fake one.
HELD_RE = re.compile("\x00([0-9]+)\x00")
# Emphasis: the marks go, the words stay. Underscores only at word edges
# (snake_case stays), as CommonMark reads them. Each span ends at the next
# run of its own mark, so a line full of unmatched marks costs linear time.
STRONG_STAR_RE = re.compile(r"\*\*(?=\S)((?:(?!\*\*).)+?)(?<=\S)\*\*")
STRONG_UNDERSCORE_RE = re.compile(r"(?<![^\W_])__(?=\S)((?:(?!__).)+?)(?<=\S)__(?![^\W_])")
EM_STAR_RE = re.compile(r"(?<![*\w])\*(?=[^\s*])([^*]+?)(?<=[^\s*])\*(?![*\w])")
EM_UNDERSCORE_RE = re.compile(r"(?<!\w)_(?=[^\s_])((?:[^_]|(?<=[^\W_])_(?=[^\W_]))+?)(?<=[^\s_])_(?!\w)")
STRIKE_RE = re.compile(r"~~(?=\S)((?:(?!~~).)+?)(?<=\S)~~")
MARK_RE = re.compile(r"==(?=\S)((?:(?!==).)+?)(?<=\S)==")
SPACES_RE = re.compile(r"\s+")
# Files an embed shows as a picture, a player or a viewer, not as text.
ATTACHMENT_RE = re.compile(r"\.(?:png|jpe?g|gif|bmp|svg|webp|avif|heic|tiff?|mp[34]|m4a|wav|ogg|flac|webm|mov|mkv|"
                           r"pdf|canvas|excalidraw)$", re.IGNORECASE)


def _link_text(target: str, subpath: str | None, alias: str | None) -> str:
    """What Obsidian shows for ``[[target#subpath|alias]]``."""
    if alias and alias.strip():
        return alias.strip()
    target = target.strip().rstrip("\\").rsplit("/", 1)[-1]   # [[Note\|]]: a table's escaped pipe
    if target.lower().endswith(".md"):
        target = target[:-3]
    sub = (subpath or "").lstrip("#").replace("#", " > ").lstrip("^").strip()
    if target and sub:
        return f"{target} > {sub}"
    return target or sub


def _embed_text(m: re.Match) -> str:
    target = m.group(1) or ""
    if ATTACHMENT_RE.search(target.strip()):
        return ""
    return _link_text(target, m.group(2), m.group(3))


def _code_spans(line: str) -> list[tuple[int, int, int]]:
    """(start, end, length of its backtick runs) of each code span in
    ``line``: a run of backticks up to the next run of the same length
    (CommonMark); a run with no partner is text. Linear in the line, however
    many backticks it holds."""
    runs = [(m.start(), m.end()) for m in BACKTICKS_RE.finditer(line)]
    partner = [-1] * len(runs)
    last: dict[int, int] = {}
    for i in range(len(runs) - 1, -1, -1):
        size = runs[i][1] - runs[i][0]
        partner[i] = last.get(size, -1)
        last[size] = i
    spans, i = [], 0
    while i < len(runs):
        j = partner[i]
        if j < 0 or (runs[i][0] and line[runs[i][0] - 1] == "\\"):   # \` opens nothing
            i += 1
            continue
        spans.append((runs[i][0], runs[j][1], runs[i][1] - runs[i][0]))
        i = j + 1
    return spans


def _without_comments(line: str) -> tuple[str, str | None]:
    """``line`` without its comments (those inside code stay), and the end
    mark still awaited when the last one goes on past the line."""
    if "<!--" not in line and "%%" not in line:
        return line, None
    spans = _code_spans(line) if "`" in line else []
    out, pos, k = [], 0, 0
    for m in COMMENT_RE.finditer(line):
        if m.start() < pos or (m.start() and line[m.start() - 1] == "\\"):   # \<!-- opens nothing
            continue
        while k < len(spans) and spans[k][1] <= m.start():
            k += 1
        if k < len(spans) and spans[k][0] <= m.start():
            continue
        out.append(line[pos:m.start()])
        end_mark = COMMENT_END[m.group()]
        end = line.find(end_mark, m.end())
        if end < 0:
            return "".join(out), end_mark
        pos = end + len(end_mark)
    out.append(line[pos:])
    return "".join(out), None


def _tag_end(lines: list[str], i: int, start: str, quoted: bool) -> tuple[int, int] | None:
    """(line, column) just past an HTML tag that begins at the end of line
    ``i`` with ``start`` and closes on one of the next few lines, or None."""
    parts = [start]
    for j in range(i + 1, min(len(lines), i + 1 + TAG_LINES)):
        skip = 0
        if quoted and (q := QUOTE_RE.match(lines[j])):
            skip = q.end()
        part = lines[j][skip:]
        if not part.strip():
            return None
        parts.append(part)
        if ">" in part:       # the tag ends here or it is no tag
            joined = "\n".join(parts)
            m = HTML_TAG_RE.match(joined)
            return (j, skip + max(0, m.end() - (len(joined) - len(part)))) if m else None
        if "<" in part:
            return None
    return None


def _tag_gap(m: re.Match) -> str:
    return "" if (m.group(1) or m.group(2)).lower() in INLINE_TAGS else " "


def _inline(line: str) -> str:
    """One line's inline markup as the reading view shows it."""
    held: list[str] = []

    def hold(text: str) -> str:
        held.append(text)
        return f"\x00{len(held) - 1}\x00"

    def restore(text: str) -> str:
        return HELD_RE.sub(lambda m: held[int(m.group(1))] if int(m.group(1)) < len(held) else "", text)

    if "`" in line:
        # Code is shown literally: set it aside so that no rule below touches it.
        pieces, pos = [], 0
        for start, end, ticks in _code_spans(line):
            pieces += [line[pos:start], hold(line[start + ticks:end - ticks])]
            pos = end
        line = "".join(pieces) + line[pos:]
    if "\\" in line:
        line = ESCAPE_RE.sub(lambda m: hold(m.group(1)), line)
    if "<" in line:
        line = AUTOLINK_RE.sub(lambda m: hold(restore(m.group(1))), line)
        line = HTML_TAG_RE.sub(_tag_gap, line)
    if "://" in line:
        line = BARE_URL_RE.sub(lambda m: hold(restore(m.group())), line)
    if "[" in line:
        line = EMBED_RE.sub(_embed_text, line)
        line = WIKILINK_RE.sub(lambda m: _link_text(m.group(1), m.group(2), m.group(3)), line)
        line = IMAGE_RE.sub(r"\1", line)
        line = MD_LINK_RE.sub(r"\1", line)
        line = REF_LINK_RE.sub(r"\1", line)
        line = FOOTNOTE_REF_RE.sub("", line)
    if "^" in line:
        line = BLOCK_ID_RE.sub("", line)
    if "*" in line:
        line = STRONG_STAR_RE.sub(r"\1", line)
    if "_" in line:
        line = STRONG_UNDERSCORE_RE.sub(r"\1", line)
    if "*" in line:
        line = EM_STAR_RE.sub(r"\1", line)
    if "_" in line:
        line = EM_UNDERSCORE_RE.sub(r"\1", line)
    if "~~" in line:
        line = STRIKE_RE.sub(r"\1", line)
    if "==" in line:
        line = MARK_RE.sub(r"\1", line)
    if "&" in line:
        line = ENTITY_RE.sub(lambda m: html.unescape(m.group()), line)
    line = line.replace("\\|", "|")
    if held:
        line = restore(restore(line))       # a held URL may hold an escaped mark
    return line


def _table_cells(line: str) -> list[str]:
    """A table row's cells, split at its unescaped pipes (``\\|`` is a pipe
    inside a cell, also inside a wikilink or code)."""
    row = line.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [cell.replace("\\|", "|").strip() for cell in TABLE_PIPE_RE.split(row)]


def _table_row(line: str) -> str:
    """A table row as its cells' text, `` · `` between them; a separator row shows nothing."""
    if _is_table_separator(line):
        return ""
    cells = (SPACES_RE.sub(" ", _inline(cell)).strip() for cell in _table_cells(line))
    return " · ".join(cell for cell in cells if cell)


def _is_table_separator(line: str) -> bool:
    return "|" in line and "-" in line and bool(TABLE_SEPARATOR_RE.match(line))


def reading_text(text: str) -> str:
    """``text`` (Markdown) as plain text, one output line per input line
    (``\\n`` ends a line; lines that show nothing are left empty). Never
    raises, and runs in time about linear in the text."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")     # as CommonMark does; it also keeps _inline's marks unique
    blocks = _Blocks(text.split("\n"))
    for i, line in enumerate(blocks.lines):
        blocks.out.append(_line_text(blocks, i, line))
    return "\n".join(blocks.out)


@dataclass(slots=True)
class _Blocks:
    """What ``reading_text`` carries from line to line."""

    lines: list[str]
    out: list[str] = field(default_factory=list)        # the text of each line so far
    fence: tuple[str, int, bool] | None = None           # (mark, run length, opened inside a quote)
    comment_end: str | None = None                       # the end mark of a comment still open
    resume: tuple[int, int] | None = None                # (line, column) just past a tag begun above
    table_separator: int = -1                            # the separator row of the table being read
    in_table: bool = False


def _line_text(blocks: _Blocks, i: int, line: str) -> str:
    """Line ``i`` as plain text: inside a code block, the rest of a comment
    or tag begun above, or a block of its own (``_block_text``)."""
    if blocks.fence:
        code = _fenced(blocks, line)
        if code is not None:
            return code
    inside = False            # the line goes on from a comment or tag: no block markup
    if blocks.resume:
        if blocks.resume[0] > i:
            return ""
        line, blocks.resume, inside = line[blocks.resume[1]:], None, True
    if blocks.comment_end:
        end = line.find(blocks.comment_end)
        if end < 0:
            return ""
        line, blocks.comment_end, inside = line[end + len(blocks.comment_end):], None, True
    quoted = None if inside else QUOTE_RE.match(line)
    if quoted:
        line = line[quoted.end():]
    opening = None if inside else FENCE_RE.match(line)
    if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
        blocks.fence = (opening.group(1)[0], len(opening.group(1)), bool(quoted))
        blocks.in_table = False
        return ""
    line, blocks.comment_end = _without_comments(line)
    if "<" in line and not blocks.comment_end:
        start = line.rfind("<")
        if HTML_TAG_START_RE.match(line, start):
            blocks.resume = _tag_end(blocks.lines, i, line[start:], bool(quoted))
            if blocks.resume:
                line = line[:start]
    fallback = ""
    if quoted and (callout := CALLOUT_RE.match(line)):
        # A callout's title, or its type when it has none.
        line = line[callout.end():]
        fallback = callout.group(1).split("|")[0].strip().capitalize()
    if inside:
        return SPACES_RE.sub(" ", _inline(line)).strip()
    return _block_text(blocks, i, line, bool(quoted), fallback)


def _fenced(blocks: _Blocks, line: str) -> str | None:
    """A line inside a fenced code block, shown as it is (its closing fence
    as nothing); None when a quote that held the block ended with it."""
    assert blocks.fence is not None
    mark, size, in_quote = blocks.fence
    quote = QUOTE_RE.match(line) if in_quote else None
    if in_quote and not quote:
        blocks.fence = None       # the quote ended, and the code block in it
        return None
    body = line[quote.end():] if quote else line
    close = FENCE_CLOSE_RE.match(body)
    if close and close.group(1)[0] == mark and len(close.group(1)) >= size:
        blocks.fence = None
        return ""
    return body.rstrip()


def _block_text(blocks: _Blocks, i: int, line: str, quoted: bool, fallback: str) -> str:
    """A line that starts a block: blank, a rule, a table row, or a
    paragraph, heading, list item or footnote line (``fallback`` when it
    shows nothing: a callout's type)."""
    if not line.strip():
        blocks.in_table = False
        return fallback
    if i == blocks.table_separator or RULE_RE.match(line) or (SETEXT_RE.match(line) and blocks.out and blocks.out[-1]):
        return ""
    if not blocks.in_table and "|" in line and i + 1 < len(blocks.lines):
        below = blocks.lines[i + 1]
        if quoted and (q := QUOTE_RE.match(below)):
            below = below[q.end():]
        if _is_table_separator(below) and len(_table_cells(below)) == len(_table_cells(line)):
            blocks.in_table, blocks.table_separator = True, i + 1
    row = line.strip()
    if (blocks.in_table and "|" in line) or (len(row) > 1 and row[0] == "|" and row[-1] == "|"):
        # A row, also one cut from its header (a chunk may start inside a table).
        return _table_row(line)
    blocks.in_table = False
    line = HEADING_RE.sub("", line, count=1)
    line = LIST_RE.sub("", line, count=1)
    line = FOOTNOTE_DEF_RE.sub("", line, count=1)
    if REF_DEF_RE.match(line.strip()):
        line = ""
    return SPACES_RE.sub(" ", _inline(line)).strip() or fallback
