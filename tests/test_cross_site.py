"""What another site's page can make `serve` do, and what only vault-search's
own clients can: through real HTTP on 127.0.0.1 against a real `serve`.

A page anywhere can make the browser send a GET (an ``<img>``) or a form's
POST to a port it knows; it cannot add a custom header or a JSON body without
a CORS preflight, which the server refuses. So such a request is answered (it
cannot read the answer) but never written to the query log, and a browser's
own word that it comes from another site (``Sec-Fetch-Site``) is refused
outright; a POST must be JSON (415 otherwise). The clients that should log
still do: the thin client, the full CLI through the server, MCP over HTTP,
and curl with the header.
"""

import asyncio
import json
from http.client import HTTPConnection

import pytest

from tests.conftest import start_server, write
from vault_search.vaults import MAX_FULL_TEXT_BYTES


def http(port, path, *, method="GET", body=None, headers=None):
    """(status, raw body); the Host is this server, every other header as given."""
    conn = HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Host": f"127.0.0.1:{port}", **(headers or {})})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.fixture
def logging_server(vault, index_dir, cli):
    """A `serve` process over a vault whose settings turn the query log on."""
    write(vault / ".vault-search.toml", "log_queries = true\n")
    assert cli("index", "--no-embed").code == 0
    proc, info = start_server(vault, index_dir, "--no-watch")
    yield info["port"]
    proc.terminate()
    proc.communicate(timeout=30)


def logged(cli) -> list[str]:
    data = cli("log", "--json", "-n", "1000").json()
    assert data["enabled"]
    return [e["query"] for e in reversed(data["entries"])]


def requests_served(port) -> int:
    return json.loads(http(port, "/status")[1])["server"]["requests"]


def test_a_request_another_site_could_send_is_answered_but_never_logged(logging_server, cli, ledger):
    port = logging_server
    # curl, a script, a link typed in the address bar: answered, not logged.
    status, body = http(port, "/search?query=tea+ceremony")
    assert status == 200 and json.loads(body)["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"
    assert http(port, "/search?query=asked+to+be+logged&log=1")[0] == 200
    assert http(port, "/search?query=typed+in+the+address+bar", headers={"Sec-Fetch-Site": "none"})[0] == 200
    # An <img> (or a link) on another site's page: the browser says so, and it is refused.
    for site in ("cross-site", "same-site"):
        status, body = http(port, "/search?query=an+img+elsewhere", headers={
            "Sec-Fetch-Site": site, "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"})
        assert status == 403 and "another site's page" in json.loads(body)["error"], site
        assert http(port, "/get?path=Home.md", headers={"Sec-Fetch-Site": site})[0] == 403
    # A form's or fetch's simple POST: not JSON, so 415, and not run.
    text = json.dumps({"query": "a form elsewhere"})
    for kind in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", None):
        status, body = http(port, "/search", method="POST", body=text,
                            headers={"Content-Type": kind} if kind else {})
        assert status == 415 and "application/json" in json.loads(body)["error"], kind
    # The same from a page on another port of this machine: its Origin is not this server's.
    status, body = http(port, "/search", method="POST", body=text, headers={
        "Content-Type": "text/plain", "Origin": f"http://localhost:{port + 1}"})
    assert status == 403 and "another port" in json.loads(body)["error"]
    assert http(port, "/health", headers={"Origin": f"http://localhost:{port}"})[0] == 200   # this server's own
    assert logged(cli) == []

    # Requests no other site's page can send are logged: JSON POSTs, and the header (any value).
    status, _ = http(port, "/search", method="POST", body=json.dumps({"query": "posted as json"}),
                     headers={"Content-Type": "application/json"})
    assert status == 200
    assert http(port, "/search?query=curl+with+the+header", headers={"X-Vault-Search-Client": "curl"})[0] == 200
    assert http(port, "/search?query=the+page+as+you+type&log=0", headers={"X-Vault-Search-Client": "page"})[0] == 200
    assert logged(cli) == ["posted as json", "curl with the header"]
    ledger.record("security", "cross-site GET (<img>) and text/plain POST meant to write the query log",
                  "Sec-Fetch-Site cross-site/same-site: 403; any POST not application/json: 415; another port's "
                  "Origin: 403; a GET without X-Vault-Search-Client answered but never logged")


def test_the_thin_client_the_cli_and_mcp_over_http_still_log(logging_server, cli, ledger):
    port = logging_server
    assert http(port, "/search?query=an+img+elsewhere")[0] == 200   # not logged: the others are
    before = requests_served(port)
    fast = cli("search", "tea", "ceremony", "-n", "3")
    assert fast.code == 0 and "Kyoto trip" in fast.out
    full = cli("search", "deep", "work", "--format", "csv")   # the fast path hands csv to the full CLI
    assert full.code == 0 and "path" in full.out.splitlines()[0]
    assert requests_served(port) == before + 3   # both asked the server (and this /status)

    from mcp import Client

    async def session():
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            found = await client.call_tool("search", {"query": "sqlite wal", "mode": "fts"})
            assert not found.is_error

    asyncio.run(session())
    assert logged(cli) == ["tea ceremony", "deep work", "sqlite wal"]
    ledger.record("security", "the query log after requiring a same-origin proof",
                  "the thin client, the full CLI through the server and MCP over HTTP still log")


def test_full_texts_are_capped_per_answer(vault, index_dir, cli, ledger):
    # Six notes of about 1.2 MB, each with the word once: 7 MB of whole texts asked for.
    for i in range(6):
        write(vault / f"Big/big{i}.md", f"# Big {i}\nzebra crossing\n\n" + "".join(
            f"filler {i} line {n} " + "x" * 100 + "\n" for n in range(10_000)))
    assert cli("index", "--no-embed").code == 0
    proc, info = start_server(vault, index_dir, "--no-watch")
    port = info["port"]
    try:
        status, body = http(port, "/search?query=zebra&mode=fts&full=1&limit=10")
        assert status == 200
        data = json.loads(body)
        texts = [r.get("text") for r in data["results"]]
        assert len(texts) == 6 and texts[0] is not None
        assert sum(len(t.encode()) for t in texts if t) <= MAX_FULL_TEXT_BYTES < len(body) < MAX_FULL_TEXT_BYTES + 65536
        warning = next(w for w in data["warnings"] if w.startswith("full:"))
        cut = next(r for r in data["results"] if r.get("text") and r["path"] in warning)
        assert cut["text"].endswith("x") and f"cut after line {cut['text'].count(chr(10)) + 1}" in warning
        assert any(r.get("text") is None for r in data["results"]) and "no text for" in warning
        # The same cap for MCP over HTTP.
        from mcp import Client

        async def session():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                found = await client.call_tool("search", {"query": "zebra", "mode": "fts", "full": True})
                got = found.structured_content
                assert sum(len(r.get("text", "").encode()) for r in got["results"]) <= MAX_FULL_TEXT_BYTES
                assert any(w.startswith("full:") for w in got["warnings"])

        asyncio.run(session())
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    ledger.record("hostile input", "search full=1 over many large notes (HTTP and MCP)",
                  f"whole texts capped at {MAX_FULL_TEXT_BYTES >> 20} MB per answer, cut at a line, with a warning")


def test_json_bodies_are_valid_utf8_whatever_the_request_echoes(vault, index_dir, cli, ledger):
    assert cli("index", "--no-embed").code == 0
    proc, info = start_server(vault, index_dir, "--no-watch")
    port = info["port"]
    json_post = {"Content-Type": "application/json"}
    try:
        for path, body, code in (("/search", '{"query": "tea", "vault": "\\udcff"}', 409),
                                 ("/get", '{"path": "Home.md", "vault": "x\\ud800"}', 409),
                                 ("/search", '{"query": "tea", "boost": "tea\\ud800"}', 200),
                                 ("/multi-get", '{"paths": ["Home.md"], "vault": "\\udfff"}', 409)):
            status, raw = http(port, path, method="POST", body=body, headers=json_post)
            assert status == code, (path, body, raw[:200])
            answer = json.loads(raw.decode("utf-8"))   # strict: no lone surrogate encoded as bytes
            echoed = json.loads(body).get("vault") or json.loads(body)["boost"]
            assert echoed in json.dumps(answer, ensure_ascii=False), answer   # the same string comes back
        for query in ("/search?query=x&vault=%ED%A0%80", "/get?path=%ED%A0%80", "/search?zz%ED%A0%80=1"):
            status, raw = http(port, query)
            assert status >= 400 and json.loads(raw.decode("utf-8"))["error"], query
        assert http(port, "/search?query=%E6%95%B0%E6%8D%AE%E5%BA%93")[1].decode("utf-8")   # Chinese stays as it is
        assert "数据库".encode() in http(port, "/search?query=%E6%95%B0%E6%8D%AE%E5%BA%93")[1]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    ledger.record("hostile input", "lone surrogates (\\ud800) in a request the error or answer echoes",
                  "every JSON body valid UTF-8 (escaped as \\udXXX, the same string to a JSON reader)")


def test_only_a_proven_get_marks_a_search_followed_and_rerank_needs_the_proof(logging_server, cli, ledger):
    port = logging_server
    proof = {"X-Vault-Search-Client": "curl"}
    assert http(port, "/search?query=tea+ceremony", headers=proof)[0] == 200

    def followed() -> bool:
        return cli("log", "--json").json()["entries"][0]["followed"]

    assert http(port, "/get?path=Notes/Travel/Kyoto%20trip.md")[0] == 200   # an <img> or a script elsewhere
    assert http(port, "/multi-get?paths=Notes/Travel/Kyoto%20trip.md")[0] == 200
    assert followed() is False
    assert http(port, "/get?path=Notes/Travel/Kyoto%20trip.md", headers=proof)[0] == 200
    assert followed() is True
    # The judge reads the notes' text and is paid for: only a proven request may call it.
    status, body = http(port, "/search?query=tea&rerank=1")
    assert status == 400 and "X-Vault-Search-Client" in json.loads(body)["error"]
    ledger.record("security", "a GET without the proof header that would mark a search followed or call the judge",
                  "answered without marking anything followed; rerank refused in one line")
