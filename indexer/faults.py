"""Fault injection for the reliability suite (tests/reliability/).

``VAULT_SEARCH_FAULT=NAME[:N]`` makes the process kill itself with SIGKILL
the N-th time (default: the first) it reaches the named point, exactly as a
power cut or the OOM killer would stop it there. Unset (always, outside the
tests) every point is a dictionary lookup and nothing else.

Points: ``scan`` (after the vault was scanned, before anything is written),
``fts-batch`` (after a batch of notes was committed), ``resolve`` (before the
final transaction: links, deletions, bookkeeping), ``embed-batch`` (after a
batch of vectors was committed), ``matrix-files`` (after the two matrix
files were renamed into place, before the db records them), ``matrix-ids``
(between the two renames).
"""

from __future__ import annotations

import os
import signal

ENV = "VAULT_SEARCH_FAULT"
_seen: dict[str, int] = {}


def point(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    target, _, nth = wanted.partition(":")
    if target != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
