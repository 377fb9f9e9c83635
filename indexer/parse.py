"""Turn a note's bytes into text, frontmatter, title, tags, links and headings.

Nothing here raises on bad input: a binary file, broken YAML or invalid
UTF-8 becomes a warning on the note and the rest of it is still indexed.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import frontmatter
import yaml

# Keys read for the note's date, in order of preference (the shared vault uses
# "date created" / "date modified", Jekyll-style notes use "date").
DATE_KEYS = ("date", "created", "date created", "created_at", "creation date",
             "updated", "date modified", "modified", "updated_at", "last_modified")
DAILY_NOTE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
DATE_VALUE_RE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2}))?")
FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
CLOSING_HASHES_RE = re.compile(r"(?:^|[ \t]+)#+$")
H1_RE = re.compile(r"^#[ \t]+(.+?)[ \t#]*$")
WIKILINK_RE = re.compile(r"(!?)\[\[([^\[\]|#^\n]*)(#[^\[\]|\n]*)?(?:\|([^\[\]\n]*))?\]\]")
# Obsidian tags: letters of any script, digits, _ - /, at least one non-digit;
# must follow whitespace or start a line so URLs' "#anchors" are not tags.
INLINE_TAG_RE = re.compile(r"(?:(?<=\s)|^)#((?:[\w\-/]*[^\W\d][\w\-/]*))", re.MULTILINE)
INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    line: int  # 1-based line in the file


@dataclass(frozen=True)
class Link:
    """One ``[[wikilink]]`` or ``![[embed]]`` as written."""
    target: str      # the link path, without #subpath ("" for a link inside the same note)
    subpath: str     # "#Heading", "#^block-id" or ""
    alias: str       # the text after "|", or ""
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


def parse_note(path: str, text: str) -> ParsedNote:
    """Parse one note; ``path`` is vault-relative with ``/`` separators."""
    lines = split_lines(text)
    note = ParsedNote(path=path, title="", lines=lines, body_start=1)
    raw_fm, note.body_start = split_frontmatter(lines)
    if raw_fm is not None:
        note.metadata = _load_yaml(raw_fm, note.warnings)

    body_lines = lines[note.body_start - 1:]
    prose_lines = _mask_code(body_lines)
    note.headings = [
        Heading(len(m.group(1)), _heading_text(m.group(2)), note.body_start + i)
        for i, line in enumerate(prose_lines) if line and (m := HEADING_RE.match(line))
    ]
    prose = "\n".join(prose_lines)

    meta = note.metadata
    note.title = (_first_str(meta.get("title"))
                  or next((h.text for h in note.headings if h.level == 1 and h.text), "")
                  or PurePosixPath(path).stem)
    note.aliases = _dedupe(_str_items(meta.get("aliases", meta.get("alias"))))
    note.tags = _dedupe(
        [t.lstrip("#") for t in _str_items(meta.get("tags", meta.get("tag")), split_spaces=True)]
        + INLINE_TAG_RE.findall(prose))
    note.tags = [t.strip("/") for t in note.tags if t.strip("/")]
    note.link_records = [
        Link(_link_target(m.group(2)), (m.group(3) or "").strip(), (m.group(4) or "").strip(), m.group(1) == "!",
             note.body_start + i)
        for i, line in enumerate(prose_lines) if "[[" in line for m in WIKILINK_RE.finditer(line)
        if _link_target(m.group(2)) or m.group(3)]
    note.links = _dedupe([link.target for link in note.link_records if link.target])
    note.date = _note_date(meta, path)
    return note


def _link_target(raw: str) -> str:
    # Inside a table the alias bar is escaped: [[Note\|alias]].
    return raw.strip().removesuffix("\\").strip()


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


def _mask_code(lines: list[str]) -> list[str]:
    """Blank out fenced code blocks and inline code, keeping line numbers."""
    out, fence = [], None
    for line in lines:
        m = FENCE_RE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
            out.append("")
        else:
            out.append(INLINE_CODE_RE.sub(" ", line))
    return out


def _heading_text(raw: str | None) -> str:
    return CLOSING_HASHES_RE.sub("", raw or "").strip()


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
    out = []
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
