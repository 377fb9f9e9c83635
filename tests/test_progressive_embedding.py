"""Meaning search during the first `index` (issue 37, item 1): the embedding
pass publishes the matrix as it grows, newest notes first; `status`, a
search's warning and the page's /status tell one count; the words say when
an index run is embedding right now; a fault inside a publish loses nothing."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from http.client import HTTPConnection

import pytest
from conftest import run_cli, start_server, write

from indexer.embed import HashEmbedder
from vault_search import Index

NOTES = 400   # one chunk each: more than one publish's worth (vectors.PUBLISH_CHUNKS)
NEWEST = "Fresh/Quokka.md"


def big_vault(vault):
    """The sample vault and NOTES more notes, the newest one about quokkas."""
    for i in range(NOTES):
        path = write(vault / "bulk" / f"n{i:03}.md", f"# Note {i}\n\nfiller words item{i} about ledgers {i}\n")
        os.utime(path, (1_600_000_000 + i, 1_600_000_000 + i))
    write(vault / NEWEST, "# Quokka\n\nthe quokka smiles on rottnest island\n")
    return vault


class GatedEmbedder(HashEmbedder):
    """hash:64 (the model a search process loads for this index), paused
    before the batch that would pass each of ``stops`` passages, until the
    test lets it go: an `index` run caught in the middle of its pass."""

    batch_size = 16

    def __init__(self, stops: list[int]):
        super().__init__(64)
        self.stops = list(stops)
        self.paused = threading.Event()
        self.go = threading.Event()

    def passage_batch(self, model, texts):
        if self.stops and self.calls >= self.stops[0]:
            self.stops.pop(0)
            self.paused.set()
            assert self.go.wait(120), "the test never let the pass go on"
            self.go.clear()
        return super().passage_batch(model, texts)


def status(cli) -> dict:
    r = cli("status", "--json")
    assert r.code == 0, r.err
    return r.json()


def page_status(vault, index_dir) -> dict:
    server, info = start_server(vault, index_dir, "--no-watch")
    try:
        conn = HTTPConnection("127.0.0.1", info["port"], timeout=30)
        conn.request("GET", "/status")
        return json.loads(conn.getresponse().read())
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_a_search_during_the_first_index_gets_vectors_before_the_pass_ends(cli, vault, index_dir):
    big_vault(vault)
    embedder = GatedEmbedder([0, 300])
    failed: list[BaseException] = []
    keyword_pass, resume = threading.Event(), threading.Event()

    def progress(done, total):   # the keyword pass's first note: paused there once
        if not keyword_pass.is_set():
            keyword_pass.set()
            assert resume.wait(120), "the test never let the keyword pass go on"

    def index_run():
        try:
            with Index.open(vault, index_dir, create=True, embedder=embedder) as idx:
                idx.sync(progress=progress)
        except BaseException as exc:   # re-raised by the test below
            failed.append(exc)
            keyword_pass.set()
            embedder.paused.set()

    run = threading.Thread(target=index_run)
    run.start()
    try:
        # 0. The keyword pass runs: a search by meaning is told the run will embed, not to run one.
        assert keyword_pass.wait(120) and not failed, failed
        assert status(cli)["embedding_now"]
        early = cli("search", "quokka", "--mode", "vector", "--json", "--no-server")
        assert early.code != 0 and "being embedded now" in early.err and "run `vault-search index`" not in early.err
        resume.set()

        # 1. The keyword index is done, the pass has begun, nothing is published yet.
        assert embedder.paused.wait(120) and not failed, failed
        embedder.paused.clear()
        first = status(cli)
        chunks = first["chunks"]
        assert first["embedding_now"] and (first["embedded_chunks"], first["waiting_chunks"]) == (0, chunks)
        keyword = cli("search", "quokka", "--json", "--no-server").json()
        assert keyword["mode"] == "fts" and keyword["results"][0]["path"] == NEWEST
        assert (f"being embedded now: 0 of {chunks} chunks so far; keyword results until the first are published"
                in keyword["warnings"])
        vector = cli("search", "quokka", "--mode", "vector", "--json", "--no-server")
        assert vector.code != 0 and "being embedded now" in vector.err and "run `vault-search index`" not in vector.err

        # 2. Paused again after 300 passages: what was published is searched by meaning.
        embedder.go.set()
        assert embedder.paused.wait(120) and not failed, failed
        embedder.paused.clear()
        middle = status(cli)
        embedded = middle["embedded_chunks"]
        assert middle["embedding_now"] and 0 < embedded < chunks and middle["waiting_chunks"] == chunks - embedded
        assert middle["vectors"] == f"ok ({embedded} rows)"
        hybrid = cli("search", "quokka", "--json", "--explain", "--no-server").json()
        assert hybrid["mode"] == "hybrid"
        assert f"being embedded now: {embedded} of {chunks} chunks so far; results use those" in hybrid["warnings"]
        assert hybrid["explain"]["ranks"][0]["vector_rank"] is not None   # the newest note has its vector
        by_meaning = cli("search", "smiles on rottnest", "--mode", "vector", "--json", "--no-server").json()
        assert by_meaning["results"][0]["path"] == NEWEST and by_meaning["results"][0]["match"] == "vector"
        fts = cli("search", "quokka", "--mode", "fts", "--json", "--no-server").json()
        assert not [w for w in fts["warnings"] if "vector" in w or "embedded" in w]
        text = cli("status")
        assert f"{embedded} chunks, {chunks - embedded} waiting (being embedded now)" in text.out
        page = page_status(vault, index_dir)
        assert (page["embedded_chunks"], page["waiting_chunks"], page["embedding_now"]) == (
            embedded, chunks - embedded, True)
    finally:
        resume.set()
        embedder.go.set()
        run.join(120)
    assert not failed, failed

    # 3. The pass is over: everything published, nothing said about waiting.
    done = status(cli)
    assert (done["embedded_chunks"], done["waiting_chunks"], done["embedding_now"]) == (chunks, 0, False)
    after = cli("search", "quokka", "--json", "--no-server").json()
    assert not [w for w in after["warnings"] if "embedded" in w or "wait" in w]


@pytest.mark.parametrize("action", ["oserror", "interrupt", "kill"])
def test_a_fault_inside_a_publish_loses_no_vector_and_the_next_run_goes_on(vault, index_dir, action, ledger):
    """The first publish during the pass (after FIRST_BATCH vectors) fails
    after its files were renamed into place and before the db recorded them."""
    big_vault(vault)
    r = run_cli(vault, index_dir, "index", "--model", "hash:64", fault=f"publish-batch={action}")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-800:]
    conn = sqlite3.connect(index_dir / "index.db")
    stored = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    texts = conn.execute("SELECT count(DISTINCT hash) FROM chunks").fetchone()[0]
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert stored >= 4   # the batches committed before the fault (FIRST_BATCH, the newest notes)
    after = json.loads(run_cli(vault, index_dir, "status", "--json").stdout)
    assert not after["embedding_now"]
    search = run_cli(vault, index_dir, "search", "smiles on rottnest", "--mode", "vector", "--json", "--no-server")
    if action == "kill":   # killed before the db recorded any matrix: vector search has none yet
        assert after["embedded_chunks"] == 0 and after["vectors"] == "no vectors recorded in the index"
        assert search.returncode != 0 and "run `vault-search index`" in search.stderr
    else:   # the pass's own last publish recorded what was embedded
        assert after["embedded_chunks"] == stored and after["vectors"] == f"ok ({stored} rows)"
        assert search.returncode == 0 and json.loads(search.stdout)["results"][0]["path"] == NEWEST
    again = run_cli(vault, index_dir, "index", "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)["embedding"]
    assert report["embedded"] == texts - stored and report["waiting"] == 0   # nothing embedded twice
    final = json.loads(run_cli(vault, index_dir, "status", "--json").stdout)
    assert (final["embedded_chunks"], final["vectors"]) == (final["chunks"], f"ok ({final['chunks']} rows)")
    ledger.record("crash", "OSError, KeyboardInterrupt or SIGKILL inside a publish during the embedding pass",
                  "no committed vector lost, no run shown in progress, unrecorded files never served; "
                  "the next index embeds only what waits")


def test_a_killed_run_is_not_embedding_while_another_writer_holds_the_lock(tmp_path):
    """A SIGKILLed pass leaves its record; a later keyword-only run holds the
    lock: the record names a process that is gone, so nothing embeds now."""
    import fcntl
    import subprocess
    import sys

    from indexer.store import EMBEDDING_RUN, connect, embedding_run, set_meta

    (tmp_path / "write.lock").touch()
    conn = connect(tmp_path / "index.db", create=True)
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = os.open(tmp_path / "write.lock", os.O_RDWR)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        set_meta(conn, EMBEDDING_RUN, json.dumps({"pid": int(gone.stdout), "since": 0}))
        assert embedding_run(conn, tmp_path) is None
        set_meta(conn, EMBEDDING_RUN, json.dumps({"pid": os.getpid(), "since": 0}))
        assert embedding_run(conn, tmp_path) == {"pid": os.getpid(), "since": 0}
    finally:
        os.close(lock)
    assert embedding_run(conn, tmp_path) is None      # the lock free: no run
