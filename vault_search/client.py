"""The thin client: find a running `vault-search serve` for a vault and ask it.

Kept free of heavy imports (no jieba, numpy or model), so a CLI call that a
server answers costs a small process plus one round trip on 127.0.0.1.
"""

from __future__ import annotations

import json
from http.client import HTTPConnection, HTTPException
from pathlib import Path
from urllib.parse import urlencode

from .fast import alive

SERVER_FILE = "server.json"
TIMEOUT_S = 30.0
# A server answers /health in milliseconds; a port that hangs (a stopped
# process, a reused pid) costs this much once, and the search runs here.
PROBE_TIMEOUT_S = 2.0


def find_server(index_dir: Path, vault: Path) -> tuple[str, int] | None:
    """(host, port) of a live server for this vault and index, else None: the
    pid in server.json is alive and /health answers, from that pid, for this vault."""
    try:
        info = json.loads((Path(index_dir) / SERVER_FILE).read_text())
        pid, host, port = int(info["pid"]), str(info["host"]), int(info["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if info.get("vault") != str(vault):
        return None
    if not alive(pid):
        return None
    try:
        status, health = request((host, port), "/health", {}, timeout=PROBE_TIMEOUT_S)
    except (OSError, ValueError, HTTPException):
        return None
    if status != 200 or not isinstance(health, dict) or health.get("pid") != pid or \
            str(vault) not in (health.get("vaults") or [health.get("vault")]):
        return None
    return host, port


def query_string(params: dict) -> str:
    """``params`` as a URL query, leaving out what was not set. ``0`` and
    ``0.0`` are values (``0.0 == False`` in Python, and --min-score 0 means
    "no cut"), so False is told apart by identity."""
    return urlencode({k: v for k, v in params.items()
                      if v is not None and v is not False and v != "" and v != []}, doseq=True)


def request(server: tuple[str, int], path: str, params: dict, timeout: float = TIMEOUT_S) -> tuple[int, dict]:
    host, port = server
    query = query_string(params)
    conn = HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", f"{path}?{query}", headers={"Host": f"{host}:{port}", "X-Vault-Search-Client": "cli"})
        response = conn.getresponse()
        return response.status, json.loads(response.read().decode("utf-8"))
    finally:
        conn.close()
