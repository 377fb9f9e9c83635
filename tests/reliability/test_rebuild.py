"""`index --rebuild` builds beside the live index and swaps it in only when
complete: a bad model name, an error, Ctrl-C or SIGKILL during the rebuild
leave the old index searchable and unchanged."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time

import pytest
from conftest import CLI, SAMPLE_VAULT, copy_tree, http_search, served_paths, start_server, write
from conftest import run_cli as run

from reliability.test_crash import snapshot

MODEL = "hash:64"


def hits(vault, index, query):
    r = run(vault, index, "search", query, "--mode", "fts", "--format", "paths", "--no-server")
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def prepared(tmp_path):
    vault = copy_tree(SAMPLE_VAULT, tmp_path / "vault")
    index = tmp_path / "index"
    assert run(vault, index, "index", "--model", MODEL).returncode == 0
    before = snapshot(index)
    # A change the rebuild would pick up, so "unchanged" is visible.
    write(vault / "Later.md", "# Later\n\nnumbatlater only after a rebuild\n")
    return vault, index, before


def test_rebuild_with_a_bad_model_keeps_the_old_index(tmp_path, ledger):
    vault, index, before = prepared(tmp_path)
    r = run(vault, index, "index", "--rebuild", "--model", "bogus")
    assert r.returncode != 0 and "unknown model 'bogus'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert snapshot(index) == before
    assert hits(vault, index, "数据库") and not hits(vault, index, "numbatlater")
    assert not (index / "rebuild").exists()
    ledger.record("versions", "`index --rebuild --model bogus`",
                  "refused in one line; the old index is untouched and searchable")


def test_interrupted_or_failed_rebuild_keeps_the_old_index(tmp_path, ledger):
    vault, index, before = prepared(tmp_path)
    for fault, code in (("txn:notes=interrupt", 130), ("txn:embeddings=oserror", 1), ("swap=errno:EIO", 1)):
        r = run(vault, index, "index", "--rebuild", fault=fault)
        assert r.returncode == code, (fault, r)
        assert snapshot(index) == before, fault
        assert not (index / "rebuild").exists(), fault
    assert hits(vault, index, "数据库") and not hits(vault, index, "numbatlater")
    ledger.record("crash", "Ctrl-C, disk full or an I/O error during `index --rebuild`",
                  "the rebuild is discarded; the old index is unchanged and searchable", tries=3)


def test_killed_rebuild_keeps_the_old_index_and_the_next_rebuild_completes(tmp_path, ledger):
    vault, index, before = prepared(tmp_path)
    for point in ("fts-batch", "embed-batch", "swap"):
        r = run(vault, index, "index", "--rebuild", fault=point)
        assert r.returncode == -signal.SIGKILL, r
        assert snapshot(index) == before, point
        assert hits(vault, index, "数据库") and not hits(vault, index, "numbatlater")
    done = run(vault, index, "index", "--rebuild")
    assert done.returncode == 0, done.stderr
    assert hits(vault, index, "numbatlater") == ["Later.md"]
    assert not (index / "rebuild").exists()
    clean = tmp_path / "clean"
    assert run(vault, clean, "index", "--model", MODEL).returncode == 0
    assert snapshot(index) == snapshot(clean)   # the rebuild kept the model, and equals a clean build
    ledger.record("crash", "SIGKILL during `index --rebuild` (FTS batch, embedding, swap)",
                  "the old index is unchanged and searchable; the next rebuild equals a clean build", tries=3)


def test_a_second_rebuild_is_refused_while_one_runs(tmp_path, ledger):
    from vault_search import Index

    vault, index, before = prepared(tmp_path)
    running = Index.open(vault, index, rebuild=True)   # a rebuild under way (not yet synced)
    try:
        r = run(vault, index, "index", "--rebuild")
        assert r.returncode == 1 and "a rebuild of this index is already running" in r.stderr, r
        assert (index / "rebuild").exists()   # the running one's files are untouched
    finally:
        running.close()
    assert snapshot(index) == before
    done = run(vault, index, "index", "--rebuild")
    assert done.returncode == 0, done.stderr
    assert hits(vault, index, "numbatlater") == ["Later.md"]
    ledger.record("concurrency", "two `index --rebuild` at once",
                  "the second is refused in one line; the first's files are untouched")


# -- a rebuild beside a running `serve` or `watch` ------------------------------

def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not seen within {timeout} s")


def all_served(port, words):
    return all(served_paths(port, word, mode="fts") == [f"Inbox/during-{i}.md"] for i, word in enumerate(words))


def stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


def notes_arrive_after_the_scan(vault, seen=None):
    """A rebuild's progress callback: at its first step (the vault scanned,
    nothing written yet) three new notes are saved; with ``seen``, it waits
    until ``seen(query)`` finds each one (the running server took them into
    the old index) before the rebuild goes on."""
    words = [f"quokkamid{i}" for i in range(3)]

    def progress(done, total):
        if (vault / "Inbox/during-0.md").exists():
            return
        for i, word in enumerate(words):
            write(vault / f"Inbox/during-{i}.md", f"# During {i}\n\n{word} saved while the rebuild ran\n")
        if seen is not None:
            wait_for(lambda: all(seen(w) for w in words), timeout=20)

    return words, progress


def test_notes_saved_during_a_rebuild_are_in_the_index_it_leaves(tmp_path, ledger):
    from vault_search import Index

    vault, index, _ = prepared(tmp_path)
    words, progress = notes_arrive_after_the_scan(vault)
    with Index.open(vault, index, rebuild=True) as idx:   # `index --rebuild`, its progress hook
        idx.sync(progress=progress)
    for i, word in enumerate(words):
        assert hits(vault, index, word) == [f"Inbox/during-{i}.md"]
    assert hits(vault, index, "numbatlater") == ["Later.md"]
    ledger.record("concurrency", "notes saved while `index --rebuild` runs, after its scan",
                  "in the swapped-in index when the rebuild reports done (it syncs once more after the swap)")


def test_a_server_keeps_notes_saved_during_a_rebuild_beside_it(tmp_path, ledger, monkeypatch):
    """The race: the rebuild scanned the vault; a note saved then reaches the
    server's watcher, which syncs it into the old index; the rebuild swaps
    in its index without it. The server must find it again at once, not at
    the next full rescan (an hour away here), even when the rebuild process
    dies right after the swap."""
    from indexer import faults
    from vault_search import Index

    vault, index, _ = prepared(tmp_path)
    proc, info = start_server(vault, index)   # --interval 60: no rescan within the test
    try:
        port = info["port"]
        words, progress = notes_arrive_after_the_scan(vault, seen=lambda w: served_paths(port, w, mode="fts"))
        with Index.open(vault, index, rebuild=True) as idx:
            idx.sync(progress=progress)
        wait_for(lambda: all_served(port, words), timeout=5)

        # Once more, the rebuild killed (here: interrupted) between its swap and its own catch-up sync:
        # the server's watcher notices the new file and syncs the whole vault.
        for i in range(3):
            (vault / f"Inbox/during-{i}.md").unlink()
        wait_for(lambda: not any(served_paths(port, w, mode="fts") for w in words), timeout=10)
        words, progress = notes_arrive_after_the_scan(vault, seen=lambda w: served_paths(port, w, mode="fts"))
        monkeypatch.setenv(faults.ENV, "swapped=interrupt")
        faults.reset()
        with Index.open(vault, index, rebuild=True) as idx, pytest.raises(KeyboardInterrupt):
            idx.sync(progress=progress)
        monkeypatch.delenv(faults.ENV)
        assert not (index / "rebuild").exists()
        wait_for(lambda: all_served(port, words), timeout=5)
    finally:
        stop(proc)
    ledger.record("concurrency", "notes saved during `index --rebuild` beside `serve` (taken into the old index, "
                  "then the swap)", "searchable through the server within seconds of the swap, also when the "
                  "rebuild dies right after it", tries=2)


def other_vault(tmp_path):
    other = tmp_path / "other-vault"
    write(other / "Alien.md", "# Alien\n\nxenolithalien only in the other vault\n")
    return other


def taken_over(other, index):
    """The rebuild for the other vault goes ahead and its notes are searched."""
    r = run(other, index, "index", "--rebuild", "--no-embed")
    assert r.returncode == 0, r.stderr
    assert hits(other, index, "xenolithalien") == ["Alien.md"]


def start_watch(vault, index):
    proc = subprocess.Popen([str(CLI), "--vault", str(vault), "--index-dir", str(index), "watch",
                             "--interval", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()   # "watching ..." once serve.lock is held and the index open
    assert line.startswith("watching"), line + proc.stderr.read()
    return proc


@pytest.mark.parametrize("resident", ["serve", "watch"])
def test_a_rebuild_for_another_vault_is_refused_while_the_index_is_served(tmp_path, ledger, resident):
    vault, index, before = prepared(tmp_path)
    other = other_vault(tmp_path)
    proc = start_server(vault, index)[0] if resident == "serve" else start_watch(vault, index)
    try:
        r = run(other, index, "index", "--rebuild", "--no-embed")
        assert r.returncode == 1, r
        assert r.stderr.count("\n") == 1, r.stderr
        assert f"in use by `vault-search {resident}` (pid {proc.pid}) for the vault {vault}" in r.stderr, r.stderr
        assert "stop it first, or use another --index-dir" in r.stderr, r.stderr
        assert not (index / "rebuild").exists()
        with sqlite3.connect(index / "index.db") as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'vault'").fetchone() == (str(vault),)
        assert proc.poll() is None   # still serving its own vault
    finally:
        stop(proc)
    # Stopped, the folder may be handed over: the rebuild replaces the other vault's index.
    taken_over(other, index)
    ledger.record("concurrency", f"`index --rebuild` of another vault into the index a `{resident}` uses",
                  "refused in one line (stop it first, or another --index-dir); the served index is untouched")


def test_a_rebuild_for_another_vault_is_refused_while_an_mcp_session_keeps_the_index(tmp_path, ledger):
    import asyncio

    from mcp import Client, StdioServerParameters

    vault, index, _ = prepared(tmp_path)
    other = other_vault(tmp_path)
    params = StdioServerParameters(command=str(CLI), args=["--vault", str(vault), "--index-dir", str(index), "mcp"])

    async def session():
        async with Client(params, read_timeout_seconds=60) as client:
            r = run(other, index, "index", "--rebuild", "--no-embed")
            assert r.returncode == 1 and r.stderr.count("\n") == 1, r
            assert "in use by `vault-search mcp` (pid " in r.stderr and f"for the vault {vault}" in r.stderr, r.stderr
            assert not (index / "rebuild").exists()
            found = await client.call_tool("search", {"query": "numbatlater", "mode": "fts"})
            assert [h["path"] for h in found.structured_content["results"]] == ["Later.md"], found

    asyncio.run(session())
    assert not list(index.glob("mcp.*.lock"))   # the session's lock file goes with it
    taken_over(other, index)
    ledger.record("concurrency", "`index --rebuild` of another vault into the index an `mcp` session uses",
                  "refused in one line, as under `serve` and `watch`; the session keeps searching its own vault")


def test_a_rebuild_for_another_vault_sets_the_old_vaults_query_log_aside(tmp_path, ledger):
    vault, index, _ = prepared(tmp_path)
    other = other_vault(tmp_path)
    for folder in (vault, other):
        write(folder / ".vault-search.toml", "log_queries = true\n")
    assert run(vault, index, "search", "secretquerywordofvaulta", "--mode", "fts", "--no-server").returncode == 0
    r = run(vault, index, "log", "--json")
    assert [e["query"] for e in json.loads(r.stdout)["entries"]] == ["secretquerywordofvaulta"], r

    assert run(other, index, "index", "--rebuild", "--no-embed").returncode == 0
    r = run(other, index, "log", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["entries"] == [], r
    assert not (index / "queries.db").exists()
    assert len([p for p in index.glob("queries.db.other-vault-*") if not p.name.endswith(("-wal", "-shm"))]) == 1
    # A rebuild of the same vault keeps its own log.
    assert run(other, index, "search", "xenolithalien", "--mode", "fts", "--no-server").returncode == 0
    assert run(other, index, "index", "--rebuild", "--no-embed").returncode == 0
    r = run(other, index, "log", "--json")
    assert [e["query"] for e in json.loads(r.stdout)["entries"]] == ["xenolithalien"], r
    ledger.record("concurrency", "`index --rebuild` of another vault into an index folder with a query log",
                  "the old vault's log is set aside (queries.db.other-vault-<time>): its searches never show "
                  "in the new vault's `log`; a rebuild of the same vault keeps its log")


@pytest.mark.parametrize("error", [OSError(13, "Permission denied"), KeyboardInterrupt()])
def test_a_rebuild_whose_query_log_cannot_be_set_aside_leaves_the_old_index(tmp_path, monkeypatch, error):
    """An error while the old vault's log is set aside (before anything is
    swapped): the old index and its log stay, the rebuild's lock is released,
    and the next rebuild goes through."""
    import os

    from indexer.errors import VaultSearchError
    from vault_search import Index

    vault, index, _ = prepared(tmp_path)
    other = other_vault(tmp_path)
    write(vault / ".vault-search.toml", "log_queries = true\n")
    assert run(vault, index, "search", "secretquerywordofvaulta", "--mode", "fts", "--no-server").returncode == 0
    replace = os.replace

    def failing(src, dst, *args, **kwargs):
        if str(src).endswith("queries.db"):
            raise error
        return replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing)
    expected = VaultSearchError if isinstance(error, OSError) else KeyboardInterrupt
    with Index.open(other, index, rebuild=True) as idx, pytest.raises(expected) as raised:
        idx.sync(embed=False)
    monkeypatch.setattr(os, "replace", replace)
    assert expected is KeyboardInterrupt or "cannot set aside the other vault's query log" in str(raised.value)
    assert not (index / "rebuild").exists()
    with sqlite3.connect(index / "index.db") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'vault'").fetchone() == (str(vault),)
    assert hits(vault, index, "数据库") and not hits(vault, index, "xenolithalien")
    r = run(vault, index, "log", "--json")
    assert "secretquerywordofvaulta" in [e["query"] for e in json.loads(r.stdout)["entries"]], r   # its log stays
    taken_over(other, index)   # the lock was released: the next rebuild goes through
    assert len([p for p in index.glob("queries.db.other-vault-*") if not p.name.endswith(("-wal", "-shm"))]) == 1


def test_a_rebuild_with_another_model_beside_serve_is_searched_by_meaning_with_it(tmp_path, ledger):
    """The server's reader shares the watcher's embedder; after a rebuild
    with another model it must embed queries with that model (it kept the
    old one and answered every vector and hybrid search with an error)."""
    vault, index, _ = prepared(tmp_path)   # hash:64
    proc, info = start_server(vault, index)
    port = info["port"]

    def ask(mode, query="numbatlater"):
        return http_search(port, query, mode=mode)

    try:
        assert ask("vector")[0] == 200
        r = run(vault, index, "index", "--rebuild", "--model", "hash:32")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: ask("fts")[1]["results"] and ask("vector")[0] == 200, timeout=10)
        status, data = ask("vector")
        assert status == 200 and data["results"], data
        status, data = ask("hybrid")
        assert status == 200 and data["results"][0]["path"] == "Later.md", data
        write(vault / "Inbox/afterwards.md", "# Afterwards\n\nquokkaafter written after the rebuild\n")
        wait_for(lambda: (ask("hybrid", "quokkaafter")[1].get("results") or [{}])[0].get("path")
                 == "Inbox/afterwards.md", timeout=10)
    finally:
        stop(proc)
    import numpy as np

    matrix = np.load(index / "vectors.npy", mmap_mode="r")
    assert matrix.shape[1] == 32 and matrix.shape[0] == len(np.load(index / "vectors.ids.npy"))
    ledger.record("concurrency", "`index --rebuild --model OTHER` beside `serve`",
                  "the server's vector and hybrid searches use the new model at once (they failed until a "
                  "restart); the watcher embeds new notes with it")


def test_a_stale_server_file_whose_pid_was_reused_does_not_refuse_a_rebuild(tmp_path, ledger):
    """No serve.lock (a server from before it existed): server.json counts
    only while its pid lives and its port takes a connection."""
    import os
    import socket

    vault, index, _ = prepared(tmp_path)
    other = other_vault(tmp_path)
    assert not (index / "serve.lock").exists()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        # A live pid (this test's) at a port that answers: a server from before the lock.
        (index / "server.json").write_text(json.dumps({"pid": os.getpid(), "host": "127.0.0.1", "port": port}))
        r = run(other, index, "index", "--rebuild", "--no-embed")
        assert r.returncode == 1 and f"in use by `vault-search serve` (pid {os.getpid()})" in r.stderr, r
    # The same live pid (reused by another program), its port closed: stale.
    taken_over(other, index)
    ledger.record("concurrency", "a server.json left by a killed server whose pid now belongs to another program",
                  "ignored (its port takes no connection): `index --rebuild` of another vault goes ahead")


def test_a_rebuild_for_another_vault_is_not_swapped_in_under_a_server_started_meanwhile(tmp_path, ledger):
    from indexer.errors import VaultMismatchError
    from vault_search import Index

    vault, index, _ = prepared(tmp_path)
    other = other_vault(tmp_path)
    servers = []

    def start_serving(done, total):   # the rebuild has scanned the other vault; nothing is swapped yet
        if not servers:
            servers.append(start_server(vault, index))

    try:
        with Index.open(other, index, rebuild=True) as idx, pytest.raises(VaultMismatchError) as refused:
            idx.sync(progress=start_serving, embed=False)
        proc, info = servers[0]
        assert str(refused.value) == (
            f"the index at {index} is in use by `vault-search serve` (pid {proc.pid}) for the vault {vault}; "
            f"a rebuild for {other} would replace that vault's index: stop it first, or use another --index-dir")
        assert not (index / "rebuild").exists()
        assert served_paths(info["port"], "numbatlater", mode="fts") == ["Later.md"]
        assert not served_paths(info["port"], "xenolithalien", mode="fts")
        assert proc.poll() is None
    finally:
        for proc, _ in servers:
            stop(proc)
    assert hits(vault, index, "数据库") and not hits(vault, index, "xenolithalien")
    ledger.record("concurrency", "`serve` of a vault started while `index --rebuild` of another vault builds "
                  "into its index", "the rebuild is discarded at the swap, in one line; the server keeps its index")


def test_the_vault_mismatch_error_never_advises_replacing_a_served_index(tmp_path, ledger):
    vault, index, _ = prepared(tmp_path)
    other = other_vault(tmp_path)
    r = run(other, index, "index", "--no-embed")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r
    assert r.stderr.strip().endswith(
        f"the index at {index} belongs to the vault {vault}, not {other}; use another --index-dir (or unset "
        f"VAULT_SEARCH_INDEX_DIR) for a separate index of this vault, or `vault-search index --rebuild` to "
        f"replace the index of {vault} with this vault's"), r.stderr
    proc, _ = start_server(vault, index)
    try:
        r = run(other, index, "index", "--no-embed")
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r
        assert "--rebuild" not in r.stderr, r.stderr
        assert r.stderr.strip().endswith(
            f"the index at {index} belongs to the vault {vault}, not {other}, and `vault-search serve` "
            f"(pid {proc.pid}) uses it; use another --index-dir (or unset VAULT_SEARCH_INDEX_DIR) for a "
            "separate index of this vault"), r.stderr
    finally:
        stop(proc)
    ledger.record("concurrency", "the wrong vault's index named with --index-dir",
                  "refused in one line; it advises another --index-dir, and `--rebuild` only with what it "
                  "replaces and never while a server uses that index")


@pytest.mark.parametrize("action, code", [("oserror", 1), ("interrupt", 130)])
def test_an_error_while_a_rebuild_takes_the_live_index_vectors_and_the_next_rebuild(tmp_path, monkeypatch, action,
                                                                                   code):
    """With the embedding cache empty, a rebuild's first vectors come from the
    index it replaces (indexer/vectors.py ``_take_donated``): an OSError or a
    Ctrl-C while they are stored discards the rebuild, leaves the old index
    as it was, releases the rebuild lock, and the next rebuild takes them all."""
    vault, index, before = prepared(tmp_path)
    monkeypatch.setenv("VAULT_SEARCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    r = run(vault, index, "index", "--rebuild", fault=f"txn:embeddings={action}")
    assert r.returncode == code, r
    assert snapshot(index) == before and not (index / "rebuild").exists()
    assert hits(vault, index, "数据库") and not hits(vault, index, "numbatlater")
    done = run(vault, index, "index", "--rebuild", "--json")
    assert done.returncode == 0, done.stderr
    embedding = json.loads(done.stdout)["embedding"]
    assert embedding["reused"] > 20 and embedding["embedded"] == 1 and embedding["cached"] == 0   # Later.md is new
    assert hits(vault, index, "numbatlater") == ["Later.md"]
