"""Result types shared by the Python API, ``--json``, HTTP and MCP.

JSON is ``to_dict()`` of these dataclasses, so the field names cannot drift
apart between the faces. The field set is a contract (see DESIGN.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace


def known_fields(cls, data: dict) -> dict:
    """``data`` without the keys ``cls`` has no field for: a client reads the
    answer of a newer server, which may carry fields added since."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


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
    related: bool = False           # one link away from a hit, not a hit itself (asked for: ``options.related``)
    related_to: str | None = None   # with related: the hit it links to or from
    # How the note was found: "keyword", "vector", "both" (each retriever's
    # list had it) or "name" (the query is its title, alias or file name);
    # None for a related note. An agent weighs a "vector"-only hit as a guess.
    match: str | None = None
    # How much of the query the note answers, 0-1, on a scale that means the
    # same for every query (docs/ranking.md, "Relevance"): the largest of the IDF-weighted
    # share of the query's words in the matched chunk, the same counting
    # translations (x0.8), and the calibrated vector evidence; 1 for a name
    # match. A search's minimum relevance cuts on it. None for a related note.
    relevance: float | None = None
    # The note's whole text, when asked for (in the JSON only when set).
    text: str | None = None
    # In a context pack (in the JSON only then): true when ``text`` is the
    # first lines of the hit's passage, cut to fit the budget (pack.py).
    trimmed: bool | None = None
    # From a server of several vaults: the vault's name (in the JSON only when set).
    vault: str | None = None
    # The description .vault-search.toml gives the most specific folder the
    # note lies in, else the vault's ([contexts]): what an agent is reading.
    # In the JSON only when set.
    context: str | None = None


@dataclass
class ExplainRank:
    """One result's way to its place (``Explain.ranks``)."""
    path: str
    ranks: dict[str, int]            # each list that voted for it -> its 1-based rank there
    scores: dict[str, float]         # ... -> its score there (BM25, cosine, name likeness, ...)
    fused_score: float | None
    rerank_score: float | None       # the judge's 0-10, when reranked
    blended_score: float | None
    # In the JSON only when set:
    name_match: str | None = None    # "title", "alias" or "file": the query is this note's name
    date: str | None = None          # with recency_factor: the date a recency half-life aged it by ...
    modified: str | None = None      # ... else, for a note without a date, its file's modification time
    recency_factor: float | None = None
    relevance: float | None = None       # as in the result, with its parts below
    evidence: dict | None = None         # keyword, translated, vector, name: each 0-1
    boost_value: float | None = None     # a frontmatter boost: the field's value used (clamped; None: missing,
    #                                      counted 0.5)
    boost_factor: float | None = None    # ... and 0.5 + 0.5 x the value
    # The two lists every mode has, also as the columns explain's rows had
    # before ``ranks`` and ``scores``; always in the JSON (null when absent).
    LEGACY = ("fts_rank", "fts_score", "vector_rank", "vector_score")

    def __getattr__(self, name: str) -> float | None:
        """``fts_rank``, ``title_rank``, ``vector_score``, ...: a list's rank or
        score by the name explain's rows had before ``ranks`` and ``scores``."""
        lists, _, what = name.rpartition("_")
        if lists and what in ("rank", "score") and not name.startswith("_"):
            return (self.ranks if what == "rank" else self.scores).get(lists)
        raise AttributeError(name)

    def to_dict(self) -> dict:
        data = asdict(self)
        for key in ("name_match", "date", "modified", "recency_factor", "relevance", "evidence", "boost_value",
                    "boost_factor"):
            if data[key] is None:
                del data[key]
        return {**data, **{key: getattr(self, key) for key in self.LEGACY}}

    @classmethod
    def from_dict(cls, data: dict) -> ExplainRank:
        """The inverse of ``to_dict``; an older server's row (per-list
        ``X_rank`` and ``X_score`` fields, no ``ranks``) is read into the maps."""
        if "ranks" not in data:
            old = {k: v for k, v in data.items() if k.endswith(("_rank", "_score")) and v is not None
                   and k not in ("fused_score", "rerank_score", "blended_score")}
            data = {**data, "ranks": {k[:-5]: v for k, v in old.items() if k.endswith("_rank")},
                    "scores": {k[:-6]: v for k, v in old.items() if k.endswith("_score")}}
        return cls(**known_fields(cls, data))


@dataclass
class Explain:
    """How a search ranked what it found (asked for: ``options.explain``; search/explain.py)."""
    fts_match: str                   # the FTS5 MATCH expression ("" : nothing to search for)
    terms: list[str]
    filters: str | None              # the filters' SQL, None without filters
    rrf_k: float
    weights: dict[str, float]        # each list that voted -> the weight it got in the fusion
    term_coverage: float | None      # hybrid: the share of query words the index knows
    name_matches: dict[str, str]     # path -> "title", "alias" or "file"
    ranks: list[ExplainRank] = field(default_factory=list)
    translated_match: str | None = None   # the translated words' MATCH, when the query was translated
    translated_text: str | None = None    # ... and what was embedded beside the query for the vector list
    foreign_query: bool = False            # hybrid: a question in a script the notes mostly are not
    notes_han_share: float | None = None   # hybrid: the notes' share of Han (Reader.han_share)
    untranslated_coverage: float | None = None   # a translated foreign question: the coverage of its
    #                                              words without a translation (what its keyword list weighs by)
    # The settings the boosts ran with, by their option's name (search/boosts.py
    # says which): in the JSON beside the fields above.
    boost_settings: dict[str, float | None] = field(default_factory=dict)
    # The query's operators (syntax.py): the text ranked, phrases, exclusions,
    # folders and tags; None when it had none. Each unknown word searched as
    # an indexed one (spelling.py): word -> "prefix" or "typo" and the word.
    syntax: dict | None = None
    corrections: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("ranks", "boost_settings")},
                **self.boost_settings, "ranks": [r.to_dict() for r in self.ranks]}

    @classmethod
    def from_dict(cls, data: dict) -> "Explain":
        names = {f.name for f in fields(cls)}
        return cls(**{**known_fields(cls, data), "ranks": [ExplainRank.from_dict(r) for r in data.get("ranks", [])],
                      "boost_settings": {k: v for k, v in data.items() if k not in names
                                         and (v is None or isinstance(v, (int, float)))}})


@dataclass
class SearchResponse:
    query: str
    mode: str
    took_ms: float
    warnings: list[str] = field(default_factory=list)
    results: list[SearchResult] = field(default_factory=list)
    # Not part of the JSON contract unless asked for (``options.explain``).
    explain: Explain | None = None
    terms: list[str] = field(default_factory=list)
    # With a token budget (in the JSON only then): the passages' tokens, the
    # budget, and what counted them (the model's tokenizer, or "estimate").
    tokens: int | None = None
    token_budget: int | None = None
    token_counter: str | None = None
    # The hybrid's default cut kept only its best guesses: no note answers the
    # query clearly (a warning says so; the pipe formats print none of them).
    # In the JSON only when true.
    guesses: bool = False
    # In the JSON only when some: each query word no chunk holds -> the
    # indexed word searched instead (sortng -> sorting, grou -> group).
    corrections: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        data = asdict(replace(self, explain=None))
        del data["terms"], data["explain"]
        if self.tokens is None:
            del data["tokens"], data["token_budget"], data["token_counter"]
        if not self.guesses:
            del data["guesses"]
        if not self.corrections:
            del data["corrections"]
        for result in data["results"]:
            for key in ("text", "trimmed", "vault", "context"):
                if result[key] is None:
                    del result[key]
        if self.explain is not None:
            data["explain"] = self.explain.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict, terms: list[str] | None = None) -> "SearchResponse":
        """The inverse of ``to_dict`` (the thin client renders a server's answer)."""
        results = [SearchResult(**{**known_fields(SearchResult, r),
                                   "scores": Scores(**known_fields(Scores, r["scores"]))})
                   for r in data.get("results", [])]
        explain = Explain.from_dict(data["explain"]) if data.get("explain") else None
        return cls(query=data["query"], mode=data["mode"], took_ms=data["took_ms"],
                   warnings=list(data.get("warnings", [])), results=results, explain=explain,
                   terms=terms or (explain.terms if explain else []), tokens=data.get("tokens"),
                   token_budget=data.get("token_budget"), token_counter=data.get("token_counter"),
                   corrections=dict(data.get("corrections") or {}), guesses=bool(data.get("guesses")))


@dataclass
class NoteText:
    path: str
    start_line: int
    end_line: int
    total_lines: int
    text: str
    # True when ``text`` stops before the lines asked for: the note is over
    # max_file_mb, the most one get returns; ``warnings`` says where to read on.
    truncated: bool = False
    warnings: list[str] = field(default_factory=list)

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
    embedding_now: bool = False       # an embedding pass runs now: embedded_chunks grows as it publishes
    links: int = 0                    # [[wikilinks]] to notes
    unresolved_links: int = 0         # ... that point at no note
    server: ServerState | None = None  # a resident face's own state (HTTP /status, MCP status)
    settings_file: str | None = None   # the vault's .vault-search.toml; None: there is none

    def to_dict(self) -> dict:
        data = asdict(replace(self, server=None))
        del data["server"]
        if self.server is not None:
            data["server"] = self.server.to_dict()
        return data


@dataclass
class ServerState:
    """What a resident process (serve, mcp) adds to the status."""
    started: float                    # time.time() at start
    watching: bool
    syncs: int
    pending_changes: int
    last_error: str | None
    requests: int | None = None       # HTTP only: requests served so far

    def to_dict(self) -> dict:
        data = asdict(self)
        if data["requests"] is None:
            del data["requests"]
        return data


@dataclass
class Outlink:
    line: int
    target: str                       # as written: [[target#subpath|alias]]
    subpath: str
    alias: str
    embed: bool                       # ![[...]]
    kind: str                         # "note", "attachment", "self", ...
    path: str | None                  # the note it resolves to; None: unresolved (or not a note)


@dataclass
class Backlink:
    path: str                         # the note that links here
    line: int
    target: str
    subpath: str
    alias: str
    embed: bool


@dataclass
class NoteLinks:
    """A note's links (``links --json``, HTTP /links, MCP links)."""
    path: str
    outlinks: list[Outlink] = field(default_factory=list)
    backlinks: list[Backlink] = field(default_factory=list)

    @property
    def unresolved(self) -> list[Outlink]:
        """Links to a note that is not there."""
        return [link for link in self.outlinks if link.kind == "note" and link.path is None]

    def to_dict(self) -> dict:
        return {"path": self.path, "outlinks": [asdict(o) for o in self.outlinks],
                "backlinks": [asdict(b) for b in self.backlinks],
                "unresolved": [asdict(o) for o in self.unresolved]}


@dataclass(frozen=True)
class TagCount:
    tag: str
    notes: int                        # notes carrying it or a tag nested under it


@dataclass
class TagCounts:
    """Every tag, most used first (``tags --json``, HTTP /tags)."""
    tags: list[TagCount] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CutNote:
    """A note ``multi-get`` left out, or cut short, to stay under its size cap."""
    path: str
    bytes: int       # the whole note's size (0: it could not be read)
    reason: str      # "left out: over max_bytes (N)", "cut at line L of T: max_lines (N)" or "...: max_bytes (N)"


@dataclass
class MissingNote:
    """A pattern of ``multi-get`` that named no note (or several by one name): the others are still read."""
    pattern: str
    error: str       # the one-line error a ``get`` of it gives


@dataclass
class NoteTexts:
    """``multi-get``: notes in path order, within ``max_bytes`` in all."""
    notes: list[NoteText] = field(default_factory=list)
    cut: list[CutNote] = field(default_factory=list)
    bytes: int = 0
    max_bytes: int = 0
    missing: list[MissingNote] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FolderEntry:
    path: str        # vault-relative, ending in "/"
    notes: int       # notes under it, at any depth
    latest: str      # the newest date under it (YYYY-MM-DD): a note's date, else its modification time


@dataclass
class NoteEntry:
    path: str
    title: str
    date: str | None      # the note's date (frontmatter, file name), else None
    modified: str         # the file's modification time, YYYY-MM-DD HH:MM (local)
    tags: list[str]
    bytes: int


@dataclass
class FolderListing:
    """``ls FOLDER``: its sub-folders (with counts) and its own notes."""
    folder: str
    folders: list[FolderEntry] = field(default_factory=list)
    notes: list[NoteEntry] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TimelineEntry:
    at: str          # YYYY-MM-DDTHH:MM
    title: str       # the entry's heading without its time
    path: str
    start_line: int
    end_line: int


@dataclass
class Timeline:
    """``ls FOLDER --timeline``: a folder's daily-log entries, oldest first."""
    folder: str
    entries: list[TimelineEntry] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)
