"""The resident server's protocol: the files `serve` keeps in the index
folder, and how a client tells a live server from a stale record.

- ``server.json`` (``SERVER_FILE``): where a `serve` answers (pid, host,
  port, vault, ...), written whole (a temp file renamed into place) once it
  listens, removed when it stops, only by the process it names.
- ``serve.lock`` (``LOCK_FILE``): locked (flock) for the life of a `serve`
  or `watch`, holding {"pid", "command"} of the one that holds it. The
  kernel lets go however the process ends, so a stale lock file never
  blocks the next one.
- liveness: the pid in ``server.json`` is alive and ``/health`` answers,
  from that pid, for this vault (a reused pid or port is no server of ours).

The standard library only, and little of it at import time: the fast path
(``fast.py``) imports this module on every `vault-search search`.
The files' names, how they are read and whether a pid lives come from
``indexer/serverfile.py`` (as light), which the rebuild's checks share.
"""

from __future__ import annotations

import json
import os

from indexer.serverfile import RESIDENT_LOCK as LOCK_FILE
from indexer.serverfile import SERVER_FILE, alive, lock_holder, read_server_file

LOG_FILE = "serve.log"   # where `vault-search open` sends the output of a server it starts
# Sent by vault-search's own clients (the CLI, the search page): "cli" keeps
# the CLI's flag names in the server's errors.
CLIENT_HEADER = "X-Vault-Search-Client"
# On a rendered answer: the pid of the process that answered (the fast path
# checks it against server.json).
PID_HEADER = "X-Vault-Search-Pid"
# /search?render=FORMAT: the server answers with what `search --format FORMAT`
# prints, which the fast path writes as it comes.
RENDERED_FORMATS = ("text", "json")
LOCAL_HOSTS = ("127.0.0.1", "::1", "localhost")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
# How long a client waits for a search's answer.
ANSWER_TIMEOUT_S = 30.0
# A server answers /health in milliseconds; a port that hangs (a stopped
# process, a reused pid) costs this much once, and the caller goes on without it.
PROBE_TIMEOUT_S = 2.0


# -- server.json -------------------------------------------------------------------

def write_server_file(index_dir: str | os.PathLike, data: dict) -> str:
    """``data`` as the index's ``server.json``, replaced whole (mode 0600); its path."""
    import tempfile

    path = os.path.join(index_dir, SERVER_FILE)
    fd, tmp = tempfile.mkstemp(dir=index_dir, prefix=SERVER_FILE, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
    return path


def remove_server_file(index_dir: str | os.PathLike) -> None:
    """Remove ``server.json`` if it is this process's (a later server's stays)."""
    data = read_server_file(index_dir)
    if data is not None and data.get("pid") == os.getpid():
        try:
            os.unlink(os.path.join(index_dir, SERVER_FILE))
        except OSError:
            pass


# -- liveness ----------------------------------------------------------------------

def serves(health: object, pid: int, vault: str | os.PathLike) -> bool:
    """Whether a ``/health`` answer comes from process ``pid`` and names ``vault``."""
    return isinstance(health, dict) and health.get("pid") == pid and \
        str(vault) in (health.get("vaults") or [health.get("vault")])


def find_server(index_dir: str | os.PathLike, vault: str | os.PathLike) -> tuple[str, int] | None:
    """(host, port) of a live server for this vault and index, else None: the
    pid in server.json is alive and /health answers, from that pid, for this vault."""
    from http.client import HTTPException

    info = read_server_file(index_dir) or {}
    try:
        pid, host, port = int(info["pid"]), str(info["host"]), int(info["port"])
    except (ValueError, KeyError, TypeError):
        return None
    if info.get("vault") != str(vault) or not alive(pid):
        return None
    try:
        status, health = get_json((host, port), "/health", timeout=PROBE_TIMEOUT_S)
    except (OSError, ValueError, HTTPException):
        return None
    if status != 200 or not serves(health, pid, vault):
        return None
    return host, port


def get_json(server: tuple[str, int], target: str, timeout: float) -> tuple[int, dict]:
    """GET ``target`` (path and query) from ``server`` as vault-search's CLI: (status, JSON answer)."""
    from http.client import HTTPConnection

    host, port = server
    conn = HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", target, headers={"Host": f"{host}:{port}", CLIENT_HEADER: "cli"})
        response = conn.getresponse()
        return response.status, json.loads(response.read().decode("utf-8"))
    finally:
        conn.close()


# -- serve.lock --------------------------------------------------------------------

class LockHeld(Exception):
    """Another process is the resident one of this index; ``holder`` says who ({"pid", "command"})."""

    def __init__(self, holder: dict):
        super().__init__(holder)
        self.holder = holder


class ResidentLock:
    """``serve.lock``, held (or not: ``fd`` None) until ``release``."""

    def __init__(self, fd: int | None):
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "ResidentLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim(index_dir: str | os.PathLike, vault: str | os.PathLike, command: str, mode: int = 0o600) -> ResidentLock:
    """Take ``serve.lock`` for this process as ``command`` ("serve" or "watch"),
    or raise LockHeld naming the process that has it: one that holds the lock,
    or a live server from before the lock existed. A folder where the file
    cannot be made, or a file system without locks, leaves it unguarded."""
    import fcntl

    try:
        fd = os.open(os.path.join(index_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, mode)
    except OSError:
        return ResidentLock(None)   # a read-only index folder: the writer will say why it cannot sync
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock_holder(fd)
        os.close(fd)
        raise LockHeld(holder) from None
    except OSError:
        return ResidentLock(fd)     # a file system without locks: as before, unguarded
    # No lock held, but a live server from before this lock existed still answers?
    if find_server(index_dir, vault) is not None:
        os.close(fd)
        raise LockHeld({"pid": (read_server_file(index_dir) or {}).get("pid"), "command": "serve"})
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": command}).encode(), 0)
    return ResidentLock(fd)
