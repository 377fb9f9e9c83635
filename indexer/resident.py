"""Who keeps an index current: the resident process (`serve`, `watch`, an
`mcp` session) that holds it, found by the locks it holds for its life, and
the refusal an index built for another vault gives.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .errors import VaultMismatchError
from .serverfile import RESIDENT_LOCK, alive, lock_holder, read_server_file

# Each `mcp` session (several may share an index, beside a `serve`) holds its
# own MCP_LOCK % pid for its life: it keeps the index current as they do.
MCP_LOCK = "mcp.%d.lock"


def resident(index_dir: str | os.PathLike) -> tuple[int, str] | None:
    """The `serve`, `watch` or `mcp` that keeps this index current, as (pid, command), else None.

    It holds ``serve.lock`` (an `mcp` session its own ``mcp.PID.lock``) for
    its life (the kernel lets go however it ends), so a lock held is a live
    one; a server from before that lock existed shows only in
    ``server.json``, with a live pid.
    """
    import fcntl

    path = Path(index_dir) / RESIDENT_LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return _server_from_before_the_lock(Path(index_dir)) or _mcp_session(Path(index_dir))
    except OSError:
        return _mcp_session(Path(index_dir))
    try:
        # Probed, never waited for: a shared lock for an instant, released at once by the close.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return _mcp_session(Path(index_dir))
    except BlockingIOError:
        holder = lock_holder(fd)
        pid = holder.get("pid")
        return (pid if isinstance(pid, int) else 0), str(holder.get("command") or "serve")
    except OSError:   # a file system without locks
        return _server_from_before_the_lock(Path(index_dir))
    finally:
        os.close(fd)


def _mcp_session(index_dir: Path) -> tuple[int, str] | None:
    """A live `mcp` session of this index, as (pid, "mcp"), else None. A
    lock file left by a killed session is free, so it counts for nothing."""
    import fcntl

    for path in sorted(index_dir.glob(MCP_LOCK.replace("%d", "*"))):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)   # probed, released at once by the close
        except BlockingIOError:
            pid = path.name.split(".")[1]
            return (int(pid) if pid.isdigit() else 0), "mcp"
        except OSError:
            continue
        finally:
            os.close(fd)
    return None


class SessionLock:
    """What an `mcp` session holds for its life, so a rebuild for another
    vault is refused under it (``resident``) as under `serve` and `watch`."""

    def __init__(self, index_dir: str | os.PathLike):
        import fcntl

        self.path = Path(index_dir) / (MCP_LOCK % os.getpid())
        self.fd: int | None = None
        try:
            Path(index_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)   # this session's own file: never waits
        except OSError:   # a read-only index folder, or no locks: unguarded, as `serve` there
            self.release()

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.remove(self.path)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "SessionLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def mismatch(index_dir: Path, recorded: str, vault: Path) -> VaultMismatchError:
    """The refusal of an index built for another vault. It names --rebuild
    only with what that replaces, and never while a `serve` or `watch` keeps
    that index (another process: a resident finding its own index taken over
    may be told how to take it back)."""
    mismatch = f"the index at {index_dir} belongs to the vault {recorded}, not {vault}"
    separate = "use another --index-dir (or unset VAULT_SEARCH_INDEX_DIR) for a separate index of this vault"
    holder = resident(index_dir)
    if holder is not None and holder[0] != os.getpid():
        return VaultMismatchError(f"{mismatch}, and {who(holder)} uses it; {separate}")
    return VaultMismatchError(f"{mismatch}; {separate}, or `vault-search index --rebuild` to replace the index "
                              f"of {recorded} with this vault's")


def who(holder: tuple[int, str]) -> str:
    pid, command = holder
    return f"`vault-search {command}`" + (f" (pid {pid})" if pid else "")


def _server_from_before_the_lock(index_dir: Path) -> tuple[int, str] | None:
    """A `serve` that holds no ``serve.lock`` (from before it existed): its
    ``server.json`` names a live pid and a port that takes a connection. Both,
    so a stale file whose pid was reused never refuses a rebuild for good."""
    import socket

    info = read_server_file(index_dir) or {}
    pid, host, port = info.get("pid"), info.get("host"), info.get("port")
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid() or not alive(pid):
        return None
    if not isinstance(host, str) or not isinstance(port, int) or not 0 < port < 65536:
        return None
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError:
        return None
    return pid, "serve"
