"""Fault injection for the reliability suite (tests/reliability/).

``VAULT_SEARCH_FAULT=NAME[:N][=ACTION]`` acts the N-th time (default: the
first) the process reaches the named point. ACTION is ``kill`` (default:
SIGKILL, exactly as a power cut or the OOM killer would stop it there),
``oserror`` (raise ``OSError(ENOSPC)``, as a full disk would), ``interrupt``
(raise ``KeyboardInterrupt``, as Ctrl-C would), ``dberror`` (raise
``sqlite3.OperationalError("disk I/O error")``) or ``errno:NAME`` (raise
``OSError`` with that errno: ``errno:EACCES``, ``errno:EIO``). Unset (always, outside the
tests) every point is a dictionary lookup and nothing else.

Points: ``scan`` (after the vault was scanned, before anything is written),
``fts-batch`` (after a batch of notes was committed), ``resolve`` (before the
final transaction: links, deletions, bookkeeping), ``embed-batch`` (after a
batch of vectors was committed), ``matrix-files`` (after the two matrix
files were renamed into place, before the db records them), ``matrix-ids``
(between the two renames), ``publish-batch`` (a publish during the embedding
pass, after its files were renamed into place, before its COMMIT), ``read`` (opening a note to read it), ``swap``
(a rebuild, before it replaces the old index), ``swapped`` (a rebuild, after it
replaced the old index, before its catch-up sync), and one inside every
write transaction just before its COMMIT (``store.transaction``): ``txn:NAME``
in the index's (``store.WRITE_TRANSACTIONS`` lists the names), ``cache-get``,
``cache-put``, ``cache-trim`` and ``cache-clear`` in the embedding cache's,
``query-log`` in the query log's.
"""

from __future__ import annotations

import errno
import os
import signal

ENV = "VAULT_SEARCH_FAULT"
_seen: dict[str, int] = {}


def point(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    spec, _, action = wanted.partition("=")
    target, _, nth = spec.partition(":") if not spec.startswith("txn:") else _txn_spec(spec)
    if target != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] != int(nth or 1) and not (action in ("", "kill") and _seen[name] > int(nth or 1)):
        return
    if action in ("", "kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "oserror":
        raise OSError(errno.ENOSPC, "No space left on device (injected)")
    elif action == "interrupt":
        raise KeyboardInterrupt
    elif action == "dberror":
        import sqlite3

        raise sqlite3.OperationalError("disk I/O error (injected)")
    elif action.startswith("errno:"):
        code = getattr(errno, action[6:])
        raise OSError(code, f"{os.strerror(code)} (injected)")
    else:
        raise ValueError(f"{ENV}: unknown action {action!r}")


def _txn_spec(spec: str) -> tuple[str, str, str]:
    """``txn:NAME[:N]`` keeps its ``txn:`` prefix in the point's name."""
    name, _, nth = spec[4:].partition(":")
    return f"txn:{name}", ":", nth


def reset() -> None:
    """Forget how often each point was reached (tests that inject in-process)."""
    _seen.clear()
