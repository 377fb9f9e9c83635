"""The `vault-search` command's entry point, and its fast path.

A search that a running `vault-search serve` can answer costs little more
than starting Python: this module finds the server from its ``server.json``
(``indexer.locate`` resolves the vault and its index folder with ``os``
alone), reads the arguments itself as click would (by the table of the
search options that `serve` put there, ``cli.search_flags``: this module
names none of them), sends one HTTP request over a raw
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

import _socket
import os
import sys

from .argv import GLOBAL_OPTIONS, hoist_globals, option_at
from .resident import (
    ANSWER_TIMEOUT_S,
    CLIENT_HEADER,
    LOCAL_HOSTS,
    PID_HEADER,
    RENDERED_FORMATS,
    alive,
    read_server_file,
)

VAULT_ENV, INDEX_DIR_ENV = "VAULT_SEARCH_VAULT", "VAULT_SEARCH_INDEX_DIR"
CONNECT_TIMEOUT_S = 2.0   # a port that does not answer: the full CLI takes over
MAX_ANSWER = 64 << 20

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def main() -> None:
    """The console script: the fast path when it can answer, else the full CLI."""
    code = fast_search(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from .cli import main as full

    full()


def parse_globals(argv: list[str]) -> tuple[dict, list[str]] | None:
    """(global options, the arguments after ``search``) of a ``search``
    command line, else None. The global options may come after ``search``
    too, as the full CLI takes them (``hoist_globals``)."""
    try:
        argv = hoist_globals(argv, lambda command: ())
    except ValueError:
        return None          # the full CLI says what is missing
    globals_: dict = {}
    i = 0
    while i < len(argv) and argv[i] != "search":
        name, value, i = option_at(argv, i, GLOBAL_OPTIONS)
        if name is None or not value:
            return None
        globals_[name] = value
    if i >= len(argv):
        return None
    return globals_, argv[i + 1:]


def parse(args: list[str], flags: dict) -> dict | None:
    """The search parameters of ``search``'s arguments, if the fast path can
    send them as they are, else None. ``flags`` is the table `serve` put in
    server.json (``cli.search_flags``: flag -> [parameter, takes a value,
    repeatable, what click checks]), so this reads a command line as click
    would, and checks what click would check: anything click refuses, or
    that this path does not send, goes to click."""
    params: dict = {}
    words: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            words += args[i + 1:]
            break
        if arg.startswith("-") and arg != "-":
            name, value, i = option_at(args, i, flags)
            if name is None:
                return None
            key, takes, repeatable, _ = flags[name]
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
    if not words or fmt not in RENDERED_FORMATS or not _checked(params, flags):
        return None
    params["query"] = " ".join(words)
    params["render"] = fmt
    return params


def _checked(params: dict, flags: dict) -> bool:
    """The values click would accept (the server checks them again)."""
    checks = {key: check for key, _, _, check in flags.values() if check}
    for key, value in params.items():
        check = checks.get(key)
        if check and not all(_accepts(check, v) for v in (value if isinstance(value, list) else [value])):
            return False
    return True


def _accepts(check: dict, text: str) -> bool:
    """Whether click takes ``text`` for an option it checks so: ``choices``,
    or ``int``/``float`` within [min, max, min_open, max_open]. Conservative:
    what click might take in another spelling (" 5", "nan", "1_0") goes to
    click, which says what it does with it."""
    if "choices" in check:
        return text in check["choices"]
    if "int" in check:
        if not (text.isascii() and text.isdigit()):
            return False
        number: float = int(text)
        low, high, low_open, high_open = check["int"]
    else:
        if not all(c in "0123456789.eE+-" for c in text):
            return False
        try:
            number = float(text)
        except ValueError:
            return False
        low, high, low_open, high_open = check["float"]
    return (low is None or number > low or (number == low and not low_open)) and \
        (high is None or number < high or (number == high and not high_open))


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
    split = parse_globals(argv)
    where = locate(split[0]) if split is not None else None
    server = _server(*where) if where is not None else None
    if split is None or where is None or server is None:
        return None
    (globals_, args), vault = split, where[0]
    try:
        params = parse(args, server["flags"])
    except (ValueError, TypeError, KeyError, IndexError):   # a table this path cannot read
        return None
    if params is None:
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
    info = read_server_file(index_dir) or {}
    try:
        pid, port = int(info["pid"]), int(info["port"])
        host = str(info["host"])
        warnings = [str(w) for w in info.get("config_warnings", [])]
        config_stamp = info.get("config_stamp", "missing")
        flags = info["search_flags"]
    except (ValueError, KeyError, TypeError):
        return None   # no search_flags: a server `serve` did not start (or an older one); the full CLI asks it
    if info.get("vault") != vault or host not in LOCAL_HOSTS or not isinstance(flags, dict):
        return None
    from indexer import __version__

    if info.get("version") != __version__:
        return None   # a server of another release may read the command line otherwise: the full CLI asks it
    if not alive(pid):
        return None
    from indexer.locate import settings_stamp

    if settings_stamp(vault) != config_stamp:
        return None   # edited since the server read it (or an old server.json): the full CLI reads it
    return {"pid": pid, "host": host, "port": port, "config_warnings": warnings, "flags": flags}


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
                   f"{CLIENT_HEADER}: cli\r\nConnection: close\r\n\r\n").encode("ascii")
        sock = connect(host, port, CONNECT_TIMEOUT_S)
        try:
            sock.settimeout(ANSWER_TIMEOUT_S)
            sock.sendall(request)
            chunks, size = [], 0
            while size <= MAX_ANSWER:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            sock.close()
    except (OSError, UnicodeError):
        return None
    return _body(b"".join(chunks), server["pid"])


def connect(host: str, port: int, timeout: float) -> _socket.socket:
    """``socket.create_connection`` with the C module alone: the ``socket``
    module would import selectors, enum and array, a third of this path's
    imports. Each address of ``host`` in turn, the last error raised."""
    error: OSError = OSError(f"no address for {host}")
    # The host as bytes: a str is encoded with the idna codec, another import.
    for family, kind, proto, _, address in _socket.getaddrinfo(host.encode("ascii"), port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


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
    if headers.get(PID_HEADER.lower()) != str(pid) or headers.get("content-length") != str(len(body)):
        return None   # another process on the port, or a cut answer
    if not headers.get("content-type", "").startswith("text/plain"):
        return None
    return body
