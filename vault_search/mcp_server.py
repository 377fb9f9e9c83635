"""``vault-search mcp``: a Model Context Protocol server, on stdio or inside `serve`.

An agent whose memory is this vault gets the tools below (search, get,
multi_get, ls, links, tags, status). The server keeps the index, jieba and
the embedding model loaded for the whole session and runs the watcher, so
edits to the vault are searchable moments later. ``vault-search serve``
answers the same tools over the SDK's streamable HTTP transport at ``/mcp``
(``http_app``), so several agents share one warm process.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from pydantic import Field

from indexer import __version__
from indexer.errors import VaultSearchError

from .options import SearchOptions, agent_words
from .service import SearchService
from .vaults import VaultSet, cap_full_texts

log = logging.getLogger("vault_search.mcp")

# The search option that leaves stale notes out, by the tool's name for it
# (options.py spells the options; the instructions name this one).
STALE_OPTION = next(name for name, p, _ in SearchOptions.params() if p.kind == "flag" and "stale" in name)
INSTRUCTIONS = f"""\
Search the user's Markdown notes (an Obsidian vault; memory notes, daily logs, in Chinese and English).
Use `search` as a fallback when you do not already know which note holds a fact: it finds notes by
keywords and by meaning, across Chinese and English, and returns paths with line ranges. Then use `get`
with that path and line range to read the exact lines before relying on them. If you already know the
path or the note's name, call `get` directly; `multi_get` reads several notes (a glob or a folder) within a
size cap, `ls` lists a folder. `links` lists a note's outlinks and backlinks, to follow a topic; `tags`
lists the tags. Before writing a memory, call `similar` with its text: its verdict "near-duplicate" means
a note already says it (read it, then update it instead of writing another); "related" means link to it;
"none" means write the new note. Give `search` a token budget to get whole passages that fit your
context instead of snippets. Results marked `stale: true` were not verified recently (or have expired):
check them before trusting them, or pass {STALE_OPTION}. `status` tells how many notes are indexed and
whether the index is current."""

SEARCH_HELP = """\
Find notes by keywords and by meaning (Chinese and English). Use it when you do not know which note holds a \
fact. Returns at most `limit` results, best first, each with path, title, heading, start_line, end_line, \
snippet, score, relevance and match, and `context` where the user described the note's folder or vault \
(what kind of note you are reading); read the lines with `get` before relying on a snippet.
Scores: `relevance` (0-1) is how much of the query the note answers, on a scale that means the same for every \
query; `score` only orders one response. `match` says how a note was found: "name" (the query is its title or \
alias), "keyword", "both" (keywords and meaning) or "vector" (meaning alone: a guess, weigh it as such).
When results run out: results stop where relevance falls below the cut (an option below), so fewer than \
`limit` results (or none) means nothing else in the vault answers the query well; do not retry with a larger \
limit, rephrase or try other words. A warning says when only weak guesses were found, or chunks still wait for vectors.
Options: {options}"""



def vault_field(default: str) -> Any:
    """A tool's ``vault`` parameter's field, saying what it does when left out (``default``)."""
    return Field(description=(
        f"Which vault, by name (status lists them) or folder, when the server serves several; default: {default}."))


# What each tool does without a vault named, when the server serves several.
VaultParam = Annotated[str | None, vault_field("the only vault (with several, name one)")]
EveryVault = Annotated[str | None, vault_field("every vault, each result naming its own")]
EachVaultStatus = Annotated[str | None, vault_field("the only vault's status (with several, each vault's)")]
NamedParam = Annotated[str, Field(description="A vault-relative path as `search` returns it (.md optional), or a "
                                              "note's name or alias as a wikilink names it.")]
NoteParam = Annotated[str, Field(description="A vault-relative path as `search` returns it (.md optional), "
                                             "PATH:START-END as the text output prints it, or a note's name or "
                                             "alias as a wikilink names it.")]

def build_server(service_factory: Callable[[], SearchService | VaultSet], *, owns_service: bool = True) -> Any:
    """The MCP server over ``service_factory()``'s vault (or vaults), closed
    at the end of the session unless ``owns_service`` is False (``serve``'s own)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    state: dict[str, VaultSet] = {}

    @asynccontextmanager
    async def lifespan(server) -> AsyncIterator[dict]:
        made = service_factory()
        state["service"] = made if isinstance(made, VaultSet) else VaultSet([made])
        try:
            yield state
        finally:
            vaults = state.pop("service")
            if owns_service:
                vaults.close()

    mcp = MCPServer(name="vault-search", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)
    names = {name for name, _, _ in SearchOptions.params()} | {"path", "paths", "start", "end", "max_bytes",
                                                                "max_lines", "folder", "limit"}

    def call(fn):
        try:
            return fn(state["service"])
        except VaultSearchError as exc:   # vaults named, never their folders (the server may be serve's)
            raise ToolError(agent_words(state["service"].without_paths(str(exc)), names)) from None
        except (ValueError, TypeError) as exc:
            # A value the library could not take (HTTP's 400): the agent's
            # mistake, told in one line, never a traceback in the server's log.
            log.debug("tool call refused: %s", exc)
            raise ToolError(agent_words(str(exc), names)) from None

    _search_tool(mcp, call)
    _reading_tools(mcp, call)   # the order the tools are listed in
    _browsing_tools(mcp, call)
    _memory_tools(mcp, call)
    refuse_unknown_arguments(mcp)
    return mcp


def refuse_unknown_arguments(mcp: Any) -> None:
    """A tool call with an argument its tool does not take is refused,
    naming the closest it does take, as HTTP refuses an unknown parameter:
    the SDK would drop it, and a misspelt filter would silently search
    everything."""
    from mcp.server.mcpserver.exceptions import ToolError

    takes: dict[str, list[str]] = {}
    call_tool = mcp.call_tool

    async def checked(name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if not takes:
            takes.update({t.name: list(t.input_schema.get("properties", {})) for t in await mcp.list_tools()})
        unknown = sorted(set(arguments or {}) - set(takes.get(name, arguments or {})))
        if unknown:
            close = difflib.get_close_matches(unknown[0], takes[name], n=1)
            raise ToolError(f"{name} takes no parameter {unknown[0]!r}"
                            + (f" (did you mean {close[0]!r}?)" if close else ""))
        return await call_tool(name, arguments, context)

    mcp.call_tool = checked


def _search_tool(mcp: Any, call: Callable) -> None:
    def search(query: str, vault: VaultParam = None, **params: Any) -> dict[str, Any]:
        def run(s):
            # An option left out arrives as None: unset, as in a request without it.
            options = SearchOptions.from_params({k: v for k, v in params.items() if v is not None})
            settings = None
            if options.rerank:
                from .rerank import RerankSettings

                settings = RerankSettings.load(hint=" where the MCP server runs (a tool call cannot name an endpoint)")
            response = s.search(query, options, vault, rerank_settings=settings)
            if options.full:
                cap_full_texts(response)
            return response.to_dict()
        return call(run)

    # The tool's parameters are the options' (``SearchOptions.tool_parameters``).
    query_param = Annotated[str, Field(description="What to look for, as plain text (any language; no syntax).")]
    search.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=query_param),
         *SearchOptions.tool_parameters(),
         inspect.Parameter("vault", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=EveryVault, default=None)],
        return_annotation=dict[str, Any])
    mcp.tool(description=SEARCH_HELP.format(options=SearchOptions.tool_help()))(search)


def _one_line_tools(mcp: Any) -> Callable:
    def tool(fn):
        """A tool whose description is its docstring on one line."""
        return mcp.tool(description=" ".join((fn.__doc__ or "").split()))(fn)
    return tool


def _memory_tools(mcp: Any, call: Callable) -> None:
    tool = _one_line_tools(mcp)

    @tool
    def similar(note: Annotated[str | None, Field(description=(
                    "A note (path, name or alias) to find notes like; or give text."))] = None,
                text: Annotated[str | None, Field(description=(
                    "A text, e.g. a memory you are about to write, to find notes that already say it."))] = None,
                limit: Annotated[int, Field(description="How many notes, 1 to 100.",
                                            json_schema_extra={"minimum": 1, "maximum": 100})] = 10,
                vault: VaultParam = None) -> dict[str, Any]:
        """The notes most like a note or a text, the note itself excluded, each with a verdict judged
        against this vault's own notes. Call it before writing a memory. verdict "near-duplicate": the
        note says nearly all of it and stands out from every other note (read it with get, then update it
        rather than write another); "related": a different note on the subject, which may say part of it
        (read it; write yours and link to it);
        "none": nothing clearly like it (the response's verdict is "none" and a warning says so).
        similarity is how much of the source the note says (levels gives what each verdict needs on this
        vault); overlap is the share of the source's key words the note holds."""
        return call(lambda s: s.similar(note, text, limit, vault).to_dict())

    @tool
    def log(misses: Annotated[bool, Field(description=(
                "Only searches that found nothing, found only weak matches, or were never followed by a get."))]
            = False,
            limit: Annotated[int, Field(description="How many searches, newest first.",
                                        json_schema_extra={"minimum": 1, "maximum": 10000})] = 20,
            vault: VaultParam = None) -> dict[str, Any]:
        """The query log (only when the user set log_queries = true): recent searches with their top hits,
        how each matched and whether a get followed. With misses, the questions this memory fails to answer:
        worth a note."""
        return call(lambda s: s.query_log(limit, misses, vault).to_dict())


def _reading_tools(mcp: Any, call: Callable) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    tool = _one_line_tools(mcp)

    @tool
    def get(path: NoteParam,
            start: Annotated[int | None, Field(description="First line, 1-based (default: 1).")] = None,
            end: Annotated[int | None, Field(description="Last line, inclusive (default: the end).")] = None,
            vault: VaultParam = None) -> dict[str, Any]:
        """Read a note of the vault, or lines start..end of it (1-based, inclusive). Only notes inside
        the vault can be read; a name several notes share is refused with the candidates' paths."""
        if "\x00" in path:   # no file name holds one; the OS refuses it before any vault check could
            raise ToolError("path contains a NUL byte")
        return call(lambda s: s.get(path, start, end, vault).to_dict())

    @tool
    def multi_get(
            paths: Annotated[list[str] | str, Field(description=(
                "What to read: globs (memory/2026-11-*.md; * stays in a folder, ** crosses folders), folders "
                "(Projects/), paths or names; one string or a list."))],
            max_bytes: Annotated[int | None, Field(description="Stop at this many bytes in all (default 100000).",
                                                   json_schema_extra={"minimum": 1})] = None,
            max_lines: Annotated[int | None, Field(description="At most this many lines of each note's text "
                                                   "(its frontmatter comes whole and does not count).",
                                                   json_schema_extra={"minimum": 1})] = None,
            vault: VaultParam = None) -> dict[str, Any]:
        """Read several notes at once, in the order named (a glob's in path order), until max_bytes is
        reached. `cut` lists the notes left out or cut short: read those with `get`; `missing` each name that
        named no note (or several), with why, while the others are read."""
        patterns = [paths] if isinstance(paths, str) else list(paths)
        return call(lambda s: s.multi_get(patterns, max_bytes, max_lines, vault).to_dict())


def _browsing_tools(mcp: Any, call: Callable) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    tool = _one_line_tools(mcp)

    @tool
    def ls(folder: Annotated[str | None, Field(description="A vault-relative folder (default: the vault's root).")]
           = None,
           timeline: Annotated[bool, Field(description=(
               "List the daily-log entries (### HH:MM - Title) under the folder by time instead of its notes."))]
           = False,
           after: Annotated[str | None, Field(description="With timeline: entries on or after this date "
                                                          "(2026-11-01, 2026-11, 7d, today).")] = None,
           before: Annotated[str | None, Field(description="With timeline: entries on or before this date.")]
           = None,
           vault: VaultParam = None) -> dict[str, Any]:
        """List a folder of the vault: its sub-folders (with how many notes lie under each and the newest
        date), then its notes (title, date, modification time, tags)."""
        if timeline:
            return call(lambda s: s.timeline(folder, after, before, vault).to_dict())
        return call(lambda s: s.ls(folder, vault).to_dict())

    @tool
    def links(path: NamedParam, vault: VaultParam = None) -> dict[str, Any]:
        """The links of a note: outlinks (with the note each resolves to, or none), backlinks (notes
        linking to it) and unresolved links. Use it to follow a topic from a note you found."""
        return call(lambda s: s.links(path, vault).to_dict())

    @tool
    def tags(limit: Annotated[int | None, Field(description="Only the most used tags.",
                                                json_schema_extra={"minimum": 1})] = None,
             vault: VaultParam = None) -> dict[str, Any]:
        """Every tag of the vault with how many notes carry it, most used first (a parent tag counts the
        notes of its nested tags). Pass a tag to `search` as `tags` to search only those notes."""
        if limit is not None and limit < 1:
            raise ToolError("limit must be 1 or more")
        return call(lambda s: s.tags(limit, vault).to_dict())

    @tool
    def status(vault: EachVaultStatus = None) -> dict[str, Any]:
        """How many notes and chunks are indexed, the embedding model, how many chunks still wait
        for a vector, when the index last synced, and any files that could not be indexed (with
        several vaults and none named: {"vaults": [each vault's status]})."""
        def run(s):
            status = s.status(vault)
            return {"vaults": [one.to_dict() for one in status]} if isinstance(status, list) else status.to_dict()
        return call(run)



def http_app(service: SearchService | VaultSet) -> Any:
    """The MCP tools as an ASGI app (streamable HTTP, stateless, JSON
    answers) over ``serve``'s own service; ``serve`` checks Host and Origin
    before a request reaches it."""
    from mcp.server.transport_security import TransportSecuritySettings

    server = build_server(lambda: service, owns_service=False)
    return server.streamable_http_app(
        streamable_http_path="/mcp", json_response=True, stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))


def run(service_factory) -> None:
    # stdout carries the protocol: everything else goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="vault-search: %(message)s")
    build_server(service_factory).run()
