"""Result types shared by the Python API, ``--json``, HTTP and MCP.

JSON is ``to_dict()`` of these dataclasses, so the field names cannot drift
apart between the faces. The field set is a contract (see DESIGN.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Scores:
    fts: float | None = None
    vector: float | None = None
    rerank: float | None = None


@dataclass
class SearchResult:
    path: str
    title: str
    heading: str
    start_line: int
    end_line: int
    snippet: str
    score: float
    scores: Scores
    tags: list[str]
    stale: bool
    uri: str
    date: str | None = None         # the daily-log entry's time, else the note's frontmatter or file-name date
    related: bool = False           # added by --related: one link away from a hit, not a hit itself
    related_to: str | None = None   # with related: the hit it links to or from


@dataclass
class SearchResponse:
    query: str
    mode: str
    took_ms: float
    warnings: list[str] = field(default_factory=list)
    results: list[SearchResult] = field(default_factory=list)
    # Not part of the JSON contract unless asked for (--explain).
    explain: dict | None = None
    terms: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("terms")
        if data["explain"] is None:
            data.pop("explain")
        return data

    @classmethod
    def from_dict(cls, data: dict, terms: list[str] | None = None) -> "SearchResponse":
        """The inverse of ``to_dict`` (the thin client renders a server's answer)."""
        results = [SearchResult(**{**r, "scores": Scores(**r["scores"])}) for r in data.get("results", [])]
        return cls(query=data["query"], mode=data["mode"], took_ms=data["took_ms"],
                   warnings=list(data.get("warnings", [])), results=results, explain=data.get("explain"),
                   terms=terms or (data.get("explain") or {}).get("terms") or [])


@dataclass
class NoteText:
    path: str
    start_line: int
    end_line: int
    total_lines: int
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class IndexStatus:
    vault: str
    index_dir: str
    notes: int
    chunks: int
    empty_notes: int
    notes_with_warnings: int
    skipped_files: int
    tags: int
    dictionary_words: int
    db_bytes: int
    last_sync: dict | None
    schema_version: int
    segmenter_version: str | None
    tool_version: str
    warnings: list[dict] = field(default_factory=list)
    model: str | None = None          # embedding model spec; None: keyword only
    embedded_chunks: int = 0
    waiting_chunks: int = 0           # chunks that still need a vector
    vectors: str | None = None        # "ok (N rows)" or what is wrong with the vectors file
    links: int = 0                    # [[wikilinks]] to notes
    unresolved_links: int = 0         # ... that point at no note

    def to_dict(self) -> dict:
        return asdict(self)
