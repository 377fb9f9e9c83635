"""The `vault-search` command's entry point, and its fast path.

A search that a running `vault-search serve` can answer costs little more
than starting Python: this module reads the arguments itself, finds the
server from its ``server.json`` (``indexer.locate`` resolves the vault and
its index folder with ``os`` alone), sends one HTTP request over a raw
socket and writes the answer as it comes. The server renders it with the
same function the full CLI prints with (``render.cli_output``), so the
output is the same, byte for byte. It imports no click, no ``http.client``
(which pulls in ``email`` and ``ssl``), no settings reader.

Anything else goes to the full CLI (``vault_search.cli``), which also
answers when the fast path cannot: no server, a dead or busy one, a server
for another vault or index, an option this path does not read, a format
other than text and JSON, an answer that is not a clean 200, a changed
settings file. The full CLI then asks the server itself or searches in this
process, and says what is wrong in its own words.
"""

from __future__ import annotations

import json
import os
import socket
import sys

SERVER_FILE = "server.json"   # vault_search.server.SERVER_FILE
VAULT_ENV, INDEX_DIR_ENV = "VAULT_SEARCH_VAULT", "VAULT_SEARCH_INDEX_DIR"
CONNECT_TIMEOUT_S = 2.0   # a port that does not answer: the full CLI takes over
ANSWER_TIMEOUT_S = 30.0   # client.TIMEOUT_S
MAX_ANSWER = 64 << 20

# search's options this path reads: flag -> (takes a value, repeatable); each
# goes to the server under its name (``--min-score`` -> ``min_score``).
_OPTIONS = {
    "--mode": (True, False), "-n": (True, False), "--limit": (True, False), "--json": (False, False),
    "--format": (True, False), "--tag": (True, True), "--path": (True, False), "--after": (True, False),
    "--before": (True, False), "--where": (True, True), "--exclude-stale": (False, False),
    "--recency-half-life": (True, False), "--min-score": (True, False), "--related": (False, False),
    "--explain": (False, False), "--full": (False, False), "--boost": (True, False), "--budget-tokens": (True, False),
    "--today": (False, False),
    "--last": (True, False),
}


def _param(flag: str) -> str:
    return "limit" if flag == "-n" else flag.lstrip("-").replace("-", "_")


_MODES = ("hybrid", "fts", "vector")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def main() -> None:
    """The console script: the fast path when it can answer, else the full CLI."""
    code = fast_search(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from .cli import main as full

    full()


def parse(argv: list[str]) -> tuple[dict, dict] | None:
    """(global options, search parameters) of a ``search`` command line the
    fast path can send as it is, else None. Checks what click would check
    (choices and ranges), so that anything click refuses goes to click."""
    globals_: dict = {}
    i = 0
    while i < len(argv) and argv[i] != "search":
        name, value, i = _option(argv, i, ("--vault", "--index-dir", "--color"))
        if name is None or not value:
            return None
        globals_[name] = value
    if i >= len(argv):
        return None
    params: dict = {}
    words: list[str] = []
    i += 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            words += argv[i + 1:]
            break
        if arg.startswith("-") and arg != "-":
            name, value, i = _option(argv, i, _OPTIONS)
            if name is None:
                return None
            key, (takes, repeatable) = _param(name), _OPTIONS[name]
            if takes and not value:
                return None   # "" means something else to click than to a query string
            if repeatable:
                params.setdefault(key, []).append(value)
            else:
                params[key] = value if takes else "1"
            continue
        words.append(arg)
        i += 1
    fmt = params.pop("format", None) or ("json" if params.pop("json", None) else "text")
    params.pop("json", None)
    if not words or fmt not in ("text", "json") or not _checked(params):
        return None
    params["query"] = " ".join(words)
    params["render"] = fmt
    return globals_, params


def _option(argv: list[str], i: int, known) -> tuple[str | None, str, int]:
    """(option name, its value or "", index after it) of ``argv[i]``; name None
    when it is not one of ``known`` or its value is missing."""
    arg = argv[i]
    if arg.startswith("--") and "=" in arg:
        name, value = arg.split("=", 1)
        return (name, value, i + 1) if name in known and _takes(known, name) else (None, "", i + 1)
    if arg in known:
        if not _takes(known, arg):
            return arg, "", i + 1
        if i + 1 >= len(argv):
            return None, "", i + 1
        return arg, argv[i + 1], i + 2
    if arg.startswith("-n") and len(arg) > 2 and "-n" in known:   # -n5
        return "-n", arg[2:], i + 1
    return None, "", i + 1


def _takes(known, name: str) -> bool:
    return known[name][0] if isinstance(known, dict) else True


def _checked(params: dict) -> bool:
    """The values click would accept (the server checks them again)."""
    if params.get("mode", "hybrid") not in _MODES:
        return False
    limit = params.get("limit", "10")
    if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= 1000):
        return False
    for flag, low, high, low_open in (("--min-score", 0.0, 1.0, False), ("--recency-half-life", 0.0, None, True)):
        key = _param(flag)
        if key in params:
            text = params[key]
            if not all(c in "0123456789.eE+-" for c in text):
                return False   # "nan", "inf", "1_0": click's float() takes them; let click say what it does
            try:
                number = float(text)
            except ValueError:
                return False
            if number < low or (low_open and number == low) or (high is not None and number > high):
                return False
    return True


def locate(globals_: dict) -> tuple[str, str] | None:
    """(vault, index folder) as ``indexer.config.load_config`` resolves them,
    or None where that needs more than ``os`` (an index folder named without
    its vault: the index's own record of its vault decides)."""
    from indexer import locate as loc

    vault = globals_.get("--vault") or os.environ.get(VAULT_ENV) or None
    index_dir = globals_.get("--index-dir") or os.environ.get(INDEX_DIR_ENV) or None
    if vault is None:
        if index_dir is not None:
            return None
        try:
            vault = loc.nearest_vault(os.path.realpath(os.getcwd()))
        except OSError:
            return None
    else:
        vault = os.path.realpath(os.path.expanduser(vault))
    if not os.path.isdir(vault):
        return None
    index = os.path.realpath(os.path.expanduser(index_dir)) if index_dir else loc.default_index_dir(vault)
    return vault, index


def fast_search(argv: list[str]) -> int | None:
    """Answer ``argv`` through a running server: the exit code, or None when
    the full CLI must answer (nothing has been written then)."""
    parsed = parse(argv)
    if parsed is None:
        return None
    globals_, params = parsed
    where = locate(globals_)
    if where is None:
        return None
    vault, index_dir = where
    server = _server(vault, index_dir)
    if server is None:
        return None
    stdout = sys.stdout
    if (getattr(stdout, "encoding", "") or "").lower().replace("-", "") != "utf8" or not hasattr(stdout, "buffer"):
        return None
    color = globals_.get("--color", "auto")
    if color not in ("auto", "always", "never"):
        return None   # click says what it takes
    if params["render"] == "text" and (color == "always" or (color == "auto" and _isatty(stdout)
                                                             and not os.environ.get("NO_COLOR"))):
        params["color"] = "1"
    params["vault"] = vault
    body = _ask(server, params)
    if body is None:
        return None
    for line in server["config_warnings"]:
        sys.stderr.write(line + "\n")
    try:
        stdout.buffer.write(body)
        stdout.flush()
    except BrokenPipeError:   # `| head`: what the reader wanted, it got
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())
        return 1
    return 0


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _server(vault: str, index_dir: str) -> dict | None:
    """The live server's record for this vault and index, if it can be trusted
    as it is: its process lives, it serves this vault, and the vault's settings
    file is the one it read."""
    try:
        with open(os.path.join(index_dir, SERVER_FILE), "rb") as fh:
            info = json.loads(fh.read())
        pid, port = int(info["pid"]), int(info["port"])
        host = str(info["host"])
        warnings = [str(w) for w in info.get("config_warnings", [])]
        config_stamp = info.get("config_stamp", "missing")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if info.get("vault") != vault or host not in ("127.0.0.1", "::1", "localhost"):
        return None
    if not alive(pid):
        return None
    from indexer.locate import settings_stamp

    if settings_stamp(vault) != config_stamp:
        return None   # edited since the server read it (or an old server.json): the full CLI reads it
    return {"pid": pid, "host": host, "port": port, "config_warnings": warnings}


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts: whoever asks it
    still checks that the answer comes from that pid)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):   # ProcessLookupError among them
        return False
    return True


def quote(text: str) -> str:
    """``text`` percent-encoded as UTF-8 for a query string."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode("utf-8"))


def query_string(params: dict) -> str:
    return "&".join(f"{quote(k)}={quote(v)}" for k, values in params.items()
                    for v in (values if isinstance(values, list) else [values]))


def _ask(server: dict, params: dict) -> bytes | None:
    """The body of a 200 answer from this server's process, else None."""
    host, port = server["host"], server["port"]
    try:
        # An argument or path that is not UTF-8 (a surrogate) raises here: the
        # full CLI says what it does with it.
        request = (f"GET /search?{query_string(params)} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                   "X-Vault-Search-Client: cli\r\nConnection: close\r\n\r\n").encode("ascii")
        # The host as bytes: a str is encoded with the idna codec, another import.
        with socket.create_connection((host.encode("ascii"), port), timeout=CONNECT_TIMEOUT_S) as sock:
            sock.settimeout(ANSWER_TIMEOUT_S)
            sock.sendall(request)
            chunks, size = [], 0
            while size <= MAX_ANSWER:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except (OSError, UnicodeError):
        return None
    return _body(b"".join(chunks), server["pid"])


def _body(answer: bytes, pid: int) -> bytes | None:
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    if len(status) < 2 or status[1] != "200":
        return None
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("x-vault-search-pid") != str(pid) or headers.get("content-length") != str(len(body)):
        return None   # another process on the port, or a cut answer
    if not headers.get("content-type", "").startswith("text/plain"):
        return None
    return body
