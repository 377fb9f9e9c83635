"""``vault-search serve``: JSON over HTTP on 127.0.0.1 for one vault.

Endpoints (GET with query parameters, or POST with a JSON body):

    /health                         {"ok": true, ...}
    /search?query=...&mode=&limit=&tag=&tag=&path=&after=&before=&where=&where=
            &exclude_stale=&recency_half_life=&related=&explain=&rerank=
                                    the same JSON as `vault-search search --json`
    /get?path=...&start=&end=       {path, start_line, end_line, total_lines, text}
    /links?path=...                 outlinks, backlinks and unresolved links of a note
    /tags                           every tag with its note count
    /status                         `vault-search status --json` plus server state

Requests whose Host or Origin is not this machine get 403 (a web page in a
browser cannot reach the index through DNS rebinding or a cross-site
request). The server writes ``server.json`` (pid, host, port) in the index
folder so `vault-search search` can find it.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from indexer import __version__
from indexer.errors import NoteNotFoundError, PathOutsideVaultError, UsageValueError, VaultSearchError

from .service import SearchService

log = logging.getLogger("vault_search.server")

SERVER_FILE = "server.json"
MAX_BODY = 1 << 20
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


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


class _Handler(BaseHTTPRequestHandler):
    server_version = f"vault-search/{__version__}"
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle or trickling connection does not hold a thread for ever

    def log_message(self, fmt, *args):  # quiet: one debug line per request
        log.debug("%s %s", self.address_string(), fmt % args)

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()

    # -- security ---------------------------------------------------------
    def _allowed(self) -> str | None:
        """None when the request may proceed, else why not."""
        allowed = self.server.allowed_hosts
        host_header = self.headers.get("Host")
        if not host_header:
            return "missing Host header"
        host, port = split_host(host_header)
        if host not in allowed or (port is not None and port != str(self.server.server_port)):
            return f"Host {host_header!r} is not this server"
        origin = self.headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.hostname not in allowed:
                return f"Origin {origin!r} is not local"
        return None

    # -- dispatch ---------------------------------------------------------
    def _handle(self) -> None:
        # Read the whole declared body first, whatever happens next, so no
        # byte of it is ever taken for a second request on this connection.
        raw_length = self.headers.get("Content-Length") or "0"
        if not raw_length.isdigit():
            return self._send(400, {"error": "bad Content-Length"}, close=True)
        length = int(raw_length)
        if length > MAX_BODY or self.headers.get("Transfer-Encoding"):
            return self._send(413, {"error": "request body too large or chunked"}, close=True)
        body_bytes = self.rfile.read(length) if length else b""
        refusal = self._allowed()
        if refusal:
            return self._send(403, {"error": f"forbidden: {refusal}"}, close=True)
        url = urlsplit(self.path)
        params: dict = {k: v if len(v) > 1 or k in LIST_PARAMS else v[0] for k, v in parse_qs(url.query).items()}
        if self.command == "POST":
            try:
                body = json.loads(body_bytes or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError):
                return self._send(400, {"error": "body is not JSON"})
            if not isinstance(body, dict):
                return self._send(400, {"error": "body must be a JSON object"})
            params.update(body)
        self.server.count_request()
        route = {"/health": self._health, "/search": self._search, "/get": self._get,
                 "/status": self._status, "/links": self._links, "/tags": self._tags}.get(url.path.rstrip("/") or "/")
        if route is None:
            return self._send(404, {"error": f"no endpoint {url.path}; use /search, /get, /links, /tags, "
                                             "/status or /health"})
        try:
            self._send(200, route(params))
        except WrongVaultError as exc:
            self._send(409, {"error": str(exc)})
        except (UsageValueError, ValueError, TypeError) as exc:
            self._send(400, {"error": str(exc)})
        except PathOutsideVaultError as exc:
            self._send(403, {"error": str(exc)})
        except NoteNotFoundError as exc:
            self._send(404, {"error": str(exc)})
        except VaultSearchError as exc:
            self._send(500, {"error": str(exc)})
        except Exception as exc:  # never let one request kill the server
            log.exception("request failed")
            self._send(500, {"error": f"internal error ({exc.__class__.__name__})"})

    def _send(self, status: int, data: dict, close: bool = False) -> None:
        body = json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if close or status >= 400:
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    # -- endpoints --------------------------------------------------------
    def _health(self, params) -> dict:
        return {"ok": True, "vault": str(self.server.service.config.vault), "pid": os.getpid(),
                "version": __version__}

    def _search(self, params) -> dict:
        service = self.server.service
        vault = _text(params, "vault")
        if vault is not None and vault != str(service.config.vault):
            raise WrongVaultError(f"this server serves {service.config.vault}, not {vault}")
        tags = _str_list(params, "tag", "tags")
        where = _str_list(params, "where")
        half_life = _text(params, "recency_half_life")
        try:
            half_life = float(half_life) if half_life not in (None, "") else None
        except ValueError:
            raise UsageValueError("recency_half_life must be a number of days") from None
        rerank = _flag(_one(params, "rerank"))
        settings = None
        if rerank:
            from .rerank import RerankSettings

            # The endpoint and key come from the server's own configuration
            # only: a request never chooses where note text (or the key) goes.
            settings = RerankSettings.load()
        response = service.search(
            _text(params, "query", "q") or "", mode=_text(params, "mode") or None,
            limit=_int(params, "limit", 10), tags=tags, path=_text(params, "path") or None,
            after=_text(params, "after") or None, before=_text(params, "before") or None,
            explain=_flag(_one(params, "explain")), rerank=rerank, rerank_settings=settings, where=where,
            exclude_stale=_flag(_one(params, "exclude_stale")), recency_half_life=half_life,
            related=_flag(_one(params, "related")))
        return response.to_dict()

    def _links(self, params) -> dict:
        path = _text(params, "path")
        if not path:
            raise UsageValueError("links needs a path")
        return self.server.service.links(path)

    def _tags(self, params) -> dict:
        return {"tags": [{"tag": t, "notes": n} for t, n in self.server.service.tags()]}

    def _get(self, params) -> dict:
        path = _text(params, "path")
        if not path:
            raise UsageValueError("get needs a path")
        start, end = _int(params, "start", None), _int(params, "end", None)
        return self.server.service.get(path, start, end).to_dict()

    def _status(self, params) -> dict:
        data = self.server.service.status()
        data["server"]["requests"] = self.server.requests
        return data


LIST_PARAMS = ("tag", "tags", "where")


def _str_list(params: dict, *names) -> list[str]:
    value = next((params[n] for n in names if n in params), [])
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageValueError(f"{names[0]} must be a string or a list of strings")
    return value


def _one(params: dict, *names):
    for name in names:
        value = params.get(name)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            return value
    return None


class WrongVaultError(UsageValueError):
    """The client asked for another vault than this server's (409)."""


def _text(params: dict, *names) -> str | None:
    value = _one(params, *names)
    if value is None:
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise UsageValueError(f"{names[0]} must be text")
    return str(value)


def _int(params: dict, name: str, default):
    value = _one(params, name)
    if value in (None, ""):
        return default
    try:
        number = int(str(value))
    except ValueError:
        raise UsageValueError(f"{name} must be a whole number") from None
    if not -10**9 < number < 10**9:
        raise UsageValueError(f"{name} is out of range")
    return number


def _flag(value) -> bool:
    return value in (True, 1, "1", "true", "yes", "on")


class VaultHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, service: SearchService, host: str, port: int):
        self.service = service
        super().__init__((host, port), _Handler)
        self.requests = 0
        self._count_lock = threading.Lock()
        self.allowed_hosts = set(LOCAL_NAMES)
        if not is_loopback(host) and host not in ("0.0.0.0", "::"):
            self.allowed_hosts.add(host.lower())

    def count_request(self) -> None:
        with self._count_lock:
            self.requests += 1


def write_server_file(index_dir: Path, host: str, port: int, vault: Path) -> Path:
    path = Path(index_dir) / SERVER_FILE
    data = {"pid": os.getpid(), "host": "127.0.0.1" if host in ("0.0.0.0", "::", "") else host, "port": port,
            "vault": str(vault), "version": __version__, "started": time.time()}
    fd, tmp = tempfile.mkstemp(dir=index_dir, prefix=SERVER_FILE, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
    return path


def remove_server_file(index_dir: Path) -> None:
    path = Path(index_dir) / SERVER_FILE
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def serve(service: SearchService, host: str = "127.0.0.1", port: int = 0,
          ready: threading.Event | None = None) -> VaultHTTPServer:
    """Start serving in a background thread; returns the server (``.server_port``)."""
    httpd = VaultHTTPServer(service, host, port)
    write_server_file(service.config.index_dir, host, httpd.server_port, service.config.vault)
    thread = threading.Thread(target=httpd.serve_forever, name="vault-search-http", daemon=True)
    thread.start()
    if ready:
        ready.set()
    return httpd
