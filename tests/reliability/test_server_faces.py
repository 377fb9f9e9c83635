"""The HTTP and MCP faces follow one set of rules: the same limit range and
wording, booleans spelled any usual way, JSON for every answer (other methods
included), the package version, and a wildcard bind that answers the
machine's own addresses. Real `vault-search serve` / `mcp` processes."""

from __future__ import annotations

import asyncio
import json
import socket
from http.client import HTTPConnection

from conftest import CLI, start_server

from indexer import __version__

LIMIT_ERROR = "limit must be between 1 and 1000"


def http(port, path, *, method="GET", body=None, headers=None, address="127.0.0.1"):
    conn = HTTPConnection(address, port, timeout=30)
    json_body = {"Content-Type": "application/json"} if method == "POST" else {}   # a POST must say JSON
    try:
        conn.request(method, path, body=body, headers={"Host": f"127.0.0.1:{port}", **json_body, **(headers or {})})
        r = conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None), r
    finally:
        conn.close()


def test_http_limit_outside_1_to_1000_is_refused(served, ledger):
    port = served["port"]
    for bad in ("0", "-5", "1001", "100000"):
        status, data, _ = http(port, f"/search?query=tea&limit={bad}")
        assert (status, data) == (400, {"error": LIMIT_ERROR}), bad
    status, data, _ = http(port, "/search", method="POST", body=json.dumps({"query": "tea", "limit": 0}))
    assert (status, data) == (400, {"error": LIMIT_ERROR})
    for good in ("1", "1000"):
        status, data, _ = http(port, f"/search?query=tea&limit={good}")
        assert status == 200 and 1 <= len(data["results"]) <= int(good)
    status, tags, _ = http(port, "/tags")
    assert status == 200 and set(tags) == {"tags"} and {"tag": "memory", "notes": 4} in tags["tags"]
    ledger.record("hostile input", "out-of-range limit (0, -5, 1001, 100000) over HTTP and MCP",
                  f"refused: '{LIMIT_ERROR}' (HTTP 400, MCP tool error), as the CLI refuses it", tries=6)


def test_http_booleans_any_usual_spelling_else_400(served):
    port = served["port"]
    for yes in ("1", "true", "True", "TRUE", "yes", "On"):
        status, data, _ = http(port, f"/search?query=tea&explain={yes}")
        assert status == 200 and "explain" in data, yes
    for no in ("0", "false", "False", "NO", "off"):
        status, data, _ = http(port, f"/search?query=tea&explain={no}")
        assert status == 200 and "explain" not in data, no
    for bad in ("maybe", "2", "tru"):
        status, data, _ = http(port, f"/search?query=tea&explain={bad}")
        assert status == 400 and data["error"].startswith("explain must be true or false"), bad
    status, data, _ = http(port, "/search?query=tea&exclude_stale=perhaps")
    assert status == 400 and "exclude_stale" in data["error"]
    status, data, _ = http(port, "/search", method="POST", body=json.dumps({"query": "tea", "explain": True}))
    assert status == 200 and "explain" in data
    status, data, _ = http(port, "/search", method="POST", body=json.dumps({"query": "tea", "related": "nah"}))
    assert status == 400 and "related" in data["error"]


def test_other_methods_answer_json_405_with_allow(served, ledger):
    port = served["port"]
    methods = ("PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "BREW")
    for method in methods:
        status, data, r = http(port, "/search?query=tea", method=method, body=b"" if method != "TRACE" else None)
        assert status == 405 and r.getheader("Allow") == "GET, HEAD, POST", method
        assert r.getheader("Content-Type").startswith("application/json") and method in data["error"]
    # HEAD answers like GET, without the body.
    status, data, r = http(port, "/health", method="HEAD")
    assert status == 200 and data is None and int(r.getheader("Content-Length")) > 0
    assert http(port, "/health")[0] == 200                     # still serving
    ledger.record("hostile input", "HTTP methods other than GET, POST and HEAD",
                  "405 JSON with an Allow header (never Python's HTML 501 page)", tries=len(methods))


def test_mcp_limit_rule_and_version(vault, index_dir, cli):
    from mcp import Client, StdioServerParameters

    assert cli("index", "--no-embed").code == 0

    async def session():
        params = StdioServerParameters(command=str(CLI), args=["--vault", str(vault), "--index-dir",
                                                                str(index_dir), "mcp"])
        async with Client(params, read_timeout_seconds=60) as client:
            assert client.server_info.version == __version__ and client.server_info.name == "vault-search"
            for bad in (0, -5, 1001, 100000):
                r = await client.call_tool("search", {"query": "tea", "limit": bad})
                assert r.is_error and r.content[0].text.endswith(": " + LIMIT_ERROR), (bad, r.content)
            r = await client.call_tool("search", {"query": "tea", "limit": 1000})
            assert not r.is_error and r.structured_content["results"]

    asyncio.run(session())


def test_wildcard_bind_answers_this_machines_addresses_and_warns(vault, index_dir, cli, ledger):
    assert cli("index", "--no-embed").code == 0
    proc, info = start_server(vault, index_dir, "--no-watch", "--host", "0.0.0.0", "--allow-host", "vault.lan")
    port = info["port"]
    try:
        assert info["host"] == "127.0.0.1"                     # the thin client still goes through loopback
        # 127.0.0.2 is one of this machine's addresses (the loopback net), not in
        # any list: it is accepted because the request arrived on it.
        status, data, _ = http(port, "/health", address="127.0.0.2", headers={"Host": f"127.0.0.2:{port}"})
        assert status == 200 and data["ok"], data
        for host in (f"vault.lan:{port}", f"localhost:{port}", f"127.0.0.1:{port}", f"{socket.gethostname()}:{port}"):
            assert http(port, "/health", headers={"Host": host})[0] == 200, host
        assert http(port, "/health", headers={"Origin": f"http://vault.lan:{port}"})[0] == 200
        for headers in ({"Host": f"evil.example:{port}"}, {"Host": f"127.0.0.3:{port}"},
                        {"Origin": "http://evil.example"}, {"Host": f"vault.lan:{port + 1}"}):
            status, data, _ = http(port, "/health", address="127.0.0.2", headers={"Host": f"127.0.0.2:{port}",
                                                                                 **headers})
            assert status == 403 and data["error"].startswith("forbidden"), headers
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "warning:" in err and "0.0.0.0" in err and "beyond this machine" in err, err
    ledger.record("security", "`serve --host 0.0.0.0` (every interface)",
                  "answers the machine's own addresses and --allow-host names, still 403 for a foreign Host or "
                  "Origin; warns that the index is exposed")


def test_serve_loopback_prints_no_exposure_warning(vault, index_dir, cli):
    assert cli("index", "--no-embed").code == 0
    proc, info = start_server(vault, index_dir, "--no-watch")
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert "beyond this machine" not in err


def test_a_nul_byte_in_an_mcp_path_is_a_one_line_tool_error(vault, index_dir, cli, tmp_path, ledger):
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    assert cli("index", "--no-embed").code == 0
    calls = [("get", {"path": "Home\x00.md"}), ("get", {"path": "\x00"}), ("get", {"path": "Notes/\x00/x.md:1-2"}),
             ("multi_get", {"paths": ["Home\x00.md"]}), ("links", {"path": "Home\x00"}),
             ("similar", {"note": "Home\x00"}), ("ls", {"folder": "Notes\x00"})]

    async def ask(client):
        for tool, args in calls:
            r = await client.call_tool(tool, args)
            text = r.content[0].text
            assert r.is_error and "\n" not in text and text.startswith(f"Error executing tool {tool}: "), (tool, text)
            if tool == "get":
                assert text.endswith("path contains a NUL byte"), text
        assert not (await client.call_tool("get", {"path": "Home.md"})).is_error   # still serving

    errlog = tmp_path / "mcp-stderr.txt"
    with errlog.open("w") as err:
        params = StdioServerParameters(command=str(CLI), args=["--vault", str(vault), "--index-dir", str(index_dir),
                                                                "mcp"])

        async def over_stdio():
            async with Client(stdio_client(params, errlog=err), read_timeout_seconds=60) as client:
                await ask(client)

        asyncio.run(over_stdio())
    assert "Traceback" not in errlog.read_text() and "unexpected" not in errlog.read_text(), errlog.read_text()

    proc, info = start_server(vault, index_dir, "--no-watch")
    try:
        async def over_http():
            async with Client(f"http://127.0.0.1:{info['port']}/mcp") as client:
                await ask(client)

        asyncio.run(over_http())
    finally:
        proc.terminate()
        _, served_err = proc.communicate(timeout=30)
    assert "Traceback" not in served_err and "unexpected" not in served_err, served_err[-2000:]
    ledger.record("hostile input", "a NUL byte in an MCP tool's path (stdio and HTTP)",
                  "a one-line tool error (get: 'path contains a NUL byte'); no traceback in the server's log",
                  tries=len(calls) * 2)
