"""The thin client: ask a running `vault-search serve` for a vault.

Kept free of heavy imports (no jieba, numpy or model), so a CLI call that a
server answers costs a small process plus one round trip on 127.0.0.1. How
a live server is found is the resident protocol's (``resident.find_server``).
"""

from __future__ import annotations

from urllib.parse import urlencode

from .resident import ANSWER_TIMEOUT_S, get_json


def query_string(params: dict) -> str:
    """``params`` as a URL query, leaving out what was not set. ``0`` and
    ``0.0`` are values (``0.0 == False`` in Python, and a threshold of 0 means
    "no cut"), so False is told apart by identity."""
    return urlencode({k: v for k, v in params.items()
                      if v is not None and v is not False and v != "" and v != []}, doseq=True)


def request(server: tuple[str, int], path: str, params: dict,
            timeout: float = ANSWER_TIMEOUT_S) -> tuple[int, dict]:
    """GET ``path`` with ``params`` from ``server``: (status, JSON answer)."""
    return get_json(server, f"{path}?{query_string(params)}", timeout)
