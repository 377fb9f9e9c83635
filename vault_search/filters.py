"""Search filters (tags, folder, dates) and the SQL that applies them."""

from __future__ import annotations

from dataclasses import dataclass

from indexer.errors import UsageValueError
from indexer.parse import normalize_date

# A note's date for --after/--before: its frontmatter date, else the daily-log
# file name (both stored in notes.date at index time), else its mtime.
NOTE_DATE_SQL = ("coalesce(n.date, strftime('%Y-%m-%dT%H:%M', n.mtime_ns / 1000000000, "
                 "'unixepoch', 'localtime'))")


class FilterError(UsageValueError):
    """A filter value the user gave cannot be understood (exit 2)."""


@dataclass(frozen=True)
class SearchFilters:
    tags: tuple[str, ...] = ()
    path: str | None = None
    after: str | None = None    # inclusive, "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM"
    before: str | None = None   # inclusive at the given precision

    @classmethod
    def build(cls, tags=(), path=None, after=None, before=None) -> "SearchFilters":
        tags = [clean_text(t) for t in tags]
        path = clean_text(path) if path else path
        clean_tags = tuple(t.strip().lstrip("#").strip("/").casefold() for t in tags if t and t.strip("#/ "))
        folder = None
        if path:
            folder = path.replace("\\", "/").strip()
            while folder.startswith("./"):
                folder = folder[2:]
            folder = folder.strip("/") or None
        return cls(clean_tags, folder, _date_arg("--after", after), _date_arg("--before", before))

    def sql(self) -> tuple[str, list]:
        """A WHERE fragment over notes ``n`` and its parameters."""
        where, params = [], []
        for tag in self.tags:
            # A tag matches itself and its nested tags: "project" finds "project/alpha".
            where.append("EXISTS (SELECT 1 FROM note_tags nt WHERE nt.note_id = n.id "
                         "AND (nt.tag = ? OR nt.tag LIKE ? ESCAPE '\\'))")
            params += [tag, _like_escape(tag) + "/%"]
        if self.path:
            # substr, not LIKE: LIKE ignores ASCII case, and Notes/ and notes/
            # are two folders on most file systems.
            where.append("(n.path = ? OR substr(n.path, 1, ?) = ?)")
            params += [self.path, len(self.path) + 1, self.path + "/"]
        # Compared at the coarser of the two precisions, so a note dated by
        # day counts as that whole day (after 09:30 that day includes it).
        if self.after:
            where.append(f"{NOTE_DATE_SQL} >= substr(?, 1, length({NOTE_DATE_SQL}))")
            params.append(self.after)
        if self.before:
            where.append(f"substr({NOTE_DATE_SQL}, 1, ?) <= ?")
            params += [len(self.before), self.before]
        return (" AND ".join(where) or "1"), params

    def __bool__(self) -> bool:
        return bool(self.tags or self.path or self.after or self.before)


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


def _date_arg(option: str, value: str | None) -> str | None:
    if value is None or value == "":
        return None
    iso = normalize_date(value, strict=True)
    if iso is None:
        raise FilterError(f"{option} expects a date like 2026-11-01 or '2026-11-01 09:30', got {value!r}")
    return iso


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
