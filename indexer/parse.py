"""Turn a note's bytes into text, frontmatter, title, tags, links and headings.

Nothing here raises on bad input: a binary file, broken YAML or invalid
UTF-8 becomes a warning on the note and the rest of it is still indexed.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import unquote

import frontmatter
import yaml

# Keys read for the note's date, in order of preference (the shared vault uses
# "date created" / "date modified", Jekyll-style notes use "date").
DATE_KEYS = ("date", "created", "date created", "created_at", "creation date",
             "updated", "date modified", "modified", "updated_at", "last_modified")
DAILY_NOTE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
DATE_VALUE_RE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2}))?")
# Any indentation: how far a fence may be indented depends on the list it sits in.
FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
# A list item's marker; the item's content starts after it (CommonMark: 1-4 spaces).
LIST_ITEM_RE = re.compile(r"^( *)([-+*]|\d{1,9}[.)])( +|$)")
INDENTED_CODE = 4   # columns of indentation (a tab is 4) that make a code block after a blank line
BACKTICK_RUN_RE = re.compile(r"`+")
# Greedy, the trailing blanks and closing hashes stripped in _heading_text: a
# lazy text before "[ \t]*$" tried every split of a run of blanks (quadratic:
# "# a", 20,000 spaces and "b" took a second in one call).
HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*))?$")
WIKILINK_RE = re.compile(r"(!?)\[\[([^\[\]|#^\n]*)(#[^\[\]|\n]*)?(?:\|([^\[\]\n]*))?\]\]")
# Obsidian tags: letters of any script, digits, _ - /, at least one non-digit;
# must follow whitespace or start a line (Obsidian's own rule) so URLs'
# "#anchors", "&#123;" entities and "[[#Heading]]" are not tags. An HTML tag
# ends a text run as a line start does (<span>#tag</span>): HTML_TAG_RE turns
# tags into spaces before INLINE_TAG_RE runs.
INLINE_TAG_RE = re.compile(r"(?:(?<=\s)|^)#((?:[\w\-/]*[^\W\d][\w\-/]*))", re.MULTILINE)
HTML_TAG_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>\n]*)?/?>")
# Markdown links, CommonMark inline form: [text](dest "title"), ![alt](dest),
# dest in <angle brackets> when it has spaces; text may hold one level of
# brackets ([![img](a.png)](Note.md)), dest one level of parentheses.
# The spaces after "(" are taken atomically (a lookahead's group, matched
# again): left free to backtrack, they and the title's and closing spaces
# could share a long run of blanks in quadratically many ways ("[x](" and
# 16,000 spaces took seconds).
MD_LINK_RE = re.compile(
    r"(?P<embed>!?)(?<!\\)\[(?P<text>(?:[^\[\]\n\\]|\\.|\[(?:[^\[\]\n\\]|\\.)*\])*)\]"
    r"\((?=(?P<gap>[ \t]*))(?P=gap)"
    r"(?P<dest><(?:[^<>\n\\]|\\.)*>|(?:[^\s()<\\]|\\.|\((?:[^\s()\\]|\\.)*\))*)"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*\)")
# Reference links: "[label]: dest" defines, [text][label], [label][] and [label] use.
MD_REF_DEF_RE = re.compile(
    r"^ {0,3}\[((?:[^\[\]\n\\]|\\.)+)\]:[ \t]*(<(?:[^<>\n\\]|\\.)*>|\S+)"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*$")
MD_REF_USE_RE = re.compile(
    r"(!?)(?<!\\)\[((?:[^\[\]\n\\]|\\.|\[(?:[^\[\]\n\\]|\\.)*\])*)\](?:\[((?:[^\[\]\n\\]|\\.)*)\])?")
URL_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")   # http:, mailto:, obsidian:, file: ...
BACKSLASH_ESCAPE_RE = re.compile(r"\\([!-/:-@\[-`{-~])")
BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    line: int  # 1-based line in the file


@dataclass(frozen=True)
class Link:
    """One ``[[wikilink]]``, ``![[embed]]``, ``[text](Note.md)`` or ``![alt](image.png)`` as written."""
    target: str      # the link path, without #subpath ("" for a link inside the same note); URL-decoded
    subpath: str     # "#Heading", "#^block-id" or ""
    alias: str       # the text after "|" (a Markdown link's text), or ""
    embed: bool      # ![[...]]
    line: int        # 1-based line in the file


@dataclass
class ParsedNote:
    path: str
    title: str
    lines: list[str]                 # every line of the file, without newlines
    body_start: int                  # 1-based line where the body (after frontmatter) starts
    metadata: dict = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)          # distinct link targets
    link_records: list[Link] = field(default_factory=list)  # every link, with its line
    headings: list[Heading] = field(default_factory=list)
    date: str | None = None          # ISO "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM"
    warnings: list[str] = field(default_factory=list)
    read_as_plain: bool = False      # its Markdown ran past the parse budget (parse_note)

    @property
    def body_is_empty(self) -> bool:
        return not any(line.strip() for line in self.lines[self.body_start - 1:])


class BinaryNoteError(ValueError):
    """The bytes are not text (a NUL byte near the start)."""


def decode_note(data: bytes) -> tuple[str, str | None]:
    """Decode a note's bytes, returning the text and a warning, if any.

    UTF-8 (with or without BOM) first; then GB18030, the superset of GBK that
    older Chinese editors write; as a last resort UTF-8 with U+FFFD for the
    bad bytes, so one stray byte does not lose a note.
    """
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise BinaryNoteError("binary file (NUL bytes), not a Markdown note")
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    try:
        text = data.decode("gb18030")
        if _han_share(text) > 0.2:
            return text, "not UTF-8; decoded as GB18030/GBK (re-save the note as UTF-8)"
    except UnicodeDecodeError:
        pass
    return (data.decode("utf-8", errors="replace"),
            f"invalid UTF-8 at byte {first_bad}; bad bytes replaced with U+FFFD")


def _han_share(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    return sum(1 for c in letters if "\u4e00" <= c <= "\u9fff") / len(letters)


LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines as editors, ``wc -l`` and agents count them: only ``\n``,
    ``\r\n`` and ``\r`` end a line (``str.splitlines`` also splits on
    U+2028, form feeds and other separators, which would shift every line
    number after them)."""
    lines = LINE_BREAK_RE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def split_frontmatter(lines: list[str]) -> tuple[str | None, int]:
    """Return the raw YAML text and the 1-based first body line.

    Frontmatter is a ``---`` first line closed by ``---`` or ``...``; an
    unclosed block is body text, as Obsidian renders it.
    """
    if not lines or lines[0].rstrip() != "---":
        return None, 1
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return "\n".join(lines[1:i]), i + 2
    return None, 1


# Reading a note's Markdown (code, headings, tags, links) has a time budget:
# past it the note is indexed as plain text (its frontmatter still read), so no
# input, however hostile, holds the writer for long. The budget grows with the
# note: these rules read 5-11 MB of ordinary notes a second (oldwinter, tasks
# docs), so it is several times what an honest note needs.
PARSE_SECONDS = 1.0
PARSE_SECONDS_PER_MB = 1.0
# A line longer than this is not read for markup (a pasted data: URI, a
# minified blob): each regex runs on one line at a time while holding the
# interpreter, so this bounds how long any one call can keep a server's other
# threads waiting, whatever the rule.
MAX_MARKUP_LINE = 20_000


class _OverBudget(Exception):
    pass


class _Budget:
    """A deadline, checked between lines (a regex cannot be stopped inside a call)."""

    def __init__(self, seconds: float):
        self.deadline = time.perf_counter() + seconds
        self.seconds = seconds

    def check(self) -> None:
        if time.perf_counter() > self.deadline:
            raise _OverBudget()


def parse_budget(text: str) -> float:
    """Seconds the Markdown of ``text`` may take to read."""
    return PARSE_SECONDS + PARSE_SECONDS_PER_MB * len(text) / 1_048_576


def parse_note(path: str, text: str, budget_s: float | None = None) -> ParsedNote:
    """Parse one note; ``path`` is vault-relative with ``/`` separators.

    Past ``budget_s`` seconds (default ``parse_budget(text)``) its Markdown is
    not read further: the note keeps its frontmatter and is indexed as plain
    text, without headings, inline tags or links, with a warning that says so.
    """
    lines = split_lines(text)
    note = ParsedNote(path=path, title="", lines=lines, body_start=1)
    raw_fm, note.body_start = split_frontmatter(lines)
    if raw_fm is not None:
        note.metadata = _load_yaml(raw_fm, note.warnings)
    meta = note.metadata
    budget = _Budget(parse_budget(text) if budget_s is None else budget_s)
    inline_tags: list[str] = []
    try:
        inline_tags = _read_markup(note, budget)
    except _OverBudget:
        note.headings, note.link_records, note.read_as_plain = [], [], True
        note.warnings.append(f"its Markdown took over {budget.seconds:.1f} s to read; indexed as plain text "
                             "(no headings, inline tags or links)")
    note.title = (_first_str(meta.get("title"))
                  or next((h.text for h in note.headings if h.level == 1 and h.text), "")
                  or PurePosixPath(path).stem)
    note.aliases = _dedupe(_str_items(meta.get("aliases", meta.get("alias"))))
    note.tags = _dedupe(
        [t.lstrip("#") for t in _str_items(meta.get("tags", meta.get("tag")), split_spaces=True)] + inline_tags)
    note.tags = [t.strip("/") for t in note.tags if t.strip("/")]
    note.links = _dedupe([link.target for link in note.link_records if link.target])
    note.date = _note_date(meta, path)
    return note


def _read_markup(note: ParsedNote, budget: _Budget) -> list[str]:
    """The body's headings and links into ``note``; returns its inline tags.
    Raises ``_OverBudget`` when the budget runs out."""
    prose_lines = _mask_code(note.lines[note.body_start - 1:], budget)
    # A pasted image (a data: URI) holds no link or tag anyone misses; other long lines are said.
    unread = [note.body_start + i for i, line in enumerate(note.lines[note.body_start - 1:])
              if len(line) > MAX_MARKUP_LINE and ";base64," not in line]
    if unread:
        note.warnings.append(f"line {unread[0]}{f' and {len(unread) - 1} more' if len(unread) > 1 else ''} "
                             f"longer than {MAX_MARKUP_LINE:,} characters: indexed as text, its links, tags "
                             "and headings not read")
    note.headings = []
    for i, line in enumerate(prose_lines):
        if line and line.lstrip(" ").startswith("#") and (m := HEADING_RE.match(line)):
            budget.check()
            note.headings.append(Heading(len(m.group(1)), _heading_text(m.group(2)), note.body_start + i))
    tags: list[str] = []
    for line in prose_lines:
        if "#" in line:
            budget.check()
            tags += INLINE_TAG_RE.findall(HTML_TAG_RE.sub(" ", line) if "<" in line else line)
    wikilinks = []
    for i, line in enumerate(prose_lines):
        if "[[" in line:
            budget.check()
            wikilinks += [(i, m.start(), Link(_link_target(m.group(2)), (m.group(3) or "").strip(),
                                              (m.group(4) or "").strip(), m.group(1) == "!", note.body_start + i))
                          for m in WIKILINK_RE.finditer(line) if _link_target(m.group(2)) or m.group(3)]
    note.link_records = [link for _, _, link in sorted(
        wikilinks + _markdown_links(prose_lines, note.body_start, budget), key=lambda found: found[:2])]
    return tags


def _link_target(raw: str) -> str:
    # Inside a table the alias bar is escaped: [[Note\|alias]].
    return raw.strip().removesuffix("\\").strip()


def _markdown_links(prose_lines: list[str], body_start: int, budget: _Budget) -> list[tuple[int, int, Link]]:
    """``[text](Note%20Name.md#Heading)`` and ``![alt](image.png)`` links (and
    reference links) as (line index, column, Link): the target URL-decoded
    but as written otherwise (``../Folder/Note.md``), so the resolver reads
    it as it reads a wikilink's path; the text is the alias. External URLs
    (any ``scheme:``) are not vault links."""
    found = []
    defs = _reference_definitions(prose_lines) if any("]:" in line for line in prose_lines) else {}
    for i, line in enumerate(prose_lines):
        if "[" not in line or "]" not in line:
            continue
        budget.check()
        taken = []   # spans of inline links, which reference uses must not reuse
        if "](" in line:
            pending = [(m, 0) for m in MD_LINK_RE.finditer(line)]
            while pending:
                m, offset = pending.pop()
                embed, text, dest = m.group("embed") == "!", m.group("text"), m.group("dest")
                start = offset + m.start()
                if (start and line[start - 1] == "\\") or (text.startswith("[") and text.endswith("]")):
                    continue   # an escaped "\[" is text; "[[Note]](x)" is a wikilink followed by "(x)"
                taken.append((start, offset + m.end()))
                if "](" in text:   # an image inside a link's text: [![cover](cover.jpg)](Book.md)
                    text_start = start + len(m.group("embed")) + 1
                    pending.extend((inner, text_start) for inner in MD_LINK_RE.finditer(text))
                if (where := _markdown_destination(dest)) is not None:
                    found.append((i, start, Link(*where, text.strip(), embed, body_start + i)))
        if defs and not MD_REF_DEF_RE.match(line):
            for m in MD_REF_USE_RE.finditer(line):
                if any(s <= m.start() < e for s, e in taken) or (m.start() and line[m.start() - 1] == "\\") \
                        or line[m.end():m.end() + 1] in ("(", ":"):
                    continue
                label = m.group(3) if m.group(3) else m.group(2)
                if (where := defs.get(_reference_label(label))) is not None:
                    found.append((i, m.start(), Link(*where, m.group(2).strip(), m.group(1) == "!", body_start + i)))
    return found


def _reference_definitions(prose_lines: list[str]) -> dict[str, tuple[str, str]]:
    defs: dict[str, tuple[str, str] | None] = {}
    for line in prose_lines:
        m = MD_REF_DEF_RE.match(line) if "]:" in line else None
        if m and not m.group(1).startswith("^"):   # "[^1]: text" is a footnote
            defs.setdefault(_reference_label(m.group(1)), _markdown_destination(m.group(2)))   # the first wins
    return {label: where for label, where in defs.items() if where is not None}


def _reference_label(label: str) -> str:
    return " ".join(label.split()).casefold()


def _markdown_destination(dest: str) -> tuple[str, str] | None:
    """(target, subpath) of a link destination; None for an external URL or
    an empty one."""
    dest = dest.strip()
    if dest.startswith("<") and dest.endswith(">"):
        dest = dest[1:-1].strip()
    if not dest or URL_SCHEME_RE.match(dest) or dest.startswith("//"):
        return None
    path, _, fragment = dest.partition("#")   # split before decoding: "%23" is part of a name
    target = unquote(BACKSLASH_ESCAPE_RE.sub(r"\1", path)).strip()
    subpath = unquote(BACKSLASH_ESCAPE_RE.sub(r"\1", fragment)).strip()
    if not target and not subpath:
        return None
    return target, f"#{subpath}" if subpath else ""


# Frontmatter is a few fields; anything bigger or deeper is an attack or an
# accident (YAML aliases can expand 300 bytes into gigabytes).
MAX_FRONTMATTER_CHARS = 64 * 1024
MAX_FRONTMATTER_NODES = 10_000
MAX_FRONTMATTER_DEPTH = 20


class _TooBig(ValueError):
    pass


def _load_yaml(raw: str, warnings: list[str]) -> dict:
    if len(raw) > MAX_FRONTMATTER_CHARS:
        warnings.append(f"frontmatter larger than {MAX_FRONTMATTER_CHARS // 1024} KB; ignored")
        return {}
    try:
        data = frontmatter.YAMLHandler().load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at frontmatter line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        warnings.append(f"malformed YAML frontmatter{where} ({problem}); indexed the body without it")
        return {}
    except Exception as exc:  # PyYAML can raise plain ValueErrors on odd scalars
        warnings.append(f"unreadable YAML frontmatter ({exc.__class__.__name__}); indexed the body without it")
        return {}
    if data is None:
        return {}
    if not isinstance(data, dict):
        warnings.append("frontmatter is not a key: value mapping; ignored")
        return {}
    budget = [MAX_FRONTMATTER_NODES]
    try:
        return {str(k): _json_safe(v, budget, 1) for k, v in data.items()}
    except (_TooBig, RecursionError):
        warnings.append(f"frontmatter nests deeper than {MAX_FRONTMATTER_DEPTH} levels or expands to more than "
                        f"{MAX_FRONTMATTER_NODES} values (YAML aliases?); ignored")
        return {}


def _json_safe(value, budget: list[int], depth: int):
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_FRONTMATTER_DEPTH:
        raise _TooBig()
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _json_safe(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v, budget, depth + 1) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _mask_code(lines: list[str], budget: _Budget) -> list[str]:
    """Blank out code, keeping line numbers: fenced blocks, indented blocks
    (4 columns more than the list item they sit in, after a blank line; an
    indented line right after text continues that paragraph) and inline code.
    A line longer than MAX_MARKUP_LINE is blanked too (it is not read for
    markup), after it has counted as text for the blocks around it."""
    out, fence = [], None
    lists: list[int] = []    # content columns of the open list items, innermost last
    in_indented, may_indent = False, True   # a block starts the body, or follows a blank line or a heading
    for line in lines:
        budget.check()
        expanded = line.expandtabs(4) if "\t" in line else line
        text = expanded.lstrip(" ")
        blank, indent = not text.strip(), len(expanded) - len(text)
        code_indent = (lists[-1] if lists else 0) + INDENTED_CODE
        m = FENCE_RE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and indent < code_indent \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
                may_indent = True
            out.append("")
            continue
        if in_indented and (blank or indent >= code_indent):
            out.append("")
            continue
        in_indented = False
        if not blank and indent >= code_indent and may_indent:
            in_indented = True
            out.append("")
            continue
        if m and indent < code_indent:
            fence = m.group(1)
            out.append("")
            continue
        if not blank:
            item = LIST_ITEM_RE.match(expanded)
            if item or may_indent or HEADING_RE.match(line):   # text left of an item's content closes it
                while lists and lists[-1] > indent:
                    lists.pop()
            if item:   # content starts 1-4 spaces after the marker (more: it starts 1 after, as code)
                gap = len(item.group(3))
                lists.append(len(item.group(1)) + len(item.group(2)) + (gap if 1 <= gap <= 4 and
                                                                          expanded[item.end():].strip() else 1))
        may_indent = blank or bool(HEADING_RE.match(line))
        # A line too long to read for markup still counts as text for the blocks around it.
        out.append(_mask_inline_code(line) if len(line) <= MAX_MARKUP_LINE else "")
    return out


def _mask_inline_code(line: str) -> str:
    """Turn each code span (a backtick run closed by a run of the same
    length: `code`, ``a ` b``) into a space."""
    if "`" not in line:
        return line
    runs = [(m.start(), m.end()) for m in BACKTICK_RUN_RE.finditer(line)]
    next_same: list[int | None] = [None] * len(runs)
    last_of: dict[int, int] = {}
    for k in range(len(runs) - 1, -1, -1):   # the next run of the same length, in one pass
        width = runs[k][1] - runs[k][0]
        next_same[k] = last_of.get(width)
        last_of[width] = k
    parts: list[str] = []
    done, k = 0, 0
    while k < len(runs):
        close = next_same[k]
        if close is None:
            k += 1
            continue
        parts.append(line[done:runs[k][0]] + " ")
        done, k = runs[close][1], close + 1
    return "".join(parts) + line[done:]


def _heading_text(raw: str | None) -> str:
    """A heading's text without its closing hashes (``## Title ##``: a run of
    ``#`` after a blank, or all there is)."""
    text = (raw or "").rstrip(" \t")
    bare = text.rstrip("#")
    if bare != text and (not bare or bare[-1] in " \t"):
        text = bare
    return text.strip()


def _first_str(value) -> str:
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None or isinstance(value, (dict, bool)):
        return ""
    return str(value).strip()


def _str_items(value, split_spaces: bool = False) -> list[str]:
    """A frontmatter list or string as clean strings (tags may be "a, b" or "a b")."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if item is None or isinstance(item, (dict, list)):
            continue
        parts = re.split(r"[,\s]+" if split_spaces else r",", str(item))
        out.extend(p.strip() for p in parts if p.strip())
    return out


def _dedupe(items: list[str]) -> list[str]:
    seen, out = set(), []
    for item in items:
        key = item.casefold()
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _note_date(meta: dict, path: str) -> str | None:
    for key in DATE_KEYS:
        value = meta.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None and (iso := normalize_date(str(value))):
            return iso
    m = DAILY_NOTE_RE.match(PurePosixPath(path).stem)
    if m and (iso := normalize_date(PurePosixPath(path).stem)):
        return iso
    return None


STRICT_DATE_RE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2}))?\s*$")


def normalize_date(value: str, strict: bool = False) -> str | None:
    """``2026-11-1 9:30`` → ``2026-11-01T09:30``; None when it is not a date.

    Frontmatter values may carry more after the date (seconds, a zone);
    ``strict`` (for what a user types) accepts nothing else.
    """
    m = (STRICT_DATE_RE if strict else DATE_VALUE_RE).match(value)
    if not m:
        return None
    y, mo, d, hh, mm = m.groups()
    try:
        day = dt.date(int(y), int(mo), int(d))
    except ValueError:
        return None
    if hh is None:
        return day.isoformat()
    if int(hh) > 23 or int(mm) > 59:
        return None if strict else day.isoformat()
    return f"{day.isoformat()}T{int(hh):02d}:{mm}"
