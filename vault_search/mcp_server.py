"""``vault-search mcp``: a Model Context Protocol server on stdio.

An agent whose memory is this vault gets four tools (search, get, links, status). The server keeps the
index, jieba and the embedding model loaded for the whole session and runs
the watcher, so edits to the vault are searchable moments later.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from indexer import __version__
from indexer.errors import VaultSearchError

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

    @mcp.tool()
    def search(query: str, mode: str | None = None, limit: int = 10, tags: list[str] | None = None,
               path: str | None = None, after: str | None = None, before: str | None = None,
               where: list[str] | None = None, exclude_stale: bool = False, related: bool = False,
               recency_half_life: float | None = None, rerank: bool = False) -> dict[str, Any]:
        """Find notes by keywords and by meaning (Chinese and English). Use it when you do not know
        which note holds a fact. mode: "hybrid" (default: keywords + meaning), "fts" (exact words,
        names, identifiers) or "vector" (meaning only). limit: how many notes, 1 to 1000. tags:
        notes must carry every tag (nested tags match their parent). path: a folder of the vault.
        after/before: dates like 2026-11-01 or "2026-11-01 09:30" (daily-log entries carry their
        time). where: frontmatter conditions that must all hold, like "type=feedback" or
        "due<2026-12-01". exclude_stale: leave out notes whose last_verified is old or whose
        valid_until has passed (results carry stale: true otherwise). related: also list notes one
        link away from the top hits (marked related: true). recency_half_life: days after which a
        note's score halves, to favour recent notes.
        rerank: let the configured LLM judge the top results (slower; only if the user set it up).
        Returns results with path, title, heading, start_line, end_line, snippet and score; read the
        lines with `get` before relying on a snippet."""
        def run(s):
            settings = None
            if rerank:
                from .rerank import RerankSettings

                settings = RerankSettings.load(hint=" where the MCP server runs (a tool call cannot name an endpoint)")
            return s.search(query, mode=mode, limit=limit, tags=tags or (), path=path,
                            after=after, before=before, rerank=rerank, rerank_settings=settings,
                            where=where or (), exclude_stale=exclude_stale, related=related,
                            recency_half_life=recency_half_life).to_dict()
        return call(run)

    @mcp.tool()
    def links(path: str) -> dict[str, Any]:
        """The links of a note (by vault-relative path): outlinks (with the note each resolves to,
        or none), backlinks (notes linking to it) and unresolved links. Use it to follow a topic
        from a note you found."""
        return call(lambda s: s.links(path))

    @mcp.tool()
    def get(path: str, start: int | None = None, end: int | None = None) -> dict[str, Any]:
        """Read a note of the vault, or lines start..end of it (1-based, inclusive), by its
        vault-relative path as returned by `search`. Only notes inside the vault can be read."""
        return call(lambda s: s.get(path, start, end).to_dict())

    @mcp.tool()
    def status() -> dict[str, Any]:
        """How many notes and chunks are indexed, the embedding model, how many chunks still wait
        for a vector, when the index last synced, and any files that could not be indexed."""
        return call(lambda s: s.status())

    return mcp


def run(service_factory) -> None:
    # stdout carries the protocol: everything else goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="vault-search: %(message)s")
    build_server(service_factory).run()
