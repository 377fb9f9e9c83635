"""Small leaks and costs: `get` of a file that is not a note says no more than
"no such note", and `status` does not re-hash the vectors file on every call."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

from conftest import start_server, write

import indexer.vectors
from vault_search import Index


def http_get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_get_of_a_file_that_is_not_a_note_is_a_plain_404(vault, index_dir, cli, ledger):
    write(vault / "secret.json", '{"token": "x"}')
    assert cli("index", "--no-embed").code == 0
    proc, info = start_server(vault, index_dir)
    try:
        exists = http_get(info["port"], "/get?path=secret.json")
        missing = http_get(info["port"], "/get?path=nothing-here.json")
        config = http_get(info["port"], "/get?path=.obsidian/app.json")
        misspelt = http_get(info["port"], "/search?query=tea&limt=3")
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert exists[0] == missing[0] == config[0] == 404
    assert exists[1]["error"].replace("secret", "X") == missing[1]["error"].replace("nothing-here", "X")
    assert "token" not in json.dumps(exists[1])
    assert misspelt == (400, {"error": "/search takes no parameter 'limt' (did you mean 'limit'?)"})
    ledger.record("security", "`get` of a file that is not a note (HTTP)",
                  "404 worded like a missing file; whether it exists is not revealed")


def test_status_checks_the_vectors_file_once_per_change(vault, index_dir, cli, monkeypatch):
    assert cli("index", "--model", "hash:32").code == 0
    calls = []
    real = indexer.vectors.check_files
    monkeypatch.setattr(indexer.vectors, "check_files", lambda *a, **k: calls.append(1) or real(*a, **k))
    with Index.open(vault, index_dir) as idx:
        assert idx.status().vectors.startswith("ok")
        assert idx.status().vectors.startswith("ok") and len(calls) == 1   # the second call hashed nothing
        matrix = index_dir / "vectors.npy"
        shutil.copy(matrix, index_dir / "saved.npy")
        matrix.write_bytes(matrix.read_bytes()[:-40])
        assert "rows" in idx.status().vectors or "unreadable" in idx.status().vectors
        shutil.copy(index_dir / "saved.npy", matrix)
        assert idx.status().vectors.startswith("ok")
