"""Search filters (tags, folder, dates, frontmatter fields, staleness) and
the SQL that applies them."""

from __future__ import annotations

import calendar
import datetime as dt
import difflib
import re
import sqlite3
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from indexer.config import VaultConfig
from indexer.errors import UsageValueError
from indexer.parse import normalize_date

if TYPE_CHECKING:
    from .options import SearchOptions

# A note's date: its frontmatter date, else the daily-log file name (both
# stored in notes.date at index time), else none. Never the file's mtime: a
# copy or a sync sets every mtime to today, and the JSON's `date` says null.
NOTE_DATE_SQL = "n.date"
# A chunk's date for --after/--before: a daily-log entry's own date and time,
# else its note's date; NULL (no date) passes no date filter.
CHUNK_DATE_SQL = f"coalesce(c.at, {NOTE_DATE_SQL})"
# The file's modification time, in the same form: what ``ls`` shows and what
# a recency half-life ages an undated note by.
MODIFIED_SQL = "strftime('%Y-%m-%dT%H:%M', n.mtime_ns / 1000000000, 'unixepoch', 'localtime')"
WHERE_RE = re.compile(r"^\s*([^=<>!]+?)\s*(>=|<=|!=|=|>|<)\s*(.*?)\s*$", re.S)
NUMBER_RE = re.compile(r"^-?\d+(\.\d+)?$")


@dataclass(frozen=True)
class Condition:
    """One ``--where`` test on a frontmatter field."""
    key: str
    op: str       # = != > < >= <=
    value: str
    kind: str     # "date", "number", "bool" or "text"

    @classmethod
    def parse(cls, text: str) -> "Condition":
        m = WHERE_RE.match(clean_text(text or ""))
        if not m or not m.group(1).strip():
            raise FilterError(f"--where expects KEY=VALUE (or KEY>VALUE, KEY<VALUE, KEY!=VALUE), got {text!r}")
        key, op, value = m.group(1).strip(), m.group(2), m.group(3)
        if '"' in key or "\x00" in key:
            raise FilterError(f"--where: a field name cannot contain quotes or NUL: {key!r}")
        date = normalize_date(value, strict=True)
        if date:
            return cls(key, op, date, "date")
        if NUMBER_RE.match(value):
            return cls(key, op, value, "number")
        if value.casefold() in ("true", "false") and op in ("=", "!="):
            return cls(key, op, value.casefold(), "bool")
        if op not in ("=", "!="):
            raise FilterError(f"--where {key}{op}: compare with > or < against a date or a number, got {value!r}")
        return cls(key, op, value, "text")

    def sql(self) -> tuple[str, list]:
        path = f'$."{self.key}"'
        # json_each walks a list's items, or yields a scalar once: a list
        # field matches when any item does.
        params: list[str | float]
        if self.kind == "bool":
            test = "je.type = ?"
            params = [self.value]
        elif self.kind == "text":
            test = "je.type NOT IN ('object', 'array') AND lower(CAST(je.value AS TEXT)) = lower(?)"
            params = [self.value]
        elif self.kind == "date":
            op = "=" if self.op == "!=" else self.op
            # Compared at the coarser precision, as --after/--before are.
            test = (f"substr(vs_date(je.value), 1, min(length(vs_date(je.value)), length(?))) {op} "
                    f"substr(?, 1, min(length(vs_date(je.value)), length(?)))")
            params = [self.value, self.value, self.value]
        else:
            op = "=" if self.op == "!=" else self.op
            test = f"je.type IN ('integer', 'real') AND je.value {op} ?"
            params = [float(self.value)]
        exists = f"EXISTS (SELECT 1 FROM json_each(n.metadata, ?) je WHERE {test})"
        if self.op == "!=":
            return f"NOT {exists}", [path, *params]
        return exists, [path, *params]


@dataclass(frozen=True)
class Staleness:
    """When a note counts as stale (settings from .vault-search.toml)."""
    field: str = "last_verified"
    days: float = 30
    expiry_field: str = "valid_until"

    @classmethod
    def from_config(cls, config: VaultConfig) -> "Staleness":
        return cls(config.stale_field, config.stale_days, config.expiry_field)

    def cutoffs(self, today: dt.date | None = None) -> tuple[str, str]:
        """(verified before this is stale, valid until before this is stale)."""
        today = today or dt.date.today()
        return (today - dt.timedelta(days=self.days)).isoformat(), today.isoformat()

    def sql(self) -> tuple[str, list]:
        """A condition true for stale notes ``n`` (the one definition: the
        ``stale`` flag of results and ``--exclude-stale`` both use it)."""
        verified, expired = self.cutoffs()
        return ("(vs_date(json_extract(n.metadata, ?)) < ? OR "
                "substr(vs_date(json_extract(n.metadata, ?)), 1, 10) < ?)",
                [f'$."{self.field}"', verified, f'$."{self.expiry_field}"', expired])


class FilterError(UsageValueError):
    """A filter value the user gave cannot be understood (exit 2)."""


@dataclass(frozen=True)
class SearchFilters:
    tags: tuple[str, ...] = ()
    path: str | None = None
    after: str | None = None    # inclusive, "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM"
    before: str | None = None   # inclusive at the given precision
    where: tuple[Condition, ...] = ()
    staleness: Staleness | None = None   # leave out the notes stale by this rule
    # From the query's own operators (syntax.py): more folders (each must hold
    # the note), FTS5 phrases the chunk must hold, and one MATCH expression no
    # chunk of the note may hold.
    folders: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()
    excluded: str | None = None

    @classmethod
    def build(cls, tags=(), path=None, after=None, before=None, where=(),
              staleness: Staleness | None = None) -> "SearchFilters":
        tags = [clean_text(t) for t in tags]
        path = clean_text(path) if path else path
        clean_tags = tuple(t.strip().lstrip("#").strip("/").casefold() for t in tags if t and t.strip("#/ "))
        folder = None
        if path:
            folder = path.replace("\\", "/").strip()
            while folder.startswith("./"):
                folder = folder[2:]
            folder = folder.strip("/") or None
        if isinstance(where, str):
            where = [where]
        conditions = tuple(Condition.parse(w) for w in where or () if w is not None)
        return cls(clean_tags, folder, _date_arg("--after", after), _date_arg("--before", before),
                   conditions, staleness)

    @classmethod
    def of(cls, options: SearchOptions, config: VaultConfig) -> SearchFilters:
        """A search's filters: its tags, folder, frontmatter conditions and
        dates (--today and --last are where the dates start: they stand for
        --after), and with --exclude-stale the vault's staleness rule."""
        after, before = options.after, options.before
        if options.today or options.last:
            if after or (options.today and options.last):
                raise UsageValueError("--today, --last and --after each set where the dates start; give one")
            if options.last and not RELATIVE_RE.match(options.last.strip().casefold()):
                raise UsageValueError(f"--last takes an age like 7d, 2w, 3m or 1y, got {options.last!r}")
            after = "today" if options.today else options.last
            before = before or ("today" if options.today else None)
        return cls.build(options.tags, options.path, after, before, options.where,
                         Staleness.from_config(config) if options.exclude_stale else None)

    def narrowed(self, tags=(), paths=(), phrases=(), excluded: str | None = None) -> SearchFilters:
        """These filters and the query's own (``syntax.QuerySyntax``): its
        tags and folders as --tag and --path read them, and the FTS5 MATCH
        expressions of its phrases and exclusions; all of them hold at once."""
        more = SearchFilters.build(tags=tags)
        folders = tuple(f for f in (SearchFilters.build(path=p).path for p in paths) if f)
        return replace(self, tags=tuple(dict.fromkeys((*self.tags, *more.tags))),
                       folders=tuple(dict.fromkeys(folders)), phrases=tuple(phrases), excluded=excluded)

    def sql(self) -> tuple[str, list]:
        """A WHERE fragment over notes ``n`` and chunks ``c``, and its parameters."""
        where: list[str] = []
        params: list[str | int] = []
        for tag in self.tags:
            # A tag matches itself and its nested tags: "project" finds "project/alpha".
            where.append("EXISTS (SELECT 1 FROM note_tags nt WHERE nt.note_id = n.id "
                         "AND (nt.tag = ? OR nt.tag LIKE ? ESCAPE '\\'))")
            params += [tag, _like_escape(tag) + "/%"]
        for folder in (self.path, *self.folders) if self.path else self.folders:
            # substr, not LIKE: LIKE ignores ASCII case, and Notes/ and notes/
            # are two folders on most file systems.
            where.append("(n.path = ? OR substr(n.path, 1, ?) = ?)")
            params += [folder, len(folder) + 1, folder + "/"]
        if self.phrases:
            # The note holds every phrase (each may be in another section),
            # and the chunk shown holds one of them.
            where.append("c.id IN (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?)")
            params.append(" OR ".join(self.phrases))
            for phrase in self.phrases if len(self.phrases) > 1 else ():
                where.append("n.id IN (SELECT x.note_id FROM chunks x WHERE x.id IN "
                             "(SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?))")
                params.append(phrase)
        if self.excluded:
            # The whole note goes: a result "without the word" holds it nowhere.
            where.append("n.id NOT IN (SELECT x.note_id FROM chunks x WHERE x.id IN "
                         "(SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?))")
            params.append(self.excluded)
        # Compared at the coarser of the two precisions, so a note dated by
        # day counts as that whole day (after 09:30 that day includes it).
        if self.after:
            where.append(f"{CHUNK_DATE_SQL} >= substr(?, 1, length({CHUNK_DATE_SQL}))")
            params.append(self.after)
        if self.before:
            where.append(f"substr({CHUNK_DATE_SQL}, 1, ?) <= ?")
            params += [len(self.before), self.before]
        for condition in self.where:
            sql, values = condition.sql()
            where.append(sql)
            params += values
        if self.staleness:
            sql, values = self.staleness.sql()
            where.append(f"NOT coalesce({sql}, 0)")
            params += values
        return (" AND ".join(where) or "1"), params

    def __bool__(self) -> bool:
        return bool(self.tags or self.path or self.after or self.before or self.where or self.staleness
                    or self.folders or self.phrases or self.excluded)


def filter_warnings(conn: sqlite3.Connection, filters: SearchFilters) -> list[str]:
    """What a search's filters left out that its user may not expect: a tag
    no note has, a folder the vault does not have (and the one it likely
    meant), the notes a date filter skipped for having no date, or filters
    that match no note together."""
    if not filters:
        return []
    warnings = [w for tag in filters.tags if (w := _unknown_tag(conn, tag))]
    warnings += [w for folder in (filters.path, *filters.folders) if folder and (w := _missing_folder(conn, folder))]
    if filters.after or filters.before:
        where, params = replace(filters, after=None, before=None).sql()
        undated = conn.execute(f"SELECT count(DISTINCT n.id) FROM chunks c JOIN notes n ON n.id = c.note_id "
                               f"WHERE n.date IS NULL AND {where}", params).fetchone()[0]
        if undated:
            warnings.append(f"dates: left out {undated} {'note' if undated == 1 else 'notes'} without a date (a note's "
                            "date is its frontmatter date or its YYYY-MM-DD file name, never the file's mtime)")
    where, params = filters.sql()
    if not warnings and not conn.execute(
            f"SELECT 1 FROM chunks c JOIN notes n ON n.id = c.note_id WHERE {where} LIMIT 1", params).fetchone():
        warnings.append("no note matches these filters together")
    return warnings


def _unknown_tag(conn: sqlite3.Connection, tag: str) -> str | None:
    if conn.execute("SELECT 1 FROM note_tags WHERE tag = ? OR tag LIKE ? ESCAPE '\\' LIMIT 1",
                    (tag, _like_escape(tag) + "/%")).fetchone():
        return None
    tags = [t for (t,) in conn.execute("SELECT DISTINCT tag FROM note_tags")]
    close = difflib.get_close_matches(tag, tags, n=1)
    return f"tag {tag!r}: no note has this tag" + (f" (did you mean {close[0]!r}?)" if close else "")


def _missing_folder(conn: sqlite3.Connection, folder: str) -> str | None:
    """A warning when no note is ``folder`` or lies under it, naming the
    folder it likely meant (``closest_folder``)."""
    if conn.execute("SELECT 1 FROM notes WHERE path = ? OR substr(path, 1, ?) = ? LIMIT 1",
                    (folder, len(folder) + 1, folder + "/")).fetchone():
        return None
    close = closest_folder(conn, folder)
    return f"path {folder!r}: no such folder or note in the vault" + (f" (did you mean {close!r}?)" if close else "")


def closest_folder(conn: sqlite3.Connection, folder: str) -> str | None:
    """The vault's folder that ``folder`` (which it lacks) likely means: the
    one that differs only in case, else the closest name; None when none is near."""
    folder = folder.strip("/")
    folders = {parent for (path,) in conn.execute("SELECT path FROM notes") for parent in _parents(path)}
    same = sorted(f for f in folders if f.casefold() == folder.casefold())
    close = same or difflib.get_close_matches(folder, sorted(folders), n=1)
    return close[0] if close else None


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def clean_text(text: str) -> str:
    """Lone surrogates (undecodable bytes in argv) become U+FFFD, so user
    text can always be encoded, stored and printed."""
    if not text:
        return text
    try:  # bytes from argv that were not UTF-8 arrive as U+DC80..U+DCFF
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace")


RELATIVE_RE = re.compile(r"^(\d{1,5})\s*(d|w|m|y)$")
MONTH_RE = re.compile(r"^(\d{4})(?:-(\d{1,2}))?$")


def user_date(value: str, today: dt.date | None = None) -> str | None:
    """A date as a person types it, as an ISO prefix (None: not a date):
    ``2026-11-01``, ``"2026-11-01 09:30"``, a month ``2026-11`` or a year
    ``2026`` (compared at that precision), ``today``, ``yesterday``, or an
    age: ``7d``, ``2w``, ``3m`` (months), ``1y`` before today."""
    text = value.strip().casefold()
    today = today or dt.date.today()
    if text in ("today", "yesterday"):
        return (today - dt.timedelta(days=text == "yesterday")).isoformat()
    m = RELATIVE_RE.match(text)
    if m:
        n, unit = int(m.group(1)), m.group(2)
        if unit in "dw":
            return (today - dt.timedelta(days=n * (7 if unit == "w" else 1))).isoformat()
        months = today.year * 12 + today.month - 1 - n * (12 if unit == "y" else 1)
        if months < 12:
            return None
        year, month = divmod(months, 12)
        return dt.date(year, month + 1, min(today.day, calendar.monthrange(year, month + 1)[1])).isoformat()
    m = MONTH_RE.match(text)
    if m:
        if m.group(2) is None:
            return m.group(1) if int(m.group(1)) >= 1 else None
        return f"{m.group(1)}-{int(m.group(2)):02d}" if 1 <= int(m.group(2)) <= 12 else None
    return normalize_date(value.strip(), strict=True)


def _date_arg(option: str, value: str | None) -> str | None:
    if value is None or value == "":
        return None
    iso = user_date(value)
    if iso is None:
        raise FilterError(f"{option} expects a date like 2026-11-01, '2026-11-01 09:30', 2026-11, 2026, "
                          f"today, yesterday, or an age like 7d, 2w, 3m, 1y; got {value!r}")
    return iso


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
