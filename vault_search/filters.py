"""Search filters (tags, folder, dates, frontmatter fields, staleness) and
the SQL that applies them."""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from indexer.config import VaultConfig
from indexer.errors import UsageValueError
from indexer.parse import normalize_date

if TYPE_CHECKING:
    from .options import SearchOptions

# A note's date: its frontmatter date, else the daily-log file name (both
# stored in notes.date at index time), else its mtime.
NOTE_DATE_SQL = ("coalesce(n.date, strftime('%Y-%m-%dT%H:%M', n.mtime_ns / 1000000000, "
                 "'unixepoch', 'localtime'))")
# A chunk's date for --after/--before: a daily-log entry's own date and time,
# else its note's date.
CHUNK_DATE_SQL = f"coalesce(c.at, {NOTE_DATE_SQL})"
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
            where.append("c.id IN (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?)")
            params.append(" AND ".join(self.phrases))
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
