"""What the server does for the search page without a browser: the page's
files and their policy, the opt-in CORS for a plugin inside Obsidian, and
`vault-search open` starting or finding the server. Real HTTP on 127.0.0.1."""

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from indexer.embed import HashEmbedder
from tests.conftest import CLI, SAMPLE_VAULT, copy_tree
from vault_search import Index

OBSIDIAN = "app://obsidian.md"


@pytest.fixture
def served(vault, index_dir):
    from vault_search.server import VaultHTTPServer
    from vault_search.service import SearchService

    with Index.open(vault, index_dir, create=True, embedder=HashEmbedder(32)) as idx:
        idx.sync(embed=False)
    service = SearchService(vault, index_dir, watch=False, warm=False)
    servers = []

    def start(**kwargs):
        httpd = VaultHTTPServer(service, "127.0.0.1", 0, **kwargs).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_port}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()
    service.close()


def call(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_the_page_and_its_files_come_from_the_package_with_a_strict_policy(served):
    base = served()
    status, headers, body = call(f"{base}/?q=Deep%20Work")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'<script src="/app.js"></script>' in body and b"http" not in body.replace(b'"http-equiv', b"")
    assert headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    for path, kind in (("/app.js", "text/javascript"), ("/app.css", "text/css")):
        status, headers, body = call(base + path)
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
        assert b"https://" not in body and b"//cdn" not in body   # nothing from elsewhere
    assert call(f"{base}/", method="POST")[0] == 404           # the page is read, never written to
    assert call(f"{base}/", headers={"Host": "evil.example"})[0] == 403


def test_cors_for_a_plugin_inside_obsidian_only_when_allowed(served):
    closed = served()
    status, headers, _ = call(f"{closed}/search?q=tea", headers={"Origin": OBSIDIAN})
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    assert call(f"{closed}/search?q=tea", method="OPTIONS", headers={"Origin": OBSIDIAN})[0] == 403

    opened = served(allow_origins=[OBSIDIAN])
    status, headers, body = call(f"{opened}/search?q=tea+ceremony", headers={"Origin": OBSIDIAN})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == OBSIDIAN and headers["Vary"] == "Origin"
    assert json.loads(body)["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"
    status, headers, _ = call(f"{opened}/search", method="OPTIONS",
                              headers={"Origin": OBSIDIAN, "Access-Control-Request-Method": "POST"})
    assert status == 204 and "POST" in headers["Access-Control-Allow-Methods"]
    # The plugin may send the header that gets its searches logged; its page is
    # another site to the browser, which says so, and it is still answered.
    assert "X-Vault-Search-Client" in headers["Access-Control-Allow-Headers"]
    status, headers, _ = call(f"{opened}/search?q=tea", headers={"Origin": OBSIDIAN, "Sec-Fetch-Site": "cross-site",
                                                                 "X-Vault-Search-Client": "obsidian-plugin"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == OBSIDIAN
    # Any other origin is still refused, and gets no CORS header.
    status, headers, _ = call(f"{opened}/search?q=tea", headers={"Origin": "https://evil.example"})
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    assert call(f"{opened}/search", method="OPTIONS", headers={"Origin": "https://evil.example"})[0] == 403


def test_open_starts_a_server_once_and_then_finds_it(vault, index_dir):
    env = {**os.environ, "VAULT_SEARCH_VAULT": str(vault), "VAULT_SEARCH_INDEX_DIR": str(index_dir)}
    assert subprocess.run([str(CLI), "index", "--model", "hash:32"], env=env, capture_output=True).returncode == 0
    first = subprocess.run([str(CLI), "open", "deep", "work", "--no-browser"], env=env, capture_output=True,
                           text=True, timeout=150)
    info = json.loads((index_dir / "server.json").read_text())
    try:
        assert first.returncode == 0, first.stderr
        assert "starting vault-search serve" in first.stderr
        assert first.stdout.strip() == f"http://127.0.0.1:{info['port']}/?q=deep%20work"
        again = subprocess.run([str(CLI), "open", "--no-browser"], env=env, capture_output=True, text=True,
                               timeout=60)
        assert again.stdout.strip() == f"http://127.0.0.1:{info['port']}/" and "starting" not in again.stderr
        status, headers, body = call(again.stdout.strip())
        assert status == 200 and b"vault-search" in body
    finally:
        os.kill(info["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 20
        while (index_dir / "server.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)


def test_several_vaults_answer_the_page_by_name_with_one_explain(tmp_path):
    """What the page reads with `serve --vault A --vault B`: each vault's name in
    /status (the name ?vault= takes), and, for a search of every vault asked to
    explain itself, the words each vault searched and each result's own ranks,
    with no "explain is per vault" warning."""
    from vault_search.server import VaultHTTPServer
    from vault_search.service import SearchService

    notes = copy_tree(SAMPLE_VAULT, tmp_path / "notes")
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "kyoto.md").write_text("# Kyoto plan\nBook the tea ceremony in Gion.\n", encoding="utf-8")
    services = [SearchService(v, tmp_path / f"i-{v.name}", watch=False, warm=False) for v in (notes, memory)]
    httpd = VaultHTTPServer(services, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{httpd.server_port}"
    try:
        status = json.loads(call(f"{base}/status")[2])
        assert [(s["vault_name"], s["vault"]) for s in status["vaults"]] == [("notes", str(notes)),
                                                                            ("memory", str(memory))]
        assert json.loads(call(f"{base}/status?vault=memory")[2])["vault_name"] == "memory"
        code, _, body = call(f"{base}/search?q=the+tea+ceremony&mode=fts&explain=1")
        answer = json.loads(body)
        assert code == 200 and not any("explain" in w for w in answer["warnings"])
        explain = answer["explain"]
        assert explain["terms"] == ["tea", "ceremony"] and set(explain["vaults"]) == {"notes", "memory"}
        # Every field one vault's explain has, merged: both vaults read "tea ceremony" alike.
        assert set(explain) - {"vaults"} == set(explain["vaults"]["memory"])
        assert explain["fts_match"] == explain["vaults"]["memory"]["fts_match"]
        assert explain["rrf_k"] == explain["vaults"]["notes"]["rrf_k"] is not None
        assert [(r["vault"], r["path"]) for r in explain["ranks"]] == [(r["vault"], r["path"])
                                                                       for r in answer["results"]]
        for row in explain["ranks"]:
            own = next(r for r in explain["vaults"][row["vault"]]["ranks"] if r["path"] == row["path"])
            assert row["ranks"] == own["ranks"] and row["scores"] == own["scores"]
        assert "explain" not in json.loads(call(f"{base}/search?q=tea+ceremony&mode=fts")[2])
    finally:
        httpd.shutdown()
        httpd.server_close()
        for service in services:
            service.close()


def test_serve_answers_its_warm_up_searches_before_it_says_it_is_ready(vault, index_dir, monkeypatch):
    """`serve` runs a search in each mode and language, as JSON and as the
    CLI's text, over its own socket before server.json says it is ready
    (so an agent's first query costs what the next ones do); none is logged."""
    from vault_search import resident
    from vault_search.server import VaultHTTPServer
    from vault_search.service import WARM_QUERIES, SearchService

    (vault / ".vault-search.toml").write_text("log_queries = true\n", encoding="utf-8")
    with Index.open(vault, index_dir, create=True, embedder=HashEmbedder(32)) as idx:
        idx.sync()
    service = SearchService(vault, index_dir, watch=False, warm=False, embedder=HashEmbedder(32))
    httpd = VaultHTTPServer(service, "127.0.0.1", 0)
    events = []
    write, warm = resident.write_server_file, httpd.warm_requests
    monkeypatch.setattr(resident, "write_server_file", lambda *a: (events.append("ready"), write(*a))[-1])
    monkeypatch.setattr(httpd, "warm_requests", lambda: (events.append(answered := warm()), answered)[-1])
    try:
        httpd.start(warm=True)
        base = f"http://127.0.0.1:{httpd.server_port}"
        assert events == [3 * len(WARM_QUERIES) * 2, "ready"]   # hybrid, fts, vector; JSON and text
        status, _, body = call(f"{base}/log", headers={"X-Vault-Search-Client": "cli"})
        assert status == 200 and json.loads(body)["entries"] == []
        status, _, body = call(f"{base}/status")
        assert status == 200 and json.loads(body)["server"]["requests"] == 2   # /log and /status: not the warm-up
        status, _, body = call(f"{base}/search?query=index+notes&mode=fts", headers={"X-Vault-Search-Client": "cli"})
        assert status == 200 and json.loads(body)["results"]
        status, _, body = call(f"{base}/log", headers={"X-Vault-Search-Client": "cli"})
        assert [e["query"] for e in json.loads(body)["entries"]] == ["index notes"]   # a client's search is
    finally:
        httpd.shutdown()
        httpd.server_close()
        service.close()


def test_a_keyword_index_is_warmed_in_the_default_mode_too(vault, index_dir):
    """Without vectors the default mode still differs from fts (a question in
    the other language is translated): the warm-up asks both, and loads the
    translation dictionary."""
    from vault_search.server import VaultHTTPServer
    from vault_search.service import WARM_QUERIES, SearchService

    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
    service = SearchService(vault, index_dir, watch=False, warm=False)
    httpd = VaultHTTPServer(service, "127.0.0.1", 0).start()
    try:
        assert httpd.warm_requests() == 2 * len(WARM_QUERIES) * 2   # default and fts; JSON and text
    finally:
        httpd.shutdown()
        httpd.server_close()
        service.close()
