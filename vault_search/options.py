"""``SearchOptions``: every option of a search, in one frozen dataclass.

Each face builds one: the CLI from its flags (``SearchOptions(**flags)``), the
HTTP server and the MCP tool from their parameters (``from_params``), and the
thin client sends ``to_params()`` to a running server. A field's ``Param``
says how a request spells it, how it is read from text or JSON, and what an
agent is told about it, so adding an option is one field here, its flag in
cli.py and its use in the stage of the query path (vault_search/search/) that reads it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from indexer.errors import UsageValueError

MODES = ("hybrid", "fts", "vector")
MAX_LIMIT = 1000   # the CLI's -n range too
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


class UnsupportedModeError(UsageValueError):
    """A search mode this index cannot serve."""


@dataclass(frozen=True)
class Param:
    """How a request carries an option (HTTP query string or JSON body, MCP)."""
    kind: str                     # "text", "whole", "number", "flag" or "list"
    names: tuple[str, ...] = ()   # the names a request may use, the first in messages; default: the field's
    doc: str = ""                 # what the MCP tool tells an agent ("" : nothing)
    tool: bool = True             # offered by the MCP tool
    unit: str = ""                # of a number, for its error message
    bounds: tuple[int, int] | None = None   # of a whole number, inclusive; outside: refused


def _option(default: Any, kind: str, doc: str = "", **param: Any) -> Any:
    return field(default=default, metadata={"param": Param(kind, doc=doc, **param)})


@dataclass(frozen=True)
class SearchOptions:
    mode: str | None = _option(None, "text", '"hybrid" (default: keywords + meaning), "fts" (exact words, names, '
                                             'identifiers) or "vector" (meaning only).')
    limit: int = _option(10, "whole", f"how many notes, 1 to {MAX_LIMIT}.", bounds=(1, MAX_LIMIT))
    tags: Sequence[str] = _option((), "list", "notes must carry every tag (nested tags match their parent).",
                                  names=("tag", "tags"))
    path: str | None = _option(None, "text", "a folder of the vault.")
    after: str | None = _option(None, "text", 'after/before: dates (inclusive) like 2026-11-01, "2026-11-01 09:30" '
                                              "(daily-log entries carry their time), a month 2026-11 or year 2026, "
                                              "today, yesterday, or an age: 7d, 2w, 3m, 1y.")
    before: str | None = _option(None, "text", "before: the end of the date range (inclusive), in the forms of "
                                               "after.")
    today: bool = _option(False, "flag", "only notes and daily-log entries dated today.")
    last: str | None = _option(None, "text", "only the last stretch of time: an age like 7d, 2w, 3m, 1y (the same as "
                                             "after=7d).")
    where: Sequence[str] = _option((), "list", 'frontmatter conditions that must all hold, like "type=feedback" or '
                                               '"due<2026-12-01".')
    exclude_stale: bool = _option(False, "flag", "leave out notes whose last_verified is old or whose valid_until "
                                                 "has passed (results carry stale: true otherwise).")
    related: bool = _option(False, "flag", "also list notes one link away from the top hits (marked related: true).")
    recency_half_life: float | None = _option(None, "number", "days after which a note's score halves, to favour "
                                                              "recent notes.", unit="days")
    min_score: float | None = _option(None, "number", "leave out results whose relevance (0-1: how much of the query "
                                                       "a note answers, the result's relevance field) is below this. "
                                                       "Default in hybrid mode: 0.15 when some result reaches 0.4, "
                                                       "else the 3 best guesses (a warning says so); 0 otherwise.")
    boost: str | None = _option(None, "text", "a frontmatter field holding a number in 0..1 (like importance): "
                                              "each score is multiplied by 0.5 + 0.5 x it (missing: 0.5); \"none\" "
                                              "turns off the vault's default boost.")
    budget_tokens: int | None = _option(None, "whole", "return a context pack instead of snippets: the hits' whole "
                                                       "sections (or chunks) as `text`, in rank order, no more than "
                                                       "this many tokens in all (the response's `tokens`).",
                                        bounds=(1, 1_000_000))
    full: bool = _option(False, "flag", "include each note's whole text as the result's `text` (costly: prefer "
                                        "`get` on the hits' line ranges).")
    explain: bool = _option(False, "flag", tool=False)
    rerank: bool = _option(False, "flag", "let the configured LLM judge the top results (slower; only if the user "
                                          "set it up).")
    # Tuning knobs of the fusion (fusion.py), for the Python API and the
    # benchmarks; no face sends them.
    weights: Mapping[str, float] | None = None
    rrf_k: float | None = None
    depth: int | None = None

    @classmethod
    def of(cls, options: SearchOptions | None = None, **changes: Any) -> SearchOptions:
        """``options`` (default: all defaults) with ``changes`` to its fields."""
        return replace(options or cls(), **changes) if changes else (options or cls())

    def check(self) -> None:
        """Refuse a half-life that is no positive number (``_TOOL_SCHEMA``), in the
        words every face uses: the Python API's options are not read by ``from_params``.
        (The score floor is checked where it is read, ``search.relevance.min_score``.)"""
        half_life = self.recency_half_life
        if half_life is not None and not half_life > 0:
            raise UsageValueError(f"--recency-half-life must be a positive number of days, got {half_life}")

    @classmethod
    def params(cls) -> list[tuple[str, Param, Any]]:
        """(field name, Param, default) of every option a request can carry, in field order."""
        return [(f.name, f.metadata["param"], f.default) for f in fields(cls) if "param" in f.metadata]

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """Every name a request may use for an option."""
        return tuple(n for name, p, _ in cls.params() for n in p.names or (name,))

    @classmethod
    def list_param_names(cls) -> tuple[str, ...]:
        return tuple(n for name, p, _ in cls.params() if p.kind == "list" for n in p.names or (name,))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> SearchOptions:
        """The options of a request: strings (a query string) or JSON values,
        checked with the messages every face uses; other keys are ignored."""
        values: dict[str, Any] = {name: _READERS[p.kind](params, p.names or (name,), default, p)
                                  for name, p, default in cls.params()}
        return cls(**values)

    def to_params(self) -> dict[str, Any]:
        """What the thin client sends: each option under its first name;
        flags as "1" or None (``client.request`` drops None and empty values)."""
        out: dict[str, Any] = {}
        for name, p, _ in self.params():
            value = getattr(self, name)
            if p.kind == "flag":
                value = "1" if value else None
            elif p.kind == "list":
                value = list(value)
            out[(p.names or (name,))[0]] = value
        return out

    @classmethod
    def tool_parameters(cls) -> list[inspect.Parameter]:
        """The MCP tool's parameters after ``query``: one per option, each
        optional (a list, text or number defaults to None, meaning unset),
        each with its description and, in the JSON schema, its allowed values
        (``mode`` an enum, ``limit`` its bounds; a list also takes one string).
        The bounds are the schema's only: the value is checked by
        ``from_params``, so a refusal has the same words on every face."""
        from typing import Annotated, Literal

        from pydantic import Field

        out = []
        for name, p, default in cls.params():
            if not p.tool:
                continue
            kind: Any = _TOOL_TYPES[p.kind]
            extra: dict[str, Any] = {}
            if name == "mode":
                kind = Literal["hybrid", "fts", "vector"] | None
            if p.bounds:
                extra = {"minimum": p.bounds[0], "maximum": p.bounds[1]}
            extra.update(_TOOL_SCHEMA.get(name, {}))
            doc = p.doc or name
            annotation = Annotated[kind, Field(description=doc[:1].upper() + doc[1:],
                                               json_schema_extra=extra or None)]
            out.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation,
                                         default=default if p.kind in ("whole", "flag") else None))
        return out

    @classmethod
    def tool_help(cls) -> str:
        """What the MCP tool tells an agent about the options, one sentence
        each ("name: ..."; a doc may start with its own label)."""
        return " ".join(p.doc if p.doc.startswith(name) else f"{name}: {p.doc}"
                        for name, p, _ in cls.params() if p.tool and p.doc)


# What the JSON schema says of a number beyond its type (checked by ``SearchOptions.check``).
_TOOL_SCHEMA = {"min_score": {"minimum": 0, "maximum": 1}, "recency_half_life": {"exclusiveMinimum": 0}}
_TOOL_TYPES = {"text": str | None, "whole": int, "number": float | None, "flag": bool,
               "list": list[str] | str | None}


# "--recency-half-life" in a library message is "recency_half_life" to an agent.
_FLAG_RE = re.compile(r"--([a-z][a-z-]*)")


def agent_words(message: str, names: set[str] | None = None) -> str:
    """A library message with each CLI flag it names (``--after``) written as
    the request parameter an agent passes (``after``): the search options'
    names, and ``names``."""
    known = {name for name, _, _ in SearchOptions.params()} | (names or set())
    return _FLAG_RE.sub(lambda m: m.group(1).replace("-", "_") if m.group(1).replace("-", "_") in known
                        else m.group(0), message)


# -- reading a request's values: query-string text or JSON ----------------------

def first_value(params: Mapping[str, Any], *names: str) -> Any:
    """The value under the first of ``names`` present (a list's first item)."""
    for name in names:
        value = params.get(name)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            return value
    return None


def read_text(params: Mapping[str, Any], *names: str) -> str | None:
    value = first_value(params, *names)
    if value is None:
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise UsageValueError(f"{names[0]} must be text")
    return str(value)


def read_int(params: Mapping[str, Any], name: str, default: int | None) -> int | None:
    value = first_value(params, name)
    if value in (None, ""):
        return default
    try:
        number = int(str(value))
    except ValueError:
        raise UsageValueError(f"{name} must be a whole number") from None
    if not -10**9 < number < 10**9:
        raise UsageValueError(f"{name} is out of range")
    return number


def read_flag(params: Mapping[str, Any], name: str) -> bool:
    """true/false, 1/0, yes/no, on/off in any case (or JSON's own); anything else is refused."""
    value = first_value(params, name)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS:
        return value.strip().lower() in TRUE_WORDS
    raise UsageValueError(f"{name} must be true or false (or 1/0, yes/no, on/off), got {str(value)[:40]!r}")


def read_list(params: Mapping[str, Any], *names: str) -> list[str]:
    value: Any = next((params[n] for n in names if n in params), [])
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageValueError(f"{names[0]} must be a string or a list of strings")
    return value


def read_whole(params: Mapping[str, Any], name: str, default: int | None,
               bounds: tuple[int, int] | None) -> int | None:
    """A whole number; outside ``bounds`` refused with the same words on every face."""
    number = read_int(params, name, default)
    if bounds and number is not None and not bounds[0] <= number <= bounds[1]:
        raise UsageValueError(f"{name} must be between {bounds[0]} and {bounds[1]}")
    return number


def read_number(params: Mapping[str, Any], name: str, unit: str = "") -> float | None:
    value = read_text(params, name)
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        raise UsageValueError(f"{name} must be a number" + (f" of {unit}" if unit else "")) from None


_READERS = {
    "text": lambda params, names, default, p: read_text(params, *names) or default,
    "whole": lambda params, names, default, p: read_whole(params, names[0], default, p.bounds),
    "number": lambda params, names, default, p: read_number(params, names[0], p.unit),
    "flag": lambda params, names, default, p: read_flag(params, names[0]),
    "list": lambda params, names, default, p: read_list(params, *names),
}
