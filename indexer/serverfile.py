"""The files a resident process keeps in the index folder, as both packages
read them: ``server.json`` (where a `serve` answers) and ``serve.lock``
(held by a `serve` or `watch` for its life, holding {"pid", "command"}), and
whether a pid still lives.

``os`` and ``json`` only: the console script's fast path reads these on
every `vault-search search` (``vault_search/resident.py`` builds the
server protocol on them, ``indexer/resident.py`` the rebuild's checks).
"""

from __future__ import annotations

import json
import os

SERVER_FILE = "server.json"
RESIDENT_LOCK = "serve.lock"


def read_server_file(index_dir: str | os.PathLike) -> dict | None:
    """The index's ``server.json`` as an object, else None (none, unreadable, not an object)."""
    try:
        with open(os.path.join(index_dir, SERVER_FILE), "rb") as fh:
            return json_object(fh.read())
    except OSError:
        return None


def lock_holder(fd: int) -> dict:
    """What the holder of a resident lock wrote in it ({"pid", "command"}), else {}."""
    try:
        return json_object(os.pread(fd, 4096, 0) or b"{}") or {}
    except OSError:
        return {}


def json_object(data: bytes) -> dict | None:
    """``data`` as a JSON object, else None."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


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
