"""``vault-search serve``: JSON over HTTP on 127.0.0.1 for one vault.

Endpoints (GET with query parameters, or POST with a JSON body), answered
by ``endpoints.py``; this module is the HTTP around them:

    /health                         {"ok": true, ...}
    /search?query=...&OPTION=...    the same JSON as `vault-search search --json`;
                                    the options of ``SearchOptions`` (options.py)
    /get?path=...&start=&end=       {path, start_line, end_line, total_lines, text}
    /multi-get?paths=GLOB&paths=... several notes within max_bytes (and max_lines each)
    /ls?folder=...                  a folder's sub-folders and notes
    /links?path=...                 outlinks, backlinks and unresolved links of a note
    /tags                           every tag with its note count
    /status                         `vault-search status --json` plus server state

Requests whose Host or Origin is not this server get 403 (a web page in a
browser cannot reach the index through DNS rebinding or a cross-site
request), and so does a request for the JSON API or ``/mcp`` that a browser
marks as another site's (``Sec-Fetch-Site: cross-site`` or ``same-site``: an
``<img>`` on any page that knows the port). Only a request another site's
page could not have sent goes into the query log (``PROOF_HEADER``, or a
POST, which must be ``application/json``: 415 otherwise); any other search is
answered, not logged. Other methods get a JSON 405 (HEAD answers like GET,
without the body). ``full=1``'s whole notes stop at vaults.MAX_FULL_TEXT_BYTES per
answer. A client has REQUEST_DEADLINE_S to send a whole request and
RESPONSE_DEADLINE_S to take the answer; at MAX_CONNECTIONS the connection
that has waited longest for its request is dropped to make room. One
`serve` or `watch` per index: ``serve.lock`` is held for the life of the
process. The server writes ``server.json`` (pid, host, port) in the index
folder so `vault-search search` can find it.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from indexer import __version__
from indexer.errors import NoteNotFoundError, PathOutsideVaultError, UsageValueError, VaultSearchError

from . import resident
from .endpoints import ENDPOINTS, LIST_PARAMS, ROUTES, Call, Rendered
from .files import AmbiguousNameError
from .options import agent_words
from .resident import CLIENT_HEADER, LOCAL_HOSTS, PID_HEADER, WILDCARD_HOSTS, ResidentLock
from .service import SearchService
from .vaults import VaultSet, WrongVaultError

if TYPE_CHECKING:
    from .asgi import AsgiBridge

log = logging.getLogger("vault_search.server")

MAX_BODY = 1 << 20
LOCAL_NAMES = set(LOCAL_HOSTS)
ALLOWED_METHODS = "GET, HEAD, POST"
# A local server has a handful of clients; each connection costs a thread and
# a file descriptor, and running out of descriptors starves the watcher.
MAX_CONNECTIONS = 32
REQUEST_DEADLINE_S = 5.0    # to send a whole request (line, headers, body), keep-alive idle time included
RESPONSE_DEADLINE_S = 10.0  # to take the whole answer
# What a browser says of where a request comes from (Fetch Metadata): these
# two are another site's page (another port of this machine is "same-site").
FOREIGN_SITES = ("cross-site", "same-site")


def is_loopback(host: str) -> bool:
    if host in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, str | None]:
    """``host:port``, ``[::1]:port`` → (host, port)."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else None
    if value.count(":") == 1:
        host, port = value.split(":")
        return host, port
    return value, None


def host_refusal(headers, server: "VaultHTTPServer", local_address: str) -> str | None:
    """Why a request's Host or Origin is not this server's, else None."""
    # The address the request arrived on is this machine's, whatever the
    # bind address (0.0.0.0 answers on every interface).
    allowed = server.allowed_hosts | {local_address.lower()}
    host_header = headers.get("Host")
    if not host_header:
        return "missing Host header"
    host, port = split_host(host_header)
    if host not in allowed or (port is not None and port != str(server.server_port)):
        return f"Host {host_header!r} is not this server"
    origin = headers.get("Origin")
    if origin is not None and normal_origin(origin) not in server.allowed_origins:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.hostname not in allowed:
            return f"Origin {origin!r} is not local"
        # Another port of this machine is another site's page (a dev
        # server, another tool's UI): the port must be this server's, or
        # the one the Host header names (behind a proxy).
        try:
            origin_port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return f"Origin {origin!r} is not local"
        ports = {str(server.server_port), port or ("443" if parts.scheme == "https" else "80")}
        if str(origin_port) not in ports:
            return f"Origin {origin!r} is another port's page, not this server's"
    return None


def json_object(body: bytes) -> dict | str:
    """A POST body as the object it must be, or why it is not one."""
    try:
        value = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "body is not JSON"
    except RecursionError:
        return "body is nested too deeply"
    return value if isinstance(value, dict) else "body must be a JSON object"


def foreign_page(headers, allowed_origins) -> str | None:
    """Why a request for the API is refused as another site's page's, else None
    (the page itself may be opened from a link anywhere)."""
    site = (headers.get("Sec-Fetch-Site") or "").strip().lower()
    origin = headers.get("Origin")
    if site in FOREIGN_SITES and (origin is None or normal_origin(origin) not in allowed_origins):
        return f"a request from another site's page (Sec-Fetch-Site: {site})"
    return None


class _Handler(BaseHTTPRequestHandler):
    server: VaultHTTPServer
    server_version = f"vault-search/{__version__}"
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_DEADLINE_S  # per read; the server's deadlines bound the whole request

    def log_message(self, fmt, *args):  # quiet: one debug line per request
        from .render import printable  # the request line is the client's text: never raw to a terminal

        log.debug("%s %s", self.address_string(), printable(fmt % args))

    def handle_one_request(self):
        self.server.connections.waiting(self.connection)
        super().handle_one_request()

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()

    def do_HEAD(self):
        self._handle()   # as GET; _send leaves the body out

    def do_OPTIONS(self):
        """A CORS preflight: answered only for an origin ``--allow-origin`` named
        (its body, which a preflight never has, is not read: the connection closes)."""
        if self.headers.get("Origin") is None:   # not a preflight: a method this server does not take
            return self.send_error(HTTPStatus.NOT_IMPLEMENTED)
        if not self.server.connections.answering(self.connection):
            self.close_connection = True
            return
        origin = normal_origin(self.headers.get("Origin") or "")
        if (self.headers.get("Content-Length") or "0") != "0" or self.headers.get("Transfer-Encoding") or \
                origin not in self.server.allowed_origins or self._allowed():
            return self._send(403, {"error": "forbidden: no cross-origin access for this origin "
                                             "(serve --allow-origin ORIGIN allows one)"}, close=True)
        self._send(204, None, headers={"Access-Control-Allow-Methods": "GET, POST",
                                       "Access-Control-Allow-Headers": CORS_HEADERS,
                                       "Access-Control-Max-Age": "600"})

    def send_error(self, code, message=None, explain=None):
        """JSON, also for what http.server refuses itself: a method without a
        ``do_`` handler (405 here, not 501), a malformed request line or headers."""
        log.debug("%s refused: %d %s", self.address_string(), code, message)
        if code == HTTPStatus.NOT_IMPLEMENTED:
            return self._send(405, {"error": f"method {self.command} is not allowed; use GET or POST"},
                              headers={"Allow": ALLOWED_METHODS})
        self._send(code, {"error": message or HTTPStatus(code).phrase}, close=True)

    # -- security ---------------------------------------------------------
    def _allowed(self) -> str | None:
        """None when the request may proceed, else why not."""
        return host_refusal(self.headers, self.server, self.connection.getsockname()[0])

    def _foreign(self) -> str | None:
        return foreign_page(self.headers, self.server.allowed_origins)

    def _proven(self) -> bool:
        """Whether the request could not have come from another site's page:
        only such a search goes into the query log (log_queries). A page
        elsewhere can send a GET (an ``<img>``) or a form's POST, but not a
        custom header or a JSON body without a CORS preflight, which this
        server answers only for ``--allow-origin``."""
        return self.headers.get(PROOF_HEADER) is not None or (self.command == "POST" and self._json_body())

    def _json_body(self) -> bool:
        return self.headers.get_content_type() == "application/json"

    # -- dispatch ---------------------------------------------------------
    def _handle(self) -> None:
        body = self._whole_body()
        if body is None:
            return
        refusal = self._allowed()
        if refusal:
            return self._send(403, {"error": f"forbidden: {refusal}"}, close=True)
        url = urlsplit(self.path)
        if url.path in PAGES and self.command in ("GET", "HEAD"):
            self.server.count_request()
            return self._page(url.path)
        refusal = self._foreign()
        if refusal:
            return self._send(403, {"error": f"forbidden: {refusal}"}, close=True)
        if url.path.rstrip("/") == MCP_PATH:
            self.server.count_request()
            if self.command != "POST":   # no event streams: a stateless server answers each POST whole
                return self._send(405, {"error": f"{MCP_PATH} takes POST (MCP's streamable HTTP transport, "
                                                 "JSON answers)"}, headers={"Allow": "POST"})
            if not self._json_body():
                return self._send(415, {"error": UNSUPPORTED_BODY})
            return self._mcp(url, body)
        self._api(url, body)

    def _whole_body(self) -> bytes | None:
        """The whole declared body, read first whatever happens next, so no
        byte of it is ever taken for a second request on this connection;
        None when the request is refused (answered) or was cut."""
        raw_length = self.headers.get("Content-Length") or "0"
        if not raw_length.isdigit():
            self._send(400, {"error": "bad Content-Length"}, close=True)
            return None
        length = int(raw_length)
        if length > MAX_BODY or self.headers.get("Transfer-Encoding"):
            self._send(413, {"error": "request body too large or chunked"}, close=True)
            return None
        body = self.rfile.read(length) if length else b""
        if not self.server.connections.answering(self.connection):
            self.close_connection = True   # cut at its deadline: what arrived is no whole request
            return None
        return body

    def _api(self, url, body_bytes: bytes) -> None:
        """A JSON endpoint's answer, once its parameters are known to be its own."""
        params: dict = {k: v if len(v) > 1 or k in LIST_PARAMS else v[0] for k, v in parse_qs(url.query).items()}
        endpoint = url.path.rstrip("/") or "/"
        if endpoint != "/health":   # the thin client's liveness probe is not a request served
            self.server.count_request()
        if endpoint not in ENDPOINTS:
            return self._send(404, {"error": f"no endpoint {url.path}; use {', '.join(ENDPOINTS)}"})
        if self.command == "POST":
            if not self._json_body():   # a form's or a text/plain body: what another site's page can send
                return self._send(415, {"error": UNSUPPORTED_BODY})
            body = json_object(body_bytes)
            if isinstance(body, str):
                return self._send(400, {"error": body})
            params.update(body)
        unknown = sorted(set(params) - set(ENDPOINTS[endpoint]))
        if unknown:
            close = difflib.get_close_matches(unknown[0], ENDPOINTS[endpoint], n=1)
            return self._send(400, {"error": f"{endpoint} takes no parameter {unknown[0]!r}"
                                             + (f" (did you mean {close[0]!r}?)" if close else "")})
        self._answer(endpoint, params)

    def _answer(self, endpoint: str, params: dict) -> None:
        """The endpoint's answer, or its error as a status code."""
        try:
            answer = ROUTES[endpoint](self._call(), params)
            if isinstance(answer, Rendered):
                self._send_text(answer)
            else:
                self._send(200, answer)
        except WrongVaultError as exc:
            self._send(409, {"error": self._shown(exc)})
        except (UsageValueError, ValueError, TypeError) as exc:
            # The CLI (thin client, fast path) says its flags; any other client its parameters.
            cli = self.headers.get(CLIENT_HEADER) == "cli"
            self._send(400, {"error": str(exc) if cli else agent_words(self._shown(exc), set(ENDPOINTS[endpoint]))})
        except AmbiguousNameError as exc:
            self._send(400, {"error": self._shown(exc)})
        except PathOutsideVaultError as exc:
            self._send(403, {"error": self._shown(exc)})
        except NoteNotFoundError as exc:
            self._send(404, {"error": self._shown(exc)})
        except VaultSearchError as exc:
            self._send(500, {"error": self._shown(exc)})
        except Exception as exc:  # never let one request kill the server
            log.exception("request failed")
            self._send(500, {"error": f"internal error ({exc.__class__.__name__})"})

    def _cors(self) -> None:
        """``Access-Control-Allow-Origin`` for an origin ``--allow-origin`` named (none by default)."""
        headers = getattr(self, "headers", None)   # none yet when http.server refuses a malformed request
        origin = headers.get("Origin") if headers is not None else None
        if origin is not None and normal_origin(origin) in self.server.allowed_origins:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Expose-Headers", "Mcp-Session-Id")
            self.send_header("Vary", "Origin")

    def _page(self, path: str) -> None:
        send_page(self, path)

    def _send(self, status: int, data: dict | None, close: bool = False, headers: dict | None = None) -> None:
        body = b"" if data is None else json_bytes(data)
        if close or status >= 400:
            self.close_connection = True
        self.server.connections.writing(self.connection)
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self._cors()
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _mcp(self, url, body: bytes) -> None:
        answer_mcp(self, url, body)

    def _send_text(self, answer: Rendered) -> None:
        """What the CLI would print, as UTF-8 text, with this process's pid
        (the thin client checks it against server.json)."""
        try:
            body = answer.text.encode("utf-8")
        except UnicodeEncodeError:   # a file name that is not UTF-8: the full CLI prints it its own way
            return self._send(422, {"error": "the answer is not valid UTF-8; ask for JSON"})
        self.server.connections.writing(self.connection)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header(PID_HEADER, str(os.getpid()))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _shown(self, exc: Exception) -> str:
        """An error as a client is told it: the vaults named, never their
        folders on this machine (``VaultSet.without_paths``); the CLI's thin
        client, on this machine, prints what a local search would."""
        vaults = self.server.vaults
        if vaults is None or self.headers.get(CLIENT_HEADER) == "cli":
            return str(exc)
        return vaults.without_paths(str(exc))

    def _call(self) -> Call:
        vaults = self.server.vaults
        if vaults is None:   # bound, not started: no request is answered before ``start``
            raise VaultSearchError("the server is starting")
        return Call(vaults, self._proven(), self.server.requests)


def send_page(handler: _Handler, path: str) -> None:
    """The search page and its two files, from the package: nothing is
    fetched from anywhere else, which the Content-Security-Policy enforces."""
    name, kind = PAGES[path]
    body = page_file(name)
    handler.server.connections.writing(handler.connection)
    handler.send_response(200)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Content-Security-Policy", PAGE_POLICY)
    handler.send_header("X-Content-Type-Options", "nosniff")
    handler.send_header("Referrer-Policy", "no-referrer")
    handler.send_header("X-Frame-Options", "DENY")
    if handler.close_connection:
        handler.send_header("Connection", "close")
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


def answer_mcp(handler: _Handler, url, body: bytes) -> None:
    """The MCP tools over the SDK's streamable HTTP transport (``mcp_server.http_app``)."""
    try:
        bridge = handler.server.mcp_bridge()
    except Exception as exc:   # the SDK missing or failing to start: say so, keep serving
        log.exception("MCP over HTTP failed to start")
        return handler._send(500, {"error": f"MCP over HTTP is not available ({exc.__class__.__name__})"})
    answer = bridge.request("POST", MCP_PATH, url.query,
                            list(handler.headers.items()), body, handler.client_address[:2],
                            handler.connection.getsockname()[:2], RESPONSE_DEADLINE_S * 3)
    handler.server.connections.writing(handler.connection)
    handler.send_response(answer.status)
    for name, value in answer.headers:
        if name.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
            handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(answer.body)))
    handler._cors()
    if answer.status >= 400:
        handler.close_connection = True
    if handler.close_connection:
        handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(answer.body)


# What a page of an allowed origin may send (MCP's streamable HTTP clients send the last two).
CORS_HEADERS = f"Content-Type, Accept, {CLIENT_HEADER}, Mcp-Session-Id, Mcp-Protocol-Version"
UNSUPPORTED_BODY = "a POST body must be JSON, sent as Content-Type: application/json"


def json_bytes(data) -> bytes:
    """``data`` as JSON in valid UTF-8. A lone surrogate (a request's
    ``\\ud800`` echoed in an error, a file name that is not UTF-8) has no UTF-8
    form: then every non-ASCII character is escaped, and a client's JSON
    reader gets the very same string back."""
    text = json.dumps(data, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(data).encode("ascii")


def normal_origin(origin: str) -> str:
    """An origin as compared: scheme and host lower-cased, no trailing slash."""
    parts = urlsplit(origin.strip())
    if not parts.scheme or not parts.netloc:
        return origin.strip()
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def check_origin(origin: str) -> str:
    """An ``--allow-origin`` value, normalised; ``null``, ``*`` and anything
    that is not scheme://host are refused (``null`` is every sandboxed frame
    and file:// page)."""
    value = normal_origin(origin)
    parts = urlsplit(value)
    if value in ("null", "*") or not parts.scheme or not parts.netloc or parts.path or parts.query:
        raise UsageValueError(f"--allow-origin {origin!r}: give one origin as scheme://host[:port], like "
                              "app://obsidian.md (never null or *)")
    return value


# The search page (vault_search/web): path -> (file, content type).
PAGES = {"/": ("index.html", "text/html; charset=utf-8"), "/app.js": ("app.js", "text/javascript; charset=utf-8"),
         "/app.css": ("app.css", "text/css; charset=utf-8")}
# The page loads its own script and style and asks its own server, nothing else.
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_PAGE_CACHE: dict[str, bytes] = {}


def page_file(name: str) -> bytes:
    if name not in _PAGE_CACHE:
        from importlib.resources import files

        _PAGE_CACHE[name] = (files("vault_search") / "web" / name).read_bytes()
    return _PAGE_CACHE[name]


# Sent by vault-search's own CLI (client.request, fast.py) and the search page
# (web/app.js); "cli": errors keep the CLI's flag names. With any value it is
# the proof that a request is no other site's page's (``_Handler._proven``):
# a page elsewhere cannot set it without a CORS preflight.
PROOF_HEADER = CLIENT_HEADER
# MCP's streamable HTTP transport (mcp_server.http_app): JSON-RPC in the body, not these parameters.
MCP_PATH = "/mcp"


def _cut(sock: socket.socket) -> None:
    """End a connection now: a thread blocked reading or writing it wakes up."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Connections:
    """The open connections, what each waits for and until when.

    The accept loop cuts a connection past its deadline (a slow or idle client
    holds neither a thread nor a file descriptor for long) and, at the cap, the
    one that has waited longest for its request, so a client that sends its
    request at once is always answered. A connection being answered is never
    cut: a search, even a reranked one, ends by its own bounds.
    """

    def __init__(self, cap: int = MAX_CONNECTIONS):
        self.cap = cap
        self._lock = threading.Lock()
        self._open: dict[socket.socket, list] = {}   # socket → [waiting for a request since, deadline]
        self._cut: set[socket.socket] = set()

    def admit(self, sock: socket.socket) -> bool:
        now = time.monotonic()
        with self._lock:
            if len(self._open) >= self.cap:
                waiting = [(since, s) for s, (since, _) in self._open.items() if since is not None]
                if not waiting:
                    return False      # every slot is answering a request
                self._cut_locked(min(waiting, key=lambda pair: pair[0])[1])
            self._open[sock] = [now, now + REQUEST_DEADLINE_S]
            return True

    def waiting(self, sock: socket.socket) -> None:
        now = time.monotonic()
        with self._lock:
            if sock in self._open:
                self._open[sock] = [now, now + REQUEST_DEADLINE_S]

    def answering(self, sock: socket.socket) -> bool:
        """The request has arrived whole; False if it was cut meanwhile."""
        with self._lock:
            if sock not in self._open:
                return sock not in self._cut
            self._open[sock] = [None, None]
            return True

    def writing(self, sock: socket.socket) -> None:
        with self._lock:
            if sock in self._open:
                self._open[sock][1] = time.monotonic() + RESPONSE_DEADLINE_S

    def closed(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.pop(sock, None)
            self._cut.discard(sock)

    def reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            for sock, (_, deadline) in list(self._open.items()):
                if deadline is not None and deadline < now:
                    self._cut_locked(sock)

    def _cut_locked(self, sock: socket.socket) -> None:
        self._open.pop(sock, None)
        self._cut.add(sock)
        _cut(sock)

    def __len__(self) -> int:
        return len(self._open)


def own_addresses() -> set[str]:
    """This machine's name and its addresses, for a server bound to every interface."""
    names = {socket.gethostname().lower()}
    try:
        names |= {str(info[4][0]).lower() for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        pass
    return names


WARM_BUDGET_S = 10.0   # the whole HTTP warm-up; what is left then is answered cold


class VaultHTTPServer(ThreadingHTTPServer):
    """Binds at once (so a busy port fails before any sync); ``start`` serves."""

    daemon_threads = True
    # socketserver's default backlog of 5 leaves a burst of clients in the
    # kernel's queue, retrying for seconds before this server even sees them.
    request_queue_size = 128

    def __init__(self, service: SearchService | Sequence[SearchService] | None, host: str, port: int,
                 allow_hosts=(), allow_origins=()):
        self.vaults: VaultSet | None = None
        self._set(service)
        self._mcp: AsgiBridge | None = None   # before binding: a failed bind calls server_close
        self._mcp_lock = threading.Lock()
        super().__init__((host, port), _Handler)
        self.requests = 0
        self._count_lock = threading.Lock()
        self.connections = _Connections()
        self.allowed_hosts = set(LOCAL_NAMES) | {h.strip().lower() for h in allow_hosts}
        # Origins whose pages (a plugin inside Obsidian: app://obsidian.md) may call the JSON API (CORS).
        self.allowed_origins = {check_origin(o) for o in allow_origins}
        if host in WILDCARD_HOSTS:
            self.allowed_hosts |= own_addresses()
        elif not is_loopback(host):
            self.allowed_hosts.add(host.lower())

    def _set(self, service: SearchService | Sequence[SearchService] | None) -> None:
        if service is not None:
            self.vaults = VaultSet([service] if isinstance(service, SearchService) else list(service))

    def mcp_bridge(self) -> AsgiBridge:
        """The MCP app, started on the first ``/mcp`` request (the SDK takes
        a moment to import; most clients never ask for it)."""
        with self._mcp_lock:
            if self._mcp is None:
                if self.vaults is None:
                    raise VaultSearchError("the server is starting")
                from .asgi import AsgiBridge
                from .mcp_server import http_app

                self._mcp = AsgiBridge(http_app(self.vaults), "mcp")
            return self._mcp

    def server_close(self) -> None:
        super().server_close()
        with self._mcp_lock:
            if self._mcp is not None:
                self._mcp.close()
                self._mcp = None

    def count_request(self) -> None:
        with self._count_lock:
            self.requests += 1

    def start(self, service: SearchService | Sequence[SearchService] | None = None,
              search_flags: dict | None = None, warm: bool = False) -> "VaultHTTPServer":
        """Serve in a background thread and tell clients where (a ``server.json``
        in each vault's index folder; with ``search_flags``, the CLI's, so that
        its fast path can read a command line). With ``warm``, first answer a
        few searches over its own socket (``warm_requests``)."""
        self._set(service)
        if self.vaults is None:
            raise ValueError("VaultHTTPServer.start needs the SearchService to serve")
        threading.Thread(target=self.serve_forever, name="vault-search-http", daemon=True).start()
        if warm:
            self.warm_requests()
        for one in self.vaults.services:
            record = server_record(str(self.server_address[0]), self.server_port, one.config.vault,
                                   one.config.warnings, one.config.settings_stamp)
            if search_flags is not None:
                record["search_flags"] = search_flags
            resident.write_server_file(one.config.index_dir, record)
        return self

    def warm_requests(self) -> int:
        """Answer, over this server's own socket and before ``server.json``
        says it is ready, a Chinese and an English search in each mode the
        index answers, as JSON and as the CLI's text, unlogged
        (``log=0``); how many were answered. ``SearchService.warm`` loaded the data;
        this runs the code a request runs (the handler, each mode's lists,
        the renderers) once, so that an agent's first query costs what the
        next ones do. A failure only logs: warming never stops a server."""
        from http.client import HTTPConnection
        from urllib.parse import urlencode

        from .service import WARM_QUERIES

        assert self.vaults is not None
        t0, answered = time.perf_counter(), 0
        deadline = t0 + WARM_BUDGET_S
        bound = str(self.server_address[0])
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(bound, bound)
        name = f"[{host}]" if ":" in host else host
        for one in self.vaults.services:
            with one.reading(refresh=False) as index:
                # The default mode (None) too without vectors: a keyword index's default search translates.
                modes: list[str | None] = [None, "fts", "vector"] if index.has_vectors() else [None, "fts"]
            for mode in modes:
                for query in WARM_QUERIES:
                    for render in ({}, {"render": "text"}):
                        if time.perf_counter() > deadline:
                            log.warning("warm-up over HTTP cut at %.0f s", WARM_BUDGET_S)
                            return self._warmed(answered)
                        params = {"query": query, **({"mode": mode} if mode else {}), "log": "0",
                                  "vault": one.config.vault_name, **render}
                        try:
                            conn = HTTPConnection(host, self.server_port, timeout=30)
                            conn.request("GET", "/search?" + urlencode(params),
                                         headers={"Host": f"{name}:{self.server_port}", CLIENT_HEADER: "cli"})
                            status = conn.getresponse()
                            status.read()
                            conn.close()
                            if status.status == 200:
                                answered += 1
                            else:
                                log.debug("warm-up search (%s) answered %d", mode, status.status)
                        except OSError as exc:
                            log.warning("not warmed up over HTTP: %s", exc)
                            return self._warmed(answered)
        log.info("%d warm-up searches over HTTP in %.2f s", answered, time.perf_counter() - t0)
        return self._warmed(answered)

    def _warmed(self, answered: int) -> int:
        """The warm-up's requests are not the clients' (/status counts those)."""
        with self._count_lock:
            self.requests = 0
        return answered

    # -- connections --------------------------------------------------------
    def process_request(self, request, client_address):
        if not self.connections.admit(request):
            return self._refuse(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.closed(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.closed(request)

    def _refuse(self, request) -> None:
        body = json.dumps({"error": f"busy: {MAX_CONNECTIONS} requests are being answered; try again"}).encode()
        try:
            request.settimeout(1)
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
                            b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s"
                            % (len(body), body))
        except OSError:
            pass
        self.shutdown_request(request)

    def service_actions(self) -> None:
        # Runs in the accept loop, at least every poll interval (0.5 s).
        self.connections.reap()

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):   # a client gone, or cut at its deadline
            log.debug("connection from %s ended: %s", client_address, sys.exc_info()[1])
            return
        log.exception("request from %s failed", client_address)


def server_record(host: str, port: int, vault: Path, config_warnings: tuple[tuple[str, str], ...] = (),
                  config_stamp: list[int] | None = None) -> dict:
    """What ``server.json`` says of this server. The thin client
    (vault_search.fast) trusts it only while the vault's settings file is
    the one this server read (``config_stamp``, taken before the read), and
    prints the settings' warnings as the full CLI would."""
    from .render import printable

    return {"pid": os.getpid(), "host": "127.0.0.1" if host in WILDCARD_HOSTS else host, "port": port,
            "vault": str(vault), "version": __version__, "started": time.time(), "config_stamp": config_stamp,
            "config_warnings": [f"warning: {file}: {printable(message)}" for file, message in config_warnings]}


# -- one resident process per index ----------------------------------------------

class AlreadyServedError(VaultSearchError):
    """Another `serve` or `watch` runs for this index."""


def claim_index(index_dir: Path, vault: Path, command: str) -> ResidentLock:
    """Become the one `serve`/`watch` of this index, or raise AlreadyServedError
    naming the process that is (and where it answers)."""
    from indexer.store import PRIVATE_FILE_MODE, make_private

    try:
        make_private(index_dir)
    except OSError:
        return ResidentLock(None)   # a read-only index folder: the writer will say why it cannot sync
    try:
        return resident.claim(index_dir, vault, command, PRIVATE_FILE_MODE)
    except resident.LockHeld as held:
        raise AlreadyServedError(_held_message(index_dir, held.holder)) from None


def _held_message(index_dir: Path, holder: dict) -> str:
    pid = holder.get("pid")
    who = f"pid {pid}" if pid else "another process"
    if holder.get("command") == "watch":
        return (f"this vault is already watched by {who} (`vault-search watch`); stop it first "
                "(`serve` keeps the index current itself)")
    info = resident.read_server_file(index_dir) or {}
    where = f" on {info.get('host')}:{info.get('port')}" if pid and info.get("pid") == pid else " (starting up)"
    return f"this vault is already served by {who}{where}; stop it first, or search through it"
