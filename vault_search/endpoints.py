"""The JSON API of `vault-search serve`: each endpoint, the parameters it
takes and what it answers, apart from the HTTP that carries it (server.py).

An endpoint is a function of the request's parameters (query string and
JSON body merged, checked against ``ENDPOINTS`` first) and of what the
server knows of the request (``Call``); it answers a dict (sent as JSON) or
``Rendered`` text, and raises the library's errors, which the server turns
into status codes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from indexer import __version__
from indexer.errors import UsageValueError

from .options import SearchOptions, read_flag, read_int, read_list, read_text, read_whole
from .resident import CLIENT_HEADER, RENDERED_FORMATS
from .results import IndexStatus
from .vaults import VaultSet, cap_full_texts

LIST_PARAMS = (*SearchOptions.list_param_names(), "paths", "pattern")
# Each endpoint and the parameters it takes (query string or JSON body); any
# other parameter is a 400, so a misspelt one is never ignored. docs/agents.md's
# endpoint table is checked against this (tests/test_docs.py).
ENDPOINTS: dict[str, tuple[str, ...]] = {
    "/search": ("query", "q", *SearchOptions.param_names(), "vault", "render", "color", "log"),
    "/get": ("path", "start", "end", "vault"),
    "/multi-get": ("paths", "path", "pattern", "max_bytes", "max_lines", "vault"),
    "/similar": ("note", "path", "text", "limit", "vault"),
    "/log": ("limit", "misses", "vault"),
    "/ls": ("folder", "path", "timeline", "after", "before", "vault"),
    "/links": ("path", "vault"),
    "/tags": ("vault",),
    "/status": ("vault",),
    "/health": (),
}


@dataclass(frozen=True)
class Call:
    """What an endpoint knows of a request beyond its parameters."""
    vaults: VaultSet
    # The request could not have come from another site's page (a proof
    # header, or a JSON POST: ``server._Handler._proven``): only such a
    # search is logged, marks a logged search followed, or may rerank.
    proven: bool
    requests: int   # requests this server has answered, for /status


@dataclass(frozen=True)
class Rendered:
    """/search?render=FORMAT: what `vault-search search --format FORMAT` prints
    (the thin client, vault_search.fast, writes it as it comes)."""
    text: str


def health(call: Call, params: dict) -> dict:
    vaults = [str(s.config.vault) for s in call.vaults.services]
    return {"ok": True, "vault": vaults[0], "vaults": vaults, "pid": os.getpid(), "version": __version__}


def search(call: Call, params: dict) -> dict | Rendered:
    options = SearchOptions.from_params(params)
    settings = None
    if options.rerank:
        from .rerank import RerankSettings

        if not call.proven:   # the judge is paid for, and reads the notes' text: never another site's call
            raise UsageValueError(f"rerank needs the {CLIENT_HEADER} header (or a JSON POST)")
        # The endpoint and key come from the server's own configuration
        # only: a request never chooses where note text (or the key) goes.
        settings = RerankSettings.load(hint=" where the server runs (a request cannot name an endpoint)")
    query = read_text(params, "query", "q") or ""
    render = read_text(params, "render")
    if render is not None and render not in RENDERED_FORMATS:
        raise UsageValueError(f"render must be one of {', '.join(RENDERED_FORMATS)}")
    color = read_flag(params, "color")
    wanted = read_flag(params, "log") if "log" in params else True
    response = call.vaults.search(query, options, read_text(params, "vault"), rerank_settings=settings,
                                  log=wanted and call.proven)
    if options.full:
        cap_full_texts(response)
    if render is None:
        return response.to_dict()
    from .render import cli_output

    # Links name the vault's folder: only for a client no other site's page can be (the fast path).
    link = call.vaults.linker(read_text(params, "vault")) if color and call.proven else None
    return Rendered(cli_output(response, render, color, link))


def links(call: Call, params: dict) -> dict:
    path = read_text(params, "path")
    if not path:
        raise UsageValueError("links needs a path")
    return call.vaults.links(path, read_text(params, "vault")).to_dict()


def tags(call: Call, params: dict) -> dict:
    return call.vaults.tags(None, read_text(params, "vault")).to_dict()


def get(call: Call, params: dict) -> dict:
    path = read_text(params, "path")
    if not path:
        raise UsageValueError("get needs a path")
    start, end = read_int(params, "start", None), read_int(params, "end", None)   # or PATH:START-END
    # Only a request no other site's page could send marks a logged search followed (as only such is logged).
    return call.vaults.get(path, start, end, read_text(params, "vault"), follow=call.proven).to_dict()


def multi_get(call: Call, params: dict) -> dict:
    patterns = read_list(params, "paths", "path", "pattern")
    return call.vaults.multi_get(patterns, read_whole(params, "max_bytes", None, (1, 10**8)),
                                 read_whole(params, "max_lines", None, (1, 10**8)),
                                 read_text(params, "vault"), follow=call.proven).to_dict()


def similar(call: Call, params: dict) -> dict:
    return call.vaults.similar(read_text(params, "note", "path"), read_text(params, "text"),
                               read_whole(params, "limit", 10, (1, 100)) or 10,
                               read_text(params, "vault")).to_dict()


def query_log(call: Call, params: dict) -> dict:
    return call.vaults.query_log(read_whole(params, "limit", 20, (1, 10_000)) or 20, read_flag(params, "misses"),
                                 read_text(params, "vault")).to_dict()


def ls(call: Call, params: dict) -> dict:
    folder, vault = read_text(params, "folder", "path"), read_text(params, "vault")
    if read_flag(params, "timeline"):
        return call.vaults.timeline(folder, read_text(params, "after"), read_text(params, "before"),
                                    vault).to_dict()
    return call.vaults.ls(folder, vault).to_dict()


def status(call: Call, params: dict) -> dict:
    answer = call.vaults.status(read_text(params, "vault"))
    if isinstance(answer, list):
        return {"vaults": [_with_requests(s, call.requests).to_dict() for s in answer]}
    return _with_requests(answer, call.requests).to_dict()


def _with_requests(status: IndexStatus, requests: int) -> IndexStatus:
    if status.server is not None:
        status = replace(status, server=replace(status.server, requests=requests))
    return status


ROUTES: dict[str, Callable[[Call, dict], dict | Rendered]] = {
    "/search": search, "/get": get, "/multi-get": multi_get, "/similar": similar, "/log": query_log, "/ls": ls,
    "/links": links, "/tags": tags, "/status": status, "/health": health,
}
