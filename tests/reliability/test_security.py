"""Secrets never leak, paths stay inside the vault, the server stays local."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import CLI, start_server, write

SECRET = "sk-test-SECRET-4f9a1c"


class EchoJudge(ThreadingHTTPServer):
    """An endpoint that echoes everything it was sent, key included, in its errors."""

    daemon_threads = True

    def __init__(self, status: int):
        self.status = status
        super().__init__(("127.0.0.1", 0), _Echo)


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        echo = json.dumps({"error": f"bad key {self.headers.get('Authorization')}",
                           "choices": [{"message": {"content": f"scores? {self.headers.get('Authorization')}"}}]})
        body = echo.encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(params=[401, 200], ids=["rejects-the-key", "answers-nonsense"])
def echo_judge(request):
    server = EchoJudge(request.param)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_the_api_key_never_appears_in_output_logs_or_status(vault, index_dir, echo_judge, ledger):
    env = {**os.environ, "VAULT_SEARCH_RERANK_URL": echo_judge, "VAULT_SEARCH_RERANK_MODEL": "m",
           "VAULT_SEARCH_RERANK_API_KEY": SECRET}
    base = [str(CLI), "--vault", str(vault), "--index-dir", str(index_dir)]
    seen = []
    r = subprocess.run(base + ["index", "--model", "hash:32"], capture_output=True, text=True, env=env)
    seen += [r.stdout, r.stderr]
    for fmt in ("--json", "--explain"):
        r = subprocess.run(base + ["search", "数据库", "--rerank", fmt], capture_output=True, text=True, env=env)
        assert r.returncode == 0
        seen += [r.stdout, r.stderr]
    assert "reranking skipped" in "".join(seen)
    server, info = start_server(vault, index_dir, "--no-watch", "-v", env=env)
    try:
        port = info["port"]
        for path in ("/search?query=%E6%95%B0%E6%8D%AE%E5%BA%93&rerank=1&explain=1", "/status", "/nope"):
            conn = HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
            seen.append(conn.getresponse().read().decode())
            conn.close()
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
        seen += [out, err]
    seen.append(json.dumps(json.loads(subprocess.run(base + ["status", "--json"], capture_output=True, text=True,
                                                     env=env).stdout)))
    assert all(SECRET not in text and SECRET[3:] not in text for text in seen)
    ledger.record("security", "rerank API key echoed back by a hostile endpoint",
                  "never in CLI output, JSON, server responses, server log or status")


def test_credentials_in_a_rerank_url_are_not_echoed(cli):
    r = cli("search", "x", "--rerank", "--rerank-url", "ftp://user:hunter2@example.com/v1", "--rerank-model", "m")
    assert r.code == 2 and "hunter2" not in r.err and "hunter2" not in r.out


def test_links_and_get_stay_inside_the_vault(vault, index_dir, tmp_path, cli, ledger):
    outside = write(tmp_path / "outside" / "secret.md", "# Secret\n\nthe vault must not serve this\n")
    os.symlink(outside, vault / "Notes" / "escape.md")
    os.symlink(tmp_path / "outside", vault / "escape-dir")
    cli("index", "--no-embed")
    assert "secret" not in cli("search", "vault must not serve", "--json").out.lower() or \
        "escape" not in cli("search", "vault must not serve", "--json").out
    for args in (("get", "Notes/escape.md"), ("get", "../outside/secret.md"), ("get", str(outside)),
                 ("links", "../outside/secret.md"), ("links", str(outside)), ("get", "escape-dir/secret.md")):
        r = cli(*args)
        assert r.code != 0 and "the vault must not serve" not in r.out, args
    ledger.record("security", "paths and symlinks leading out of the vault (get, links, index)",
                  "refused with a one-line error; never indexed or served", tries=7)
