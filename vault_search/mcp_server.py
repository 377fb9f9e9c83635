"""``vault-search mcp``: a Model Context Protocol server on stdio.

An agent whose memory is this vault gets four tools (search, get, links, status). The server keeps the
index, jieba and the embedding model loaded for the whole session and runs
the watcher, so edits to the vault are searchable moments later.
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from indexer import __version__
from indexer.errors import VaultSearchError

from .options import SearchOptions
from .service import SearchService

log = logging.getLogger("vault_search.mcp")

INSTRUCTIONS = """\
Search the user's Markdown notes (an Obsidian vault; memory notes, daily logs, in Chinese and English).
Use `search` as a fallback when you do not already know which note holds a fact: it finds notes by
keywords and by meaning, across Chinese and English, and returns paths with line ranges. Then use `get`
with that path and line range to read the exact lines before relying on them. If you already know the
path, call `get` directly. `links` lists a note's outlinks and backlinks, to follow a topic. Results
marked `stale: true` were not verified recently (or have expired): check them before trusting them, or
pass exclude_stale. `status` tells how many notes are indexed and whether the index is current."""

SEARCH_HELP = """\
Find notes by keywords and by meaning (Chinese and English). Use it when you do not know which note holds a \
fact. {options}
Returns results with path, title, heading, start_line, end_line, snippet and score; read the lines with `get` \
before relying on a snippet."""


def build_server(service_factory) -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    state: dict[str, SearchService] = {}

    @asynccontextmanager
    async def lifespan(server) -> AsyncIterator[dict]:
        state["service"] = service_factory()
        try:
            yield state
        finally:
            state.pop("service").close()

    mcp = MCPServer(name="vault-search", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)

    def call(fn):
        try:
            return fn(state["service"])
        except VaultSearchError as exc:
            raise ToolError(str(exc)) from None

    def search(query: str, **params: Any) -> dict[str, Any]:
        def run(s):
            # An option left out arrives as None: unset, as in a request without it.
            options = SearchOptions.from_params({k: v for k, v in params.items() if v is not None})
            settings = None
            if options.rerank:
                from .rerank import RerankSettings

                settings = RerankSettings.load(hint=" where the MCP server runs (a tool call cannot name an endpoint)")
            return s.search(query, options, rerank_settings=settings).to_dict()
        return call(run)

    # The tool's parameters are the options' (``SearchOptions.tool_parameters``).
    search.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
         *SearchOptions.tool_parameters()], return_annotation=dict[str, Any])
    mcp.tool(description=SEARCH_HELP.format(options=SearchOptions.tool_help()))(search)

    @mcp.tool()
    def links(path: str) -> dict[str, Any]:
        """The links of a note (by vault-relative path): outlinks (with the note each resolves to,
        or none), backlinks (notes linking to it) and unresolved links. Use it to follow a topic
        from a note you found."""
        return call(lambda s: s.links(path).to_dict())

    @mcp.tool()
    def get(path: str, start: int | None = None, end: int | None = None) -> dict[str, Any]:
        """Read a note of the vault, or lines start..end of it (1-based, inclusive), by its
        vault-relative path as returned by `search`. Only notes inside the vault can be read."""
        return call(lambda s: s.get(path, start, end).to_dict())

    @mcp.tool()
    def status() -> dict[str, Any]:
        """How many notes and chunks are indexed, the embedding model, how many chunks still wait
        for a vector, when the index last synced, and any files that could not be indexed."""
        return call(lambda s: s.status().to_dict())

    return mcp


def run(service_factory) -> None:
    # stdout carries the protocol: everything else goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="vault-search: %(message)s")
    build_server(service_factory).run()
